"""``lab calibrate-health``: the context-health candidates evaluated on the calibration prompts, one
chosen (``report.json``; ``calibration.json`` before format 1).

:class:`Report` is the file's shape past its kind and format; the calibration builds these types itself
(:func:`lab.health.calibration.calibrate`, :func:`lab.health.calibration_report.health_report`) and the writer
reads them through this one (the kind has no page of its own). Health values are on the 0..10 scale; a figure of
values that were not measurable is NaN in the calibration's own objects and null in the file (None when read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.kinds import Kind
from lab.provenance import Environment, ModelSource
from lab.typed import may_be_absent


@dataclass(frozen=True)
class Candidate:
    """One candidate (or control) on the calibration set (:func:`lab.health.calibration.figures`; its values per
    prompt are the report's ``prompts``).

    Attributes:
        name: The measure.
        properties: The six properties (five on random inputs, ``length_neutral`` on the calibration prompts).
        iqr: Interquartile range of its values over the clean prompts (health units, 0..10).
        std: Their standard deviation (health units).
        n_distinct: Distinct values there (to 0.01).
        max_tie_share: The largest share of clean prompts sharing one value (dimensionless, 0..1).
        n_pairs_below: Poisoned variants strictly below their neutral twin, pairs.
        n_pairs_tied: Poisoned variants tied with their neutral twin (to 0.01), pairs.
        n_pairs_below_clean: Poisoned variants strictly below their clean prompt, pairs.
        n_pairs: Calibration prompts with both variants, pairs.
        length_rho: Spearman rho of the values with content length N, clean and neutral prompts (-1..1).
        control: A negative control (a measure of length alone; the rule must reject it).
        eligible: All six properties hold.
        admissible: Eligible, every poisoned variant below its neutral twin, ties within the bar.
        median, min, max: The values' median and range over the clean prompts (health units, 0..10).
    """

    name: str
    properties: dict[str, bool]
    iqr: float | None
    std: float | None
    n_distinct: int
    max_tie_share: float
    n_pairs_below: int
    n_pairs_tied: int
    n_pairs_below_clean: int
    n_pairs: int
    length_rho: float | None
    control: bool
    eligible: bool
    admissible: bool
    median: float | None
    min: float | None
    max: float | None


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """The candidates' figures and the rule's choice on the calibration prompts: the head of ``report.json``
    (:func:`lab.health.calibration.calibrate` builds it; :class:`Report` adds the run's record).

    Attributes:
        rule: The rule as stated before the run (:data:`lab.health.calibration.RULE`).
        chosen: The measure the rule chooses on this model; None when it chooses nothing.
        decided_by: Which step of the rule decided, or why it chose nothing.
        length_rho_tolerance: The length-neutral bar on ``|Spearman rho|`` (dimensionless).
        controls_rejected: Each control: whether the rule rejected it (not admissible and not chosen).
        candidates: Every candidate, then every control.
        prompts: Per prompt ``{"id", "variant", name: value (None: not measurable) ..., "n_content"}``, clean,
            poisoned and neutral (as ``prompts.csv``).
        properties_on_prompts: Every candidate's five properties on this model's own prefills, and the counts
            they were checked on; absent when not checked (the command always checks them).
        chosen_holds_on_prompts: Whether the choice holds all five there; None when nothing was chosen (or not
            checked). Written whenever ``properties_on_prompts`` is.
    """

    rule: str
    chosen: str | None
    decided_by: str
    length_rho_tolerance: float
    controls_rejected: dict[str, bool]
    candidates: tuple[Candidate, ...]
    prompts: tuple[dict[str, Any], ...]
    properties_on_prompts: dict[str, dict[str, Any]] | None = may_be_absent()
    # Not may_be_absent: the file holds null here when nothing was chosen. The command writes the two keys
    # together, always; a file with neither (a report of calibrate() without prefills) is written with a null.
    chosen_holds_on_prompts: bool | None = None


@dataclass(frozen=True, kw_only=True)
class Report(Calibration):
    """``report.json`` of ``lab calibrate-health`` past its kind and format: the :class:`Calibration`'s fields,
    then these (:func:`lab.health.calibration_report.health_report` builds it).

    Attributes:
        study_set: The ranking targets of every candidate and control on the study prompts, by name
            (:func:`lab.health.calibration.study_set_figures`); absent when not scored (``--study-set``).
        study_set_file: The study prompt file; absent with ``study_set``.
        length_reference: The clean length reference fitted on the reference prompts and the fit's figures
            (:func:`lab.health.references.reference_record`; ``fitted_at`` None until saved).
        model: The model's provenance (``ModelSource.as_dict``).
        environment: The machine, libraries and model (:func:`lab.reports.environment`).
        prompts_file: The calibration prompt file, as the report names it.
        distractors_file: The study prompt file whose poisoned twins gave the distractors.
        n_clean: Clean calibration prompts.
        current_chosen: The measure in use before this run.
        current_chosen_file: The file it was read from.
        saved_to: Where the choice goes after the report; None when not saved (or nothing was chosen).
    """

    study_set: dict[str, dict[str, Any]] | None = may_be_absent()
    study_set_file: str | None = may_be_absent()
    length_reference: dict[str, Any]
    model: ModelSource
    environment: Environment
    prompts_file: str
    distractors_file: str
    n_clean: int
    current_chosen: str
    current_chosen_file: str
    saved_to: str | None


KIND = Kind("calibrate-health", listed=50, commands=("lab.commands.calibrate_health",),
            older_file="calibration.json", report=Report)
