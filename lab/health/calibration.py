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

import json
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from scipy import stats

from lab.files import MAX_PROMPT_SET_BYTES, read_text
from lab.kinds.calibrate_health import Calibration, Candidate
from lab.prompts import CalibrationPrompt, jsonl_lines
from lab.health.measures import (CANDIDATES, CONTROLS, REFERENCED_BASES, HealthInputs, LengthReference,
                                 check_properties, check_properties_on)
from lab.health.references import fit_reference
from lab.prompts import StudyPrompt
from lab import typed

MAX_TIE_SHARE = 0.10  # a measure must rank clean prompts: no value shared by more than 10 % of them
# The sixth property: over the clean calibration prompts and their neutral variants (clean
# context of 5 to ~500 tokens), |Spearman rho(measure, N)| <= 0.2. 0.2 is twice Cohen's
# "small" correlation: drift below it would move a 340-prompt H1 by less than its own CI.
LENGTH_RHO_TOLERANCE = 0.2
LENGTH_PROPERTY = "length_neutral"
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


def neutral_variants(prompts: Sequence[CalibrationPrompt], path: str | None = None) -> list[CalibrationPrompt]:
    """One neutral variant per calibration prompt: relevant, harmless text of its poisoned variant's added length.

    Read from ``lab/data/calibration_neutral.jsonl`` (written from a checkout by
    :mod:`tools.datagen.make_study_twins`: standard-library docstring text matched to within 5 % of
    the poisoned variant's added tokens on the smollm2 and qwen2.5-coder tokenizers), built as
    the poisoned variants are: the added text, a blank line, the clean prompt.

    Raises:
        ValueError: the file is refused (:func:`lab.files.read_text`), is not JSON Lines of neutral variants, or
            lacks a neutral variant for one of ``prompts``.
    """
    src = resources.files("lab").joinpath("data/calibration_neutral.jsonl") if path is None else Path(path)
    text = (src.read_text(encoding="utf-8") if path is None
            else read_text(src, MAX_PROMPT_SET_BYTES, f"neutral={str(src)!r}"))
    try:
        added = {r["twin_of"]: r["added"] for r in map(json.loads, filter(str.strip, jsonl_lines(text)))}
    except (json.JSONDecodeError, RecursionError, KeyError, TypeError) as exc:
        raise ValueError(f"neutral={str(src)!r} cannot be read as neutral variants ({type(exc).__name__}: {exc})") from None
    missing = [p.id for p in prompts if p.id not in added]
    if missing:
        raise ValueError(f"neutral={str(src)!r} has no neutral variant for {missing[:5]}; re-run "
                         "`python -m tools.datagen.make_study_twins` from a checkout of the lab (or pass --neutral "
                         "for your own prompts)")
    return [CalibrationPrompt(id=f"{p.id}-neutral", prompt=added[p.id] + DISTRACTOR_JOIN + p.prompt, system=p.system)
            for p in prompts]


