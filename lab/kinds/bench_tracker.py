"""``lab bench-tracker``: the entropy tracker's overhead on decode time."""

from __future__ import annotations

from dataclasses import dataclass

from lab.kinds import Kind
from lab.kinds.entropy import Settings  # the decode settings both arms ran with, as `lab entropy` writes them
from lab.provenance import Environment, MachineLoad, ModelSource


@dataclass(frozen=True)
class Times:
    """Wall time of every timed run, pair by pair (prefill + decode), seconds.

    Attributes:
        off: Runs with the tracker off, seconds.
        on: Runs with the tracker on, seconds.
    """

    off: list[float]
    on: list[float]


@dataclass(frozen=True)
class RunSeconds:
    """One arm's wall time per run over the pairs (:class:`lab.bench.results.Spread`), seconds.

    Attributes:
        min: The fastest run, seconds.
        median: The median run, seconds.
        max: The slowest run, seconds.
    """

    min: float
    median: float
    max: float


@dataclass(frozen=True)
class Report:
    """``report.json`` of ``lab bench-tracker`` past its kind and format: the set-up, every raw time and the overheads
    derived from them (:func:`lab.bench.tracker.tracker_report`).

    Attributes:
        prompt: The prompt's text.
        settings: The decode settings.
        repeats: Timed off/on pairs (after one warm-up pair).
        tokens_per_run: New tokens per run (EOS ignored), tokens.
        prompt_tokens: The prompt's length with the chat template, tokens.
        vocab_size: V, the model's vocabulary size.
        model: The model's provenance (:meth:`lab.models.source.ModelSource.as_dict`).
        environment: The machine, libraries and model (:func:`lab.reports.environment`).
        times_s: Every timed run's wall time, seconds.
        off_s: Tracker off: min / median / max over the pairs, seconds.
        on_s: Tracker on: the same, seconds.
        overhead_pct_median: The tracker's overhead of the median runs, percent.
        overhead_pct_min: Its overhead of the fastest runs, percent.
        overhead_pct_paired_median: The median over pairs of on / off, as an overhead, percent.
        per_token_ms_off: One decode step without the tracker (median run over its tokens), milliseconds.
        statistics_us_per_step: The tracker's statistics alone on one logits row, microseconds per step.
        statistics_pct_of_decode_step: The statistics alone as a share of a decode step without the tracker,
            percent.
        identical_tokens: Whether every run, tracker on or off, emitted the same tokens.
        torch_threads: Torch's intra-op threads.
        machine_load: The load log's summary (:mod:`lab.machine`).
    """

    prompt: str
    settings: Settings
    repeats: int
    tokens_per_run: int
    prompt_tokens: int
    vocab_size: int
    model: ModelSource
    environment: Environment
    times_s: Times
    off_s: RunSeconds
    on_s: RunSeconds
    overhead_pct_median: float
    overhead_pct_min: float
    overhead_pct_paired_median: float
    per_token_ms_off: float
    statistics_us_per_step: float
    statistics_pct_of_decode_step: float
    identical_tokens: bool
    torch_threads: int
    machine_load: MachineLoad


KIND = Kind("bench-tracker", listed=20, commands=("lab.commands.bench_tracker",), report=Report)
