"""H4a and H4b per distractor text, and pooled with the distractor as a random effect (a secondary test).

Pure functions on numbers (no model, no files, no Rich). Each poisoned twin carries one distractor
text (its ``distractor`` label, :class:`lab.prompts.StudyPrompt`). Pairs that share a text share its
pull on health and entropy, so they are not independent, and the few texts of a prompt set are a
sample of the texts a user meets, not all of them. The study's H4a / H4b
(:func:`lab.analysis.hypotheses.paired_test`, Wilcoxon over pairs) take the texts as fixed; this
module reports beside them, for the difference poisoned - neutral of each pair:

* per distractor text: its pairs, their mean difference and its SD;
* pooled, the distractor a random effect: a one-sample t test of the per-distractor mean differences
  against 0, t on G - 1 df for G texts, two-sided, with its :data:`~lab.analysis.effects.CI_LEVEL`
  interval; each text weighs the same. This is the test of :mod:`lab.analysis.intervention` (Donald &
  Lang 2007: with few clusters, aggregate to the cluster and use t on G - 1 df): exact for normal
  differences with a normal distractor effect in a balanced design, whatever the share of variance
  between texts, where a t over pairs rejects more often than its nominal rate as soon as that share
  is above 0 (``tests/statistical/test_distractor_random_effect.py``).

The pooled test is secondary: it is outside the study's Holm family and changes no verdict. With
fewer than :data:`~lab.analysis.intervention.MIN_DISTRACTORS` texts, or all their means equal, it is
not tested and its note says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

from lab.analysis.effects import CI_LEVEL, cluster_codes, cluster_means, one_way_icc
from lab.analysis.intervention import MIN_DISTRACTORS

# The study's H4 tests: the per-pair measure and the sign of poisoned - neutral each predicts
# (as lab.analysis.study passes them to paired_test).
H4_MEASURES = {"H4a": ("context_health", -1), "H4b": ("mean_entropy_bits", 1)}


@dataclass(frozen=True)
class DistractorRow:
    """One distractor text's pairs: their count, mean and SD (ddof 1; NaN for one pair) of poisoned - neutral."""

    distractor: str
    n_pairs: int
    mean_difference: float
    sd_difference: float


@dataclass(frozen=True)
class PooledTest:
    """The one-sample t over the per-distractor mean differences (distractor a random effect).

    Attributes:
        estimate: Mean of the per-distractor means (NaN when not tested).
        ci_low, ci_high, ci_level: Its two-sided t interval on ``df`` df.
        t, df, p_value: The t statistic, G - 1, and the two-sided p (NaN when not tested).
        n_distractors, n_pairs: Texts (G) and pairs used.
        icc: Share of the pair differences' variance between texts (one-way ANOVA estimate,
            :func:`lab.analysis.effects.one_way_icc`; NaN under 2 texts or one pair each).
        note: Why the test did not run, or empty.
    """

    estimate: float
    ci_low: float
    ci_high: float
    ci_level: float
    t: float
    df: int
    p_value: float
    n_distractors: int
    n_pairs: int
    icc: float
    note: str = ""


@dataclass(frozen=True)
class DistractorTable:
    """One H4 test's differences per distractor text and pooled.

    Attributes:
        name: ``"H4a"`` or ``"H4b"``.
        measure: The per-prompt column differenced (``context_health``, ``mean_entropy_bits``).
        predicted_sign: The sign of poisoned - neutral the hypothesis predicts.
        rows: One :class:`DistractorRow` per text, in order of first appearance.
        pooled: The random-effect test (:class:`PooledTest`).
        n_unlabelled: Pairs with both values whose poisoned twin names no text (left out).
    """

    name: str
    measure: str
    predicted_sign: int
    rows: tuple[DistractorRow, ...]
    pooled: PooledTest
    n_unlabelled: int = 0


def _untested(n_distractors: int, n_pairs: int, icc: float, level: float, note: str) -> PooledTest:
    return PooledTest(math.nan, math.nan, math.nan, level, math.nan, max(n_distractors - 1, 0), math.nan,
                      n_distractors, n_pairs, icc, note)


