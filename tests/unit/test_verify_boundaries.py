"""Boundary cases of speculative verification, reached through a stub random source.

A seeded ``torch.Generator`` practically never draws a uniform of exactly 0 or exactly
p/q, so a ``<=`` in place of ``<`` in the ratio test (an off-by-one at the accept boundary)
passed every seeded test. Here :class:`tests.random_sources.StubRandom` feeds those values directly and
records the row the final token is drawn from; expected outcomes are derived in the
tests from the definitions (exact rational arithmetic, the residual's formula), not
copied from the implementation.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from lab.sampling import SamplingConfig, sampling_probs
from lab.speculative.verify import RESIDUAL_MASS_FLOOR, TorchRandom, residual_probs, verify, verify_greedy
from tests.random_sources import LARGEST_UNIFORM, StubRandom
from tests.strategies import speculative_rounds, tied_logit_rows, uniforms_around

# The reference residual is summed by Python in another order than torch: float64
# rounding differences stay below 1e-12 for rows of <= 8 entries.
ROW_ATOL = 1e-12


def reference_residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) by its definition, or p when that mass is at or below the floor."""
    diff = [max(0.0, a - b) for a, b in zip(p.tolist(), q.tolist())]
    mass = sum(diff)
    if mass <= RESIDUAL_MASS_FLOOR:
        return p.double().clone()
    return torch.tensor([d / mass for d in diff], dtype=torch.float64)


def exactly_accepted(u: float, p: float, q: float) -> bool:
    """The ratio test ``u < p / q`` in exact rational arithmetic."""
    return Fraction(u) * Fraction(q) < Fraction(p)


# --------------------------------------------------------------------------- the ratio test at its boundaries


def test_verify_zero_uniform_target_gives_zero_never_accepts():
    """Regression, the fault class of vLLM PR #23803: with ``u * q <= p`` a draft token the
    target gives p = 0 is accepted when the uniform is exactly 0. It must be rejected, at
    the first position and after accepted ones, and the correction drawn from the residual."""
    q = torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    p = torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.0, 0.6, 0.4], [1.0, 0.0, 0.0]], dtype=torch.float64)
    drafts = torch.tensor([0, 1, 0])  # p = q for the first two, p = 0 for the third
    for first in range(3):
        rs = StubRandom([0.0] * (3 - first))
        n, nxt = verify(drafts[first:], q[first:], p[first:], random_source=rs)
        assert n == 2 - first, f"starting at {first}: a p = 0 token was accepted with u = 0"
        expected = reference_residual(p[2], q[2])
        assert torch.allclose(rs.rows[-1], expected, atol=ROW_ATOL, rtol=0)
        assert float(expected[nxt]) > 0


def test_verify_p_zero_rejected_even_when_u_times_q_underflows():
    """With q tiny, ``u * q`` underflows to 0 for small u; a p = 0 token still must not pass."""
    q = torch.tensor([[1e-300, 1.0 - 1e-300]], dtype=torch.float64)
    p = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    for u in (0.0, 1e-30, 1e-10):
        assert verify(torch.tensor([0]), q, p, random_source=StubRandom([u]))[0] == 0


def test_verify_tiny_q_positive_p_accepts_at_largest_uniform():
    """p / q >= 1 is accepted with probability 1: even at the largest uniform below 1."""
    q = torch.tensor([[1e-300, 1.0 - 1e-300]], dtype=torch.float64)
    p = torch.tensor([[1e-3, 1.0 - 1e-3], [1.0, 0.0]], dtype=torch.float64)
    assert verify(torch.tensor([0]), q, p, random_source=StubRandom([LARGEST_UNIFORM])) == (1, 0)


@pytest.mark.parametrize("p_tok,q_tok", [(0.25, 0.5), (0.375, 0.5), (0.125, 1.0), (0.5, 0.5), (0.75, 0.5)])
def test_verify_uniform_at_ratio_rejects_just_below_accepts(p_tok, q_tok):
    """Acceptance is ``u < p/q`` with u in [0, 1), so P(accept) = min(1, p/q) exactly: a uniform
    equal to p/q (exactly representable here) is rejected and the next float below is accepted.
    The ``<=`` fault class accepts at the ratio and adds one float step of acceptance mass."""
    q = torch.tensor([[q_tok, 1.0 - q_tok]], dtype=torch.float64)
    p = torch.tensor([[p_tok, 1.0 - p_tok], [0.0, 1.0]], dtype=torch.float64)
    ratio = p_tok / q_tok
    below = min(math.nextafter(ratio, 0.0), LARGEST_UNIFORM)
    assert verify(torch.tensor([0]), q, p, random_source=StubRandom([below]))[0] == 1
    if ratio < 1.0:
        assert verify(torch.tensor([0]), q, p, random_source=StubRandom([ratio]))[0] == 0
        assert verify(torch.tensor([0]), q, p, random_source=StubRandom([LARGEST_UNIFORM]))[0] == 0


