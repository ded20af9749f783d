"""The statistics of ``lab intervene`` (lab.analysis.intervention) on hand-made and simulated triples.

Each control fails on a planted breach and passes without it; the per-triple values match their
definitions by hand; the tests infer on distractor means; bad input is refused in one line. Simulated
triples come from fixed seeds (tests/simulated_study.py), so every test is deterministic.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from lab.analysis.hypotheses import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, holm
from lab.analysis.intervention import (ARMS, C_PLUS_MIN_BITS, EMPTY_MASK_TOL_BITS, EQUIV_BITS, FAMILY_CI_LEVEL,
                                       FAMILY_SIZE, MASS_ZERO_TOL, MIN_DISTRACTORS, SMALLEST, TEST_NAMES, UNDECIDED,
                                       VARIANTS, TripleSummary, analyze_intervention, arm_means, arm_move, c_plus_control,
                                       cluster_test,
                                       empty_mask_control, label_swap_control, manipulation_control, mediation_fit,
                                       outcome_values, position_only_control, power_at, power_table, required_triples,
                                       swap_labels)
from tests.simulated_study import label_blind_masking, simulate_triples

pytestmark = pytest.mark.unit

N, G = 240, 24  # the design's main run: triples, distractors
PLANTED_BITS = 0.3  # an effect every test finds at N, G in the simulation (about 6 SDs of a distractor mean)


def _triple(qid: str = "q0", distractor: str = "d0", **tables) -> TripleSummary:
    """A triple whose every value is 2.0 bits / 0.5 beta / 0.2 span / 0.5 sink, then ``tables`` overrides
    (``entropy={("P", "A0"): 2.4}``); the masks behave (span 0 under A1 and A2, sink 0 under the sink arm, C+ moves
    entropy by a bit)."""
    keys = [(v, a) for v in VARIANTS for a in ARMS]
    base = {"entropy": {k: 2.0 + (1.0 if k[1] == "C+" else 0.0) for k in keys},
            "beta": {k: 0.5 for k in keys},
            "span_mass": {k: 0.0 if k[1] in ("A1", "A2") else 0.2 for k in keys},
            "sink_mass": {k: 0.0 if k[1] == "sink" else 0.5 for k in keys}}
    for name, over in tables.items():
        base[name] = {**base[name], **over}
    return TripleSummary(qid, "code", distractor, base["entropy"], base["beta"], base["span_mass"],
                         base["sink_mass"], 1e-6)


@pytest.fixture(scope="module")
def null_triples():
    return simulate_triples(N, G, seed=3)


@pytest.fixture(scope="module")
def planted_triples():
    return simulate_triples(N, G, seed=4, effect_bits=PLANTED_BITS)


# --------------------------------------------------------------------------- bad input


def test_triple_summary_missing_arm_raises_one_line_naming_it():
    entropy = {(v, a): 2.0 for v in VARIANTS for a in ARMS if (v, a) != ("N", "A2")}
    with pytest.raises(ValueError, match=r"triple 'q7': entropy misses \[\('N', 'A2'\)\]") as err:
        TripleSummary("q7", "code", "d0", entropy, *(_triple().beta,) * 3, 0.0)
    assert "\n" not in str(err.value)


def test_triple_summary_unknown_arm_raises():
    with pytest.raises(ValueError, match="unknown keys"):
        _triple(beta={("P", "A3"): 0.5})


@pytest.mark.parametrize("bad", [math.nan, math.inf, "2.0", None])
def test_triple_summary_nan_raises_naming_triple_and_key(bad):
    with pytest.raises(ValueError, match=r"triple 'q0': span_mass\[\('P', 'L0.5'\)\] = .* is not a finite number"):
        _triple(span_mass={("P", "L0.5"): bad})


def test_triple_summary_bad_empty_diff_raises():
    with pytest.raises(ValueError, match="empty_max_diff_bits"):
        replace(_triple(), empty_max_diff_bits=math.nan)


def test_analyze_intervention_empty_list_raises_one_line():
    with pytest.raises(ValueError, match="no triples") as err:
        analyze_intervention([])
    assert "\n" not in str(err.value)


def test_analyze_intervention_question_twice_raises():
    with pytest.raises(ValueError, match="'q0' appears twice"):
        analyze_intervention([_triple(), _triple()])


def test_analyze_intervention_not_a_summary_raises():
    with pytest.raises(ValueError, match="must be TripleSummary, got dict"):
        analyze_intervention([{"question_id": "q0"}])


def test_analyze_intervention_bad_alpha_or_swaps_raises():
    with pytest.raises(ValueError, match="alpha=1.5"):
        analyze_intervention([_triple()], alpha=1.5)
    with pytest.raises(ValueError, match="n_swaps=0"):
        analyze_intervention([_triple(f"q{i}", f"d{i}") for i in range(3)], n_swaps=0)


def test_power_table_unknown_test_raises():
    with pytest.raises(ValueError, match="unknown tests"):
        power_table({"did_entropy": 0.1, "h4": 0.1}, N, G)


# --------------------------------------------------------------------------- per-triple values


def test_outcome_values_match_their_definitions_by_hand():
    t = _triple(entropy={("P", "A0"): 2.5, ("P", "A1"): 2.1, ("N", "A0"): 2.2, ("N", "A1"): 2.0,
                         ("P", "L0.5"): 2.3, ("P", "L0.25"): 2.2},
                beta={("P", "A0"): 0.4, ("P", "A1"): 0.6, ("N", "A0"): 0.5, ("N", "A1"): 0.55})
    v = {k: float(x[0]) for k, x in outcome_values([t]).items()}
    assert v["did_entropy"] == pytest.approx((2.5 - 2.1) - (2.2 - 2.0))
    assert v["did_beta"] == pytest.approx((0.6 - 0.4) - (0.55 - 0.5))
    assert v["h4b_forced"] == pytest.approx(2.5 - 2.2)
    gaps = [2.1 - 2.0, 2.2 - 2.0, 2.3 - 2.0, 2.5 - 2.2]  # lambda 0, 0.25, 0.5, 1
    assert v["dose"] == pytest.approx(stats.linregress([0, 0.25, 0.5, 1], gaps).slope)


def test_swap_labels_flips_the_sign_of_every_test_value(planted_triples):
    kept, swapped = outcome_values(planted_triples), outcome_values([swap_labels(t) for t in planted_triples])
    for name in TEST_NAMES:
        np.testing.assert_allclose(swapped[name], -kept[name], atol=1e-12)


# --------------------------------------------------------------------------- inference


def test_cluster_test_is_the_t_test_on_distractor_means(null_triples):
    """Fault class: triples that share a distractor tested as independent (too many df, too small an SE)."""
    values = outcome_values(null_triples)["did_entropy"]
    labels = [t.distractor for t in null_triples]
    codes = np.unique(labels, return_inverse=True)[1]
    means = np.array([values[codes == g].mean() for g in range(G)])
    res = cluster_test("did_entropy", values, codes, 0.05)
    ref = stats.ttest_1samp(means, 0.0, alternative="greater")
    assert res.p_value == pytest.approx(ref.pvalue) and res.estimate == pytest.approx(means.mean())
    half = stats.t.isf(0.05 / FAMILY_SIZE, G - 1) * means.std(ddof=1) / math.sqrt(G)
    assert (res.ci_low, res.ci_high) == pytest.approx((means.mean() - half, means.mean() + half))
    assert res.ci_level == pytest.approx(FAMILY_CI_LEVEL) and res.n_distractors == G and res.n_triples == N
    assert res.p_value != pytest.approx(stats.ttest_1samp(values, 0.0, alternative="greater").pvalue, rel=1e-3)


def test_analyze_planted_effect_every_test_supported(planted_triples):
    a = analyze_intervention(planted_triples, seed=1, n_resamples=0)
    assert a.decides and a.n_triples == N and a.n_distractors == G
    assert [t.verdict for t in a.tests] == [SUPPORTED] * 4
    assert [t.p_holm for t in a.tests] == pytest.approx(holm([t.p_value for t in a.tests]))
    assert all(t.power > 0 and t.smallest_effect == SMALLEST[t.name] for t in a.tests)


def test_analyze_null_never_supported_and_excludes_the_effect_of_interest(null_triples):
    a = analyze_intervention(null_triples, seed=1, n_resamples=0)
    assert a.decides and SUPPORTED not in [t.verdict for t in a.tests]
    assert a.did_entropy.verdict == NOT_SUPPORTED and a.did_entropy.ci_high < SMALLEST["did_entropy"]


def test_analyze_too_few_distractors_inconclusive_with_note():
    triples = [_triple(f"q{i}", f"d{i % 2}", entropy={("P", "A0"): 2.0 + 0.1 * i}) for i in range(6)]
    a = analyze_intervention(triples, n_resamples=0)
    assert all(t.verdict == INCONCLUSIVE and f"needs {MIN_DISTRACTORS}" in t.note for t in a.tests)
    assert a.label_swap.passed and "does not run" in a.label_swap.note


def test_analyze_controls_failed_every_verdict_undecided(planted_triples):
    """A run whose controls fail decides nothing: each verdict reads 'undecided: controls failed' and the
    rule's own verdict stays beside it."""
    broken = [replace(planted_triples[0], empty_max_diff_bits=1.0), *planted_triples[1:]]
    a = analyze_intervention(broken, seed=1, n_resamples=0)
    assert not a.controls_passed and not a.decides and a.controls["empty_mask"] is False
    assert [t.verdict for t in a.tests] == [UNDECIDED] * 4 == ["undecided: controls failed"] * 4
    assert [t.rule_verdict for t in a.tests] == [SUPPORTED] * 4


