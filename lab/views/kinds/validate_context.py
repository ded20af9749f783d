"""The page of a ``lab validate-context`` report: the verdict, then every measure's figures against the bar.

Drawn from ``report.json`` read as :class:`lab.kinds.validate_context.Report` (its ``verdict`` and
``validation``: the ``chosen`` and ``others`` figures and where the reference came from). The summary's prose
(the pairs, the chosen measure, the bar) is shown without its verdict line and its table, which
the page's own sections already show, so nothing appears twice.
"""

from __future__ import annotations

from typing import Any

from lab.kinds.validate_context import Figures, Report, Validation
from lab.ranges import PROBABILITY
from lab.views.core import KindPage, Section, figure, first_bold_line, markdown, render
from lab.views.files import ReportFiles
from lab.views.kinds._summary import prose


def _interval(f: Figures) -> str:
    """The AUROC's 95 % interval as ``low-high``, each end checked as an AUROC."""
    low, high = (figure(x, PROBABILITY, "an AUROC", spec=".2f") for x in (f.ci_low, f.ci_high))
    return f"{low}-{high}"


def measure_rows(validation: Validation) -> list[dict[str, Any]]:
    """One row per measure and direction, the chosen measure first; figures as the report holds them."""
    return [{"chosen": is_chosen, "measure": f.measure, "dir": "+" if f.direction >= 0 else "-", "auroc": f.auroc,
             "interval": _interval(f), "length_auroc": f.length_auroc, "placebo_auroc": f.placebo_auroc,
             "length_rho": f.length_rho, "end_share": f.end_share, "n_pairs": f.n_pairs, "passes": not f.failed,
             "failed": "; ".join(f.failed)}
            for f, is_chosen in [(validation.chosen, True)] + [(o, False) for o in validation.others]]


def failed(report: Report) -> bool:
    """Whether the chosen measure failed the bar on a set it was judged on (not the set it was fitted on)."""
    v = report.validation
    return v.reference_from != "fitted on this set" and bool(v.chosen.failed)


def page(files: ReportFiles, report: Report) -> KindPage:
    """Verdict first, then the measure table, then the summary's prose."""
    v = report.validation
    verdict = report.verdict or first_bold_line(files.summary)
    sections = [Section("Verdict", render("validate_context_verdict.html.j2", verdict=verdict, v=v,
                                          failed=failed(report)), "verdict"),
                Section("Measures", render("validate_context_measures.html.j2", rows=measure_rows(v)), "measures")]
    covers = set()
    if files.summary:
        text = prose(files.summary)
        if text:
            sections.append(Section("How it was measured", markdown(text, files.images), "method"))
        covers.add("summary.md")
    return KindPage(headline=verdict, sections=tuple(sections), covers=frozenset(covers))
