"""The conformance tests on numbers: law, power, Holm, greedy equality, logprobs.

**The law test** (:func:`law_test`) asks whether ``n`` tokens an engine drew at one step
are distributed as the reference law of its declared chain (:mod:`lab.conform.chains`).
Two parts: any token the reference gives probability 0 (dropped by a filter) that was
drawn even once rejects at once, exactly (p-value 0, reason
:data:`IMPOSSIBLE_TOKEN`); otherwise Pearson's chi-square on the counts
(``scipy.stats.chisquare``), with every token of expected count below
:data:`MIN_EXPECTED` pooled into one bin (merged into the smallest regular bin when the
pool itself stays below it), as ``tests/support.py``'s ``chisq_pvalue`` pools. On counts,
never proportions (PyTorch's ``test_distributions.py``).

**Power** (:func:`samples_for_power`): against a fixed alternative p1, Pearson's
statistic over the reference's bins p0 is approximately noncentral chi-square with the
bins' dof and noncentrality ``lambda = n * sum_b (p1_b - p0_b)^2 / p0_b`` (Cochran 1952;
Guenther 1977). That first-order law ignores that p1's counts vary as p1, not p0: where
p1 spreads mass over many bins (as the alternative below does) the statistic's mean is
larger by ``sum_b p1_b (1 - p1_b) / p0_b - dof``, and, simulated on the statistical
tier's logits, the first-order power fell short of the observed rate by up to 0.05 in
one direction and exceeded it by up to 0.07 in the other. So :func:`power_against`
keeps the noncentral chi-square (``scipy.stats.ncx2``) but fits it to the statistic's
exact mean and variance under multinomial(n, p1) (factorial moments of the multinomial):
``a * ncx2(dof, lambda')`` with ``a`` and ``lambda'`` matching both moments (a = 1,
lambda' = lambda in the first-order limit); its prediction came within 0.015 of the
observed rate where p1 is flatter than p0 and below it by up to 0.05 where p1 is
sharper (the safe side for a power claim). The samples a setting needs are the least n
at which that power reaches the target. The alternative is stated
(:func:`least_favourable`): mass ``tv`` moved from the most likely tokens (the prefix in
order of probability whose mass is nearest 1/2, set A) to the rest, in proportion to
the reference inside each part. Any law at total-variation distance ``tv`` over the bins
has ``lambda >= 4 n tv^2`` (Cauchy-Schwarz); the tilt's is ``n tv^2 (1/P(A) + 1/(1 -
P(A)))``, the least when P(A) = 1/2 and above it by that factor / 4 otherwise. It keeps
the reference's support, so the exact check cannot help it. A defect that puts mass on a
dropped token is caught by the exact check as well; one that moves mass only inside
the pooled bin is not seen at all.

**Across settings** (:func:`holm_family`): Holm's step-down correction
(:func:`lab.analysis.hypotheses.holm`), the family rejected when any adjusted p-value is
<= alpha: a correct engine fails the family with probability <= alpha. Holm's first step
tests at alpha / m, so a suite sizes each setting with ``samples_for_power(..., alpha /
m)`` to keep the stated power for one defective setting inside the family.

**Greedy** (:func:`greedy_check`) and **logprobs** (:func:`logprob_check`): equality of
the argmax except at stated near-ties, and log-probabilities within a tolerance in nats.

Shapes: V = vocabulary size, T = decode steps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

# Pearson's statistic is close to chi-square only when every bin expects about 5 or more
# (Cochran 1954); the lab's statistical tests pool at the same count (tests/support.py).
MIN_EXPECTED = 5.0
# Probabilities from a float64 softmax sum to 1 within ~1e-15 per token; 1e-6 also admits
# a law summed in float32 over a vocabulary of 1e5, and still refuses a vector that is
# not a law (logits, percentages, a law missing a token).
PROB_SUM_TOL = 1e-6
# samples_for_power refuses a plan past this: 10 million draws of one step is no test a
# server can answer in a session.
MAX_SAMPLES = 10_000_000

CHI_SQUARE = "chi-square"
IMPOSSIBLE_TOKEN = "impossible token"
ONE_BIN = "one bin"  # the whole law in one bin: no alternative on the same support can show
LEAST_FAVOURABLE = ("mass tv moved from the most likely tokens (the prefix in probability order whose mass is "
                    "nearest 1/2) to the rest, in proportion to the reference inside each part")


@dataclass(frozen=True)
class LawTest:
    """One goodness-of-fit test of token counts against a reference law.

    Attributes:
        statistic: Pearson's chi-square over the bins (inf when an impossible token was seen).
        dof: Bins minus 1.
        p_value: The chi-square p-value; 0.0 when an impossible token was seen; 1.0 with one bin.
        n: Tokens counted.
        n_bins: Bins after pooling.
        pooled_tokens: Tokens of positive probability pooled because each expected < :data:`MIN_EXPECTED`.
        impossible_tokens: Token ids drawn although the reference gives them probability 0.
        reason: :data:`CHI_SQUARE`, :data:`IMPOSSIBLE_TOKEN` or :data:`ONE_BIN`: what decided the p-value.
    """

    statistic: float
    dof: int
    p_value: float
    n: int
    n_bins: int
    pooled_tokens: int
    impossible_tokens: tuple[int, ...]
    reason: str

    def rejects(self, alpha: float) -> bool:
        return self.p_value <= alpha


@dataclass(frozen=True)
class PowerPlan:
    """The samples one setting needs, and what they buy.

    Attributes:
        n: Tokens to draw.
        tv: Total-variation distance of the alternative from the reference.
        alpha: The level the setting is tested at.
        power: The power asked for.
        achieved: The power at ``n`` (>= ``power``).
        dof: The chi-square's dof at ``n`` (bins pooled at ``n``).
        noncentrality: The first-order lambda at ``n`` (module docstring).
        alternative: Which alternative (:data:`LEAST_FAVOURABLE`).
    """

    n: int
    tv: float
    alpha: float
    power: float
    achieved: float
    dof: int
    noncentrality: float
    alternative: str = LEAST_FAVOURABLE


@dataclass(frozen=True)
class FamilyTest:
    """Holm's correction over the settings of one run.

    Attributes:
        names: The settings, in the order given.
        p_values: Their law tests' p-values.
        adjusted: Holm-adjusted p-values, same order.
        alpha: The family's level.
    """

    names: tuple[str, ...]
    p_values: tuple[float, ...]
    adjusted: tuple[float, ...]
    alpha: float

    @property
    def rejected(self) -> tuple[str, ...]:
        return tuple(name for name, p in zip(self.names, self.adjusted) if p <= self.alpha)

    @property
    def passed(self) -> bool:
        return not self.rejected


@dataclass(frozen=True)
class GreedyCheck:
    """Greedy equality of an engine's tokens with the reference's argmax.

    Attributes:
        n_steps: Steps compared.
        tie_tol: The near-tie tolerance, nats (a logit gap is a log-probability gap).
        excused: Steps where the engine's token is not the argmax but its logit is within
            ``tie_tol`` of the largest.
        mismatches: Steps where it is further than ``tie_tol`` below.
        first_mismatch: The first of those, or None.
        mismatch_gap: The largest logit minus the engine token's at ``first_mismatch``, nats; None without one.
    """

    n_steps: int
    tie_tol: float
    excused: tuple[int, ...]
    mismatches: int
    first_mismatch: int | None
    mismatch_gap: float | None

    @property
    def passed(self) -> bool:
        return self.first_mismatch is None


@dataclass(frozen=True)
class LogprobCheck:
    """Reported log-probabilities against the reference's.

    Attributes:
        n: Values compared.
        tol: The tolerance, nats.
        max_abs_diff: The largest ``|engine - reference|``, nats.
        worst: Index of that value in the arrays given.
    """

    n: int
    tol: float
    max_abs_diff: float
    worst: tuple[int, ...]

    @property
    def passed(self) -> bool:
        return self.max_abs_diff <= self.tol


def _as_law(probs, name: str = "probs") -> np.ndarray:
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"{name} must be a non-empty vector [V], got shape {p.shape}")
    if not np.isfinite(p).all() or (p < 0).any() or abs(p.sum() - 1.0) > PROB_SUM_TOL:
        raise ValueError(f"{name} must be finite, >= 0 and sum to 1 within {PROB_SUM_TOL} (sums to {p.sum()!r})")
    return p


def _as_counts(counts, vocab: int) -> np.ndarray:
    c = np.asarray(counts)
    if c.shape != (vocab,):
        raise ValueError(f"counts shape {c.shape} must be [V] = ({vocab},), as probs")
    if not (np.issubdtype(c.dtype, np.integer) or (np.isfinite(c).all() and (c == np.round(c)).all())) or (c < 0).any():
        raise ValueError("counts must be non-negative whole numbers")
    if c.sum() < 1:
        raise ValueError("counts must hold at least one token")
    return c.astype(np.int64)


def _bins(probs: np.ndarray, n: int) -> tuple[np.ndarray, int, int]:
    """Bin labels ``[V]`` (-1 at probability 0), the number of bins and of pooled tokens, at ``n`` draws."""
    support = np.flatnonzero(probs > 0)
    order = support[np.argsort(probs[support], kind="stable")]  # least likely first
    expected = n * probs[order]
    n_small = int((expected < MIN_EXPECTED).sum())  # a prefix: expected rises along order
    n_regular = order.size - n_small
    labels = np.full(probs.size, -1, dtype=np.int64)
    labels[order[n_small:]] = np.arange(n_regular)
    n_bins = n_regular
    if n_small:
        if expected[:n_small].sum() < MIN_EXPECTED and n_regular:
            labels[order[:n_small]] = 0  # the pool alone is too small: into the smallest regular bin
        else:
            labels[order[:n_small]] = n_regular
            n_bins += 1
    return labels, n_bins, n_small


def law_test(counts, probs) -> LawTest:
    """Goodness of fit of observed token counts to a reference law (module docstring).

    Args:
        counts: int ``[V]``: how often each token was drawn (n = the sum >= 1).
        probs: float ``[V]`` probabilities (the reference law, e.g.
            :func:`lab.conform.chains.chain_probs`), summing to 1 within :data:`PROB_SUM_TOL`.

    Returns:
        A :class:`LawTest`. Inputs are not modified.

    Raises:
        ValueError: shapes differ; ``probs`` not a law; counts negative, fractional or all 0.

    Examples:
        Counts in proportion fit exactly; one draw of a dropped token rejects outright:

        >>> law_test([50, 30, 20, 0], [0.5, 0.3, 0.2, 0.0]).p_value
        1.0
        >>> result = law_test([50, 30, 19, 1], [0.5, 0.3, 0.2, 0.0])
        >>> result.p_value, result.reason, result.impossible_tokens
        (0.0, 'impossible token', (3,))
    """
    from scipy.stats import chisquare

    p = _as_law(probs)
    c = _as_counts(counts, p.size)
    n = int(c.sum())
    labels, n_bins, pooled = _bins(p, n)
    impossible = tuple(int(i) for i in np.flatnonzero((p == 0) & (c > 0)))
    if impossible:
        return LawTest(math.inf, n_bins - 1, 0.0, n, n_bins, pooled, impossible, IMPOSSIBLE_TOKEN)
    if n_bins < 2:
        return LawTest(0.0, 0, 1.0, n, n_bins, pooled, (), ONE_BIN)
    support = labels >= 0
    observed = np.bincount(labels[support], weights=c[support], minlength=n_bins)
    expected = np.bincount(labels[support], weights=p[support], minlength=n_bins) * n
    expected *= observed.sum() / expected.sum()  # equal totals, as chisquare requires of float sums
    result = chisquare(observed, expected)
    return LawTest(float(result.statistic), n_bins - 1, float(result.pvalue), n, n_bins, pooled, (), CHI_SQUARE)


def _pearson_moments(p0: np.ndarray, p1: np.ndarray, n: int) -> tuple[float, float]:
    """Exact mean and variance of Pearson's ``sum_b (O_b - n p0_b)^2 / (n p0_b)`` when O ~ multinomial(n, p1).

    With c_b = 1 / (n p0_b) the statistic is ``sum_b c_b O_b^2 - n``; its moments follow from the
    multinomial's factorial moments E[O_b^(k)] = n^(k) p1_b^k and E[O_b^(i) O_d^(j)] = n^(i+j) p1_b^i p1_d^j.
    """
    c = 1.0 / (n * p0)
    n2, n3, n4 = float(n) * (n - 1), float(n) * (n - 1) * (n - 2), float(n) * (n - 1) * (n - 2) * (n - 3)
    mean_s = float(np.sum(c * (n2 * p1**2 + n * p1)))
    same = np.sum(c**2 * (n4 * p1**4 + 6 * n3 * p1**3 + 7 * n2 * p1**2 + n * p1))  # b = d: E[O_b^4]
    u1, u2 = np.sum(c * p1), np.sum(c * p1**2)
    other = (n4 * (u2**2 - np.sum(c**2 * p1**4)) + 2 * n3 * (u2 * u1 - np.sum(c**2 * p1**3))
             + n2 * (u1**2 - np.sum(c**2 * p1**2)))  # b != d: E[O_b^2 O_d^2]
    return mean_s - n, float(same + other - mean_s**2)


def _chi_square_power(p0: np.ndarray, p1: np.ndarray, n: int, alpha: float) -> tuple[float, float]:
    """The chi-square part's power (module docstring) and the first-order noncentrality."""
    from scipy.stats import chi2, ncx2

    dof = p0.size - 1
    lam = float(n * ((p1 - p0) ** 2 / p0).sum())
    critical = chi2.isf(alpha, dof)
    mean, var = _pearson_moments(p0, p1, n)
    disc = mean * mean - dof * var / 2
    if disc < 0:  # more spread than a scaled noncentral chi-square of this dof allows: Satterthwaite's scaled chi-square
        scale, df = var / (2 * mean), 2 * mean * mean / var
        return float(chi2.sf(critical / scale, df)), lam
    scale = (mean - math.sqrt(disc)) / dof  # the root that is 1 when the moments are ncx2(dof, lambda)'s own
    noncentrality = max(0.0, mean / scale - dof)
    if noncentrality == 0:
        return float(chi2.sf(critical / scale, dof)), lam
    return float(ncx2.sf(critical / scale, dof, noncentrality)), lam


