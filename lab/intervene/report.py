"""What ``lab intervene`` reports: the main triples' analysis, the pilot's controls, the power table.

:func:`build_report` computes nothing of its own beyond gathering: the tests, controls, power and
the per-arm means with their intervals come from :mod:`lab.analysis.intervention`, on the summaries
of each triple's record. The renderer draws the report and computes no statistic.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from lab.analysis.intervention import (ArmMeans, InterventionAnalysis, PowerRow, TripleSummary, analyze_intervention,
                                       arm_means, power_table)
from lab.intervene.record import TripleRecord
from lab.intervene.run import InterventionSettings

MIN_PILOT_FOR_SD = 2  # an SD needs two triples: a smaller pilot checks its controls but gives no power table


@dataclass(frozen=True)
class InterventionReport:
    """A finished intervention run.

    Attributes:
        settings: What fixed the numbers.
        analysis: The pre-stated tests, controls and secondary estimates on the main triples.
        pilot: The same on the pilot triples (read for its controls and SDs only), or None.
        pilot_ids: The pilot's clean prompt ids (named in the report: excluded from the analysis).
        power: Each test's power at its smallest effect of interest for the main run's size, from the
            pilot's SDs (the table that fixed n before the main triples were read); empty without a pilot.
        main: The main triples' summaries, in file order.
        arms: The main triples' means per (table, twin, arm) and the P - N entropy gap per dose arm,
            with their 95 % intervals (:func:`lab.analysis.intervention.arm_means`): the summary's arm
            table and arms.png. Not written to report.json, which holds every triple's record instead.
        records: The main triples' full records (per-position outcomes), in file order.
        seconds: Summed per-triple wall time, pilot included.
        environment: Machine, library versions, threads, load (:func:`lab.reports.environment`).
        work_dir: Where the records are kept.
    """

    settings: InterventionSettings
    analysis: InterventionAnalysis
    pilot: InterventionAnalysis | None
    pilot_ids: tuple[str, ...]
    power: tuple[PowerRow, ...]
    main: tuple[TripleSummary, ...]
    arms: ArmMeans
    records: tuple[TripleRecord, ...]
    seconds: float
    environment: dict[str, Any]
    work_dir: str

    @property
    def decides(self) -> bool:
        """Whether the verdicts stand: the main run's controls passed (and the pilot's, if there was one)."""
        return self.analysis.decides and (self.pilot is None or self.pilot.controls_passed)


def build_report(settings: InterventionSettings, pilot: Sequence[TripleRecord], main: Sequence[TripleRecord], *,
                 work: Path, model: Any = None) -> InterventionReport:
    """Analyse the main triples (and, apart, the pilot's) and gather what the report shows.

    Raises:
        ValueError: no main triple (from the analysis), naming the problem.
    """
    from lab.reports import environment

    summaries = tuple(r.summary() for r in main)
    pilot_analysis = analyze_intervention([r.summary() for r in pilot], seed=settings.seed) if pilot else None
    n_distractors = len({s.distractor for s in summaries})
    power = () if len(pilot) < MIN_PILOT_FOR_SD or n_distractors > len(summaries) else power_table(
        pilot_analysis.sd_by_test, len(summaries), n_distractors)
    return InterventionReport(
        settings=settings, analysis=analyze_intervention(summaries, seed=settings.seed), pilot=pilot_analysis,
        pilot_ids=tuple(r.question_id for r in pilot), power=power, main=summaries, arms=arm_means(summaries),
        records=tuple(main), seconds=sum(r.seconds for r in (*pilot, *main)), environment=environment(model),
        work_dir=str(work))
