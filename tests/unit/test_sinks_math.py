"""Properties of the sink math in lab/sinks.py (no model).

Strategies are kept at the top of this file (tests/strategies.py belongs to the
entropy part); each is named after what it produces.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from lab.sinks.scores import (MAD_FLOOR, MIN_BIN_POSITIONS, attention_received, context_health, observer_matched_z,
                       robust_z, sink_rate)

# float32 sums of <= 64 terms of size <= 1: rounding stays below 1e-5.
SUM_ATOL = 1e-5
# robust_z is computed in float32 on logs of magnitude <= ~70: 1e-4 absolute.
Z_ATOL = 1e-4
MAX_S = 24


# --------------------------------------------------------------------------- strategies


@st.composite
def causal_attention(draw, max_s: int = MAX_S, lead: tuple[int, ...] = ()) -> torch.Tensor:
    """A random causal attention matrix ``[*lead, S, S]``: rows sum to 1, zero above the diagonal."""
    s = draw(st.integers(1, max_s))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(*lead, s, s, generator=g) * draw(st.floats(0.1, 8.0))
    mask = torch.ones(s, s, dtype=torch.bool).triu(1)
    return logits.masked_fill(mask, float("-inf")).softmax(dim=-1)


@st.composite
def positive_vectors(draw, min_size: int = 2, max_size: int = 40) -> torch.Tensor:
    """A float64 vector of positive values spanning several orders of magnitude (received-attention-like)."""
    logs = draw(st.lists(st.floats(-12.0, 0.0, allow_nan=False, allow_subnormal=False),
                         min_size=min_size, max_size=max_size))
    return torch.tensor(logs, dtype=torch.float64).exp()


def z_scores(min_size: int = 1, max_size: int = 40):
    """A float32 vector of finite z-scores in [-10, 30]."""
    return st.lists(st.floats(-10.0, 30.0, allow_nan=False, allow_subnormal=False, width=32),
                    min_size=min_size, max_size=max_size).map(lambda v: torch.tensor(v, dtype=torch.float32))


# --------------------------------------------------------------------------- attention_received


def _harmonic(n: int) -> float:
    return sum(1.0 / j for j in range(1, n + 1))


@pytest.mark.parametrize("s", [1, 2, 7, 50])
def test_attention_received_uniform_causal_matches_harmonic_closed_form(s):
    """Uniform causal attention A[i, k] = 1/(i+1) gives alpha_k = (H_S - H_k) / (S - k)."""
    i = torch.arange(s, dtype=torch.float64)
    attn = torch.tril(torch.ones(s, s, dtype=torch.float64)) / (i[:, None] + 1)
    expected = torch.tensor([(_harmonic(s) - _harmonic(k)) / (s - k) for k in range(s)], dtype=torch.float64)
    torch.testing.assert_close(attention_received(attn), expected, atol=1e-12, rtol=0)


@given(causal_attention(lead=(2, 3)))
def test_attention_received_leading_dims_kept_and_match_per_matrix(attn):
    """Output is [..., S]; each leading slice equals the score of its own matrix."""
    out = attention_received(attn)
    assert out.shape == attn.shape[:-1]
    torch.testing.assert_close(out[1, 2], attention_received(attn[1, 2]))


@given(causal_attention())
def test_attention_received_bounds_and_total_mass_conserved(attn):
    """0 <= alpha_k <= 1, and sum_k alpha_k (S - k) = S (every query row carries mass 1)."""
    s = attn.shape[-1]
    out = attention_received(attn)
    assert bool((out >= 0).all()) and bool((out <= 1 + SUM_ATOL).all())
    observers = torch.arange(s, 0, -1, dtype=out.dtype)
    assert math.isclose(float((out * observers).sum()), s, rel_tol=0, abs_tol=SUM_ATOL * s)


def test_attention_received_ignores_entries_above_diagonal():
    """A later key cannot be seen: mass above the diagonal is not counted."""
    attn = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    torch.testing.assert_close(attention_received(attn), torch.tensor([0.5, 0.5]))


def test_attention_received_position0_is_mean_of_first_column():
    """alpha_0 = mean over all S queries of A[i, 0] (S - 0 observers)."""
    g = torch.Generator().manual_seed(0)
    attn = torch.rand(5, 5, generator=g).masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    torch.testing.assert_close(attention_received(attn)[0], torch.tril(attn)[:, 0].mean())


@pytest.mark.parametrize("bad", [torch.zeros(3, 4), torch.zeros(3), torch.zeros(0, 0), torch.ones(2, 2, dtype=torch.long)])
def test_attention_received_bad_shape_or_dtype_raises(bad):
    with pytest.raises(ValueError, match="attn"):
        attention_received(bad)


# --------------------------------------------------------------------------- robust_z


@given(positive_vectors(), st.floats(1e-3, 1e3))
def test_robust_z_scaling_values_leaves_z_unchanged(values, c):
    """z(c * v) = z(v) for c > 0 (logs shift by log c; median shifts, MAD does not)."""
    torch.testing.assert_close(robust_z(values * c), robust_z(values), atol=Z_ATOL, rtol=0)


@given(positive_vectors(min_size=4), st.data())
def test_robust_z_excluded_positions_do_not_move_baseline(values, data):
    """Changing an excluded value changes only its own z."""
    k = data.draw(st.integers(0, len(values) - 1))
    other = values.clone()
    other[k] = data.draw(st.floats(1e-6, 1.0))
    a, b = robust_z(values, exclude=[k]), robust_z(other, exclude=[k])
    keep = torch.arange(len(values)) != k
    torch.testing.assert_close(a[keep], b[keep], atol=Z_ATOL, rtol=0)


def test_robust_z_bool_exclude_equals_index_exclude():
    v = torch.tensor([0.5, 0.01, 0.02, 0.03, 0.015])
    mask = torch.tensor([True, False, False, False, False])
    torch.testing.assert_close(robust_z(v, exclude=mask), robust_z(v, exclude=[0]))


def test_robust_z_outlier_included_changes_baseline_negative_control():
    """Control for the exclusion property: the same change to an *included* value moves others."""
    v = torch.tensor([0.5, 0.01, 0.02, 0.03, 0.015])
    w = v.clone()
    w[1] = 0.9
    assert not torch.allclose(robust_z(v)[2:], robust_z(w)[2:])


@given(st.floats(1e-6, 1.0), st.integers(2, 30))
def test_robust_z_zero_mad_is_finite(value, n):
    """All-equal baseline (MAD = 0): z is finite, 0 for the baseline and positive for a larger outlier."""
    v = torch.full((n,), value, dtype=torch.float64)
    v = torch.cat([v, torch.tensor([min(1.0, value * 10)], dtype=torch.float64)])
    z = robust_z(v, exclude=[n])
    assert bool(torch.isfinite(z).all())
    assert bool((z[:n] == 0).all())
    assert float(z[n]) == pytest.approx(math.log(min(1.0, value * 10) / value) / MAD_FLOOR, abs=1e-6)


def test_robust_z_matches_median_mad_definition():
    """z = (log v - median) / (1.4826 * median |log v - median|) on a hand-checkable case."""
    v = torch.tensor([1.0, math.e, math.e**2, math.e**3, math.e**10], dtype=torch.float64)
    logs = torch.tensor([0.0, 1, 2, 3, 10], dtype=torch.float64)
    mad = 1.0 * 1.482602218505602  # median |logs - 2| = median(2,1,0,1,8) = 1; scipy's normal scale
    torch.testing.assert_close(robust_z(v), (logs - 2) / mad, atol=1e-9, rtol=0)


def test_robust_z_zero_value_is_finite():
    """An exact 0 (softmax underflow) is floored before the log."""
    z = robust_z(torch.tensor([0.0, 0.1, 0.2, 0.3]))
    assert bool(torch.isfinite(z).all()) and float(z[0]) < 0


@pytest.mark.parametrize("values, exclude, match", [
    (torch.tensor([0.1, -0.2]), (), "non-negative"),
    (torch.tensor([0.1, float("nan")]), (), "finite"),
    (torch.tensor([]), (), "non-empty"),
    (torch.ones(2, 2), (), "1-D"),
    (torch.tensor([0.1, 0.2]), (0, 1), "no position"),
    (torch.tensor([0.1, 0.2]), (5,), "outside"),
])
def test_robust_z_bad_input_raises(values, exclude, match):
    with pytest.raises(ValueError, match=match):
        robust_z(values, exclude=exclude)


# --------------------------------------------------------------------------- observer_matched_z


def _observers(s: int) -> torch.Tensor:
    """n_k = S - k, the number of queries that see key k: float64 [S]."""
    return torch.arange(s, 0, -1, dtype=torch.float64)


@given(positive_vectors(min_size=2, max_size=MIN_BIN_POSITIONS))
def test_observer_matched_z_short_prompt_equals_robust_z(values):
    """With at most MIN_BIN_POSITIONS baseline positions there is one bin: z = robust_z (the log-MAD z)."""
    torch.testing.assert_close(observer_matched_z(values), robust_z(values), atol=Z_ATOL, rtol=0)


@given(positive_vectors(min_size=40, max_size=200), st.floats(1e-3, 1e3))
def test_observer_matched_z_scaling_values_leaves_z_unchanged(values, c):
    """z(c * v) = z(v) for c > 0: every bin median and the residuals shift by log c."""
    torch.testing.assert_close(observer_matched_z(values * c), observer_matched_z(values), atol=Z_ATOL, rtol=0)


@given(positive_vectors(min_size=40, max_size=200), st.data())
def test_observer_matched_z_excluded_positions_do_not_move_baseline(values, data):
    """Changing an excluded value changes only its own z."""
    k = data.draw(st.integers(0, len(values) - 1))
    other = values.clone()
    other[k] = data.draw(st.floats(1e-6, 1.0))
    a, b = observer_matched_z(values, exclude=[k]), observer_matched_z(other, exclude=[k])
    keep = torch.arange(len(values)) != k
    torch.testing.assert_close(a[keep], b[keep], atol=Z_ATOL, rtol=0)


@given(st.integers(4 * MIN_BIN_POSITIONS, 3000), st.floats(-1.5, 0.0), st.floats(-8.0, -1.0))
def test_observer_matched_z_power_law_recency_trend_has_no_positive_z(s, b, log_a):
    """v_k = a * n_k^b (b <= 0: late keys, seen by few queries, get more): no position scores z > 0.

    With at least two bins (S >= 4 * MIN_BIN_POSITIONS) the baseline is exact for a power
    law between and below the bin medians and never lower than it beyond the head, so a
    pure recency trend is never a sink. (With one bin it is robust_z's global median.)"""
    v = (log_a + b * _observers(s).log()).exp()
    assert float(observer_matched_z(v).max()) <= Z_ATOL


@pytest.mark.parametrize("s", [600, 3000])
def test_robust_z_power_law_recency_trend_flags_tail_negative_control(s):
    """Control: the global-median baseline flags the trailing positions of the same trend."""
    v = (-4.0 - 0.8 * _observers(s).log()).exp()
    assert bool((robust_z(v)[-8:] > 3.5).all())


@given(st.integers(100, 2000), st.floats(-1.5, 0.0), st.integers(0, 2**31 - 1), st.data())
def test_observer_matched_z_spike_on_recency_trend_is_flagged(s, b, seed, data):
    """A position receiving 10x its neighbours' attention on top of noise and a power-law trend scores z > 3.5."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(s, generator=g, dtype=torch.float64) * 0.2  # log-normal noise, SD 0.2 in log units
    v = (-5.0 + b * _observers(s).log() + noise).exp()
    k = data.draw(st.integers(0, s - MIN_BIN_POSITIONS))
    v[k] = v[k] * 10 * (-noise[k]).exp()  # exactly 10x the trend at k
    assert float(observer_matched_z(v)[k]) > 3.5


@pytest.mark.parametrize("kwargs, match", [({"bin_ratio": 1.0}, "bin_ratio"), ({"min_bin": 0}, "min_bin"),
                                           ({"min_bin": 2.5}, "min_bin"), ({"mad_floor": 0.0}, "mad_floor")])
def test_observer_matched_z_bad_settings_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        observer_matched_z(torch.rand(50) + 0.1, **kwargs)


def test_observer_matched_z_bad_values_raise_as_robust_z():
    with pytest.raises(ValueError, match="non-negative"):
        observer_matched_z(torch.tensor([0.1, -0.2]))


# --------------------------------------------------------------------------- sink_rate


@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 10), st.integers(0, 2**31 - 1), st.floats(0.05, 0.95))
def test_sink_rate_equals_fraction_of_heads_above_epsilon(n_layers, n_heads, s, seed, eps):
    """sink_rate[k] = #{(l, h): received[l, h, k] > eps} / (L * H), in [0, 1]."""
    r = torch.rand(n_layers, n_heads, s, generator=torch.Generator().manual_seed(seed))
    rate = sink_rate(r, eps)
    counts = sum((r[layer, head] > eps).float() for layer in range(n_layers) for head in range(n_heads))
    torch.testing.assert_close(rate, counts / (n_layers * n_heads))
    assert bool((rate >= 0).all() and (rate <= 1).all())


def test_sink_rate_all_heads_on_position0_gives_one():
    r = torch.full((3, 2, 5), 0.01)
    r[:, :, 0] = 0.6
    torch.testing.assert_close(sink_rate(r), torch.tensor([1.0, 0, 0, 0, 0]))


@pytest.mark.parametrize("eps", [0.0, 1.0, -0.1, 1.5])
def test_sink_rate_epsilon_outside_unit_interval_raises(eps):
    with pytest.raises(ValueError, match="epsilon"):
        sink_rate(torch.rand(1, 1, 3), eps)


def test_sink_rate_wrong_rank_raises():
    with pytest.raises(ValueError, match="received"):
        sink_rate(torch.rand(3, 3))


# --------------------------------------------------------------------------- context_health


@given(z_scores(), st.floats(0.0, 10.0))
def test_context_health_in_zero_to_ten(z, threshold):
    """0 <= health <= 10."""
    assert 0.0 <= context_health(z, threshold) <= 10.0


@given(z_scores(), st.floats(0.0, 10.0))
def test_context_health_is_ten_iff_no_content_sink(z, threshold):
    """health = 10 exactly when no content z exceeds the threshold."""
    no_sink = not bool((z > threshold).any())
    assert (context_health(z, threshold) == 10.0) == no_sink


@given(z_scores(min_size=2), st.floats(0.0, 5.0), st.data())
def test_context_health_non_increasing_in_severity(z, threshold, data):
    """Raising any content z (a more severe or a new sink) never raises the health."""
    k = data.draw(st.integers(0, len(z) - 1))
    bump = data.draw(st.floats(0.0, 20.0))
    worse = z.clone()
    worse[k] = worse[k] + bump
    assert context_health(worse, threshold) <= context_health(z, threshold) + 1e-12


@given(st.integers(2, 60), st.floats(0.5, 5.0), st.floats(0.0, 10.0))
def test_context_health_decreasing_in_density(n, threshold, excess):
    """More content sinks of the same severity among the same N tokens -> strictly lower health."""
    assume(n >= 2)
    base = torch.zeros(n)
    one = base.clone()
    one[0] = threshold + excess + 1e-3
    two = one.clone()
    two[1] = one[0]
    h0, h1, h2 = (context_health(x, threshold) for x in (base, one, two))
    assert h0 == 10.0 and h1 < h0 and h2 < h1


def test_context_health_empty_content_is_ten():
    assert context_health(torch.empty(0), 3.0) == 10.0


def test_context_health_formula_on_hand_case():
    """One sink 2 SD over threshold among 10 tokens: penalty (1 + 2/2)/10 = 0.2 -> 10 e^{-2}."""
    z = torch.zeros(10)
    z[3] = 5.0
    assert context_health(z, 3.0) == pytest.approx(10 * math.exp(-2.0))


@pytest.mark.parametrize("kwargs", [{"threshold": float("nan")}, {"threshold": 1.0, "rate": 0.0},
                                    {"threshold": 1.0, "severity_scale": -1.0}])
def test_context_health_bad_parameters_raise(kwargs):
    with pytest.raises(ValueError):
        context_health(torch.zeros(3), **kwargs)


# --------------------------------------------------------------------------- head_geometric_mean, layer_sink_spans


@st.composite
def layer_flag_grids(draw, max_layers: int = 8, max_s: int = 12) -> torch.Tensor:
    """A random bool grid ``[L, S]`` of per-layer sink flags."""
    n_layers, s = draw(st.integers(1, max_layers)), draw(st.integers(1, max_s))
    bits = draw(st.lists(st.booleans(), min_size=n_layers * s, max_size=n_layers * s))
    return torch.tensor(bits, dtype=torch.bool).reshape(n_layers, s)


def test_head_geometric_mean_hand_case_and_floor():
    """exp(mean log): [1e-2, 1e-4] -> 1e-3; an exact zero is floored at LOG_FLOOR, not -inf."""
    from lab.sinks.scores import LOG_FLOOR, head_geometric_mean

    x = torch.tensor([[[1e-2, 0.5], [1e-4, 0.5]]], dtype=torch.float64)  # [L=1, H=2, S=2]
    torch.testing.assert_close(head_geometric_mean(x), torch.tensor([1e-3, 0.5], dtype=torch.float64))
    z = torch.tensor([[[0.0], [1.0]]])  # one head gives exactly 0
    assert float(head_geometric_mean(z)) == pytest.approx(math.sqrt(LOG_FLOOR), rel=1e-3)


def test_head_geometric_mean_per_layer_shape_and_never_above_arithmetic_mean():
    from lab.sinks.scores import head_geometric_mean

    g = torch.Generator().manual_seed(3)
    x = torch.rand(4, 3, 7, generator=g)
    per_layer = head_geometric_mean(x, dims=1)
    assert per_layer.shape == (4, 7) and per_layer.dtype == torch.float32
    assert bool((per_layer <= x.mean(dim=1) + 1e-6).all())  # AM-GM
    torch.testing.assert_close(per_layer[2], x[2].log().mean(dim=0).exp())


@pytest.mark.parametrize("bad", [torch.ones(2, 3), torch.ones(1, 2, 3, dtype=torch.int64), "x"])
def test_head_geometric_mean_bad_input_raises(bad):
    from lab.sinks.scores import head_geometric_mean

    with pytest.raises(ValueError, match="per_head"):
        head_geometric_mean(bad)


def test_layer_sink_spans_hand_case():
    """Position 0: layers 1..3; position 1: layers 0 and 3 (a lapse); position 2: none."""
    from lab.sinks.scores import layer_sink_spans

    flags = torch.tensor([[False, True, False], [True, False, False], [True, False, False], [True, True, False]])
    first, last, count = layer_sink_spans(flags)
    assert first.tolist() == [1, 0, -1] and last.tolist() == [3, 3, -1] and count.tolist() == [3, 2, 0]


@given(layer_flag_grids())
def test_layer_sink_spans_match_brute_force(flags):
    """first / last are the smallest / largest flagged layer, count the number flagged; -1, -1, 0 when none."""
    from lab.sinks.scores import layer_sink_spans

    first, last, count = layer_sink_spans(flags)
    for k in range(flags.shape[1]):
        layers = [l for l in range(flags.shape[0]) if bool(flags[l, k])]
        assert (int(first[k]), int(last[k]), int(count[k])) == \
            ((layers[0], layers[-1], len(layers)) if layers else (-1, -1, 0))


@pytest.mark.parametrize("bad", [torch.ones(3, dtype=torch.bool), torch.ones(2, 3), "x"])
def test_layer_sink_spans_bad_input_raises(bad):
    from lab.sinks.scores import layer_sink_spans

    with pytest.raises(ValueError, match="layer_flags"):
        layer_sink_spans(bad)


def test_sink_rate_per_layer_is_each_layers_head_fraction_and_averages_to_the_overall_rate():
    received = torch.tensor([[[0.5, 0.1], [0.2, 0.4], [0.9, 0.0]],   # layer 0: 2/3 and 1/3 heads > 0.3
                             [[0.1, 0.1], [0.1, 0.1], [0.31, 0.3]]])  # layer 1: 1/3 and 0/3 (0.3 is not > 0.3)
    per_layer = sink_rate(received, 0.3, per_layer=True)
    torch.testing.assert_close(per_layer, torch.tensor([[2 / 3, 1 / 3], [1 / 3, 0.0]]))
    torch.testing.assert_close(per_layer.mean(dim=0), sink_rate(received, 0.3))
