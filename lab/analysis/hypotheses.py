"""The hypothesis tests of the study, Holm's correction and the verdict rule.

Pure functions on numbers (no model, no files, no Rich). Every test statistic and
p-value comes from :mod:`scipy.stats`; effect sizes and intervals from
:mod:`lab.analysis.effects`. The rule itself is stated in :mod:`lab.analysis`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import Any, Sequence, TypeVar

import numpy as np
from scipy import stats

from lab.analysis.effects import (bootstrap_ci, cluster_bootstrap_ci, cluster_robust_slope_p, eta_squared_h,
                                  partial_spearman, partial_spearman_p, pearson_r, rank_biserial_paired)
# The verdict words live in lab.verdicts (every layer reads them); the study's judges name them from here too.
from lab.verdicts import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, UNTESTABLE, VERDICTS  # noqa: F401 (re-exported)

ALPHA = 0.05  # family-wise error rate of the whole family (H1-H6c), for "supported" and "not supported" alike
# Smallest effects worth finding. Correlations and rank-biserial r: 0.1 is Cohen's
# (1988) "small" r. Eta-squared_H: 0.01 is Cohen's "small" for eta^2.
SMALLEST_EFFECT = 0.1
SMALLEST_ETA_SQ = 0.01
# Bootstrap resamples; odd so percentile ends fall on draws. The verdicts' intervals sit at
# FAMILY_CI_LEVEL (about 99.4 %), whose tails hold 0.28 % each: 4999 resamples leave about 14
# draws in each tail, 1999 only 5.
N_RESAMPLES = 4999
MIN_N = 5  # fewer observations (or pairs) than this: not tested, verdict inconclusive

HYPOTHESES = {
    "H1": "Among prompts with a context (the twins' added text), those whose decode reads the context less for its "
          "length have higher mean decode entropy at equal prompt length (partial Spearman rho(lookback_heads, "
          "mean entropy | log prompt tokens) < 0).",
    "H1c": "Among the neutral twins (added text that is not a distractor), a lower lookback_heads goes with higher "
           "mean decode entropy at equal prompt length (partial Spearman rho(lookback_heads, mean entropy | log "
           "prompt tokens) < 0, neutral twins only).",
    "H2": "Drafted tokens with higher draft entropy are accepted less often "
          "(point-biserial r(draft entropy, accepted) < 0).",
    "H3": "The acceptance rate alpha differs between prompt categories "
          "(Kruskal-Wallis on per-prompt alpha, eta-squared_H > 0).",
    "H4a": "A poisoned twin has lower context health than its neutral twin of the same added length "
           "(paired Wilcoxon, poisoned - neutral < 0).",
    "H4b": "A poisoned twin has higher mean decode entropy than its neutral twin of the same added length "
           "(paired Wilcoxon, poisoned - neutral > 0).",
    "H5": "Within a multi-token word the first sub-token has higher decode entropy than its continuations "
          "(paired Wilcoxon over questions, initial - continuation > 0).",
    "H6": "Content moves acceptance more than the sampling temperature does: in a table of alpha over the clean "
          "prompts of a balanced subset x temperatures 0.3, 0.7, 1.0 (top-p not varied), the variance of alpha "
          "between prompts exceeds the variance between temperatures (two-way decomposition with the "
          "prompt-by-temperature interaction as error: sigma^2_prompt - sigma^2_temperature > 0).",
    "H6c": "On the same subset, prompt category explains part of the variance of a prompt's mean alpha over the "
           "temperatures (epsilon^2 of category > 0; permutation of the category labels).",
}
FAMILY_SIZE = len(HYPOTHESES)
# The verdicts' interval level: Bonferroni over the family (the level of Holm's first step), so
# "not supported" (the interval falls short of the smallest effect of interest) is claimed at the
# same family-wise ALPHA as "supported"; fixed in advance, so it never depends on which tests ran.
FAMILY_CI_LEVEL = 1 - ALPHA / FAMILY_SIZE


@dataclass(frozen=True)
class TestResult:
    """One pre-stated hypothesis test (frozen: the judge returns new results).

    Attributes:
        name: A key of :data:`HYPOTHESES` (``"H1"`` ... ``"H6c"``).
        hypothesis: The pre-stated hypothesis text.
        test: The test used, in words.
        effect_name: What ``effect`` is (``"spearman_rho"``, ...).
        effect: The effect size (NaN if it could not be computed).
        ci_low, ci_high: Its interval at ``ci_level`` (NaN if unavailable).
        p_value: Raw two-sided p-value (NaN: not tested).
        n: Observations (prompts, tokens or pairs) the test used.
        predicted_sign: +1 or -1, the predicted direction of ``effect``.
        smallest_effect: Smallest effect of interest for the "not supported" rule.
        p_holm: Holm-corrected p-value within the family (H1-H6c).
        verdict: One of :data:`VERDICTS`.
        note: Why a test could not run, or a caveat.
        untestable: Why the test cannot decide on this study at any n (a precondition failed: its measure
            failed validation on the model, or drifts with length); ``""`` when it can. The study's judge
            (:func:`lab.analysis.study.judge_with_power`) then gives :data:`UNTESTABLE`.
        details: Extra numbers (e.g. the pairwise table for H3).
        ci_level: The interval's confidence level (:data:`FAMILY_CI_LEVEL` in the study).
    """

    name: str
    hypothesis: str
    test: str
    effect_name: str
    effect: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int
    predicted_sign: int
    smallest_effect: float
    p_holm: float = math.nan
    verdict: str = INCONCLUSIVE
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    ci_level: float = FAMILY_CI_LEVEL
    untestable: str = ""


R = TypeVar("R")  # a judged result type: TestResult, or the intervention's InterventionTest


# --------------------------------------------------------------------------- rules


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979).

    With the m finite p-values sorted ascending, p_(1) <= ... <= p_(m), the adjusted
    value is ``max_{j <= i} min(1, (m - j + 1) * p_(j))``, returned in input order.
    NaN entries (tests that did not run) stay NaN and do not count in m.

    Raises:
        ValueError: a p-value outside [0, 1].
    """
    p = np.asarray(p_values, dtype=float)
    bad = p[np.isfinite(p) & ((p < 0) | (p > 1))]
    if bad.size:
        raise ValueError(f"p_values contain {bad.tolist()}, outside [0, 1]")
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    m = idx.size
    running = 0.0
    for rank, i in enumerate(idx[np.argsort(p[idx], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


def verdict(effect: float, ci_low: float, ci_high: float, p_corrected: float, predicted_sign: int,
            smallest_effect: float, alpha: float = ALPHA) -> str:
    """Apply the study's verdict rule (module docstring) to one test.

    Args:
        effect: Effect size, signed as the statistic defines it.
        ci_low, ci_high: Its confidence interval (the study's: at :data:`FAMILY_CI_LEVEL`); NaN
            when unavailable.
        p_corrected: Holm-corrected p-value; NaN when the test did not run.
        predicted_sign: +1 if the hypothesis predicts effect > 0, -1 for effect < 0.
        smallest_effect: Smallest effect of interest (> 0), in effect units.
        alpha: Significance level for the corrected p-value.

    Returns:
        ``"supported"``, ``"not supported"`` or ``"inconclusive"``.

    Raises:
        ValueError: ``predicted_sign`` not +1/-1, or ``smallest_effect`` <= 0.
    """
    if predicted_sign not in (1, -1):
        raise ValueError(f"predicted_sign={predicted_sign!r} must be +1 or -1")
    if not smallest_effect > 0:
        raise ValueError(f"smallest_effect={smallest_effect!r} must be > 0")
    if not (math.isfinite(effect) and math.isfinite(p_corrected)):
        return INCONCLUSIVE
    e = effect * predicted_sign
    has_ci = math.isfinite(ci_low) and math.isfinite(ci_high)
    lo, hi = sorted((ci_low * predicted_sign, ci_high * predicted_sign)) if has_ci else (math.nan, math.nan)
    significant = p_corrected < alpha
    if significant and e > 0 and (not has_ci or lo > 0):
        return SUPPORTED
    if (significant and e < 0) or (has_ci and hi < smallest_effect):
        return NOT_SUPPORTED
    return INCONCLUSIVE



def untested_result(name: str, test: str, effect_name: str, n: int, sign: int, smallest: float, note: str) -> TestResult:
    """A :class:`TestResult` for a test that could not run: effect, CI and p are NaN, ``note`` says why."""
    return TestResult(name, HYPOTHESES.get(name, ""), test, effect_name, math.nan, math.nan, math.nan,
                      math.nan, n, sign, smallest, note=note)


# --------------------------------------------------------------------------- tests


def correlation_test(x: Sequence[float], y: Sequence[float], *, name: str = "H1", predicted_sign: int = -1,
                     seed: int = 0, n_resamples: int = N_RESAMPLES, ci_level: float = FAMILY_CI_LEVEL) -> TestResult:
    """Spearman rank correlation of x and y with a paired BCa bootstrap CI.

    Args:
        x, y: Equal-length sequences of finite floats (one value per prompt).
        name: Hypothesis name (looks up the text in :data:`HYPOTHESES`).
        predicted_sign: Predicted sign of rho.
        seed: Seed of the bootstrap's generator.
        n_resamples: Bootstrap resamples.
        ci_level: The interval's confidence level.

    Returns:
        A :class:`TestResult` with ``effect`` = Spearman rho (not yet corrected or judged).

    Raises:
        ValueError: x and y differ in length or hold non-finite values.
    """
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.shape != ya.shape or xa.ndim != 1:
        raise ValueError(f"x and y must be 1-D of equal length, got shapes {xa.shape} and {ya.shape}")
    if not (np.isfinite(xa).all() and np.isfinite(ya).all()):
        raise ValueError("x and y must be finite (a prompt without a measurement must be dropped first)")
    test = "Spearman rank correlation; paired BCa bootstrap CI"
    if xa.size < MIN_N:
        return untested_result(name, test, "spearman_rho", int(xa.size), predicted_sign, SMALLEST_EFFECT,
                         f"only {xa.size} observations (< {MIN_N})")
    if np.ptp(xa) == 0 or np.ptp(ya) == 0:
        return untested_result(name, test, "spearman_rho", int(xa.size), predicted_sign, SMALLEST_EFFECT,
                         "a variable is constant; rank correlation undefined")
    res = stats.spearmanr(xa, ya)

    def rho(a, b):
        return float(stats.spearmanr(a, b).statistic)

    lo, hi = bootstrap_ci((xa, ya), rho, paired=True, method="BCa", seed=seed, n_resamples=n_resamples,
                          level=ci_level)
    return TestResult(name, HYPOTHESES.get(name, ""), test, "spearman_rho", float(res.statistic), lo, hi,
                      float(res.pvalue), int(xa.size), predicted_sign, SMALLEST_EFFECT, ci_level=ci_level)


def partial_inputs(x, y, length, clusters) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """x, y, length (floats) and clusters (strings; each prompt its own when None) as checked arrays.

    Raises:
        ValueError: lengths differ, a value is not finite, or a length is not positive.
    """
    xa, ya, na = (np.asarray(v, dtype=float) for v in (x, y, length))
    if not (xa.shape == ya.shape == na.shape) or xa.ndim != 1:
        raise ValueError(f"x, y and length must be 1-D of equal length, got shapes {xa.shape}, {ya.shape}, {na.shape}")
    if not (np.isfinite(xa).all() and np.isfinite(ya).all() and np.isfinite(na).all()):
        raise ValueError("x, y and length must be finite (a prompt without a measurement must be dropped first)")
    if (na <= 0).any():
        raise ValueError(f"length must be positive, got {na[na <= 0][:3].tolist()}")
    ca = np.arange(xa.size).astype(str) if clusters is None else np.asarray([str(v) for v in clusters])
    if ca.shape != xa.shape:
        raise ValueError(f"clusters must have one entry per observation, got {ca.shape} for {xa.shape}")
    return xa, ya, na, ca


def partial_correlation_test(x: Sequence[float], y: Sequence[float], length: Sequence[float], *, name: str = "H1",
                             predicted_sign: int = -1, seed: int = 0, n_resamples: int = N_RESAMPLES,
                             clusters: Sequence[Any] | None = None, ci_level: float = FAMILY_CI_LEVEL) -> TestResult:
    """Spearman rho of x and y with prompt length held fixed (partial Spearman given log length).

    The primary H1 / H1c test: ranks of x and y are residualized on the rank of
    ``log(length)`` (ranks, so the log changes nothing: it says which scale is meant) and
    correlated (:func:`lab.analysis.effects.partial_spearman`). Prompts that share a question
    (a clean prompt and its poisoned and neutral twins) are not independent, so the unit of
    inference is the question: p cluster-robust by question
    (:func:`lab.analysis.effects.partial_spearman_p`), CI by a BCa bootstrap that resamples
    whole questions. The unadjusted Spearman rho and each variable's rho with length are
    reported in ``details``.

    Args:
        x, y: One finite value per prompt (context health, mean entropy).
        length: Prompt length in tokens (> 0), one per prompt.
        clusters: The question of each prompt; ``None``: every prompt its own question.
        name, predicted_sign, seed, n_resamples, ci_level: As :func:`correlation_test`.

    Returns:
        A :class:`TestResult`, ``effect`` = partial Spearman rho; ``details``:
        ``unadjusted_rho``, ``unadjusted_p``, ``x_length_rho``, ``y_length_rho``, ``n_clusters``.

    Raises:
        ValueError: lengths differ, values are not finite, or a length is not positive.
    """
    xa, ya, na, ca = partial_inputs(x, y, length, clusters)
    test = ("partial Spearman rank correlation given log prompt length; p cluster-robust by question (CR1, t on "
            "questions - 1 df); BCa bootstrap CI over questions")
    effect_name = "partial_spearman_rho"
    if xa.size < MIN_N:
        return untested_result(name, test, effect_name, int(xa.size), predicted_sign, SMALLEST_EFFECT,
                               f"only {xa.size} observations (< {MIN_N})")
    if np.ptp(xa) == 0 or np.ptp(ya) == 0:
        return untested_result(name, test, effect_name, int(xa.size), predicted_sign, SMALLEST_EFFECT,
                               "a variable is constant; rank correlation undefined")
    z = np.log(na)
    r = partial_spearman(xa, ya, z)
    unadjusted = stats.spearmanr(xa, ya)
    n_clusters = len(np.unique(ca))
    details = {"unadjusted_rho": float(unadjusted.statistic), "unadjusted_p": float(unadjusted.pvalue),
               "x_length_rho": float(stats.spearmanr(xa, na).statistic) if np.ptp(na) > 0 else math.nan,
               "y_length_rho": float(stats.spearmanr(ya, na).statistic) if np.ptp(na) > 0 else math.nan,
               "n_clusters": n_clusters}
    p = partial_spearman_p(xa, ya, z, ca)
    if not (math.isfinite(r) and math.isfinite(p)):
        return untested_result(name, test, effect_name, int(xa.size), predicted_sign, SMALLEST_EFFECT,
                               "a variable is constant once length is held fixed, or fewer than 3 questions; "
                               "partial correlation untestable")
    lo, hi = cluster_bootstrap_ci(lambda idx: partial_spearman(xa[idx], ya[idx], z[idx]), ca, method="BCa",
                                  seed=seed, n_resamples=n_resamples, level=ci_level)
    res = TestResult(name, HYPOTHESES.get(name, ""), test, effect_name, r, lo, hi, p, int(xa.size), predicted_sign,
                     SMALLEST_EFFECT, ci_level=ci_level)
    res.details.update(details)
    return res


def acceptance_entropy_test(entropy_bits: Sequence[float], accepted: Sequence[bool], clusters: Sequence[Any], *,
                            name: str = "H2", seed: int = 0, n_resamples: int = N_RESAMPLES,
                            ci_level: float = FAMILY_CI_LEVEL) -> TestResult:
    """Point-biserial correlation of draft entropy with acceptance, inferred on prompts.

    Tokens of one prompt share the prompt's acceptance level and entropy level, so they
    are not independent: p comes from the slope of acceptance on draft entropy (a linear
    probability model) with a cluster-robust (CR1) standard error by prompt, t on
    prompts - 1 df (:func:`lab.analysis.effects.cluster_robust_slope_p`; the slope's sign
    and zero are r's); the CI resamples whole prompts (percentile).

    Args:
        entropy_bits: Draft entropy (bits) of each tested drafted token.
        accepted: Whether the target accepted it.
        clusters: The prompt each token came from.
        name, seed, n_resamples, ci_level: As :func:`correlation_test`.

    Returns:
        A :class:`TestResult`, ``effect`` = point-biserial r, predicted sign -1; ``details``:
        ``n_clusters``, ``n_accepted``, ``p_independent_tokens`` (scipy's p treating tokens as
        independent, for comparison only).

    Raises:
        ValueError: lengths differ or entropies are not finite.
    """
    h = np.asarray(entropy_bits, dtype=float)
    a = np.asarray(accepted, dtype=bool)
    c = np.asarray([str(v) for v in clusters])
    if not (h.shape == a.shape == c.shape) or h.ndim != 1:
        raise ValueError(f"entropy_bits, accepted and clusters must have equal length, got {h.shape}, {a.shape}, {c.shape}")
    if not np.isfinite(h).all():
        raise ValueError("entropy_bits must be finite")
    test = ("point-biserial correlation; p cluster-robust by prompt (CR1 slope of acceptance on draft entropy, t on "
            "prompts - 1 df); cluster (per-prompt) percentile bootstrap CI")
    if h.size < MIN_N:
        return untested_result(name, test, "point_biserial_r", int(h.size), -1, SMALLEST_EFFECT,
                         f"only {h.size} tested draft tokens (< {MIN_N})")
    if a.all() or not a.any() or np.ptp(h) == 0:
        return untested_result(name, test, "point_biserial_r", int(h.size), -1, SMALLEST_EFFECT,
                         "acceptance or draft entropy is constant; correlation undefined")
    n_clusters = len(np.unique(c))
    p = cluster_robust_slope_p(h, a.astype(float), c)
    if not math.isfinite(p):
        r = untested_result(name, test, "point_biserial_r", int(h.size), -1, SMALLEST_EFFECT,
                            f"tokens from {n_clusters} prompts; the prompt-level test needs at least 3")
        r.details["n_clusters"] = n_clusters
        return r
    af = a.astype(float)
    lo, hi = cluster_bootstrap_ci(lambda idx: pearson_r(af[idx], h[idx]), c, method="percentile", seed=seed,
                                  n_resamples=n_resamples, level=ci_level)
    return TestResult(name, HYPOTHESES.get(name, ""), test, "point_biserial_r", pearson_r(af, h), lo, hi, p,
                      int(h.size), -1, SMALLEST_EFFECT, ci_level=ci_level,
                      details={"n_clusters": n_clusters, "n_accepted": int(a.sum()),
                               "p_independent_tokens": float(stats.pointbiserialr(a, h).pvalue)})


def category_test(values: Sequence[float], groups: Sequence[str], *, name: str = "H3", seed: int = 0,
                  n_resamples: int = N_RESAMPLES, ci_level: float = FAMILY_CI_LEVEL) -> TestResult:
    """Kruskal-Wallis across groups, then pairwise Mann-Whitney U with Holm correction.

    Args:
        values: One value per prompt (alpha).
        groups: The prompt's category.
        name, seed, n_resamples, ci_level: As :func:`correlation_test`.

    Returns:
        A :class:`TestResult` with ``effect`` = eta-squared_H (predicted > 0) and
        ``details["pairwise"]``: one dict per pair of categories with U, the
        rank-biserial r = 2U / (n1 n2) - 1 (positive: the first group higher), raw
        and Holm-corrected p-values; ``details["groups"]``: n and median per group.

    Raises:
        ValueError: lengths differ or values are not finite.
    """
    v = np.asarray(values, dtype=float)
    g = np.asarray([str(x) for x in groups])
    if v.shape != g.shape or v.ndim != 1:
        raise ValueError(f"values and groups must have equal length, got {v.shape} and {g.shape}")
    if not np.isfinite(v).all():
        raise ValueError("values must be finite")
    labels = [u for u in dict.fromkeys(g.tolist()) if (g == u).sum() >= 2]
    keep = np.isin(g, labels)
    v, g = v[keep], g[keep]
    test = "Kruskal-Wallis H; pairwise Mann-Whitney U with Holm correction"
    group_info = {u: {"n": int((g == u).sum()), "median": float(np.median(v[g == u]))} for u in labels}
    if len(labels) < 2 or v.size < MIN_N:
        have = ("no category has" if not labels else f"only {len(labels)} category ({labels[0]}) has"
                if len(labels) == 1 else f"{len(labels)} categories have")
        r = untested_result(name, test, "eta_squared_h", int(v.size), 1, SMALLEST_ETA_SQ,
                      f"{have} 2 or more clean prompts with an alpha ({v.size} prompts in them); the test needs "
                      f"at least 2 such categories and {MIN_N} prompts in them")
        r.details["groups"] = group_info
        return r
    if np.ptp(v) == 0:
        r = untested_result(name, test, "eta_squared_h", int(v.size), 1, SMALLEST_ETA_SQ,
                      "all values are equal; no ranks to compare")
        r.details["groups"] = group_info
        return r
    res = stats.kruskal(*[v[g == u] for u in labels])
    eta = eta_squared_h(float(res.statistic), int(v.size), len(labels))

    def eta_of(vals, codes):
        present = [vals[codes == u] for u in np.unique(codes)]
        if len(present) < 2 or np.ptp(vals) == 0:
            return math.nan
        return eta_squared_h(float(stats.kruskal(*present).statistic), len(vals), len(present))

    codes = np.unique(g, return_inverse=True)[1].astype(float)  # paired resampling stacks arrays: numeric only
    lo, hi = bootstrap_ci((v, codes), eta_of, paired=True, method="BCa", seed=seed, n_resamples=n_resamples,
                          level=ci_level)
    pairs = []
    for u1, u2 in combinations(labels, 2):
        a, b = v[g == u1], v[g == u2]
        mw = stats.mannwhitneyu(a, b, alternative="two-sided")
        pairs.append({"a": u1, "b": u2, "U": float(mw.statistic),
                      "rank_biserial_r": float(2 * mw.statistic / (a.size * b.size) - 1),
                      "p_value": float(mw.pvalue)})
    for row, p_adj in zip(pairs, holm([row["p_value"] for row in pairs])):
        row["p_holm"] = p_adj
    return TestResult(name, HYPOTHESES.get(name, ""), test, "eta_squared_h", eta, lo, hi, float(res.pvalue),
                      int(v.size), 1, SMALLEST_ETA_SQ, ci_level=ci_level,
                      details={"H": float(res.statistic), "groups": group_info, "pairwise": pairs})


def paired_test(reference: Sequence[float], poisoned: Sequence[float], *, name: str, predicted_sign: int,
                seed: int = 0, n_resamples: int = N_RESAMPLES, against: str = "clean",
                ci_level: float = FAMILY_CI_LEVEL) -> TestResult:
    """Paired Wilcoxon signed-rank test on ``poisoned - reference``.

    Args:
        reference, poisoned: Values of twin pairs, aligned (``reference``: the twin the poisoned one is
            compared with: the neutral one for the study's H4a/H4b, the clean one for their unadjusted form).
        name: ``"H4a"`` or ``"H4b"``.
        against: What the reference twin is, for the test's wording (``"clean"``, ``"neutral"``).
        predicted_sign: Predicted sign of poisoned - reference.
        seed, n_resamples, ci_level: As :func:`correlation_test`.

    Returns:
        A :class:`TestResult` with ``effect`` = matched-pairs rank-biserial r of the
        differences (:func:`rank_biserial_paired`) and its BCa bootstrap CI;
        ``details`` has the median difference.

    Raises:
        ValueError: lengths differ or values are not finite.
    """
    c, p = np.asarray(reference, dtype=float), np.asarray(poisoned, dtype=float)
    if c.shape != p.shape or c.ndim != 1:
        raise ValueError(f"{against} and poisoned must have equal length, got {c.shape} and {p.shape}")
    if not (np.isfinite(c).all() and np.isfinite(p).all()):
        raise ValueError(f"{against} and poisoned must be finite")
    d = p - c
    test = f"paired Wilcoxon signed-rank (poisoned - {against}); matched-pairs rank-biserial r, BCa bootstrap CI"
    if d.size < MIN_N:
        return untested_result(name, test, "rank_biserial_r", int(d.size), predicted_sign, SMALLEST_EFFECT,
                         f"only {d.size} twin pairs (< {MIN_N})")
    if not np.any(d != 0):
        return untested_result(name, test, "rank_biserial_r", int(d.size), predicted_sign, SMALLEST_EFFECT,
                         "every pair has difference 0")
    res = stats.wilcoxon(d)
    lo, hi = bootstrap_ci((d,), rank_biserial_paired, paired=False, method="BCa", seed=seed,
                          n_resamples=n_resamples, level=ci_level)
    n_tied = int((d == 0).sum())
    note = (f"{n_tied} of {d.size} pairs tied (difference 0) and are dropped by the Wilcoxon test and r"
            if n_tied else "")
    return TestResult(name, HYPOTHESES.get(name, ""), test, "rank_biserial_r", rank_biserial_paired(d), lo, hi,
                      float(res.pvalue), int(d.size), predicted_sign, SMALLEST_EFFECT, note=note, ci_level=ci_level,
                      details={"median_difference": float(np.median(d)), "n_pairs": int(d.size), "n_tied": n_tied})


def judge(results: Sequence[R], alpha: float = ALPHA) -> list[R]:
    """Holm-correct the family's p-values and apply :func:`verdict` to each result.

    Args:
        results: The family's tests (a :class:`TestResult`, or any frozen dataclass with ``effect``,
            ``ci_low``, ``ci_high``, ``p_value``, ``predicted_sign``, ``smallest_effect``, ``p_holm``
            and ``verdict``, such as :class:`lab.analysis.intervention.InterventionTest`).
        alpha: Significance level for the corrected p-values.

    Returns:
        New results with ``p_holm`` and ``verdict`` set, in input order; ``results`` is not changed.
    """
    return [replace(r, p_holm=p_adj,
                    verdict=verdict(r.effect, r.ci_low, r.ci_high, p_adj, r.predicted_sign, r.smallest_effect, alpha))
            for r, p_adj in zip(results, holm([r.p_value for r in results]))]
