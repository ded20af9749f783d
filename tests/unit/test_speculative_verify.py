"""Unit tests for the pure parts: verify, residual, sampling filter, theory (no model weights)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, strategies as st

from lab.sampling import SamplingConfig, sampling_probs
from lab.speculative.theory import (accepted_length_pmf, acceptance_probability, breakeven_alpha, expected_speedup,
                                    expected_tokens_per_round, flops_per_token)
from lab.speculative.verify import RESIDUAL_MASS_FLOOR, residual_probs, verify, verify_greedy

# Closed forms are evaluated in float64; 1e-12 allows their last-bit rounding only.
FORMULA_TOL = 1e-12
# brentq is asked for xtol=1e-12; 1e-9 leaves room for its stopping rule.
ROOT_TOL = 1e-9
V = 6


def one_hot_rows(ids: list[int], vocab: int = V) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(ids), vocab).float()


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- verify paths


def test_verify_all_drafts_match_target_accepts_all_and_adds_bonus():
    drafts = torch.tensor([1, 2, 3])
    n, nxt = verify(drafts, one_hot_rows([1, 2, 3]), one_hot_rows([1, 2, 3, 4]), generator=gen())
    assert (n, nxt) == (3, 4)


def test_verify_target_gives_zero_to_draft_rejects_and_corrects():
    """A draft token the target gives probability 0 is never accepted (u < p/q with u in [0, 1))."""
    drafts = torch.tensor([1, 5, 3])
    for seed in range(50):
        n, nxt = verify(drafts, one_hot_rows([1, 5, 3]), one_hot_rows([1, 2, 3, 4]), generator=gen(seed))
        assert (n, nxt) == (1, 2)


def test_verify_near_one_hot_rejection_draws_from_residual():
    """p puts 0.01 on the draft token, q puts 1: after rejection only p's other mass remains."""
    target = torch.tensor([[0.01, 0.99, 0, 0, 0, 0], [1.0, 0, 0, 0, 0, 0]])
    outcomes = {verify(torch.tensor([0]), one_hot_rows([0]), target, generator=gen(s)) for s in range(200)}
    assert outcomes <= {(1, 0), (0, 1)} and (0, 1) in outcomes


def test_verify_gamma_zero_samples_target_row():
    n, nxt = verify(torch.zeros(0, dtype=torch.long), torch.zeros(0, V), one_hot_rows([4]), generator=gen())
    assert (n, nxt) == (0, 4)


def test_verify_draft_token_outside_its_q_raises():
    with pytest.raises(ValueError, match="probability 0"):
        verify(torch.tensor([1]), one_hot_rows([2]), one_hot_rows([1, 1]))


@pytest.mark.parametrize("drafts,dp,tp", [
    (torch.tensor([1, 2]), one_hot_rows([1]), one_hot_rows([1, 2, 3])),  # draft rows != gamma
    (torch.tensor([1, 2]), one_hot_rows([1, 2]), one_hot_rows([1, 2])),  # target rows != gamma + 1
    (torch.tensor([[1, 2]]), one_hot_rows([1, 2]), one_hot_rows([1, 2, 3])),  # 2-D tokens
    (torch.tensor([1, 9]), one_hot_rows([1, 2]), one_hot_rows([1, 2, 3])),  # id out of range
])
def test_verify_bad_shapes_raise_value_error(drafts, dp, tp):
    with pytest.raises(ValueError):
        verify(drafts, dp, tp)


def test_verify_does_not_modify_inputs():
    dp, tp = torch.full((2, V), 1.0 / V), torch.full((3, V), 1.0 / V)
    dp0, tp0 = dp.clone(), tp.clone()
    verify(torch.tensor([0, 1]), dp, tp, generator=gen())
    assert torch.equal(dp, dp0) and torch.equal(tp, tp0)


def test_verify_greedy_match_mismatch_and_bonus():
    logits = torch.log(one_hot_rows([1, 2, 3]) + 1e-3)
    assert verify_greedy(torch.tensor([1, 2]), logits) == (2, 3)
    assert verify_greedy(torch.tensor([1, 4]), logits) == (1, 2)
    assert verify_greedy(torch.tensor([0, 2]), logits) == (0, 1)
    assert verify_greedy(torch.zeros(0, dtype=torch.long), logits[:1]) == (0, 1)


# --------------------------------------------------------------------------- residual


def test_residual_probs_equal_distributions_returns_target_not_nan():
    p = torch.tensor([0.2, 0.3, 0.5])
    out = residual_probs(p, p.clone())
    assert torch.equal(out, p) and not torch.isnan(out).any()


def test_residual_probs_known_case_normalizes_positive_part():
    p, q = torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.25, 0.25, 0.5])
    assert torch.allclose(residual_probs(p, q), torch.tensor([0.5, 0.5, 0.0]))


def test_residual_probs_shape_mismatch_raises():
    with pytest.raises(ValueError, match="shape"):
        residual_probs(torch.ones(3) / 3, torch.ones(4) / 4)


dists = st.lists(st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=False), min_size=2, max_size=8)


