"""Properties of lab.entropy: each test's docstring states the property it checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.entropy import entropy, normalized_entropy, top_k_alternatives, varentropy
from tests.strategies import (
    LOGIT_BOUND,
    fp16_extreme_logit_vectors,
    half_dtypes,
    logit_batches,
    logit_vectors,
    masked_logit_vectors,
    vocab_sizes,
)

# Entropy sums V float32 terms of size <= ~log2 V; pairwise summation keeps the
# absolute error far below 1e-4 bits for V <= 4096 (float32 eps 1.2e-7 x ~12 bits x log V).
ENTROPY_ATOL_BITS = 1e-4
# Varentropy squares surprisals up to ~2 x LOGIT_BOUND / ln 2 ~ 144 bits, so its
# float32 rounding is larger in absolute terms.
VARENTROPY_ATOL_BITS2 = 1e-3
# A "huge margin" one-hot: every other entry is this many nats below the winner,
# so its probability e^-200 underflows float32 to exactly 0.
ONE_HOT_MARGIN = 200.0
# Half-precision input is cast once to float32; the results must agree with a
# float32 computation on the same (already rounded) values to float32 rounding.
HALF_ATOL_BITS = 1e-5


def _reference_entropy_bits(logits: torch.Tensor) -> float:
    """Independent float64 reference through scipy.stats.entropy (0 log 0 = 0)."""
    x = logits.double().numpy()
    finite = np.isfinite(x)
    p = np.zeros_like(x)
    z = x[finite] - x[finite].max()
    p[finite] = np.exp(z) / np.exp(z).sum()
    return float(scipy.stats.entropy(p, base=2))


# --------------------------------------------------------------------------- bounds


@given(logit_vectors())
def test_entropy_any_logits_between_zero_and_log2_v(x):
    """0 <= H(softmax(x)) <= log2 V."""
    h = entropy(x).item()
    assert 0.0 <= h <= math.log2(len(x)) + ENTROPY_ATOL_BITS


@given(logit_vectors())
def test_entropy_any_logits_matches_scipy_reference(x):
    """H(softmax(x)) in bits equals scipy.stats.entropy(p, base=2) computed in float64."""
    assert entropy(x).item() == pytest.approx(_reference_entropy_bits(x), abs=ENTROPY_ATOL_BITS)


@given(logit_vectors())
def test_entropy_nats_unit_is_bits_times_ln2(x):
    """H in nats = H in bits x ln 2."""
    assert entropy(x, unit="nats").item() == pytest.approx(entropy(x).item() * math.log(2), abs=ENTROPY_ATOL_BITS)


@given(vocab_sizes(), st.floats(-LOGIT_BOUND, LOGIT_BOUND, allow_nan=False, allow_subnormal=False))
def test_entropy_uniform_logits_equals_log2_v(v, c):
    """Uniform logits (all equal to c) over V entries give exactly log2 V bits."""
    x = torch.full((v,), c, dtype=torch.float32)
    assert entropy(x).item() == pytest.approx(math.log2(v), abs=ENTROPY_ATOL_BITS)


@given(st.integers(1, 64), st.data())
def test_entropy_one_finite_entry_rest_masked_is_zero(v, data):
    """A single finite logit with every other entry -inf is a point mass: H = 0, no NaN."""
    i = data.draw(st.integers(0, v - 1))
    x = torch.full((v,), float("-inf"))
    x[i] = data.draw(st.floats(-LOGIT_BOUND, LOGIT_BOUND, allow_nan=False, allow_subnormal=False))
    assert entropy(x).item() == 0.0
    assert varentropy(x).item() == 0.0
    assert normalized_entropy(x).item() == 0.0


@given(logit_vectors(min_size=2), st.data())
def test_entropy_huge_margin_winner_is_zero(x, data):
    """One logit ONE_HOT_MARGIN nats above all others gives H = 0 (to float32 rounding)."""
    i = data.draw(st.integers(0, len(x) - 1))
    y = x.clone()
    y[i] = x.max() + ONE_HOT_MARGIN
    assert entropy(y).item() == pytest.approx(0.0, abs=ENTROPY_ATOL_BITS)


# --------------------------------------------------------------------------- invariances


@given(logit_vectors(), st.randoms(use_true_random=False))
def test_entropy_permuted_entries_unchanged(x, rnd):
    """H, varentropy and normalized H do not depend on the order of the entries."""
    perm = list(range(len(x)))
    rnd.shuffle(perm)
    y = x[torch.tensor(perm)]
    assert entropy(y).item() == pytest.approx(entropy(x).item(), abs=ENTROPY_ATOL_BITS)
    assert varentropy(y).item() == pytest.approx(varentropy(x).item(), abs=VARENTROPY_ATOL_BITS2)
    assert normalized_entropy(y).item() == pytest.approx(normalized_entropy(x).item(), abs=ENTROPY_ATOL_BITS)


@given(logit_vectors(), st.floats(-LOGIT_BOUND, LOGIT_BOUND, allow_nan=False, allow_subnormal=False))
def test_entropy_constant_added_to_all_logits_unchanged(x, c):
    """softmax(x + c) = softmax(x), so H(x + c) = H(x) and V(x + c) = V(x)."""
    assert entropy(x + c).item() == pytest.approx(entropy(x).item(), abs=ENTROPY_ATOL_BITS)
    assert varentropy(x + c).item() == pytest.approx(varentropy(x).item(), abs=VARENTROPY_ATOL_BITS2)


@given(logit_vectors(), st.integers(1, 16))
def test_entropy_masked_entries_appended_ignored(x, n_masked):
    """Appending -inf entries leaves H and varentropy unchanged and never yields NaN."""
    y = torch.cat([x, torch.full((n_masked,), float("-inf"))])
    h, v = entropy(y), varentropy(y)
    assert not torch.isnan(h) and not torch.isnan(v)
    assert h.item() == pytest.approx(entropy(x).item(), abs=ENTROPY_ATOL_BITS)
    assert v.item() == pytest.approx(varentropy(x).item(), abs=VARENTROPY_ATOL_BITS2)


@given(masked_logit_vectors())
def test_entropy_masked_logits_finite_and_match_reference(x):
    """With any (not total) -inf mask every statistic is finite and H matches scipy."""
    for f in (entropy, varentropy, normalized_entropy):
        assert torch.isfinite(f(x)).all()
    assert entropy(x).item() == pytest.approx(_reference_entropy_bits(x), abs=ENTROPY_ATOL_BITS)


@given(masked_logit_vectors())
def test_normalized_entropy_masked_logits_scaled_by_full_v(x):
    """Normalized H divides by log2 of ALL entries (masked included), the same scale at every step."""
    expected = entropy(x).item() / math.log2(len(x))
    assert normalized_entropy(x).item() == pytest.approx(expected, abs=ENTROPY_ATOL_BITS)


# --------------------------------------------------------------------------- varentropy, normalized


@given(logit_vectors())
def test_varentropy_any_logits_nonnegative(x):
    """V(p) = sum p (-log p - H)^2 >= 0."""
    assert varentropy(x).item() >= 0.0


@given(logit_vectors())
def test_varentropy_any_logits_matches_float64_reference(x):
    """Varentropy equals the variance of the surprisal -log2 p under p, computed in float64."""
    log_p = torch.log_softmax(x.double(), dim=-1)
    p = log_p.exp()
    surprisal_bits = torch.where(p > 0, -log_p / math.log(2), torch.zeros_like(log_p))
    h = (p * surprisal_bits).sum()
    expected = (p * (surprisal_bits - h) ** 2).sum().item()
    assert varentropy(x).item() == pytest.approx(expected, abs=VARENTROPY_ATOL_BITS2, rel=1e-4)


@given(vocab_sizes(), st.floats(-LOGIT_BOUND, LOGIT_BOUND, allow_nan=False, allow_subnormal=False))
def test_varentropy_uniform_logits_zero(v, c):
    """Every token of a uniform distribution is equally surprising: varentropy = 0."""
    assert varentropy(torch.full((v,), c)).item() == pytest.approx(0.0, abs=VARENTROPY_ATOL_BITS2)


@given(logit_vectors())
def test_normalized_entropy_any_logits_in_unit_interval(x):
    """0 <= H / log2 V <= 1, and it equals H / log2 V for V > 1."""
    n = normalized_entropy(x).item()
    assert 0.0 <= n <= 1.0
    if len(x) > 1:
        assert n == pytest.approx(entropy(x).item() / math.log2(len(x)), abs=ENTROPY_ATOL_BITS)


def test_normalized_entropy_single_entry_zero():
    """V = 1 has no uncertainty: normalized entropy 0 (not 0/0)."""
    assert normalized_entropy(torch.tensor([3.0])).item() == 0.0


# --------------------------------------------------------------------------- dtypes


@given(logit_vectors(bound=20.0), half_dtypes())
def test_entropy_half_input_computed_in_float32(x, dtype):
    """fp16/bf16 logits give float32 results equal to the float32 computation on the same values."""
    y = x.to(dtype)
    for f in (entropy, varentropy, normalized_entropy):
        out = f(y)
        assert out.dtype == torch.float32
        assert out.item() == pytest.approx(f(y.float()).item(), abs=HALF_ATOL_BITS)


def test_entropy_float64_input_stays_float64():
    """float64 input is not downcast."""
    assert entropy(torch.randn(10, dtype=torch.float64)).dtype == torch.float64


@given(fp16_extreme_logit_vectors())
def test_entropy_fp16_extremes_stay_finite(x):
    """Logits at the fp16 limits +-65504 give finite H in [0, log2 V] and finite varentropy."""
    h, v = entropy(x), varentropy(x)
    assert torch.isfinite(h) and torch.isfinite(v)
    assert 0.0 <= h.item() <= math.log2(len(x)) + ENTROPY_ATOL_BITS


def test_entropy_fp16_max_and_min_is_point_mass():
    """[65504, -65504] in fp16: the second entry has probability 0, so H = 0 exactly."""
    x = torch.tensor([65504.0, -65504.0], dtype=torch.float16)
    assert entropy(x).item() == 0.0


# --------------------------------------------------------------------------- shapes


@given(logit_batches())
def test_entropy_batched_logits_drop_reduced_dim_keep_leading(x):
    """Shape [*lead, V] -> [*lead], each entry the entropy of its own row."""
    for f in (entropy, varentropy, normalized_entropy):
        out = f(x)
        assert out.shape == x.shape[:-1]
    flat = x.reshape(-1, x.shape[-1])
    rows = torch.stack([entropy(r) for r in flat]).reshape(x.shape[:-1])
    assert torch.allclose(entropy(x), rows, atol=ENTROPY_ATOL_BITS)


def test_entropy_dim_argument_reduces_that_dim():
    """dim=0 on [V, B] equals dim=-1 on the transpose [B, V]."""
    x = torch.randn(7, 3, generator=torch.Generator().manual_seed(0))
    assert entropy(x, dim=0).shape == (3,)
    assert torch.allclose(entropy(x, dim=0), entropy(x.T, dim=-1))
    assert torch.allclose(varentropy(x, dim=0), varentropy(x.T, dim=-1))
    assert torch.allclose(normalized_entropy(x, dim=0), normalized_entropy(x.T, dim=-1))


def test_entropy_input_not_mutated():
    """The functions return new tensors and leave their input as it was."""
    x = torch.tensor([1.0, float("-inf"), 2.0])
    before = x.clone()
    entropy(x), varentropy(x), normalized_entropy(x), top_k_alternatives(x, 2)
    assert torch.equal(x, before)


# --------------------------------------------------------------------------- top-k


@given(logit_vectors(), st.integers(1, 80))
def test_top_k_alternatives_descending_probs_of_their_ids(x, k):
    """Top-k probabilities are descending, min(k, V) long, and equal softmax(x) at their ids."""
    top = top_k_alternatives(x, k)
    n = min(k, len(x))
    assert top.token_ids.shape == (n,) and top.probs.shape == (n,)
    assert top.token_ids.dtype == torch.int64 and top.probs.dtype == torch.float32
    assert torch.all(top.probs[:-1] >= top.probs[1:])
    p = torch.softmax(x.float(), dim=-1)
    assert torch.allclose(top.probs, p[top.token_ids])
    assert top.probs.sum().item() <= 1.0 + 1e-5


@given(logit_vectors(min_size=2))
def test_top_k_alternatives_first_is_argmax_prob(x):
    """The first alternative has the largest probability."""
    top = top_k_alternatives(x, 1)
    assert top.probs[0].item() == pytest.approx(torch.softmax(x, -1).max().item())


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("fn", [entropy, varentropy, normalized_entropy])
@pytest.mark.parametrize("bad, match", [
    (torch.tensor([1, 2, 3]), "floating-point"),
    ([1.0, 2.0], "floating-point"),
    (torch.tensor([1.0, float("nan")]), "NaN"),
    (torch.tensor([1.0, float("inf")]), r"\+inf"),
    (torch.tensor([float("-inf"), float("-inf")]), "entirely -inf"),
    (torch.empty(0), "no entries"),
])
def test_entropy_bad_logits_raise_value_error(fn, bad, match):
    """Invalid logits raise ValueError with a message saying what is wrong."""
    with pytest.raises(ValueError, match=match):
        fn(bad)


@pytest.mark.parametrize("fn", [entropy, varentropy])
def test_entropy_unknown_unit_raises_naming_it(fn):
    with pytest.raises(ValueError, match="unit='dits'"):
        fn(torch.zeros(3), unit="dits")


def test_entropy_one_masked_row_in_batch_raises():
    """A batch where one row is entirely -inf raises (that row has no distribution)."""
    x = torch.zeros(2, 3)
    x[1] = float("-inf")
    with pytest.raises(ValueError, match="entirely -inf"):
        entropy(x)


@pytest.mark.parametrize("k", [0, -1, 1.5, None])
def test_top_k_alternatives_bad_k_raises_naming_it(k):
    with pytest.raises(ValueError, match=f"k={k!r}"):
        top_k_alternatives(torch.zeros(4), k)


def test_top_k_alternatives_dim_not_last_raises():
    with pytest.raises(ValueError, match="dim=0"):
        top_k_alternatives(torch.zeros(4, 3), 2, dim=0)


@pytest.mark.parametrize("fn", [entropy, varentropy, normalized_entropy])
@pytest.mark.parametrize("logits, dim", [(torch.zeros(3), 2), (torch.zeros(2, 3), -3), (torch.tensor(1.0), -1)])
def test_entropy_dim_out_of_range_raises_value_error(fn, logits, dim):
    """Regression (fault class: bad argument surfacing as IndexError): a dim outside the
    tensor, or a 0-d tensor, raises ValueError naming dim."""
    with pytest.raises(ValueError, match=f"dim={dim}"):
        fn(logits, dim=dim)


def test_top_k_alternatives_bool_k_raises_value_error():
    """Regression (fault class: bool accepted as int): k=True raised TypeError inside topk."""
    with pytest.raises(ValueError, match="k=True"):
        top_k_alternatives(torch.zeros(4), True)


def test_top_k_alternatives_non_tensor_raises_value_error():
    """Regression (fault class: AttributeError before validation): a list raises ValueError."""
    with pytest.raises(ValueError, match="floating-point tensor"):
        top_k_alternatives([1.0, 2.0], 1)
