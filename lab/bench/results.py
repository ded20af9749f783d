"""What ``lab bench`` measured: typed records of one run, one method and the whole bench.

:func:`lab.bench.run.run_bench` returns a :class:`BenchResult`, which the renderers
(:mod:`lab.render.bench`), :func:`lab.bench.seed_tables.compare`, :func:`lab.bench.tune.choose` and a
llama.cpp peer's side-by-side read by attribute. Its :meth:`BenchResult.as_dict` is the dict
``report.json`` has always held (the same keys, in the same order) and :meth:`BenchResult.to_json`
the JSON-ready form of it (non-finite floats as None), written only to the report.
Rates here are derived from the raw counts and times the records keep.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from lab.provenance import MachineLoad
from lab.reports import to_jsonable

BASELINE = "target-only (lab loop)"  # the method every speedup divides by


@dataclass(frozen=True)
class Spread:
    """min / median / max of some figure over repeats (NaN for each when no finite value)."""

    min: float
    median: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Spread:
        """The spread of the finite values among ``values`` (None and NaN skipped)."""
        vals = [v for v in values if v is not None and math.isfinite(v)]
        if not vals:
            return cls(float("nan"), float("nan"), float("nan"))
        return cls(min(vals), statistics.median(vals), max(vals))

    def as_dict(self) -> dict[str, float]:
        return {"min": self.min, "median": self.median, "max": self.max}


@dataclass(frozen=True)
class RunRecord:
    """One timed generation as the report keeps it (``runs``); times in seconds.

    ``first_token_s`` / ``n_first``: seconds to the first committed new token(s) and how many
    arrived then (:mod:`lab.bench.phases`); ``seed``: the run's seed in sampling mode, None when greedy.
    """

    method: str
    repeat: int
    prompt: int
    group: str
    n_tokens: int
    time_s: float
    decode_time_s: float | None
    first_token_s: float | None
    n_first: int
    seed: int | None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SpeculativeFigures:
    """A speculative method's figures (Leviathan et al. 2023): p = target, q = draft.

    ``alpha`` pooled accepted / tested drafts; ``tau`` tokens per round; ``*_s`` seconds per
    draft step, verify pass and target step; ``cost_ratio_*`` the draft's cost c over the
    target's, from time or FLOPs; ``speedup_theory_*`` Theorem 3.8 (None for a draft length
    that varies); ``speedup_predicted_from_measured_times`` the loop's ceiling;
    ``efficiency`` measured / predicted; ``overhead_fraction`` share of decode time outside
    forward passes.
    """

    gamma: int
    adaptive: str | None
    gamma_policy: str | None
    alpha: float
    tau: float
    n_drafted_tested: int
    n_accepted: int
    n_rounds: int
    accepted_length_histogram: list[int]
    draft_step_s: float
    verify_s: float
    target_step_s: float
    verify_over_target_step: float
    cost_ratio_time: float
    cost_ratio_flops: float
    decode_tokens_per_s: float
    measured_speedup: float
    speedup_theory_flops: float | None
    speedup_theory_time_ratio: float | None
    speedup_predicted_from_measured_times: float
    expected_tokens_per_round: float
    efficiency: float
    overhead_fraction: float
    breakeven_alpha_time_ratio: float
    breakeven_alpha_flops: float

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class MethodFigures:
    """One method's figures over its runs.

    Attributes:
        tokens_per_s: End-to-end tokens/s per repeat, min / median / max.
        n_runs / n_tokens: Its runs and the tokens they emitted.
        same_tokens_as_lab_target_loop: Greedy: whether every run emitted the baseline's tokens;
            None in sampling mode (not compared).
        per_repeat: ``{figure: Spread}`` over repeats (:func:`lab.bench.phases.repeat_spread`),
            with ``"alpha"`` for a speculative method.
        draft_passes: A model draft's forwards by shape (:func:`lab.speculative.per_pass.merge_pass_shapes`).
        speculative: The speculative figures; None for a method that does not draft.
    """

    tokens_per_s: Spread
    n_runs: int
    n_tokens: int
    same_tokens_as_lab_target_loop: bool | None
    per_repeat: Mapping[str, Spread] = field(default_factory=dict)
    draft_passes: dict[str, Any] | None = None
    speculative: SpeculativeFigures | None = None

    def as_dict(self) -> dict[str, Any]:
        """The flat dict of ``report.json``'s ``methods`` (the speculative figures beside the rest)."""
        out: dict[str, Any] = {"tokens_per_s": self.tokens_per_s.as_dict(), "n_runs": self.n_runs,
                               "n_tokens": self.n_tokens,
                               "same_tokens_as_lab_target_loop": self.same_tokens_as_lab_target_loop,
                               "per_repeat": {k: s.as_dict() for k, s in self.per_repeat.items()}}
        if self.draft_passes is not None:
            out["draft_passes"] = self.draft_passes
        if self.speculative is not None:
            out.update(self.speculative.as_dict())
        return out