def figures(name: str, clean: Sequence[float], poisoned: Sequence[float], neutral: Sequence[float],
            lengths: Sequence[int], properties: dict[str, bool] | None = None, *,
            control: bool = False) -> Candidate:
    """Spread, ties, twin orderings and drift with length of one candidate's values.

    ``n_pairs_below`` counts poisoned below *neutral* (equal length), ``n_pairs_below_clean``
    poisoned below clean (reported; a length proxy gets all of them); ``length_rho`` is Spearman
    rho of the values with the content length N over the clean prompts and their neutral variants.
    ``eligible``: all six properties hold; ``admissible``: eligible, every poisoned variant below its
    neutral twin and no value shared by more than :data:`MAX_TIE_SHARE` of clean prompts. Median and
    range are over the clean prompts (NaN where a value is not measurable: null in the file).

    Args:
        clean, poisoned, neutral: Values aligned by calibration prompt (``poisoned[i]`` and
            ``neutral[i]`` are variants of ``clean[i]``).
        lengths: Content positions N of the clean prompts then of the neutral variants
            (``len(clean) + len(neutral)`` entries).
        properties: The five random-input properties (:func:`lab.health.measures.check_properties`);
            :data:`LENGTH_PROPERTY` is added here from ``length_rho``.
        control: A negative control (:data:`lab.health.measures.CONTROLS`).

    Raises:
        ValueError: the sequences do not align.
    """
    c, p, n = (np.asarray(v, dtype=float) for v in (clean, poisoned, neutral))
    ln = np.asarray(lengths, dtype=float)
    if not (c.shape == p.shape == n.shape) or ln.shape != (2 * c.size,):
        raise ValueError(f"clean, poisoned, neutral ({c.size}, {p.size}, {n.size}) and lengths ({ln.size}, "
                         "clean then neutral) do not align")
    rounded = np.round(c, TIE_DECIMALS)
    _, counts = np.unique(rounded, return_counts=True)
    q1, q3 = np.percentile(c, [25, 75])
    both = np.concatenate([c, n])
    rho = float(stats.spearmanr(both, ln).statistic) if np.ptp(both) > 0 and np.ptp(ln) > 0 else 0.0
    props = {**dict(properties or {}), LENGTH_PROPERTY: abs(rho) <= LENGTH_RHO_TOLERANCE}
    eligible, tie_share, below = all(props.values()), float(counts.max() / c.size), int((p < n).sum())
    values = c.tolist()
    return Candidate(
        name=name, properties=props, iqr=float(q3 - q1), std=float(c.std(ddof=1)) if c.size > 1 else 0.0,
        n_distinct=int(counts.size), max_tie_share=tie_share, n_pairs_below=below,
        n_pairs_tied=int((np.round(p, TIE_DECIMALS) == np.round(n, TIE_DECIMALS)).sum()),
        n_pairs_below_clean=int((p < c).sum()), n_pairs=int(c.size), length_rho=rho, control=control,
        eligible=eligible, admissible=eligible and below == c.size and tie_share <= MAX_TIE_SHARE,
        median=float(np.median(c)), min=min(values), max=max(values))


def choose(cands: Sequence[Candidate]) -> tuple[str, str]:
    """Apply the rule of :mod:`lab.health.measures`; returns ``(name, which step decided)``.

    Controls (``control=True``) go through the same rule as the candidates; the rule
    must reject them on its own criteria.

    Raises:
        ValueError: no candidate is eligible, or the rule would choose a control (it could
            not tell a measure of the context from a measure of its length).
    """
    admissible = [c for c in cands if c.admissible]
    if admissible:
        best = max(admissible, key=lambda c: c.iqr)
        step = "admissible (all six properties, every poisoned variant below its neutral twin, ties <= 10 %), largest IQR"
    else:
        eligible = [c for c in cands if c.eligible]
        if not eligible:
            raise ValueError("no candidate has all six properties (five on random inputs, length-neutral on the "
                             "calibration prompts)")
        best = max(eligible, key=lambda c: (c.n_pairs_below, c.iqr))
        step = "no candidate admissible: most poisoned variants below their neutral twin, then largest IQR"
    if best.control:
        raise ValueError(f"the rule chooses the control {best.name!r}: it does not reject a measure of length alone")
    return best.name, step


N_CONTENT = "n_content"  # the content length N kept beside the measures' values


def score_candidates(analyze: Callable[[list[dict[str, str]]], Any],
                     prompts: Sequence[CalibrationPrompt | StudyPrompt], *,
                     progress: Callable[[int, int, str], None] | None = None,
                     keep_inputs: dict[str, HealthInputs] | None = None,
                     length_reference: Mapping[str, LengthReference] | None = None) -> dict[str, dict[str, float]]:
    """Every candidate's and control's value for every prompt: ``{prompt id: {name: value, "n_content": N}}``.

    ``analyze`` maps a prompt's chat messages to its prefill analysis (in the lab,
    :func:`lab.sinks.prefill.analyze_prefill` bound to a model and its tokenizer; the
    measures read only what :meth:`HealthInputs.from_prefill` takes from it).
    ``prompts`` are calibration prompts (``messages()``) or study prompts (``messages``);
    ``keep_inputs``, when given, receives each prompt's :class:`HealthInputs` (for
    :func:`lab.health.measures.check_properties_on`, without a second prefill).
    ``length_reference``, when given, replaces the model's stored references (the
    ``*_for_length`` candidates then read the reference just fitted, :func:`fit_length_references`).
    """
    out: dict[str, dict[str, float]] = {}
    for i, p in enumerate(prompts):
        if progress is not None:
            progress(i, len(prompts), p.id)
        messages = p.messages() if callable(p.messages) else [dict(m) for m in p.messages]
        h = HealthInputs.from_prefill(analyze(messages))
        if length_reference is not None:
            h = replace(h, length_reference=dict(length_reference))
        out[p.id] = {**{name: fn(h) for name, fn in {**CANDIDATES, **CONTROLS}.items()},
                     N_CONTENT: int(h.content.sum())}
        if keep_inputs is not None:
            keep_inputs[p.id] = h
    return out


