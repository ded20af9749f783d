"""The report of ``lab calibrate-sinks`` as a type, built from the scored prompt sets (no rendering).

:func:`score_sets` runs one prefill per prompt of each set; :func:`calibration_report` turns the scores of the four prompt sets (calibration, its long
prompts, held-out, its long prompts; :func:`lab.sinks.calibration.score_prompts`) into a
:class:`SinkCalibrationReport`: every candidate statistic's sweep, feasible range and chosen
threshold (:func:`lab.sinks.calibration.sweep_candidates`), the counts there on every set,
and the cross-profile rule (:func:`lab.sinks.calibration.choose_statistic`) over the
profiles' recorded figures. :meth:`SinkCalibrationReport.to_json` is the one conversion to
``report.json`` (its keys are the file's), :meth:`SinkCalibrationReport.profile_record`
the profile file :func:`lab.sinks.profiles.write_calibration` writes, and
:func:`save_calibration` writes that file and the rule's choice into the user's folder.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch

from lab.reports import to_jsonable
from lab.prompts import CalibrationPrompt
from lab.sinks.calibration import (CONTENT_MAX_RATE, POSITION0_MIN_RATE, TRAILING_FRACTION, PromptScores, SweepRow,
                                   choose_statistic, evaluate, long_prompts, score_prompts, sweep_candidates)
from lab.sinks.candidates import STATISTICS
from lab.sinks.prefill import MIN_OBSERVING_QUERIES
from lab.sinks.profiles import DetectorChoice, migrate_statistic, write_calibration, write_choice
from lab.user_dirs import check_calibration_dir

# Which prompt set each candidate's counts are on, in the report's order.
COUNT_SETS = ("calibration", "calibration_long", "held_out", "held_out_long")


@dataclass(frozen=True)
class ScoredSets:
    """The scores of the four prompt sets one calibration reads (each possibly empty but ``calibration``).

    Attributes:
        calibration: The calibration prompts (the sweep and the choice read these).
        calibration_long: Long uniform prompts built from their text (also in the sweep).
        held_out: The held-out prompts (check the choice; never enter it).
        held_out_long: Long prompts built from the held-out text.
    """

    calibration: Sequence[PromptScores]
    calibration_long: Sequence[PromptScores] = ()
    held_out: Sequence[PromptScores] = ()
    held_out_long: Sequence[PromptScores] = ()


def score_sets(model: Any, tokenizer: Any, prompts: Sequence[CalibrationPrompt],
               held_out: Sequence[CalibrationPrompt], lengths: Sequence[int], *,
               progress: Callable[[str, int, int, str], None] | None = None) -> ScoredSets:
    """Score the calibration and held-out prompts and the long prompts built from each (one prefill per prompt).

    Args:
        model, tokenizer: As :func:`lab.sinks.calibration.score_prompts` takes them.
        prompts: The calibration prompts.
        held_out: The held-out prompts (may be empty: no held-out check).
        lengths: Long prompts' lengths in tokens (:func:`lab.sinks.calibration.long_prompts`; empty: none).
        progress: Called before each prompt with ``(set label, index, count, prompt id)``; the
            labels are ``"prompt"``, ``"long prompt"``, ``"held-out prompt"`` and ``"held-out long prompt"``.

    Raises:
        ValueError: ``$LAB_CALIBRATION_DIR`` naming a file, before any prompt is scored
            (:func:`lab.user_dirs.check_calibration_dir`: the calibration is saved there).
    """
    check_calibration_dir()

    def score(label: str, items: Sequence[CalibrationPrompt]) -> list[PromptScores]:
        report = None if progress is None else (lambda i, n, pid: progress(label, i, n, pid))
        return score_prompts(model, tokenizer, items, progress=report)

    return ScoredSets(calibration=score("prompt", prompts),
                      calibration_long=score("long prompt", long_prompts(tokenizer, lengths, prompts)),
                      held_out=score("held-out prompt", held_out),
                      held_out_long=score("held-out long prompt",
                                          long_prompts(tokenizer, lengths, held_out) if held_out else []))


@dataclass(frozen=True)
class CandidateCalibration:
    """One candidate statistic on this model: its feasible thresholds, chosen threshold and counts there.

    Attributes:
        feasible_thresholds: Grid values meeting both criteria on the calibration prompts (short and long).
        chosen: The middle of that range (:func:`lab.sinks.calibration.choose_threshold`); ``None`` when empty.
        counts: ``{set: evaluate(...)}`` at ``chosen`` for each non-empty set of :data:`COUNT_SETS`
            (:func:`lab.sinks.calibration.evaluate`); empty when ``chosen`` is None.
        position0_lowest: The lowest position-0 score over the calibration prompts.
        content_highest: The highest observed content score there; ``None`` without content.
    """

    feasible_thresholds: tuple[float, ...]
    chosen: float | None
    counts: dict[str, dict[str, int]]
    position0_lowest: float
    content_highest: float | None

    @property
    def feasible(self) -> tuple[float, float] | None:
        """``(lowest, highest)`` feasible threshold, ``None`` when none is."""
        return (min(self.feasible_thresholds), max(self.feasible_thresholds)) if self.feasible_thresholds else None

    def to_json(self) -> dict[str, Any]:
        """The entry under ``candidates`` in ``report.json`` and in the profile file."""
        return {"feasible": list(self.feasible) if self.feasible else None,
                "feasible_thresholds": list(self.feasible_thresholds), "chosen": self.chosen,
                "counts": self.counts, "position0_lowest": self.position0_lowest,
                "content_highest": self.content_highest}


@dataclass(frozen=True)
class CrossModelChoice:
    """The statistic rule over every calibrated profile's recorded figures.

    Attributes:
        profiles: The profiles the rule read (sorted).
        chosen: The statistic it chooses; ``None`` when no statistic is feasible on all of them.
        default_threshold: The default threshold for uncalibrated models; ``None`` with ``chosen``.
        moves_from: The current choice (:func:`lab.sinks.profiles.load_choice`) when the rule's
            differs from it, else ``None``.
        refused: Why the rule chose nothing (its ``ValueError``); ``None`` when it chose.
    """

    profiles: tuple[str, ...]
    chosen: str | None
    default_threshold: float | None
    moves_from: DetectorChoice | None = None
    refused: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``cross_model`` entry of ``report.json`` (no ``moves_from`` when the rule chose nothing)."""
        out: dict[str, Any] = {"profiles": list(self.profiles), "chosen": self.chosen,
                               "default_threshold": self.default_threshold}
        if self.chosen is not None:
            m = self.moves_from
            out["moves_from"] = None if m is None else {"statistic": m.statistic,
                                                        "default_threshold": m.default_threshold, "path": m.path}
        return out


