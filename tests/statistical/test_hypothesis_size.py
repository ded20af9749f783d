"""Statistical tests: every hypothesis test of the study keeps its size under a simulated null,
and finds a planted effect at the power :mod:`lab.analysis.power` claims.

Data: :mod:`tests.simulated_study`, studies with the structure of `make study`
(the embedded prompt set's 102 rows: 66 clean prompts, 18 twin triples sharing a question,
the H6 subset of :data:`lab.study.config.TEMPERATURE_SUBSET_PER_CATEGORY` clean prompts a
category at three temperatures; question and prompt effects, tokens clustered in prompts).
Every count is compared with a binomial, never a proportion with a tolerance:

* size: a test rejects (raw two-sided p < ALPHA), or is called "supported", in ``count``
  of N null studies; the check fails when ``P(X >= count) < P_THRESHOLD`` for
  X ~ Binomial(N, nominal rate). With N = 100 and the nominal 5 % that allows up to 12;
  with N = 300, up to 28.
* power: a planted effect of the size the power module calls detectable at 80 % (at
  ALPHA / m, m = the family's 9 tests, the level of Holm's strictest step) is detected
  (p < ALPHA / m with the predicted sign) in ``count`` of N studies; the check fails when
  ``count`` lies in either tail of Binomial(N, 0.8) beyond P_THRESHOLD / 2. Where the
  power module states no figure (H2, H6c), the smallest effect of interest is planted and
  checked the same way against the power docs/design.md states. Each planted effect has a
  sign control: planted with the opposite sign (H2, H5), or with the categories dealt
  alike over alpha (H3, H6c: a variance share below chance), it is not detected with the
  predicted sign.

False-positive rate of each check: at most P_THRESHOLD = 0.1 %. Seeds are fixed, so a
passing run stays passing. Intervals are not computed for the size checks
(``n_resamples = 0``): an interval can only take "supported" away
(:func:`lab.analysis.hypotheses.verdict`), so the counts are upper bounds of the study's
own. Each check that a procedure keeps its size has a negative control: the procedure the
lab used before (tokens as independent for H2, eta^2 of category against temperature for
H6, prompts as independent for H1) is run on the same data and must fail it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from lab.analysis import power
from lab.analysis.claims import H6_COLUMNS, category_share_test, content_vs_settings_test, subword_test
from lab.analysis.hypotheses import (ALPHA, FAMILY_SIZE, HYPOTHESES, SMALLEST_EFFECT, SMALLEST_ETA_SQ, SUPPORTED,
                                     acceptance_entropy_test, category_test, paired_test, partial_correlation_test)
from lab.analysis.placebo import placebo_check
from lab.analysis.study import analyze, question_of
from tests.simulated_study import (LOOKBACK_PROMPT_SD, LOOKBACK_QUESTION_SD, Plant, h6_subset, pair_design_prompts,
                                   simulate_study)

LOOKBACK_PER_SD = math.hypot(LOOKBACK_QUESTION_SD, LOOKBACK_PROMPT_SD)  # the planted confound in the measure's units

P_THRESHOLD = 1e-3  # per-check false-positive rate
N_ANALYZED = 100  # null studies run end to end through analyze (about 0.2 s each)
N_DRAWN = 300  # null studies for the tests whose unit of inference is at stake (H1, H2): direct calls
N_POWER = 200  # planted studies per power check
N_H6 = 1000  # H6 tables at the boundary of its null (a table costs about 3 ms)
CLAIMED_POWER = power.POWER
ALPHA_M = ALPHA / FAMILY_SIZE  # Holm's strictest step, at which the power module states power
N_H3_POWER = 400  # H3's planted studies: enough to tell the 0.9 of a noncentral chi^2 claim from 0.8
N_H5_POWER = 600  # H5's planted studies: enough to tell its measured 0.88 from the claimed 0.8
N_H6C_POWER = 1000  # H6c's planted studies: at its stated 0.5 %, 200 studies would expect one detection
# Power at the smallest effect of interest where lab.analysis.power states none (docs/design.md, "Size and
# power, checked by simulation"), measured on seeds apart from the checks': H2 590 of 1000 studies,
# H6c 10 of 2000.
H2_STATED_POWER = 0.58
H6C_STATED_POWER = 0.005


def _size_ok(count: int, n: int, rate: float) -> tuple[bool, str]:
    tail = float(stats.binom.sf(count - 1, n, rate))
    return tail >= P_THRESHOLD, f"{count} of {n} at nominal {rate:g}: P(X >= {count}) = {tail:.2g}"


def _power_ok(count: int, n: int, rate: float) -> tuple[bool, str]:
    low, high = float(stats.binom.cdf(count, n, rate)), float(stats.binom.sf(count - 1, n, rate))
    return min(low, high) >= P_THRESHOLD / 2, f"{count} of {n} at claimed power {rate:g}: tails {low:.2g}, {high:.2g}"


def _twins(rows, neutral_only: bool = False):
    """H1's prompts (the twins: the prompts with a context span), or H1c's (the neutral twins)."""
    return [r for r in rows if r["variant"] == "neutral" or (not neutral_only and r["variant"] == "poisoned")]


def _h1_inputs(rows):
    return ([r["lookback_heads"] for r in rows], [r["mean_entropy_bits"] for r in rows],
            [r["n_prompt_tokens"] for r in rows], [question_of(r) for r in rows])


def _independent_t_p(r: float, n: int) -> float:
    """The partial rho's p as the lab computed it before: prompts independent, t on n - 3 df."""
    return float(2 * stats.t.sf(abs(r) * math.sqrt((n - 3) / (1 - r * r)), n - 3))