def _power_parts(reference: np.ndarray, truth: np.ndarray, n: int, alpha: float) -> tuple[float, int, float]:
    labels, n_bins, _ = _bins(reference, n)
    impossible_mass = float(truth[labels < 0].sum())
    if n_bins < 2:
        return 1.0 - (1.0 - impossible_mass) ** n, 0, 0.0
    support = labels >= 0
    p0 = np.bincount(labels[support], weights=reference[support], minlength=n_bins)
    p1 = np.bincount(labels[support], weights=truth[support], minlength=n_bins)
    p1 = p1 / p1.sum() if p1.sum() > 0 else p0  # the law given that no impossible token was drawn
    chi_power, lam = _chi_square_power(p0, p1, n, alpha)
    # the exact check and the chi-square treated as independent: an approximation, exact when either is 0
    return 1.0 - (1.0 - impossible_mass) ** n * (1.0 - chi_power), n_bins - 1, lam


def _check_alpha(alpha: float, name: str = "alpha") -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < alpha < 1.0:
        raise ValueError(f"{name}={alpha!r} must be in (0, 1)")


def power_against(reference, truth, n: int, alpha: float) -> float:
    """Approximate probability that :func:`law_test` at level ``alpha`` rejects ``n`` draws of ``truth``.

    The chi-square part is a scaled noncentral chi-square fitted to the exact mean and
    variance of Pearson's statistic over ``reference``'s bins at ``n`` (module docstring),
    conditional on no impossible token; the exact part is ``1 - (1 - m)^n`` with m the
    mass ``truth`` puts where ``reference`` is 0; the two are combined as if independent.
    With ``truth == reference`` it is ``alpha`` up to the statistic's variance differing
    from 2 dof by O(1/n).

    Args:
        reference: float ``[V]``, the law tested against.
        truth: float ``[V]``, the law the counts come from.
        n: Draws (>= 1).
        alpha: Level, in (0, 1).

    Returns:
        The power, in [0, 1].

    Raises:
        ValueError: a vector not a law, shapes differ, n < 1 or alpha outside (0, 1).

    Examples:
        >>> round(power_against([0.5, 0.5], [0.5, 0.5], 100, 0.05), 3)
        0.05
        >>> round(power_against([0.5, 0.5], [0.6, 0.4], 100, 0.05), 2)  # lambda = 100 * 0.04 = 4
        0.52
    """
    p0, p1 = _as_law(reference, "reference"), _as_law(truth, "truth")
    if p0.shape != p1.shape:
        raise ValueError(f"reference shape {p0.shape} != truth shape {p1.shape}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n={n!r} must be a positive integer")
    _check_alpha(alpha)
    return _power_parts(p0, p1, int(n), alpha)[0]


