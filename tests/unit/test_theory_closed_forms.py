"""Closed forms of speculative decoding (lab/speculative/theory.py) checked against their
definitions: relations between the functions, exact rational evaluation, an independent
FLOP count from a real transformers model's weight shapes, and the chi-square fit recomputed
by hand. No expected number is copied from the implementation."""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import chi2 as chi2_dist
from transformers import LlamaConfig, LlamaForCausalLM

from lab.speculative.theory import (MIN_EXPECTED_COUNT, accepted_length_pmf, acceptance_probability,
                                    breakeven_alpha, expected_speedup, expected_tokens_per_round,
                                    flops_per_token, geometric_fit)
from tests.strategies import probability_rows

# Float64 sums of <= 10 terms in [0, 1]: rounding below 1e-12 relative.
FORMULA_RTOL = 1e-12
# brentq stops within xtol = 1e-12 of the root; the speedup's slope is <= gamma + 1 <= 9,
# so |speedup(root) - 1| < 1e-10.
ROOT_RESIDUAL_TOL = 1e-10

alphas = st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=False)
gammas = st.integers(1, 8)
cost_ratios = st.floats(0.0, 3.0, allow_nan=False, allow_subnormal=False)
rational_alphas = st.fractions(0, 1, max_denominator=64)


# --------------------------------------------------------------------------- tokens per round, pmf, speedup


@given(rational_alphas, gammas)
def test_accepted_length_pmf_matches_exact_truncated_geometric(a, gamma):
    """P(n = k) = a^k (1 - a) for k < gamma, P(n = gamma) = a^gamma (exact rationals)."""
    pmf = accepted_length_pmf(float(a), gamma)
    exact = [a ** k * (1 - a) for k in range(gamma)] + [a ** gamma]
    assert len(pmf) == gamma + 1
    for got, want in zip(pmf, exact):
        assert math.isclose(got, float(want), rel_tol=FORMULA_RTOL, abs_tol=1e-300)
    assert math.isclose(sum(pmf), 1.0, rel_tol=FORMULA_RTOL)


@given(rational_alphas, gammas)
def test_expected_tokens_per_round_is_one_plus_mean_accepted(a, gamma):
    """E[tokens] = 1 + E[n accepted] under the pmf, and = (1 - a^(g+1)) / (1 - a) (Leviathan Eq. 1)."""
    tokens = expected_tokens_per_round(float(a), gamma)
    mean_accepted = sum(k * p for k, p in enumerate(accepted_length_pmf(float(a), gamma)))
    assert math.isclose(tokens, 1.0 + mean_accepted, rel_tol=FORMULA_RTOL)
    closed = (1 - a ** (gamma + 1)) / (1 - a) if a < 1 else Fraction(gamma + 1)
    assert math.isclose(tokens, float(closed), rel_tol=FORMULA_RTOL)


@given(alphas, gammas, cost_ratios)
def test_expected_speedup_is_tokens_over_round_cost(a, gamma, c):
    """Theorem 3.8: speedup * (gamma c + 1) = expected tokens per round."""
    assert math.isclose(expected_speedup(a, gamma, c) * (gamma * c + 1.0), expected_tokens_per_round(a, gamma),
                        rel_tol=FORMULA_RTOL)


@given(gammas, st.floats(1e-3, 0.999, allow_nan=False, allow_subnormal=False))
def test_breakeven_alpha_solves_speedup_equals_one(gamma, c):
    """The returned alpha is a root of speedup - 1 in [0, 1], and the speedup exceeds 1 above it."""
    a = breakeven_alpha(gamma, c)
    assert a is not None and 0.0 <= a <= 1.0
    assert abs(expected_speedup(a, gamma, c) - 1.0) < ROOT_RESIDUAL_TOL
    if a < 1.0:
        assert expected_speedup(min(1.0, a + 1e-6), gamma, c) > 1.0


@given(gammas, st.floats(1.0, 10.0, allow_nan=False, allow_subnormal=False))
def test_breakeven_alpha_draft_as_slow_as_target_is_none(gamma, c):
    """At c >= 1 even alpha = 1 gives (gamma + 1) / (gamma c + 1) <= 1: no breakeven exists."""
    assert breakeven_alpha(gamma, c) is None


@pytest.mark.parametrize("a", [0.0, 1.0, 0, 1])
def test_theory_alpha_at_interval_ends_is_accepted(a):
    assert len(accepted_length_pmf(a, 2)) == 3 and expected_tokens_per_round(a, 2) >= 1.0


