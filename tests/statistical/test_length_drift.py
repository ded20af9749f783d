"""Statistical tests: the within-group length-drift rule (:func:`lab.analysis.length_drift.length_drift`)
keeps its size at the bar, finds a planted drift, and a point-estimate rule on the same data does not keep
its size (the negative control: why the interval).

Data: the study's two designs (``make study``: 66 clean prompts, 11 a category, 18 poisoned and 18 neutral
twins; the pair's ``--limit 344``: 172 clean, about 29 a category, 86 and 86 twins). Per cell (clean x
category, poisoned, neutral) the log length and a latent health score are bivariate normal with the
Pearson r whose Spearman rho is the planted one (r = 2 sin(pi rho / 6)); health = 10 Phi(latent + the
variant's offset), so the ranks carry the planted rho and the variants differ in health and length as
the real twins do. Every count is compared with a binomial bound, never a proportion with a tolerance:

* size: with rho exactly at the bar (0.2) in every group, the rule calls some group drifting in at most
  FAMILY_ALPHA / 2 of studies by construction; the count over N studies must not exceed the binomial
  upper bound of Binomial(N, FAMILY_ALPHA) at P_THRESHOLD (the whole family's nominal rate, leaving room
  for the Fisher-z approximation at n 11).
* power: rho 0.5 planted in the clean prompts (every category and the clean variant) of the pair's design
  is found in at least 90 % of studies (count bound at P_THRESHOLD), and in the poisoned twins alone in at
  least 40 %.
* negative control: "|rho| > 0.2 in some group" (the bare point estimate) on the size data fires in more
  than half the studies: a rule that cannot keep its size.

False-positive rate of each check: at most P_THRESHOLD = 0.1 %. Seeds and counts are fixed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from lab.analysis.length_drift import DRIFT_BAR, FAMILY_ALPHA, length_drift

pytestmark = [pytest.mark.statistical, pytest.mark.slow]

P_THRESHOLD = 1e-3
N_STUDIES = 400
CATEGORIES = ("factual", "creative", "code", "math", "ambiguous", "summary")
DESIGNS = {"make study": (66, 18), "pair 344": (172, 86)}  # clean prompts, twin pairs
# Log-length means and health offsets per variant: twins are several times longer than their question.
LOG_LENGTH = {"clean": math.log(40), "poisoned": math.log(140), "neutral": math.log(140)}
OFFSET = {"clean": 0.3, "poisoned": -0.4, "neutral": 0.0}


def _pearson_for(rho_s: float) -> float:
    return 2 * math.sin(math.pi * rho_s / 6)


def simulate(rng: np.random.Generator, n_clean: int, n_pairs: int, rho: dict[str, float]):
    """One study's (health, length, variants, categories); ``rho`` per variant (clean cells per category)."""
    health, length, variants, cats = [], [], [], []

    def cell(n: int, variant: str, cat_of) -> None:
        r = _pearson_for(rho[variant])
        z = rng.multivariate_normal([0, 0], [[1, r], [r, 1]], size=n)
        length.extend(np.exp(LOG_LENGTH[variant] + 0.5 * z[:, 0]))
        health.extend(10 * stats.norm.cdf(z[:, 1] + OFFSET[variant]))
        variants.extend([variant] * n)
        cats.extend(cat_of(i) for i in range(n))

    for k, cat in enumerate(CATEGORIES):  # clean prompts: one cell per category
        cell(n_clean // 6 + (k < n_clean % 6), "clean", lambda i, c=cat: c)
    for variant in ("poisoned", "neutral"):
        cell(n_pairs, variant, lambda i: CATEGORIES[i % 6])
    return health, length, variants, cats


def _upper(n: int, p: float) -> int:
    """Largest count Binomial(n, p) exceeds with probability below P_THRESHOLD."""
    return int(stats.binom.isf(P_THRESHOLD, n, p))


def _lower(n: int, p: float) -> int:
    return int(stats.binom.ppf(P_THRESHOLD, n, p))


@pytest.mark.parametrize("design", DESIGNS)
def test_length_drift_keeps_its_size_at_the_bar_and_a_point_estimate_rule_does_not(design):
    n_clean, n_pairs = DESIGNS[design]
    rng = np.random.default_rng(4111 + n_clean)
    at_bar = dict.fromkeys(("clean", "poisoned", "neutral"), DRIFT_BAR)
    flagged = naive = 0
    for _ in range(N_STUDIES):
        d = length_drift(*simulate(rng, n_clean, n_pairs, at_bar))
        flagged += d.reason() is not None
        naive += any(r.judged and abs(r.rho) > DRIFT_BAR for r in d.rows)
    assert flagged <= _upper(N_STUDIES, FAMILY_ALPHA), (design, flagged)
    assert naive > N_STUDIES // 2, (design, naive)  # the negative control


def test_length_drift_finds_a_planted_drift_in_the_pairs_design():
    n_clean, n_pairs = DESIGNS["pair 344"]
    rng = np.random.default_rng(4112)
    clean_drift = {"clean": 0.5, "poisoned": 0.0, "neutral": 0.0}
    twin_drift = {"clean": 0.0, "poisoned": 0.5, "neutral": 0.0}
    found_clean = found_twin = 0
    for _ in range(N_STUDIES):
        found_clean += bool(length_drift(*simulate(rng, n_clean, n_pairs, clean_drift)).drifting())
        bad = length_drift(*simulate(rng, n_clean, n_pairs, twin_drift)).drifting()
        found_twin += any(r.group == "poisoned" for r in bad)
    assert found_clean >= _lower(N_STUDIES, 0.90), found_clean
    assert found_twin >= _lower(N_STUDIES, 0.40), found_twin