def least_favourable(probs, tv: float) -> np.ndarray:
    """The stated alternative behind the sample sizes: mass ``tv`` tilted from the likely half to the rest.

    Set A is the prefix of the tokens in order of probability (ties by token id) whose
    mass is nearest 1/2, the prefix being at least one token and leaving at least one.
    A's tokens are scaled by ``1 - tv / P(A)``, the rest by ``1 + tv / (1 - P(A))``: the
    law stays on the reference's support, moves ``tv`` in total variation, and has the
    least chi-square noncentrality of any law at that distance when P(A) = 1/2 (module
    docstring). It flattens the law, as too high a temperature would.

    Args:
        probs: float ``[V]``, the reference law; at least two tokens of positive probability.
        tv: The distance, in (0, P(A)].

    Returns:
        float64 ``[V]`` probabilities. The input is not modified.

    Raises:
        ValueError: ``probs`` not a law or with one token of positive probability; ``tv``
            outside (0, P(A)].

    Examples:
        >>> least_favourable([0.4, 0.3, 0.2, 0.1], 0.1).round(4).tolist()  # A = {0}: 0.4 is nearer 1/2 than 0.7
        [0.3, 0.35, 0.2333, 0.1167]
    """
    p = _as_law(probs)
    order = np.argsort(-p, kind="stable")
    support = int((p > 0).sum())
    if support < 2:
        raise ValueError("probs has one token of positive probability: no law on its support differs from it")
    cum = np.cumsum(p[order])[: support - 1]  # prefixes of 1 .. support - 1 tokens
    j = int(np.argmin(np.abs(cum - 0.5)))
    mass_a = float(cum[j])
    if not (isinstance(tv, (int, float)) and not isinstance(tv, bool) and 0.0 < tv <= mass_a):
        raise ValueError(f"tv={tv!r} must be in (0, P(A) = {mass_a:.4g}]")
    in_a = np.zeros(p.size, dtype=bool)
    in_a[order[: j + 1]] = True
    return np.where(in_a, p * (1.0 - tv / mass_a), p * (1.0 + tv / (1.0 - mass_a)))


