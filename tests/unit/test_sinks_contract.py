"""lab/sinks.py through its public functions only: the strict thresholds of sink_rate and
context_health, their free parameters, one-line errors that name the argument, and
observer_matched_z against a reference written from its docstring."""

from __future__ import annotations

import math
import re
import statistics

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from lab.sinks.scores import (MAD_FLOOR, MIN_BIN_POSITIONS, OBSERVER_BIN_RATIO, attention_received, context_health,
                       observer_matched_z, robust_z, sink_rate)

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


@pytest.mark.parametrize("bad,match", [([0.0, 5.0], "^content_scores"), (torch.zeros(2, 2), "^content_scores"),
                                       (torch.tensor([1, 2]), "^content_scores"),
                                       (torch.tensor([0.0, float("nan")]), "^content_scores contains NaN$")])
def test_context_health_bad_content_z_raises_naming_it(bad, match):
    with pytest.raises(ValueError, match=match):
        context_health(bad, 3.5)


# --------------------------------------------------------------------------- robust_z / attention_received errors


@pytest.mark.parametrize("values,kwargs,match", [
    ([1.0, 2.0], {}, "values must be a non-empty 1-D tensor, got list"),
    (torch.ones(2, 2), {}, r"values must be a non-empty 1-D tensor, got \(2, 2\)"),
    (torch.ones(0), {}, r"got \(0,\)"),
    (torch.tensor([1, 2]), {}, "floating point"),
    (torch.tensor([1.0, -1.0]), {}, "^values must be finite and non-negative$"),
    (torch.tensor([1.0, float("inf")]), {}, "^values must be finite"),
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


# --------------------------------------------------------------------------- observer_matched_z

# Both sides compute in float64 on logs of magnitude <= ~70, divided by a spread >= 0.01:
# the two interpolation formulas differ by rounding only.
OBSERVER_Z_ATOL = 1e-8
# scipy's normal-consistent MAD scale, 1 / Phi^-1(3/4).
MAD_NORMAL_SCALE = 1.0 / statistics.NormalDist().inv_cdf(0.75)


def reference_observer_matched_z(values: list[float], exclude: list[int], bin_ratio: float, min_bin: int,
                                 mad_floor: float) -> list[float]:
    """observer_matched_z written out from its docstring, one position at a time.

    Key k of S is seen by n_k = S - k queries. Baseline positions B (not excluded) fall in
    bins [n0 r^j, n0 r^(j+1)) by n, i.e. log n >= log n0 + j log r; walking the bins from
    the smallest n, a group closes once it holds >= min_bin positions, and a short last
    group joins the one before. Each group gives (median log n, median log v); the
    baseline c(log n) is linear between those points and, past either end, the larger of
    the end value and the end segment's line. z = robust log-MAD z of log v - c."""
    s = len(values)
    logv = [math.log(max(v, 1e-30)) for v in values]
    logn = [math.log(s - k) for k in range(s)]
    dropped = {p % s for p in exclude}
    base = sorted((k for k in range(s) if k not in dropped), key=lambda k: s - k)  # by n, ascending
    x0, lr = logn[base[0]], math.log(bin_ratio)

    def bin_of(k: int) -> int:
        j = 0
        while logn[k] >= x0 + lr * (j + 1):
            j += 1
        return j

    groups, current = [], []
    for j in range(bin_of(base[-1]) + 1):
        current += [k for k in base if bin_of(k) == j]
        if len(current) >= min_bin:
            groups.append(current)
            current = []
    if current:
        if groups:
            groups[-1] = groups[-1] + current
        else:
            groups.append(current)
    px = [statistics.median(logn[k] for k in g) for g in groups]
    py = [statistics.median(logv[k] for k in g) for g in groups]

    def line(i: int, t: float) -> float:  # through (px[i], py[i]) and (px[i + 1], py[i + 1])
        return py[i] + (t - px[i]) * (py[i + 1] - py[i]) / (px[i + 1] - px[i])

    def c(t: float) -> float:
        if len(px) == 1:
            return py[0]
        if t < px[0]:
            return max(py[0], line(0, t))
        if t > px[-1]:
            return max(py[-1], line(len(px) - 2, t))
        i = max(i for i in range(len(px)) if px[i] <= t)
        return py[i] if i == len(px) - 1 else line(i, t)

    resid = [logv[k] - c(logn[k]) for k in range(s)]
    med = statistics.median(resid[k] for k in base)
    mad = MAD_NORMAL_SCALE * statistics.median(abs(resid[k] - med) for k in base)
    return [(r - med) / max(mad, mad_floor) for r in resid]


@st.composite
def received_with_zeros(draw) -> list[float]:
    """Received-attention-like values: log-uniform noise on a power law in n_k, some exactly 0 (softmax underflow)."""
    s = draw(st.integers(2, 260))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    noise = torch.rand(s, generator=g, dtype=torch.float64) * -draw(st.floats(0.0, 8.0))
    trend = draw(st.floats(-1.5, 1.5)) * torch.arange(s, 0, -1, dtype=torch.float64).log()  # b log n_k, either sign
    logs = noise + trend - 2.0
    v = logs.exp()
    v[torch.rand(s, generator=g) < draw(st.sampled_from([0.0, 0.05]))] = 0.0
    return v.tolist()


@pytest.mark.slow
@given(received_with_zeros(), st.data(), st.floats(1.05, 4.0), st.integers(1, 40), st.floats(0.01, 1.0))
def test_observer_matched_z_any_settings_match_reference(values, data, bin_ratio, min_bin, mad_floor):
    """observer_matched_z equals its definition (binning, merging, interpolation, extrapolation, MAD),
    for any exclusion, bin width, bin size and MAD floor; float64 in, float64 out."""
    s = len(values)
    exclude = data.draw(st.lists(st.integers(-s, s - 1), max_size=s // 2))
    assume(len({p % s for p in exclude}) < s)
    z = observer_matched_z(torch.tensor(values, dtype=torch.float64), exclude, bin_ratio=bin_ratio,
                           min_bin=min_bin, mad_floor=mad_floor)
    assert z.dtype == torch.float64
    expected = torch.tensor(reference_observer_matched_z(values, exclude, bin_ratio, min_bin, mad_floor),
                            dtype=torch.float64)
    torch.testing.assert_close(z, expected, atol=OBSERVER_Z_ATOL, rtol=0)


@given(received_with_zeros())
def test_observer_matched_z_defaults_and_float32_match_reference(values):
    """Defaults are OBSERVER_BIN_RATIO, MIN_BIN_POSITIONS, MAD_FLOOR; float32 in gives float32 out."""
    z = observer_matched_z(torch.tensor(values, dtype=torch.float32))
    assert z.dtype == torch.float32
    values32 = torch.tensor(values, dtype=torch.float32).double().tolist()
    expected = reference_observer_matched_z(values32, [], OBSERVER_BIN_RATIO, MIN_BIN_POSITIONS, MAD_FLOOR)
    torch.testing.assert_close(z.double(), torch.tensor(expected, dtype=torch.float64), atol=1e-4, rtol=0)


def test_observer_matched_z_bool_mask_exclude_equals_index_exclude():
    values = torch.rand(120, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 0.01
    mask = torch.zeros(120, dtype=torch.bool)
    mask[[0, 7, 119]] = True
    assert torch.equal(observer_matched_z(values, mask), observer_matched_z(values, [0, 7, 119]))


def test_observer_matched_z_min_bin_one_is_valid_and_matches_reference():
    """min_bin = 1 (every nonempty octave its own bin) is the documented lower bound, not an error."""
    values = (torch.rand(90, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * -6.0).exp()
    expected = reference_observer_matched_z(values.tolist(), [], OBSERVER_BIN_RATIO, 1, MAD_FLOOR)
    torch.testing.assert_close(observer_matched_z(values, min_bin=1), torch.tensor(expected, dtype=torch.float64),
                               atol=OBSERVER_Z_ATOL, rtol=0)


def test_observer_matched_z_late_keys_excluded_short_last_group_matches_reference():
    """With the latest keys excluded, the fewest observers n0 is > 1 and the octaves start at n0;
    a last group shorter than min_bin still joins the one before (here: one group, robust_z's baseline)."""
    values = (torch.rand(100, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * -6.0).exp()
    exclude = [97, 98, 99]  # n0 = 4: octaves [4, 8), [8, 16), [16, 32), [32, 64), [64, 128) hold 4, 8, 16, 32, 37
    expected = reference_observer_matched_z(values.tolist(), exclude, 2.0, 40, MAD_FLOOR)
    torch.testing.assert_close(observer_matched_z(values, exclude, bin_ratio=2.0, min_bin=40),
                               torch.tensor(expected, dtype=torch.float64), atol=OBSERVER_Z_ATOL, rtol=0)
    torch.testing.assert_close(observer_matched_z(values, exclude, bin_ratio=2.0, min_bin=40),
                               robust_z(values, exclude), atol=OBSERVER_Z_ATOL, rtol=0)


def test_attention_received_stays_on_the_input_device():
    """No tensor is made on the default device: a meta-device input (shapes only) gives a meta output."""
    out = attention_received(torch.empty(2, 5, 5, device="meta"))
    assert out.device.type == "meta" and out.shape == (2, 5)
