"""Statistics of the study: the four pre-stated hypotheses, their tests and verdicts.

Pure functions on numbers (no model, no files, no Rich). Every test statistic,
p-value and confidence interval comes from :mod:`scipy.stats`; the lab's own math
here is limited to effect sizes (matched-pairs rank-biserial, eta-squared_H),
Holm's step-down correction, a least-squares confidence band and the verdict rule.

The thesis (issue 5): context quality shapes attention during prefill, attention
shapes the model's confidence (entropy) during decode, and confidence decides how
well speculative decoding works. The pre-stated hypotheses, one family:

* **H1** lower context health goes with higher mean decode entropy:
  Spearman rho(health, mean entropy) < 0, over all prompts; CI by
  ``scipy.stats.bootstrap`` (BCa, paired resampling of prompts).
* **H2** higher draft entropy goes with lower acceptance, per drafted token:
  point-biserial r(draft entropy, accepted) < 0 (``scipy.stats.pointbiserialr``)
  over the tokens the target tested. Tokens of one prompt are not independent,
  so the CI is a *cluster* bootstrap over prompts (percentile); binned acceptance
  rates with Wilson intervals (``binomtest(...).proportion_ci``) describe the curve.
* **H3** acceptance differs by category: Kruskal-Wallis on per-prompt alpha
  (clean prompts), effect eta-squared_H = (H - k + 1) / (n - k) for k groups (Cohen
  2008, as given by Tomczak & Tomczak 2014), about 0 when the groups do not differ
  (unlike epsilon-squared = H / (n - 1), whose null expectation is (k - 1) / (n - 1));
  then pairwise Mann-Whitney U with Holm correction inside the pairwise family.
* **H4** poisoned twins have lower health (H4a) and higher mean entropy (H4b) than
  their clean twins: paired Wilcoxon signed-rank on poisoned - clean, effect the
  matched-pairs rank-biserial correlation (Kerby 2014).

The five p-values (H1, H2, H3, H4a, H4b) are Holm-corrected together
(:func:`holm`; Holm 1979). The verdict rule (:func:`verdict`) is, with the effect
and its CI oriented so that the predicted direction is positive:

* ``supported``: corrected p < :data:`ALPHA`, effect > 0, and the CI (when it
  could be computed) lies entirely above 0;
* ``not supported``: corrected p < :data:`ALPHA` with effect < 0 (the opposite
  direction), or the CI's upper end is below :data:`SMALLEST_EFFECT` (the data
  rule out an effect of interest in the predicted direction);
* ``inconclusive``: anything else, including too little data to test.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from scipy import stats

ALPHA = 0.05  # family-wise error rate across H1-H4 after Holm correction
CI_LEVEL = 0.95
# Smallest effects worth finding. Correlations and rank-biserial r: 0.1 is Cohen's
# (1988) "small" r. Eta-squared_H: 0.01 is Cohen's "small" for eta^2.
SMALLEST_EFFECT = 0.1
SMALLEST_ETA_SQ = 0.01
N_RESAMPLES = 1999  # bootstrap resamples; odd so percentile ends fall on draws
MIN_N = 5  # fewer observations (or pairs) than this: not tested, verdict inconclusive

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive"
VERDICTS = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE)

HYPOTHESES = {
    "H1": "Prompts with lower context health have higher mean decode entropy "
          "(Spearman rho(context health, mean entropy) < 0).",
    "H2": "Drafted tokens with higher draft entropy are accepted less often "
          "(point-biserial r(draft entropy, accepted) < 0).",
    "H3": "The acceptance rate alpha differs between prompt categories "
          "(Kruskal-Wallis on per-prompt alpha, eta-squared_H > 0).",
    "H4a": "A poisoned twin has lower context health than its clean twin "
           "(paired Wilcoxon, poisoned - clean < 0).",
    "H4b": "A poisoned twin has higher mean decode entropy than its clean twin "
           "(paired Wilcoxon, poisoned - clean > 0).",
}


@dataclass
class TestResult:
    """One pre-stated hypothesis test.

    Attributes:
        name: ``"H1"`` ... ``"H4b"``.
        hypothesis: The pre-stated hypothesis text.
        test: The test used, in words.
        effect_name: What ``effect`` is (``"spearman_rho"``, ...).
        effect: The effect size (NaN if it could not be computed).
        ci_low, ci_high: Its :data:`CI_LEVEL` bootstrap interval (NaN if unavailable).
        p_value: Raw two-sided p-value (NaN: not tested).
        n: Observations (prompts, tokens or pairs) the test used.
        predicted_sign: +1 or -1, the predicted direction of ``effect``.
        smallest_effect: Smallest effect of interest for the "not supported" rule.
        p_holm: Holm-corrected p-value within the H1-H4 family.
        verdict: One of :data:`VERDICTS`.
        note: Why a test could not run, or a caveat.
        details: Extra numbers (e.g. the pairwise table for H3).
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
        ci_low, ci_high: Its confidence interval; NaN when unavailable.
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


