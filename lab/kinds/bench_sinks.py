"""``lab bench-sinks``: the streaming sink capture's time and peak memory against plain and eager
prefill (``report.json``; ``bench.json`` before format 1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.kinds import Kind
from lab.provenance import Environment, MachineLoad


@dataclass(frozen=True)
class Comparison:
    """The streaming capture against plain prefill at the longest length measured
    (:func:`lab.bench.sinks.compare_capture`).

    Attributes:
        length: Prompt length, tokens.
        time_ratio: The capture's prefill seconds over plain prefill's (dimensionless, >= 0).
        capture_extra_bytes: Peak resident memory beyond the loaded model during the capture, bytes.
        plain_extra_bytes: The same for plain prefill, bytes.
    """

    length: int
    time_ratio: float
    capture_extra_bytes: int
    plain_extra_bytes: int


@dataclass(frozen=True)
class Report:
    """``report.json`` of ``lab bench-sinks`` past its kind and format (:class:`lab.bench.sinks.SinksBenchReport`).

    Attributes:
        model: The ``--model``.
        environment: The machine, libraries and model (:func:`lab.reports.environment`).
        torch_threads: Torch threads of the run and its workers.
        results: One record per measurement in run order, as its worker wrote it (mode, length, seconds,
            memory in KiB and bytes), or ``{mode, length, error}`` for one that failed.
        comparison: The capture against plain prefill; None when either failed.
        machine_load: The load log's summary (:mod:`lab.machine`).
    """

    model: str
    environment: Environment
    torch_threads: int
    results: list[dict[str, Any]]
    comparison: Comparison | None
    machine_load: MachineLoad


KIND = Kind("bench-sinks", listed=70, commands=("lab.commands.bench_sinks",), page="lab.views.kinds.bench_sinks",
            older_file="bench.json", report=Report)