@given(dists, dists)
def test_residual_probs_property_is_a_distribution_supported_where_p_exceeds_q(a, b):
    """residual >= 0, sums to 1, and is 0 wherever p <= q (unless it fell back to p)."""
    n = min(len(a), len(b))
    pa, pb = torch.tensor(a[:n], dtype=torch.float64), torch.tensor(b[:n], dtype=torch.float64)
    from hypothesis import assume
    assume(pa.sum() > 0.1 and pb.sum() > 0.1)
    p, q = pa / pa.sum(), pb / pb.sum()
    r = residual_probs(p, q)
    assert (r >= 0).all() and abs(float(r.sum()) - 1.0) < 1e-9
    if float((p - q).clamp_min(0).sum()) > RESIDUAL_MASS_FLOOR:
        assert (r[p <= q] == 0).all()
    else:  # p == q up to rounding: the documented fallback to p
        assert torch.equal(r, p)


# --------------------------------------------------------------------------- sampling filter


def test_sampling_probs_temperature_zero_is_one_hot_argmax():
    logits = torch.tensor([[0.1, 3.0, -1.0], [5.0, 0.0, 0.0]])
    assert torch.equal(sampling_probs(logits, SamplingConfig(0.0)), one_hot_rows([1, 0], 3))


def test_sampling_probs_top_k_keeps_k_largest():
    probs = sampling_probs(torch.tensor([1.0, 4.0, 3.0, 2.0]), SamplingConfig(1.0, top_k=2))
    assert (probs[[0, 3]] == 0).all() and torch.allclose(probs[[1, 2]].sum(), torch.tensor(1.0))


def test_sampling_probs_top_p_keeps_smallest_set_reaching_p():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    probs = sampling_probs(logits, SamplingConfig(1.0, top_p=0.7))  # 0.5 < 0.7 <= 0.8
    assert (probs[2:] == 0).all() and torch.allclose(probs[:2], torch.tensor([0.625, 0.375]))


def test_sampling_probs_temperature_scales_logits():
    logits = torch.tensor([0.0, 1.0])
    assert torch.allclose(sampling_probs(logits, SamplingConfig(0.5)), torch.softmax(logits / 0.5, -1))


@pytest.mark.parametrize("kwargs", [dict(temperature=-1.0), dict(temperature=float("nan")), dict(top_k=0),
                                    dict(top_p=0.0), dict(top_p=1.5)])
def test_sampling_config_bad_values_raise_value_error(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        SamplingConfig(**kwargs)


# --------------------------------------------------------------------------- theory


def test_expected_tokens_per_round_hand_values():
    assert abs(expected_tokens_per_round(0.5, 2) - 1.75) < FORMULA_TOL  # 1 + .5 + .25
    assert abs(expected_tokens_per_round(0.0, 4) - 1.0) < FORMULA_TOL
    assert abs(expected_tokens_per_round(1.0, 4) - 5.0) < FORMULA_TOL
    assert abs(expected_tokens_per_round(0.8, 3) - (1 - 0.8 ** 4) / 0.2) < FORMULA_TOL


def test_expected_speedup_hand_value():
    assert abs(expected_speedup(0.5, 2, 0.25) - 1.75 / 1.5) < FORMULA_TOL


def test_breakeven_alpha_hand_values():
    assert abs(breakeven_alpha(1, 0.5) - 0.5) < ROOT_TOL  # (1 + a) / 1.5 = 1
    assert abs(breakeven_alpha(2, 0.5) - (math.sqrt(5) - 1) / 2) < ROOT_TOL  # a^2 + a - 1 = 0
    assert breakeven_alpha(3, 0.0) == 0.0
    assert breakeven_alpha(3, 1.0) is None


def test_accepted_length_pmf_hand_values():
    assert accepted_length_pmf(0.5, 2) == [0.5, 0.25, 0.25]


def test_acceptance_probability_is_overlap():
    p, q = torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.25, 0.25, 0.5])
    assert abs(float(acceptance_probability(p, q)) - 0.5) < FORMULA_TOL


def test_flops_per_token_hand_computed_config():
    from types import SimpleNamespace

    cfg = SimpleNamespace(hidden_size=4, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                          head_dim=2, intermediate_size=8, vocab_size=10)
    # q,o: 2*4*2*2=32; k,v: 2*4*1*2=16; mlp 3*4*8=96; head 40 -> 184 MACs -> 368; attention 4*1*2*2*3=48
    assert flops_per_token(cfg, context_length=3) == 416.0


@pytest.mark.parametrize("call,arg", [
    (lambda: expected_tokens_per_round(1.5, 2), "alpha"),
    (lambda: expected_tokens_per_round(0.5, 0), "gamma"),
    (lambda: expected_speedup(0.5, 2, -1.0), "cost_ratio"),
    (lambda: breakeven_alpha(0, 0.1), "gamma"),
])
def test_theory_bad_arguments_raise_value_error_naming_them(call, arg):
    with pytest.raises(ValueError, match=arg):
        call()
