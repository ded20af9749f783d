"""``lab validate-context``: the per-prompt context measure judged on labelled documentation nobody
here wrote.

The validation builds these types itself (:func:`lab.health.context_validity.context_validation`); a figure that
is undefined is NaN in its own objects and null in the file (None when read)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.kinds import Kind
from lab.provenance import Environment, ModelSource

FITTED_HERE = "fitted on this set"  # a validation's reference_from when the reference was fitted on its own pairs


@dataclass(frozen=True)
class Figures:
    """One measure's figures against the bar on one paired set (:func:`lab.health.context_validity.validity_figures`).

    Attributes:
        measure: The measure's name.
        direction: +1 when a higher value means the relevant context, -1 when a lower one does.
        n_pairs: Pairs scored (a count).
        auroc: Paired AUROC, oriented by ``direction`` (a share of pairs, in [0, 1]).
        ci_low: Lower end of its 95 % bootstrap interval over pairs (in [0, 1]).
        ci_high: Upper end of that interval (in [0, 1]).
        length_auroc: Paired AUROC of the context's token count, the length-only control (in [0, 1]).
        placebo_auroc: Paired AUROC with each pair's labels swapped by a seeded fair coin (in [0, 1]).
        length_rho: Spearman's rho of the measure with the context's token count over the relevant prompts (in
            [-1, 1]); None where it is undefined (either is the same on every relevant prompt).
        end_share: Share of the 2n prompts at either end of the measure's scale (in [0, 1]).
        failed: The bars it misses, each in words (empty: it passes the bar).
    """

    measure: str
    direction: int
    n_pairs: int
    auroc: float
    ci_low: float
    ci_high: float
    length_auroc: float
    placebo_auroc: float
    length_rho: float | None
    end_share: float
    failed: tuple[str, ...]

    @property
    def passes(self) -> bool:
        """Whether every bar holds (:data:`lab.health.context_validity.BAR`)."""
        return not self.failed


@dataclass(frozen=True)
class Reference:
    """The chosen measure's fitted heads and length line (:func:`lab.health.context_validity.fit_head_reference`;
    :class:`lab.health.context_validity.HeadReference` adds the scoring).

    Attributes:
        heads: The kept heads, best first, each ``[layer, head]`` (0-based indices).
        intercept: The length line's intercept (lookback ratio, dimensionless).
        slope: The length line's slope per unit of ln(context tokens) (lookback ratio, dimensionless).
        n_pairs: Selection pairs it was fitted on (a count).
        loo_auroc: Its leave-one-out paired AUROC on those pairs (in [0, 1]).
    """

    heads: tuple[tuple[int, ...], ...]
    intercept: float
    slope: float
    n_pairs: int
    loo_auroc: float


@dataclass(frozen=True)
class Validation:
    """One model's context measures on one paired set (:func:`lab.health.context_validity.context_validation`;
    :class:`lab.health.context_validity.ContextValidation` adds the verdict).

    Attributes:
        profile: The model validated (its profile or path).
        set_name: ``selection``, ``validation``, ``heldback`` or ``pairs file``.
        items_file: The pairs file read.
        reference: The chosen measure's heads and length line.
        reference_from: Where the reference came from: :data:`FITTED_HERE` (the selection set; the chosen
            figures are then in-sample), else the file read.
        chosen: The chosen measure's figures.
        others: The raw candidates in both directions, today's context health and the length-only control.
        rows: Per pair, every prompt's measures (``pairs.csv``'s rows; a measure not defined on a prompt is
            None).
    """

    profile: str
    set_name: str
    items_file: str
    reference: Reference
    reference_from: str
    chosen: Figures
    others: tuple[Figures, ...]
    rows: tuple[dict[str, Any], ...]

    @property
    def fitted_here(self) -> bool:
        """Whether the reference was fitted on this set (then the chosen figures are in-sample)."""
        return self.reference_from == FITTED_HERE


@dataclass(frozen=True)
class Report:
    """``report.json`` of ``lab validate-context`` past its kind and format.

    Attributes:
        model: The model as loaded (:meth:`lab.models.source.ModelSource.as_dict`).
        environment: The machine, libraries and model (:func:`lab.reports.environment`).
        validation: The measures' figures on the set.
        verdict: One line: whether the chosen measure passes the bar here, and why not
            (:meth:`lab.health.context_validity.ContextValidation.verdict`).
    """

    model: ModelSource
    environment: Environment
    validation: Validation
    verdict: str


KIND = Kind("validate-context",
            listed=60,
            commands=("lab.commands.validate_context",),
            page="lab.views.kinds.validate_context",
            report=Report)