def test_analyze_distractor_table_and_sds(null_triples):
    a = analyze_intervention(null_triples, seed=1, n_resamples=0)
    assert sum(r.n_triples for r in a.distractors) == N and len(a.distractors) == G
    d0 = [v for t, v in zip(null_triples, outcome_values(null_triples)["did_entropy"]) if t.distractor == "d00"]
    assert a.distractors[0].mean_did_entropy == pytest.approx(np.mean(d0))
    assert set(a.sd_by_test) == set(TEST_NAMES) and all(sd > 0 for sd in a.sd_by_test.values())


# --------------------------------------------------------------------------- controls: planted breaches


def test_empty_mask_control_one_triple_over_tolerance_fails_naming_it():
    triples = [_triple(f"q{i}") for i in range(5)]
    assert empty_mask_control(triples).passed
    triples[3] = replace(triples[3], empty_max_diff_bits=2 * EMPTY_MASK_TOL_BITS)
    c = empty_mask_control(triples)
    assert not c.passed and c.n_over == 1 and c.worst == "q3"


def test_position_only_control_planted_a2_gap_fails(null_triples):
    assert position_only_control(null_triples).passed
    breached = simulate_triples(N, G, seed=3, a2_gap_bits=2 * EQUIV_BITS)
    c = position_only_control(breached)
    assert not c.passed and c.mean_bits > EQUIV_BITS and c.p_tost > 0.05