def distractor_table(differences: Sequence[float], labels: Sequence[str], *, name: str, measure: str,
                     predicted_sign: int, level: float = CI_LEVEL, n_unlabelled: int = 0) -> DistractorTable:
    """Per-distractor rows and the pooled random-effect t of paired differences.

    Args:
        differences: Poisoned - neutral, one finite value per pair.
        labels: The distractor text of each pair's poisoned twin (non-empty strings).
        name, measure: The hypothesis (``"H4a"``) and the column differenced, for the report.
        predicted_sign: +1 or -1, the sign the hypothesis predicts (reported, not used by the test).
        level: The pooled interval's confidence level, in (0, 1).
        n_unlabelled: Pairs left out for want of a label (reported).

    Returns:
        A :class:`DistractorTable`; its pooled test is two-sided, t on G - 1 df.

    Raises:
        ValueError: lengths differ, a difference is not finite, a label is not a non-empty string,
            ``predicted_sign`` is not +1 / -1, or ``level`` is outside (0, 1).
    """
    d = np.asarray(differences, dtype=float)
    if d.ndim != 1 or d.size != len(labels):
        raise ValueError(f"differences and labels must be 1-D of equal length, got {d.shape} and {len(labels)}")
    if not np.isfinite(d).all():
        raise ValueError(f"differences must be finite, got {d[~np.isfinite(d)][:3].tolist()}")
    bad = [x for x in labels if not (isinstance(x, str) and x)]
    if bad:
        raise ValueError(f"labels must be non-empty strings, got {bad[0]!r}")
    if predicted_sign not in (1, -1):
        raise ValueError(f"predicted_sign={predicted_sign!r} must be +1 or -1")
    if not 0 < level < 1:
        raise ValueError(f"level={level!r} must be in (0, 1)")
    if d.size == 0:
        pooled = _untested(0, 0, math.nan, level, "no pair names its distractor text")
        return DistractorTable(name, measure, predicted_sign, (), pooled, n_unlabelled)
    codes, texts = cluster_codes(list(labels))
    means = cluster_means(d, codes)
    rows = tuple(DistractorRow(text, int((codes == i).sum()), float(means[i]),
                               float(d[codes == i].std(ddof=1)) if (codes == i).sum() >= 2 else math.nan)
                 for i, text in enumerate(texts))
    g, icc = len(texts), one_way_icc(d, codes)
    if g < MIN_DISTRACTORS:
        pooled = _untested(g, int(d.size), icc, level,
                           f"{g} distractor text(s): the random-effect test needs {MIN_DISTRACTORS}")
    elif np.ptp(means) == 0:
        pooled = _untested(g, int(d.size), icc, level, "every distractor mean is equal: no variance to test on")
    else:
        res = stats.ttest_1samp(means, 0.0)
        ci = res.confidence_interval(level)
        pooled = PooledTest(float(means.mean()), float(ci.low), float(ci.high), level, float(res.statistic),
                            g - 1, float(res.pvalue), g, int(d.size), icc)
    return DistractorTable(name, measure, predicted_sign, rows, pooled, n_unlabelled)


def _finite(*vals: Any) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in vals)


def h4_distractor_tables(pairs: Sequence[Mapping[str, Any]], distractors: Mapping[str, str],
                         *, level: float = CI_LEVEL) -> dict[str, DistractorTable]:
    """H4a's and H4b's :class:`DistractorTable` from the study's twin triples.

    Args:
        pairs: :func:`lab.analysis.study.twin_triples` (keys ``poisoned`` and ``{measure}_{side}``);
            pairs without a finite poisoned and neutral value of a measure are left out of its table.
        distractors: Poisoned prompt id -> its distractor label; a pair whose id is absent is
            counted in ``n_unlabelled``.
        level: The pooled intervals' confidence level.

    Returns:
        ``{"H4a": ..., "H4b": ...}``.

    Raises:
        ValueError: a label in ``distractors`` is not a non-empty string (names the prompt id).
    """
    for pid, text in distractors.items():
        if not (isinstance(text, str) and text):
            raise ValueError(f"distractor of prompt {pid!r} must be a non-empty string, got {text!r}")
    out = {}
    for name, (measure, sign) in H4_MEASURES.items():
        have = [p for p in pairs if _finite(p.get(f"{measure}_neutral"), p.get(f"{measure}_poisoned"))]
        labelled = [p for p in have if p["poisoned"] in distractors]
        out[name] = distractor_table([p[f"{measure}_poisoned"] - p[f"{measure}_neutral"] for p in labelled],
                                     [distractors[p["poisoned"]] for p in labelled], name=name, measure=measure,
                                     predicted_sign=sign, level=level, n_unlabelled=len(have) - len(labelled))
    return out
