"""Context health's drift with length within each variant and category (lab.analysis.length_drift), and the
study's use of it: a drifting group makes H1/H1c untestable, with the group named."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from lab.analysis.length_drift import DRIFT_BAR, MIN_GROUP, SPEARMAN_VAR, length_drift

pytestmark = pytest.mark.unit


def _study(n_clean=60, n_twins=30, clean_slope=0.0, seed=0):
    rng = np.random.default_rng(seed)
    cats = ["a", "b", "c"]
    health, length, variants, categories = [], [], [], []
    for variant, n in (("clean", n_clean), ("poisoned", n_twins), ("neutral", n_twins)):
        ln = rng.normal(4 if variant == "clean" else 5, 0.5, n)
        h = rng.normal(0, 1, n) + (clean_slope * ln if variant == "clean" else 0)
        health += list(h)
        length += list(np.exp(ln))
        variants += [variant] * n
        categories += [cats[i % 3] for i in range(n)]
    return health, length, variants, categories


def test_rows_cover_variants_then_clean_categories_with_the_bonferroni_level():
    h, n, v, c = _study()
    d = length_drift(h, n, v, c)
    assert [(r.kind, r.group) for r in d.rows] == [("variant", "clean"), ("variant", "poisoned"), ("variant", "neutral"),
                                                   ("category", "a"), ("category", "b"), ("category", "c")]
    assert [r.n for r in d.rows] == [60, 30, 30, 20, 20, 20]  # a category's group is its clean prompts
    assert d.level == pytest.approx(1 - 0.05 / 6)
    clean = d.rows[0]
    idx = [i for i, x in enumerate(v) if x == "clean"]
    assert clean.rho == pytest.approx(stats.spearmanr([h[i] for i in idx], [n[i] for i in idx])[0])
    z, se, zc = math.atanh(clean.rho), math.sqrt(SPEARMAN_VAR / 57), stats.norm.ppf(1 - 0.05 / 12)
    assert (clean.ci_low, clean.ci_high) == pytest.approx((math.tanh(z - zc * se), math.tanh(z + zc * se)))


def test_no_drift_reads_none_and_a_strong_clean_drift_names_the_group():
    assert length_drift(*_study()).reason() is None
    d = length_drift(*_study(clean_slope=3.0))
    assert [r.group for r in d.drifting()][:1] == ["clean"] and all(r.kind == "variant" or r.group in "abc"
                                                                 for r in d.drifting())
    assert d.reason().startswith("context health drifts with prompt length within variant clean rho +")


def test_a_rho_beyond_the_bar_inside_its_interval_does_not_drift():
    """The rule judges the interval, not the point estimate: a small group's 0.3 is not evidence of drift."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=12)
    y = 0.3 * x + rng.normal(size=12)
    d = length_drift(list(y), list(np.exp(x)), ["clean"] * 12, ["a"] * 12)
    r = d.rows[0]
    assert r.judged and abs(r.rho) > DRIFT_BAR and not r.drifts and r.ci_low < DRIFT_BAR


def test_small_or_constant_groups_are_shown_not_judged():
    h = [1.0] * 5 + list(range(20))
    n = list(range(25))
    v = ["poisoned"] * 5 + ["clean"] * 20
    d = length_drift(h, n, v, ["a"] * 25)
    poisoned = d.rows[0]
    assert poisoned.n == 5 < MIN_GROUP and not poisoned.judged and math.isnan(poisoned.ci_low)
    assert d.level == pytest.approx(1 - 0.05 / 2)  # clean and category a judged
    flat = length_drift([2.0] * 20, list(range(20)), ["clean"] * 20, ["a"] * 20)
    assert math.isnan(flat.rows[0].rho) and not flat.rows[0].judged and flat.reason() is None


def test_nan_rows_are_left_out():
    h, n, v, c = _study()
    h[0] = math.nan
    assert length_drift(h, n, v, c).rows[0].n == 59


@pytest.mark.parametrize("kwargs, message", [
    ({"bar": 0.0}, "bar must be in"), ({"bar": 1.0}, "bar must be in")])
def test_bad_bar_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        length_drift([1.0], [1.0], ["clean"], ["a"], **kwargs)


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="one entry per prompt"):
        length_drift([1.0, 2.0], [1.0], ["clean"], ["a"])


def test_study_untests_h1_when_its_measure_drifts_within_a_variant():
    """Fault class: a context measure that drifts with length among the neutral twins read as H1's evidence
    anyway."""
    from lab.analysis.study import analyze
    from tests.simulated_study import simulate_study

    rows, tokens, _ = simulate_study(3, decodes=False)
    plain = analyze(rows, tokens, n_resamples=0)
    assert plain.length_drift is not None and plain.length_drift.rows
    drifting = [dict(r) for r in rows]
    for r in drifting:
        if r.get("variant") == "neutral":
            r["lookback_heads"] = r["n_prompt_tokens"] / 20  # a measure that is only length
    a = analyze(drifting, tokens, n_resamples=0)
    assert a.length_drift.reason() is not None
    for name in ("H1", "H1c"):
        t = a.test(name)
        assert t.verdict == "untested" or "untestable" in t.note, (name, t.verdict)
        assert "drifts with prompt length within variant neutral" in t.note
