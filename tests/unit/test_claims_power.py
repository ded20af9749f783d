"""H5 (subword commitment), H6 (content vs temperature) and the power figures; no weights.

Statistical tests here use fixed seeds and counts; each has a negative control the
same test must reject (or, for H5's shuffle control, must not reject).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from lab.analysis.hypotheses import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, judge
from lab.analysis.claims import (category_share_test, content_vs_settings_test, subword_test, variance_components,
                                 word_positions)
from lab.analysis.power import (power_note, power_summary, rank_biserial_min_effect, rank_biserial_n_needed,
                                spearman_min_effect, spearman_n_needed)
from lab.analysis.study import judge_with_power

RESAMPLES = 499


def test_word_positions_from_decoded_pieces():
    pieces = [" The", " un", "believ", "able", " cat", ".", "\n", "Hel", "lo", " 42", " x", "'s"]
    assert word_positions(pieces) == ["", "initial", "continuation", "continuation", "", "", "", "initial",
                                      "continuation", "", "", ""]


def _decodes(seed: int, shift: float, n_prompts: int = 30):
    rng = np.random.default_rng(seed)
    out = {}
    for p in range(n_prompts):
        words = []
        ent = []
        for _ in range(6):
            k = int(rng.integers(2, 4))
            words += ["initial"] + ["continuation"] * (k - 1)
            ent += [rng.gamma(2, 1) + shift] + list(rng.gamma(2, 1, size=k - 1))
            words.append("")
            ent.append(rng.gamma(2, 1))
        out[f"p{p}"] = {"entropy_bits": ent, "word": words}
    return out


def test_subword_test_planted_supported_and_shuffle_control_not_rejected():
    r = judge([subword_test(_decodes(1, shift=2.0), n_resamples=RESAMPLES)])[0]
    assert r.verdict == SUPPORTED and r.effect > 0.5
    assert not r.details["control_rejects"] and r.details["control_p"] > 0.05


def test_subword_test_negative_control_no_difference_not_supported():
    r = judge([subword_test(_decodes(2, shift=0.0), n_resamples=RESAMPLES)])[0]
    assert r.verdict != SUPPORTED


def test_subword_control_rejecting_makes_h5_inconclusive():
    """The rule: whenever the shuffled-label control rejects, H5 is inconclusive, however small its own p
    (here a pure position effect gives a tiny p; the control's flag is set to simulate it rejecting)."""
    rng = np.random.default_rng(3)
    dec = {}
    for p in range(30):
        ent = list(np.linspace(8, 0, 40) + rng.normal(0, 0.2, 40))
        word = ["initial"] * 20 + ["continuation"] * 20  # pure position effect
        dec[f"p{p}"] = {"entropy_bits": ent, "word": word}
    r = subword_test(dec, n_resamples=RESAMPLES)
    assert judge_with_power([subword_test(dec, n_resamples=RESAMPLES)])[0].verdict == SUPPORTED
    r.details["control_rejects"] = True
    assert judge_with_power([r])[0].verdict == INCONCLUSIVE


def test_subword_test_too_few_prompts_untested_in_words():
    r = subword_test({"a": {"entropy_bits": [1.0, 2.0], "word": ["initial", "continuation"]}})
    assert not math.isfinite(r.p_value) and "need 5" in r.note


def _alphas(seed: int, prompt_sd: float, temp_effect: float, cat_effect: float = 0.0, n: int = 24):
    """Alpha of n prompts (categories in turn) at three temperatures: a prompt effect of SD prompt_sd, a
    category effect growing by cat_effect per category, temperature effects 0, temp_effect, 2 temp_effect."""
    rng = np.random.default_rng(seed)
    cats = ["factual", "creative", "code", "math", "ambiguous", "summary"]
    alpha, cat = {}, {}
    for i in range(n):
        base = 0.3 + cat_effect * (i % 6) / 5 + rng.normal(0, prompt_sd)
        alpha[f"p{i}"] = [float(np.clip(base + temp_effect * t + rng.normal(0, 0.03), 0, 1)) for t in (0, 1, 2)]
        cat[f"p{i}"] = cats[i % 6]
    return alpha, cat


def test_content_vs_settings_planted_prompt_variance_supported():
    r = judge([content_vs_settings_test(_alphas(4, prompt_sd=0.15, temp_effect=0.0)[0])])[0]
    assert r.verdict == SUPPORTED and r.details["var_prompt"] > r.details["var_temperature"]


def test_content_vs_settings_negative_control_temperature_dominates_not_supported():
    r = judge([content_vs_settings_test(_alphas(5, prompt_sd=0.02, temp_effect=0.2)[0])])[0]
    assert r.verdict == NOT_SUPPORTED and r.effect < 0


def test_content_vs_settings_prompt_variance_without_category_is_not_category():
    """Regression (fault class: a test that cannot fail; the old H6 read prompt-to-prompt variance as a
    category effect): prompt variance with no category effect supports H6 (content) but not H6c."""
    alpha, cats = _alphas(6, prompt_sd=0.15, temp_effect=0.0, n=36)
    h6, h6c = judge([content_vs_settings_test(alpha), category_share_test(alpha, cats, n_resamples=RESAMPLES)])
    assert h6.verdict == SUPPORTED and h6c.verdict != SUPPORTED and h6c.p_value > 0.05


def test_category_share_planted_category_supported():
    alpha, cats = _alphas(7, prompt_sd=0.03, temp_effect=0.0, cat_effect=0.4, n=36)
    r = judge([category_share_test(alpha, cats, n_resamples=RESAMPLES)])[0]
    assert r.verdict == SUPPORTED and r.effect > 0.5


def test_variance_components_recover_a_noise_free_table():
    """Prompt effects (SD known) plus temperature effects, no interaction: the components are exact."""
    prompts = np.array([0.0, 0.2, 0.4, 0.6])[:, None]
    temps = np.array([0.0, 0.1, -0.1])[None, :]
    s_prompt, s_temp, ms_error = variance_components(prompts + temps)
    assert s_prompt == pytest.approx(np.var([0.0, 0.2, 0.4, 0.6], ddof=1))
    assert s_temp == pytest.approx(np.var([0.0, 0.1, -0.1], ddof=1)) and ms_error == pytest.approx(0, abs=1e-15)


def test_h6_tests_too_few_prompts_untested():
    alpha, cats = _alphas(8, prompt_sd=0.1, temp_effect=0.0, n=4)
    assert not math.isfinite(content_vs_settings_test(alpha).p_value)
    assert not math.isfinite(category_share_test(alpha, cats).p_value)
    assert not math.isfinite(content_vs_settings_test({}).p_value)


def test_power_spearman_closed_form_and_inverse():
    a = 0.05
    assert spearman_min_effect(66, a) == pytest.approx(math.tanh(2.8016 * math.sqrt(1.06 / 63)), abs=1e-3)
    n = spearman_n_needed(0.1, a)
    assert spearman_min_effect(n, a) <= 0.1 < spearman_min_effect(n - 1, a)


def test_power_rank_biserial_matches_simulated_power():
    """At the reported smallest detectable r, a simulated Wilcoxon rejects in ~80 % of 400 runs
    (counts; 400 runs give a binomial SD of 8 runs, so 0.8 +- 0.1 fails with p < 1e-4 by chance)."""
    from scipy import stats

    n, a = 18, 0.05
    r_min = rank_biserial_min_effect(n, a)
    rng = np.random.default_rng(6)
    # normal shift d gives r_rb ~ 2 * P(X1 + X2 > 0) - 1 for X ~ N(d, 1): solve for d by bisection on draws
    lo, hi = 0.0, 3.0
    for _ in range(30):
        mid = (lo + hi) / 2
        x = rng.normal(mid, 1, size=(20000, 2)).sum(axis=1)
        lo, hi = (mid, hi) if 2 * (x > 0).mean() - 1 < r_min else (lo, mid)
    rejections = sum(stats.wilcoxon(rng.normal(lo, 1, n)).pvalue < a for _ in range(400))
    assert 280 <= rejections <= 360, (rejections, r_min, lo)
    needed = rank_biserial_n_needed(0.1, a)
    assert rank_biserial_min_effect(needed, a) <= 0.1 < rank_biserial_min_effect(needed - 1, a)


def test_power_summary_and_note_for_inconclusive():
    """An inconclusive test's note carries the power sentence (n needed). A shift of 0.3 bits on 30
    prompts leaves the effect's interval around both 0 and the smallest effect: inconclusive (asserted,
    so the note check always runs)."""
    r = subword_test(_decodes(2, shift=0.3), n_resamples=RESAMPLES)
    judged = judge_with_power([r])[0]
    pw = judged.details["power"]
    assert pw["n"] == 30 and pw["alpha"] == 0.05 and pw["min_detectable"] > 0.1 and pw["underpowered"]
    assert judged.verdict == INCONCLUSIVE, (judged.verdict, r.effect, r.ci_low, r.ci_high)
    assert "underpowered" in judged.note and str(pw["n_needed"]) in judged.note
    assert "underpowered" in power_note(pw)
    assert power_summary(r, 8, 0.05)["alpha"] == pytest.approx(0.05 / 8)


def test_word_positions_byte_level_fragments_identifiers_and_punctuation():
    """Byte fragments (U+FFFD) glue to their word; identifiers go on over '_' and digits; '(' opens, '):' closes."""
    pieces = [" \ufffd", "\ufffd", "mega", " compute", "_average", "(values", "_list", "):\n", " utf", "8",
              " e", ".g", ".", " 42", "7"]
    assert word_positions(pieces) == ["initial", "continuation", "continuation", "initial", "continuation",
                                      "initial", "continuation", "", "initial", "continuation",
                                      "", "", "", "", ""]


def test_word_positions_empty_piece_neither_opens_nor_closes():
    assert word_positions([" un", "", "believ"]) == ["initial", "", "continuation"]
    assert word_positions(["", ""]) == ["", ""]


def test_partial_spearman_removes_a_shared_length_and_matches_the_closed_form():
    """Partial rho given z equals (r_xy - r_xz r_yz) / sqrt((1 - r_xz^2)(1 - r_yz^2)) on ranks; a pair that
    shares only z has partial rho about 0 while its plain rho is large."""
    from scipy import stats

    from lab.analysis.effects import partial_spearman

    rng = np.random.default_rng(3)
    z = rng.uniform(1, 6, 200)
    x, y = -z + rng.normal(0, 0.5, 200), z + rng.normal(0, 0.5, 200)
    rx, ry, rz = (stats.rankdata(v) for v in (x, y, z))
    r = np.corrcoef([rx, ry, rz])
    closed = (r[0, 1] - r[0, 2] * r[1, 2]) / math.sqrt((1 - r[0, 2] ** 2) * (1 - r[1, 2] ** 2))
    assert partial_spearman(x, y, z) == pytest.approx(closed, abs=1e-12)
    assert stats.spearmanr(x, y).statistic < -0.7 and abs(partial_spearman(x, y, z)) < 0.15


def test_power_summary_partial_spearman_loses_one_degree_of_freedom():
    from lab.analysis.hypotheses import TestResult
    from lab.analysis.power import partial_spearman_min_effect, spearman_min_effect

    t = TestResult("H1", "", "", "partial_spearman_rho", -0.2, -0.3, -0.1, 0.01, 100, -1, 0.1)
    p = power_summary(t, m=8, alpha=0.05)
    assert p["min_detectable"] == pytest.approx(spearman_min_effect(99, 0.05 / 8))
    assert p["min_detectable"] == pytest.approx(partial_spearman_min_effect(100, 0.05 / 8))
    assert p["n_needed"] == 1351  # 0.1 at alpha 0.05 / 8: the Spearman's 1350 plus the covariate