def test_position_only_control_exact_equality_passes_and_one_distractor_checks_every_triple():
    same = [_triple(f"q{i}", f"d{i % 3}") for i in range(6)]
    assert position_only_control(same).passed  # no variance: the gap 0 lies inside the bound
    one = [_triple(f"q{i}", "d0", entropy={("P", "A2"): 2.0 + 0.01 * i}) for i in range(6)]
    assert position_only_control(one).passed and "one distractor" in position_only_control(one).note
    one[2] = _triple("q2", "d0", entropy={("P", "A2"): 2.0 + 2 * EQUIV_BITS})
    assert not position_only_control(one).passed


def test_label_swap_control_label_blind_statistic_fails(null_triples):
    """Fault class: a statistic that does not change when P and N trade places (the twins' masking effects
    summed instead of differenced) reads masking in general, not the distractor: the swaps reject."""
    assert label_swap_control(null_triples, seed=2).passed
    c = label_swap_control(null_triples, seed=2, outcome=label_blind_masking)
    assert not c.passed and c.n_rejecting > c.max_rejecting and c.share == c.n_rejecting / c.n_swaps


def test_label_swap_control_bound_is_the_binomial_tail():
    c = label_swap_control([_triple(f"q{i}", f"d{i % 3}", entropy={("P", "A0"): 2.0 + 0.1 * i}) for i in range(9)],
                           n_swaps=200)
    assert stats.binom.sf(c.max_rejecting - 1, 200, 0.05) >= c.p_threshold > stats.binom.sf(c.max_rejecting, 200, 0.05)


def test_c_plus_control_too_few_twins_moved_fails():
    moved = [_triple(f"q{i}") for i in range(10)]
    assert c_plus_control(moved).passed
    still = {("P", "C+"): 2.0 + C_PLUS_MIN_BITS / 2, ("N", "C+"): 2.0 + C_PLUS_MIN_BITS / 2}
    triples = [_triple(f"q{i}", entropy=still) if i < 2 else moved[i] for i in range(10)]  # 16 of 20 twins move
    c = c_plus_control(triples)
    assert not c.passed and (c.n_moved, c.n_twins, c.share) == (16, 20, 0.8)


def test_arm_move_counts_the_sink_arms_moves_in_both_directions():
    """The sink arm is described: its mean move and how many twins move by C+'s bar, up or down."""
    triples = [_triple(f"q{i}", entropy={("P", "sink"): 2.0 + (0.3 if i % 2 else -0.3), ("N", "sink"): 2.01})
               for i in range(4)]
    m = arm_move(triples, "sink")
    assert (m.arm, m.n_moved, m.n_twins, m.share) == ("sink", 4, 8, 0.5)
    assert m.mean_bits == pytest.approx(0.005)


@pytest.mark.parametrize("table, key", [("span_mass", ("P", "A1")), ("sink_mass", ("N", "sink"))])
def test_manipulation_control_mass_left_under_a_mask_fails(table, key):
    triples = [_triple(f"q{i}") for i in range(4)]
    assert manipulation_control(triples).passed
    triples[1] = _triple("q1", **{table: {key: 10 * MASS_ZERO_TOL}})
    assert not manipulation_control(triples).passed