@pytest.mark.slow
@given(speculative_rounds(), st.data())
def test_verify_any_round_and_uniforms_matches_exact_ratio_test(round_, data):
    """n_accepted = length of the leading run with ``u_i < p_i(x_i) / q_i(x_i)`` (exact
    arithmetic); the final token is drawn from the residual of the first rejected row, or
    from target row gamma when all are kept (Leviathan et al. 2023, Algorithm 1)."""
    drafts, q, p = round_
    gamma = drafts.shape[0]
    ps = [float(p[i, t]) for i, t in enumerate(drafts.tolist())]
    qs = [float(q[i, t]) for i, t in enumerate(drafts.tolist())]
    us = [data.draw(uniforms_around(a / b)) for a, b in zip(ps, qs)]
    # verify multiplies u * q in float64; skip the rare draws where that rounding alone
    # flips the comparison (one float step away from the boundary).
    assume(all((Fraction(u * b) < Fraction(a)) == exactly_accepted(u, a, b) for u, a, b in zip(us, ps, qs)))
    expected_n = next((i for i in range(gamma) if not exactly_accepted(us[i], ps[i], qs[i])), gamma)
    for i in range(gamma):
        mass = sum(max(0.0, a - b) for a, b in zip(p[i].tolist(), q[i].tolist()))
        assume(abs(mass - RESIDUAL_MASS_FLOOR) > 1e-12)  # the floor itself has its own test
    rs = StubRandom(us)
    n, nxt = verify(drafts, q, p, random_source=rs)
    assert n == expected_n
    expected_row = reference_residual(p[n], q[n]) if n < gamma else p[gamma]
    assert len(rs.rows) == 1 and torch.allclose(rs.rows[0], expected_row, atol=ROW_ATOL, rtol=0)
    assert float(expected_row[nxt]) > 0


# --------------------------------------------------------------------------- the residual at its floor


def test_residual_probs_mass_exactly_at_floor_returns_target():
    """Documented contract: residual mass at or below RESIDUAL_MASS_FLOOR falls back to p."""
    p = torch.tensor([RESIDUAL_MASS_FLOOR, 1.0 - RESIDUAL_MASS_FLOOR], dtype=torch.float64)
    q = torch.tensor([0.0, 1.0], dtype=torch.float64)
    diff_mass = float((p - q).clamp_min(0).sum())
    assert diff_mass == RESIDUAL_MASS_FLOOR  # the construction puts the mass exactly on the floor
    assert torch.equal(residual_probs(p, q), p)


def test_residual_probs_mass_just_above_floor_is_normalized_positive_part():
    """Above the floor the residual is max(0, p - q) / mass, not p (and not a softmax of it)."""
    eps = 2 * RESIDUAL_MASS_FLOOR
    p = torch.tensor([eps, 0.5 - eps, 0.5], dtype=torch.float64)
    q = torch.tensor([0.0, 0.5, 0.5], dtype=torch.float64)
    out = residual_probs(p, q)
    assert torch.allclose(out, reference_residual(p, q), atol=ROW_ATOL, rtol=0)
    assert out[0] == 1.0


def test_residual_probs_batched_rows_fall_back_independently():
    """The floor is per row: a p == q row returns p while its neighbour is normalized."""
    p = torch.tensor([[0.2, 0.8], [0.6, 0.4]], dtype=torch.float64)
    q = torch.tensor([[0.2, 0.8], [0.3, 0.7]], dtype=torch.float64)
    out = residual_probs(p, q)
    assert torch.equal(out[0], p[0])
    assert torch.allclose(out[1], reference_residual(p[1], q[1]), atol=ROW_ATOL, rtol=0)


def test_residual_probs_does_not_modify_inputs():
    p, q = torch.tensor([0.7, 0.3]), torch.tensor([0.4, 0.6])
    p0, q0 = p.clone(), q.clone()
    residual_probs(p, q)
    assert torch.equal(p, p0) and torch.equal(q, q0)


