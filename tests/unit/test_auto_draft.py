"""The auto draft (lab.speculative.auto): its cost model, its per-round choice and the loop with it.

The choice is pure arithmetic on planted costs, so each case states the costs and the choice they force;
a planted draft that is nearly always right but costs too much must be refused (the rule's negative
control). The loop with auto is checked greedy-identical to the target alone on tiny models, with each
source forced in turn; its sampling law is in tests/statistical/test_speculative_stats.py.
"""

from __future__ import annotations

import pytest
import torch

from lab.speculative import auto
from lab.speculative.auto import (AUTO_MAX_GAMMA, Acceptance, AutoDraft, CostEstimates, RoundPlan, plan_round)
from lab.speculative.draft_specs import auto_model, check_draft, check_draft_spec, make_draft
from lab.speculative.drafts import PromptLookupDraft, model_draft
from lab.speculative.loop import speculative_generate, target_generate
from lab.speculative.settings import SpeculativeSettings
from tests.support import tiny_llama_untied

pytestmark = pytest.mark.unit

STEP_S = 0.030  # a target step (30 ms), what qwen2.5-coder q4 takes on llama.cpp on 2 cores


def _costs(slope: float, draft: float | None = None) -> CostEstimates:
    """Costs measured exactly on the line ``STEP_S * (1 + slope (m - 1))``, many passes of each length,
    and a draft step of ``draft`` target steps."""
    c = CostEstimates(slope_prior=0.5)
    for m in (1, 2, 3, 5, 9):
        for _ in range(50):
            c.add_verify(m, STEP_S * (1 + slope * (m - 1)))
    if draft is not None:
        for _ in range(50):
            c.add_draft(draft * STEP_S, 1)
    return c


def test_cost_estimates_recover_a_planted_line():
    c = _costs(0.7)
    assert c.step() == pytest.approx(STEP_S)
    assert c.slope() == pytest.approx(0.7 * STEP_S, rel=0.01)  # the prior's 2 pseudo-passes weigh little
    assert c.verify(9) == pytest.approx(STEP_S * (1 + 0.7 * 8), rel=0.01)


def test_cost_estimates_before_longer_passes_use_the_prior_slope():
    c = CostEstimates(slope_prior=0.3)
    for _ in range(5):
        c.add_verify(1, 0.02)
    assert c.slope() == pytest.approx(0.3 * 0.02)
    assert c.draft_step() == pytest.approx(0.5 * 0.02)  # the draft prior, in target steps
    c.add_draft(0.004, 2)
    assert c.draft_step() == pytest.approx(0.002)


def test_cost_estimates_ignore_non_finite_or_negative_times():
    c = CostEstimates(slope_prior=0.3)
    c.add_verify(1, 0.01)
    for bad in (float("nan"), float("inf"), -1.0):
        c.add_verify(1, bad)
        c.add_draft(bad, 1)
        c.add_fill(bad, 4)
    assert c.step() == 0.01 and c.draft_step() == pytest.approx(0.005)


def test_acceptance_is_beta_binomial_and_drifts_back_to_its_prior_when_unused():
    a = Acceptance(0.5)
    a.add(10, 10)
    assert a.alpha == pytest.approx(11 / 12)
    for _ in range(200):
        a.forget()
    assert a.alpha == pytest.approx(0.5, abs=1e-3)
    with pytest.raises(ValueError, match="kept=3"):
        a.add(3, 2)


def test_plan_without_any_source_is_the_target_alone():
    plan = plan_round(_costs(0.2), max_gamma=8, model_alpha=None, lookup_alpha=None, lookup_len=0)
    assert plan == RoundPlan("none", 0, pytest.approx(1 / STEP_S), pytest.approx(1 / STEP_S))


def test_plan_takes_a_long_lookup_where_copies_are_nearly_always_kept():
    plan = plan_round(_costs(0.3), max_gamma=16, model_alpha=None, lookup_alpha=0.98, lookup_len=16)
    assert plan.source == "prompt-lookup" and plan.gamma >= 6 and plan.rate > 1.5 * plan.rate_none


def test_plan_gamma_grows_with_alpha_and_never_passes_the_match():
    gammas = [plan_round(_costs(0.3), max_gamma=16, model_alpha=None, lookup_alpha=a, lookup_len=16).gamma
              for a in (0.7, 0.85, 0.95, 0.99)]
    assert gammas == sorted(gammas) and gammas[0] < gammas[-1]
    short = plan_round(_costs(0.3), max_gamma=16, model_alpha=None, lookup_alpha=0.99, lookup_len=3)
    assert short.gamma == 3