@pytest.mark.parametrize("call,arg", [
    (lambda: expected_tokens_per_round("0.5", 2), "alpha"),
    (lambda: expected_tokens_per_round(float("nan"), 2), "alpha"),
    (lambda: expected_tokens_per_round(-1e-12, 2), "alpha"),
    (lambda: accepted_length_pmf(1.0 + 1e-12, 2), "alpha"),
    (lambda: accepted_length_pmf(0.5, True), "gamma"),
    (lambda: accepted_length_pmf(0.5, 2.0), "gamma"),
    (lambda: expected_speedup(0.5, 2, "0.1"), "cost_ratio"),
    (lambda: expected_speedup(0.5, 2, float("nan")), "cost_ratio"),
    (lambda: breakeven_alpha(2, -1e-12), "cost_ratio"),
    (lambda: breakeven_alpha(True, 0.5), "gamma"),
])
def test_theory_invalid_argument_raises_value_error_naming_it(call, arg):
    """Bad input is a ValueError naming the argument (never a TypeError, never accepted)."""
    with pytest.raises(ValueError, match=arg):
        call()


def test_expected_speedup_zero_cost_ratio_is_accepted():
    assert math.isclose(expected_speedup(0.5, 2, 0), expected_tokens_per_round(0.5, 2), rel_tol=FORMULA_RTOL)


# --------------------------------------------------------------------------- acceptance probability


@given(st.integers(1, 4).flatmap(lambda n: st.integers(2, 8).flatmap(
    lambda v: st.tuples(probability_rows(n, v), probability_rows(n, v)))))
def test_acceptance_probability_batched_is_one_minus_total_variation(rows):
    """beta = sum_x min(p, q) = 1 - TV(p, q) = 1 - sum|p - q| / 2, per row (Leviathan Cor. 3.6)."""
    p, q = rows
    beta = acceptance_probability(p, q)
    assert beta.shape == (p.shape[0],)
    for i in range(p.shape[0]):
        tv = 0.5 * sum(abs(a - b) for a, b in zip(p[i].tolist(), q[i].tolist()))
        assert math.isclose(float(beta[i]), 1.0 - tv, rel_tol=0, abs_tol=1e-12)


def test_acceptance_probability_shape_mismatch_names_both_shapes():
    with pytest.raises(ValueError, match=r"target_probs shape \(2, 3\) != draft_probs shape \(3,\)"):
        acceptance_probability(torch.ones(2, 3) / 3, torch.ones(3) / 3)


# --------------------------------------------------------------------------- FLOPs from a real model's weight shapes


def _llama(**overrides):
    return _cached_llama(tuple(sorted(overrides.items())))


@functools.lru_cache(maxsize=None)
def _cached_llama(overrides: tuple):
    """A tiny random Llama built from its config (read-only: tests only count its weights)."""
    kwargs = dict(hidden_size=24, num_hidden_layers=3, num_attention_heads=4, intermediate_size=40,
                  vocab_size=50, max_position_embeddings=64)
    kwargs.update(dict(overrides))
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**kwargs))


def _reference_flops(model, context: int, layers: int | None = None) -> float:
    """2 x (weights of every Linear in the first ``layers`` decoder layers and the LM head)
    + attention scores and weighted sum: 2 matmuls of heads x head_dim x context MACs per layer."""
    cfg = model.config
    blocks = model.model.layers[: layers or cfg.num_hidden_layers]
    macs = sum(m.weight.numel() for b in blocks for m in b.modules() if isinstance(m, torch.nn.Linear))
    macs += model.lm_head.weight.numel()
    q_width = blocks[0].self_attn.q_proj.weight.shape[0]  # heads x head_dim
    return 2.0 * macs + 2.0 * 2 * len(blocks) * q_width * context


@pytest.mark.parametrize("overrides", [
    {},  # multi-head, head_dim from hidden / heads
    {"num_key_value_heads": 2},  # grouped-query attention
    {"num_key_value_heads": 1, "head_dim": 10},  # explicit head_dim != hidden / heads
])
@pytest.mark.parametrize("context,layers", [(0, None), (5, None), (17, 1), (3, 3)])
def test_flops_per_token_matches_linear_weights_of_built_model(overrides, context, layers):
    """FLOPs per token = 2 x every weight matmul + attention over the context (Kaplan et al. 2020),
    counted from the Linear modules transformers actually builds for the config."""
    model = _llama(**overrides)
    got = flops_per_token(model.config, context_length=context, num_layers=layers)
    assert got == _reference_flops(model, context, layers)
    if context == 0:
        assert flops_per_token(model.config, num_layers=layers) == got  # context defaults to 0


