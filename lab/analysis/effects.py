"""Effect sizes and intervals of the study's statistics (pure numbers in, numbers out).

The lab's own math here: the matched-pairs rank-biserial correlation (Kerby 2014),
eta-squared_H (Cohen 2008, in Tomczak & Tomczak 2014), a bootstrap wrapper around
``scipy.stats.bootstrap``, binned acceptance rates with Wilson intervals and a
least-squares line with its t-based confidence band. No model, no files, no Rich.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy import stats

CI_LEVEL = 0.95

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


def pearson_r(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def bootstrap_ci(data: tuple[np.ndarray, ...], statistic: Callable[..., float], *, paired: bool,
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
            return bootstrap_ci(data, statistic, paired=paired, method="percentile", seed=seed,
                                 n_resamples=n_resamples)
    return lo, hi


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

