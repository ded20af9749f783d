"""Statistical tests: `lab stream`'s pre-stated Wilcoxon test and its negative control keep their size.

The report's claim "window:W has higher NLL than sinks:4+W" rests on a one-sided
Wilcoxon signed-rank test at ALPHA = 1 % over chunk means, and its negative control
(the window's chunks paired with themselves at random) must not reject. Here both
are run on N_DATASETS seeded synthetic null datasets shaped like real chunk means
(an AR(1) series: neighbouring chunks of a text are alike), and the number of
rejections (a count) is compared with Binomial(N_DATASETS, ALPHA): a check fails when
P(X >= count) < P_THRESHOLD, so its false-positive rate is 0.1 %. Each has a
negative control: a deliberately broken variant of the shuffle (a data-dependent
pairing: each chunk against the next-lower one) that the same check must reject.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from lab.stream import analysis

N_DATASETS = 1000
N_CHUNKS = 30  # the default run: (4,096 - 256) / 128 chunks
P_THRESHOLD = 1e-3


def _ar1_chunks(rng: np.random.Generator, n: int = N_CHUNKS, rho: float = 0.6, drift: float = 0.0) -> np.ndarray:
    """Chunk mean NLLs (nats): level 2.5, AR(1) noise of sd 0.3, an optional linear drift per chunk."""
    x = np.empty(n)
    x[0] = rng.normal(0, 0.3)
    for i in range(1, n):
        x[i] = rho * x[i - 1] + rng.normal(0, 0.3 * np.sqrt(1 - rho**2))
    return 2.5 + x + drift * np.arange(n)


def _excess_pvalue(rejections: int) -> float:
    """P(X >= rejections) for X ~ Binomial(N_DATASETS, ALPHA): small means the test rejects too often."""
    return float(stats.binom.sf(rejections - 1, N_DATASETS, analysis.ALPHA))


def _count(make_pair) -> int:
    rejections = 0
    for seed in range(N_DATASETS):
        a, b = make_pair(np.random.default_rng(seed), seed)
        rejections += analysis.wilcoxon_greater(a, b, name="t", a_name="a", b_name="b").reject
    return rejections


def _null_pair(rng, seed):
    """Two policies that differ only by symmetric per-chunk noise around the same text."""
    base = _ar1_chunks(rng)
    return base + rng.normal(0, 0.05, N_CHUNKS), base + rng.normal(0, 0.05, N_CHUNKS)


def _shuffled(rng, seed):
    a = _ar1_chunks(rng)
    return a, a[analysis.derangement(a.size, seed)]


def _broken_sorted_pairing(rng, seed):
    """Broken control pairing: a data-dependent permutation, each chunk against the next-lower one."""
    a = _ar1_chunks(rng)
    order = np.argsort(a)
    perm = np.empty_like(order)
    perm[order] = np.roll(order, 1)  # chunk of rank k paired with rank k - 1 (the lowest with the highest)
    return a, a[perm]


def test_wilcoxon_greater_size_under_null_is_at_most_alpha():
    count = _count(_null_pair)
    assert _excess_pvalue(count) >= P_THRESHOLD, f"{count}/{N_DATASETS} rejections at alpha={analysis.ALPHA}"


def test_shuffled_pairing_control_size_is_at_most_alpha():
    count = _count(_shuffled)
    assert _excess_pvalue(count) >= P_THRESHOLD, f"{count}/{N_DATASETS} rejections at alpha={analysis.ALPHA}"


def test_negative_control_broken_pairing_is_caught():
    """The same check flags a pairing that builds in a systematic difference."""
    count = _count(_broken_sorted_pairing)
    assert _excess_pvalue(count) < P_THRESHOLD, f"only {count}/{N_DATASETS} rejections"