RULE = ("eligible = the five properties hold on random inputs and |Spearman rho(value, content length N)| <= "
        f"{LENGTH_RHO_TOLERANCE:g} over the clean calibration prompts and their neutral variants (length-neutral); "
        "admissible = every poisoned variant strictly below its neutral twin of the same added length and no value "
        f"(to {10 ** -TIE_DECIMALS:g}) shared by more than {MAX_TIE_SHARE:.0%} of clean prompts; choose the "
        "admissible candidate with the largest IQR over clean prompts; if none is admissible, the eligible one with "
        "the most poisoned variants below their neutral twin, then the largest IQR; controls (a measure of length "
        "alone) go through the same rule and must be rejected")


class HealthCalibration(Calibration):
    """Every candidate's and control's figures on the calibration set and the rule's choice (:func:`calibrate`):
    the head of ``report.json``, its fields declared once in :class:`lab.kinds.calibrate_health.Calibration`."""

    def to_json(self) -> dict[str, Any]:
        """The figures as ``report.json`` holds them, NaN as it is (``properties_on_prompts`` only when checked:
        :func:`lab.typed.to_json`)."""
        return typed.to_json(self)


def calibrate(values: dict[str, dict[str, float]], clean: Sequence[CalibrationPrompt],
              poisoned: Sequence[CalibrationPrompt], neutral: Sequence[CalibrationPrompt],
              inputs: dict[str, HealthInputs] | None = None) -> HealthCalibration:
    """Figures of every candidate and control and the rule's choice.

    ``poisoned[i]`` and ``neutral[i]`` are the variants of ``clean[i]``; ``values`` as
    :func:`score_candidates` gives them (with ``n_content``). With ``inputs`` (the prompts'
    :class:`HealthInputs`), every candidate's five properties are also checked on this
    model's own prefills (``properties_on_prompts``); eligibility stays the pre-stated
    check, and ``chosen_holds_on_prompts`` says whether the choice holds on the model.

    ``chosen`` is None, and ``decided_by`` says why, when the rule chooses nothing (no
    candidate has the six properties on this model, or a control would win).
    """
    lengths = [values[c.id][N_CONTENT] for c in clean] + [values[n.id][N_CONTENT] for n in neutral]
    cands = [figures(name, [values[c.id][name] for c in clean], [values[p.id][name] for p in poisoned],
                     [values[n.id][name] for n in neutral], lengths, check_properties(fn), control=name in CONTROLS)
             for name, fn in {**CANDIDATES, **CONTROLS}.items()]
    try:
        chosen, step = choose(cands)
    except ValueError as exc:  # the rule chooses nothing on this model: that is a result, reported as such
        chosen, step = None, str(exc)
    prompts = ([{"id": c.id, "variant": "clean", **values[c.id]} for c in clean]
               + [{"id": p.id, "variant": "poisoned", **values[p.id]} for p in poisoned]
               + [{"id": n.id, "variant": "neutral", **values[n.id]} for n in neutral])
    on, holds = _on_prompts(inputs, [*clean, *poisoned, *neutral], chosen) if inputs else (None, None)
    rejected = {c.name: not c.admissible and c.name != chosen for c in cands if c.control}
    return HealthCalibration(rule=RULE, chosen=chosen, decided_by=step, length_rho_tolerance=LENGTH_RHO_TOLERANCE,
                             controls_rejected=rejected, candidates=tuple(cands), prompts=tuple(prompts),
                             properties_on_prompts=on, chosen_holds_on_prompts=holds)


