"""Effect sizes and intervals of the study's statistics (pure numbers in, numbers out).

The lab's own math here: the matched-pairs rank-biserial correlation (Kerby 2014),
eta-squared_H (Cohen 2008, in Tomczak & Tomczak 2014), a bootstrap wrapper around
``scipy.stats.bootstrap`` (also over whole clusters), a mean with its normal interval
(error bars), binned acceptance rates with Wilson intervals and a least-squares line with
its t-based confidence band.

Clustered data (prompts that share a question, triples that share a distractor text), in
one place: cluster codes and means, the one-sample t over cluster means (Donald & Lang
2007), the one-way ICC (Searle et al. 1992), a cluster-robust test of a least-squares
slope (the CR1 sandwich; Cameron & Miller 2015) and the partial Spearman rho with its
cluster-robust p. No model, no files, no Rich.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
from scipy import stats

CI_LEVEL = 0.95  # descriptive intervals (acceptance bins, the fit band); the verdicts' level is in hypotheses

def rank_biserial_paired(diffs: Sequence[float]) -> float:
    """Matched-pairs rank-biserial correlation of paired differences (Kerby 2014).

    ``r = (R+ - R-) / (R+ + R-)`` with R+/R- the sums of the ranks of |d| over
    positive/negative differences; zero differences are dropped (Wilcoxon's
    convention). In [-1, 1]; NaN when every difference is zero.

    Examples:
        Ranks of |d| = 1, 2, 3, 4: R+ = 1 + 2 + 3 = 6, R- = 4, r = (6 - 4) / 10; the zero is dropped.

        >>> rank_biserial_paired([0.0, 1.0, 2.0, 3.0, -4.0])
        0.2
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

    Examples:
        >>> round(eta_squared_h(10.0, n=23, k=3), 4)  # (10 - 3 + 1) / (23 - 3)
        0.4
    """
    return float((h_statistic - k + 1) / (n - k)) if n > k else math.nan


def pearson_r(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


@dataclass(frozen=True)
class MeanInterval:
    """A mean with the half-width of its normal-approximation interval (see :func:`mean_interval`)."""

    mean: float
    half_width: float
    level: float
    n: int


def mean_interval(values: Sequence[float], level: float = CI_LEVEL) -> MeanInterval:
    """The mean of ``values`` and the half-width ``z * sd / sqrt(n)`` of its normal interval at ``level``.

    ``z`` is the standard normal's ``(1 + level) / 2`` quantile (1.96 at 95 %), ``sd`` the sample SD
    (ddof 1). A descriptive interval (error bars), not a test: with fewer than 2 values the half-width
    is 0.

    Raises:
        ValueError: ``values`` is empty, or ``level`` is outside (0, 1).

    Examples:
        >>> m = mean_interval([1.0, 2.0, 3.0, 4.0])  # sd = 1.291, sqrt(4) = 2
        >>> m.mean, round(m.half_width, 4)
        (2.5, 1.2652)
        >>> mean_interval([5.0]).half_width
        0.0
    """
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        raise ValueError("values is empty: no mean to take")
    if not 0 < level < 1:
        raise ValueError(f"level={level!r} must lie in (0, 1)")
    if v.size < 2:
        return MeanInterval(float(v.mean()), 0.0, level, 1)
    z = float(stats.norm.ppf((1 + level) / 2))
    return MeanInterval(float(v.mean()), float(z * v.std(ddof=1) / math.sqrt(v.size)), level, int(v.size))


def bootstrap_ci(data: tuple[np.ndarray, ...], statistic: Callable[..., float], *, paired: bool,
                  method: str, seed: int, n_resamples: int, level: float = CI_LEVEL) -> tuple[float, float]:
    """``scipy.stats.bootstrap`` CI at ``level``; falls back from BCa to percentile if BCa is NaN.

    ``n_resamples = 0`` gives no interval (NaN, NaN): for simulations of the verdicts'
    size, where an interval can only take "supported" away (:func:`lab.analysis.hypotheses.verdict`).
    """
    if n_resamples == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate resamples warn; NaN is handled below
        try:
            res = stats.bootstrap(data, statistic, paired=paired, vectorized=False, method=method,
                                  confidence_level=level, n_resamples=n_resamples, rng=rng)
            lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        except ValueError:
            lo = hi = math.nan
        if method == "BCa" and not (math.isfinite(lo) and math.isfinite(hi)):
            return bootstrap_ci(data, statistic, paired=paired, method="percentile", seed=seed,
                                 n_resamples=n_resamples, level=level)
    return lo, hi


def cluster_codes(clusters: Sequence[Any]) -> tuple[np.ndarray, list[str]]:
    """Integer code per member and the distinct labels, labels in order of first appearance.

    Members are clustered by ``str(label)`` (a question id read as 7 or "7" is one cluster); the
    order of first appearance is the order the reports list the clusters in.

    Examples:
        >>> codes, labels = cluster_codes(["b", "a", "b", 7])
        >>> codes.tolist(), labels
        ([0, 1, 0, 2], ['b', 'a', '7'])
    """
    keys = [str(v) for v in clusters]
    labels = list(dict.fromkeys(keys))
    index = {k: i for i, k in enumerate(labels)}
    return np.array([index[k] for k in keys], dtype=int), labels


def cluster_means(values: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Means of ``values`` (shape ``(..., n)``) within each code of ``codes`` (shape ``(n,)``, from
    :func:`cluster_codes`): shape ``(..., G)`` for G clusters.

    Examples:
        >>> cluster_means(np.array([1.0, 2.0, 4.0]), np.array([0, 1, 0])).tolist()
        [2.5, 2.0]
    """
    g = int(codes.max()) + 1
    member = np.zeros((codes.size, g))
    member[np.arange(codes.size), codes] = 1.0
    return values @ member / member.sum(axis=0)


