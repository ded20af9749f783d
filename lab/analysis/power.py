"""Power of each study test: the smallest effect detectable at 80 % power with its n and alpha.

Every hypothesis reports what it could have detected: a null result is a
result only when the study could have seen an effect of interest. Two-sided tests
at ``alpha / m`` (the Bonferroni bound of Holm's first step, m = the family's
tested hypotheses), power :data:`POWER`, normal approximations under the null's
standard error:

* Spearman rho: Fisher z with Bonett & Wright's (2000) variance
  1.06 / (n - 3): ``rho_min = tanh((z_{1-a/2} + z_{power}) sqrt(1.06 / (n - 3)))``;
  the partial Spearman rho of H1 and H1c (one covariate, log prompt length) loses one
  degree of freedom: variance 1.06 / (n - 4), so n - 1 in that formula.
* matched-pairs rank-biserial r (H4a, H4b, H5): under the null the signed-rank sum
  has variance n(n+1)(2n+1)/24, so r has SD ``sqrt(2 (2n + 1) / (3 n (n + 1)))``;
  ``r_min = (z_{1-a/2} + z_{power}) SD``.
* eta^2_H (H3): Kruskal-Wallis as the one-way ANOVA on ranks (Conover & Iman 1981):
  F = [H / (k - 1)] / [(n - 1 - H) / (n - k)] taken as noncentral F(k - 1, n - k, lambda),
  lambda = n f^2, f^2 = eta^2 / (1 - eta^2) (Cohen 1988); power is P(F > the F that H's
  chi^2(k - 1) critical value gives). Simulated at the study's 66 clean prompts
  (tests/statistical/test_hypothesis_size.py) its 80 % is 305 of 400 studies (0.76); the
  noncentral chi^2(k - 1, eta^2 (n - k)) of local alternatives claimed 80 % where 362 of
  400 (0.9) detected.
* H2 (clustered tokens), H6 (jackknife t) and H6c (bootstrap): the standard error read
  off the test's interval at its level L, ``SE = (hi - lo) / (2 z_{(1+L)/2})``;
  ``min = (z_{1-a/2} + z_{power}) SE``, scaling as 1 / sqrt(n) for the prompts needed.
  For H6 at the study's design this is checked by simulation in
  tests/statistical/test_hypothesis_size.py.

"Prompts needed" is the n at which the smallest detectable effect equals the
smallest effect of interest (:data:`lab.analysis.SMALLEST_EFFECT`, or
:data:`lab.analysis.SMALLEST_ETA_SQ` for eta^2), in the test's own unit (prompts,
pairs or prompts of the subset; for H2, prompts = clusters).
"""

from __future__ import annotations

import math
from typing import Any

from scipy import stats
from scipy.optimize import brentq

POWER = 0.8


def _z_sum(alpha: float, power: float) -> float:
    return float(stats.norm.isf(alpha / 2) + stats.norm.ppf(power))


def spearman_min_effect(n: int, alpha: float, power: float = POWER) -> float:
    """Smallest |rho| detectable (Fisher z, variance 1.06 / (n - 3)); NaN for n <= 3."""
    return math.tanh(_z_sum(alpha, power) * math.sqrt(1.06 / (n - 3))) if n > 3 else math.nan


def spearman_n_needed(effect: float, alpha: float, power: float = POWER) -> int:
    """Observations needed for :func:`spearman_min_effect` to reach ``effect``."""
    return math.ceil(1.06 * (_z_sum(alpha, power) / math.atanh(effect)) ** 2 + 3)


def partial_spearman_min_effect(n: int, alpha: float, power: float = POWER, covariates: int = 1) -> float:
    """Smallest |partial rho| detectable given ``covariates`` (Fisher z, variance 1.06 / (n - 3 - covariates))."""
    return spearman_min_effect(n - covariates, alpha, power)


def partial_spearman_n_needed(effect: float, alpha: float, power: float = POWER, covariates: int = 1) -> int:
    """Observations needed for :func:`partial_spearman_min_effect` to reach ``effect``."""
    return spearman_n_needed(effect, alpha, power) + covariates


def _rank_biserial_sd(n: int) -> float:
    return math.sqrt(2 * (2 * n + 1) / (3 * n * (n + 1)))


def rank_biserial_min_effect(n: int, alpha: float, power: float = POWER) -> float:
    """Smallest |r| (matched-pairs rank-biserial) detectable with n pairs; capped at 1."""
    return min(1.0, _z_sum(alpha, power) * _rank_biserial_sd(n)) if n >= 1 else math.nan


def rank_biserial_n_needed(effect: float, alpha: float, power: float = POWER) -> int:
    """Pairs needed for :func:`rank_biserial_min_effect` to reach ``effect`` (the smallest such n;
    the SD falls with n, so a doubling then a bisection find it)."""
    z = _z_sum(alpha, power)
    lo, hi = 0, 1  # z * SD(lo) > effect (lo = 0: no pairs) and hi to be found with z * SD(hi) <= effect
    while z * _rank_biserial_sd(hi) > effect:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if z * _rank_biserial_sd(mid) > effect else (lo, mid)
    return hi


