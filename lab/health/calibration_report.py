"""The report of ``lab calibrate-health`` as a type: prompt sets, scoring, the rule's choice (no rendering).

:func:`health_prompt_sets` checks the prompt sets and builds the variants before any model loads;
:func:`score_health_sets` runs one prefill per prompt (the clean length reference first,
then the calibration prompts and their poisoned and neutral variants, then, optionally,
the study prompts); :func:`health_report` applies the rule of :mod:`lab.health.measures`
(:func:`lab.health.calibration.calibrate`) and gathers what the report holds into the
kind's :class:`lab.kinds.calibrate_health.Report` (``report.json``); :func:`save_health_choice`
writes the choice and the length reference into the user's folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence

from lab.health.calibration import (FIT_FIGURES, N_CONTENT, calibrate, distractor_texts, fit_length_references,
                                    neutral_variants, poisoned_variants, score_candidates, study_set_figures)
from lab.health.choice import write_chosen
from lab.health.measures import CANDIDATES, CONTROLS, HealthInputs, LengthReference
from lab.health.references import reference_record, write_references
from lab.kinds.calibrate_health import Calibration, Report
from lab.provenance import Environment, ModelSource
from lab.prompts import CalibrationPrompt, StudyPrompt
from lab.prompts import load_prompts as load_study_prompts
from lab.user_dirs import check_calibration_dir

# How the report names the packaged files it read when no flag named another.
PACKAGED_CALIBRATION = "lab/data/calibration_prompts.jsonl"
PACKAGED_DISTRACTORS = "lab/data/prompts.jsonl"
PACKAGED_REFERENCE = "lab/data/length_reference.jsonl"


@dataclass(frozen=True)
class HealthPromptSets:
    """The prompts one health calibration scores, read and checked before any model loads.

    Attributes:
        clean: The clean calibration prompts.
        poisoned: One poisoned variant of each (``poisoned[i]`` of ``clean[i]``).
        neutral: One neutral variant of each, of the poisoned variant's added length.
        references: The clean length-reference prompts (none shared with ``clean``).
        study: The study prompts whose poisoned twins gave the distractors.
        prompts_file, distractors_file, reference_file: The files as the report names them.
    """

    clean: list[CalibrationPrompt]
    poisoned: list[CalibrationPrompt]
    neutral: list[CalibrationPrompt]
    references: list[CalibrationPrompt]
    study: list[StudyPrompt]
    prompts_file: str = PACKAGED_CALIBRATION
    distractors_file: str = PACKAGED_DISTRACTORS
    reference_file: str = PACKAGED_REFERENCE


def health_prompt_sets(clean: Sequence[CalibrationPrompt], references: Sequence[CalibrationPrompt], *,
                       distractors: str | None = None, neutral: str | None = None, prompts_file: str | None = None,
                       reference_file: str | None = None) -> HealthPromptSets:
    """Check the user's calibration folder and the clean calibration and length-reference prompts, read the
    study prompts, build the variants: everything a run needs before its minutes of prefills.

    Args:
        clean: The calibration prompts (read from ``prompts_file``; None: the packaged set).
        references: The clean length-reference prompts (read from ``reference_file``; None: the packaged one).
        distractors: Study prompt file whose poisoned twins supply the distractors (None: the embedded set).
        neutral: Neutral variants JSONL (None: the packaged one).
        prompts_file, reference_file: The files ``clean`` and ``references`` were read from, for the report.

    Raises:
        ValueError: ``$LAB_CALIBRATION_DIR`` naming a file (:func:`lab.user_dirs.check_calibration_dir`:
            ``--save`` writes there), ``references`` sharing a prompt with ``clean`` (the
            reference must be fitted on other prompts), a study file that cannot be read or has no
            poisoned twins, a missing neutral variant.
    """
    check_calibration_dir()
    shared = sorted({p.prompt for p in clean} & {p.prompt for p in references})
    if shared:
        raise ValueError(f"--reference-prompts shares {len(shared)} prompt(s) with the calibration prompts "
                         f"(e.g. {shared[0][:60]!r}): the reference must be fitted on other prompts")
    study = load_study_prompts(distractors)
    return HealthPromptSets(clean=list(clean), poisoned=poisoned_variants(clean, distractor_texts(study)),
                            neutral=neutral_variants(clean, neutral), references=list(references), study=study,
                            prompts_file=prompts_file or PACKAGED_CALIBRATION,
                            distractors_file=distractors or PACKAGED_DISTRACTORS,
                            reference_file=reference_file or PACKAGED_REFERENCE)


@dataclass(frozen=True)
class HealthScores:
    """What the prefills gave: every candidate's value per prompt, and the length reference fitted first.

    Attributes:
        values: ``{prompt id: {name: value, "n_content": N}}`` over clean, poisoned and neutral prompts
            (:func:`lab.health.calibration.score_candidates`, read against ``references``).
        inputs: Each of those prompts' :class:`HealthInputs` (the properties are checked on them too).
        reference_values: The same on the length-reference prompts.
        references: The length reference fitted on them, by base.
        reference_figures: The fit's figures (:func:`lab.health.calibration.fit_length_references`).
        study_values: The same on the study prompts; empty when not scored.
    """

    values: dict[str, dict[str, float]]
    inputs: dict[str, HealthInputs]
    reference_values: dict[str, dict[str, float]]
    references: dict[str, LengthReference]
    reference_figures: dict[str, Any]
    study_values: dict[str, dict[str, float]] = field(default_factory=dict)


def score_health_sets(analyze: Callable[[list[dict[str, str]]], Any], sets: HealthPromptSets, *,
                      study_set: bool = False,
                      progress: Callable[[str, int, int, str], None] | None = None) -> HealthScores:
    """One prefill per prompt: the clean length reference first (the ``*_for_length`` candidates read it),
    then the calibration prompts and their variants, then (``study_set``) the study prompts.

    Args:
        analyze: A prompt's chat messages to its prefill analysis (:func:`lab.sinks.prefill.analyze_prefill`
            bound to a model and its tokenizer).
        sets: :func:`health_prompt_sets`.
        study_set: Also score the study prompts.
        progress: Called before each prompt with ``(label, index, count, prompt id)``; the labels are
            ``"length-reference prompt"``, ``"prompt"`` and ``"study prompt"``.

    Raises:
        ValueError: as :func:`lab.health.calibration.fit_length_references`.
    """
    def step(label: str) -> Callable[[int, int, str], None] | None:
        return None if progress is None else (lambda i, n, pid: progress(label, i, n, pid))

    ref_values = score_candidates(analyze, sets.references, progress=step("length-reference prompt"))
    refs, ref_figures = fit_length_references(ref_values)
    inputs: dict[str, HealthInputs] = {}
    values = score_candidates(analyze, [*sets.clean, *sets.poisoned, *sets.neutral], keep_inputs=inputs,
                              length_reference=refs, progress=step("prompt"))
    study = score_candidates(analyze, sets.study, length_reference=refs, progress=step("study prompt")) \
        if study_set else {}
    return HealthScores(values=values, inputs=inputs, reference_values=ref_values, references=refs,
                        reference_figures=ref_figures, study_values=study)


@dataclass(frozen=True)
class HealthRun:
    """Everything a health report says besides the scores.

    Attributes:
        model: The model's provenance.
        environment: :func:`lab.reports.environment_record`.
        current_chosen: The measure in use now (:func:`lab.health.choice.load_chosen`).
        current_chosen_file: The file it was read from (:func:`lab.health.choice.chosen_path`).
        save_to: The user's file the choice goes to after the report; ``None``: not saved.
    """

    model: ModelSource
    environment: Environment
    current_chosen: str
    current_chosen_file: str
    save_to: str | None = None


def health_report(scores: HealthScores, sets: HealthPromptSets, run: HealthRun) -> Report:
    """The candidates' figures, the rule's choice and the length reference of one model: ``report.json``.

    ``saved_to`` is ``run.save_to`` when the rule chose a measure (nothing is saved otherwise);
    ``length_reference`` is the reference file's record (:func:`lab.health.references.reference_record`,
    ``fitted_at`` None until saved) with the fit's figures on the reference prompts added.
    """
    calibration = calibrate(scores.values, sets.clean, sets.poisoned, sets.neutral, scores.inputs)
    study = None
    if scores.study_values:
        study = {name: study_set_figures({k: v[name] for k, v in scores.study_values.items()}, sets.study)
                 for name in {**CANDIDATES, **CONTROLS}}
    profile = run.model.profile or run.model.model
    record = reference_record(profile, run.model.model, scores.references,
                              n_content=[int(v[N_CONTENT]) for v in scores.reference_values.values()],
                              prompts_file=sets.reference_file, fitted_at=None)
    return Report(
        **{f.name: getattr(calibration, f.name) for f in fields(Calibration)},
        study_set=study, study_set_file=sets.distractors_file if study is not None else None,
        length_reference={**record, **scores.reference_figures}, model=run.model, environment=run.environment,
        prompts_file=sets.prompts_file, distractors_file=sets.distractors_file, n_clean=len(sets.clean),
        current_chosen=run.current_chosen, current_chosen_file=run.current_chosen_file,
        saved_to=run.save_to if calibration.chosen is not None else None)


def save_health_choice(report: Report) -> tuple[Path, Path]:
    """Write the model's length reference and the rule's choice into the user's folder, each atomically.

    The reference written is the record inside the report's ``length_reference``: all of it but the fit's
    figures (:data:`FIT_FIGURES`; their ``n_prompts`` and ``n_content_range`` are the record's own), with
    ``fitted_at`` the report's time.

    Returns:
        ``(reference path, choice path)``.

    Raises:
        ValueError: the rule chose nothing.
        OSError: the user's folder cannot be written.
    """
    if report.chosen is None:
        raise ValueError("the rule chose no measure on this model: nothing to save")
    created = report.environment.created
    record = {k: v for k, v in report.length_reference.items() if k != FIT_FIGURES}
    ref_path = write_references({**record, "fitted_at": created})
    path = write_chosen(report.chosen, decided_by=report.decided_by, model=report.model.model, chosen_at=created)
    return ref_path, path