@pytest.fixture(scope="module")
def null_studies():
    """N_DRAWN null studies: for each, the H1 and H2 p-values both ways; the first N_ANALYZED also
    through :func:`lab.analysis.study.analyze` (every test, Holm, the verdicts, the placebo)."""
    out = []
    for seed in range(N_DRAWN):
        rows, tokens, decodes = simulate_study(seed, decodes=seed < N_ANALYZED)
        x, y, n, q = _h1_inputs(_twins(rows))
        h1 = partial_correlation_test(x, y, n, clusters=q, n_resamples=0)
        h2 = acceptance_entropy_test([t["draft_entropy_bits"] for t in tokens], [t["accepted"] for t in tokens],
                                     [t["prompt_id"] for t in tokens], n_resamples=0)
        out.append({"h1_p": h1.p_value, "h1_p_independent": _independent_t_p(h1.effect, h1.n), "h2_p": h2.p_value,
                    "h2_p_independent": h2.details["p_independent_tokens"],
                    "analysis": analyze(rows, tokens, decodes=decodes, seed=seed, n_resamples=0)
                    if seed < N_ANALYZED else None})
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", list(HYPOTHESES))
def test_hypothesis_size_each_test_rejects_and_supports_at_most_nominal(null_studies, name):
    """Under the null every test's raw p falls below ALPHA in at most its nominal share of studies, and
    "supported" (Holm, predicted sign) is called no more often."""
    analyses = [s["analysis"] for s in null_studies if s["analysis"] is not None]
    rejected = sum(a.test(name).p_value < ALPHA for a in analyses)
    supported = sum(a.test(name).verdict == SUPPORTED for a in analyses)
    ok, msg = _size_ok(rejected, len(analyses), ALPHA)
    assert ok, f"{name} rejected (raw p < {ALPHA}) {msg}"
    ok, msg = _size_ok(supported, len(analyses), ALPHA)
    assert ok, f"{name} supported {msg}"


@pytest.mark.slow
def test_hypothesis_size_family_any_supported_at_most_alpha(null_studies):
    """Holm across the family: a null study has any "supported" verdict in at most ALPHA of studies."""
    analyses = [s["analysis"] for s in null_studies if s["analysis"] is not None]
    count = sum(SUPPORTED in a.verdicts().values() for a in analyses)
    ok, msg = _size_ok(count, len(analyses), ALPHA)
    assert ok, f"some hypothesis supported in {msg}"


