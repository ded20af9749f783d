"""The page of a ``lab calibrate-sinks`` report: the chosen threshold in the headline, the sweep plot first.

Figures from ``report.json`` (:class:`lab.kinds.calibrate_sinks.Report`, as the command wrote it;
``calibration.json`` in a report written before format 1): the chosen threshold, its feasible range and
the held-out check. The summary and the CSVs follow as the generic page shows them.
"""

from __future__ import annotations

from lab.kinds.calibrate_sinks import Report
from lab.ranges import COUNT
from lab.views.core import KindPage, Section, figure, fmt, render
from lab.views.files import ReportFiles

PLOT = "sweep.png"


def headline(c: Report) -> str:
    """The chosen threshold, its feasible range and the held-out check, from ``report.json``; each count
    checked against its physical range (the threshold is on the detector's statistic, which has none)."""
    if c.chosen_threshold is None:
        return "no feasible threshold"
    feasible = c.feasible_thresholds
    span = f"feasible {fmt(feasible[0])} to {fmt(feasible[-1])}, " if feasible else ""
    line = f"threshold {fmt(c.chosen_threshold)} on {c.statistic} ({span}{_count(c.n_prompts)} prompts)"
    if c.held_out is not None:
        short = c.held_out.short
        line += (f"; held out: position 0 flagged on {_count(short.position0_flagged)}/"
                 f"{_count(short.n_prompts)}, content {_count(short.content_flagged)}/"
                 f"{_count(short.n_content)}")
    return line


def _count(n: int) -> str:
    """A count as the page prints it, checked (:data:`lab.ranges.COUNT`)."""
    return figure(n, COUNT, "a count")


def page(files: ReportFiles, report: Report) -> KindPage:
    """The headline from ``report.json``, then the sweep plot; the rest as the generic page shows it."""
    sections, covers = [], set()
    if PLOT in files.images:
        sections.append(Section("Sweep", render("figure.html.j2", uri=files.images[PLOT], name=PLOT), "sweep"))
        covers.add(PLOT)
    return KindPage(headline=headline(report), sections=tuple(sections),
                    covers=frozenset(covers))
