"""The conformance core's contracts: the chains, the law test and its power, Holm, greedy, logprobs, the fake engine.

Properties (hypothesis): every chain's law sums to 1, keeps a maximal token and never a
token outside top-k; the transformers order equals the lab's own filter
(:mod:`lab.sampling`) and transformers' warpers with min-p, away from float boundaries;
the llama.cpp and transformers orders differ on a crafted example and agree at
temperature 1; the law test's p-value is ``tests/support.py``'s ``chisq_pvalue``; the
least favourable alternative is exactly ``tv`` away on the same support. Errors are one
line naming the argument; results are frozen. The fake engine's correct ratio test agrees
with :func:`lab.speculative.verify.verify` at the boundary uniforms, and its draws follow
its closed-form law (fixed seeds).
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import assume, given, strategies as st

from lab.conform import chains, stats
from lab.conform.chains import LLAMA_CPP, TRANSFORMERS, Chain, Settings, chain_logits, chain_probs
from lab.conform.fake import DEFECTS, FakeEngine
from lab.conform.stats import (greedy_check, holm_family, law_test, least_favourable, logprob_check, power_against,
                               samples_for_power)
from tests.random_sources import StubRandom
from tests.strategies import conform_settings, logit_vectors, masked_logit_vectors
from tests.support import chisq_pvalue

# Float64 reference against float32 filters: the kept sets agree unless a cumulative sum or a logit gap
# lies within float32 rounding (~1e-7 relative) of the boundary; these margins keep such draws out.
BOUNDARY_MARGIN = 1e-5
PROB_ATOL = 1e-5  # float32 softmax against float64: ~1e-7 per entry, well inside this


# --------------------------------------------------------------------------- chains


@pytest.mark.parametrize("kwargs, field", [
    ({"temperature": -0.1}, "temperature"), ({"temperature": math.inf}, "temperature"),
    ({"temperature": True}, "temperature"), ({"top_k": 0}, "top_k"), ({"top_k": 2.0}, "top_k"),
    ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"min_p": -0.1}, "min_p"), ({"min_p": 1.1}, "min_p"),
])
def test_settings_out_of_range_raises_naming_field(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}="):
        Settings(**kwargs)


def test_chain_order_not_a_permutation_raises():
    with pytest.raises(ValueError, match="^order="):
        Chain("x", ("temperature", "top_k", "top_p"))
    with pytest.raises(ValueError, match="^order="):
        Chain("x", ("temperature", "top_k", "top_p", "top_p"))


@pytest.mark.parametrize("logits", [[], [[1.0, 2.0]], [1.0, math.nan], [1.0, math.inf], [-math.inf, -math.inf]])
def test_chain_probs_bad_logits_raise(logits):
    with pytest.raises(ValueError, match="^logits must"):
        chain_probs(logits, LLAMA_CPP, Settings())


def test_chain_logits_greedy_raises_and_chain_probs_greedy_is_one_hot_at_first_max():
    with pytest.raises(ValueError, match="^chain_logits needs temperature > 0"):
        chain_logits([1.0, 2.0], TRANSFORMERS, Settings(temperature=0.0))
    assert chain_probs([1.0, 3.0, 3.0], TRANSFORMERS, Settings(temperature=0.0, top_k=1)).tolist() == [0, 1, 0]


@given(st.one_of(logit_vectors(min_size=1), masked_logit_vectors()), conform_settings(),
       st.sampled_from([TRANSFORMERS, LLAMA_CPP]))
def test_chain_probs_any_logits_sum_to_one_keep_argmax_and_stay_in_top_k(logits, settings, chain):
    """sum(probs) = 1; a token of the largest logit is kept (which one, among ties, is top-p's choice); every kept
    token is among the top-k (ties included) and finite."""
    x = logits.double().numpy()
    before = x.copy()
    probs = chain_probs(logits, chain, settings)
    assert probs.dtype == np.float64 and probs.shape == x.shape
    assert abs(probs.sum() - 1.0) < 1e-12
    assert (probs[x == x.max()] > 0).any()
    kept = probs > 0
    assert np.isfinite(x[kept]).all()
    if settings.top_k is not None and settings.top_k < x.size:
        kth = np.sort(x)[::-1][settings.top_k - 1]
        assert (x[kept] >= kth).all()
    assert np.array_equal(x, before)


def _near_boundary(x: np.ndarray, settings: Settings) -> bool:
    """Whether a float32 filter could keep another set than the float64 one (top-k gap, top-p sum, min-p cut)."""
    z = x / settings.temperature
    if settings.top_k is not None and settings.top_k < z.size:
        desc = np.sort(z)[::-1]
        a, b = desc[settings.top_k - 1], desc[settings.top_k]
        if a != b and a - b < BOUNDARY_MARGIN * max(1.0, abs(a)):
            return True
    z = chains._top_k(z, settings.top_k)
    if settings.top_p < 1:
        cum = np.cumsum(chains._softmax(z)[np.argsort(z, kind="stable")])[:-1]
        if np.abs(cum - (1.0 - settings.top_p)).min(initial=1.0) < BOUNDARY_MARGIN:
            return True
        after = chains._top_p(z, settings.top_p)
        kept, dropped = z[np.isfinite(after)], z[np.isfinite(z) & ~np.isfinite(after)]
        if dropped.size and kept.min() <= dropped.max():  # equal logits straddle the cut: which of them stays is
            return True                                    # the sort's choice (torch's sort is not stable)
        z = after
    if settings.min_p > 0:
        gaps = (z - z.max())[np.isfinite(z)] - math.log(settings.min_p)
        return bool(np.abs(gaps).min() < BOUNDARY_MARGIN)
    return False


@given(logit_vectors(min_size=1, bound=20.0), conform_settings(max_k=48))
def test_transformers_chain_equals_lab_sampling_filter(logits, settings):
    """Without min-p, the transformers order is the lab's own filter: the same kept set and probabilities."""
    from lab.sampling import SamplingConfig, filter_logits, sampling_probs

    settings = dataclasses.replace(settings, min_p=0.0)
    assume(not _near_boundary(logits.double().numpy(), settings))
    config = SamplingConfig(settings.temperature, settings.top_k, settings.top_p)
    kept = torch.isfinite(filter_logits(logits, config)).numpy()  # a float32 probability may underflow to 0
    assert np.array_equal(np.isfinite(chain_logits(logits, TRANSFORMERS, settings)), kept), f"sets differ: {settings}"
    np.testing.assert_allclose(chain_probs(logits, TRANSFORMERS, settings), sampling_probs(logits, config).numpy(),
                               atol=PROB_ATOL)


@given(logit_vectors(min_size=1, bound=20.0), conform_settings(max_k=48))
def test_transformers_chain_equals_transformers_warpers_with_min_p(logits, settings):
    """transformers' Temperature -> TopK -> TopP -> MinP warpers (generate's order) keep the same set."""
    from transformers import (LogitsProcessorList, MinPLogitsWarper, TemperatureLogitsWarper, TopKLogitsWarper,
                              TopPLogitsWarper)

    assume(not _near_boundary(logits.double().numpy(), settings))
    warpers = LogitsProcessorList([TemperatureLogitsWarper(settings.temperature)])
    if settings.top_k is not None:
        warpers.append(TopKLogitsWarper(settings.top_k))
    if settings.top_p < 1:
        warpers.append(TopPLogitsWarper(settings.top_p))
    if settings.min_p > 0:
        warpers.append(MinPLogitsWarper(settings.min_p))
    ref = warpers(torch.zeros(1, 1, dtype=torch.long), logits.unsqueeze(0))[0]
    assert np.array_equal(np.isfinite(chain_logits(logits, TRANSFORMERS, settings)), torch.isfinite(ref).numpy()), (
        f"kept sets differ for {settings}")
    np.testing.assert_allclose(chain_probs(logits, TRANSFORMERS, settings), ref.softmax(-1).numpy(), atol=PROB_ATOL)


def test_llama_cpp_and_transformers_orders_differ_on_crafted_example():
    """At T = 2, top-p 0.7 over (0.5, 0.3, 0.15, 0.05): llama.cpp's raw nucleus keeps 2 tokens, the
    scaled one 3; min-p 0.5 at T = 2 keeps 2 tokens on the raw law (0.15 / 0.5 < 0.5), 3 on the scaled
    one (sqrt(0.3) >= 0.5 > sqrt(0.1))."""
    x = np.log([0.5, 0.3, 0.15, 0.05])
    top_p = Settings(temperature=2.0, top_p=0.7)
    assert (chain_probs(x, LLAMA_CPP, top_p) > 0).sum() == 2
    assert (chain_probs(x, TRANSFORMERS, top_p) > 0).sum() == 3
    min_p = Settings(temperature=2.0, min_p=0.5)
    assert (chain_probs(x, LLAMA_CPP, min_p) > 0).sum() == 2
    assert (chain_probs(x, TRANSFORMERS, min_p) > 0).sum() == 3


@given(st.one_of(logit_vectors(min_size=1), masked_logit_vectors()), conform_settings())
def test_chain_orders_agree_at_temperature_one_or_without_top_p_and_min_p(logits, settings):
    """At temperature 1 the two orders apply the same steps in the same order; temperature commutes with top-k."""
    at_one = dataclasses.replace(settings, temperature=1.0)
    assert np.array_equal(chain_probs(logits, LLAMA_CPP, at_one), chain_probs(logits, TRANSFORMERS, at_one))
    only_k = dataclasses.replace(settings, top_p=1.0, min_p=0.0)
    # Temperature commutes with top-k in exact arithmetic; in floats the shift before dividing can merge two
    # distinct logits a few ulps apart (2.2e-16 and 0 beside a maximum of 2) into a tie at the k-th place, which
    # the chain keeps whole: the boundary rounding docs/design.md names. Such inputs are not this property's.
    x = np.asarray(logits, dtype=np.float64)
    finite = x[np.isfinite(x)]
    assume(np.unique(finite).size == np.unique((finite - finite.max()) / only_k.temperature).size)
    np.testing.assert_allclose(chain_probs(logits, LLAMA_CPP, only_k), chain_probs(logits, TRANSFORMERS, only_k),
                               atol=1e-12)


def test_top_p_tie_at_boundary_keeps_higher_token_id_as_transformers():
    """(0.4, 0.3, 0.3), top-p 0.5: transformers' ascending sort keeps token 2 of the tied pair."""
    assert (chain_probs(np.log([0.4, 0.3, 0.3]), TRANSFORMERS, Settings(top_p=0.5)) > 0).tolist() == [True, False, True]


def test_describe_names_engine_and_active_steps_in_order():
    settings = Settings(temperature=0.7, top_k=20, min_p=0.05)
    assert TRANSFORMERS.describe(settings) == "transformers: temperature=0.7 -> top_k=20 -> min_p=0.05"
    assert LLAMA_CPP.describe(settings) == "llama.cpp: top_k=20 -> min_p=0.05 -> temperature=0.7"


def test_conform_imports_no_torch_and_no_scipy():
    """``lab.conform`` stays light at import: torch and scipy are imported inside the functions that need them."""
    code = ("import sys, lab.conform, lab.conform.chains, lab.conform.stats, lab.conform.fake; "
            "print(sorted(m for m in ('torch', 'scipy', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# --------------------------------------------------------------------------- the law test


def test_law_test_exact_fit_passes_and_impossible_token_rejects_exactly():
    fit = law_test([500, 300, 200, 0], [0.5, 0.3, 0.2, 0.0])
    assert (fit.p_value, fit.statistic, fit.dof, fit.reason, fit.impossible_tokens) == (1.0, 0.0, 2, "chi-square", ())
    bad = law_test([500, 300, 199, 1], [0.5, 0.3, 0.2, 0.0])
    assert (bad.p_value, bad.statistic, bad.reason, bad.impossible_tokens) == (0.0, math.inf, "impossible token", (3,))
    assert bad.rejects(1e-12) and not fit.rejects(0.5)


def test_law_test_pools_tokens_expected_below_five():
    """n = 100 over (0.9, 0.02 x 5): each tail token expects 2, the pool 10: two bins, five tokens pooled."""
    probs = [0.9] + [0.02] * 5
    result = law_test([90, 2, 2, 2, 2, 2], probs)
    assert (result.n_bins, result.pooled_tokens, result.dof, result.n) == (2, 5, 1, 100)


def test_law_test_single_bin_cannot_reject():
    result = law_test([10, 0], [1.0, 0.0])
    assert (result.p_value, result.reason, result.n_bins) == (1.0, "one bin", 1)


@given(st.integers(2, 12).flatmap(lambda v: st.tuples(
    st.lists(st.integers(0, 40), min_size=v, max_size=v),
    st.lists(st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=False), min_size=v, max_size=v))))
def test_law_test_p_value_equals_tests_support_chisq_pvalue(case):
    """The library's test pools as the lab's statistical tests always have (tests/support.chisq_pvalue)."""
    counts, weights = case
    assume(sum(counts) > 0 and sum(weights) > 0)
    probs = np.asarray(weights) / sum(weights)
    expected = {i: float(p) for i, p in enumerate(probs)}
    observed = {i: c for i, c in enumerate(counts) if c}
    assert law_test(counts, probs).p_value == pytest.approx(chisq_pvalue(observed, expected), rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("counts, probs, message", [
    ([1, 2], [0.2, 0.3, 0.5], "^counts shape"),
    ([1, 2, 3], [0.2, 0.3, 0.6], "^probs must be finite"),
    ([1, -2, 3], [0.2, 0.3, 0.5], "^counts must be non-negative"),
    ([1, 2.5, 3], [0.2, 0.3, 0.5], "^counts must be non-negative"),
    ([0, 0, 0], [0.2, 0.3, 0.5], "^counts must hold at least one"),
    ([1], [[1.0]], "^probs must be a non-empty vector"),
])
def test_law_test_bad_input_raises(counts, probs, message):
    with pytest.raises(ValueError, match=message):
        law_test(counts, probs)


# --------------------------------------------------------------------------- power


def test_power_against_reference_itself_is_alpha_and_impossible_mass_raises_it():
    p = np.array([0.5, 0.3, 0.2, 0.0])
    assert power_against(p, p, 1000, 0.01) == pytest.approx(0.01, rel=0.01)  # the exact variance: 2 dof + O(1/n)
    leak = np.array([0.5, 0.3, 0.19, 0.01])
    assert power_against(p, leak, 1000, 0.01) > 1 - 1e-4  # 1 - 0.99^1000


@pytest.mark.parametrize("p0, p1, n", [([0.5, 0.3, 0.2], [0.5, 0.3, 0.2], 6), ([0.5, 0.3, 0.2], [0.2, 0.2, 0.6], 7),
                                      ([0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1], 5)])
def test_pearson_moments_equal_enumeration_of_every_multinomial_outcome(p0, p1, n):
    """The mean and variance behind power_against, against all outcomes of multinomial(n, p1) summed exactly."""
    from itertools import product

    from scipy.stats import multinomial

    p0, p1 = np.array(p0), np.array(p1)
    outcomes = [c for c in product(range(n + 1), repeat=p0.size) if sum(c) == n]
    weights = np.array([multinomial.pmf(c, n, p1) for c in outcomes])
    values = np.array([np.sum((np.array(c) - n * p0) ** 2 / (n * p0)) for c in outcomes])
    mean = float(weights @ values)
    assert stats._pearson_moments(p0, p1, n) == pytest.approx((mean, float(weights @ (values - mean) ** 2)), rel=1e-9)


@given(st.lists(st.floats(0.01, 1.0, allow_nan=False), min_size=2, max_size=40), st.floats(0.001, 0.3))
def test_least_favourable_is_tv_away_on_the_same_support(weights, tv):
    """TV(alternative, reference) = tv exactly; it sums to 1 and keeps the support."""
    p = np.asarray(weights) / sum(weights)
    order = np.argsort(-p, kind="stable")
    cum = np.cumsum(p[order])[:-1]
    assume(tv <= cum[np.argmin(np.abs(cum - 0.5))])
    alt = least_favourable(p, tv)
    assert abs(alt.sum() - 1) < 1e-12 and (alt > 0).all()
    assert 0.5 * np.abs(alt - p).sum() == pytest.approx(tv, rel=1e-9)


def test_least_favourable_bad_input_raises():
    with pytest.raises(ValueError, match="^probs has one token"):
        least_favourable([1.0, 0.0], 0.1)
    with pytest.raises(ValueError, match=r"^tv=0.6 must be in \(0, P\(A\)"):
        least_favourable([0.5, 0.5], 0.6)
    with pytest.raises(ValueError, match="^tv=0"):
        least_favourable([0.5, 0.5], 0)


def test_samples_for_power_reaches_power_and_fewer_do_not():
    p = np.array([0.3, 0.25, 0.2, 0.15, 0.1])
    plan = samples_for_power(p, 0.05, 0.01)
    alt = least_favourable(p, 0.05)
    assert plan.achieved >= 0.9 and plan.achieved == power_against(p, alt, plan.n, 0.01)
    assert power_against(p, alt, plan.n - 1, 0.01) < 0.9
    assert samples_for_power(p, 0.1, 0.01).n < plan.n < samples_for_power(p, 0.05, 0.001).n


def test_samples_for_power_bad_input_raises():
    with pytest.raises(ValueError, match="^alpha="):
        samples_for_power([0.5, 0.5], 0.1, 0.0)
    with pytest.raises(ValueError, match="^power="):
        samples_for_power([0.5, 0.5], 0.1, 0.05, power=1.0)
    with pytest.raises(ValueError, match="needs more than"):
        samples_for_power([0.5, 0.5], 1e-5, 0.05)


# --------------------------------------------------------------------------- Holm, greedy, logprobs


def test_holm_family_matches_holm_and_rejects_at_alpha():
    from lab.analysis.hypotheses import holm

    values = {"a": 0.001, "b": 0.04, "c": 0.03, "d": 0.9}
    family = holm_family(values, 0.05)
    assert list(family.adjusted) == holm(list(values.values()))
    assert family.rejected == ("a",) and not family.passed
    assert holm_family({"a": 0.2}, 0.05).passed
    assert holm_family({"a": 0.0, "b": 1.0}, 0.01).rejected == ("a",)  # an impossible token rejects the family


def test_holm_family_bad_input_raises():
    with pytest.raises(ValueError, match="^p_values must name"):
        holm_family({}, 0.05)
    with pytest.raises(ValueError, match="^p_values hold NaN"):
        holm_family({"a": math.nan}, 0.05)
    with pytest.raises(ValueError, match="outside"):
        holm_family({"a": 1.5}, 0.05)
    with pytest.raises(ValueError, match="^alpha="):
        holm_family({"a": 0.5}, 1.0)


def test_greedy_check_equal_passes_and_masked_token_is_a_mismatch():
    logits = np.array([[2.0, 0.0], [0.0, 1.0], [1.0, -np.inf]])
    assert greedy_check(logits, np.array([0, 1, 0]), 0.0).passed
    check = greedy_check(logits, np.array([0, 1, 1]), 10.0)
    assert (check.first_mismatch, check.mismatch_gap, check.mismatches) == (2, math.inf, 1)


def test_greedy_check_exact_tie_excused_at_zero_tolerance():
    check = greedy_check(np.array([[1.0, 1.0, 0.0]]), np.array([1]), 0.0)
    assert check.excused == (0,) and check.passed


@pytest.mark.parametrize("logits, tokens, tol, message", [
    (np.zeros((0, 3)), np.zeros(0, dtype=int), 0.1, "^ref_logits_per_step must be"),
    (np.zeros((2, 3)), np.array([0]), 0.1, "^engine_tokens must be"),
    (np.zeros((2, 3)), np.array([0.0, 1.0]), 0.1, "^engine_tokens must be"),
    (np.zeros((2, 3)), np.array([0, 3]), 0.1, "^engine_tokens hold ids outside"),
    (np.array([[0.0, np.nan]]), np.array([0]), 0.1, "^ref_logits_per_step must hold no NaN"),
    (np.zeros((1, 3)), np.array([0]), -0.1, "^tie_tol="),
])
def test_greedy_check_bad_input_raises(logits, tokens, tol, message):
    with pytest.raises(ValueError, match=message):
        greedy_check(logits, tokens, tol)


def test_logprob_check_reports_worst_index_and_passes_at_tolerance():
    check = logprob_check([[-0.5, -1.0], [-2.0, -3.0]], [[-0.5, -1.2], [-2.0, -3.0]], tol=0.2)
    assert check.worst == (0, 1) and check.max_abs_diff == pytest.approx(0.2) and check.n == 4
    assert not logprob_check([-1.0], [-1.5], tol=0.1).passed


@pytest.mark.parametrize("ref, eng, tol, message", [
    ([-1.0], [-1.0, -2.0], 0.1, "^ref_logprobs shape"),
    ([], [], 0.1, "^ref_logprobs shape"),
    ([-math.inf], [-1.0], 0.1, "^ref_logprobs must be finite"),
    ([-1.0], [math.nan], 0.1, "^engine_logprobs must be finite"),
    ([-1.0], [-1.0], math.nan, "^tol="),
])
def test_logprob_check_bad_input_raises(ref, eng, tol, message):
    with pytest.raises(ValueError, match=message):
        logprob_check(ref, eng, tol)


def test_results_are_frozen_dataclasses():
    for cls in (stats.LawTest, stats.PowerPlan, stats.FamilyTest, stats.GreedyCheck, stats.LogprobCheck,
                Settings, Chain, FakeEngine):
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls.__name__


# --------------------------------------------------------------------------- the fake engine


def test_fake_engine_unknown_defect_and_bad_n_raise():
    with pytest.raises(ValueError, match="^defect="):
        FakeEngine(LLAMA_CPP, "off_by_one")
    with pytest.raises(ValueError, match="^n="):
        FakeEngine(LLAMA_CPP).sample([0.0, 1.0], Settings(), 0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="^draft_logits has V = 3"):
        FakeEngine(LLAMA_CPP).sample([0.0, 1.0], Settings(), 5, np.random.default_rng(0), draft_logits=[0.0, 1.0, 2.0])


def test_fake_engine_defects_change_what_they_name():
    s = Settings(temperature=0.7, top_k=5, top_p=0.9)
    assert FakeEngine(LLAMA_CPP, "top_p_before_temperature").effective(s, draft=False)[0].order == (
        "top_k", "min_p", "temperature", "top_p")  # llama.cpp claims top-p before: the defect moves it after
    assert FakeEngine(TRANSFORMERS, "top_p_before_temperature").effective(s, draft=False)[0].order[:2] == (
        "top_p", "temperature")
    assert FakeEngine(LLAMA_CPP, "top_k_plus_one").effective(s, draft=False)[1].top_k == 6
    assert FakeEngine(LLAMA_CPP, "draft_ignores_temperature").effective(s, draft=False)[1].temperature == 0.7
    assert FakeEngine(LLAMA_CPP, "draft_ignores_temperature").effective(s, draft=True)[1].temperature == 1.0
    assert FakeEngine(LLAMA_CPP, "accept_if_q_ge_p").effective(s, draft=True) == (LLAMA_CPP, s)


@pytest.mark.parametrize("p, q, u", [
    (0.3, 0.6, 0.0), (0.3, 0.6, 0.5), (0.3, 0.6, 0.4999999), (0.0, 0.6, 0.0), (0.6, 0.3, 0.999999), (0.4, 0.4, 0.0),
])
def test_fake_engine_ratio_test_agrees_with_verify_at_boundaries(p, q, u):
    """The correct engine keeps a draft token exactly when :func:`lab.speculative.verify.verify` does."""
    from lab.speculative.verify import verify

    target = torch.tensor([[p, 1 - p], [0.5, 0.5]], dtype=torch.float64)
    draft = torch.tensor([[q, 1 - q]], dtype=torch.float64)
    n_accepted, _ = verify(torch.tensor([0]), draft, target, random_source=StubRandom([u]))
    ours = FakeEngine(LLAMA_CPP)._accepts(np.array([u]), np.array([p]), np.array([q]))
    assert bool(ours[0]) == (n_accepted == 1)


@given(logit_vectors(min_size=2, max_size=16, bound=8.0), st.data(), conform_settings(max_k=16))
def test_fake_engine_correct_draft_emits_the_target_law(target, data, settings):
    """Leviathan et al., Theorem 3.5: with the ratio test and the residual, the emitted law is p."""
    draft = data.draw(logit_vectors(min_size=target.numel(), max_size=target.numel(), bound=8.0))
    engine = FakeEngine(LLAMA_CPP)
    np.testing.assert_allclose(engine.emitted_law(target, settings, draft_logits=draft),
                               chain_probs(target, LLAMA_CPP, settings), atol=1e-6)


@pytest.mark.parametrize("defect", [None, *DEFECTS])
def test_fake_engine_draws_follow_its_closed_form_law(defect):
    """Seeded draws (n = 4000) of every variant fit its own emitted law; none falls outside its support."""
    rng = np.random.default_rng(11)
    logits = rng.normal(0.0, 2.0, 24)
    draft = logits + rng.normal(0.0, 1.0, 24)
    settings = Settings(temperature=0.7, top_k=12, top_p=0.9)
    engine = FakeEngine(TRANSFORMERS, defect)
    for draft_logits in (None, draft):
        law = engine.emitted_law(logits, settings, draft_logits=draft_logits)
        tokens = engine.sample(logits, settings, 4000, np.random.default_rng(5), draft_logits=draft_logits)
        result = law_test(np.bincount(tokens, minlength=law.size), law / law.sum())
        assert result.reason != "impossible token" and result.p_value > 1e-3, (defect, draft_logits is None, result)