@pytest.mark.slow
def test_hypothesis_size_placebo_fails_at_most_nominal_under_null(null_studies):
    """The placebo-health control fails (p < its tolerance) in at most its nominal share of null studies."""
    analyses = [s["analysis"] for s in null_studies if s["analysis"] is not None]
    for name in ("H1", "H1c"):
        count = sum(a.test(name).details["placebo"]["passes"] is False for a in analyses)
        ok, msg = _size_ok(count, len(analyses), ALPHA)
        assert ok, f"{name} placebo failed in {msg}"


@pytest.mark.slow
@pytest.mark.parametrize("key, name", [("h1_p", "H1 cluster-robust by question"),
                                       ("h2_p", "H2 cluster-robust by prompt")])
def test_hypothesis_size_clustered_units_at_most_nominal(null_studies, key, name):
    """H1 over prompts that share questions and H2 over tokens that share prompts keep their size."""
    count = sum(s[key] < ALPHA for s in null_studies)
    ok, msg = _size_ok(count, len(null_studies), ALPHA)
    assert ok, f"{name} rejected {msg}"


@pytest.mark.slow
def test_hypothesis_size_negative_control_tokens_as_independent_fail(null_studies):
    """Negative control: H2's old p (scipy's point-biserial over tokens taken as independent) fails the
    same size check on the same null studies, so the check can see a clustered unit."""
    count = sum(s["h2_p_independent"] < ALPHA for s in null_studies)
    ok, msg = _size_ok(count, len(null_studies), ALPHA)
    assert not ok, f"tokens-as-independent H2 passed the size check: {msg}"


def _h6_table(rng: np.random.Generator, n_prompts: int, prompt_sd: float, shift: float,
              noise_sd: float) -> dict[str, list[float]]:
    """Alpha of n_prompts prompts at three temperatures: prompt effect, temperature effects +shift, 0,
    -shift, run-to-run noise."""
    a = (0.5 + rng.normal(0, prompt_sd, (n_prompts, 1)) + np.array([shift, 0.0, -shift])
         + rng.normal(0, noise_sd, (n_prompts, 3)))
    return {f"p{i}": row.tolist() for i, row in enumerate(a)}


H6_PROMPT_SD, H6_NOISE_SD = 0.14, 0.1  # the simulated study's prompts' SD of alpha; binomial noise of ~20 tokens


def test_h6_boundary_null_supported_direction_at_most_nominal():
    """At H6's boundary null (the temperatures' variance equal to the prompts') the test rejects with
    the predicted sign in at most ALPHA / 2 of tables (the one-sided share of a two-sided test)."""
    rng = np.random.default_rng(61)
    n = len(h6_subset())
    count = 0
    for _ in range(N_H6):
        r = content_vs_settings_test(_h6_table(rng, n, H6_PROMPT_SD, H6_PROMPT_SD, H6_NOISE_SD))
        count += r.p_value < ALPHA and r.effect > 0
    ok, msg = _size_ok(count, N_H6, ALPHA / 2)
    assert ok, f"H6 at its boundary null, {n} prompts: {msg}"


def _old_h6_supported(rng: np.random.Generator, alpha: np.ndarray, cats: np.ndarray, n_boot: int) -> bool:
    """The H6 the lab ran before, implemented here as a negative control: eta^2 of category minus eta^2 of
    temperature on the prompts x temperatures table, stratified bootstrap over prompts, two-sided p."""
    def etas(a, c):
        grand, total = a.mean(), ((a - a.mean()) ** 2).sum()
        ss_cat = sum((c == u).sum() * a.shape[1] * (a[c == u].mean() - grand) ** 2 for u in np.unique(c))
        return ss_cat / total - a.shape[0] * ((a.mean(axis=0) - grand) ** 2).sum() / total

    strata = [np.flatnonzero(cats == u) for u in np.unique(cats)]
    boot = np.array([etas(alpha[idx], cats[idx]) for idx in
                     (np.concatenate([rng.choice(s, s.size) for s in strata]) for _ in range(n_boot))])
    p = max(2 * min((boot <= 0).mean(), (boot >= 0).mean()), 1 / (n_boot + 1))
    return bool(p < ALPHA and etas(alpha, cats) > 0)


