"""Does a context measure read the context? Paired validation on documentation nobody here wrote.

A validation item is a documented function F: one question about F, asked (i) after F's own
docstring (the relevant context) and (ii) after another function's docstring of the same
length within 5 % (the irrelevant one). Relevance comes from the documentation's structure,
not from anyone here. A measure that reads the context ranks the relevant prompt of a pair
above the irrelevant one (after orienting it by the direction chosen on the selection set).

Figures (:func:`validity_figures`), each over the n pairs:

* paired AUROC: the share of pairs whose relevant prompt scores above the irrelevant one
  (ties count 1/2), with a percentile bootstrap interval over pairs (functions);
* the same for a **length-only** score (the context's token count) and for a **placebo**
  (the measure with each pair's labels swapped by a fair coin, fixed seed): both must stay
  near 0.5, else the check reads length or the pairing, not relevance ("The Illusion of
  Progress", 2025: length heuristics rival published detectors);
* Spearman's rho of the measure with the context's token count over the relevant prompts
  (a measure that reads length drifts with it);
* the share of prompts at either end of the measure's scale.

The bar (:data:`BAR`), fixed before the first validation run and stated in ``docs/design.md``:
AUROC >= 0.75, length-only and placebo AUROC within 0.1 of 0.5, |rho| <= 0.2, end share <= 5 %.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from scipy import stats

MIN_AUROC = 0.75
NEAR_HALF = 0.10
MAX_LENGTH_RHO = 0.20
MAX_END_SHARE = 0.05
N_BOOT = 2000
BAR = (f"paired AUROC >= {MIN_AUROC}; length-only and shuffled-label placebo AUROC within {NEAR_HALF} of 0.5; "
       f"|Spearman rho(measure, context tokens)| <= {MAX_LENGTH_RHO} on the relevant prompts; "
       f"at most {MAX_END_SHARE:.0%} of prompts at either end of the scale")


def paired_auroc(relevant: Sequence[float], irrelevant: Sequence[float]) -> float:
    """Share of pairs whose relevant score is above the irrelevant one, ties counting 1/2.

    Args:
        relevant, irrelevant: One finite score per pair, same length n >= 1.

    Returns:
        The paired AUROC in [0, 1].

    Raises:
        ValueError: lengths differ, no pair, or a score is not finite.

    Examples:
        >>> paired_auroc([2.0, 1.0, 3.0], [1.0, 1.0, 4.0])
        0.5
    """
    r, i = np.asarray(relevant, dtype=float), np.asarray(irrelevant, dtype=float)
    if r.shape != i.shape or r.ndim != 1 or r.size == 0:
        raise ValueError(f"need two equal non-empty score lists, got {r.size} and {i.size}")
    if not (np.isfinite(r).all() and np.isfinite(i).all()):
        raise ValueError("every score must be finite")
    return float(np.mean((r > i) + 0.5 * (r == i)))


def _boot_interval(wins: np.ndarray, seed: int, n_boot: int) -> tuple[float, float]:
    """95 % percentile interval of the mean of ``wins`` (per-pair 1, 1/2, 0) over resampled pairs."""
    gen = np.random.default_rng(seed)
    means = wins[gen.integers(0, wins.size, size=(n_boot, wins.size))].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def at_ends(values: Sequence[float], low: float, high: float, tol: float = 1e-9) -> float:
    """Share of ``values`` within ``tol`` of ``low`` or ``high`` (``high`` may be ``inf``: never reached)."""
    v = np.asarray(values, dtype=float)
    return float(np.mean((np.abs(v - low) <= tol) | (np.abs(v - high) <= tol))) if v.size else math.nan


@dataclass(frozen=True)
class ValidityFigures:
    """One measure's validation figures on one model (:func:`validity_figures`).

    Attributes:
        measure: The measure's name; ``direction`` +1 when higher means relevant, -1 otherwise.
        n_pairs: Pairs scored.
        auroc, ci_low, ci_high: Paired AUROC (oriented) and its 95 % bootstrap interval over pairs.
        length_auroc: Paired AUROC of the context's token count (the length-only baseline).
        placebo_auroc: Paired AUROC with each pair's labels swapped by a seeded fair coin.
        length_rho: Spearman rho of the measure with context tokens over the relevant prompts.
        end_share: Share of all 2n prompts at either end of the measure's scale.
        failed: The bars it misses (empty = passes :data:`BAR`).
    """

    measure: str
    direction: int
    n_pairs: int
    auroc: float
    ci_low: float
    ci_high: float
    length_auroc: float
    placebo_auroc: float
    length_rho: float
    end_share: float
    failed: tuple[str, ...] = field(default=())

    @property
    def passes(self) -> bool:
        """Whether every bar of :data:`BAR` holds."""
        return not self.failed


def validity_figures(measure: str, relevant: Sequence[float], irrelevant: Sequence[float],
                     n_relevant: Sequence[int], n_irrelevant: Sequence[int], *, direction: int = 1,
                     scale: tuple[float, float] = (0.0, math.inf), seed: int = 0,
                     n_boot: int = N_BOOT) -> ValidityFigures:
    """A measure's figures against :data:`BAR` on n pairs.

    Args:
        measure: Its name (for the record).
        relevant, irrelevant: Its value on each pair's relevant and irrelevant prompt (finite).
        n_relevant, n_irrelevant: Each context's length in tokens.
        direction: +1 if higher means relevant, -1 if lower does (chosen on the selection set).
        scale: The measure's range; values at either end count toward ``end_share``.
        seed: Seed of the bootstrap and of the placebo's coin.
        n_boot: Bootstrap resamples.

    Returns:
        :class:`ValidityFigures`.

    Raises:
        ValueError: unequal lengths, fewer than 3 pairs, a non-finite value or a direction not +-1.
    """
    if direction not in (1, -1):
        raise ValueError(f"direction={direction!r} must be 1 or -1")
    n = len(relevant)
    if n < 3 or not len(irrelevant) == len(n_relevant) == len(n_irrelevant) == n:
        raise ValueError(f"need at least 3 pairs with every list of one length, got {n}, {len(irrelevant)}, "
                         f"{len(n_relevant)}, {len(n_irrelevant)}")
    r, i = direction * np.asarray(relevant, dtype=float), direction * np.asarray(irrelevant, dtype=float)
    auroc = paired_auroc(r, i)
    wins = (r > i) + 0.5 * (r == i)
    low, high = _boot_interval(wins, seed, n_boot)
    length_auroc = paired_auroc(n_relevant, n_irrelevant)
    swap = np.random.default_rng(seed + 1).random(n) < 0.5
    placebo = paired_auroc(np.where(swap, i, r), np.where(swap, r, i))
    rho = float(stats.spearmanr(relevant, n_relevant).statistic) if np.ptp(relevant) > 0 else math.nan
    ends = at_ends(list(relevant) + list(irrelevant), *scale)
    failed = tuple(name for name, ok in (
        (f"AUROC {auroc:.2f} < {MIN_AUROC}", auroc >= MIN_AUROC),
        (f"length-only AUROC {length_auroc:.2f} not within {NEAR_HALF} of 0.5", abs(length_auroc - 0.5) <= NEAR_HALF),
        (f"placebo AUROC {placebo:.2f} not within {NEAR_HALF} of 0.5", abs(placebo - 0.5) <= NEAR_HALF),
        (f"|rho(length)| {abs(rho):.2f} > {MAX_LENGTH_RHO}", math.isfinite(rho) and abs(rho) <= MAX_LENGTH_RHO),
        (f"{ends:.0%} at the scale's ends > {MAX_END_SHARE:.0%}", ends <= MAX_END_SHARE)) if not ok)
    return ValidityFigures(measure=measure, direction=direction, n_pairs=n, auroc=auroc, ci_low=low, ci_high=high,
                           length_auroc=length_auroc, placebo_auroc=placebo, length_rho=rho, end_share=ends,
                           failed=failed)


# The candidates the rule chooses among: (measure, direction, the measure's scale). A control (a measure of
# the context's length alone) goes through the same rule and must never be chosen.
CANDIDATES = (("lookback", 1, (0.0, 1.0)), ("lookback", -1, (0.0, 1.0)),
              ("contrast_bits", 1, (0.0, math.inf)), ("contrast_bits", -1, (0.0, math.inf)))
CONTROLS = (("n_context", 1, (0.0, math.inf)), ("n_context", -1, (0.0, math.inf)))
TODAY = (("health", 1, (0.0, 10.0)), ("health", -1, (0.0, 10.0)))
RULE = ("on the selection set (lab/data/context_selection.jsonl, the lab's own), every candidate "
        "(lookback ratio and context contrast, each oriented both ways) and every control (the context's "
        "token count, both ways) is judged against the bar; the candidate with the largest paired AUROC among "
        "those that pass every bar is chosen; none passing chooses nothing; a control chosen is an error")


def choose(figures: Sequence[ValidityFigures]) -> ValidityFigures | None:
    """The rule (:data:`RULE`): the passing candidate of largest AUROC, or None; a control may never win.

    Raises:
        ValueError: the rule would choose a control (a measure of length alone).
    """
    passing = [f for f in figures if f.passes and (f.measure, f.direction) in {(m, d) for m, d, _ in
                                                                                CANDIDATES + CONTROLS}]
    if not passing:
        return None
    best = max(passing, key=lambda f: f.auroc)
    if best.measure in {m for m, _, _ in CONTROLS}:
        raise ValueError(f"the rule chooses the control {best.measure!r}: the check does not reject a measure of "
                         "length alone")
    return best


# --- the chosen measure: lookback heads, referenced to length ------------------------------------------------

HEADS = 8  # heads kept; fixed before validation (leave-one-out on the selection set: 0.80 at 8, 0.83 at 4, 0.82 at 16)
CHOSEN = "lookback_heads"
CHOSEN_RULE = (f"the Lookback-Lens ratio (Chuang et al. 2024) averaged over the {HEADS} (layer, head) pairs with the "
               "largest paired AUROC on the selection set (lab/data/context_selection.jsonl), minus the OLS line of "
               "that average on ln(context tokens) over the selection set's prompts (both contexts of every pair); "
               "higher = the decode reads the context more, for its length; fitted per model on the selection set "
               "only, then judged once on the validation set against the bar")


@dataclass(frozen=True)
class HeadReference:
    """A model's fitted lookback-heads measure (:data:`CHOSEN_RULE`).

    Attributes:
        heads: The kept ``(layer, head)`` pairs, best first.
        intercept, slope: The length line ``intercept + slope * ln(context tokens)`` subtracted.
        n_pairs: Selection pairs it was fitted on.
        loo_auroc: Its leave-one-out paired AUROC on those pairs (heads and line refitted without each pair).
    """

    heads: tuple[tuple[int, int], ...]
    intercept: float
    slope: float
    n_pairs: int
    loo_auroc: float

    def score(self, per_head: Sequence[Sequence[float]], n_context: int) -> float:
        """The measure of one prompt from its per-head lookback ratios ``[L][H]`` and its context length.

        Raises:
            ValueError: a kept head outside ``per_head``, or ``n_context < 1``.
        """
        if n_context < 1:
            raise ValueError(f"n_context={n_context} must be >= 1")
        try:
            mean = sum(per_head[layer][head] for layer, head in self.heads) / len(self.heads)
        except IndexError:
            raise ValueError(f"a kept head of {list(self.heads)} is outside the model's "
                             f"{len(per_head)} layers") from None
        return float(mean - (self.intercept + self.slope * math.log(n_context)))


def _fit(rel: np.ndarray, irr: np.ndarray, n_rel: np.ndarray, n_irr: np.ndarray, k: int) -> tuple[list, float, float]:
    """Heads (flat indices, best first) and the length line from ``[n, L*H]`` ratios and lengths."""
    auroc = ((rel > irr) + 0.5 * (rel == irr)).mean(0)
    top = list(np.argsort(-auroc, kind="stable")[:k])
    x = np.log(np.concatenate([n_rel, n_irr]).astype(float))
    y = np.concatenate([rel[:, top].mean(1), irr[:, top].mean(1)])
    slope, intercept = np.polyfit(x, y, 1) if np.ptp(x) > 0 else (0.0, float(y.mean()))
    return top, float(intercept), float(slope)


def fit_head_reference(relevant: np.ndarray, irrelevant: np.ndarray, n_relevant: Sequence[int],
                       n_irrelevant: Sequence[int], k: int = HEADS) -> HeadReference:
    """Fit :data:`CHOSEN_RULE` on selection pairs.

    Args:
        relevant, irrelevant: float ``[n, L, H]`` per-head lookback ratios of each pair's two prompts.
        n_relevant, n_irrelevant: Context tokens of each.
        k: Heads kept.

    Returns:
        :class:`HeadReference`, with its leave-one-out AUROC.

    Raises:
        ValueError: fewer than 3 pairs, shapes that differ, or k outside [1, L*H].
    """
    rel, irr = np.asarray(relevant, dtype=float), np.asarray(irrelevant, dtype=float)
    if rel.ndim != 3 or rel.shape != irr.shape or rel.shape[0] < 3:
        raise ValueError(f"need two [n >= 3, L, H] arrays of one shape, got {rel.shape} and {irr.shape}")
    n, n_layers, n_heads = rel.shape
    if not 1 <= k <= n_layers * n_heads:
        raise ValueError(f"k={k} must be in [1, {n_layers * n_heads}]")
    rel, irr = rel.reshape(n, -1), irr.reshape(n, -1)
    nr, ni = np.asarray(n_relevant, dtype=float), np.asarray(n_irrelevant, dtype=float)
    wins = []
    for i in range(n):  # leave-one-out: the pair scored by heads and a line fitted without it
        keep = np.arange(n) != i
        top, c, b = _fit(rel[keep], irr[keep], nr[keep], ni[keep], k)
        r, s = rel[i, top].mean() - b * math.log(nr[i]), irr[i, top].mean() - b * math.log(ni[i])
        wins.append((r > s) + 0.5 * (r == s))
    top, intercept, slope = _fit(rel, irr, nr, ni, k)
    return HeadReference(heads=tuple(divmod(int(t), n_heads) for t in top), intercept=intercept, slope=slope,
                         n_pairs=n, loo_auroc=float(np.mean(wins)))
