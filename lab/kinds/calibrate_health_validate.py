"""``lab calibrate-health --validate``: the context-health measure judged on labelled text
(``report.json``; ``validation.json`` before format 1); written by the calibrate-health command, so it
lists no command of its own.

:class:`Report` is the file's shape past its kind and format; the validation builds these types itself
(:func:`lab.health.validation.validation_report`) and the writer reads them through this one. A figure that could
not be computed (too few measurable prompts, no spread) is NaN in the validation's own objects and null in the
file (None when read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.kinds import Kind
from lab.provenance import Environment, ModelSource


@dataclass(frozen=True)
class Bars:
    """The bars a measure is judged by (:mod:`lab.health.validation`).

    Attributes:
        max_length_rho: Largest ``|Spearman rho(health, N)|`` a length-neutral measure may show (dimensionless).
        max_saturated_share: Largest share of measurable prompts at an end of the 0..10 scale (dimensionless, 0..1).
        end_margin: How near 0 or 10 a value is at an end of the scale (health units, 0..10).
        min_measurable: Fewest measurable prompts a verdict needs, prompts.
    """

    max_length_rho: float
    max_saturated_share: float
    end_margin: float
    min_measurable: int


@dataclass(frozen=True)
class Figures:
    """One measure's drift with length and saturation on the validation prompts
    (:func:`lab.health.validation.validation_figures`: the figures and the verdicts they give).

    Attributes:
        name: The measure.
        n: Prompts scored.
        n_measurable: Prompts with a finite value.
        rho: Spearman correlation of the value with the content length N (dimensionless, -1..1); None when it
            could not be computed.
        p: Its two-sided p-value (0..1); None with ``rho``.
        low_share, high_share: Shares of the measurable prompts within ``end_margin`` of 0 and of 10 (0..1).
        low, median, high: The values' range and median over the measurable prompts (health units, 0..10);
            None with none measurable.
        control: A negative control (must not be valid).
        saturated_share: ``low_share + high_share`` (0..1).
        length_neutral: ``|rho| <= max_length_rho``.
        unsaturated: ``saturated_share <= max_saturated_share`` on at least one measurable prompt.
        valid: Both bars met, on at least ``min_measurable`` measurable prompts.
    """

    name: str
    n: int
    n_measurable: int
    rho: float | None
    p: float | None
    low_share: float
    high_share: float
    low: float | None
    median: float | None
    high: float | None
    control: bool
    saturated_share: float
    length_neutral: bool
    unsaturated: bool
    valid: bool


@dataclass(frozen=True)
class Report:
    """``report.json`` of ``lab calibrate-health --validate`` past its kind and format
    (:meth:`lab.health.validation.HealthValidationReport.to_json`).

    Attributes:
        measure: The lab's context health on this model (the chosen candidate).
        valid: Whether it meets both bars here.
        bars: The bars.
        figures: The measure's figures.
        by_source: Its figures within each source package of the validation set, by source.
        candidates: Every candidate's and control's figures, by name, from the same prefills.
        valid_candidates: The candidates (controls excluded) that meet both bars.
        prompts: Per prompt ``{"id", "source", name: value (None: not measurable) ..., "n_content"}`` (as
            ``prompts.csv``).
        model: The model's provenance (``ModelSource.as_dict``).
        environment: The machine, libraries and model (:func:`lab.reports.environment`).
        prompts_file: The validation set, as the report names it.
        reference_file: The length-reference file the ``*_for_length`` candidates read; None: none.
    """

    measure: str
    valid: bool
    bars: Bars
    figures: Figures
    by_source: dict[str, Figures]
    candidates: dict[str, Figures]
    valid_candidates: tuple[str, ...]
    prompts: tuple[dict[str, Any], ...]
    model: ModelSource
    environment: Environment
    prompts_file: str
    reference_file: str | None


KIND = Kind("calibrate-health-validate", listed=55, page="lab.views.kinds.calibrate_health_validate",
            older_file="validation.json", report=Report)
