"""The study's statistics (lab.analysis) on synthetic data with known answers.

Planted effects must be found with the right sign and a CI that excludes 0; data
without an effect must never be called "supported" (each planted test has such a
negative control). All data come from fixed seeds, so each test is deterministic;
the procedures themselves have a false-positive rate of at most ALPHA = 0.05 per
hypothesis (Holm controls it across the family).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from lab.analysis.hypotheses import (ALPHA, FAMILY_CI_LEVEL, FAMILY_SIZE, INCONCLUSIVE, NOT_SUPPORTED, SMALLEST_EFFECT,
                                     SUPPORTED, acceptance_entropy_test, category_test, correlation_test, holm, judge,
                                     paired_test, partial_correlation_test, verdict)
from lab.analysis.placebo import placebo_check, placebo_donors
from lab.analysis.study import analyze, judge_with_power, question_of
from lab.analysis.effects import (binned_acceptance, cluster_robust_slope_p, eta_squared_h, linear_fit_band,
                                  mean_interval, rank_biserial_paired)

RESAMPLES = 199  # enough for a CI's sign on planted effects; keeps the unit tier fast
TINY = 1e-9  # a step just across a verdict boundary

p_values = st.lists(st.floats(min_value=0.0, max_value=1.0, allow_nan=False), min_size=1, max_size=12)


# --------------------------------------------------------------------------- Holm


def test_holm_small_family_matches_step_down_by_hand():
    p = [0.01, 0.04, 0.03, 0.005]
    m = len(p)
    # sorted: 0.005 (x m), 0.01 (x m-1), 0.03 (x m-2), 0.04 (x m-3), then running max
    s1, s2, s3 = m * 0.005, (m - 1) * 0.01, (m - 2) * 0.03
    s4 = max(s3, (m - 3) * 0.04)
    assert holm(p) == pytest.approx([s2, s4, s3, s1])


@given(p_values)
def test_holm_adjusted_between_raw_and_bonferroni_and_order_preserving(p):
    """p_i <= holm_i <= min(1, m p_i), and the adjusted values keep the raw order."""
    adj = holm(p)
    m = len(p)
    for raw, a in zip(p, adj):
        assert raw - 1e-12 <= a <= min(1.0, m * raw) + 1e-12
    order = np.argsort(p, kind="stable")
    assert all(adj[order[i]] <= adj[order[i + 1]] + 1e-12 for i in range(m - 1))


def test_holm_nan_entries_stay_nan_and_do_not_count():
    assert holm([0.02, math.nan])[0] == pytest.approx(0.02)
    assert math.isnan(holm([0.02, math.nan])[1])


def test_holm_out_of_range_raises():
    with pytest.raises(ValueError, match="outside"):
        holm([0.5, 1.5])


# --------------------------------------------------------------------------- verdict rule boundaries


@pytest.mark.parametrize("sign", [1, -1])
def test_verdict_boundaries(sign):
    s = SMALLEST_EFFECT

    def v(effect, lo, hi, p):  # written for a positive prediction, mirrored for sign -1
        lo, hi = sorted((lo * sign, hi * sign))
        return verdict(effect * sign, lo, hi, p, sign, s)

    assert v(0.3, 0.1, 0.5, ALPHA - TINY) == SUPPORTED
    assert v(0.3, 0.1, 0.5, ALPHA) == INCONCLUSIVE  # p must be strictly below alpha
    assert v(0.3, 0.0, 0.5, ALPHA / 2) == INCONCLUSIVE  # CI touching 0 is not enough
    assert v(0.3, TINY, 0.5, ALPHA / 2) == SUPPORTED
    assert v(0.3, math.nan, math.nan, ALPHA / 2) == SUPPORTED  # no CI: p and direction decide
    assert v(-0.3, -0.5, -0.1, ALPHA / 2) == NOT_SUPPORTED  # significant, opposite direction
    assert v(0.02, -0.05, s - TINY, 0.4) == NOT_SUPPORTED  # CI rules out an effect of interest
    assert v(0.02, -0.05, s, 0.4) == INCONCLUSIVE  # ... but not at the boundary itself
    assert v(0.05, -0.2, 0.3, 0.4) == INCONCLUSIVE
    assert v(math.nan, -0.2, 0.3, 0.01) == INCONCLUSIVE
    assert v(0.3, 0.1, 0.5, math.nan) == INCONCLUSIVE  # not tested


@pytest.mark.parametrize("kwargs,match", [({"predicted_sign": 0}, "predicted_sign"),
                                          ({"smallest_effect": 0.0}, "smallest_effect")])
def test_verdict_bad_arguments_raise(kwargs, match):
    args = {"effect": 0.1, "ci_low": 0.0, "ci_high": 0.2, "p_corrected": 0.01, "predicted_sign": 1,
            "smallest_effect": 0.1, **kwargs}
    with pytest.raises(ValueError, match=match):
        verdict(**args)


# --------------------------------------------------------------------------- H1: correlation


def test_correlation_test_planted_negative_found_with_sign_and_ci():
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 10, 60)
    y = 3 - 0.3 * x + rng.normal(0, 0.8, 60)
    r = judge([correlation_test(x, y, predicted_sign=-1, n_resamples=RESAMPLES)])[0]
    assert r.effect < 0 and r.ci_low <= r.effect <= r.ci_high < 0
    assert r.effect == pytest.approx(stats.spearmanr(x, y).statistic)
    assert r.verdict == SUPPORTED


@pytest.mark.slow
def test_correlation_test_negative_control_no_correlation_not_supported():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=1000), rng.normal(size=1000)
    r = judge([correlation_test(x, y, predicted_sign=-1, n_resamples=RESAMPLES)])[0]
    assert r.verdict == NOT_SUPPORTED  # n = 1000: the CI excludes |rho| >= 0.1
    small = judge([correlation_test(x[:30], y[:30], predicted_sign=-1, n_resamples=RESAMPLES)])[0]
    assert small.verdict in (NOT_SUPPORTED, INCONCLUSIVE)


def test_correlation_test_opposite_direction_not_supported():
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 10, 60)
    y = x + rng.normal(0, 1, 60)
    assert judge([correlation_test(x, y, predicted_sign=-1, n_resamples=RESAMPLES)])[0].verdict == NOT_SUPPORTED


def test_correlation_test_too_few_or_constant_is_untested():
    few = correlation_test([1, 2, 3], [3, 2, 1])
    const = correlation_test([1.0] * 10, list(range(10)))
    for r in (few, const):
        assert math.isnan(r.p_value) and r.note
        assert judge([r])[0].verdict == INCONCLUSIVE


@pytest.mark.parametrize("x,y", [([1, 2], [1, 2, 3]), ([1, 2, math.nan, 4, 5], [1, 2, 3, 4, 5])])
def test_correlation_test_bad_input_raises(x, y):
    with pytest.raises(ValueError):
        correlation_test(x, y)


# --------------------------------------------------------------------------- H2: acceptance vs entropy


def _tokens(seed: int, slope: float, n_prompts: int = 40, per_prompt: int = 30):
    rng = np.random.default_rng(seed)
    h = rng.uniform(0, 6, n_prompts * per_prompt)
    p_accept = 1 / (1 + np.exp(-(1.0 - slope * h)))
    accepted = rng.random(h.size) < p_accept
    clusters = np.repeat([f"p{i}" for i in range(n_prompts)], per_prompt)
    return h, accepted, clusters


def test_acceptance_entropy_test_planted_decline_supported():
    h, a, c = _tokens(4, slope=0.6)
    r = judge([acceptance_entropy_test(h, a, c, n_resamples=RESAMPLES)])[0]
    assert r.effect < 0 and r.ci_high < 0
    assert r.effect == pytest.approx(stats.pointbiserialr(a, h).statistic)
    assert r.verdict == SUPPORTED
    assert r.details["n_clusters"] == 40


def test_acceptance_entropy_test_negative_control_flat_not_supported():
    h, a, c = _tokens(5, slope=0.0)
    r = judge([acceptance_entropy_test(h, a, c, n_resamples=RESAMPLES)])[0]
    assert r.verdict != SUPPORTED


def test_acceptance_entropy_test_all_accepted_is_untested():
    r = acceptance_entropy_test([0.1, 0.5, 1.0, 2.0, 3.0], [True] * 5, ["a"] * 5)
    assert math.isnan(r.p_value) and "constant" in r.note


def test_binned_acceptance_counts_and_wilson_intervals():
    h, a, _ = _tokens(6, slope=0.6)
    bins = binned_acceptance(h, a, n_bins=6)
    assert sum(b.n for b in bins) == h.size
    assert sum(b.k for b in bins) == int(a.sum())
    for b in bins:
        ci = stats.binomtest(b.k, b.n).proportion_ci(method="wilson")
        assert (b.ci_low, b.ci_high) == pytest.approx((ci.low, ci.high))
        assert b.ci_low <= b.rate <= b.ci_high
    assert bins[0].rate > bins[-1].rate  # the planted decline shows in the curve


def test_study_analysis_overall_alpha_is_accepted_over_tested_across_bins_nan_without_bins():
    """The overall alpha drawn in the acceptance plot is the bins' accepted / tested counts summed, and
    NaN (not a division error) when no token was binned."""
    from dataclasses import replace

    h, a, _ = _tokens(6, slope=0.6)
    analysis = analyze([], [], seed=0, n_resamples=0)
    binned = replace(analysis, acceptance_bins=binned_acceptance(h, a, n_bins=6))
    assert binned.overall_alpha == int(a.sum()) / a.size
    assert math.isnan(replace(analysis, acceptance_bins=[]).overall_alpha)


def test_binned_acceptance_bad_bins_raises():
    with pytest.raises(ValueError, match="n_bins"):
        binned_acceptance([1.0], [True], n_bins=0)


# --------------------------------------------------------------------------- H3: categories


def test_category_test_planted_shift_supported_with_pairwise_holm():
    rng = np.random.default_rng(7)
    groups = np.repeat(["a", "b", "c", "d"], 12)
    values = rng.uniform(0, 1, groups.size) + np.where(groups == "a", 0.8, 0.0)
    r = judge([category_test(values, groups, n_resamples=RESAMPLES)])[0]
    assert r.verdict == SUPPORTED
    h = stats.kruskal(*[values[groups == g] for g in "abcd"]).statistic
    assert r.effect == pytest.approx((h - 4 + 1) / (groups.size - 4))
    pairs = r.details["pairwise"]
    assert len(pairs) == 6
    assert all(row["p_holm"] >= row["p_value"] for row in pairs)
    shifted = [row for row in pairs if row["a"] == "a"]
    assert len(shifted) == 3 and all(row["rank_biserial_r"] > 0 for row in shifted)  # a against b, c and d


def test_category_test_negative_control_same_distribution_not_supported():
    rng = np.random.default_rng(8)
    groups = np.repeat(["a", "b", "c", "d"], 12)
    r = judge([category_test(rng.uniform(0, 1, groups.size), groups, n_resamples=RESAMPLES)])[0]
    assert r.verdict != SUPPORTED


def test_eta_squared_h_null_expectation_is_zero():
    """H's null expectation is k - 1, so eta^2_H is 0 there; it grows with H."""
    assert eta_squared_h(3.0, 40, 4) == 0.0
    assert eta_squared_h(10.0, 40, 4) > eta_squared_h(5.0, 40, 4) > 0
    assert math.isnan(eta_squared_h(3.0, 4, 4))