def test_h6_negative_control_old_category_statistic_fails_size_check():
    """Negative control: the old H6 (eta^2 category - eta^2 temperature, 2 prompts a category) on tables
    with no category and no temperature effect, only prompt-to-prompt variance, is "supported" far
    above its nominal rate: the size check rejects it (it did 40 of 40 in issue 36's simulation)."""
    rng = np.random.default_rng(62)
    cats = np.repeat(np.arange(6), 2)
    n = 40
    count = sum(_old_h6_supported(rng, np.array(list(_h6_table(rng, 12, 0.1, 0.0, 0.03).values())), cats, 199)
                for _ in range(n))
    ok, msg = _size_ok(count, n, ALPHA)
    assert not ok, f"the old H6 passed the size check: {msg}"


def test_h6_power_at_the_stated_design():
    """H6's stated power (lab.study.config: prompt SD of alpha 0.14, no temperature effect, run-to-run SD
    0.1, the study's subset) at ALPHA / m is met: about 0.86."""
    stated = 0.86
    rng = np.random.default_rng(63)
    n = len(h6_subset())
    count = 0
    for _ in range(N_POWER):
        r = content_vs_settings_test(_h6_table(rng, n, H6_PROMPT_SD, 0.0, H6_NOISE_SD))
        count += r.p_value < ALPHA_M and r.effect > 0
    ok, msg = _power_ok(count, N_POWER, stated)
    assert ok, f"H6 with {n} prompts: {msg}"


def _spearman_power(r: float, n: int, covariates: int = 1) -> float:
    """Power of the partial Spearman at |rho| = r under the power module's model (Fisher z, variance
    1.06 / (n - 3 - covariates))."""
    return float(stats.norm.cdf(math.atanh(r) / math.sqrt(1.06 / (n - 3 - covariates)) - stats.norm.isf(ALPHA_M / 2)))


DESIGNS = {"make study": None, "pair study": pair_design_prompts}  # the embedded set; --limit 344 of the power set


def _design(name):
    prompts = DESIGNS[name]() if DESIGNS[name] else None
    return {"prompts": prompts, "subset": frozenset() if prompts else None}  # H6's subset is not at stake here


@pytest.fixture(scope="module", params=list(DESIGNS))
def planted_h1(request):
    """N_POWER studies of one design with a planted partial rho among the twins at the effect the report calls
    detectable at 80 % for H1 (:func:`lab.analysis.power.power_summary`: on the questions, since a question's two
    twins cluster), which is also H1c's (one neutral twin a question)."""
    design = _design(request.param)
    rows, _, _ = simulate_study(0, decodes=False, **design)
    n_questions = len(_twins(rows, neutral_only=True))
    rho_s = power.partial_spearman_min_effect(n_questions, ALPHA_M)
    rho = 2 * math.sin(math.pi * rho_s / 6)  # Pearson rho whose Spearman rho is rho_s (bivariate normal)
    out = []
    for seed in range(N_POWER):
        rows, _, _ = simulate_study(10_000 + seed, Plant(h1=rho), decodes=False, **design)
        out.append({name: (partial_correlation_test(*_h1_inputs(rs)[:3], clusters=_h1_inputs(rs)[3], n_resamples=0),
                           placebo_check(*_h1_inputs(rs), seed=seed))
                    for name, rs in (("H1", _twins(rows)), ("H1c", _twins(rows, neutral_only=True)))})
    return request.param, n_questions, rho_s, out


@pytest.mark.slow
def test_hypothesis_power_h1_and_h1c_at_least_claimed(planted_h1):
    """At the partial rho the report calls detectable at 80 % power (H1 on its questions, H1c on its neutral
    twins, at ALPHA / m) both detect it in at least about 80 % of studies of the design (H1, on both twins
    of every question, more often: the claim counts questions, not prompts)."""
    design, n_questions, rho_s, studies = planted_h1
    h1 = studies[0]["H1"][0]
    claimed = power.power_summary(replace(h1, effect_name="partial_spearman_rho"), FAMILY_SIZE, ALPHA)
    assert claimed["n"] == n_questions and claimed["unit"] == "questions", claimed
    for name in ("H1", "H1c"):
        count = sum(s[name][0].p_value < ALPHA_M and s[name][0].effect < 0 for s in studies)
        tail = float(stats.binom.cdf(count, len(studies), CLAIMED_POWER))
        assert tail >= P_THRESHOLD, (f"{design}: {name} found the planted partial rho {rho_s:.3f} in {count} of "
                                     f"{len(studies)} (P = {tail:.2g} at the claimed {CLAIMED_POWER})")