def samples_for_power(probs, tv: float, alpha: float, power: float = 0.9) -> PowerPlan:
    """The draws one setting needs so that :func:`law_test` rejects the stated alternative with ``power``.

    The alternative is :func:`least_favourable` at ``tv``; the power is
    :func:`power_against` (noncentral chi-square, ``scipy.stats.ncx2``), with the bins and
    so the dof pooled at each candidate n. n is found by doubling, then bisection; the
    power is not exactly monotone in n (bins unpool as n grows), and the n returned is
    checked to reach it.

    Args:
        probs: float ``[V]``, the setting's reference law.
        tv: Total-variation distance to detect, as :func:`least_favourable` takes it.
        alpha: The level the setting is tested at (alpha / m inside a Holm family of m).
        power: The power asked for, in (0, 1); 0.9 by default (the conformance design's stated power).

    Returns:
        A :class:`PowerPlan`.

    Raises:
        ValueError: as :func:`least_favourable`; ``alpha`` or ``power`` outside (0, 1);
            more than :data:`MAX_SAMPLES` draws needed.

    Examples:
        Two equal tokens, mass 0.1 moved: lambda = n * 0.04. The first-order law would ask
        lambda >= 10.5 (n = 263) for 90 % power at the 5 % level; fitted to the exact
        moments it asks n = 258:

        >>> plan = samples_for_power([0.5, 0.5], 0.1, 0.05)
        >>> plan.n, plan.dof, round(plan.noncentrality, 2), round(plan.achieved, 3)
        (258, 1, 10.32, 0.901)
    """
    p = _as_law(probs)
    truth = least_favourable(p, tv)
    _check_alpha(alpha)
    _check_alpha(power, "power")

    def enough(n: int) -> bool:
        return _power_parts(p, truth, n, alpha)[0] >= power

    low, high = 0, 8  # low: not enough (0 draws test nothing)
    while not enough(high):
        if high > MAX_SAMPLES:
            raise ValueError(f"tv={tv!r} at alpha={alpha!r} needs more than {MAX_SAMPLES} draws for power {power!r}")
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    achieved, dof, lam = _power_parts(p, truth, high, alpha)
    return PowerPlan(high, float(tv), float(alpha), float(power), achieved, dof, lam)