def test_plan_refuses_lookup_when_its_acceptance_does_not_pay_for_the_verify():
    """On llama.cpp's CPU kernels a verify position costs 0.7 of a step: a 50 % guess never pays."""
    plan = plan_round(_costs(0.7), max_gamma=16, model_alpha=None, lookup_alpha=0.5, lookup_len=16)
    assert plan.source == "none"


def test_plan_refuses_a_nearly_always_right_draft_model_that_costs_too_much():
    """The planted proxy the rule must reject: alpha 0.97 (the Qwen pair's) with a draft step of 0.6 target
    steps and a verify slope of 0.7 (the pair on llama.cpp, 2 cores): every gamma is slower than the target."""
    plan = plan_round(_costs(0.7, draft=0.6), max_gamma=16, model_alpha=0.97, lookup_alpha=None, lookup_len=0)
    assert plan.source == "none"


def test_plan_takes_a_cheap_draft_model_with_high_acceptance():
    plan = plan_round(_costs(0.15, draft=0.1), max_gamma=16, model_alpha=0.9, lookup_alpha=None, lookup_len=0)
    assert plan.source == "model" and 2 <= plan.gamma <= 16 and plan.rate > plan.rate_none


def test_plan_charges_a_draft_model_its_catch_up():
    """The same cheap draft, idle for 2,000 tokens (its prefill still to do), does not start for one round."""
    c = _costs(0.15, draft=0.1)
    c.add_fill(0.05 * STEP_S * 64, 64)
    assert plan_round(c, max_gamma=16, model_alpha=0.9, lookup_alpha=None, lookup_len=0, model_lag=0).source == "model"
    assert plan_round(c, max_gamma=16, model_alpha=0.9, lookup_alpha=None, lookup_len=0,
                      model_lag=2000).source == "none"


def test_plan_with_max_gamma_zero_is_the_target_alone():
    assert plan_round(_costs(0.0), max_gamma=0, model_alpha=0.99, lookup_alpha=0.99, lookup_len=8).source == "none"


def test_lookup_match_reports_the_run_that_agrees_with_the_earlier_occurrence():
    d = PromptLookupDraft(100)
    seq = [1, 2, 3, 4, 5, 6, 9, 9, 2, 3, 4, 5]  # 2 3 4 5 earlier, then 6: a run of 4
    assert d.match(seq, 3) == (4, [6, 9, 9])
    assert d.match([1, 2, 3, 4], 3) == (0, [])
    assert d.match([7, 1, 2, 3, 8, 1, 2, 3], 2, max_run=3) == (3, [8, 1])


# --------------------------------------------------------------------------- specs

def test_auto_specs_are_checked_before_any_model_loads(no_model_loading):
    assert check_draft_spec("auto") == "auto" and auto_model("auto") is None
    assert check_draft_spec("auto:qwen2.5-coder-0.5b") == "auto" and auto_model("auto:qwen2.5-coder-0.5b") == (
        "qwen2.5-coder-0.5b")
    for bad, says in (("auto:", "needs a draft model"), ("auto:prompt-lookup", "takes a draft model"),
                      ("auto:early-exit:3", "takes a draft model")):
        with pytest.raises(ValueError, match=says):
            check_draft_spec(bad)
    with pytest.raises(ValueError, match="runs no model"):
        check_draft("auto", "bfloat16")


def test_auto_refuses_a_draft_on_the_targets_cache():
    from lab.speculative.self_draft import EarlyExitDraft

    target = tiny_llama_untied(vocab_size=16, num_layers=2, seed=0)
    with pytest.raises(ValueError, match="drafts on the target's"):
        AutoDraft(16, EarlyExitDraft(target, 1))


# --------------------------------------------------------------------------- the loop

PROMPTS = ([3, 7, 5, 9, 3, 7, 5, 9, 3, 7], [1, 2, 3, 4, 5, 6, 7, 8], [4, 4, 4, 4, 4, 4])


def _pair():
    target = tiny_llama_untied(vocab_size=16, num_layers=2, seed=0, init_std=0.1)
    return target, model_draft(target, tiny_llama_untied(vocab_size=16, num_layers=1, seed=4, init_std=0.1))


