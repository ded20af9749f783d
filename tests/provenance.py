"""A report's provenance (:mod:`lab.provenance`) for reports built by hand, whole as a run writes it: the model record,
the environment and the machine's load, typed (for a report dataclass) and as ``report.json`` holds them."""

from __future__ import annotations

from lab.provenance import Environment, MachineLoad, ModelSource
from lab.typed import to_json

MODEL_SOURCE = ModelSource(model="smollm2", source="HuggingFaceTB/SmolLM2-135M-Instruct", profile="smollm2",
                           device="cpu", dtype="float32", attn_implementation="sdpa")
ENVIRONMENT = Environment(python="3.11.7", platform="Linux-x86_64", machine="x86_64", cpu_count=2,
                          libraries={"lab": "0.1.0", "torch": "2.13.0"}, created="2026-12-05T13:31:22+00:00",
                          peak_rss_bytes=2**30)
MACHINE_LOAD = MachineLoad(rule="busy when the 1-minute load average exceeds the bench's 1 torch thread(s) + 0.5",
                           threads=1, cpu_count=2, busy=False, max_load_1m=0.5, busy_methods=[], per_method={},
                           samples=[])


def model_json(**fields) -> dict:
    """A report's ``model`` record (:class:`lab.provenance.ModelSource`) as report.json holds it: smollm2's unless
    in ``fields``."""
    return {**MODEL_SOURCE.as_dict(), **fields}


def environment_json(**fields) -> dict:
    """A report's ``environment`` (:class:`lab.provenance.Environment`) as report.json holds it."""
    return {**to_json(ENVIRONMENT), **fields}


def machine_load_json(**fields) -> dict:
    """A bench's ``machine_load`` (:class:`lab.provenance.MachineLoad`) as report.json holds it: a quiet machine
    unless in ``fields``."""
    return {**to_json(MACHINE_LOAD), **fields}
