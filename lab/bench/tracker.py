"""``lab bench-tracker``: how much the entropy tracker slows decoding down.

The same decode loop (:func:`lab.tracker.loop.run_decode` on the decode core
:func:`lab.decode.generate`: prefill, then one-token decodes with a KV cache) runs with the
tracker off and on, on the same prompt, for exactly ``max_new_tokens`` tokens (EOS ignored, so
both do the same work). After one warm-up run of each, ``repeats`` pairs run in alternating order
(off-on, on-off, ...) so that drift in machine load hits both arms alike (:func:`time_arms`).
:func:`tracker_report` derives min / median / max wall time per arm, the overhead of the
medians and of the minima (the minimum is the least noise-inflated estimate on a shared machine),
the median of the per-pair ratios, and, separately, the tracker's statistics alone timed on a
logits row of the model's vocabulary size (:func:`time_statistics`: no model, so no noise from
the forward pass). Both arms must produce the same tokens; the report says so.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from lab.bench.results import Spread
from lab.bench.runtime_tune import alternating_order
from lab.kinds.bench_tracker import Report, RunSeconds, Settings, Times
from lab.machine import LoadLog
from lab.provenance import Environment, MachineLoad, ModelSource
from lab.tracker.loop import run_decode
from lab.tracker.results import DecodeSettings
from lab.tracker.stats import StepRecorder

STATISTICS_WARMUP = 10  # untimed calls before the statistics are timed (first-call allocations)


def time_statistics(vocab_size: int, device: Any, top_alternatives: int, do_sample: bool, iterations: int) -> float:
    """Seconds per step of the tracker's statistics alone, on a random logits row ``[1, V]``.

    Args:
        vocab_size: V, the model's vocabulary size.
        device: Where the row lives (the model's device).
        top_alternatives / do_sample: As the tracker records them (:class:`DecodeSettings`).
        iterations: Timed calls (>= 1).
    """
    gen = torch.Generator(device="cpu").manual_seed(0)
    logits = (3.0 * torch.randn(1, vocab_size, generator=gen)).to(device)  # [1, V], realistic spread
    chosen = logits.argmax(dim=-1, keepdim=True)
    recorder = StepRecorder(top_alternatives, do_sample)
    for _ in range(STATISTICS_WARMUP):
        recorder.record(logits, logits, chosen)
    recorder = StepRecorder(top_alternatives, do_sample)
    start = time.perf_counter()
    for _ in range(iterations):
        recorder.record(logits, logits, chosen)
    recorder.finish()  # includes the one device -> host copy
    return (time.perf_counter() - start) / iterations


@dataclass(frozen=True)
class ArmTimes:
    """Wall times of the two arms, seconds, pair by pair; ``identical``: every run emitted the same tokens."""

    off: list[float]
    on: list[float]
    identical: bool


def time_arms(model: Any, input_ids: torch.Tensor, settings: DecodeSettings, repeats: int, load_log: LoadLog,
              progress: Callable[[str], None] = lambda msg: None) -> ArmTimes:
    """Warm up both arms, then time ``repeats`` alternating pairs (off-on, on-off, ...).

    Args:
        model: The model.
        input_ids: int64 ``[1, S]`` prompt ids.
        settings: The decode settings (EOS ignored: every run decodes ``max_new_tokens``).
        repeats: Timed pairs (>= 1).
        load_log: Sampled around every timed run.
        progress: Called with a short description before each timed run.
    """
    def one(record: bool):
        return run_decode(model, input_ids, settings, eos_ids=set(), record=record, seed=0)

    one(False), one(True)
    times: dict[str, list[float]] = {"off": [], "on": []}
    outputs: list[list[int]] = []
    for r in range(repeats):
        for record in (bool(i) for i in alternating_order(2, r)):  # off-on, on-off, ...
            arm = "on" if record else "off"
            progress(f"pair {r + 1}/{repeats}, tracker {arm}")
            with load_log.around(f"tracker {arm}"):
                run_result = one(record)
            times[arm].append(run_result.elapsed_s)
            outputs.append(run_result.new_token_ids)
    return ArmTimes(off=times["off"], on=times["on"], identical=all(o == outputs[0] for o in outputs))


def _pct(on: float, off: float) -> float:
    return (on - off) / off * 100.0


def tracker_report(*, prompt: str, settings: DecodeSettings, repeats: int, prompt_tokens: int, vocab_size: int,
                   model: ModelSource, environment: Environment, arms: ArmTimes, statistics_s: float,
                   torch_threads: int, machine_load: MachineLoad) -> Report:
    """``lab bench-tracker``'s report (:class:`lab.kinds.bench_tracker.Report`, what ``report.json`` holds): the set-up
    and every raw time, with the overheads derived from them.

    Args:
        prompt: The prompt's text.
        settings: The decode settings (EOS ignored: every run decodes ``max_new_tokens``).
        repeats: Timed pairs.
        prompt_tokens, vocab_size: The prompt's length with the chat template, and V.
        model: The model's provenance.
        environment: :func:`lab.reports.environment_record`.
        arms: The timed arms (:func:`time_arms`).
        statistics_s: Seconds per step of the statistics alone (:func:`time_statistics`).
        torch_threads: Torch's intra-op threads.
        machine_load: The load log's record (:meth:`lab.machine.LoadLog.record`).

    Returns:
        The report: min / median / max seconds per arm over the pairs; the overhead of the medians, of the minima
        (the least noise-inflated estimate on a shared machine) and the median of the per-pair ratios, percent; a
        decode step without the tracker, ms; the statistics alone, us per step and percent of that step.
    """
    tokens_per_run = settings.max_new_tokens  # EOS ignored
    off, on = Spread.of(arms.off), Spread.of(arms.on)
    paired = statistics.median([b / a for a, b in zip(arms.off, arms.on)])  # on / off, pair by pair
    return Report(
        prompt=prompt, settings=Settings(**dataclasses.asdict(settings)), repeats=repeats,
        tokens_per_run=tokens_per_run, prompt_tokens=prompt_tokens, vocab_size=vocab_size, model=model,
        environment=environment, times_s=Times(off=arms.off, on=arms.on),
        off_s=RunSeconds(min=off.min, median=off.median, max=off.max),
        on_s=RunSeconds(min=on.min, median=on.median, max=on.max),
        overhead_pct_median=_pct(on.median, off.median), overhead_pct_min=_pct(on.min, off.min),
        overhead_pct_paired_median=(paired - 1.0) * 100.0, per_token_ms_off=off.median / tokens_per_run * 1e3,
        statistics_us_per_step=statistics_s * 1e6,
        statistics_pct_of_decode_step=statistics_s / (off.median / tokens_per_run) * 100.0,
        identical_tokens=arms.identical, torch_threads=torch_threads, machine_load=machine_load)