def _forced(monkeypatch, sources):
    """Make every round's plan the next of ``sources`` in turn (a function of the rounds so far: lossless)."""
    calls = {"n": 0}

    def plan(costs, *, max_gamma, model_alpha, lookup_alpha, lookup_len, model_lag=0):
        source = sources[calls["n"] % len(sources)]
        calls["n"] += 1
        if source == "prompt-lookup" and lookup_len and max_gamma:
            return RoundPlan("prompt-lookup", min(lookup_len, max_gamma), 1.0, 1.0)
        if source == "model" and model_alpha is not None and max_gamma:
            return RoundPlan("model", min(3, max_gamma), 1.0, 1.0)
        return RoundPlan("none", 0, 1.0, 1.0)

    monkeypatch.setattr(auto, "plan_round", plan)


@pytest.mark.parametrize("sources", [("none",), ("prompt-lookup",), ("model",), ("model", "none", "prompt-lookup")])
def test_auto_greedy_is_identical_to_the_target_alone_with_each_source(monkeypatch, sources):
    target, inner = _pair()
    draft = AutoDraft(16, inner)
    _forced(monkeypatch, sources)
    for prompt in PROMPTS:
        ids = torch.tensor([prompt])
        want = target_generate(target, ids, max_new_tokens=20).tokens
        got = speculative_generate(target, draft, ids, SpeculativeSettings(max_new_tokens=20, gamma=8))
        assert got.tokens == want, (sources, prompt)
        used = {r.draft_source for r in got.rounds if r.draft_source}
        assert used <= set(sources) | {"none"}


def test_auto_records_each_rounds_source_and_learns_from_the_rounds(monkeypatch):
    target, inner = _pair()
    draft = AutoDraft(16, inner)
    _forced(monkeypatch, ("model", "none"))
    res = speculative_generate(target, draft, torch.tensor([PROMPTS[1]]), SpeculativeSettings(max_new_tokens=12,
                                                                                              gamma=4))
    sources = [r.draft_source for r in res.rounds]
    assert "model" in sources and "none" in sources
    assert all(r.proposed == [] and r.stop_reason in ("cost", "budget") for r in res.rounds if r.draft_source == "none")
    assert all(r.draft_source in ("none", "prompt-lookup", "model") for r in res.rounds)  # the budget round too
    assert draft.accept["model"].tested > 0  # observed: the kept and tested counts reached the estimate
    assert draft.costs.step() > 0 and 1 in draft.costs._n


def test_auto_real_planner_greedy_is_identical_to_the_target_alone():
    """No forcing: whatever the measured tiny-model timings choose, the tokens are the target's."""
    target, inner = _pair()
    for draft in (AutoDraft(16, inner), AutoDraft(16, None)):
        for prompt in PROMPTS:
            ids = torch.tensor([prompt])
            want = target_generate(target, ids, max_new_tokens=24).tokens
            got = speculative_generate(target, draft, ids, SpeculativeSettings(max_new_tokens=24, gamma=AUTO_MAX_GAMMA))
            assert got.tokens == want


def test_make_draft_builds_auto_with_and_without_a_model(tiny_model):
    plain = make_draft(tiny_model, "auto")
    assert isinstance(plain, AutoDraft) and plain.model is None and plain.name == "auto"
    assert plain.facts().observes_rounds and plain.facts().model is None


def test_bench_speedup_of_a_run_that_never_drafts_is_one_not_n_over_n_minus_one():
    """Fault class: a speculative run whose first round was the fused prefill counted that round's token as
    decoded in the prefill's time, so an auto run that drafted nothing read 1.06x at 16 tokens (n / (n - 1))."""
    from lab.bench.summary import _Baseline, _speculative_figures
    from lab.sampling import SamplingConfig
    from lab.speculative.results import RoundRecord, SpeculativeResult

    n, step = 16, 0.03

    def record(i: int, prefill: int) -> RoundRecord:
        return RoundRecord(round=i, proposed=[], n_accepted=0, next_token=5, next_kind="bonus", stop_reason="cost",
                           draft_entropies=[], draft_normalized_entropies=[], accepted_mask=[], tested_mask=[],
                           draft_time_s=0.0, verify_time_s=0.1 if prefill else step, n_draft_forwards=0,
                           prefill_positions=prefill, draft_source="none")

    rounds = [record(0, 40)] + [record(i, 0) for i in range(1, n)]
    spec = SpeculativeResult(tokens=[5] * n, rounds=rounds, gamma=16, prompt_length=41, stopped_by="max_new_tokens",
                             prefill_time_s=0.1, total_time_s=0.1 + (n - 1) * step, draft_name="auto",
                             sampling=SamplingConfig())
    base = _Baseline(step_s=step, decode_tokens_per_s=(n - 1) / ((n - 1) * step), tokens={})
    figures = _speculative_figures([spec], base, 0.0)
    assert figures.measured_speedup == pytest.approx(1.0)
    assert spec.decode_tokens == n - 1