def test_verify_rejection_with_residual_below_floor_draws_from_target():
    """p and q differ by less than the floor: at the largest uniform the draft token (p < q)
    is rejected, and the correction is drawn from p itself, never from a NaN row."""
    q = torch.tensor([[0.5 + 1e-7, 0.5 - 1e-7]], dtype=torch.float64)
    p = torch.tensor([[0.5, 0.5], [1.0, 0.0]], dtype=torch.float64)
    rs = StubRandom([LARGEST_UNIFORM])
    n, _ = verify(torch.tensor([0]), q, p, random_source=rs)
    assert n == 0 and torch.equal(rs.rows[0], p[0])


# --------------------------------------------------------------------------- the random source seam


def test_verify_default_source_is_the_generator_stream():
    """``generator=g`` and ``random_source=TorchRandom(g)`` consume the same stream."""
    q = torch.full((3, 5), 0.2, dtype=torch.float64)
    p = torch.softmax(torch.arange(20, dtype=torch.float64).reshape(4, 5) / 7, dim=-1)
    drafts = torch.tensor([4, 0, 2])
    for seed in range(20):
        a = verify(drafts, q, p, generator=torch.Generator().manual_seed(seed))
        b = verify(drafts, q, p, random_source=TorchRandom(torch.Generator().manual_seed(seed)))
        assert a == b


def test_verify_gamma_zero_draws_from_target_row_zero():
    rs = StubRandom([])
    p = torch.tensor([[0.0, 0.25, 0.75]], dtype=torch.float64)
    assert verify(torch.zeros(0, dtype=torch.long), torch.zeros(0, 3, dtype=torch.float64), p,
                  random_source=rs) == (0, 1)
    assert torch.equal(rs.rows[0], p[0])


def test_verify_generator_and_random_source_together_raise():
    with pytest.raises(ValueError, match="generator or random_source"):
        verify(torch.tensor([0]), torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 0.0], [1.0, 0.0]]),
               generator=torch.Generator(), random_source=StubRandom([0.0]))


class _BadUniforms(StubRandom):
    def __init__(self, values):
        super().__init__()
        self.values = values

    def uniforms(self, n, device):
        return torch.tensor(self.values, dtype=torch.float64)


@pytest.mark.parametrize("values", [[1.0], [-0.25], [float("nan")], [0.5, 0.5], []])
def test_verify_uniforms_outside_unit_interval_or_wrong_count_raise(values):
    """A source returning u = 1 would reject a p = q token that must always pass: refused."""
    with pytest.raises(ValueError, match="random_source.uniforms"):
        verify(torch.tensor([0]), torch.tensor([[0.5, 0.5]]), torch.tensor([[0.5, 0.5], [1.0, 0.0]]),
               random_source=_BadUniforms(values))


# --------------------------------------------------------------------------- greedy: ties in the argmax


def _first_max(row: list[float]) -> int:
    return row.index(max(row))


@given(st.integers(0, 4).flatmap(lambda g: st.tuples(st.just(g), tied_logit_rows(g + 1))))
def test_verify_greedy_tied_logits_accepts_target_alone_choice(case):
    """With tied maxima the target alone (greedy) emits the first maximal index; drafts equal
    to that choice are all kept and the bonus is row gamma's first maximal index."""
    gamma, logits = case
    choice = [_first_max(r) for r in logits.tolist()]
    assert verify_greedy(torch.tensor(choice[:gamma], dtype=torch.long), logits) == (gamma, choice[gamma])


@given(st.integers(1, 4).flatmap(lambda g: st.tuples(st.just(g), tied_logit_rows(g + 1))), st.data())
def test_verify_greedy_any_drafts_match_one_hot_verify(case, data):
    """Greedy verification is :func:`verify` with one-hot p and q from the greedy filter
    (its docstring's claim), for any drafts and any uniforms, ties included."""
    gamma, logits = case
    vocab = logits.shape[-1]
    drafts = torch.tensor(data.draw(st.lists(st.integers(0, vocab - 1), min_size=gamma, max_size=gamma)))
    choice = [_first_max(r) for r in logits.tolist()]
    expected_n = next((i for i in range(gamma) if int(drafts[i]) != choice[i]), gamma)
    assert verify_greedy(drafts, logits) == (expected_n, choice[expected_n])
    p = sampling_probs(logits, SamplingConfig(0.0)).double()
    q = torch.nn.functional.one_hot(drafts, vocab).double()  # each draft token was drawn from its own q
    us = data.draw(st.lists(st.sampled_from([0.0, 0.5, LARGEST_UNIFORM]), min_size=gamma, max_size=gamma))
    assert verify(drafts, q, p, random_source=StubRandom(us)) == (expected_n, choice[expected_n])