def _kruskal_power(n: int, k: int, effect: float, alpha: float) -> float:
    """Power of Kruskal-Wallis on n values in k groups at eta^2_H = ``effect`` (module docstring); 0 where
    H (at most n - 1) cannot reach its critical value."""
    crit = float(stats.chi2.isf(alpha, k - 1))
    if crit >= n - 1:
        return 0.0
    crit_f = crit / (k - 1) / ((n - 1 - crit) / (n - k))
    return float(stats.ncf.sf(crit_f, k - 1, n - k, n * effect / (1 - effect)))


MAX_ETA_SQ = 0.999  # the largest eta^2 searched: lambda = 999 n, power 1 wherever H can reach its critical value


def eta_sq_min_effect(n: int, k: int, alpha: float, power: float = POWER) -> float:
    """Smallest eta^2_H detectable by Kruskal-Wallis with n values in k groups; 1 where none is."""
    if not n > k >= 2:
        return math.nan
    if _kruskal_power(n, k, MAX_ETA_SQ, alpha) < power:
        return 1.0
    return float(brentq(lambda e: _kruskal_power(n, k, e, alpha) - power, 1e-12, MAX_ETA_SQ))


def eta_sq_n_needed(effect: float, k: int, alpha: float, power: float = POWER) -> int:
    """Values needed for :func:`eta_sq_min_effect` to reach ``effect`` (a doubling then a bisection).

    Raises:
        ValueError: ``effect`` outside (0, 1) (no n detects it).
    """
    if not 0 < effect < 1:
        raise ValueError(f"effect={effect!r} must be in (0, 1)")
    lo, hi = k, 2 * k  # power(lo) < power (lo = k: untestable) and hi to be found with power(hi) >= power
    while _kruskal_power(hi, k, effect, alpha) < power:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _kruskal_power(mid, k, effect, alpha) < power else (lo, mid)
    return hi


def power_summary(result: Any, m: int, alpha: float, power: float = POWER) -> dict[str, Any]:
    """Power figures of one :class:`lab.analysis.TestResult`.

    Args:
        result: The test (its ``effect_name``, ``n``, CI and ``ci_level``, ``smallest_effect``, ``details``).
        m: Tested hypotheses in the Holm family (>= 1).
        alpha: The family-wise alpha.
        power: Target power.

    Returns:
        ``{"alpha": alpha / m, "power", "n", "unit", "min_detectable", "smallest_effect",
        "underpowered", "n_needed"}``; NaN / None where the test could not run.
    """
    a = alpha / max(1, m)
    name, n, s = result.effect_name, int(result.n), result.smallest_effect
    unit, min_det, needed = "prompts", math.nan, None
    if name == "spearman_rho" and n > 3:
        min_det, needed = spearman_min_effect(n, a, power), spearman_n_needed(s, a, power)
    elif name == "partial_spearman_rho" and n > 4:
        # H1's prompts cluster in questions (a question's two twins): power is stated on the questions, never
        # on more units than carry independent information (conservative where twins differ within a question)
        n_units = int(result.details.get("n_clusters", n))
        if 4 < n_units < n:
            n, unit = n_units, "questions"
        min_det, needed = partial_spearman_min_effect(n, a, power), partial_spearman_n_needed(s, a, power)
    elif name == "rank_biserial_r" and n >= 1:
        unit = "pairs" if result.name.startswith("H4") else "prompts"
        min_det, needed = rank_biserial_min_effect(n, a, power), rank_biserial_n_needed(s, a, power)
    elif name == "eta_squared_h":
        k = len(result.details.get("groups", {}))
        if n > k >= 2:
            min_det, needed = eta_sq_min_effect(n, k, a, power), eta_sq_n_needed(s, k, a, power)
    elif math.isfinite(result.ci_low) and math.isfinite(result.ci_high) and result.ci_high > result.ci_low:
        level = float(result.ci_level)
        se = (result.ci_high - result.ci_low) / (2 * stats.norm.isf((1 - level) / 2))
        min_det = _z_sum(a, power) * se
        n = int(result.details.get("n_clusters", n))  # H2: tokens cluster in prompts; prompts are the unit
        unit = "prompts of the temperature subset" if result.name.startswith("H6") else "prompts"
        needed = math.ceil(n * (min_det / s) ** 2)
    underpowered = bool(math.isfinite(min_det) and min_det > s) if math.isfinite(min_det) else None
    return {"alpha": a, "power": power, "n": n, "unit": unit, "min_detectable": min_det, "smallest_effect": s,
            "underpowered": underpowered, "n_needed": needed}


def power_note(p: dict[str, Any]) -> str:
    """One sentence for an inconclusive verdict: underpowered or not, and what would settle it."""
    if not math.isfinite(p["min_detectable"]):
        return "power not computable (too little data)"
    head = (f"smallest effect detectable at {p['power']:.0%} power with n = {p['n']} at alpha = {p['alpha']:.3g}: "
            f"{p['min_detectable']:.3g}")
    if p["underpowered"]:
        return (f"underpowered ({head}, above the smallest effect of interest {p['smallest_effect']:g}); "
                f"about {p['n_needed']} {p['unit']} would detect {p['smallest_effect']:g}")
    return (f"not underpowered ({head}); the CI still reaches both sides of the decision, "
            f"so the true effect is likely below {p['smallest_effect']:g} or near it")