def holm_family(p_values: Mapping[str, float], alpha: float) -> FamilyTest:
    """Holm's correction across the settings of one run (:func:`lab.analysis.hypotheses.holm`).

    Args:
        p_values: Each setting's name and its law test's p-value, in [0, 1], none NaN.
        alpha: The family's level, in (0, 1).

    Returns:
        A :class:`FamilyTest`; a setting is rejected when its adjusted p-value is <= alpha.

    Raises:
        ValueError: no settings; a p-value NaN or outside [0, 1]; alpha outside (0, 1).

    Examples:
        >>> family = holm_family({"top-k": 0.004, "top-p": 0.02, "min-p": 0.5}, 0.05)
        >>> [round(p, 3) for p in family.adjusted], family.rejected
        ([0.012, 0.04, 0.5], ('top-k', 'top-p'))
    """
    from lab.analysis.hypotheses import holm

    _check_alpha(alpha)
    names = tuple(p_values)
    values = tuple(float(p_values[name]) for name in names)
    if not names:
        raise ValueError("p_values must name at least one setting")
    if any(math.isnan(v) for v in values):
        raise ValueError(f"p_values hold NaN: {dict(zip(names, values))}")
    return FamilyTest(names, values, tuple(holm(values)), float(alpha))


def greedy_check(ref_logits_per_step, engine_tokens, tie_tol: float) -> GreedyCheck:
    """Greedy equality with the reference, except where the reference itself nearly ties.

    The reference's logits must be teacher-forced on the ENGINE's tokens (row t given the
    prompt plus ``engine_tokens[:t]``), so a divergence at an excused near-tie does not
    make the later rows incomparable.

    Args:
        ref_logits_per_step: float ``[T, V]`` reference logits (T = 1 raw logits, not
            probabilities); ``-inf`` marks a masked token.
        engine_tokens: int ``[T]``, the engine's greedy tokens.
        tie_tol: Nats, >= 0: a token whose logit is within ``tie_tol`` of the largest (<=)
            is excused.

    Returns:
        A :class:`GreedyCheck`. Inputs are not modified.

    Raises:
        ValueError: shapes that do not match, T = 0, NaN or +inf logits, token ids outside
            [0, V), or ``tie_tol`` negative or not finite.

    Examples:
        Step 1 is a near-tie (gap 0.05 <= 0.1) and the engine took the other token; step 2 is not:

        >>> logits = [[2.0, 0.0, 0.0], [1.0, 1.05, 0.0], [3.0, 0.0, 1.0]]
        >>> check = greedy_check(logits, [0, 0, 2], tie_tol=0.1)
        >>> check.excused, check.first_mismatch, check.mismatch_gap
        ((1,), 2, 2.0)
    """
    x = np.asarray(ref_logits_per_step, dtype=np.float64)
    tokens = np.asarray(engine_tokens)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"ref_logits_per_step must be [T, V] with T, V >= 1, got shape {x.shape}")
    if tokens.shape != (x.shape[0],) or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"engine_tokens must be integer [T] = ({x.shape[0]},), got shape {tokens.shape} "
                         f"dtype {tokens.dtype}")
    if (tokens < 0).any() or (tokens >= x.shape[1]).any():
        raise ValueError(f"engine_tokens hold ids outside [0, {x.shape[1]}): {tokens.tolist()}")
    if np.isnan(x).any() or np.isposinf(x).any():
        raise ValueError("ref_logits_per_step must hold no NaN and no +inf")
    if isinstance(tie_tol, bool) or not isinstance(tie_tol, (int, float)) or not (math.isfinite(tie_tol) and tie_tol >= 0):
        raise ValueError(f"tie_tol={tie_tol!r} must be a finite number of nats >= 0")
    top = x.max(axis=1)
    gap = top - x[np.arange(x.shape[0]), tokens]  # >= 0; inf at a masked token
    off = tokens != x.argmax(axis=1)
    excused = np.flatnonzero(off & (gap <= tie_tol))
    bad = np.flatnonzero(off & (gap > tie_tol))
    first = int(bad[0]) if bad.size else None
    return GreedyCheck(int(x.shape[0]), float(tie_tol), tuple(int(i) for i in excused), int(bad.size), first,
                       None if first is None else float(gap[first]))


