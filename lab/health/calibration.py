"""Calibrating the graded context-health measure (model-facing; no rendering).

Scores every candidate of :mod:`lab.health.measures` on the calibration prompts and on one
poisoned variant of each, then applies the choice rule stated in
:mod:`lab.health.measures` (:func:`choose`). The poisoned variants are built the way the
study's twins are (:func:`poisoned_variants`): one of the distractor texts the
study's poisoned twins use (taken from the embedded prompt set, so the two cannot
drift apart), a blank line, then the clean question. Raw values are kept per
prompt; the spread, ties and pair orderings are derived from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from lab.prompts import CalibrationPrompt
from lab.health.measures import CANDIDATES, HealthInputs, check_properties, check_properties_on
from lab.prompts import StudyPrompt

MAX_TIE_SHARE = 0.10  # a measure must rank clean prompts: no value shared by more than 10 % of them
TIE_DECIMALS = 2  # values are compared as reported (0.01 on the 0..10 scale)
DISTRACTOR_JOIN = "\n\n"  # the study's twins: distractor, blank line, clean question


def distractor_texts(prompts: Sequence[StudyPrompt]) -> dict[str, str]:
    """The distractor text of each distractor label used by the study's poisoned twins.

    A poisoned twin's user message is ``distractor + "\\n\\n" + clean question``; the
    text is recovered by removing the clean twin's question from the end.

    Raises:
        ValueError: a poisoned prompt does not end with its clean twin's question.
    """
    by_id = {p.id: p for p in prompts}
    out: dict[str, str] = {}
    for p in prompts:
        if p.variant != "poisoned":
            continue
        clean = by_id[p.twin_of].messages[-1]["content"]
        text = p.messages[-1]["content"]
        if not text.endswith(DISTRACTOR_JOIN + clean):
            raise ValueError(f"poisoned prompt {p.id!r} does not end with its clean twin's question")
        out.setdefault(p.distractor or p.id, text[: -len(DISTRACTOR_JOIN + clean)])
    if not out:
        raise ValueError("the prompt set has no poisoned twins to take distractors from")
    return out


def poisoned_variants(prompts: Sequence[CalibrationPrompt], distractors: dict[str, str]) -> list[CalibrationPrompt]:
    """One poisoned variant per calibration prompt, distractors assigned in turn (sorted labels)."""
    labels = sorted(distractors)
    return [CalibrationPrompt(id=f"{p.id}-poisoned", prompt=distractors[labels[i % len(labels)]] + DISTRACTOR_JOIN
                              + p.prompt, system=p.system) for i, p in enumerate(prompts)]


@dataclass(frozen=True)
class CandidateFigures:
    """One candidate on the calibration set (clean values and twin orderings)."""

    name: str
    properties: dict[str, bool]
    clean: list[float]
    poisoned: list[float]
    iqr: float
    std: float
    n_distinct: int
    max_tie_share: float
    n_pairs_below: int
    n_pairs_tied: int
    n_pairs: int

    @property
    def eligible(self) -> bool:
        return all(self.properties.values())

    @property
    def admissible(self) -> bool:
        return self.eligible and self.n_pairs_below == self.n_pairs and self.max_tie_share <= MAX_TIE_SHARE


def figures(name: str, clean: Sequence[float], poisoned: Sequence[float],
            properties: dict[str, bool] | None = None) -> CandidateFigures:
    """Spread, ties and twin orderings of one candidate's values (clean[i] twins poisoned[i])."""
    c, p = np.asarray(clean, dtype=float), np.asarray(poisoned, dtype=float)
    rounded = np.round(c, TIE_DECIMALS)
    _, counts = np.unique(rounded, return_counts=True)
    q1, q3 = np.percentile(c, [25, 75])
    return CandidateFigures(
        name=name, properties=dict(properties or {}), clean=c.tolist(), poisoned=p.tolist(), iqr=float(q3 - q1),
        std=float(c.std(ddof=1)) if c.size > 1 else 0.0, n_distinct=int(counts.size),
        max_tie_share=float(counts.max() / c.size), n_pairs_below=int((p < c).sum()),
        n_pairs_tied=int((np.round(p, TIE_DECIMALS) == rounded).sum()), n_pairs=int(c.size))


def choose(cands: Sequence[CandidateFigures]) -> tuple[str, str]:
    """Apply the rule of :mod:`lab.health.measures`; returns ``(name, which step decided)``.

    Raises:
        ValueError: no candidate is eligible.
    """
    admissible = [c for c in cands if c.admissible]
    if admissible:
        best = max(admissible, key=lambda c: c.iqr)
        return best.name, "admissible (all twins ordered, ties <= 10 %), largest IQR"
    eligible = [c for c in cands if c.eligible]
    if not eligible:
        raise ValueError("no candidate has all five properties")
    best = max(eligible, key=lambda c: (c.n_pairs_below, c.iqr))
    return best.name, "no candidate admissible: most twins ordered, then largest IQR"


