"""``lab bench``'s figures from its timed runs: per method, the theory beside the measurement.

:func:`summarize` turns the runs of :func:`lab.bench.run.run_bench` (its ``Run`` records, duck-typed
here so this module does not import the schedule) into a :class:`~lab.bench.results.BenchResult`:
per method its tokens/s over repeats, token agreement with the lab's target-only loop and, for a
speculative method, Leviathan et al. (2023)'s figures (p = target, q = draft): alpha, tau, the
cost ratio c from time and from FLOPs, Theorem 3.8's speedup (which assumes a verify pass costs
one target step), the speedup predicted from the measured draft step and verify pass times (no
such assumption: the loop's ceiling), efficiency (measured / that), overhead (time outside forward
passes) and breakeven alpha. Rates are derived from the runs' raw counts and times.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from lab.bench.phases import group_speedups, repeat_spread
from lab.bench.results import (BASELINE, BenchResult, Comparison, MethodFigures, RunRecord, SpeculativeFigures,
                               Spread)
from lab.numbers import number_text
from lab.speculative.per_pass import merge_pass_shapes
from lab.speculative.results import SpeculativeResult
from lab.speculative.theory import breakeven_alpha, expected_speedup, expected_tokens_per_round, flops_per_token


def _cost_ratio_flops(target: Any, draft: Any, context: int) -> float:
    return draft.facts().flops_per_token(context) / flops_per_token(target.config, context)


def _ratio(num: float, den: float) -> float:
    """``num / den``, NaN when ``den`` is 0: a time per pass over no pass is not measured, not zero."""
    return num / den if den else float("nan")


def _alpha(specs: Sequence[SpeculativeResult]) -> float:
    """Pooled alpha (accepted / tested drafts) of some runs; NaN when none was tested."""
    tested = sum(s.n_drafted_tested for s in specs)
    return sum(s.n_accepted for s in specs) / tested if tested else float("nan")


@dataclass(frozen=True)
class _Baseline:
    """What every speedup divides by: the lab's target-only loop's runs.

    ``step_s``: its mean decode step (seconds, weighted by steps); ``decode_tokens_per_s``: its
    tokens/s after the prefill; ``tokens``: its tokens per (repeat, prompt), the greedy reference.
    """

    step_s: float
    decode_tokens_per_s: float
    tokens: dict[tuple[int, int], list[int]]

    @classmethod
    def of(cls, runs: Sequence[Any]) -> _Baseline:
        steps = [max(1, r.n_tokens - 1) for r in runs]
        return cls(step_s=sum(r.target_step_s * n for r, n in zip(runs, steps)) / sum(steps),
                   decode_tokens_per_s=sum(r.n_tokens - 1 for r in runs) / sum(r.decode_time_s for r in runs),
                   tokens={(r.repeat, r.prompt): r.tokens for r in runs})


def summarize(target: Any, draft: Any, prompts: Sequence[torch.Tensor], config: Any, runs: Sequence[Any],
              assisted_errors: dict[str, str]) -> BenchResult:
    """Aggregate raw runs into per-method figures, theory and the comparisons.

    Args:
        target / draft: As in :func:`run_bench` (the FLOP cost ratio reads them).
        prompts: The prompts' ids (their mean length sets the FLOP context).
        config: The bench's configuration.
        runs: The lab's timed runs (the baseline's among them).
        assisted_errors: ``{method: error}`` for the methods transformers refused.

    Returns:
        The :class:`~lab.bench.results.BenchResult` (``machine_load`` and ``peer`` unset).
    """
    by = {n: [r for r in runs if r.method == n] for n in dict.fromkeys(r.method for r in runs)}
    base = _Baseline.of(by[BASELINE])
    mean_prompt = sum(p.shape[1] for p in prompts) / len(prompts)
    context = int(mean_prompt + config.max_new_tokens / 2)
    c_flops_draft = _cost_ratio_flops(target, draft, context)
    records = tuple(RunRecord(**{f.name: getattr(r, f.name) for f in dataclasses.fields(RunRecord)}) for r in runs)
    raw = [r.as_dict() for r in records]
    spread = repeat_spread(raw, BASELINE)
    methods = {name: _method_figures(name, rs, config, base, spread[name], c_flops_draft)
               for name, rs in by.items()}
    return BenchResult(config=config, draft=draft.name, mean_prompt_tokens=mean_prompt, flops_context=context,
                       target_flops_per_token=flops_per_token(target.config, context), target_step_s=base.step_s,
                       methods=methods, comparisons=_comparisons(config, methods), assisted_errors=assisted_errors,
                       by_group=group_speedups(raw, BASELINE), runs=records)


def _method_figures(name: str, runs: Sequence[Any], config: Any, base: _Baseline,
                    spread: dict[str, dict[str, float]], c_flops_draft: float) -> MethodFigures:
    """One method's figures: throughput, token agreement, per-repeat spread, draft passes and,
    for a speculative method, :func:`_speculative_figures` (with alpha's spread over repeats)."""
    per_repeat = {figure: Spread(**s) for figure, s in spread.items()}
    passes = [r.draft_passes for r in runs if r.draft_passes]
    specs = [r.spec for r in runs if r.spec is not None]
    speculative = None
    if specs:
        c_flops = 0.0 if name.startswith("prompt-lookup") else c_flops_draft  # a lookup draft has no model
        speculative = _speculative_figures(specs, base, c_flops)
        per_repeat["alpha"] = Spread.of([_alpha([r.spec for r in runs if r.repeat == rep and r.spec is not None])
                                         for rep in range(config.repeats)])
    return MethodFigures(
        tokens_per_s=per_repeat["e2e_tokens_per_s"], n_runs=len(runs),
        n_tokens=sum(r.n_tokens for r in runs),
        # sampling mode: methods draw differently from the same seed, so no comparison (None)
        same_tokens_as_lab_target_loop=(all(r.tokens == base.tokens.get((r.repeat, r.prompt)) for r in runs)
                                        if config.sampling.greedy else None),
        per_repeat=per_repeat,
        draft_passes=merge_pass_shapes(passes) if passes else None,  # which dtype each pass shape ran in, its cost
        speculative=speculative)


def _speculative_figures(specs: list[SpeculativeResult], base: _Baseline, c_flops: float) -> SpeculativeFigures:
    """A speculative method's pooled figures, Leviathan et al. (2023)'s predictions and the
    prediction from its own measured step times (the loop's ceiling).

    A figure with nothing measured under it is NaN, never 0: when every round of every run ended in
    the fused first pass (which is the prefill), there is no verify pass to time, so ``verify_s``,
    the verify pass over a target step and the prediction built on it (and the efficiency) are NaN.
    """
    alpha = _alpha(specs)
    n_rounds = sum(len(s.rounds) for s in specs)
    n_tokens = sum(len(s.tokens) for s in specs)
    draft_fw = sum(r.n_draft_forwards for s in specs for r in s.rounds)
    draft_s = sum(s.draft_time_s for s in specs)
    decode_s = sum(s.decode_time_s for s in specs)
    gamma, t_step = specs[0].gamma, base.step_s
    t_draft = draft_s / draft_fw if draft_fw else 0.0
    # the fused first pass is the prefill, not a verify pass
    t_verify = _ratio(sum(s.verify_time_s for s in specs), sum(s.n_verify_passes for s in specs))
    tau = _ratio(n_tokens, n_rounds)
    c_time = t_draft / t_step
    # the tokens of a fused first round came with the prefill's time, not the decode's (like the target alone's first)
    decode_tps = _ratio(sum(s.decode_tokens for s in specs), decode_s)
    measured_speedup = decode_tps / base.decode_tokens_per_s
    # a drafter that chooses per round (the auto draft: no draft, prompt lookup or the model) has no fixed gamma
    chooses = any(r.draft_source for s in specs for r in s.rounds)
    fixed = specs[0].adaptive is None and specs[0].gamma_policy is None and not chooses and not math.isnan(alpha)
    if fixed:
        e_tokens = expected_tokens_per_round(alpha, gamma)
        predicted = _ratio(e_tokens * t_step, gamma * t_draft + t_verify)
    else:  # adaptive or auto: draft length varies, use the measured tokens and draft steps per round
        e_tokens = tau
        predicted = _ratio(tau * t_step, _ratio(draft_fw, n_rounds) * t_draft + t_verify)
    return SpeculativeFigures(
        gamma=gamma, adaptive=specs[0].adaptive, gamma_policy=specs[0].gamma_policy, alpha=alpha, tau=tau,
        n_drafted_tested=sum(s.n_drafted_tested for s in specs), n_accepted=sum(s.n_accepted for s in specs),
        n_rounds=n_rounds,
        accepted_length_histogram=[sum(s.accepted_length_histogram[k] for s in specs) for k in range(gamma + 1)],
        draft_step_s=t_draft, verify_s=t_verify, target_step_s=t_step, verify_over_target_step=t_verify / t_step,
        cost_ratio_time=c_time, cost_ratio_flops=c_flops, decode_tokens_per_s=decode_tps,
        measured_speedup=measured_speedup,
        speedup_theory_flops=expected_speedup(alpha, gamma, c_flops) if fixed else None,
        speedup_theory_time_ratio=expected_speedup(alpha, gamma, c_time) if fixed else None,
        speedup_predicted_from_measured_times=predicted, expected_tokens_per_round=e_tokens,
        efficiency=_ratio(measured_speedup, predicted),
        overhead_fraction=_ratio(sum(s.overhead_time_s for s in specs), decode_s),
        breakeven_alpha_time_ratio=breakeven_alpha(gamma, c_time), breakeven_alpha_flops=breakeven_alpha(gamma, c_flops))


def _comparisons(config: Any, methods: dict[str, MethodFigures]) -> tuple[Comparison, ...]:
    """Each speculative gamma against transformers' assisted generation at that gamma (median
    tokens/s), then each speculative method's measured speedup against its prediction."""
    out = []
    for g in config.gammas:
        ours, theirs = methods.get(f"speculative gamma={g}"), methods.get(f"transformers assisted gamma={g}")
        if ours and theirs:
            ratio = ours.tokens_per_s.median / theirs.tokens_per_s.median
            out.append(Comparison(method=f"speculative gamma={g}", against=f"transformers assisted gamma={g}",
                                  kind="tokens_per_s_ratio", value=ratio,
                                  text=f"speculative gamma={g}: {ratio:.2f}x the tokens/s of transformers' "
                                       f"assisted generation at gamma={g} (medians)"))
    for name, m in methods.items():
        s = m.speculative
        if s is not None:
            out.append(Comparison(method=name, against="speedup predicted from measured times", kind="efficiency",
                                  value=s.efficiency,
                                  text=f"{name}: measured speedup {number_text(s.measured_speedup, '.2f')}x is "
                                       f"{number_text(s.efficiency, '.0%')} of the "
                                       f"{number_text(s.speedup_predicted_from_measured_times, '.2f')}x predicted from "
                                       "its alpha and measured step times"))
    return tuple(out)
