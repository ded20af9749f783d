"""The study's analysis: H1-H4 on the per-prompt and per-token tables, judged together."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from lab.analysis.effects import AcceptanceBin, LinearFit, binned_acceptance, linear_fit_band
from lab.analysis.hypotheses import (N_RESAMPLES, TestResult, acceptance_entropy_test, category_test,
                                     correlation_test, judge, paired_test)

@dataclass
class StudyAnalysis:
    """Everything computed from the per-prompt and per-token tables.

    Attributes:
        tests: H1, H2, H3, H4a, H4b, judged (Holm across the five).
        acceptance_bins: :func:`binned_acceptance` of tested draft tokens.
        health_entropy_fit: :func:`linear_fit_band` of mean entropy on health (all prompts).
        categories: Per category: n, median alpha, median mean-entropy (clean prompts).
        pairs: Twin pairs ``{"clean", "poisoned", health/entropy/alpha of each}``.
    """

    tests: list[TestResult]
    acceptance_bins: list[AcceptanceBin]
    health_entropy_fit: LinearFit | None
    categories: dict[str, dict[str, float]]
    pairs: list[dict[str, Any]]

    def verdicts(self) -> dict[str, str]:
        return {t.name: t.verdict for t in self.tests}


def _finite(*vals: Any) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in vals)


def analyze(per_prompt: Sequence[Mapping[str, Any]], per_token: Sequence[Mapping[str, Any]], *, seed: int = 0,
            n_resamples: int = N_RESAMPLES, n_bins: int = 8) -> StudyAnalysis:
    """Run H1-H4 on the study's tables and judge them together.

    Args:
        per_prompt: One row per prompt with ``id``, ``category``, ``variant``,
            ``twin_of``, ``context_health``, ``mean_entropy_bits``, ``alpha``.
            Rows whose needed numbers are missing or non-finite are left out of
            that test only.
        per_token: One row per drafted token with ``prompt_id``,
            ``draft_entropy_bits``, ``accepted``, ``tested``; only tested tokens count.
        seed: Seed for every bootstrap.
        n_resamples: Bootstrap resamples.
        n_bins: Bins of the acceptance curve.

    Returns:
        A :class:`StudyAnalysis`.
    """
    rows = list(per_prompt)
    h1_rows = [r for r in rows if _finite(r.get("context_health"), r.get("mean_entropy_bits"))]
    h1 = correlation_test([r["context_health"] for r in h1_rows], [r["mean_entropy_bits"] for r in h1_rows],
                          name="H1", predicted_sign=-1, seed=seed, n_resamples=n_resamples)

    toks = [t for t in per_token if t.get("tested") and _finite(t.get("draft_entropy_bits"))]
    h2 = acceptance_entropy_test([t["draft_entropy_bits"] for t in toks], [bool(t["accepted"]) for t in toks],
                                 [t["prompt_id"] for t in toks], name="H2", seed=seed, n_resamples=n_resamples)

    clean = [r for r in rows if r.get("variant", "clean") == "clean" and _finite(r.get("alpha"))]
    h3 = category_test([r["alpha"] for r in clean], [r["category"] for r in clean], name="H3", seed=seed,
                       n_resamples=n_resamples)

    by_id = {r["id"]: r for r in rows}
    pairs = []
    for r in rows:
        c = by_id.get(r.get("twin_of")) if r.get("twin_of") else None
        if c is None:
            continue
        pairs.append({"clean": c["id"], "poisoned": r["id"], "category": r["category"],
                      **{f"{k}_{side}": src.get(k) for k in ("context_health", "mean_entropy_bits", "alpha")
                         for side, src in (("clean", c), ("poisoned", r))}})
    hp = [p for p in pairs if _finite(p["context_health_clean"], p["context_health_poisoned"])]
    ep = [p for p in pairs if _finite(p["mean_entropy_bits_clean"], p["mean_entropy_bits_poisoned"])]
    h4a = paired_test([p["context_health_clean"] for p in hp], [p["context_health_poisoned"] for p in hp],
                      name="H4a", predicted_sign=-1, seed=seed, n_resamples=n_resamples)
    h4b = paired_test([p["mean_entropy_bits_clean"] for p in ep], [p["mean_entropy_bits_poisoned"] for p in ep],
                      name="H4b", predicted_sign=1, seed=seed, n_resamples=n_resamples)

    categories: dict[str, dict[str, float]] = {}
    for cat in dict.fromkeys(r["category"] for r in rows):
        cr = [r for r in rows if r["category"] == cat and r.get("variant", "clean") == "clean"]
        alphas = [r["alpha"] for r in cr if _finite(r.get("alpha"))]
        ents = [r["mean_entropy_bits"] for r in cr if _finite(r.get("mean_entropy_bits"))]
        categories[cat] = {"n": len(cr), "median_alpha": float(np.median(alphas)) if alphas else math.nan,
                           "median_mean_entropy_bits": float(np.median(ents)) if ents else math.nan}

    return StudyAnalysis(
        tests=judge([h1, h2, h3, h4a, h4b]),
        acceptance_bins=binned_acceptance([t["draft_entropy_bits"] for t in toks],
                                          [bool(t["accepted"]) for t in toks], n_bins=n_bins),
        health_entropy_fit=linear_fit_band([r["context_health"] for r in h1_rows],
                                           [r["mean_entropy_bits"] for r in h1_rows]),
        categories=categories,
        pairs=pairs,
    )