def logprob_check(ref_logprobs, engine_logprobs, tol: float) -> LogprobCheck:
    """The engine's reported log-probabilities against the reference's, within ``tol`` nats.

    Both must be the same quantity (say, the chosen token's log-softmax of the raw logits
    at each step, natural log) at the same positions.

    Args:
        ref_logprobs: float ``[...]`` reference log-probabilities, nats, finite.
        engine_logprobs: float, the same shape, nats, finite.
        tol: Nats, finite and >= 0.

    Returns:
        A :class:`LogprobCheck`; passed when the largest absolute difference is <= ``tol``.

    Raises:
        ValueError: shapes differ, no values, a value not finite, or ``tol`` negative or not finite.

    Examples:
        >>> check = logprob_check([-0.1, -2.3], [-0.1, -2.25], tol=0.1)
        >>> round(check.max_abs_diff, 3), check.worst, check.passed
        (0.05, (1,), True)
    """
    ref = np.asarray(ref_logprobs, dtype=np.float64)
    eng = np.asarray(engine_logprobs, dtype=np.float64)
    if ref.shape != eng.shape or ref.size == 0:
        raise ValueError(f"ref_logprobs shape {ref.shape} and engine_logprobs shape {eng.shape} must match, non-empty")
    for name, values in (("ref_logprobs", ref), ("engine_logprobs", eng)):
        if not np.isfinite(values).all():
            raise ValueError(f"{name} must be finite (nats)")
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not (math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol={tol!r} must be a finite number of nats >= 0")
    diff = np.abs(eng - ref)
    worst = np.unravel_index(int(np.argmax(diff)), diff.shape)
    return LogprobCheck(int(diff.size), float(tol), float(diff[worst]), tuple(int(i) for i in worst))
