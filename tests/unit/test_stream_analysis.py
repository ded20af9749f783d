"""lab.stream.analysis: chunk means, intervals, the one-sided Wilcoxon and its negative control."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.stream import analysis


def test_chunk_means_skip_nan_and_drop_partial_chunk():
    nll = np.array([9.0, 1.0, 3.0, np.nan, 5.0, 2.0, 4.0, 7.0])  # targets 1..8
    # start at target 2, chunks of 3: targets 2-4 -> [1, 3, nan], 5-7 -> [5, 2, 4]; target 8 dropped
    np.testing.assert_allclose(analysis.chunk_means(nll, 2, 3), [2.0, 11 / 3])


def test_chunk_means_all_nan_chunk_raises():
    with pytest.raises(ValueError, match="no scored target"):
        analysis.chunk_means(np.array([1.0, np.nan, np.nan, 2.0]), 2, 2)


def test_chunk_means_no_complete_chunk_raises():
    with pytest.raises(ValueError, match="no complete chunk"):
        analysis.chunk_means(np.ones(5), 3, 10)


def test_matched_copies_nan_pattern():
    out = analysis.matched(np.array([1.0, 2.0, 3.0]), np.array([np.nan, 0.0, np.nan]))
    assert np.isnan(out[0]) and out[1] == 2.0 and np.isnan(out[2])


def test_ppl_interval_contains_the_estimate():
    means = np.random.default_rng(0).normal(2.0, 0.2, 30)
    ci = analysis.ppl_interval(means, seed=1)
    assert ci.low < ci.value < ci.high
    assert math.isclose(ci.value, math.exp(means.mean()))


def test_ppl_ratio_interval_identical_inputs_is_exactly_one():
    a = np.linspace(1, 2, 10)
    ci = analysis.ppl_ratio_interval(a, a, seed=0)
    assert (ci.value, ci.low, ci.high) == (1.0, 1.0, 1.0)


def test_wilcoxon_greater_rejects_a_real_shift_and_control_does_not():
    """A 0.3-nat shift in 30 noisy chunks is found (p < ALPHA); its reverse and the shuffled control are not."""
    rng = np.random.default_rng(7)
    b = rng.normal(2.0, 0.3, 30)
    a = b + 0.3 + rng.normal(0, 0.1, 30)
    assert analysis.wilcoxon_greater(a, b, name="h1", a_name="a", b_name="b").reject
    assert not analysis.wilcoxon_greater(b, a, name="rev", a_name="b", b_name="a").reject
    control = analysis.shuffled_pairing_control(a, seed=0, name="control", a_name="a")
    assert not control.reject and control.n_pairs == 30


def test_wilcoxon_greater_all_ties_does_not_reject():
    a = np.ones(5)
    t = analysis.wilcoxon_greater(a, a, name="ties", a_name="a", b_name="a")
    assert t.n_nonzero == 0 and not t.reject and math.isnan(t.p_value)


@given(n=st.integers(2, 60), seed=st.integers(0, 2**31 - 1))
@settings(max_examples=50, deadline=None)
def test_derangement_has_no_fixed_point(n, seed):
    perm = analysis.derangement(n, seed)
    assert sorted(perm.tolist()) == list(range(n)) and not (perm == np.arange(n)).any()


@given(values=st.lists(st.one_of(st.none(), st.floats(0, 20, allow_nan=False)), min_size=1, max_size=40),
       width=st.integers(1, 8))
def test_rolling_mean_equals_naive_trailing_mean(values, width):
    x = np.array([np.nan if v is None else v for v in values])
    got = analysis.rolling_mean(x, width)
    idx = np.flatnonzero(~np.isnan(x))
    for j, i in enumerate(idx):
        want = x[idx[max(0, j - width + 1): j + 1]].mean()
        assert math.isclose(got[i], want, rel_tol=1e-9, abs_tol=1e-9)
    assert np.isnan(got[np.isnan(x)]).all()
