"""lab/entropy.py's documented contract where the property tests in test_entropy.py do not
reach: defaults, the dim argument on every function, messages that name what is wrong.
Expected values come from a float64 reference computed here from the definitions."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given

from lab.entropy import entropy, normalized_entropy, top_k_alternatives, varentropy
from tests.strategies import logit_batches

# float32 results against a float64 reference over <= 16 entries: 1e-5 absolute.
REF_ATOL = 1e-5


def reference(row: list[float]) -> tuple[float, float]:
    """(entropy in nats, varentropy in nats^2) of softmax(row), -inf entries contributing 0."""
    m = max(row)
    w = [math.exp(v - m) if v != float("-inf") else 0.0 for v in row]
    z = sum(w)
    p = [x / z for x in w]
    h = -sum(x * math.log(x) for x in p if x > 0)
    var = sum(x * (-math.log(x) - h) ** 2 for x in p if x > 0)
    return h, var


def test_top_k_alternatives_default_is_five():
    top = top_k_alternatives(torch.arange(10, dtype=torch.float32))
    assert top.token_ids.tolist() == [9, 8, 7, 6, 5]


@given(logit_batches(max_dims=3, max_side=3, max_vocab=6))
def test_entropy_family_any_dim_matches_reference_along_that_dim(x):
    """entropy / varentropy (bits, nats) / normalized entropy along every dim, including a
    non-last one, equal the definitions applied to each 1-D slice along that dim."""
    for dim in range(-x.dim(), x.dim()):
        moved = x.movedim(dim, -1)  # [..., n]
        flat = moved.reshape(-1, moved.shape[-1]).double().tolist()
        ref = [reference(r) for r in flat]
        n = moved.shape[-1]
        shape = moved.shape[:-1]
        h_nats = torch.tensor([r[0] for r in ref], dtype=torch.float64).reshape(shape)
        v_nats = torch.tensor([r[1] for r in ref], dtype=torch.float64).reshape(shape)
        ln2 = math.log(2.0)
        assert torch.allclose(entropy(x, dim=dim).double(), h_nats / ln2, atol=REF_ATOL)
        assert torch.allclose(entropy(x, dim=dim, unit="nats").double(), h_nats, atol=REF_ATOL)
        assert torch.allclose(varentropy(x, dim=dim).double(), v_nats / ln2 ** 2, atol=REF_ATOL * 10)
        assert torch.allclose(varentropy(x, dim=dim, unit="nats").double(), v_nats, atol=REF_ATOL * 10)
        norm = h_nats / math.log(n) if n > 1 else torch.zeros_like(h_nats)
        assert torch.allclose(normalized_entropy(x, dim=dim).double(), norm, atol=REF_ATOL)


@pytest.mark.parametrize("fn", [entropy, varentropy, normalized_entropy])
def test_entropy_masked_column_along_dim_zero_raises(fn):
    """With dim=0 a column of -inf is a row without a distribution; a row of -inf is not."""
    x = torch.zeros(3, 2)
    x[:, 1] = float("-inf")
    with pytest.raises(ValueError, match="entirely -inf"):
        fn(x, dim=0)
    y = torch.zeros(2, 3)
    y[1] = float("-inf")
    assert torch.isfinite(fn(y, dim=0)).all()


@pytest.mark.parametrize("bad,match", [
    ([1.0, 2.0], "floating-point tensor, got list$"),
    (torch.tensor([1, 2]), "floating-point tensor, got Tensor of dtype torch.int64"),
])
def test_entropy_non_float_logits_message_names_type_and_dtype(bad, match):
    with pytest.raises(ValueError, match=match):
        entropy(bad)


def test_normalized_entropy_single_entry_any_leading_shape_zero():
    x = torch.randn(3, 1, generator=torch.Generator().manual_seed(0))
    out = normalized_entropy(x)
    assert out.shape == (3,) and torch.equal(out, torch.zeros(3))


@pytest.mark.parametrize("n", [2, 7, 12, 19, 31, 32, 64, 1000])
def test_normalized_entropy_uniform_logits_is_one_not_above(n):
    """Uniform logits have H = log V exactly in theory; float32 rounding alone puts H / log V
    above 1 for many V (7, 12, 19, ...), and the documented range [0, 1] must still hold."""
    out = normalized_entropy(torch.zeros(n))
    assert float(out) <= 1.0 and math.isclose(float(out), 1.0, rel_tol=1e-6)


def test_top_k_alternatives_last_dim_as_positive_index_equals_minus_one():
    """``dim`` may name the last dimension either way (``-1`` or ``ndim - 1``)."""
    x = torch.randn(3, 7, generator=torch.Generator().manual_seed(1))
    a, b = top_k_alternatives(x, 3, dim=1), top_k_alternatives(x, 3, dim=-1)
    assert torch.equal(a.token_ids, b.token_ids) and torch.equal(a.probs, b.probs)
    assert torch.equal(a.token_ids, x.softmax(-1).topk(3, dim=-1).indices)


@pytest.mark.parametrize("fn", [entropy, varentropy, normalized_entropy])
@pytest.mark.parametrize("shape", [(4,), (2, 4)])
def test_entropy_dim_equal_to_ndim_raises_value_error_naming_it(fn, shape):
    """The first out-of-range dim (``dim == ndim``) is a ValueError, not an IndexError."""
    with pytest.raises(ValueError, match=f"dim={len(shape)}"):
        fn(torch.zeros(shape), dim=len(shape))