@pytest.mark.slow
@pytest.mark.parametrize("design", list(DESIGNS))
def test_hypothesis_size_h1_and_h1c_at_each_design(design):
    """Under the null, H1 (twins clustered by question) and H1c (neutral twins) reject at most at their nominal
    rate at both designs the study runs (make study: 18 questions; the pair's study: 86)."""
    kw = _design(design)
    counts = {"H1": 0, "H1c": 0}
    for seed in range(N_DRAWN):
        rows, _, _ = simulate_study(50_000 + seed, decodes=False, **kw)
        for name, rs in (("H1", _twins(rows)), ("H1c", _twins(rows, neutral_only=True))):
            x, y, n, q = _h1_inputs(rs)
            counts[name] += partial_correlation_test(x, y, n, clusters=q, n_resamples=0).p_value < ALPHA
    for name, count in counts.items():
        ok, msg = _size_ok(count, N_DRAWN, ALPHA)
        assert ok, f"{design}: {name} rejected {msg}"


@pytest.mark.slow
def test_hypothesis_placebo_passes_when_h1_is_true(planted_h1):
    """A true effect of the context measure with no confound: the placebo fails in at most its nominal share
    of studies (its donors never receive, so a true effect cannot correlate swapped pairs)."""
    design, _, _, studies = planted_h1
    for name in ("H1", "H1c"):
        count = sum(s[name][1]["passes"] is False for s in studies)
        ok, msg = _size_ok(count, len(studies), PLACEBO_FLAGS_TRUE_EFFECT.get((design, name), ALPHA))
        assert ok, f"{design}: {name} placebo failed under a true unconfounded effect in {msg}"


# Where the placebo flags a true unconfounded effect more often than its nominal 5 %: make study's 18 questions
# give the placebo 9 recipient questions, and the cluster-robust t on 8 df is liberal there (H1 24 and H1c 27 of
# 200 studies at the planted effect; seeds 10,000-10,199). A flag makes H1 inconclusive, never supported: it
# costs power, not size (docs/design.md).
PLACEBO_FLAGS_TRUE_EFFECT = {("make study", "H1"): 0.14, ("make study", "H1c"): 0.14}


# The planted confound: the context measure falls (in its SDs) and entropy rises by these multiples of
# (z^2 - 1), z the SD units of the twins' log length; strong enough that the adjusted H1 is fooled in nearly
# every study.
CONFOUND_HEALTH, CONFOUND_ENTROPY = 2.0, 1.3


@pytest.mark.slow
def test_hypothesis_placebo_flags_a_length_confound_and_h1_is_not_supported():
    """Fault class: a context measure that is a proxy of something prompts of one length share (here a U-shaped
    function of length, which the rank adjustment for length leaves in) "supports" H1. The adjusted test
    is fooled; the placebo must flag it in at least 80 % of studies, and the rule must then not call H1
    supported."""
    n = 40
    flagged = fooled = supported = 0
    for seed in range(n):  # the pair's design: make study's 9 recipient questions flag it in about half (20 of 40)
        rows, tokens, _ = simulate_study(30_000 + seed, decodes=False, **_design("pair study"))
        twins = _twins(rows)
        logn = np.log([r["n_prompt_tokens"] for r in twins])
        z = (logn - logn.mean()) / logn.std()
        for r, zi in zip(twins, z):
            r["lookback_heads"] -= CONFOUND_HEALTH * (zi ** 2 - 1) * LOOKBACK_PER_SD
            r["mean_entropy_bits"] += CONFOUND_ENTROPY * (zi ** 2 - 1)
        a = analyze(rows, tokens, seed=seed, n_resamples=0)
        h1 = a.test("H1")
        # A U-shaped health drifts with length within the variants, so the length-drift rule may already untest
        # H1 (lab.analysis.length_drift); the placebo is judged on the figures as measured either way.
        measured = h1.details.get("as_measured", {"p_value": h1.p_value, "effect": h1.effect})
        fooled += measured["p_value"] < ALPHA and measured["effect"] < 0
        flagged += h1.details["placebo"]["passes"] is False
        supported += h1.verdict == SUPPORTED and h1.details["placebo"]["passes"] is False
    assert fooled > n // 2, f"the planted confound fooled the adjusted H1 in only {fooled} of {n}"
    tail = float(stats.binom.cdf(flagged, n, CLAIMED_POWER))
    assert tail >= P_THRESHOLD, f"placebo flagged the confound in {flagged} of {n} (P = {tail:.2g})"
    assert supported == 0, f"H1 supported in {supported} studies whose placebo failed"


