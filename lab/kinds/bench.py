"""``lab bench``, ``lab bench-seed-tables``, ``lab bench-tune`` (and ``bench-tune-runtime``): speculative
decoding against target-only and assisted generation, the seed's tables rerun, the set-ups timed here.

A bench folder holds one of four reports, named by its ``report.json``'s ``kind``: :class:`Report` (``bench``),
:class:`TuneReport` (``bench-tune``), :class:`RuntimeTuneReport` (``bench-tune-runtime``) and
:class:`SeedTablesReport` (``bench-seed-tables``); :data:`KIND`'s ``report`` maps each name to its type
(:func:`with_kind` names a report's). A tuning run's and the seed tables' hold whole benches (:class:`Bench`) per
mode or table. Times are seconds, speeds new tokens per
second, speed-ups and ratios dimensionless; a figure that was not finite when measured is ``null`` (None).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from lab.kinds import Kind
from lab.provenance import Environment, MachineLoad, ModelSource
from lab.typed import may_be_absent


@dataclass(frozen=True)
class Spread:
    """min / median / max of a figure over repeats (:class:`lab.bench.results.Spread`), in the figure's unit;
    None where no repeat had a finite value."""

    min: float | None
    median: float | None
    max: float | None


@dataclass(frozen=True, kw_only=True)
class Method:
    """A method that does not draft (the target alone, transformers' generate), over its runs
    (:meth:`lab.bench.results.MethodFigures.as_dict`).

    Attributes:
        tokens_per_s: End-to-end new tokens per second per repeat, min / median / max.
        n_runs: Its timed runs.
        n_tokens: The new tokens they emitted.
        same_tokens_as_lab_target_loop: Greedy: whether every run emitted the baseline's tokens; None in
            sampling mode (not compared).
        per_repeat: ``{figure: Spread}`` over repeats (``e2e_tokens_per_s``, ``e2e_speedup`` ..., ``alpha``).
        draft_passes: A model draft's forwards by shape; absent for a method without one.
    """

    tokens_per_s: Spread
    n_runs: int
    n_tokens: int
    same_tokens_as_lab_target_loop: bool | None
    per_repeat: dict[str, Spread]
    draft_passes: dict[str, Any] | None = may_be_absent()


@dataclass(frozen=True, kw_only=True)
class SpeculativeMethod(Method):
    """A speculative method: :class:`Method`'s figures, then the speculative ones
    (:class:`lab.bench.results.SpeculativeFigures`; Leviathan et al. 2023, p = target, q = draft).

    Attributes:
        gamma: Drafted tokens per round (the largest, for a draft length that varies).
        adaptive: The adaptive stop (``entropy:X`` / ``pmin:X``), None without one.
        gamma_policy: The draft-length policy (``dynamic:START:MAX``), None for a fixed gamma.
        alpha: Pooled accepted / tested drafts (a probability).
        tau: Committed tokens per round.
        n_drafted_tested, n_accepted, n_rounds: The raw counts.
        accepted_length_histogram: Rounds by accepted length (0 .. gamma).
        draft_step_s, verify_s, target_step_s: Seconds per draft step, verify pass and target step.
        verify_over_target_step: Verify pass over target step (dimensionless).
        cost_ratio_time, cost_ratio_flops: The draft's cost c over the target's, from time and from FLOPs.
        decode_tokens_per_s: Decode-loop tokens per second.
        measured_speedup: The decode loop's speed-up over the target's.
        speedup_theory_flops, speedup_theory_time_ratio: Theorem 3.8 at c from FLOPs and from time; None for a
            draft length that varies.
        speedup_predicted_from_measured_times: The loop's ceiling from its measured step times.
        expected_tokens_per_round: Theorem's expected tokens per round at alpha.
        efficiency: Measured over predicted speed-up.
        overhead_fraction: Share of decode time outside forward passes.
        breakeven_alpha_time_ratio, breakeven_alpha_flops: The alpha at which speculation breaks even.
    """

    gamma: int
    adaptive: str | None
    gamma_policy: str | None
    alpha: float | None
    tau: float | None
    n_drafted_tested: int
    n_accepted: int
    n_rounds: int
    accepted_length_histogram: list[int]
    draft_step_s: float | None
    verify_s: float | None
    target_step_s: float | None
    verify_over_target_step: float | None
    cost_ratio_time: float | None
    cost_ratio_flops: float | None
    decode_tokens_per_s: float | None
    measured_speedup: float | None
    speedup_theory_flops: float | None
    speedup_theory_time_ratio: float | None
    speedup_predicted_from_measured_times: float | None
    expected_tokens_per_round: float | None
    efficiency: float | None
    overhead_fraction: float | None
    breakeven_alpha_time_ratio: float | None
    breakeven_alpha_flops: float | None


@dataclass(frozen=True)
class Comparison:
    """One comparison stated as measured (:class:`lab.bench.results.Comparison`).

    Attributes:
        method: The speculative method.
        against: What it is compared with.
        kind: ``tokens_per_s_ratio`` or ``efficiency``.
        value: The ratio (dimensionless); None when not finite.
        text: The comparison in words.
    """

    method: str
    against: str
    kind: str
    value: float | None
    text: str


@dataclass(frozen=True)
class Run:
    """One timed generation (:class:`lab.bench.results.RunRecord`).

    Attributes:
        method, repeat, prompt, group: Which method, repeat (0-based), prompt (0-based) and prompt group.
        n_tokens: New tokens emitted.
        time_s: Wall seconds end to end; decode_time_s after the first new token(s); first_token_s to them.
        n_first: New tokens that arrived at first_token_s.
        seed: The run's seed in sampling mode, None when greedy.
    """

    method: str
    repeat: int
    prompt: int
    group: str
    n_tokens: int
    time_s: float | None
    decode_time_s: float | None
    first_token_s: float | None
    n_first: int
    seed: int | None


@dataclass(frozen=True)
class Sampling:
    """How tokens were drawn (:class:`lab.sampling.SamplingConfig`): temperature (0 = greedy), top-k (None = all),
    top-p (1.0 = all)."""

    temperature: float
    top_k: int | None
    top_p: float


@dataclass(frozen=True)
class Config:
    """The schedule a bench ran (:class:`lab.bench.run.BenchConfig`; its docstring gives each field).

    Attributes:
        gammas: Draft lengths swept.  adaptive: Adaptive stops.  max_new_tokens: New tokens per generation.
        repeats: Timed repeats.  assisted: Whether transformers' assisted generation ran.
        warmup_tokens: Untimed warm-up tokens per method.  dynamic, draft_dtypes, prompt_lookup: The levers.
        methods: The ``--methods`` filter (empty: all).  sampling: How tokens were drawn.  seed: Sampling seed.
        dtype_sweep, no_cache, lab_default: More methods in the schedule.
    """

    gammas: list[int]
    adaptive: list[str]
    max_new_tokens: int
    repeats: int
    assisted: bool
    warmup_tokens: int
    dynamic: list[str]
    draft_dtypes: list[str]
    prompt_lookup: bool
    methods: list[str]
    sampling: Sampling
    seed: int
    dtype_sweep: bool
    no_cache: bool
    lab_default: bool


@dataclass(frozen=True, kw_only=True)
class GroupFigures:
    """One method's pooled figures over one prompt group's runs (:func:`lab.bench.phases.group_speedups`); a figure
    that could not be formed (no phase times, no baseline) is None.

    Attributes:
        e2e_tokens_per_s: New tokens over all time, prefill included, tokens/s.
        decode_tokens_per_s: New tokens after the first over the decode phase's time, tokens/s.
        e2e_speedup, decode_speedup: Those rates over the baseline's in the same group (ratios).
        prefill_phase_s: Mean time before the first new token per run, seconds.
        n_runs: The runs pooled.
    """

    e2e_tokens_per_s: float | None
    decode_tokens_per_s: float | None
    e2e_speedup: float | None
    decode_speedup: float | None
    prefill_phase_s: float | None
    n_runs: int


# The prompt group every run belongs to (by_group's pooled figures over all prompts).
ALL_GROUP = "all"


@dataclass(frozen=True, kw_only=True)
class Bench:
    """One alternating bench's figures (:meth:`lab.bench.results.BenchResult.as_dict`): a side of a bench, a mode
    of a tuning run, a table of the seed's.

    Attributes:
        config: The schedule it ran.
        draft: The drafter's name.
        mean_prompt_tokens: Mean prompt length, tokens.
        flops_context: The context the FLOP cost ratio is taken at, tokens.
        target_flops_per_token: The target's FLOPs per token there.
        target_step_s: The baseline's mean decode step, seconds.
        methods: ``{name: figures}`` in schedule order.
        comparisons: Each speculative method against assisted generation and its prediction.
        assisted_errors: ``{method: error}`` for assisted methods transformers refused.
        by_group: ``{group: {method: GroupFigures}}``: pooled end-to-end and decode-only tokens/s and speed-ups
            over :data:`lab.bench.results.BASELINE`, the group :data:`ALL_GROUP` over every prompt; absent in reports
            written before it.
        runs: Every timed run.
        peer: A llama.cpp peer's report (:mod:`lab.bench.peer`); absent without one.
        machine_load: The load log's summary (:mod:`lab.machine`), None without one.

    A bench's ``sides`` are :class:`Report`'s only: a side, a mode or a table has none of its own.
    """

    config: Config
    draft: str
    mean_prompt_tokens: float | None
    flops_context: int
    target_flops_per_token: float | None
    target_step_s: float | None
    methods: dict[str, SpeculativeMethod | Method]
    comparisons: list[Comparison]
    assisted_errors: dict[str, str]
    by_group: dict[str, dict[str, GroupFigures]] | None = may_be_absent()
    runs: list[Run]
    peer: dict[str, Any] | None = may_be_absent()
    machine_load: MachineLoad | None


@dataclass(frozen=True, kw_only=True)
class Setup:
    """What a bench's and a tuning run's ``report.json`` lead with: the target, the draft, the prompts, the threads.

    Attributes:
        model: The target's provenance (:meth:`lab.models.source.ModelSource.as_dict`: ``model``, ``weights`` ...).
        draft: A bench's: the drafter's name (its :class:`Bench`'s); a tuning run's: the ``--draft`` spec.
        prompts, prompt_groups: The prompts and each one's group.
        humaneval: The ``--humaneval`` spec (``none`` without one).
        grounded: The ``--grounded`` spec; absent without one.
        torch_threads: Torch's intra-op threads.
    """

    model: ModelSource
    draft: str
    prompts: list[str]
    prompt_groups: list[str]
    humaneval: str | None
    grounded: str | None = may_be_absent()
    torch_threads: int


@dataclass(frozen=True, kw_only=True)
class BenchSetup(Setup):
    """:class:`Report`'s set-up: :class:`Setup`'s fields, then these.

    Attributes:
        environment: The machine, libraries and model (:func:`lab.reports.environment`).
        draft_cost: The draft's cost (:class:`lab.speculative.admission.DraftCost`), None without one.
        side_models: Per side label, its target's provenance; absent without sides.
    """

    environment: Environment
    draft_cost: Any
    side_models: dict[str, ModelSource] | None = may_be_absent()


@dataclass(frozen=True, kw_only=True)
class Report(Bench, BenchSetup):
    """``lab bench``'s ``report.json`` past its kind and format (:class:`lab.bench.results.BenchReport`): the set-up
    (:class:`BenchSetup`), then the bench's figures (:class:`Bench`), ``sides`` before its ``machine_load``.

    The fields stand in the file's order as :mod:`dataclasses` lays out bases, from the last: :class:`BenchSetup`'s,
    then :class:`Bench`'s; ``draft``, which :class:`Setup` and :class:`Bench` both declare (the drafter's name), stands
    where :class:`Setup` has it.

    Attributes:
        sides: ``{label: Bench}``: the same methods on another runtime or weights (``--also-runtime``); absent
            without one.
    """

    sides: dict[str, Bench] | None = may_be_absent(before="machine_load")


@dataclass(frozen=True, kw_only=True)
class TuneReport(Setup):
    """``lab bench-tune``'s ``report.json`` past its kind and format (:func:`lab.bench.tune.tune_report`):
    :class:`Setup`'s fields (``draft``: the ``--draft`` spec; the tuning prompts), then these.

    Attributes:
        machine: :func:`lab.tuning.machine_key` (what the tuning file is valid for).
        environment: :func:`lab.reports.environment`.
        configs: ``{"greedy": ..., "sampling": ...}``, the two schedules.
        winner: The chosen set-up (:meth:`lab.speculative.setups.DraftSetup.as_dict`).
        tuning_file: Where the choice goes.
        measured: :func:`lab.bench.tune.choose`'s figures, with ``busy`` per mode.
        greedy, sampling: The two modes' benches.
    """

    machine: dict[str, Any]
    environment: Environment
    configs: dict[str, Config]
    winner: dict[str, Any]
    tuning_file: str
    measured: dict[str, Any]
    greedy: Bench
    sampling: Bench


@dataclass(frozen=True)
class RuntimeTuneReport:
    """``lab bench-tune-runtime``'s ``report.json`` past its kind and format (``lab.commands.bench_tune`` builds it).

    Attributes:
        model: The profile.
        candidates: Per candidate label, its :meth:`lab.models.source.ModelSource.as_dict`.
        torch_threads: Threads of both runtimes.
        max_new_tokens, repeats: The schedule.
        prompts, prompt_groups, humaneval: The tuning prompts (:func:`lab.bench.tune.tune_prompts`).
        environment: :func:`lab.reports.environment`.
        result: The measurements and the choice (:meth:`lab.bench.runtime_tune.RuntimeTuneResult.as_dict`: the runs,
            seconds and tokens, each candidate's tokens/s per repeat and medians, the winner).
        machine: :func:`lab.tuning.runtime_machine_key` of the run (what the tuning file is valid for).
        tuning_file: Where the choice goes (written after the report, so a file that cannot be written keeps it).
    """

    model: str
    candidates: dict[str, dict[str, Any]]
    torch_threads: int
    max_new_tokens: int
    repeats: int
    prompts: list[str]
    prompt_groups: list[str]
    humaneval: str | None
    environment: Environment
    result: dict[str, Any]
    machine: dict[str, Any]
    tuning_file: str | None


@dataclass(frozen=True, kw_only=True)
class SeedTablesReport:
    """``lab bench-seed-tables``' ``report.json`` past its kind and format
    (:class:`lab.bench.seed_tables.SeedTablesReport`).

    Attributes:
        model: The target's provenance.  draft: The ``--draft`` spec.
        passage: The passage and its source (``text``, ``python``, ``source``, ``sha256``).
        prompt: The user message.  prompt_tokens: Its length with the chat template, tokens.
        torch_threads: Torch's intra-op threads.  environment: :func:`lab.reports.environment`.
        configs: ``{"gamma_sweep": ..., "caching": ...}``.
        comparison: :func:`lab.bench.seed_tables.compare`: the measured figures beside the seed's, and its findings.
        gamma_sweep, caching: The two tables' benches.
    """

    model: ModelSource
    draft: str
    passage: dict[str, str]
    prompt: str
    prompt_tokens: int
    torch_threads: int
    environment: Environment
    configs: dict[str, Config]
    comparison: dict[str, Any]
    gamma_sweep: Bench
    caching: Bench


KIND = Kind("bench",
            listed=100,
            commands=("lab.commands.bench", "lab.commands.bench_seed_tables", "lab.commands.bench_tune"),
            page="lab.views.kinds.bench",
            variants=("bench-tune", "bench-tune-runtime", "bench-seed-tables"),
            report={"bench": Report, "bench-tune": TuneReport, "bench-tune-runtime": RuntimeTuneReport,
                    "bench-seed-tables": SeedTablesReport})


def with_kind(report: Any) -> dict[str, Any]:
    """``report`` (one of :data:`KIND`'s report types) as :meth:`lab.reports.ReportDir.write_report` takes it: the
    ``kind`` its type is read as, then its fields in order (values as they are).

    Raises:
        TypeError: ``report`` is none of them.
    """
    name = next((n for n, shape in KIND.report.items() if type(report) is shape), None)
    if name is None:
        raise TypeError(f"a {type(report).__name__} is no report of a bench folder ({', '.join(KIND.report)})")
    return {"kind": name, **{f.name: getattr(report, f.name) for f in fields(report)}}
