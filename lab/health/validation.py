"""Context health on independent text: does it read the context, or the content length N?

The choice rule of :mod:`lab.health.measures` checks length neutrality on the calibration
prompts, and the ``*_for_length`` references are fitted on the length-reference prompts;
both are built from the same kind of text (CPython's help topics after a question), so
passing there says little about other text. This module scores the lab's context health
(:func:`lab.sinks.prefill.analyze_prefill`, the model's own stored length reference) on
the validation set ``lab/data/health_validation.jsonl`` (:mod:`tools.datagen.make_health_validation`:
docstrings of NumPy, SciPy, Rich and the standard library, 16 to 1,000 content tokens,
spread evenly in ``ln N``; none of it comes from the calibration, reference or study
prompts) and states two bars, each a named constant with its reason:

* length-neutral: ``|Spearman rho(health, N)| <=`` :data:`MAX_LENGTH_RHO` over the measurable
  prompts (the tolerance of the calibration's sixth property, now on text the rule never saw);
* not saturated: at most :data:`MAX_SATURATED_SHARE` of the measurable prompts within
  :data:`END_MARGIN` of either end of the 0..10 scale (both ends together).

A measure meeting both is *valid* on that model; the lab's context health is the chosen
measure (:func:`lab.health.choice.load_chosen`), and every other candidate and the
length-only control (:data:`lab.health.measures.CONTROLS`, which must fail) are reported
beside it from the same prefills. Pure figures on per-prompt values; no model code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from scipy import stats

from lab.health.calibration import LENGTH_RHO_TOLERANCE, N_CONTENT
from lab.health.measures import CANDIDATES, CONTROLS
from lab.kinds.calibrate_health_validate import KIND, Bars, Figures, Report
from lab.prompts import CalibrationPrompt
from lab.provenance import Environment, ModelSource
from lab import typed

VALIDATION_PROMPTS = "data/health_validation.jsonl"
PACKAGED_VALIDATION = "lab/data/health_validation.jsonl"
MAX_LENGTH_RHO = LENGTH_RHO_TOLERANCE  # 0.2: the calibration's length tolerance, held on text the rule never saw
# A value within 0.1 of 0 or of 10 is at an end of the scale: for a *_for_length reading,
# 10 Phi(z), that is |z| > 2.33, 1 % of clean prompts at each end when the reference fits.
END_MARGIN = 0.1
MAX_SATURATED_SHARE = 0.05  # the bar: no more than 5 % of clean prompts at the ends
MIN_MEASURABLE = 10  # fewer measurable prompts give no usable rank correlation
SOURCE_KEY = "source"  # a prompt's source package, kept beside its values
BARS = Bars(max_length_rho=MAX_LENGTH_RHO, max_saturated_share=MAX_SATURATED_SHARE, end_margin=END_MARGIN,
            min_measurable=MIN_MEASURABLE)


def validation_figures(name: str, values: Sequence[float], lengths: Sequence[int], *,
                       control: bool = False) -> Figures:
    """Spearman rho with N, its p, and the shares at the ends of the scale, over the finite values, and the
    verdicts they give: ``length_neutral`` (``|rho| <=`` :data:`MAX_LENGTH_RHO`; False when rho could not be
    computed), ``unsaturated`` (at most :data:`MAX_SATURATED_SHARE` of the measurable prompts within
    :data:`END_MARGIN` of an end; False with none measurable) and ``valid`` (both, on at least
    :data:`MIN_MEASURABLE` measurable prompts).

    rho and p are NaN when fewer than :data:`MIN_MEASURABLE` prompts are measurable or there is no spread, the
    range and median NaN with none measurable (null in the file).

    Args:
        name: The measure's name.
        values: Its value per prompt on 0..10 (NaN: not measurable).
        lengths: Content tokens N per prompt, aligned with ``values``.
        control: Whether the measure is a negative control.

    Raises:
        ValueError: ``values`` and ``lengths`` do not align, or a length is below 1.
    """
    v, n = np.asarray(values, dtype=float), np.asarray(lengths, dtype=float)
    if v.shape != n.shape or v.ndim != 1:
        raise ValueError(f"{v.size} values and {n.size} lengths do not align")
    if (n < 1).any():
        raise ValueError("content lengths must be >= 1")
    keep = np.isfinite(v)
    v, n = v[keep], n[keep]
    rho = p = math.nan
    if v.size >= MIN_MEASURABLE and np.ptp(v) > 0 and np.ptp(n) > 0:
        res = stats.spearmanr(v, n)
        rho, p = float(res.statistic), float(res.pvalue)
    m = max(v.size, 1)
    low_share, high_share = float((v <= END_MARGIN).sum() / m), float((v >= 10.0 - END_MARGIN).sum() / m)
    saturated = low_share + high_share
    length_neutral = math.isfinite(rho) and abs(rho) <= MAX_LENGTH_RHO
    unsaturated = v.size > 0 and saturated <= MAX_SATURATED_SHARE
    return Figures(
        name=name, n=int(keep.size), n_measurable=int(v.size), rho=rho, p=p, low_share=low_share,
        high_share=high_share, low=float(v.min()) if v.size else math.nan,
        median=float(np.median(v)) if v.size else math.nan, high=float(v.max()) if v.size else math.nan,
        control=control, saturated_share=saturated, length_neutral=length_neutral, unsaturated=unsaturated,
        valid=v.size >= MIN_MEASURABLE and length_neutral and unsaturated)


class HealthValidationReport(Report):
    """What ``lab calibrate-health --validate`` found on one model: the kind's report (its fields declared once, in
    :class:`lab.kinds.calibrate_health_validate.Report`), with :meth:`to_json`."""

    def to_json(self) -> dict[str, Any]:
        """``report.json`` past its format: the kind, then bars, the chosen measure's verdict, every candidate's
        figures and per-prompt values (NaN as it is: the writer writes null)."""
        return {"kind": KIND.name, **typed.to_json(self)}


def validation_report(values: Mapping[str, Mapping[str, float]], prompts: Sequence[CalibrationPrompt],
                      sources: Mapping[str, str], *, measure: str, model: ModelSource,
                      environment: Environment, prompts_file: str = PACKAGED_VALIDATION,
                      reference_file: str | None = None) -> HealthValidationReport:
    """Every candidate's figures on the validation prompts, and the verdict on the lab's context health.

    Args:
        values: :func:`lab.health.calibration.score_candidates` on ``prompts``
            (``{prompt id: {name: value, "n_content": N}}``, read against the model's stored reference).
        prompts: The validation prompts.
        sources: Each prompt's source package by id (a missing id counts as ``"?"``).
        measure: The lab's context health (the chosen candidate).
        model, environment, prompts_file, reference_file: As :class:`lab.kinds.calibrate_health_validate.Report`.

    Raises:
        ValueError: ``measure`` is not a candidate, or a prompt has no values.
    """
    if measure not in CANDIDATES:
        raise ValueError(f"measure={measure!r} is not one of {', '.join(CANDIDATES)}")
    missing = [p.id for p in prompts if p.id not in values]
    if missing:
        raise ValueError(f"no values for validation prompt(s) {missing[:5]}")
    ids = [p.id for p in prompts]
    lengths = [int(values[i][N_CONTENT]) for i in ids]
    names = {**{k: False for k in CANDIDATES}, **{k: True for k in CONTROLS}}
    cands = {k: validation_figures(k, [values[i][k] for i in ids], lengths, control=c) for k, c in names.items()}
    by_source = {}
    for src in sorted({sources.get(i, "?") for i in ids}):
        sel = [i for i in ids if sources.get(i, "?") == src]
        by_source[src] = validation_figures(measure, [values[i][measure] for i in sel],
                                            [int(values[i][N_CONTENT]) for i in sel])
    rows = tuple({"id": i, SOURCE_KEY: sources.get(i, "?"), **values[i]} for i in ids)
    return HealthValidationReport(
        measure=measure, valid=cands[measure].valid, bars=BARS, figures=cands[measure], by_source=by_source,
        candidates=cands, valid_candidates=tuple(k for k, f in cands.items() if f.valid and not f.control),
        prompts=rows, model=model, environment=environment, prompts_file=prompts_file, reference_file=reference_file)


@dataclass(frozen=True)
class ValidationSet:
    """The prompts of a validation file, with each one's source package and line, as read before a model loads.

    Attributes:
        prompts: The prompts, in file order (:func:`lab.sinks.calibration.load_prompts`, which checks
            ``id``, ``prompt`` and ``system``).
        sources: Each prompt's ``source`` by id (``"?"`` when absent).
        lines: Each prompt's 1-based line in the file, by id.
        file: The file as the report and errors name it.
    """

    prompts: tuple[CalibrationPrompt, ...]
    sources: dict[str, str]
    lines: dict[str, int]
    file: str


def validation_set(prompts: Sequence[CalibrationPrompt], text: str, file: str) -> ValidationSet:
    """The :class:`ValidationSet` of ``prompts``, read from ``text`` (the file's JSONL text) and named ``file``.

    Raises:
        ValueError: a line is not a JSON object, or its ``source`` is neither a string nor absent
            (naming ``file``, the line and the field); a prompt whose line is not in ``text``.
    """
    import json

    from lab.prompts import jsonl_lines

    sources, lines = {}, {}
    for n, line in enumerate(jsonl_lines(text), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            row = None
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            raise ValueError(f"{file}:{n} is not a JSON object with a string 'id'")
        source = row.get(SOURCE_KEY, "?")
        if not isinstance(source, str):
            raise ValueError(f"{file}:{n} needs a string {SOURCE_KEY!r} (or none), got {type(source).__name__}")
        sources[row["id"]], lines[row["id"]] = source, n
    missing = [p.id for p in prompts if p.id not in lines]
    if missing:
        raise ValueError(f"{file} holds no line for prompt(s) {missing[:5]}")
    return ValidationSet(prompts=tuple(prompts), sources=sources, lines=lines, file=file)


def check_lengths(vset: ValidationSet, n_tokens: Callable[[CalibrationPrompt], int], context: int | None) -> None:
    """Refuse a validation prompt longer than the model's context, before any prompt is scored.

    Args:
        vset: The validation set.
        n_tokens: A prompt's tokens as the prefill sees them (its chat messages through the model's
            template, :func:`lab.models.loading.encode_chat`).
        context: The model's context in positions; None (unknown): nothing is refused.

    Raises:
        ValueError: the first prompt past ``context``, naming the file, its line, its id and both lengths.
    """
    if context is None:
        return
    for p in vset.prompts:
        n = n_tokens(p)
        if n > context:
            raise ValueError(f"{vset.file}:{vset.lines[p.id]}: prompt {p.id!r} has {n} tokens, more than the "
                             f"model's context of {context}; shorten it or leave it out")


# --------------------------------------------------------------------------- the verdict kept for the study

VALIDITY_DIR = "health/validity"  # inside the lab package, and inside the user's calibration folder


@dataclass(frozen=True)
class HealthValidity:
    """The verdict of ``lab calibrate-health --validate`` on one profile, kept for the study to read.

    Stored as ``health/validity/<profile>.json``: packaged under ``lab/``, and written to the user's
    calibration folder by ``--validate --save`` (read first). The study reads it
    (:func:`health_unmeasurable`): where the lab's context health fails on independent text, H1 and
    H1c are untestable on that model and say why.

    Attributes:
        profile: The model profile validated.
        measure: The context-health measure validated (a record for another measure says nothing).
        valid: Whether it met both bars (:data:`MAX_LENGTH_RHO`, :data:`MAX_SATURATED_SHARE`).
        rho, p: Spearman rho(health, content length N) on the validation prompts and its p.
        saturated_share: Share of the prompts within :data:`END_MARGIN` of either end of the scale.
        n: Measurable prompts.
        prompts_file: The validation set.
        report: The report folder the figures come from.
    """

    profile: str
    measure: str
    valid: bool
    rho: float
    p: float
    saturated_share: float
    n: int
    prompts_file: str
    report: str

    def reason(self) -> str:
        """Why the measure is not a reading of the context on this model ("" when valid)."""
        problems = []
        if not abs(self.rho) <= MAX_LENGTH_RHO:
            problems.append(f"it drifts with content length (Spearman rho {self.rho:+.2f}, p {self.p:.2g}; "
                            f"bar |rho| <= {MAX_LENGTH_RHO:g})")
        if not self.saturated_share <= MAX_SATURATED_SHARE:
            problems.append(f"{self.saturated_share:.0%} of prompts sit at an end of its 0..10 scale "
                            f"(bar {MAX_SATURATED_SHARE:.0%})")
        if not problems:
            return ""
        return (f"context health ({self.measure}) does not read the context on {self.profile}: on {self.n} clean "
                f"prompts of independent text ({self.prompts_file}) " + " and ".join(problems))

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "measure": self.measure, "valid": self.valid, "rho": self.rho, "p": self.p,
                "saturated_share": self.saturated_share, "n": self.n, "prompts_file": self.prompts_file,
                "report": self.report}


def validity_of(validation: Mapping[str, Any], profile: str, report: str) -> HealthValidity:
    """The :class:`HealthValidity` of a ``report.json`` (:meth:`HealthValidationReport.to_json`)."""
    fig = validation["figures"]
    return HealthValidity(profile=profile, measure=str(validation["measure"]), valid=bool(validation["valid"]),
                          rho=float(fig["rho"]), p=float(fig["p"]), saturated_share=float(fig["saturated_share"]),
                          n=int(fig["n_measurable"]), prompts_file=str(validation["prompts_file"]), report=report)


def validity_path(profile: str, *, packaged: bool) -> Path:
    """``health/validity/<profile>.json`` in the package (``packaged``) or in the user's calibration folder."""
    from lab.user_dirs import packaged_file, user_file

    return (packaged_file if packaged else user_file)(f"{VALIDITY_DIR}/{profile}.json")


def load_validity(profile: str) -> HealthValidity | None:
    """The stored verdict for ``profile``: the user's file, else the packaged one; None without either.

    Raises:
        ValueError: the file fails :data:`lab.schemas.health.VALIDITY_SCHEMA`, in one line naming it.
    """
    from lab.schemas import FileSchemaError
    from lab.schemas.health import load_validity_file
    from lab.user_dirs import found_first

    # A regular file only: anything else at the user's path is skipped for the packaged verdict.
    path = found_first(validity_path(profile, packaged=False), validity_path(profile, packaged=True),
                       counts=Path.is_file)
    if path is None:
        return None
    try:
        data = load_validity_file(path)
    except FileSchemaError as exc:
        raise ValueError(f"{exc}; delete it (the packaged verdict is read then), or rerun "
                         f"`lab calibrate-health --model {profile} --validate --save`") from None
    return HealthValidity(**{k: data[k] for k in HealthValidity.__dataclass_fields__})


def save_validity(validity: HealthValidity) -> Path:
    """Write ``validity`` to the user's calibration folder, atomically; returns the path.

    The text is checked first as :func:`load_validity` reads it back (:data:`lab.schemas.health.VALIDITY_SCHEMA`),
    so a verdict the study would refuse (a NaN rho from fewer than :data:`MIN_MEASURABLE` measurable
    prompts, none measurable) is never written.

    Raises:
        ValueError: the verdict fails the schema, in one line naming the file and the field; nothing is written.
        OSError: the file cannot be written.
    """
    import json

    from lab import schemas
    from lab.runs.files import write_text_atomic
    from lab.schemas.health import VALIDITY_KIND, VALIDITY_SCHEMA

    path = validity_path(validity.profile, packaged=False)
    text = json.dumps(validity.to_json(), indent=2) + "\n"
    try:
        schemas.validate(json.loads(text), VALIDITY_SCHEMA, path=path, kind=VALIDITY_KIND)
    except schemas.FileSchemaError as exc:
        few = (f"; {validity.n} measurable prompt(s), Spearman rho needs {MIN_MEASURABLE}"
               if validity.n < MIN_MEASURABLE else "")
        raise ValueError(f"the verdict on {validity.profile} is not saved to {str(path)!r}: the study would refuse "
                         f"to read it back ({exc.problem}{few})") from None
    return write_text_atomic(path, text)


def health_unmeasurable(profile: str, measure: str) -> str | None:
    """Why context health cannot be read on ``profile``: the stored verdict's reason when it is for
    ``measure`` and failed; None when it passed, is for another measure, or none is stored."""
    validity = load_validity(profile)
    if validity is None or validity.measure != measure or validity.valid:
        return None
    return validity.reason()