def test_hypothesis_power_h4_at_least_claimed():
    """At the twins' smallest detectable rank-biserial r (18 pairs, ALPHA / m) the paired test detects a
    planted poisoned - neutral health drop in at least the claimed 80 % (the normal approximation behind
    the claim is conservative with 18 pairs: at r near 0.97 every sign is positive)."""
    r_min = power.rank_biserial_min_effect(18, ALPHA_M)
    shift = float(stats.norm.ppf((1 + r_min) / 2) / math.sqrt(2))  # r_rb = 2 Phi(sqrt(2) d) - 1 for normal d
    n = 60
    count = 0
    for seed in range(n):
        rows, _, _ = simulate_study(40_000 + seed, Plant(h4=shift), decodes=False)
        neutral = {r["twin_of"]: r for r in rows if r["variant"] == "neutral"}
        poisoned = [r for r in rows if r["variant"] == "poisoned"]
        res = paired_test([neutral[p["twin_of"]]["context_health"] for p in poisoned],
                          [p["context_health"] for p in poisoned], name="H4a", predicted_sign=-1, n_resamples=0)
        count += res.p_value < ALPHA_M and res.effect < 0
    tail = float(stats.binom.cdf(count, n, CLAIMED_POWER))
    assert tail >= P_THRESHOLD, f"H4a planted r {r_min:.3f} detected in {count} of {n} (P = {tail:.2g})"


def _h2_detected(plant: Plant, seeds: range) -> tuple[int, int]:
    """Studies (of ``seeds``) in which H2 rejects at ALPHA_M with the predicted sign (r < 0), and with the other."""
    predicted = other = 0
    for seed in seeds:
        _, tokens, _ = simulate_study(seed, plant, decodes=False)
        r = acceptance_entropy_test([t["draft_entropy_bits"] for t in tokens], [t["accepted"] for t in tokens],
                                    [t["prompt_id"] for t in tokens], n_resamples=0)
        predicted += r.p_value < ALPHA_M and r.effect < 0
        other += r.p_value < ALPHA_M and r.effect > 0
    return predicted, other


@pytest.mark.slow
def test_hypothesis_power_h2_at_the_smallest_effect_as_stated():
    """At H2's smallest effect of interest (point-biserial r of -0.1, acceptance falling with a token's
    draft entropy about its prompt's level) the clustered test detects it at the power docs/design.md
    states (no closed form: H2's power comes from a run's interval)."""
    count, _ = _h2_detected(Plant(h2=SMALLEST_EFFECT), range(50_000, 50_000 + N_POWER))
    ok, msg = _power_ok(count, N_POWER, H2_STATED_POWER)
    assert ok, f"H2 planted r -{SMALLEST_EFFECT}: {msg}"


@pytest.mark.slow
def test_hypothesis_power_h2_opposite_sign_not_detected_as_predicted():
    """Negative control: acceptance rising with draft entropy (r of +0.1) is detected with the other sign,
    never counted as H2's predicted one beyond its one-sided nominal share."""
    count, other = _h2_detected(Plant(h2=-SMALLEST_EFFECT), range(55_000, 55_000 + N_POWER))
    ok, msg = _size_ok(count, N_POWER, ALPHA_M / 2)
    assert ok, f"H2 planted r +{SMALLEST_EFFECT} detected as predicted in {msg}"
    assert other > N_POWER // 4, f"the reversed plant was detected in only {other} of {N_POWER}: a vacuous control"


