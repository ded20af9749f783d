"""Statistics for ``lab stream``: chunk means, bootstrap CIs and the pre-stated paired test.

The unit of resampling is a chunk of consecutive target tokens (default 128):
neighbouring tokens' NLLs are correlated, chunks much less so. Every policy is
scored on the same targets, so chunk means pair across policies.

Pre-stated test (StreamingLLM, Xiao et al. 2023, Table 1, stated before the run):
H1: ``window:W`` has higher NLL than ``sinks:4+W`` on the same chunks. One-sided
Wilcoxon signed-rank over the chunk differences (``scipy.stats.wilcoxon``,
``alternative="greater"``), rejecting the null at :data:`ALPHA` (the test's
false-positive rate under the null). Negative control: the same test on
``window:W`` against itself with the chunks paired at random (a seeded
derangement): the pairing is broken on purpose, its null holds by construction,
and the test must not reject it.

Pure numpy/scipy: no torch, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from lab.kinds.stream import PairedTest  # the report's own type: NaN here where the file holds null

# The pre-stated test's false-positive rate (one-sided, one test; the negative
# control is a check of the test, not a second hypothesis).
ALPHA = 0.01
# Two-sided confidence level of every bootstrap interval.
CONFIDENCE = 0.95
N_RESAMPLES = 9999
# "Within a few percent": the recompute oracle and sinks:4+W agree when their PPL
# ratio lies within 1 +- RECOMPUTE_TOLERANCE (stated before the run).
RECOMPUTE_TOLERANCE = 0.05


def chunk_means(nll: np.ndarray, start: int, chunk: int) -> np.ndarray:
    """Mean NLL per chunk of targets.

    Args:
        nll: Float ``[S - 1]`` NLL in nats, entry ``t - 1`` for target ``t``; NaN where
            a target was not scored (the recompute oracle's sample).
        start: First target position of the first chunk (>= 1).
        chunk: Targets per chunk (>= 1); a trailing partial chunk is dropped.

    Returns:
        Float64 ``[C]`` chunk means (NaN-ignoring).

    Raises:
        ValueError: bad start/chunk, no complete chunk, or a chunk with no scored target.
    """
    if start < 1 or chunk < 1:
        raise ValueError(f"start={start} and chunk={chunk} must be >= 1")
    n_chunks = (nll.shape[0] + 1 - start) // chunk
    if n_chunks < 1:
        raise ValueError(f"no complete chunk of {chunk} targets from position {start} in {nll.shape[0] + 1} tokens")
    block = np.asarray(nll[start - 1: start - 1 + n_chunks * chunk], dtype=np.float64).reshape(n_chunks, chunk)
    if np.isnan(block).all(axis=1).any():
        raise ValueError("a chunk has no scored target; use fewer recompute skips or longer chunks")
    return np.nanmean(block, axis=1)


def matched(nll: np.ndarray, like: np.ndarray) -> np.ndarray:
    """``nll`` with NaN wherever ``like`` is NaN (score two policies on the same targets)."""
    out = np.array(nll, dtype=np.float64)
    out[np.isnan(like)] = np.nan
    return out


@dataclass(frozen=True)
class Interval:
    """A point estimate with a bootstrap confidence interval (same units as ``value``)."""

    value: float
    low: float
    high: float
    confidence: float = CONFIDENCE


def ppl_interval(means: np.ndarray, seed: int) -> Interval:
    """Perplexity exp(mean NLL) with a BCa bootstrap CI over chunks (``scipy.stats.bootstrap``).

    Args:
        means: Float ``[C]`` chunk mean NLLs (nats), C >= 2.
        seed: Resampling seed.
    """
    means = np.asarray(means, dtype=np.float64)
    if means.size < 2:
        raise ValueError(f"need >= 2 chunks for a bootstrap interval, got {means.size}")
    return _exp_mean_interval(means, seed)


def ppl_ratio_interval(a: np.ndarray, b: np.ndarray, seed: int) -> Interval:
    """PPL(a) / PPL(b) = exp(mean(a) - mean(b)) with a paired BCa bootstrap CI over chunks."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.size < 2:
        raise ValueError(f"paired chunk means must have the same length >= 2, got {a.shape} and {b.shape}")
    return _exp_mean_interval(a - b, seed)


def _exp_mean_interval(x: np.ndarray, seed: int) -> Interval:
    """exp(mean(x)) with exp of the ends of mean(x)'s BCa bootstrap CI; a constant ``x`` gives a point, which the
    bootstrap cannot (``x``: float64 ``[C]``, nats)."""
    if np.ptp(x) == 0:
        v = math.exp(float(x[0]))
        return Interval(v, v, v)
    res = stats.bootstrap((x,), np.mean, n_resamples=N_RESAMPLES, confidence_level=CONFIDENCE,
                          rng=np.random.default_rng(seed))
    ci = res.confidence_interval
    return Interval(math.exp(float(x.mean())), math.exp(float(ci.low)), math.exp(float(ci.high)))


def wilcoxon_greater(a: np.ndarray, b: np.ndarray, *, name: str, a_name: str, b_name: str,
                     alpha: float = ALPHA) -> PairedTest:
    """Test H1: a's chunk NLLs exceed b's (paired, one-sided Wilcoxon signed-rank).

    Raises:
        ValueError: unequal lengths or fewer than 2 pairs.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.size < 2:
        raise ValueError(f"paired chunk means must have the same length >= 2, got {a.shape} and {b.shape}")
    d = a - b
    nonzero = int(np.count_nonzero(d))
    if nonzero == 0:
        stat, p = float("nan"), float("nan")
    else:
        res = stats.wilcoxon(a, b, alternative="greater", zero_method="wilcox")
        stat, p = float(res.statistic), float(res.pvalue)
    return PairedTest(name=name, a=a_name, b=b_name, n_pairs=int(a.size), n_nonzero=nonzero,
                      n_a_higher=int((d > 0).sum()), median_diff=float(np.median(d)), statistic=stat,
                      p_value=p, alpha=alpha, reject=bool(p < alpha) if math.isfinite(p) else False)


def derangement(n: int, seed: int) -> np.ndarray:
    """A seeded random permutation of ``range(n)`` with no fixed point (n >= 2)."""
    if n < 2:
        raise ValueError(f"n={n} must be >= 2 for a derangement")
    rng = np.random.default_rng(seed)
    while True:  # the chance of a derangement is ~1/e, so this ends after ~3 draws
        perm = rng.permutation(n)
        if not (perm == np.arange(n)).any():
            return perm


def shuffled_pairing_control(a: np.ndarray, seed: int, *, name: str, a_name: str) -> PairedTest:
    """The negative control: :func:`wilcoxon_greater` of ``a`` against itself paired at random."""
    a = np.asarray(a, dtype=np.float64)
    return wilcoxon_greater(a, a[derangement(a.size, seed)], name=name, a_name=a_name,
                            b_name=f"{a_name} (chunks shuffled)")


def rolling_mean(nll: np.ndarray, width: int) -> np.ndarray:
    """Trailing mean over the last ``width`` scored values (NaN entries skipped), same length as ``nll``.

    Entries before ``width`` scored values exist average what there is; unscored
    entries stay NaN.
    """
    x = np.asarray(nll, dtype=np.float64)
    out = np.full_like(x, np.nan)
    idx = np.flatnonzero(~np.isnan(x))
    if idx.size == 0:
        return out
    c = np.concatenate([[0.0], np.cumsum(x[idx])])
    n = np.arange(1, idx.size + 1)
    lo = np.maximum(n - width, 0)
    out[idx] = (c[n] - c[lo]) / (n - lo)
    return out