def test_category_test_single_group_is_untested():
    r = category_test([0.1, 0.2, 0.3, 0.4, 0.5], ["a"] * 5)
    assert math.isnan(r.p_value)


# --------------------------------------------------------------------------- H4: twins


def test_rank_biserial_paired_known_cases():
    assert rank_biserial_paired([1, 2, 3]) == 1.0
    assert rank_biserial_paired([-1, -2, -3]) == -1.0
    assert rank_biserial_paired([1, -1, 2, -2]) == 0.0
    assert rank_biserial_paired([0, 0, 2]) == 1.0  # zeros dropped
    assert math.isnan(rank_biserial_paired([0, 0]))
    # one negative of rank 1 among ranks 1..4: (10 - 2*1) / 10
    assert rank_biserial_paired([-1, 2, 3, 4]) == pytest.approx((10 - 2 * 1) / 10)


@pytest.mark.parametrize("sign", [-1, 1])
def test_paired_test_planted_shift_supported(sign):
    rng = np.random.default_rng(9)
    clean = rng.normal(5, 1, 18)
    poisoned = clean + sign * 1.5 + rng.normal(0, 0.5, 18)
    r = judge([paired_test(clean, poisoned, name="H4a", predicted_sign=sign, n_resamples=RESAMPLES)])[0]
    assert r.verdict == SUPPORTED
    assert np.sign(r.effect) == sign
    assert r.p_value == pytest.approx(stats.wilcoxon(poisoned - clean).pvalue)


