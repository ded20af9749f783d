"""``lab stream``: KV-cache eviction and attention sinks, perplexity and acceptance per retention policy.

The report (``report.json``, :class:`Report`) is what :func:`lab.commands.stream.run` writes from
:class:`lab.stream.experiment.StreamResult`; a figure computed from the measured NLLs is null where it came out
NaN or infinite (JSON has neither), hence the ``| None`` of those figures. NLL in nats; perplexity = exp(mean NLL)
(StreamingLLM, Xiao et al. 2023).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.kinds import Kind
from lab.provenance import Environment, ModelSource
from lab.verdicts import null_rejected


@dataclass(frozen=True)
class Text:
    """The text scored: where it came from, its UTF-8 sha256 (hex), its length and its token ids."""

    source: str
    sha256: str
    n_tokens: int
    input_ids: list[int]


@dataclass(frozen=True)
class Settings:
    """The run's :class:`lab.stream.experiment.StreamConfig`, its policies as their specs.

    Attributes:
        n_tokens: Tokens of the text scored.
        chunk_tokens: Targets per chunk (the bootstrap's and the paired test's unit).
        detect_tokens: Tokens the sink detector analyses.
        recompute_every: The recompute oracle scores every N-th target; recompute_batch: its windows per pass.
        acceptance: Whether the acceptance runs were made.
        prompt_tokens, max_new_tokens, gamma: The acceptance runs' prompt (tokens), new tokens, and draft tokens
            per round.
        temperature: Of the sampled acceptance run.
        seed: Of the sampled run and the bootstrap.
        draft: The draft spec; None: the profile's. draft_weights: its linear layers' representation.
        calibration: The sink calibration file given; None: the model's own.
        policies: The retention policies' specs, in run order.
        eval_start: B, the first target of the evaluation region (the largest budget), a position.
    """

    n_tokens: int
    chunk_tokens: int
    detect_tokens: int
    recompute_every: int
    recompute_batch: int
    acceptance: bool
    prompt_tokens: int
    max_new_tokens: int
    gamma: int
    temperature: float
    seed: int
    draft: str | None
    draft_weights: str
    calibration: str | None
    policies: list[str]
    eval_start: int


@dataclass(frozen=True)
class Detection:
    """The sink detector on the first chunk (:class:`lab.stream.detect.Detection`).

    Attributes:
        n_tokens: Length of the chunk analysed, tokens.
        threshold: The threshold on the detector's score.
        calibration_file: Where the threshold was read; None when given.
        flagged: Positions whose score passed it; ranked: the first 32 of them, highest score first.
        score_first_32: The detector's score of the first 32 positions (null where not a number).
    """

    n_tokens: int
    threshold: float
    calibration_file: str | None
    flagged: list[int]
    ranked: list[int]
    score_first_32: list[float | None]


@dataclass(frozen=True)
class PolicyScore:
    """One policy's perplexity over the evaluation region (:func:`lab.stream.experiment.summarize`), in a run
    without a ``dense`` policy.

    Attributes:
        policy, kind: Its spec (``window:252``) and kind (``dense``, ``window``, ``sinks``, ``detected``,
            ``recompute``).
        budget: Keys per query; None for dense.
        ppl, ppl_low, ppl_high: Perplexity over whole chunks and its bootstrap interval.
        n_chunks: Whole chunks scored; last_target: the last target position they cover; n_targets_ppl: targets
            scored in them.
        n_scored: Targets scored in all.
        ppl_all_targets: Perplexity over every target scored.
        wall_s: Wall time of its passes, seconds.
        peak_rss_mb: Peak resident memory during them beyond the RSS before, MB; None where the OS cannot say.
    """

    policy: str
    kind: str
    budget: int | None
    ppl: float | None
    ppl_low: float | None
    ppl_high: float | None
    n_chunks: int
    last_target: int
    n_targets_ppl: int
    n_scored: int
    ppl_all_targets: float | None
    wall_s: float
    peak_rss_mb: float | None


@dataclass(frozen=True)
class PolicyToDense(PolicyScore):
    """A policy's row in a run with a ``dense`` policy: :class:`PolicyScore` and its perplexity over dense's on the
    same targets, with the paired bootstrap interval (ratios)."""

    ratio_to_dense: float | None
    ratio_low: float | None
    ratio_high: float | None


@dataclass(frozen=True)
class PolicyRecovered(PolicyToDense):
    """A ``sinks`` or ``detected`` policy's row in a run with ``dense`` and the ``window`` of its width:
    :class:`PolicyToDense` and the share of window's excess log-perplexity over dense that it wins back (null when
    window has no excess)."""

    window_excess_recovered: float | None


@dataclass(frozen=True)
class PairedTest:
    """One-sided Wilcoxon signed-rank test of ``a > b`` over paired chunk means
    (:func:`lab.stream.analysis.wilcoxon_greater`, which holds NaN where the file holds null).

    Attributes:
        name: What is tested; a, b: the two sides (policy specs).
        n_pairs: Chunks paired; n_nonzero: pairs with a nonzero difference (the test drops ties); n_a_higher: pairs
            where a's NLL is higher (a count, for the reader).
        median_diff: Median of a - b, nats.
        statistic, p_value: ``scipy.stats.wilcoxon``'s rank sum and one-sided p; null when every pair ties.
        alpha: The false-positive rate stated in advance; reject: whether p < alpha.
    """

    name: str
    a: str
    b: str
    n_pairs: int
    n_nonzero: int
    n_a_higher: int
    median_diff: float | None
    statistic: float | None
    p_value: float | None
    alpha: float
    reject: bool

    @property
    def verdict(self) -> str:
        """Supported when the null is rejected, else inconclusive (:func:`lab.verdicts.null_rejected`)."""
        return null_rejected(self.reject)


@dataclass(frozen=True)
class RecomputeCheck:
    """The recompute oracle against ``sinks:4+W`` on the oracle's targets: perplexity ratio with its paired bootstrap
    interval, ``within`` 1 +- ``tolerance`` (stated in advance), on ``n_targets`` targets."""

    recompute: str
    sinks: str
    ratio: float | None
    low: float | None
    high: float | None
    tolerance: float
    within: bool
    n_targets: int


@dataclass(frozen=True)
class MachineState:
    """The machine before or after the run (:func:`lab.stream.experiment.machine_state`): 1, 5 and 15 minute load
    averages (null where the platform has none), CPUs, torch threads, and whether it was busy."""

    load_average: list[float | None]
    cpu_count: int
    torch_threads: int
    busy: bool


@dataclass(frozen=True)
class Benchmark:
    """What the run cost.

    Attributes:
        before, after: The machine around the run; busy: either was.
        scoring_wall_s, detect_wall_s, acceptance_wall_s: Wall times, seconds.
        peak_rss_beyond_model_mb: The largest policy's peak memory beyond the model, MB.
        rss_mb_at_end: Resident memory at the end, MB; None where the OS cannot say.
    """

    before: MachineState
    after: MachineState
    busy: bool
    scoring_wall_s: float
    detect_wall_s: float
    acceptance_wall_s: float
    peak_rss_beyond_model_mb: float
    rss_mb_at_end: float | None


@dataclass(frozen=True)
class Report:
    """``report.json`` of ``lab stream`` past its kind and format.

    Attributes:
        model: The target's record (:meth:`lab.models.source.ModelSource.as_dict`).
        environment: Machine, library versions, threads (:func:`lab.reports.environment`).
        text: The text scored.
        settings: The run's settings.
        detection: The sink detector's result; None when it did not run.
        policies: One row per policy, in run order.
        tests: The pre-stated test and its negative control, per window with its sinks (empty when none pairs).
        recompute_check: The recompute oracle against sinks; None without both.
        acceptance: One record per (policy, mode) of the acceptance runs, as
            :func:`lab.stream.acceptance.measure_acceptance` gives it (raw counts, rounds, the top-1 check).
        benchmark: What the run cost.
    """

    model: ModelSource
    environment: Environment
    text: Text
    settings: Settings
    detection: Detection | None
    policies: list[PolicyRecovered | PolicyToDense | PolicyScore]
    tests: list[PairedTest]
    recompute_check: RecomputeCheck | None
    acceptance: list[dict[str, Any]]
    benchmark: Benchmark


KIND = Kind("stream", listed=120, commands=("lab.commands.stream",), page="lab.views.kinds.stream", report=Report)