def _dealt_alike(values, labels) -> list:
    """The labels dealt in turn over the values' rank order: categories as alike as the values allow
    (a variance share below chance, the opposite sign of a category effect)."""
    order = sorted(dict.fromkeys(labels))
    out = [None] * len(values)
    for rank, i in enumerate(np.argsort(values, kind="stable")):
        out[i] = order[rank % len(order)]
    return out


@pytest.fixture(scope="module")
def planted_h3():
    """N_H3_POWER studies' clean prompts (alpha, category) with H3's smallest detectable eta^2_H planted
    (66 clean prompts in 6 categories, ALPHA_M)."""
    eta = power.eta_sq_min_effect(66, 6, ALPHA_M)
    out = []
    for seed in range(60_000, 60_000 + N_H3_POWER):
        rows, _, _ = simulate_study(seed, Plant(h3=eta), decodes=False)
        out.append(([r["alpha"] for r in rows if r["variant"] == "clean"],
                    [r["category"] for r in rows if r["variant"] == "clean"]))
    return eta, out


@pytest.mark.slow
def test_hypothesis_power_h3_as_claimed(planted_h3):
    """At H3's smallest detectable eta^2_H (80 % power for 66 clean prompts in 6 categories at ALPHA_M),
    Kruskal-Wallis detects a planted category effect on alpha in about 80 % of studies."""
    eta, studies = planted_h3
    results = [category_test(a, c, n_resamples=0) for a, c in studies]
    count = sum(r.p_value < ALPHA_M and r.effect > 0 for r in results)
    ok, msg = _power_ok(count, len(studies), CLAIMED_POWER)
    assert ok, f"H3 planted eta^2_H {eta:.3f} (mean measured {np.mean([r.effect for r in results]):.3f}): {msg}"


@pytest.mark.slow
def test_hypothesis_power_h3_categories_alike_not_detected(planted_h3):
    """Negative control: the same alphas with categories dealt alike (a share below chance) give a
    negative eta^2_H in every study and no detection (an effect size that cannot fall below 0, such as
    H / (n - 1), would fail the first)."""
    _, studies = planted_h3
    results = [category_test(a, _dealt_alike(a, c), n_resamples=0) for a, c in studies]
    positive = sum(r.effect >= 0 for r in results)
    count = sum(r.p_value < ALPHA_M and r.effect > 0 for r in results)
    assert positive == 0, f"categories dealt alike gave eta^2_H >= 0 in {positive} of {len(studies)}"
    ok, msg = _size_ok(count, len(studies), ALPHA_M / 2)
    assert ok, f"H3 with categories dealt alike detected in {msg}"


def _h5_detected(plant: Plant, seeds: range) -> tuple[int, int]:
    """Studies (of ``seeds``) in which H5 rejects at ALPHA_M with the predicted sign (r > 0), and with the other."""
    predicted = other = 0
    for seed in seeds:
        rows, _, decodes = simulate_study(seed, plant)
        r = subword_test(decodes, n_resamples=0, questions={row["id"]: question_of(row) for row in rows})
        predicted += r.p_value < ALPHA_M and r.effect > 0
        other += r.p_value < ALPHA_M and r.effect < 0
    return predicted, other


@pytest.mark.slow
def test_hypothesis_power_h5_at_least_claimed():
    """At H5's smallest detectable rank-biserial r (80 % power for 66 questions at ALPHA_M) the paired
    Wilcoxon over questions detects a planted initial - continuation shift in at least the claimed 80 % of
    studies. The claim is conservative, as H4's: lab.analysis.power.rank_biserial_min_effect takes the
    signed-rank statistic's null SD for its SD under the effect (Noether 1987), which depends on the
    differences' shape, so there is no distribution-free exact figure (measured: 528 of 600, 0.88)."""
    r_min = power.rank_biserial_min_effect(66, ALPHA_M)
    count, _ = _h5_detected(Plant(h5=r_min), range(70_000, 70_000 + N_H5_POWER))
    tail = float(stats.binom.cdf(count, N_H5_POWER, CLAIMED_POWER))
    assert tail >= P_THRESHOLD, f"H5 planted r {r_min:.3f}: {count} of {N_H5_POWER} (P(X <= {count}) = {tail:.2g})"


