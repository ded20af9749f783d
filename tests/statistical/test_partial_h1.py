"""Statistical tests: H1's length-adjusted test (partial Spearman given log length) keeps its size and power.

Context health fell with prompt length (the old measure: rho about -0.7 with length),
and entropy may move with length too; an unadjusted Spearman then "finds" H1 where
there is only length. The adjusted test (:func:`lab.analysis.hypotheses.partial_correlation_test`)
must (a) not reject when health and entropy each depend on length only (a planted pure-length
effect: the negative control the unadjusted test fails), and (b) find a planted effect of
health on entropy that sits on top of the same length effect.

Each check runs N_DATASETS seeded synthetic datasets of N_PROMPTS prompts and compares
a count of rejections at ALPHA with a binomial: (a) fails when P(X >= count) < P_THRESHOLD
for X ~ Binomial(N_DATASETS, ALPHA); (b) fails when P(X <= count) < P_THRESHOLD for
X ~ Binomial(N_DATASETS, MIN_POWER). False-positive rate of each check: at most 0.1 %.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from lab.analysis.hypotheses import partial_correlation_test

N_DATASETS = 200
N_PROMPTS = 80
ALPHA = 0.05
MIN_POWER = 0.8  # the planted effect (rho about -0.45 at fixed length) is found far more often than this
P_THRESHOLD = 1e-3
RESAMPLES = 0  # no interval: only the p-value is judged here (the cluster-robust slope test of the rank residuals)


def _dataset(rng: np.random.Generator, planted: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lengths log-uniform on [10, 500] tokens; health falls with log length, entropy rises with it;
    ``planted`` adds entropy = ... - planted * health (0: no effect beyond length)."""
    n = np.exp(rng.uniform(np.log(10), np.log(500), N_PROMPTS)).round()
    z = (np.log(n) - np.log(70)) / 1.1
    health = 9.0 - 0.8 * z + rng.normal(0, 0.6, N_PROMPTS)
    entropy = 2.0 + 0.8 * z + rng.normal(0, 0.6, N_PROMPTS) - planted * (health - 9.0 + 0.8 * z)
    return health, entropy, n


def _rejections(planted: float, adjusted: bool) -> int:
    count = 0
    for seed in range(N_DATASETS):
        health, entropy, n = _dataset(np.random.default_rng(seed), planted)
        if adjusted:
            p = partial_correlation_test(health, entropy, n, n_resamples=RESAMPLES, seed=seed).p_value
        else:
            p = float(stats.spearmanr(health, entropy).pvalue)
        count += p < ALPHA
    return count


def test_partial_h1_pure_length_effect_not_found():
    """Health and entropy both driven by length only: the adjusted H1 rejects at its nominal rate."""
    count = _rejections(planted=0.0, adjusted=True)
    tail = float(stats.binom.sf(count - 1, N_DATASETS, ALPHA))
    assert tail >= P_THRESHOLD, f"adjusted H1 rejected {count}/{N_DATASETS} pure-length datasets (P = {tail:.2g})"


def test_partial_h1_negative_control_unadjusted_spearman_finds_the_length_effect():
    """Negative control: on the same pure-length datasets the unadjusted Spearman rejects nearly always,
    so the datasets do carry the confound the adjusted test has to remove."""
    count = _rejections(planted=0.0, adjusted=False)
    tail = float(stats.binom.cdf(count, N_DATASETS, MIN_POWER))
    assert tail >= P_THRESHOLD, f"unadjusted Spearman rejected only {count}/{N_DATASETS} (P = {tail:.2g})"


def test_partial_h1_planted_effect_found():
    """A planted effect of health on entropy at fixed length (on top of the length effect) is found."""
    count = _rejections(planted=0.5, adjusted=True)
    tail = float(stats.binom.cdf(count, N_DATASETS, MIN_POWER))
    assert tail >= P_THRESHOLD, f"adjusted H1 found the planted effect in {count}/{N_DATASETS} (P = {tail:.2g})"