def test_flops_per_token_config_without_optional_fields_uses_mha_defaults():
    """No num_key_value_heads / head_dim: n_kv = heads and head_dim = hidden // heads."""
    from types import SimpleNamespace

    model = _llama(hidden_size=30, num_attention_heads=3)
    cfg = SimpleNamespace(hidden_size=30, num_hidden_layers=3, num_attention_heads=3, intermediate_size=40,
                          vocab_size=50)
    assert flops_per_token(cfg, context_length=4) == _reference_flops(model, 4)


@pytest.mark.parametrize("kwargs,arg", [(dict(context_length=-1), "context_length"),
                                        (dict(num_layers=0), "num_layers"), (dict(num_layers=4), "num_layers")])
def test_flops_per_token_bad_arguments_raise_naming_them(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        flops_per_token(_llama().config, **kwargs)


def test_flops_per_token_missing_field_names_it():
    from types import SimpleNamespace

    with pytest.raises(ValueError, match="intermediate_size"):
        flops_per_token(SimpleNamespace(hidden_size=4, num_hidden_layers=1, num_attention_heads=2, vocab_size=8))


# --------------------------------------------------------------------------- geometric fit


def _reference_fit(histogram: list[int], alpha: float):
    """Pool left to right until the expected count reaches 5, fold a short tail into the last
    bin, rescale expected to the observed total, chi2 = sum (o - e)^2 / e on bins - 2 dof."""
    gamma, n = len(histogram) - 1, sum(histogram)
    pmf = [alpha ** k * (1 - alpha) for k in range(gamma)] + [alpha ** gamma]
    expected = [n * p for p in pmf]
    bins, o_acc, e_acc = [], 0.0, 0.0
    for o, e in zip(histogram, expected):
        o_acc, e_acc = o_acc + o, e_acc + e
        if e_acc >= MIN_EXPECTED_COUNT:
            bins.append([o_acc, e_acc])
            o_acc = e_acc = 0.0
    if bins and e_acc > 0:
        bins[-1][0] += o_acc
        bins[-1][1] += e_acc
    if len(bins) < 3:
        return expected, None, None, len(bins)
    scale = sum(o for o, _ in bins) / sum(e for _, e in bins)
    stat = sum((o - e * scale) ** 2 / (e * scale) for o, e in bins)
    return expected, stat, float(chi2_dist.sf(stat, len(bins) - 2)), len(bins)


@given(st.lists(st.integers(0, 300), min_size=2, max_size=8), st.floats(0.05, 0.95))
def test_geometric_fit_matches_hand_pooled_chi_square(histogram, alpha):
    """The fit equals the chi-square recomputed by hand from the truncated geometric law."""
    fit = geometric_fit(histogram, alpha)
    if sum(histogram) == 0:
        assert fit["chi2"] is None and fit["bins"] == 0 and fit["expected"] == [0.0] * len(histogram)
        return
    expected, stat, p_value, bins = _reference_fit(histogram, alpha)
    assert fit["bins"] == bins
    assert all(math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12) for a, b in zip(fit["expected"], expected))
    assert len(fit["expected"]) == len(histogram)
    if stat is None:
        assert fit["chi2"] is None and fit["p_value"] is None
    else:
        assert math.isclose(fit["chi2"], stat, rel_tol=1e-9, abs_tol=1e-12)
        assert math.isclose(fit["p_value"], p_value, rel_tol=1e-9, abs_tol=1e-12)


def test_geometric_fit_histogram_from_the_law_itself_fits():
    """Counts proportional to the pmf (rounded) give a small chi-square and a large p-value,
    and a histogram with the mass moved to the other end is rejected (negative control)."""
    alpha, gamma, n = 0.6, 4, 10_000
    counts = [round(n * p) for p in accepted_length_pmf(alpha, gamma)]
    good = geometric_fit(counts, alpha)
    bad = geometric_fit(counts[::-1], alpha)
    assert good["bins"] == gamma + 1 and good["p_value"] > 0.5
    assert bad["p_value"] < 1e-6


@pytest.mark.parametrize("histogram,alpha", [([5], 0.5), ([0, 0, 0], 0.5), ([10, 10, 10], float("nan"))])
def test_geometric_fit_degenerate_input_has_no_statistic(histogram, alpha):
    """gamma < 1, no rounds, or an undefined alpha: no statistic, zero bins, zero expected counts."""
    fit = geometric_fit(histogram, alpha)
    assert fit == {"expected": [0.0] * len(histogram), "chi2": None, "p_value": None, "bins": 0}


