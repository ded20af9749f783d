"""``lab calibrate-sinks``: the attention-sink threshold calibrated on a prompt set (``report.json``;
``calibration.json`` before format 1).

:class:`Report` is the file's shape past its kind and format; the calibration builds these types itself
(:func:`lab.sinks.calibration_report.calibration_report`, whose result keeps beside it what the file does not
hold) and the writer reads them through this one. Thresholds are on the statistic's own scale: a rate in
``[0, 1]`` for ``sink_rate``, a robust z for the others (:mod:`lab.sinks.candidates`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.kinds import Kind
from lab.provenance import Environment, ModelSource


@dataclass(frozen=True)
class Counts:
    """Raw counts at one threshold on one prompt set (:func:`lab.sinks.calibration.evaluate`).

    Attributes:
        position0_flagged: Prompts whose position 0 is flagged, prompts.
        n_prompts: Prompts scored.
        content_flagged: Observed content tokens flagged, tokens.
        n_content: Observed content tokens, tokens.
        trailing_flagged: Trailing content tokens flagged, tokens.
    """

    position0_flagged: int
    n_prompts: int
    content_flagged: int
    n_content: int
    trailing_flagged: int


@dataclass(frozen=True)
class Candidate:
    """One candidate statistic on this model (:func:`lab.sinks.calibration_report.candidate_calibrations`).

    Attributes:
        feasible: ``[lowest, highest]`` feasible threshold, the statistic's scale; None when none is.
        feasible_thresholds: Grid values meeting both criteria on the calibration prompts (short and long).
        chosen: The middle of that range, the statistic's scale; None when it is empty.
        counts: Counts at ``chosen`` on each non-empty prompt set (``calibration``, ``calibration_long``,
            ``held_out``, ``held_out_long``); empty when ``chosen`` is None.
        position0_lowest: The lowest position-0 score over the calibration prompts, the statistic's scale.
        content_highest: The highest observed content score there; None without content.
    """

    feasible: tuple[float, ...] | None
    feasible_thresholds: tuple[float, ...]
    chosen: float | None
    counts: dict[str, Counts]
    position0_lowest: float
    content_highest: float | None


@dataclass(frozen=True)
class Criteria:
    """What a feasible threshold must meet on the calibration prompts.

    Attributes:
        position0_min_rate: Least share of prompts whose position 0 is flagged (dimensionless, 0..1).
        content_max_rate: Share of observed content tokens flagged it must stay below (dimensionless, 0..1).
    """

    position0_min_rate: float
    content_max_rate: float


@dataclass(frozen=True)
class SweepRecord:
    """One threshold of the report's statistic's sweep (:class:`lab.sinks.calibration.SweepRow` and whether it
    is feasible); ``long_*``: the long prompts, 0 when none were scored.

    Attributes:
        threshold: The threshold, the statistic's scale.
        position0_flagged, n_prompts: Prompts whose position 0 is flagged, of prompts scored.
        content_flagged, n_content: Observed content tokens flagged, of those observed.
        long_position0_flagged, long_n_prompts, long_content_flagged, long_n_content: The same on the long prompts.
        feasible: Both criteria met (short and long prompts).
    """

    threshold: float
    position0_flagged: int
    n_prompts: int
    content_flagged: int
    n_content: int
    long_position0_flagged: int
    long_n_prompts: int
    long_content_flagged: int
    long_n_content: int
    feasible: bool


@dataclass(frozen=True)
class HeldOut:
    """The chosen threshold on the held-out prompts (raw counts, :func:`lab.sinks.calibration.evaluate`).

    Attributes:
        prompts: The held-out prompt file, as the report names it.
        threshold: The threshold checked (the report's ``chosen_threshold``), the statistic's scale.
        short: Counts on the held-out prompts.
        long: Counts on their long prompts; None when none were scored.
        long_n_tokens: Each long held-out prompt's length, tokens.
    """

    prompts: str
    threshold: float
    short: Counts
    long: Counts | None
    long_n_tokens: tuple[int, ...]


@dataclass(frozen=True)
class LongPrompt:
    """One long calibration prompt on the report's statistic (``*_at_chosen``: None without a threshold).

    Attributes:
        id: The prompt's id.
        n_tokens: Its length, tokens.
        position0_score: Position 0's score, the statistic's scale.
        max_content_score: The highest observed content score, the statistic's scale.
        n_content: Observed content tokens, tokens.
        content_flagged_at_chosen: Content tokens flagged at the chosen threshold, tokens.
        trailing_flagged_at_chosen: Trailing content tokens flagged there, tokens.
    """

    id: str
    n_tokens: int
    position0_score: float
    max_content_score: float
    n_content: int
    content_flagged_at_chosen: int | None
    trailing_flagged_at_chosen: int | None


@dataclass(frozen=True)
class MovesFrom:
    """The detector choice the rule's differs from (:class:`lab.sinks.profiles.DetectorChoice`).

    Attributes:
        statistic: Its statistic.
        default_threshold: Its default threshold, that statistic's scale.
        path: The file it was read from.
    """

    statistic: str
    default_threshold: float
    path: str


@dataclass(frozen=True)
class CrossModelChosen:
    """The statistic rule over every calibrated profile's recorded figures, when it chose
    (:func:`lab.sinks.calibration.choose_statistic`).

    Attributes:
        profiles: The profiles the rule read (sorted).
        chosen: The statistic it chooses.
        default_threshold: The default threshold for uncalibrated models, ``chosen``'s scale; None when the rule
            gives none.
        moves_from: The current choice when the rule's differs from it; None when it does not.
    """

    profiles: tuple[str, ...]
    chosen: str
    default_threshold: float | None
    moves_from: MovesFrom | None


@dataclass(frozen=True)
class CrossModelRefused:
    """The statistic rule when it chose nothing (no statistic feasible on every profile): the file holds no
    ``moves_from`` then.

    Attributes:
        profiles: The profiles the rule read (sorted).
        chosen: None.
        default_threshold: None.
    """

    profiles: tuple[str, ...]
    chosen: None
    default_threshold: None


@dataclass(frozen=True)
class Report:
    """``report.json`` of ``lab calibrate-sinks`` past its kind and format
    (:func:`lab.sinks.calibration_report.calibration_report` builds it).

    The headline figures are those of ``statistic``, the current detector choice's; ``candidates`` holds every
    statistic's.

    Attributes:
        model: The model's provenance (``ModelSource.as_dict``).
        environment: The machine, libraries and model (:func:`lab.reports.environment`).
        criteria: What a feasible threshold must meet.
        min_observers: Fewest observing queries a position needs to be scored, queries.
        statistic: The statistic the headline figures are of.
        statistics: Every candidate statistic swept (:data:`lab.sinks.candidates.STATISTICS`).
        candidates: Every candidate statistic's figures, by name.
        chosen_threshold: ``statistic``'s chosen threshold, its scale; None when no grid value is feasible.
        current_default_threshold: The current choice's default threshold, its scale.
        feasible_thresholds: ``statistic``'s feasible grid values, ascending.
        n_prompts: Calibration prompts.
        n_content_tokens: Their observed content tokens, tokens.
        position0_score_min: The lowest position-0 score of ``statistic`` there.
        content_score_max: The highest observed content score there; None without content.
        sweep: ``statistic``'s raw counts per threshold, ascending.
        trailing_fraction: The share of a prompt's content counted as trailing (dimensionless, 0..1).
        held_out: The chosen threshold on the held-out prompts; None without a threshold or a held-out set.
        long_prompts: The long calibration prompts.
        prompts: One row per calibration prompt: ``id``, ``n_tokens``, ``position0_<statistic>`` for every
            statistic, ``max_content_score`` (None without content) and ``n_content`` (as ``prompts.csv``).
        cross_model: The statistic rule across the calibrated profiles; None until one is calibrated.
        saved_to: The user's folder the profile file goes to (after the report); None when not saved.
    """

    model: ModelSource
    environment: Environment
    criteria: Criteria
    min_observers: int
    statistic: str
    statistics: tuple[str, ...]
    candidates: dict[str, Candidate]
    chosen_threshold: float | None
    current_default_threshold: float
    feasible_thresholds: tuple[float, ...]
    n_prompts: int
    n_content_tokens: int
    position0_score_min: float
    content_score_max: float | None
    sweep: tuple[SweepRecord, ...]
    trailing_fraction: float
    held_out: HeldOut | None
    long_prompts: tuple[LongPrompt, ...]
    prompts: tuple[dict[str, Any], ...]
    cross_model: CrossModelChosen | CrossModelRefused | None
    saved_to: str | None


KIND = Kind("calibrate-sinks",
            listed=40,
            commands=("lab.commands.calibrate_sinks",),
            page="lab.views.kinds.calibrate_sinks",
            older_file="calibration.json",
            report=Report)
