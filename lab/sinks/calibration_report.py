"""The report of ``lab calibrate-sinks`` as a type, built from the scored prompt sets (no rendering).

:func:`score_sets` runs one prefill per prompt of each set; :func:`calibration_report` turns the scores of the four prompt sets (calibration, its long
prompts, held-out, its long prompts; :func:`lab.sinks.calibration.score_prompts`) into a
:class:`SinkCalibrationReport`: every candidate statistic's sweep, feasible range and chosen
threshold (:func:`lab.sinks.calibration.sweep_candidates`), the counts there on every set,
and the cross-profile rule (:func:`lab.sinks.calibration.choose_statistic`) over the
profiles' recorded figures. Its ``report`` is ``report.json`` as the kind's type
(:class:`lab.kinds.calibrate_sinks.Report`, built here, its fields declared there once),
:meth:`SinkCalibrationReport.profile_record` the profile file
:func:`lab.sinks.profiles.write_calibration` writes, and :func:`save_calibration` writes that
file and the rule's choice into the user's folder.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from lab.kinds.calibrate_sinks import (Candidate, Counts, Criteria, CrossModelChosen, CrossModelRefused, HeldOut,
                                      LongPrompt, MovesFrom, Report, SweepRecord)
from lab.provenance import Environment, ModelSource
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
class SinkCalibrationReport:
    """What ``lab calibrate-sinks`` found on one model: ``report.json`` as the kind's type, and what the run keeps
    beside it (its rates, the rule's reason, the profile file's counts).

    The headline figures (``report``'s) are those of ``report.statistic``, the current choice's
    (:func:`lab.sinks.profiles.load_choice`); ``report.candidates`` holds every statistic's.

    Attributes:
        report: ``report.json`` past its kind and format (:class:`lab.kinds.calibrate_sinks.Report`).
        sweep: ``report.statistic``'s raw counts per threshold with their rates
            (:class:`lab.sinks.calibration.SweepRow`, for the table and the plot; ``report.sweep`` holds the same
            counts as the file does).
        refused: Why the cross-profile rule chose nothing (its ``ValueError``); ``None`` when it chose, or when no
            profile was calibrated.
        n_held_out: Held-out prompts scored (for the profile file).
        long_lengths: The long prompts' requested lengths in tokens (for the profile file).
    """

    report: Report
    sweep: tuple[SweepRow, ...]
    refused: str | None
    n_held_out: int
    long_lengths: tuple[int, ...]

    def profile_record(self, profile: str) -> dict[str, Any]:
        """The profile file :func:`lab.sinks.profiles.write_calibration` writes (layout: :mod:`lab.sinks.profiles`).

        ``load_average`` is the machine's at the call (``None`` where the OS has none).
        """
        r = self.report
        record = {"profile": profile, "model": r.model, "statistic": r.statistic,
                  "thresholds": {k: c.chosen for k, c in r.candidates.items()}, "candidates": r.candidates,
                  "criteria": r.criteria, "n_prompts": r.n_prompts, "n_held_out": self.n_held_out,
                  "long_lengths": list(self.long_lengths), "calibrated_at": r.environment.created,
                  "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
        return json.loads(json.dumps(to_jsonable(record), allow_nan=False))


@dataclass(frozen=True)
class CalibrationRun:
    """Where a calibration's scores came from and where its result goes (everything but the scores).

    Attributes:
        model: The model's provenance.
        environment: :func:`lab.reports.environment_record`.
        choice: The current detector choice (:func:`lab.sinks.profiles.load_choice`): the report's statistic.
        held_out_file: The held-out prompt file as the report names it.
        long_lengths: The long prompts' requested lengths.
        recorded: ``{profile: {statistic: feasible thresholds}}`` already on file
            (:func:`lab.sinks.profiles.recorded_feasible`).
        save_as: The profile this run's calibration is saved as (it then joins ``recorded``); ``None``: not saved.
        saved_to: The user's folder it goes to; ``None`` when not saved.
    """

    model: ModelSource
    environment: Environment
    choice: DetectorChoice
    held_out_file: str
    long_lengths: tuple[int, ...]
    recorded: Mapping[str, Mapping[str, Sequence[float]]]
    save_as: str | None = None
    saved_to: str | None = None


def candidate_calibrations(res: Mapping[str, Mapping[str, Any]], scored: ScoredSets) -> dict[str, Candidate]:
    """Every candidate's feasible range, chosen threshold and counts there (calibration and held-out sets).

    Args:
        res: :func:`lab.sinks.calibration.sweep_candidates` on ``scored.calibration`` (and its long prompts).
        scored: The four sets' scores.

    Returns:
        Per statistic, its feasible grid values and their range (None when none is), the middle of that range
        (:func:`lab.sinks.calibration.choose_threshold`; None when empty), the counts there on each non-empty set
        of :data:`COUNT_SETS` (:func:`lab.sinks.calibration.evaluate`; none without a threshold), the lowest
        position-0 score over the calibration prompts and their highest content score (None without content).
    """
    sets = dict(zip(COUNT_SETS, (scored.calibration, scored.calibration_long, scored.held_out, scored.held_out_long)))
    out = {}
    for name, r in res.items():
        t, feasible = r["chosen"], tuple(r["feasible"])
        counts = {} if t is None else {label: Counts(**evaluate([s.using(name) for s in sc], t))
                                        for label, sc in sets.items() if sc}
        content = [s.using(name).candidate_content_scores for s in scored.calibration]
        out[name] = Candidate(
            feasible=(min(feasible), max(feasible)) if feasible else None, feasible_thresholds=feasible, chosen=t,
            counts=counts, position0_lowest=min(s.using(name).position0_score for s in scored.calibration),
            content_highest=max((float(c.max()) for c in content if c.numel()), default=None))
    return out


def cross_model_choice(feasible: Mapping[str, Mapping[str, Sequence[float]]], current: DetectorChoice
                       ) -> tuple[CrossModelChosen | CrossModelRefused | None, str | None]:
    """The statistic rule (:func:`lab.sinks.calibration.choose_statistic`) over ``feasible`` (None when empty), and
    why it chose nothing (its ``ValueError``; None when it chose).

    ``moves_from`` is ``current`` when the rule's statistic or default threshold differs from it.
    """
    if not feasible:
        return None, None
    profiles = tuple(sorted(feasible))
    try:
        chosen, default = choose_statistic({k: dict(v) for k, v in feasible.items()})
    except ValueError as exc:
        return CrossModelRefused(profiles=profiles, chosen=None, default_threshold=None), str(exc)
    moves = (chosen, default) != (current.statistic, current.default_threshold)
    was = MovesFrom(statistic=current.statistic, default_threshold=current.default_threshold, path=current.path)
    return CrossModelChosen(profiles=profiles, chosen=chosen, default_threshold=default,
                            moves_from=was if moves else None), None


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
    sweep = tuple(res[statistic]["rows"])
    cross, refused = cross_model_choice(feasible, run.choice)
    report = Report(
        model=run.model, environment=run.environment,
        criteria=Criteria(position0_min_rate=POSITION0_MIN_RATE, content_max_rate=CONTENT_MAX_RATE),
        min_observers=MIN_OBSERVING_QUERIES, statistic=statistic, statistics=tuple(STATISTICS),
        candidates=candidates, chosen_threshold=chosen, current_default_threshold=run.choice.default_threshold,
        feasible_thresholds=tuple(res[statistic]["feasible"]), n_prompts=len(scored.calibration),
        n_content_tokens=int(content.numel()),
        position0_score_min=min(s.position0_score for s in scored.calibration),
        content_score_max=float(content.max()) if content.numel() else None,
        sweep=tuple(SweepRecord(**asdict(r), feasible=r.feasible) for r in sweep), trailing_fraction=TRAILING_FRACTION,
        held_out=None if chosen is None or not held else HeldOut(
            prompts=run.held_out_file, threshold=chosen, short=Counts(**evaluate(held, chosen)),
            long=Counts(**evaluate(held_long, chosen)) if held_long else None,
            long_n_tokens=tuple(int(s.score.numel()) for s in held_long)),
        long_prompts=tuple(_long_prompt(s, chosen) for s in scored.calibration_long),
        prompts=tuple(_prompt_row(s) for s in scored.calibration), cross_model=cross, saved_to=run.saved_to)
    return SinkCalibrationReport(report=report, sweep=sweep, refused=refused, n_held_out=len(held),
                                 long_lengths=tuple(run.long_lengths))


def _long_prompt(s: PromptScores, chosen: float | None) -> LongPrompt:
    return LongPrompt(
        id=s.id, n_tokens=int(s.score.numel()), position0_score=s.position0_score,
        max_content_score=float(s.candidate_content_scores.max()), n_content=int(s.candidate_content_scores.numel()),
        content_flagged_at_chosen=int((s.candidate_content_scores > chosen).sum()) if chosen is not None else None,
        trailing_flagged_at_chosen=s.trailing_flagged(chosen) if chosen is not None else None)


def _prompt_row(s: PromptScores) -> dict[str, Any]:
    """One calibration prompt as a row of ``prompts`` in ``report.json`` and of ``prompts.csv``: its length, position
    0's score on every candidate of :data:`STATISTICS`, and (on the report's statistic) its highest observed content
    score (``None`` without observed content) and observed content tokens."""
    content = s.candidate_content_scores
    return {"id": s.id, "n_tokens": int(s.score.numel()),
            **{f"position0_{k}": float(s.scores[k][0]) for k in STATISTICS},
            "max_content_score": float(content.max()) if content.numel() else None, "n_content": int(content.numel())}


def save_calibration(report: SinkCalibrationReport, profile: str, *, packaged_statistic: str,
                     note: Callable[[str], None] = lambda message: None) -> None:
    """Write the profile's calibration, then the rule's choice (and migrate each profile file's ``statistic``
    when the choice moves), into the user's folder, each file atomically; never into the package.

    Args:
        report: The run's report (its ``report.cross_model`` is the rule's choice).
        profile: The profile the calibration is saved as.
        packaged_statistic: The current choice's statistic (a different choice migrates the profile files).
        note: Receives one line per file written (the command prints them on stderr).

    Raises:
        OSError: the user's folder cannot be written.
    """
    path = write_calibration(profile, report.profile_record(profile))
    note(f"calibration written: {path}")
    cross = report.report.cross_model
    if cross is None or cross.chosen is None:
        return
    chosen, default = cross.chosen, cross.default_threshold
    at = report.report.environment.created
    path = write_choice(chosen, default, cross.profiles, chosen_at=at)
    note(f"detector choice written: {path} ({chosen}, default {default:g})")
    if chosen != packaged_statistic:
        reason = (f"the cross-profile rule (lab.sinks.calibration.choose_statistic) chose {chosen} over the "
                  f"profiles' recorded feasible thresholds ({', '.join(cross.profiles)}); this file's "
                  f"thresholds.{chosen} comes from the same sweep")
        for name in cross.profiles:
            migrate_statistic(name, chosen, reason=reason, at=at or "")