@dataclass(frozen=True)
class HeldOutCheck:
    """The chosen threshold on the held-out prompts (raw counts, :func:`lab.sinks.calibration.evaluate`).

    Attributes:
        prompts: The held-out prompt file, as the report names it.
        threshold: The threshold checked (the report's ``chosen_threshold``).
        short: Counts on the held-out prompts.
        long: Counts on their long prompts; ``None`` when none were scored.
        long_n_tokens: Each long held-out prompt's length in tokens.
    """

    prompts: str
    threshold: float
    short: dict[str, int]
    long: dict[str, int] | None
    long_n_tokens: tuple[int, ...]


@dataclass(frozen=True)
class LongPromptFigures:
    """One long calibration prompt on the report's statistic (``*_at_chosen``: ``None`` without a threshold)."""

    id: str
    n_tokens: int
    position0_score: float
    max_content_score: float
    n_content: int
    content_flagged_at_chosen: int | None
    trailing_flagged_at_chosen: int | None


@dataclass(frozen=True)
class PromptFigures:
    """One calibration prompt: its length, position 0's score on every candidate and its highest content score.

    Attributes:
        position0: ``{statistic: position 0's score}`` for every candidate of :data:`STATISTICS`.
        max_content_score: On the report's statistic; ``None`` without observed content.
    """

    id: str
    n_tokens: int
    position0: dict[str, float]
    max_content_score: float | None
    n_content: int

    def to_json(self) -> dict[str, Any]:
        """One row of ``prompts`` in ``report.json`` and of ``prompts.csv``."""
        return {"id": self.id, "n_tokens": self.n_tokens, **{f"position0_{k}": v for k, v in self.position0.items()},
                "max_content_score": self.max_content_score, "n_content": self.n_content}


