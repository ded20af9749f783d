"""The study's analysis: H1-H6c on the per-prompt and per-token tables, judged together, with power."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from lab.analysis.effects import AcceptanceBin, LinearFit, binned_acceptance, linear_fit_band
from lab.analysis.claims import H6_COLUMNS, category_share_test, content_vs_settings_test, subword_test
from lab.analysis.distractors import DistractorTable, h4_distractor_tables
from lab.analysis.length_drift import LengthDrift, length_drift
from lab.analysis.hypotheses import (ALPHA, N_RESAMPLES, TestResult, acceptance_entropy_test, category_test, judge,
                                     paired_test, partial_correlation_test, untested_result)
from lab.analysis.placebo import placebo_check
from lab.analysis.power import power_note, power_summary
from lab.verdicts import INCONCLUSIVE, UNTESTABLE_NOTE, settled

@dataclass
class StudyAnalysis:
    """Everything computed from the per-prompt and per-token tables.

    Attributes:
        tests: H1, H1c, H2, H3, H4a, H4b, H5, H6, H6c, judged (Holm across the family);
            each has ``details["power"]`` (:func:`lab.analysis.power.power_summary`); H1 and
            H1c have ``details["placebo"]`` (:func:`lab.analysis.placebo.placebo_check`).
        acceptance_bins: :func:`binned_acceptance` of tested draft tokens.
        health_entropy_fit: :func:`linear_fit_band` of mean entropy on H1's context measure (H1's prompts).
        categories: Per category: n, median alpha, median mean-entropy (clean prompts).
        pairs: Twin triples (:func:`twin_triples`): clean, poisoned, neutral and their numbers.
        distractor_tables: H4a's and H4b's poisoned - neutral per distractor text and pooled with the
            distractor as a random effect (:func:`lab.analysis.distractors.h4_distractor_tables`; secondary,
            outside the Holm family).
        length_drift: H1's context measure's drift with prompt length within each variant and category
            (:func:`lab.analysis.length_drift.length_drift`); a drifting group makes H1/H1c untestable.
    """

    tests: list[TestResult]
    acceptance_bins: list[AcceptanceBin]
    health_entropy_fit: LinearFit | None
    categories: dict[str, dict[str, float]]
    pairs: list[dict[str, Any]]
    distractor_tables: dict[str, DistractorTable] = field(default_factory=dict)
    length_drift: LengthDrift | None = None

    def verdicts(self) -> dict[str, str]:
        return {t.name: t.verdict for t in self.tests}

    @property
    def overall_alpha(self) -> float:
        """Acceptance rate over every binned draft token: accepted / tested, the bins' counts summed
        (NaN without bins)."""
        n = sum(b.n for b in self.acceptance_bins)
        return sum(b.k for b in self.acceptance_bins) / n if n else math.nan

    def test(self, name: str) -> TestResult:
        """The test called ``name`` (``"H1"`` ...).

        Raises:
            KeyError: no such test.
        """
        for t in self.tests:
            if t.name == name:
                return t
        raise KeyError(name)


def _finite(*vals: Any) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in vals)


def question_of(row: Mapping[str, Any]) -> str:
    """The question a prompt asks: its clean twin's id for a poisoned or neutral twin, else its own id.

    A twin triple shares its question, so it is one unit of inference (H1, H5).
    """
    return str(row.get("twin_of") or row["id"])


H1_MEASURE = "lookback_heads"  # H1's context measure (lab.health.context_validity.CHOSEN), NaN without a span


def _h1(rows: Sequence[Mapping[str, Any]], name: str, seed: int, n_resamples: int) -> TestResult:
    """H1 / H1c on ``rows``, with the placebo control in ``details["placebo"]``; a placebo that
    rejects makes the verdict inconclusive (``control_rejects``, as H5's control)."""
    x, y, n = ([r[k] for r in rows] for k in (H1_MEASURE, "mean_entropy_bits", "n_prompt_tokens"))
    q = [question_of(r) for r in rows]
    res = partial_correlation_test(x, y, n, name=name, predicted_sign=-1, seed=seed, n_resamples=n_resamples,
                                   clusters=q)
    placebo = placebo_check(x, y, n, q, seed=seed)
    res.details["placebo"] = placebo
    if placebo["passes"] is False:
        res.details["control_rejects"] = True
        res = replace(res, note="; ".join(part for part in (res.note, (
            f"placebo control FAILED: the context measure of length-matched prompts of other questions also "
            f"correlates with "
            f"entropy (partial rho {placebo['rho']:.3f}, p {placebo['p_value']:.3g}), so the test does not read "
            "this prompt's context here")) if part))
    return res


def _untestable_health(measured: TestResult, reason: str) -> TestResult:
    """H1 / H1c when the context measure fails on independent text: untested (out of the Holm family), saying why,
    the figures kept."""
    res = replace(untested_result(measured.name, measured.test, measured.effect_name, measured.n,
                                  measured.predicted_sign, measured.smallest_effect,
                                  f"{UNTESTABLE_NOTE}{reason}"), untestable=reason)
    res.details.update({k: v for k, v in measured.details.items() if k != "control_rejects"})
    res.details["as_measured"] = {"effect": measured.effect, "p_value": measured.p_value,
                                  "ci_low": measured.ci_low, "ci_high": measured.ci_high}
    return res


def analyze(per_prompt: Sequence[Mapping[str, Any]], per_token: Sequence[Mapping[str, Any]], *, seed: int = 0,
            n_resamples: int = N_RESAMPLES, n_bins: int = 8,
            decodes: Mapping[str, Mapping[str, Sequence[Any]]] | None = None,
            context_unmeasurable: str | None = None, distractors: Mapping[str, str] | None = None) -> StudyAnalysis:
    """Run H1-H6c on the study's tables and judge them together (one Holm family).

    The study passes its records as their columns (``lab.study.outcome.PromptRow.as_columns()``,
    ``DraftedToken.as_columns()``, ``TrackedDecode.as_columns()``): the analysis sits below the
    study and names no study type, and the mappings let it be tested on partial rows.

    Args:
        per_prompt: One row per prompt with ``id``, ``category``, ``variant``,
            ``twin_of``, ``n_prompt_tokens``, ``context_health``, ``mean_entropy_bits``, ``alpha``
            (keys as the ``per_prompt.csv`` columns). Rows whose needed numbers are missing or
            non-finite are left out of that test only.
        per_token: One row per drafted token with ``prompt_id``,
            ``draft_entropy_bits``, ``accepted``, ``tested``; only tested tokens count.
        seed: Seed for every bootstrap.
        n_resamples: Bootstrap resamples; 0 computes no intervals (simulations of the verdicts'
            size: without an interval "supported" reads the Holm p and the sign alone, so it
            can only be called more often).
        n_bins: Bins of the acceptance curve.
        decodes: Per prompt id, the tracked decode's ``entropy_bits`` and ``word``
            labels (H5); ``None`` or empty leaves H5 untested. H6 reads the
            ``alpha_t*`` columns of ``per_prompt`` (clean prompts of the subset).
        context_unmeasurable: Why H1's context measure (``lookback_heads``, a twin's added text as its
            span) does not read the context on this model
            (:meth:`lab.health.context_validity.ContextMeasure.unmeasurable`); H1 and H1c are then untested
            with that reason, their figures as measured kept in ``details["as_measured"]``, and out of the
            Holm family. Without it, a drift of the measure with length within a variant
            (:attr:`StudyAnalysis.length_drift`) untests them in the same way.
        distractors: Poisoned prompt id -> the label of its distractor text, for H4a's and H4b's
            per-distractor table and random-effect test (``distractor_tables``); ``None`` or empty
            leaves them untested.

    Returns:
        A :class:`StudyAnalysis`.
    """
    rows = list(per_prompt)
    h1_rows = [r for r in rows if _finite(r.get(H1_MEASURE), r.get("mean_entropy_bits"), r.get("n_prompt_tokens"))]
    h1 = _h1(h1_rows, "H1", seed, n_resamples)
    h1c = _h1([r for r in h1_rows if r.get("variant") == "neutral"], "H1c", seed, n_resamples)
    drift = length_drift([r[H1_MEASURE] for r in h1_rows], [r["n_prompt_tokens"] for r in h1_rows],
                         [r.get("variant", "clean") for r in h1_rows], [r["category"] for r in h1_rows])
    reason = context_unmeasurable or drift.reason()
    if reason:
        h1, h1c = (_untestable_health(t, reason) for t in (h1, h1c))

    toks = [t for t in per_token if t.get("tested") and _finite(t.get("draft_entropy_bits"))]
    h2 = acceptance_entropy_test([t["draft_entropy_bits"] for t in toks], [bool(t["accepted"]) for t in toks],
                                 [t["prompt_id"] for t in toks], name="H2", seed=seed, n_resamples=n_resamples)

    clean = [r for r in rows if r.get("variant", "clean") == "clean" and _finite(r.get("alpha"))]
    h3 = category_test([r["alpha"] for r in clean], [r["category"] for r in clean], name="H3", seed=seed,
                       n_resamples=n_resamples)

    pairs = twin_triples(rows)
    h4a = _twin_test(pairs, "context_health", name="H4a", predicted_sign=-1, seed=seed, n_resamples=n_resamples)
    h4b = _twin_test(pairs, "mean_entropy_bits", name="H4b", predicted_sign=1, seed=seed, n_resamples=n_resamples)

    h5 = subword_test(decodes or {}, name="H5", seed=seed, n_resamples=n_resamples,
                      questions={r["id"]: question_of(r) for r in rows})
    h6_rows = [r for r in rows if r.get("variant", "clean") == "clean" and any(_finite(r.get(c)) for c in H6_COLUMNS)]
    h6_alpha = {r["id"]: [r[c] if _finite(r.get(c)) else math.nan for c in H6_COLUMNS] for r in h6_rows}
    h6 = content_vs_settings_test(h6_alpha, name="H6")
    h6c = category_share_test(h6_alpha, {r["id"]: r["category"] for r in h6_rows}, name="H6c", seed=seed,
                              n_resamples=n_resamples)

    categories: dict[str, dict[str, float]] = {}
    for cat in dict.fromkeys(r["category"] for r in rows):
        cr = [r for r in rows if r["category"] == cat and r.get("variant", "clean") == "clean"]
        alphas = [r["alpha"] for r in cr if _finite(r.get("alpha"))]
        ents = [r["mean_entropy_bits"] for r in cr if _finite(r.get("mean_entropy_bits"))]
        categories[cat] = {"n": len(cr), "median_alpha": float(np.median(alphas)) if alphas else math.nan,
                           "median_mean_entropy_bits": float(np.median(ents)) if ents else math.nan}

    return StudyAnalysis(
        tests=judge_with_power([h1, h1c, h2, h3, h4a, h4b, h5, h6, h6c]),
        acceptance_bins=binned_acceptance([t["draft_entropy_bits"] for t in toks],
                                          [bool(t["accepted"]) for t in toks], n_bins=n_bins),
        health_entropy_fit=linear_fit_band([r[H1_MEASURE] for r in h1_rows],
                                           [r["mean_entropy_bits"] for r in h1_rows]),
        categories=categories,
        pairs=pairs,
        distractor_tables=h4_distractor_tables(pairs, distractors or {}),
        length_drift=drift,
    )


TWIN_KEYS = ("context_health", "mean_entropy_bits", "alpha", "n_prompt_tokens")


def twin_triples(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One dict per poisoned twin: its clean and (when present) neutral twins' ids and numbers.

    Keys: ``clean``, ``poisoned``, ``neutral`` (None without one), ``category``, and
    ``{key}_{side}`` for each of :data:`TWIN_KEYS` and side clean / poisoned / neutral.
    """
    by_id = {r["id"]: r for r in rows}
    neutral = {r.get("twin_of"): r for r in rows if r.get("variant") == "neutral"}
    out = []
    for r in rows:
        c = by_id.get(r.get("twin_of")) if r.get("variant", "poisoned") == "poisoned" and r.get("twin_of") else None
        if c is None:
            continue
        n = neutral.get(c["id"])
        out.append({"clean": c["id"], "poisoned": r["id"], "neutral": n["id"] if n else None, "category": r["category"],
                    **{f"{k}_{side}": (src.get(k) if src else None) for k in TWIN_KEYS
                       for side, src in (("clean", c), ("poisoned", r), ("neutral", n))}})
    return out


def _twin_test(pairs: Sequence[Mapping[str, Any]], key: str, *, name: str, predicted_sign: int, seed: int,
               n_resamples: int) -> TestResult:
    """H4a / H4b: poisoned against its neutral twin (equal length; the primary test), with the
    unadjusted poisoned-against-clean test in ``details["vs_clean"]``."""
    vn = [p for p in pairs if _finite(p[f"{key}_neutral"], p[f"{key}_poisoned"])]
    vc = [p for p in pairs if _finite(p[f"{key}_clean"], p[f"{key}_poisoned"])]
    res = paired_test([p[f"{key}_neutral"] for p in vn], [p[f"{key}_poisoned"] for p in vn], name=name,
                      predicted_sign=predicted_sign, seed=seed, n_resamples=n_resamples, against="neutral")
    if not vn:
        res = replace(res, note="no neutral twins in the prompt set (poisoned - clean, unadjusted for length, in details)")
    vs_clean = paired_test([p[f"{key}_clean"] for p in vc], [p[f"{key}_poisoned"] for p in vc], name=name,
                      predicted_sign=predicted_sign, seed=seed, n_resamples=n_resamples, against="clean")
    res.details["vs_clean"] = {"effect": vs_clean.effect, "ci_low": vs_clean.ci_low, "ci_high": vs_clean.ci_high,
                               "p_value": vs_clean.p_value, "n": vs_clean.n,
                               "median_difference": vs_clean.details.get("median_difference", math.nan)}
    return res


def judge_with_power(results: Sequence[TestResult], alpha: float = ALPHA) -> list[TestResult]:
    """:func:`lab.analysis.hypotheses.judge`, then the precondition and control rules and each test's power; new
    results. The study's verdicts are judged here and nowhere else.

    A test whose precondition failed (``untestable``: H1's and H1c's context measure fails its
    validation on the model, or drifts with length) is ``untestable``; it has no p-value, so it
    is not in the Holm family. A test whose negative control rejects (``details["control_rejects"]``:
    H5's shuffled labels, H1's and H1c's placebo health) is ``inconclusive``: the test finds an
    effect where there is none by construction. Every test gets ``details["power"]``; an
    inconclusive one gets the power sentence in its note (no n settles an untestable one).
    """
    judged = judge(results, alpha)
    m = sum(math.isfinite(r.p_value) for r in judged)
    out = []
    for r in judged:
        if r.untestable:
            r = replace(r, verdict=settled(r.verdict, r.untestable))
        elif r.details.get("control_rejects"):
            r = replace(r, verdict=INCONCLUSIVE)
        power = power_summary(r, m, alpha)
        note = r.note
        if r.verdict == INCONCLUSIVE:
            note = "; ".join(x for x in (r.note, power_note(power)) if x)
        out.append(replace(r, note=note, details={**r.details, "power": power}))
    return out