def test_manipulation_control_reports_dose_ratios():
    m = manipulation_control([_triple(span_mass={(v, "L0.5"): 0.1 for v in VARIANTS} | {(v, "L0.25"): 0.05
                                                                                        for v in VARIANTS})])
    assert (m.ratio_l05, m.ratio_l025, m.a0_mean) == pytest.approx((0.5, 0.25, 0.2))


# --------------------------------------------------------------------------- secondary estimates


def test_proportion_removed_planted_share_recovered():
    """Masking removes three quarters of each triple's P - N gap: D(1) = gap, D(0) = gap / 4."""
    triples = [_triple(f"q{i}", f"d{i % 4}", entropy={("P", "A0"): 2.0 + gap, ("P", "A1"): 2.0 + gap / 4})
               for i, gap in enumerate(np.linspace(0.1, 0.5, 12))]
    a = analyze_intervention(triples, seed=0, n_resamples=199)
    assert a.proportion_removed.value == pytest.approx(0.75)
    assert a.proportion_removed.ci_low == pytest.approx(0.75) and a.proportion_removed.ci_high == pytest.approx(0.75)


def test_mediation_fit_planted_slope_recovered():
    rng = np.random.default_rng(0)
    m_gap, m_mean = rng.uniform(0, 0.2, 200), rng.uniform(0.1, 0.3, 200)
    gap = 0.02 + 2.0 * m_gap + rng.normal(0, 0.01, 200)
    slope, share = mediation_fit(gap, m_gap, m_mean)
    assert slope == pytest.approx(2.0, abs=0.05)
    assert share == pytest.approx(slope * m_gap.mean() / gap.mean())
    assert math.isnan(mediation_fit(gap, np.zeros(200), m_mean)[0])  # no mediator variance: no slope


# --------------------------------------------------------------------------- power


def test_power_at_plain_t_matches_noncentral_t_by_hand():
    """One triple a distractor and no between-distractor variance: the plain one-sided t at alpha / 4."""
    sd, n, effect = 0.2, 30, 0.1
    crit = stats.t.isf(0.05 / FAMILY_SIZE, n - 1)
    assert power_at(sd, n, n, effect, icc=0.0) == pytest.approx(stats.nct.sf(crit, n - 1, effect * math.sqrt(n) / sd))


def test_required_triples_is_the_smallest_n_reaching_the_target():
    n = required_triples(0.15, G, 0.05, icc=0.1)
    assert power_at(0.15, n, G, 0.05, icc=0.1) >= 0.8 > power_at(0.15, n - 1, G, 0.05, icc=0.1)
    assert required_triples(0.45, G, 0.05, icc=0.2) is None  # the distractors' own variance caps the power


def test_power_table_rows_state_power_ceiling_and_n():
    rows = power_table({"did_entropy": 0.15, "h4b_forced": 0.45}, N, G, icc=0.2)
    assert [r.test for r in rows] == ["did_entropy", "h4b_forced"]
    assert all(r.power <= r.ceiling for r in rows) and rows[1].required_triples is None
    assert math.isnan(power_at(math.nan, N, G, 0.05))  # a pilot too small for an SD states no power
    with pytest.raises(ValueError, match="icc"):
        power_at(0.1, N, G, 0.05, icc=1.5)


# --------------------------------------------------------------------------- means per arm (the report's plot and table)


def test_arm_means_are_the_means_over_triples_with_a_normal_interval(null_triples):
    """Each (table, twin, arm) and each dose gap: the plain mean, and z(0.975) * sd / sqrt(n) beside it."""
    got = arm_means(null_triples)
    n, z = len(null_triples), stats.norm.ppf(0.975)
    for table, v, a in (("entropy", "P", "A0"), ("beta", "N", "C+"), ("span_mass", "P", "L0.5")):
        vals = np.array([getattr(t, table)[v, a] for t in null_triples])
        m = got.by_arm[table, v, a]
        assert m.mean == np.mean(vals) and m.n == n and m.level == 0.95
        assert m.half_width == pytest.approx(z * vals.std(ddof=1) / math.sqrt(n), rel=1e-12)
    gap = np.array([t.entropy["P", "L0.25"] - t.entropy["N", "L0.25"] for t in null_triples])
    assert got.dose_gap[1].mean == pytest.approx(gap.mean(), rel=1e-12)
    assert len(got.by_arm) == 4 * len(VARIANTS) * len(ARMS)


def test_arm_means_one_triple_has_no_interval():
    assert arm_means([_triple()]).by_arm["entropy", "P", "A0"].half_width == 0.0