def test_geometric_fit_expected_count_exactly_five_is_its_own_bin():
    """The pooling rule is ``expected >= 5``: with alpha = 0.5, gamma = 3 and 20 rounds the
    expected counts are exactly 10, 5, 2.5, 2.5, giving bins 10 | 5 | 2.5 + 2.5."""
    histogram = [9, 6, 3, 2]
    fit = geometric_fit(histogram, 0.5)
    expected, stat, p_value, bins = _reference_fit(histogram, 0.5)
    assert fit["expected"] == expected == [20 * p for p in accepted_length_pmf(0.5, 3)]
    assert fit["bins"] == bins == 3
    assert math.isclose(fit["chi2"], stat, rel_tol=1e-12) and math.isclose(fit["p_value"], p_value, rel_tol=1e-9)


@pytest.mark.parametrize("histogram", [[1, 0, 0], [0, 1], [1, 1, 1], [2, 0, 1, 1]])
def test_geometric_fit_fewer_than_five_rounds_has_expected_but_no_statistic(histogram):
    """A handful of rounds: expected counts are n x pmf (no bin reaches 5), no statistic."""
    fit = geometric_fit(histogram, 0.4)
    n, gamma = sum(histogram), len(histogram) - 1
    assert fit["expected"] == [n * p for p in accepted_length_pmf(0.4, gamma)]
    assert fit["chi2"] is None and fit["p_value"] is None and fit["bins"] == 0


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.9, 0.999, 1 - 1e-9, 1.0])
def test_tokens_per_round_closed_form_past_the_summed_gammas_agrees_with_the_sum(alpha):
    """Past gamma = 4096 the closed form replaces the sum: at 4097 it agrees with the sum to 1e-12
    relative, near alpha = 1 included (where ``(1 - a**n) / (1 - a)`` taken naively loses digits)."""
    from lab.speculative.theory import _SUMMED_GAMMA

    g = _SUMMED_GAMMA + 1
    summed = math.fsum(alpha ** k for k in range(g + 1))
    assert expected_tokens_per_round(alpha, g) == pytest.approx(summed, rel=1e-12)


def test_tokens_per_round_takes_any_int_gamma_in_constant_time():
    """Fault class: a gamma built in code (10**300) that summed gamma + 1 terms and never returned; one
    past what a float holds (10**400) is refused in one line."""
    assert expected_tokens_per_round(0.5, 10**300) == pytest.approx(2.0, rel=1e-12)
    assert expected_tokens_per_round(1.0, 10**300) == pytest.approx(1e300, rel=1e-12)
    assert expected_speedup(0.5, 10**9, 0.0) == pytest.approx(2.0, rel=1e-12)
    with pytest.raises(ValueError, match=r"is past what a float holds"):
        expected_tokens_per_round(0.5, 10**400)


def test_accepted_length_pmf_past_its_largest_gamma_refused_in_one_line():
    from lab.speculative.theory import MAX_PMF_GAMMA

    assert len(accepted_length_pmf(0.5, MAX_PMF_GAMMA)) == MAX_PMF_GAMMA + 1
    with pytest.raises(ValueError, match="gamma=1048577 is past 1,048,576"):
        accepted_length_pmf(0.5, MAX_PMF_GAMMA + 1)


@pytest.mark.parametrize("alpha", [1e-320, 1e-17, 5e-17, 0.4999999])
def test_tokens_per_round_closed_form_takes_a_tiny_alpha(alpha):
    """Fault class: 1 - alpha rounding to 1 for alpha below ~5.5e-17, where log1p(-1) raised "math domain error"."""
    g = 10**9
    want = float(1 / (1 - Fraction(alpha)))  # the gamma -> infinity limit; alpha**(g + 1) underflows to 0
    assert expected_tokens_per_round(alpha, g) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("call", [lambda: expected_tokens_per_round(10**400, 5), lambda: expected_tokens_per_round(True, 5),
                                  lambda: expected_speedup(0.9, 5, 10**400), lambda: expected_speedup(0.9, 5, True),
                                  lambda: breakeven_alpha(5, 10**400)])
def test_theory_huge_int_or_bool_alpha_and_cost_refused_with_value_error(call):
    """Fault class: an int no float holds reaching math.isnan (OverflowError), a bool taken as 1."""
    with pytest.raises(ValueError, match="must be a number"):
        call()