# --------------------------------------------------------------------------- effect sizes


def rank_biserial_paired(diffs: Sequence[float]) -> float:
    """Matched-pairs rank-biserial correlation of paired differences (Kerby 2014).

    ``r = (R+ - R-) / (R+ + R-)`` with R+/R- the sums of the ranks of |d| over
    positive/negative differences; zero differences are dropped (Wilcoxon's
    convention). In [-1, 1]; NaN when every difference is zero.
    """
    d = np.asarray(diffs, dtype=float)
    d = d[d != 0]
    if d.size == 0:
        return math.nan
    ranks = stats.rankdata(np.abs(d))
    return float((ranks[d > 0].sum() - ranks[d < 0].sum()) / ranks.sum())


def eta_squared_h(h_statistic: float, n: int, k: int) -> float:
    """Kruskal-Wallis effect size eta^2_H = (H - k + 1) / (n - k) for n values in k groups.

    Cohen (2008), in Tomczak & Tomczak (2014). H's null expectation is k - 1, so
    eta^2_H is about 0 without an effect and can be slightly negative; NaN if n <= k.
    """
    return float((h_statistic - k + 1) / (n - k)) if n > k else math.nan


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def _bootstrap_ci(data: tuple[np.ndarray, ...], statistic: Callable[..., float], *, paired: bool,
                  method: str, seed: int, n_resamples: int) -> tuple[float, float]:
    """``scipy.stats.bootstrap`` CI; falls back from BCa to percentile if BCa is NaN."""
    rng = np.random.default_rng(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate resamples warn; NaN is handled below
        try:
            res = stats.bootstrap(data, statistic, paired=paired, vectorized=False, method=method,
                                  confidence_level=CI_LEVEL, n_resamples=n_resamples, rng=rng)
            lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        except ValueError:
            lo = hi = math.nan
        if method == "BCa" and not (math.isfinite(lo) and math.isfinite(hi)):
            return _bootstrap_ci(data, statistic, paired=paired, method="percentile", seed=seed,
                                 n_resamples=n_resamples)
    return lo, hi


def _untested(name: str, test: str, effect_name: str, n: int, sign: int, smallest: float, note: str) -> TestResult:
    return TestResult(name, HYPOTHESES.get(name, ""), test, effect_name, math.nan, math.nan, math.nan,
                      math.nan, n, sign, smallest, note=note)


# --------------------------------------------------------------------------- tests


def correlation_test(x: Sequence[float], y: Sequence[float], *, name: str = "H1", predicted_sign: int = -1,
                     seed: int = 0, n_resamples: int = N_RESAMPLES) -> TestResult:
    """Spearman rank correlation of x and y with a paired BCa bootstrap CI.

    Args:
        x, y: Equal-length sequences of finite floats (one value per prompt).
        name: Hypothesis name (looks up the text in :data:`HYPOTHESES`).
        predicted_sign: Predicted sign of rho.
        seed: Seed of the bootstrap's generator.
        n_resamples: Bootstrap resamples.

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
        return _untested(name, test, "spearman_rho", int(xa.size), predicted_sign, SMALLEST_EFFECT,
                         f"only {xa.size} observations (< {MIN_N})")
    if np.ptp(xa) == 0 or np.ptp(ya) == 0:
        return _untested(name, test, "spearman_rho", int(xa.size), predicted_sign, SMALLEST_EFFECT,
                         "a variable is constant; rank correlation undefined")
    res = stats.spearmanr(xa, ya)

    def rho(a, b):
        return float(stats.spearmanr(a, b).statistic)

    lo, hi = _bootstrap_ci((xa, ya), rho, paired=True, method="BCa", seed=seed, n_resamples=n_resamples)
    return TestResult(name, HYPOTHESES.get(name, ""), test, "spearman_rho", float(res.statistic), lo, hi,
                      float(res.pvalue), int(xa.size), predicted_sign, SMALLEST_EFFECT)


def acceptance_entropy_test(entropy_bits: Sequence[float], accepted: Sequence[bool], clusters: Sequence[Any], *,
                            name: str = "H2", seed: int = 0, n_resamples: int = N_RESAMPLES) -> TestResult:
    """Point-biserial correlation of draft entropy with acceptance; cluster-bootstrap CI.

    Args:
        entropy_bits: Draft entropy (bits) of each tested drafted token.
        accepted: Whether the target accepted it.
        clusters: The prompt each token came from; the CI resamples whole prompts,
            because tokens of one prompt are correlated. The p-value is
            ``scipy.stats.pointbiserialr``'s, which treats tokens as independent.
        name, seed, n_resamples: As :func:`correlation_test`.

    Returns:
        A :class:`TestResult`, ``effect`` = point-biserial r, predicted sign -1.

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
    test = "point-biserial correlation; cluster (per-prompt) percentile bootstrap CI"
    if h.size < MIN_N:
        return _untested(name, test, "point_biserial_r", int(h.size), -1, SMALLEST_EFFECT,
                         f"only {h.size} tested draft tokens (< {MIN_N})")
    if a.all() or not a.any() or np.ptp(h) == 0:
        return _untested(name, test, "point_biserial_r", int(h.size), -1, SMALLEST_EFFECT,
                         "acceptance or draft entropy is constant; correlation undefined")
    res = stats.pointbiserialr(a, h)
    groups = [np.flatnonzero(c == u) for u in np.unique(c)]
    note = ""
    if len(groups) >= 2:
        def r_of_clusters(sel):
            idx = np.concatenate([groups[int(i)] for i in sel])
            return _pearson(a[idx].astype(float), h[idx])

        lo, hi = _bootstrap_ci((np.arange(len(groups)),), r_of_clusters, paired=False, method="percentile",
                               seed=seed, n_resamples=n_resamples)
    else:
        lo = hi = math.nan
        note = "one prompt only: no cluster bootstrap CI"
    return TestResult(name, HYPOTHESES.get(name, ""), test, "point_biserial_r", float(res.statistic), lo, hi,
                      float(res.pvalue), int(h.size), -1, SMALLEST_EFFECT, note=note,
                      details={"n_clusters": len(groups), "n_accepted": int(a.sum())})


def category_test(values: Sequence[float], groups: Sequence[str], *, name: str = "H3", seed: int = 0,
                  n_resamples: int = N_RESAMPLES) -> TestResult:
    """Kruskal-Wallis across groups, then pairwise Mann-Whitney U with Holm correction.

    Args:
        values: One value per prompt (alpha).
        groups: The prompt's category.
        name, seed, n_resamples: As :func:`correlation_test`.

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
        r = _untested(name, test, "eta_squared_h", int(v.size), 1, SMALLEST_ETA_SQ,
                      f"{len(labels)} categories with >= 2 prompts and {v.size} prompts; need 2 and {MIN_N}")
        r.details["groups"] = group_info
        return r
    if np.ptp(v) == 0:
        r = _untested(name, test, "eta_squared_h", int(v.size), 1, SMALLEST_ETA_SQ,
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
    lo, hi = _bootstrap_ci((v, codes), eta_of, paired=True, method="BCa", seed=seed, n_resamples=n_resamples)
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
                      int(v.size), 1, SMALLEST_ETA_SQ,
                      details={"H": float(res.statistic), "groups": group_info, "pairwise": pairs})


def paired_test(clean: Sequence[float], poisoned: Sequence[float], *, name: str, predicted_sign: int,
                seed: int = 0, n_resamples: int = N_RESAMPLES) -> TestResult:
    """Paired Wilcoxon signed-rank test on ``poisoned - clean``.

    Args:
        clean, poisoned: Values of twin pairs, aligned.
        name: ``"H4a"`` or ``"H4b"``.
        predicted_sign: Predicted sign of poisoned - clean.
        seed, n_resamples: As :func:`correlation_test`.

    Returns:
        A :class:`TestResult` with ``effect`` = matched-pairs rank-biserial r of the
        differences (:func:`rank_biserial_paired`) and its BCa bootstrap CI;
        ``details`` has the median difference.

    Raises:
        ValueError: lengths differ or values are not finite.
    """
    c, p = np.asarray(clean, dtype=float), np.asarray(poisoned, dtype=float)
    if c.shape != p.shape or c.ndim != 1:
        raise ValueError(f"clean and poisoned must have equal length, got {c.shape} and {p.shape}")
    if not (np.isfinite(c).all() and np.isfinite(p).all()):
        raise ValueError("clean and poisoned must be finite")
    d = p - c
    test = "paired Wilcoxon signed-rank (poisoned - clean); matched-pairs rank-biserial r, BCa bootstrap CI"
    if d.size < MIN_N:
        return _untested(name, test, "rank_biserial_r", int(d.size), predicted_sign, SMALLEST_EFFECT,
                         f"only {d.size} twin pairs (< {MIN_N})")
    if not np.any(d != 0):
        return _untested(name, test, "rank_biserial_r", int(d.size), predicted_sign, SMALLEST_EFFECT,
                         "every pair has difference 0")
    res = stats.wilcoxon(d)
    lo, hi = _bootstrap_ci((d,), rank_biserial_paired, paired=False, method="BCa", seed=seed,
                           n_resamples=n_resamples)
    n_tied = int((d == 0).sum())
    note = (f"{n_tied} of {d.size} pairs tied (difference 0) and are dropped by the Wilcoxon test and r"
            if n_tied else "")
    return TestResult(name, HYPOTHESES.get(name, ""), test, "rank_biserial_r", rank_biserial_paired(d), lo, hi,
                      float(res.pvalue), int(d.size), predicted_sign, SMALLEST_EFFECT, note=note,
                      details={"median_difference": float(np.median(d)), "n_pairs": int(d.size), "n_tied": n_tied})


def judge(results: Sequence[TestResult], alpha: float = ALPHA) -> list[TestResult]:
    """Holm-correct the family's p-values and set each result's ``p_holm`` and ``verdict``.

    Returns the same objects (updated), for chaining.
    """
    for r, p_adj in zip(results, holm([r.p_value for r in results])):
        r.p_holm = p_adj
        r.verdict = verdict(r.effect, r.ci_low, r.ci_high, p_adj, r.predicted_sign, r.smallest_effect, alpha)
    return list(results)


# --------------------------------------------------------------------------- description


@dataclass(frozen=True)
class AcceptanceBin:
    """Acceptance of drafted tokens whose draft entropy lies in ``[low, high]``.

    ``k`` of ``n`` accepted; ``rate`` = k / n with a Wilson score interval.
    """

    low: float
    high: float
    n: int
    k: int
    rate: float
    ci_low: float
    ci_high: float


def binned_acceptance(entropy_bits: Sequence[float], accepted: Sequence[bool], n_bins: int = 8) -> list[AcceptanceBin]:
    """Acceptance rate by draft-entropy bin, with Wilson 95% intervals.

    Bins are quantile bins (about equal token counts); repeated quantiles merge.

    Raises:
        ValueError: ``n_bins`` < 1 or lengths differ.
    """
    if not isinstance(n_bins, int) or n_bins < 1:
        raise ValueError(f"n_bins={n_bins!r} must be a positive integer")
    h = np.asarray(entropy_bits, dtype=float)
    a = np.asarray(accepted, dtype=bool)
    if h.shape != a.shape:
        raise ValueError(f"entropy_bits and accepted differ in length: {h.shape} vs {a.shape}")
    if h.size == 0:
        return []
    edges = np.unique(np.quantile(h, np.linspace(0, 1, n_bins + 1)))
    if edges.size == 1:
        edges = np.array([edges[0], edges[0]])
    which = np.clip(np.searchsorted(edges, h, side="right") - 1, 0, edges.size - 2)
    out = []
    for b in range(edges.size - 1):
        sel = which == b
        n, k = int(sel.sum()), int(a[sel].sum())
        if n == 0:
            continue
        ci = stats.binomtest(k, n).proportion_ci(confidence_level=CI_LEVEL, method="wilson")
        out.append(AcceptanceBin(float(edges[b]), float(edges[b + 1]), n, k, k / n, float(ci.low), float(ci.high)))
    return out


@dataclass(frozen=True)
class LinearFit:
    """Least-squares line y = intercept + slope x with a pointwise CI band on the mean."""

    slope: float
    intercept: float
    grid: list[float]
    fit: list[float]
    band_low: list[float]
    band_high: list[float]


def linear_fit_band(x: Sequence[float], y: Sequence[float], n_grid: int = 50, level: float = CI_LEVEL) -> LinearFit | None:
    """OLS fit (``scipy.stats.linregress``) with the t-based confidence band of the mean.

    The band at g is ``fit(g) +- t_{(1+level)/2, n-2} * s * sqrt(1/n + (g - xbar)^2 / Sxx)``
    with s the residual standard error. Returns ``None`` for fewer than 3 points or
    constant x.
    """
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.size < 3 or np.ptp(xa) == 0:
        return None
    lr = stats.linregress(xa, ya)
    resid = ya - (lr.intercept + lr.slope * xa)
    s = math.sqrt(float(resid @ resid) / (xa.size - 2))
    sxx = float(((xa - xa.mean()) ** 2).sum())
    grid = np.linspace(xa.min(), xa.max(), n_grid)
    fit = lr.intercept + lr.slope * grid
    half = stats.t.ppf((1 + level) / 2, xa.size - 2) * s * np.sqrt(1 / xa.size + (grid - xa.mean()) ** 2 / sxx)
    return LinearFit(float(lr.slope), float(lr.intercept), grid.tolist(), fit.tolist(),
                     (fit - half).tolist(), (fit + half).tolist())


# --------------------------------------------------------------------------- the study


@dataclass
class StudyAnalysis:
    """Everything computed from the per-prompt and per-token tables.

    Attributes:
        tests: H1, H2, H3, H4a, H4b, judged (Holm across the five).
        acceptance_bins: :func:`binned_acceptance` of tested draft tokens.
        health_entropy_fit: :func:`linear_fit_band` of mean entropy on health (all prompts).
        categories: Per category: n, median alpha, median mean-entropy (clean prompts).
        pairs: Twin pairs ``{"clean", "poisoned", health/entropy/alpha of each}``.
    """

    tests: list[TestResult]
    acceptance_bins: list[AcceptanceBin]
    health_entropy_fit: LinearFit | None
    categories: dict[str, dict[str, float]]
    pairs: list[dict[str, Any]]

    def verdicts(self) -> dict[str, str]:
        return {t.name: t.verdict for t in self.tests}


def _finite(*vals: Any) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in vals)


def analyze(per_prompt: Sequence[Mapping[str, Any]], per_token: Sequence[Mapping[str, Any]], *, seed: int = 0,
            n_resamples: int = N_RESAMPLES, n_bins: int = 8) -> StudyAnalysis:
    """Run H1-H4 on the study's tables and judge them together.

    Args:
        per_prompt: One row per prompt with ``id``, ``category``, ``variant``,
            ``twin_of``, ``context_health``, ``mean_entropy_bits``, ``alpha``.
            Rows whose needed numbers are missing or non-finite are left out of
            that test only.
        per_token: One row per drafted token with ``prompt_id``,
            ``draft_entropy_bits``, ``accepted``, ``tested``; only tested tokens count.
        seed: Seed for every bootstrap.
        n_resamples: Bootstrap resamples.
        n_bins: Bins of the acceptance curve.

    Returns:
        A :class:`StudyAnalysis`.
    """
    rows = list(per_prompt)
    h1_rows = [r for r in rows if _finite(r.get("context_health"), r.get("mean_entropy_bits"))]
    h1 = correlation_test([r["context_health"] for r in h1_rows], [r["mean_entropy_bits"] for r in h1_rows],
                          name="H1", predicted_sign=-1, seed=seed, n_resamples=n_resamples)

    toks = [t for t in per_token if t.get("tested") and _finite(t.get("draft_entropy_bits"))]
    h2 = acceptance_entropy_test([t["draft_entropy_bits"] for t in toks], [bool(t["accepted"]) for t in toks],
                                 [t["prompt_id"] for t in toks], name="H2", seed=seed, n_resamples=n_resamples)

    clean = [r for r in rows if r.get("variant", "clean") == "clean" and _finite(r.get("alpha"))]
    h3 = category_test([r["alpha"] for r in clean], [r["category"] for r in clean], name="H3", seed=seed,
                       n_resamples=n_resamples)

    by_id = {r["id"]: r for r in rows}
    pairs = []
    for r in rows:
        c = by_id.get(r.get("twin_of")) if r.get("twin_of") else None
        if c is None:
            continue
        pairs.append({"clean": c["id"], "poisoned": r["id"], "category": r["category"],
                      **{f"{k}_{side}": src.get(k) for k in ("context_health", "mean_entropy_bits", "alpha")
                         for side, src in (("clean", c), ("poisoned", r))}})
    hp = [p for p in pairs if _finite(p["context_health_clean"], p["context_health_poisoned"])]
    ep = [p for p in pairs if _finite(p["mean_entropy_bits_clean"], p["mean_entropy_bits_poisoned"])]
    h4a = paired_test([p["context_health_clean"] for p in hp], [p["context_health_poisoned"] for p in hp],
                      name="H4a", predicted_sign=-1, seed=seed, n_resamples=n_resamples)
    h4b = paired_test([p["mean_entropy_bits_clean"] for p in ep], [p["mean_entropy_bits_poisoned"] for p in ep],
                      name="H4b", predicted_sign=1, seed=seed, n_resamples=n_resamples)

    categories: dict[str, dict[str, float]] = {}
    for cat in dict.fromkeys(r["category"] for r in rows):
        cr = [r for r in rows if r["category"] == cat and r.get("variant", "clean") == "clean"]
        alphas = [r["alpha"] for r in cr if _finite(r.get("alpha"))]
        ents = [r["mean_entropy_bits"] for r in cr if _finite(r.get("mean_entropy_bits"))]
        categories[cat] = {"n": len(cr), "median_alpha": float(np.median(alphas)) if alphas else math.nan,
                           "median_mean_entropy_bits": float(np.median(ents)) if ents else math.nan}

    return StudyAnalysis(
        tests=judge([h1, h2, h3, h4a, h4b]),
        acceptance_bins=binned_acceptance([t["draft_entropy_bits"] for t in toks],
                                          [bool(t["accepted"]) for t in toks], n_bins=n_bins),
        health_entropy_fit=linear_fit_band([r["context_health"] for r in h1_rows],
                                           [r["mean_entropy_bits"] for r in h1_rows]),
        categories=categories,
        pairs=pairs,
    )
