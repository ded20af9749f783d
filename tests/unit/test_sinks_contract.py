"""lab/sinks.py through its public functions only (the baseline is being reworked, so nothing
here depends on how robust_z builds it): the strict thresholds of sink_rate and
context_health, their free parameters, and one-line errors that name the argument."""

from __future__ import annotations

import math
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.sinks import attention_received, context_health, robust_z, sink_rate

# context_health works in float64 on float32 z-scores: 1e-9 relative is rounding only.
HEALTH_RTOL = 1e-9


def reference_health(z: list[float], threshold: float, severity_scale: float, rate: float) -> float:
    """health = 10 exp(-rate * (1/N) sum_{z > threshold} (1 + (z - threshold) / severity_scale)),
    with ``z > threshold`` decided in float32, the z-scores' dtype (as the detector decides it)."""
    if not z:
        return 10.0
    threshold32 = float(torch.tensor(threshold, dtype=torch.float32))
    penalty = sum(1.0 + (v - threshold) / severity_scale for v in z if v > threshold32) / len(z)
    return 10.0 * math.exp(-rate * penalty)


# --------------------------------------------------------------------------- sink_rate


def test_sink_rate_head_exactly_at_epsilon_is_not_a_sink():
    """Gu et al.: a head counts when the score *exceeds* epsilon; exactly epsilon does not."""
    received = torch.tensor([[[0.25, 0.5]], [[0.25, 0.25]]])  # [L=2, H=1, S=2], exact in float32
    assert sink_rate(received, epsilon=0.25).tolist() == [0.0, 0.5]


@pytest.mark.parametrize("bad,shown", [([[[0.5]]], "list"), (torch.zeros(2, 3), "(2, 3)"),
                                       (torch.zeros(1, 1, 2, dtype=torch.long), "(1, 1, 2)")])
def test_sink_rate_bad_received_message_shows_shape_or_type(bad, shown):
    with pytest.raises(ValueError, match=r"received must be a float tensor \[L, H, S\], got " + re.escape(shown)):
        sink_rate(bad)


# --------------------------------------------------------------------------- context_health


@given(st.lists(st.floats(-5.0, 20.0, allow_nan=False, allow_subnormal=False, width=32), max_size=30),
       st.floats(0.0, 6.0), st.floats(0.1, 5.0), st.floats(0.1, 20.0))
def test_context_health_any_parameters_match_formula(z, threshold, severity_scale, rate):
    """The documented formula, for any threshold and any positive severity_scale and rate."""
    got = context_health(torch.tensor(z, dtype=torch.float32), threshold, severity_scale=severity_scale, rate=rate)
    z32 = torch.tensor(z, dtype=torch.float32).tolist()  # the z-scores as the function sees them
    want = reference_health(z32, threshold, severity_scale, rate)
    assert math.isclose(got, want, rel_tol=HEALTH_RTOL, abs_tol=1e-12)


def test_context_health_z_exactly_at_threshold_is_not_a_sink():
    """A content position is a sink only when z > threshold."""
    assert context_health(torch.tensor([3.5, 0.0, 1.0]), 3.5) == 10.0
    assert context_health(torch.tensor([3.5 + 2 ** -20, 0.0, 1.0]), 3.5) < 10.0


@pytest.mark.parametrize("kwargs,arg", [
    (dict(severity_scale=0.0), "severity_scale"), (dict(severity_scale=-1.0), "severity_scale"),
    (dict(rate=0.0), "rate"), (dict(rate=float("nan")), "rate"), (dict(threshold=float("inf")), "threshold"),
    (dict(threshold=float("nan")), "threshold"),
])
def test_context_health_nonpositive_or_nonfinite_parameter_raises_naming_it(kwargs, arg):
    kw = dict(threshold=3.5) | kwargs
    threshold = kw.pop("threshold")
    with pytest.raises(ValueError, match=arg):
        context_health(torch.tensor([0.0, 5.0]), threshold, **kw)


@pytest.mark.parametrize("bad,match", [([0.0, 5.0], "content_z"), (torch.zeros(2, 2), "content_z"),
                                       (torch.tensor([1, 2]), "content_z"),
                                       (torch.tensor([0.0, float("nan")]), "content_z contains NaN")])
def test_context_health_bad_content_z_raises_naming_it(bad, match):
    with pytest.raises(ValueError, match=match):
        context_health(bad, 3.5)


# --------------------------------------------------------------------------- robust_z / attention_received errors


@pytest.mark.parametrize("values,kwargs,match", [
    ([1.0, 2.0], {}, "values must be a non-empty 1-D tensor, got list"),
    (torch.ones(2, 2), {}, r"values must be a non-empty 1-D tensor, got \(2, 2\)"),
    (torch.ones(0), {}, r"got \(0,\)"),
    (torch.tensor([1, 2]), {}, "floating point"),
    (torch.tensor([1.0, -1.0]), {}, "non-negative"),
    (torch.tensor([1.0, float("inf")]), {}, "finite"),
    (torch.ones(3), dict(mad_floor=0.0), "mad_floor"),
    (torch.ones(3), dict(exclude=[0, 1, 2]), "exclude"),
    (torch.ones(3), dict(exclude=[3]), r"position 3, outside \[0, 3\)"),
    (torch.ones(3), dict(exclude=torch.zeros(2, dtype=torch.bool)), r"exclude mask has shape \(2,\), expected \(3,\)"),
])
def test_robust_z_bad_input_raises_naming_it(values, kwargs, match):
    with pytest.raises(ValueError, match=match):
        robust_z(values, **kwargs)


@pytest.mark.parametrize("bad,match", [([[1.0]], "got list"), (torch.ones(2, 3), r"got \(2, 3\)"),
                                       (torch.ones(0, 0), r"got \(0, 0\)"), (torch.ones(2, 2, dtype=torch.long), "floating")])
def test_attention_received_bad_input_raises_naming_it(bad, match):
    with pytest.raises(ValueError, match=match):
        attention_received(bad)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_attention_received_half_input_computed_and_returned_in_float32(dtype):
    """Half-precision attention is summed in float32 (a long column of small fp16 values
    loses mass otherwise) and returned as float32, as documented."""
    s = 5
    attn = torch.tril(torch.ones(s, s)) / torch.arange(1, s + 1).unsqueeze(-1)  # uniform causal rows
    out = attention_received(attn.to(dtype))
    ref = attention_received(attn.to(dtype).float())
    assert out.dtype == torch.float32 and torch.equal(out, ref)


def test_attention_received_empty_leading_dimension_kept():
    """Leading dimensions are kept even when one is empty (no heads selected)."""
    assert attention_received(torch.zeros(2, 0, 3, 3)).shape == (2, 0, 3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_robust_z_half_input_returns_float32_equal_to_float32_input(dtype):
    """Documented: float32 z-scores for non-float64 input (logs of fp16 values lose ~3 digits)."""
    values = torch.tensor([0.9, 0.01, 0.02, 0.015, 0.03, 0.012], dtype=dtype)
    z = robust_z(values)
    assert z.dtype == torch.float32 and torch.equal(z, robust_z(values.float()))


def test_robust_z_exclude_as_int_tensor_or_negative_index_equals_list():
    """``exclude`` accepts ints (negative ones count from the end, -S included) or an int tensor."""
    values = torch.tensor([0.9, 0.01, 0.02, 0.015, 0.03, 0.2])
    s = values.numel()
    by_list = robust_z(values, exclude=[0, 5])
    assert torch.equal(robust_z(values, exclude=torch.tensor([0, 5])), by_list)
    assert torch.equal(robust_z(values, exclude=[-s, -1]), by_list)