def t_over_cluster_means(means: np.ndarray) -> tuple[float, float, int]:
    """Mean, standard error and df of the one-sample t over G cluster means (last axis; G - 1 df).

    Each cluster weighs the same (Donald & Lang 2007: with few clusters, aggregate to the cluster
    and use t on G - 1 df).

    Examples:
        >>> mean, se, df = t_over_cluster_means(np.array([1.0, 2.0, 3.0]))
        >>> float(mean), round(float(se), 4), df
        (2.0, 0.5774, 2)
    """
    g = means.shape[-1]
    return means.mean(axis=-1), means.std(axis=-1, ddof=1) / math.sqrt(g), g - 1


def one_way_icc(values: np.ndarray, codes: np.ndarray) -> float:
    """ANOVA estimate of the share of variance between clusters (unequal sizes: n0 of Searle et al.
    1992, sec. 3.6), clipped at 0; NaN with under 2 clusters or no replication within one.

    Examples:
        >>> one_way_icc(np.array([0.0, 0.0, 1.0, 1.0]), np.array([0, 0, 1, 1]))
        1.0
    """
    sizes = np.bincount(codes)
    g, n = sizes.size, values.size
    if g < 2 or n <= g:
        return math.nan
    means = np.bincount(codes, weights=values) / sizes
    msb = float((sizes * (means - values.mean()) ** 2).sum()) / (g - 1)
    msw = float(((values - means[codes]) ** 2).sum()) / (n - g)
    n0 = (n - float((sizes ** 2).sum()) / n) / (g - 1)
    between = max(0.0, (msb - msw) / n0)
    return between / (between + msw) if between + msw > 0 else math.nan


def cluster_bootstrap_ci(statistic: Callable[[np.ndarray], float], clusters: Sequence[Any], *, method: str,
                         seed: int, n_resamples: int, level: float = CI_LEVEL) -> tuple[float, float]:
    """Bootstrap CI resampling whole clusters (Field & Welsh 2007): ``statistic(idx)`` gets the
    concatenated row indices of the drawn clusters. BCa's jackknife leaves out one cluster at a
    time. NaN for fewer than two clusters or ``n_resamples = 0``."""
    codes, labels = cluster_codes(clusters)
    groups = [np.flatnonzero(codes == k) for k in range(len(labels))]
    if len(groups) < 2 or n_resamples == 0:
        return math.nan, math.nan

    def of_clusters(sel: np.ndarray) -> float:
        return statistic(np.concatenate([groups[int(i)] for i in sel]))

    return bootstrap_ci((np.arange(len(groups)),), of_clusters, paired=False, method=method, seed=seed,
                        n_resamples=n_resamples, level=level)