@pytest.mark.slow
def test_hypothesis_power_h5_opposite_sign_not_detected_as_predicted():
    """Negative control: continuations carrying more entropy than word-initial sub-tokens (r of -r_min) is
    detected with the other sign, never counted as H5's predicted one beyond its one-sided nominal share."""
    r_min = power.rank_biserial_min_effect(66, ALPHA_M)
    count, other = _h5_detected(Plant(h5=-r_min), range(75_000, 75_000 + N_POWER))
    ok, msg = _size_ok(count, N_POWER, ALPHA_M / 2)
    assert ok, f"H5 planted r -{r_min:.3f} detected as predicted in {msg}"
    assert other > N_POWER // 4, f"the reversed plant was detected in only {other} of {N_POWER}: a vacuous control"


@pytest.fixture(scope="module")
def planted_h6c():
    """N_H6C_POWER studies' H6 subsets (alpha at each design temperature, category) with H6c's smallest
    effect of interest planted (epsilon^2 0.01 of the prompts' mean alpha)."""
    out = []
    for seed in range(80_000, 80_000 + N_H6C_POWER):
        rows, _, _ = simulate_study(seed, Plant(h6c=SMALLEST_ETA_SQ), decodes=False)
        sub = [r for r in rows if all(c in r for c in H6_COLUMNS)]
        out.append(({r["id"]: [r[c] for c in H6_COLUMNS] for r in sub}, {r["id"]: r["category"] for r in sub}))
    return out


@pytest.mark.slow
def test_hypothesis_power_h6c_at_the_smallest_effect_as_stated(planted_h6c):
    """At H6c's smallest effect of interest (epsilon^2 0.01) the permutation test on the 36 prompts of the
    subset detects it at the power docs/design.md states (near its one-sided level)."""
    count = 0
    for seed, (alpha, cats) in enumerate(planted_h6c):
        r = category_share_test(alpha, cats, seed=seed, n_resamples=0)
        count += r.p_value < ALPHA_M and r.effect > 0
    ok, msg = _power_ok(count, len(planted_h6c), H6C_STATED_POWER)
    assert ok, f"H6c planted epsilon^2 {SMALLEST_ETA_SQ}: {msg}"


@pytest.mark.slow
def test_hypothesis_power_h6c_categories_alike_not_detected(planted_h6c):
    """Negative control: the subset's categories dealt alike over the prompts' mean alpha (a share below
    chance) give a negative epsilon^2 in every study and no detection with the predicted sign (36 prompts
    cannot show a share below chance: the permutation p stays above ALPHA_M there too)."""
    results = []
    for seed, (alpha, cats) in enumerate(planted_h6c[:N_POWER]):
        ids = list(alpha)
        dealt = dict(zip(ids, _dealt_alike([np.mean(alpha[i]) for i in ids], [cats[i] for i in ids])))
        results.append(category_share_test(alpha, dealt, seed=seed, n_resamples=0))
    positive = sum(r.effect >= 0 for r in results)
    count = sum(r.p_value < ALPHA_M and r.effect > 0 for r in results)
    assert positive == 0, f"categories dealt alike gave epsilon^2 >= 0 in {positive} of {len(results)}"
    ok, msg = _size_ok(count, len(results), ALPHA_M / 2)
    assert ok, f"H6c with categories dealt alike detected in {msg}"


def test_simulated_study_has_the_study_structure():
    """The simulation's rows are the embedded set's: 102 prompts, 18 triples, the study's H6 subset."""
    rows, tokens, decodes = simulate_study(0)
    assert len(rows) == 102 and sum(r["variant"] == "poisoned" for r in rows) == 18
    assert len({question_of(r) for r in rows}) == 66
    assert sum(all(c in r for c in H6_COLUMNS) for r in rows) == len(h6_subset())
    per_prompt = np.bincount(np.unique([t["prompt_id"] for t in tokens], return_inverse=True)[1])
    assert per_prompt.min() >= 10 and per_prompt.max() <= 24 and len(decodes) == 102