def test_paired_test_negative_control_no_shift_not_supported():
    rng = np.random.default_rng(10)
    clean = rng.normal(5, 1, 18)
    poisoned = clean + rng.normal(0, 0.5, 18)
    r = judge([paired_test(clean, poisoned, name="H4b", predicted_sign=1, n_resamples=RESAMPLES)])[0]
    assert r.verdict != SUPPORTED


def test_paired_test_too_few_pairs_is_untested():
    r = paired_test([1, 2, 3], [0, 1, 2], name="H4a", predicted_sign=-1)
    assert math.isnan(r.p_value) and "pairs" in r.note


# --------------------------------------------------------------------------- fit band and the whole analysis


def test_linear_fit_band_exact_line_has_zero_width():
    x = np.arange(10.0)
    fit = linear_fit_band(x, 2 - 0.5 * x)
    assert fit.slope == pytest.approx(-0.5) and fit.intercept == pytest.approx(2.0)
    assert np.allclose(fit.band_low, fit.fit) and np.allclose(fit.band_high, fit.fit)
    assert linear_fit_band([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None


def test_linear_fit_band_contains_fit_and_is_narrowest_at_mean():
    rng = np.random.default_rng(11)
    x = rng.uniform(0, 10, 40)
    fit = linear_fit_band(x, x + rng.normal(0, 1, 40), n_grid=101)
    width = np.array(fit.band_high) - np.array(fit.band_low)
    assert np.all(width > 0)
    assert abs(fit.grid[int(np.argmin(width))] - x.mean()) < (max(x) - min(x)) / 50


def _synthetic_study(seed: int, planted: bool, length_only: bool = False):
    """36 clean prompts (12 with a poisoned and a neutral twin of ~300 added tokens). ``planted``: health
    falls on poisoned twins, entropy falls with health and a twin's ``lookback_heads`` follows its health;
    ``length_only``: health, the twins' measure and entropy depend on the prompt length alone (what a length
    proxy would give)."""
    rng = np.random.default_rng(seed)
    rows, tokens = [], []
    cats = ["factual", "creative", "code", "math", "ambiguous", "summary"]
    for i in range(36):
        health = rng.uniform(3, 10)
        n_clean = int(rng.integers(15, 80))
        added = int(rng.integers(250, 400))
        for variant in ("clean", "poisoned", "neutral") if i % 3 == 0 else ("clean",):
            n = n_clean + (added if variant != "clean" else 0)
            if length_only:
                h = 10 - 1.2 * np.log(n) + rng.normal(0, 0.3)
                ent = 1 + 0.4 * np.log(n) + rng.normal(0, 0.05)
            else:
                h = health - (2.5 if variant == "poisoned" and planted else 0) + rng.normal(0, 0.3)
                ent = (4 - 0.3 * h if planted else 2.5) + rng.normal(0, 0.4)
            pid = f"p{i}" + ("" if variant == "clean" else f"-{variant}")
            # H1's measure, on the twins only: it follows health (planted) or length alone (length_only)
            lookback = (math.nan if variant == "clean" else
                        1.0 - 0.12 * np.log(n) + rng.normal(0, 0.003) if length_only else h / 10)
            rows.append({"id": pid, "category": cats[i % 6], "variant": variant, "n_prompt_tokens": n,
                         "twin_of": f"p{i}" if variant != "clean" else None, "context_health": h,
                         "lookback_heads": lookback, "mean_entropy_bits": ent, "alpha": rng.uniform(0.2, 0.6)})
            for j in range(20):
                de = rng.uniform(0, 6)
                tokens.append({"prompt_id": pid, "draft_entropy_bits": de, "tested": j % 5 != 4,
                               "accepted": bool(rng.random() < (0.9 - 0.12 * de if planted else 0.5))})
    return rows, tokens


@pytest.mark.slow
def test_analyze_pure_length_study_supports_no_h1_or_h4():
    """Fault class: H1 and H4 "supported" by length alone (health and entropy both functions of the prompt
    length, poisoned twins longer than clean ones). The unadjusted figures show the length effect; the
    adjusted H1 and the poisoned-vs-neutral H4 do not support it."""
    rows, tokens = _synthetic_study(21, planted=False, length_only=True)
    a = analyze(rows, tokens, n_resamples=RESAMPLES)
    h1, h4a, h4b = a.test("H1"), a.test("H4a"), a.test("H4b")
    assert h1.details["unadjusted_rho"] < -0.5 and h1.details["unadjusted_p"] < 1e-3  # length drives both
    assert a.test("H4a").details["vs_clean"]["effect"] == -1.0  # every poisoned twin below its shorter clean twin
    assert h1.verdict != SUPPORTED and a.test("H1c").verdict != SUPPORTED
    assert h4a.verdict != SUPPORTED and h4b.verdict != SUPPORTED


@pytest.mark.slow
def test_analyze_planted_study_supports_h1_h2_h4():
    rows, tokens = _synthetic_study(17, planted=True)
    a = analyze(rows, tokens, n_resamples=RESAMPLES)
    verdicts = a.verdicts()
    assert list(verdicts) == ["H1", "H1c", "H2", "H3", "H4a", "H4b", "H5", "H6", "H6c"]
    assert verdicts["H1"] == verdicts["H2"] == verdicts["H4a"] == verdicts["H4b"] == SUPPORTED
    # H1c: 12 neutral twins detect 0.85 at 80 % (its power note says so); the planted -0.74 is seen, not settled
    assert a.test("H1c").effect < -0.5 and verdicts["H1c"] == INCONCLUSIVE and "underpowered" in a.test("H1c").note
    assert verdicts["H5"] == verdicts["H6"] == verdicts["H6c"] == INCONCLUSIVE  # no decodes, no temperature runs
    assert all(t.ci_level == FAMILY_CI_LEVEL for t in a.tests)
    assert a.test("H1").details["n_clusters"] == 12 and a.test("H1").details["placebo"]["passes"]
    assert verdicts["H3"] != SUPPORTED  # alpha was drawn independently of category
    assert len(a.pairs) == 12
    h2 = a.test("H2")
    assert h2.n == sum(t["tested"] for t in tokens)  # untested draft tokens are left out
    ps = [t.p_value for t in a.tests]
    assert [t.p_holm for t in a.tests] == pytest.approx(holm(ps), nan_ok=True)


@pytest.mark.slow
def test_analyze_negative_control_null_study_supports_nothing():
    rows, tokens = _synthetic_study(13, planted=False)
    a = analyze(rows, tokens, n_resamples=RESAMPLES)
    assert SUPPORTED not in a.verdicts().values()


@pytest.mark.slow
def test_analyze_nonfinite_rows_are_left_out_of_that_test_only():
    rows, tokens = _synthetic_study(14, planted=True)
    rows[0]["alpha"] = math.nan
    rows[1]["lookback_heads"] = None  # p0-poisoned
    a = analyze(rows, tokens, n_resamples=RESAMPLES)
    assert a.test("H1").n == sum(r["variant"] != "clean" for r in rows) - 1
    assert a.test("H3").n == sum(r["variant"] == "clean" for r in rows) - 1


# --------------------------------------------------------------------------- units of inference


def test_question_of_twins_share_their_clean_prompts_question():
    assert question_of({"id": "math-03"}) == "math-03"
    assert question_of({"id": "math-03-poisoned", "twin_of": "math-03"}) == "math-03"
    assert question_of({"id": "math-03", "twin_of": None}) == "math-03"


def test_cluster_robust_slope_p_matches_ols_t_when_homoskedastic_and_unclustered():
    """With one observation per cluster and homoskedastic data the CR1 p is close to the classic OLS t
    test's (both test the slope; they differ by the sandwich's estimate of the same variance)."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=400)
    y = 0.1 * x + rng.normal(size=400)
    assert cluster_robust_slope_p(x, y, range(400)) == pytest.approx(stats.linregress(x, y).pvalue, rel=0.15)


def test_cluster_robust_slope_p_duplicated_clusters_are_not_new_evidence():
    """Regression (fault class: clustered observations counted as independent): each observation copied
    five times in its own cluster leaves the cluster-robust p where it was, while the naive p shrinks."""
    rng = np.random.default_rng(6)
    x, y = rng.normal(size=40), rng.normal(size=40)
    y = y + 0.3 * x
    once = cluster_robust_slope_p(x, y, range(40))
    five = cluster_robust_slope_p(np.repeat(x, 5), np.repeat(y, 5), np.repeat(np.arange(40), 5))
    assert five == pytest.approx(once, rel=0.1)  # only CR1's (n - 1) / (n - 2) differs: 39 / 38 against 199 / 198
    assert stats.linregress(np.repeat(x, 5), np.repeat(y, 5)).pvalue < once / 10


def test_cluster_robust_slope_p_too_few_clusters_is_nan():
    assert math.isnan(cluster_robust_slope_p([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0], ["a", "a", "b", "b"]))


@pytest.mark.parametrize("values, level, match", [([], 0.95, "values"), ([1.0, 2.0], 1.0, "level"),
                                                   ([1.0, 2.0], 0.0, "level")])
def test_mean_interval_empty_values_or_bad_level_raises(values, level, match):
    with pytest.raises(ValueError, match=match):
        mean_interval(values, level)


def test_partial_correlation_test_clusters_change_p_not_effect():
    rng = np.random.default_rng(7)
    x, y, n = rng.normal(size=60), rng.normal(size=60), rng.integers(10, 300, 60).astype(float)
    y = y - 0.4 * x
    alone = partial_correlation_test(x, y, n, n_resamples=0)
    paired = partial_correlation_test(x, y, n, clusters=np.arange(60) // 2, n_resamples=0)
    assert alone.effect == paired.effect and alone.p_value != paired.p_value
    assert paired.details["n_clusters"] == 30
    with pytest.raises(ValueError, match="clusters"):
        partial_correlation_test(x, y, n, clusters=[1, 2])


def test_placebo_donors_never_receive_and_ask_another_question():
    """Fault class: a placebo that swaps values between two prompts (i gets j's, j gets i's), which a
    true effect alone makes correlate. Donors never receive; every donor asks another question."""
    lengths = [10, 11, 50, 52, 300, 310, 305, 12]
    questions = ["a", "b", "c", "d", "e", "e", "e", "f"]
    donors = placebo_donors(lengths, questions)
    receivers = set(np.flatnonzero(donors >= 0).tolist())
    assert receivers and not receivers & set(donors[donors >= 0].tolist())
    for i in receivers:
        assert questions[donors[i]] != questions[i]


def test_placebo_check_passes_a_clean_design_and_fails_a_length_proxy():
    rng = np.random.default_rng(8)
    n = rng.integers(10, 400, 120).astype(float)
    z = np.log(n) - np.log(n).mean()
    health = rng.normal(size=120)
    entropy = -0.6 * health + rng.normal(size=120)
    assert placebo_check(health, entropy, n)["passes"] is True
    proxy = 3 * z ** 2 + 0.1 * rng.normal(size=120)  # shared by prompts of one length, left in by the adjustment
    check = placebo_check(proxy, 3 * z ** 2 + rng.normal(size=120), n)
    assert check["passes"] is False and check["p_value"] < ALPHA


def test_judge_with_power_failed_placebo_makes_h1_inconclusive():
    """The control rule: H1 whose placebo failed is inconclusive however small its p."""
    rng = np.random.default_rng(9)
    x = rng.normal(size=80)
    res = partial_correlation_test(x, -x + 0.1 * rng.normal(size=80), rng.integers(10, 300, 80).astype(float),
                                   n_resamples=RESAMPLES)
    assert judge_with_power([res])[0].verdict == SUPPORTED
    res.details["control_rejects"] = True
    assert judge_with_power([res])[0].verdict == INCONCLUSIVE


def test_acceptance_entropy_test_p_is_cluster_robust_and_names_the_independent_one():
    """H2's p is the prompt-level one; the tokens-as-independent p is kept for comparison only."""
    rng = np.random.default_rng(10)
    h, acc, pid = [], [], []
    for p in range(30):  # prompt-level entropy and acceptance, independent of each other: no token effect
        level, a = rng.normal(2, 1), rng.uniform(0.2, 0.9)
        h += list(level + rng.normal(0, 0.3, 40))
        acc += list(rng.random(40) < a)
        pid += [p] * 40
    r = acceptance_entropy_test(h, acc, pid, n_resamples=0)
    assert r.details["n_clusters"] == 30 and "cluster-robust" in r.test
    assert r.p_value > r.details["p_independent_tokens"]


def test_family_ci_level_is_bonferroni_over_the_family():
    assert FAMILY_CI_LEVEL == pytest.approx(1 - ALPHA / FAMILY_SIZE) and FAMILY_SIZE == 9