def score_candidates(analyze: Callable[[list[dict[str, str]]], Any],
                     prompts: Sequence[CalibrationPrompt | StudyPrompt], *,
                     progress: Callable[[int, int, str], None] | None = None,
                     keep_inputs: dict[str, HealthInputs] | None = None) -> dict[str, dict[str, float]]:
    """Every candidate's value for every prompt: ``{prompt id: {candidate: value}}``.

    ``analyze`` maps a prompt's chat messages to its prefill analysis (in the lab,
    :func:`lab.sinks.prefill.analyze_prefill` bound to a model and its tokenizer; the
    measures read only what :meth:`HealthInputs.from_prefill` takes from it).
    ``prompts`` are calibration prompts (``messages()``) or study prompts (``messages``);
    ``keep_inputs``, when given, receives each prompt's :class:`HealthInputs` (for
    :func:`lab.health.measures.check_properties_on`, without a second prefill).
    """
    out: dict[str, dict[str, float]] = {}
    for i, p in enumerate(prompts):
        if progress is not None:
            progress(i, len(prompts), p.id)
        messages = p.messages() if callable(p.messages) else [dict(m) for m in p.messages]
        h = HealthInputs.from_prefill(analyze(messages))
        out[p.id] = {name: fn(h) for name, fn in CANDIDATES.items()}
        if keep_inputs is not None:
            keep_inputs[p.id] = h
    return out


def calibrate(values: dict[str, dict[str, float]], clean: Sequence[CalibrationPrompt],
              poisoned: Sequence[CalibrationPrompt], inputs: dict[str, HealthInputs] | None = None) -> dict[str, Any]:
    """Figures of every candidate and the rule's choice, as a JSON-ready dict.

    With ``inputs`` (the prompts' :class:`HealthInputs`), every candidate's five
    properties are also checked on this model's own prefills
    (``properties_on_prompts``); eligibility stays the pre-stated check on fixed random
    inputs, and ``chosen_holds_on_prompts`` says whether the choice holds on the model.
    """
    cands = [figures(name, [values[c.id][name] for c in clean], [values[p.id][name] for p in poisoned],
                     check_properties(fn)) for name, fn in CANDIDATES.items()]
    chosen, step = choose(cands)
    return {
        "rule": "eligible = the five properties hold; admissible = every poisoned variant strictly below its clean "
                f"twin and no value (to {10 ** -TIE_DECIMALS:g}) shared by more than {MAX_TIE_SHARE:.0%} of clean "
                "prompts; choose the admissible candidate with the largest IQR over clean prompts; if none is "
                "admissible, the eligible one with the most ordered twins, then the largest IQR",
        "chosen": chosen, "decided_by": step,
        "candidates": [{**{k: v for k, v in c.__dict__.items() if k not in ("clean", "poisoned")},
                        "eligible": c.eligible, "admissible": c.admissible,
                        "median": float(np.median(c.clean)), "min": min(c.clean), "max": max(c.clean)}
                       for c in cands],
        "prompts": [{"id": c.id, "variant": "clean", **values[c.id]} for c in clean]
                   + [{"id": p.id, "variant": "poisoned", **values[p.id]} for p in poisoned],
        **(_on_prompts(inputs, [*clean, *poisoned], chosen) if inputs else {}),
    }


def _on_prompts(inputs: dict[str, HealthInputs], prompts: Sequence[CalibrationPrompt],
                chosen: str) -> dict[str, Any]:
    """Every candidate's properties on the model's own prefills, and whether the choice holds there.

    Random inputs can miss the shapes of a real model's attention, so the properties
    are checked on the prefills as well.
    """
    real = [inputs[p.id] for p in prompts]
    on = {name: check_properties_on(fn, real) for name, fn in CANDIDATES.items()}
    return {"properties_on_prompts": on,
            "chosen_holds_on_prompts": all(v for k, v in on[chosen].items() if not k.startswith("n_"))}


def study_set_figures(values: dict[str, float], prompts: Sequence[StudyPrompt]) -> dict[str, Any]:
    """The ranking targets (ties, twins) for the chosen measure on a study prompt set (prefill only, no decode).

    Args:
        values: The chosen measure per prompt id.
        prompts: The study prompts (clean ones and poisoned twins).

    Returns:
        ``max_tie_share`` over clean prompts (values to 0.01; target <= 10 %),
        ``n_twins_tied`` / ``n_twins_below`` / ``n_twins`` (target: 0 tied).
    """
    clean = [values[p.id] for p in prompts if p.variant == "clean"]
    twins = [(values[p.twin_of], values[p.id]) for p in prompts if p.twin_of is not None]
    _, counts = np.unique(np.round(clean, TIE_DECIMALS), return_counts=True)
    return {"n_clean": len(clean), "max_tie_share": float(counts.max() / len(clean)) if clean else None,
            "n_distinct": int(counts.size), "min": min(clean), "max": max(clean), "median": float(np.median(clean)),
            "n_twins": len(twins), "n_twins_tied": sum(round(c, TIE_DECIMALS) == round(q, TIE_DECIMALS) for c, q in twins),
            "n_twins_below": sum(q < c for c, q in twins), "max_tie_share_target": MAX_TIE_SHARE}