def _on_prompts(inputs: dict[str, HealthInputs], prompts: Sequence[CalibrationPrompt],
                chosen: str | None) -> tuple[dict[str, dict[str, Any]], bool | None]:
    """Every candidate's properties on the model's own prefills, and whether the choice holds there.

    Random inputs can miss the shapes of a real model's attention, so the properties
    are checked on the prefills as well.
    """
    real = [inputs[p.id] for p in prompts]
    on = {name: check_properties_on(fn, real) for name, fn in CANDIDATES.items()}
    return on, None if chosen is None else all(v for k, v in on[chosen].items() if not k.startswith("n_"))


def study_set_figures(values: dict[str, float], prompts: Sequence[StudyPrompt]) -> dict[str, Any]:
    """The ranking targets (ties, twins) for the chosen measure on a study prompt set (prefill only, no decode).

    Args:
        values: The chosen measure per prompt id.
        prompts: The study prompts (clean ones, poisoned and neutral twins).

    Returns:
        ``max_tie_share`` over clean prompts (values to 0.01; target <= 10 %),
        ``n_twins_tied`` / ``n_twins_below`` / ``n_twins``: poisoned against its neutral
        twin (against its clean twin where it has no neutral one; target: 0 tied).
    """
    clean = [values[p.id] for p in prompts if p.variant == "clean"]
    neutral = {p.twin_of: values[p.id] for p in prompts if p.variant == "neutral"}
    # a poisoned twin against its neutral twin (equal length), or its clean twin in a set without neutral twins
    twins = [(neutral.get(p.twin_of, values[p.twin_of]), values[p.id]) for p in prompts if p.variant == "poisoned"]
    _, counts = np.unique(np.round(clean, TIE_DECIMALS), return_counts=True)
    return {"n_clean": len(clean), "max_tie_share": float(counts.max() / len(clean)) if clean else None,
            "n_distinct": int(counts.size), "min": min(clean), "max": max(clean), "median": float(np.median(clean)),
            "n_twins": len(twins), "n_twins_tied": sum(round(c, TIE_DECIMALS) == round(q, TIE_DECIMALS) for c, q in twins),
            "n_twins_below": sum(q < c for c, q in twins), "max_tie_share_target": MAX_TIE_SHARE}


FIT_FIGURES = "bases"  # the key of the per-base figures in fit_length_references' figures


def fit_length_references(values: dict[str, dict[str, float]]) -> tuple[dict[str, LengthReference], dict[str, Any]]:
    """Each referenced base's clean length reference from the length-reference prompts' values.

    Args:
        values: :func:`score_candidates` on the clean length-reference prompts
            (``lab/data/length_reference.jsonl``).

    Returns:
        ``(references by base, figures)``; figures: ``n_prompts``, ``n_content_range`` and, under
        :data:`FIT_FIGURES`, per base: the fit, and Spearman rho of
        the base and of its ``*_for_length`` reading with N on these prompts (in-sample:
        the check that counts is the calibration prompts', which the fit never saw).

    Raises:
        ValueError: as :func:`lab.health.references.fit_reference`.
    """
    from lab.health.measures import FOR_LENGTH, for_length

    rows = list(values.values())
    lengths = [int(r[N_CONTENT]) for r in rows]
    refs: dict[str, LengthReference] = {}
    figs: dict[str, Any] = {}
    for base in REFERENCED_BASES:
        vals = [float(r[base]) for r in rows]
        ref = fit_reference(base, vals, lengths)
        refs[base] = ref
        read = [for_length(v, n, ref) for v, n in zip(vals, lengths)]
        figs[base] = {"intercept": ref.intercept, "slope": ref.slope, "scale": ref.scale,
                      "rho_base_n": _rho(vals, lengths), f"rho{FOR_LENGTH}_n": _rho(read, lengths)}
    return refs, {"n_prompts": len(rows), "n_content_range": [min(lengths), max(lengths)], FIT_FIGURES: figs}


def _rho(values: Sequence[float], lengths: Sequence[int]) -> float:
    v, n = np.asarray(values, dtype=float), np.asarray(lengths, dtype=float)
    keep = np.isfinite(v)
    v, n = v[keep], n[keep]
    return float(stats.spearmanr(v, n).statistic) if v.size > 2 and np.ptp(v) > 0 and np.ptp(n) > 0 else 0.0
