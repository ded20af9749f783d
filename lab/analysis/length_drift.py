"""Context health's drift with prompt length within each variant and each category of a study's prompts.

H1 and H1c read context health against entropy with prompt length partialled out. That adjustment
removes one straight (rank) trend across all prompts; it cannot remove a drift that differs between
kinds of prompt, such as health rising with length among clean prompts and falling among twins. A
measure read in the study must therefore also hold still within each variant (clean, poisoned,
neutral) and each category, as it must on independent text (:mod:`lab.health.validation`, the same
bar of |Spearman rho| <= :data:`DRIFT_BAR`). A category's group is its clean prompts: its twins are
longer by construction and carry their own health, so a category pooled over variants would show the
variants' difference, which the per-variant groups already read.

The rule (pure numbers, no model): per group with at least :data:`MIN_GROUP` prompts, Spearman's rho
of health on length with a Fisher-z interval (standard error sqrt(1.06 / (n - 3)), Fieller, Hartley
and Pearson 1957) at level 1 - :data:`FAMILY_ALPHA` / g over the g judged groups (Bonferroni). A
group *drifts* when its whole interval lies beyond the bar, so a measure whose true drift is at the
bar in every group is called drifting somewhere in at most :data:`FAMILY_ALPHA` / 2 of studies
(size and power: ``tests/statistical/test_length_drift.py``). Smaller groups are shown, not judged:
their interval spans most of [-1, 1].

A drifting group makes H1 and H1c untestable on that study (:func:`lab.analysis.study.analyze`), as a
failed validation on independent text does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats

DRIFT_BAR = 0.2  # as lab.health.validation: twice Cohen's "small" correlation
MIN_GROUP = 10  # below this a group is shown, not judged
FAMILY_ALPHA = 0.05
SPEARMAN_VAR = 1.06  # Fieller, Hartley & Pearson (1957): var(atanh(rho_s)) ~ 1.06 / (n - 3)


@dataclass(frozen=True)
class DriftRow:
    """One group's drift: Spearman rho of health on length and its interval.

    Attributes:
        kind: ``"variant"`` or ``"category"`` (its clean prompts).
        group: The variant or category name.
        n: Prompts with finite health and length.
        rho: Spearman rho (NaN when undefined: constant health or length, or n < 3).
        ci_low, ci_high: The Fisher-z interval at the table's level (NaN when not judged).
        judged: n >= :data:`MIN_GROUP` and rho finite.
        drifts: Judged and the whole interval beyond +-:data:`DRIFT_BAR`.
    """

    kind: str
    group: str
    n: int
    rho: float
    ci_low: float
    ci_high: float
    judged: bool
    drifts: bool


@dataclass(frozen=True)
class LengthDrift:
    """Every group's :class:`DriftRow`, the intervals' level and the bar."""

    rows: tuple[DriftRow, ...]
    level: float
    bar: float = DRIFT_BAR

    def drifting(self) -> list[DriftRow]:
        return [r for r in self.rows if r.drifts]

    def reason(self) -> str | None:
        """Why H1/H1c cannot be read on this study (None when no judged group drifts)."""
        bad = self.drifting()
        if not bad:
            return None
        parts = ", ".join(f"{r.kind} {r.group} rho {r.rho:+.2f} (n {r.n})" for r in bad)
        return f"context health drifts with prompt length within {parts}: beyond |rho| {self.bar:g} at {self.level:.1%}"


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(stats.spearmanr(x, y)[0])


def length_drift(health: Sequence[float], length: Sequence[float], variants: Sequence[str],
                 categories: Sequence[str], *, bar: float = DRIFT_BAR, min_group: int = MIN_GROUP,
                 alpha: float = FAMILY_ALPHA) -> LengthDrift:
    """Health's drift with length within each variant and each category.

    Args:
        health: Context health per prompt (0..10; NaN rows are left out).
        length: Prompt length per prompt (tokens; any monotone count gives the same ranks).
        variants: ``"clean"``, ``"poisoned"`` or ``"neutral"`` per prompt.
        categories: Category per prompt (a category's group holds its clean prompts).
        bar: The largest |rho| a measure may hold.
        min_group: Smallest group that is judged.
        alpha: Family-wise level over the judged groups.

    Returns:
        A :class:`LengthDrift`, variants first then categories, each in first-seen order.

    Raises:
        ValueError: the sequences differ in length, or ``bar`` is not in (0, 1).
    """
    if not len(health) == len(length) == len(variants) == len(categories):
        raise ValueError("health, length, variants and categories must have one entry per prompt")
    if not 0 < bar < 1:
        raise ValueError(f"bar must be in (0, 1), got {bar}")
    h, n_tok = np.asarray(health, dtype=float), np.asarray(length, dtype=float)
    ok = np.isfinite(h) & np.isfinite(n_tok)
    clean = np.array([v == "clean" for v in variants])
    groups = [("variant", v, np.array([x == v for x in variants]) & ok) for v in dict.fromkeys(variants)]
    groups += [("category", c, np.array([x == c for x in categories]) & ok & clean) for c in dict.fromkeys(categories)]
    rhos = [(_spearman(h[m], n_tok[m]), int(m.sum())) for _, _, m in groups]
    g = sum(n >= min_group and math.isfinite(r) for r, n in rhos)
    level = 1 - alpha / max(g, 1)
    zc = float(stats.norm.ppf(1 - (1 - level) / 2))
    rows = []
    for (kind, name, _), (rho, n) in zip(groups, rhos):
        judged = n >= min_group and math.isfinite(rho)
        if judged:
            z, se = math.atanh(max(min(rho, 1 - 1e-12), -1 + 1e-12)), math.sqrt(SPEARMAN_VAR / (n - 3))
            lo, hi = math.tanh(z - zc * se), math.tanh(z + zc * se)
        else:
            lo = hi = math.nan
        rows.append(DriftRow(kind, str(name), n, rho, lo, hi, judged, judged and (lo > bar or hi < -bar)))
    return LengthDrift(tuple(rows), level, bar)