def cluster_robust_slope_p(x: Sequence[float], y: Sequence[float], clusters: Sequence[Any]) -> float:
    """Two-sided p of the least-squares slope of y on x with a cluster-robust standard error.

    The CR1 sandwich (Cameron & Miller 2015, eq. 11 with its small-sample factor
    ``G / (G - 1) * (n - 1) / (n - 2)``): ``Var(b) = sum_g (sum_{i in g} x_i u_i)^2 / Sxx^2``
    with x centred and u the residuals; t on G - 1 degrees of freedom (G clusters). With
    every observation its own cluster this is the HC1 heteroskedasticity-robust test.
    NaN with fewer than 3 clusters, constant x, or a zero variance.
    """
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    codes = np.unique(np.asarray([str(v) for v in clusters]), return_inverse=True)[1]
    n, g = xa.size, int(codes.max()) + 1 if xa.size else 0
    xc, yc = xa - xa.mean(), ya - ya.mean()
    sxx = float(xc @ xc)
    if g < 3 or n < 3 or sxx == 0:
        return math.nan
    b = float(xc @ yc) / sxx
    score = np.bincount(codes, weights=xc * (yc - b * xc), minlength=g)
    var = float(score @ score) / sxx ** 2 * g / (g - 1) * (n - 1) / (n - 2)
    if not var > 0:
        return math.nan
    return float(2 * stats.t.sf(abs(b) / math.sqrt(var), g - 1))


def _rank_residuals(x: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Ranks of x minus their least-squares fit on the ranks of z (with an intercept)."""
    rx, rz = stats.rankdata(x), stats.rankdata(z)
    design = np.column_stack([np.ones_like(rz), rz])
    return rx - design @ np.linalg.lstsq(design, rx, rcond=None)[0]


def partial_spearman(x: Sequence[float], y: Sequence[float], z: Sequence[float]) -> float:
    """Spearman rho of x and y given z: the Pearson r of the ranks of x and y, each residualized
    (least squares) on the ranks of z. NaN when a residual is constant."""
    za = np.asarray(z, dtype=float)
    return pearson_r(_rank_residuals(np.asarray(x, dtype=float), za), _rank_residuals(np.asarray(y, dtype=float), za))


def partial_spearman_p(x: Sequence[float], y: Sequence[float], z: Sequence[float], clusters: Sequence[Any]) -> float:
    """Two-sided p of the partial Spearman rho, cluster-robust: the slope of y's rank residuals on x's
    (:func:`partial_spearman`), whose sign and zero are the partial rho's, tested with the CR1 sandwich
    over ``clusters`` (:func:`cluster_robust_slope_p`, t on clusters - 1 df)."""
    za = np.asarray(z, dtype=float)
    return cluster_robust_slope_p(_rank_residuals(np.asarray(x, dtype=float), za),
                                  _rank_residuals(np.asarray(y, dtype=float), za), clusters)


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

    Examples:
        Two bins split at the median entropy 0.25: 2 of 2 accepted below it, 1 of 2 above,
        the latter with a Wilson interval symmetric about 0.5.

        >>> bins = binned_acceptance([0.1, 0.2, 0.3, 0.4], [True, True, False, True], n_bins=2)
        >>> [(b.n, b.k, b.rate) for b in bins], (round(bins[1].ci_low, 4), round(bins[1].ci_high, 4))
        ([(2, 2, 1.0), (2, 1, 0.5)], (0.0945, 0.9055))
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

    Examples:
        Points exactly on y = 1 + 2x leave no residual, so the band has width 0:

        >>> fit = linear_fit_band([0, 1, 2, 3], [1, 3, 5, 7], n_grid=3)
        >>> round(fit.slope, 4), round(fit.intercept, 4), fit.grid
        (2.0, 1.0, [0.0, 1.5, 3.0])
        >>> [round(high - low, 4) for high, low in zip(fit.band_high, fit.band_low)]
        [0.0, 0.0, 0.0]
        >>> linear_fit_band([0, 1], [0, 1]) is None
        True
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