@dataclass(frozen=True)
class Comparison:
    """One comparison stated as measured: ``method`` against ``against``, a ``kind`` of ``value``."""

    method: str
    against: str
    kind: str  # "tokens_per_s_ratio" or "efficiency"
    value: float
    text: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class BenchResult:
    """The alternating benchmark's result (:func:`lab.bench.run.run_bench`).

    Attributes:
        config: The :class:`lab.bench.run.BenchConfig` it ran.
        draft: The drafter's name.
        mean_prompt_tokens / flops_context: Mean prompt length, and the context (tokens) the FLOP
            cost ratio is taken at (mean prompt + half the budget).
        target_flops_per_token: The target's FLOPs per token at that context.
        target_step_s: The baseline's mean decode step, seconds.
        methods: ``{name: MethodFigures}`` in schedule order.
        comparisons: Each speculative method against transformers' assisted generation at the
            same gamma, and against its predicted speedup.
        assisted_errors: ``{method: error}`` for assisted methods transformers refused.
        by_group: ``{group: {method: figures}}`` (:func:`lab.bench.phases.group_speedups`).
        runs: Every timed run.
        peer: A llama.cpp peer's report (:mod:`lab.bench.peer`; a dict, as it has no type of its own yet),
            None without one (left out of the dict).
        machine_load: The load log's record (:meth:`lab.machine.LoadLog.record`), None without one.
        sides: ``{label: BenchResult}``: the same methods on another runtime or weights, run in the same
            alternating schedule (``lab bench --also-runtime``) and summarized apart, each against its own
            target alone; empty without one (left out of the dict).
    """

    config: Any
    draft: str
    mean_prompt_tokens: float
    flops_context: int
    target_flops_per_token: float
    target_step_s: float
    methods: Mapping[str, MethodFigures]
    comparisons: tuple[Comparison, ...]
    assisted_errors: Mapping[str, str]
    by_group: Mapping[str, Mapping[str, Mapping[str, float]]]
    runs: tuple[RunRecord, ...]
    peer: dict[str, Any] | None = None
    machine_load: MachineLoad | None = None
    sides: Mapping[str, "BenchResult"] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The report's dict: the keys ``report.json`` holds, in its order (``peer`` only with a peer)."""
        out = {"config": self.config, "draft": self.draft, "mean_prompt_tokens": self.mean_prompt_tokens,
               "flops_context": self.flops_context, "target_flops_per_token": self.target_flops_per_token,
               "target_step_s": self.target_step_s,
               "methods": {name: m.as_dict() for name, m in self.methods.items()},
               "comparisons": [c.as_dict() for c in self.comparisons], "assisted_errors": dict(self.assisted_errors),
               "by_group": self.by_group, "runs": [r.as_dict() for r in self.runs]}
        if self.peer is not None:
            out["peer"] = self.peer
        if self.sides:
            out["sides"] = {label: side.as_dict() for label, side in self.sides.items()}
        out["machine_load"] = self.machine_load
        return out

    def to_json(self) -> dict[str, Any]:
        """:meth:`as_dict`, JSON-ready (:func:`lab.reports.to_jsonable`: non-finite floats as None)."""
        return to_jsonable(self.as_dict())


@dataclass(frozen=True)
class BenchReport:
    """``lab bench``'s ``report.json``: the set-up beside the :class:`BenchResult` (its shape, which the writer checks
    and the page reads: :class:`lab.kinds.bench.Report`).

    Attributes:
        model: The target's provenance (:meth:`lab.models.source.ModelSource.as_dict`).
        draft_spec: The ``--draft`` spec as resolved (the bench's own ``draft``, the drafter's
            name, is what the file's ``draft`` key holds, as it always has).
        prompts: The :class:`lab.bench.prompt_split.PromptSet` it ran.
        torch_threads: Torch's intra-op threads during the run.
        environment: :func:`lab.reports.environment` when the report is written.
        draft_cost: The draft's :class:`lab.speculative.admission.DraftCost`, None without one.
        bench: The result.
        side_models: Per side label (:attr:`BenchResult.sides`), its target's provenance.
    """

    model: dict[str, Any]
    draft_spec: str
    prompts: Any
    torch_threads: int
    environment: dict[str, Any]
    draft_cost: Any
    bench: BenchResult
    side_models: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready report, its keys in the file's order."""
        return to_jsonable({"kind": "bench", "model": self.model, "draft": self.draft_spec,
                            **self.prompts.as_report(), "torch_threads": self.torch_threads,
                            "environment": self.environment, "draft_cost": self.draft_cost,
                            **({"side_models": self.side_models} if self.side_models else {}),
                            **self.bench.to_json()})