@dataclass(frozen=True)
class SinkCalibrationReport:
    """What ``lab calibrate-sinks`` found on one model (``report.json``, :meth:`to_json`).

    The headline figures are those of ``statistic``, the current choice's
    (:func:`lab.sinks.profiles.load_choice`); ``candidates`` holds every statistic's.

    Attributes:
        model: The model's provenance as reports write it (``ModelSource.as_dict``).
        environment: :func:`lab.reports.environment` at the run.
        statistic: The statistic the headline figures are of.
        candidates: Every candidate of :data:`STATISTICS`, by name.
        chosen_threshold: ``statistic``'s chosen threshold; ``None`` when no grid value is feasible.
        current_default_threshold: The current choice's default threshold.
        feasible_thresholds: ``statistic``'s feasible grid values.
        n_prompts, n_content_tokens: Calibration prompts and their observed content tokens.
        position0_score_min: The lowest position-0 score of ``statistic`` there.
        content_score_max: The highest observed content score there; ``None`` without content.
        sweep: ``statistic``'s raw counts per threshold (:class:`lab.sinks.calibration.SweepRow`).
        held_out: The chosen threshold on the held-out prompts; ``None`` without a threshold or a held-out set.
        long_prompts: The long calibration prompts.
        prompts: The calibration prompts.
        cross_model: The statistic rule across the calibrated profiles; ``None`` until one is calibrated.
        saved_to: The user's folder the profile file goes to (after the report); ``None`` when not saved.
        n_held_out: Held-out prompts scored (for the profile file).
        long_lengths: The long prompts' requested lengths in tokens (for the profile file).
        position0_min_rate, content_max_rate, min_observers, statistics, trailing_fraction: The
            criteria and settings the run used.
    """

    model: dict[str, Any]
    environment: dict[str, Any]
    statistic: str
    candidates: dict[str, CandidateCalibration]
    chosen_threshold: float | None
    current_default_threshold: float
    feasible_thresholds: tuple[float, ...]
    n_prompts: int
    n_content_tokens: int
    position0_score_min: float
    content_score_max: float | None
    sweep: tuple[SweepRow, ...]
    held_out: HeldOutCheck | None
    long_prompts: tuple[LongPromptFigures, ...]
    prompts: tuple[PromptFigures, ...]
    cross_model: CrossModelChoice | None
    saved_to: str | None
    n_held_out: int
    long_lengths: tuple[int, ...]
    position0_min_rate: float = POSITION0_MIN_RATE
    content_max_rate: float = CONTENT_MAX_RATE
    min_observers: int = MIN_OBSERVING_QUERIES
    statistics: tuple[str, ...] = field(default=tuple(STATISTICS))
    trailing_fraction: float = TRAILING_FRACTION

    @property
    def criteria(self) -> dict[str, float]:
        return {"position0_min_rate": self.position0_min_rate, "content_max_rate": self.content_max_rate}

    def sweep_rows(self) -> list[dict[str, Any]]:
        """``sweep`` as rows of ``report.json`` and ``sweep.csv`` (raw counts and ``feasible``)."""
        return [{**asdict(r), "feasible": r.feasible} for r in self.sweep]

    def prompt_rows(self) -> list[dict[str, Any]]:
        """``prompts`` as rows of ``report.json`` and ``prompts.csv``."""
        return [p.to_json() for p in self.prompts]

    def to_json(self) -> dict[str, Any]:
        """``report.json``: the report's fields under the file's keys, in its order (the shape
        :class:`lab.kinds.calibrate_sinks.Report` declares; the writer reads it through that type)."""
        held = self.held_out
        return {
            "kind": "calibrate-sinks", "model": self.model, "environment": self.environment,
            "criteria": self.criteria, "min_observers": self.min_observers, "statistic": self.statistic,
            "statistics": list(self.statistics),
            "candidates": {k: c.to_json() for k, c in self.candidates.items()},
            "chosen_threshold": self.chosen_threshold, "current_default_threshold": self.current_default_threshold,
            "feasible_thresholds": list(self.feasible_thresholds), "n_prompts": self.n_prompts,
            "n_content_tokens": self.n_content_tokens, "position0_score_min": self.position0_score_min,
            "content_score_max": self.content_score_max, "sweep": self.sweep_rows(),
            "trailing_fraction": self.trailing_fraction,
            "held_out": None if held is None else {"prompts": held.prompts, "threshold": held.threshold,
                                                   "short": held.short, "long": held.long,
                                                   "long_n_tokens": list(held.long_n_tokens)},
            "long_prompts": [asdict(p) for p in self.long_prompts],
            "prompts": self.prompt_rows(),
            "cross_model": None if self.cross_model is None else self.cross_model.to_json(),
            "saved_to": self.saved_to,
        }

    def profile_record(self, profile: str) -> dict[str, Any]:
        """The profile file :func:`lab.sinks.profiles.write_calibration` writes (layout: :mod:`lab.sinks.profiles`).

        ``load_average`` is the machine's at the call (``None`` where the OS has none).
        """
        candidates = {k: c.to_json() for k, c in self.candidates.items()}
        record = {"profile": profile, "model": self.model, "statistic": self.statistic,
                  "thresholds": {k: c.chosen for k, c in self.candidates.items()}, "candidates": candidates,
                  "criteria": self.criteria, "n_prompts": self.n_prompts, "n_held_out": self.n_held_out,
                  "long_lengths": list(self.long_lengths), "calibrated_at": self.environment.get("created"),
                  "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
        return json.loads(json.dumps(to_jsonable(record), allow_nan=False))


@dataclass(frozen=True)
class CalibrationRun:
    """Where a calibration's scores came from and where its result goes (everything but the scores).

    Attributes:
        model: The model's provenance as reports write it (``ModelSource.as_dict``).
        environment: :func:`lab.reports.environment`.
        choice: The current detector choice (:func:`lab.sinks.profiles.load_choice`): the report's statistic.
        held_out_file: The held-out prompt file as the report names it.
        long_lengths: The long prompts' requested lengths.
        recorded: ``{profile: {statistic: feasible thresholds}}`` already on file
            (:func:`lab.sinks.profiles.recorded_feasible`).
        save_as: The profile this run's calibration is saved as (it then joins ``recorded``); ``None``: not saved.
        saved_to: The user's folder it goes to; ``None`` when not saved.
    """

    model: dict[str, Any]
    environment: dict[str, Any]
    choice: DetectorChoice
    held_out_file: str
    long_lengths: tuple[int, ...]
    recorded: Mapping[str, Mapping[str, Sequence[float]]]
    save_as: str | None = None
    saved_to: str | None = None


def candidate_calibrations(res: Mapping[str, Mapping[str, Any]], scored: ScoredSets) -> dict[str, CandidateCalibration]:
    """Every candidate's feasible range, chosen threshold and counts there (calibration and held-out sets).

    Args:
        res: :func:`lab.sinks.calibration.sweep_candidates` on ``scored.calibration`` (and its long prompts).
        scored: The four sets' scores.
    """
    sets = dict(zip(COUNT_SETS, (scored.calibration, scored.calibration_long, scored.held_out, scored.held_out_long)))
    out = {}
    for name, r in res.items():
        t = r["chosen"]
        counts = {} if t is None else {label: evaluate([s.using(name) for s in sc], t)
                                        for label, sc in sets.items() if sc}
        content = [s.using(name).candidate_content_scores for s in scored.calibration]
        out[name] = CandidateCalibration(
            feasible_thresholds=tuple(r["feasible"]), chosen=t, counts=counts,
            position0_lowest=min(s.using(name).position0_score for s in scored.calibration),
            content_highest=max((float(c.max()) for c in content if c.numel()), default=None))
    return out


def cross_model_choice(feasible: Mapping[str, Mapping[str, Sequence[float]]],
                       current: DetectorChoice) -> CrossModelChoice | None:
    """The statistic rule (:func:`lab.sinks.calibration.choose_statistic`) over ``feasible``; None when empty.

    ``moves_from`` is ``current`` when the rule's statistic or default threshold differs from it.
    """
    if not feasible:
        return None
    try:
        chosen, default = choose_statistic({k: dict(v) for k, v in feasible.items()})
    except ValueError as exc:
        return CrossModelChoice(profiles=tuple(sorted(feasible)), chosen=None, default_threshold=None, refused=str(exc))
    moves = (chosen, default) != (current.statistic, current.default_threshold)
    return CrossModelChoice(profiles=tuple(sorted(feasible)), chosen=chosen, default_threshold=default,
                            moves_from=current if moves else None)


def calibration_report(scored: ScoredSets, run: CalibrationRun) -> SinkCalibrationReport:
    """Sweep every candidate on the calibration scores, choose each one's threshold, check it, apply the rule.

    The headline is ``run.choice``'s statistic; an infeasible set still gets its report
    (``chosen_threshold`` None). When ``run.save_as`` names a profile, this run's feasible
    thresholds join the recorded ones before the cross-profile rule is applied.

    Raises:
        ValueError: no calibration scores.
    """
    if not scored.calibration:
        raise ValueError("scored.calibration holds no prompt's scores")
    statistic = run.choice.statistic
    res = sweep_candidates(scored.calibration, scored.calibration_long)
    chosen = res[statistic]["chosen"]
    candidates = candidate_calibrations(res, scored)
    feasible = {k: {s: list(v) for s, v in f.items()} for k, f in run.recorded.items()}
    if run.save_as is not None:
        feasible[run.save_as] = {k: list(c.feasible_thresholds) for k, c in candidates.items()}
    content = torch.cat([s.candidate_content_scores for s in scored.calibration])
    held, held_long = scored.held_out, scored.held_out_long
    return SinkCalibrationReport(
        model=run.model, environment=run.environment, statistic=statistic, candidates=candidates,
        chosen_threshold=chosen, current_default_threshold=run.choice.default_threshold,
        feasible_thresholds=tuple(res[statistic]["feasible"]), n_prompts=len(scored.calibration),
        n_content_tokens=int(content.numel()),
        position0_score_min=min(s.position0_score for s in scored.calibration),
        content_score_max=float(content.max()) if content.numel() else None,
        sweep=tuple(res[statistic]["rows"]),
        held_out=None if chosen is None or not held else HeldOutCheck(
            prompts=run.held_out_file, threshold=chosen, short=evaluate(held, chosen),
            long=evaluate(held_long, chosen) if held_long else None,
            long_n_tokens=tuple(int(s.score.numel()) for s in held_long)),
        long_prompts=tuple(_long_figures(s, chosen) for s in scored.calibration_long),
        prompts=tuple(PromptFigures(
            id=s.id, n_tokens=int(s.score.numel()), position0={k: float(s.scores[k][0]) for k in STATISTICS},
            max_content_score=(float(s.candidate_content_scores.max()) if s.candidate_content_scores.numel()
                               else None),
            n_content=int(s.candidate_content_scores.numel())) for s in scored.calibration),
        cross_model=cross_model_choice(feasible, run.choice), saved_to=run.saved_to,
        n_held_out=len(held), long_lengths=tuple(run.long_lengths))


def _long_figures(s: PromptScores, chosen: float | None) -> LongPromptFigures:
    return LongPromptFigures(
        id=s.id, n_tokens=int(s.score.numel()), position0_score=s.position0_score,
        max_content_score=float(s.candidate_content_scores.max()), n_content=int(s.candidate_content_scores.numel()),
        content_flagged_at_chosen=int((s.candidate_content_scores > chosen).sum()) if chosen is not None else None,
        trailing_flagged_at_chosen=s.trailing_flagged(chosen) if chosen is not None else None)


def save_calibration(report: SinkCalibrationReport, profile: str, *, packaged_statistic: str,
                     note: Callable[[str], None] = lambda message: None) -> None:
    """Write the profile's calibration, then the rule's choice (and migrate each profile file's ``statistic``
    when the choice moves), into the user's folder, each file atomically; never into the package.

    Args:
        report: The run's report (its ``cross_model`` is the rule's choice).
        profile: The profile the calibration is saved as.
        packaged_statistic: The current choice's statistic (a different choice migrates the profile files).
        note: Receives one line per file written (the command prints them on stderr).

    Raises:
        OSError: the user's folder cannot be written.
    """
    path = write_calibration(profile, report.profile_record(profile))
    note(f"calibration written: {path}")
    cross = report.cross_model
    if cross is None or cross.chosen is None:
        return
    chosen, default = cross.chosen, cross.default_threshold
    at = report.environment.get("created")
    path = write_choice(chosen, default, cross.profiles, chosen_at=at)
    note(f"detector choice written: {path} ({chosen}, default {default:g})")
    if chosen != packaged_statistic:
        reason = (f"the cross-profile rule (lab.sinks.calibration.choose_statistic) chose {chosen} over the "
                  f"profiles' recorded feasible thresholds ({', '.join(cross.profiles)}); this file's "
                  f"thresholds.{chosen} comes from the same sweep")
        for name in cross.profiles:
            migrate_statistic(name, chosen, reason=reason, at=at or "")
