"""The page of a ``lab calibrate-health --validate`` report: whether context health reads the context.

Figures from ``report.json`` (:class:`lab.kinds.calibrate_health_validate.Report`; ``validation.json`` before
format 1): the chosen measure's Spearman rho with content length and its saturated share, against the bars it
was judged by. A measure that fails is shown as a warning with those figures before the summary.
"""

from __future__ import annotations

from typing import Any

from lab.kinds.calibrate_health_validate import Report
from lab.ranges import CORRELATION, COUNT, PROBABILITY
from lab.views.core import KindPage, Section, figure, render
from lab.views.files import ReportFiles


def figures(v: Report) -> dict[str, Any]:
    """The chosen measure's figures and its bars, as the verdict shows them."""
    f = v.figures
    return {"measure": v.measure or f.name, "valid": v.valid, "rho": f.rho, "p": f.p,
            "saturated_share": f.saturated_share, "n": f.n_measurable, "max_rho": v.bars.max_length_rho,
            "max_share": v.bars.max_saturated_share, "valid_candidates": list(v.valid_candidates)}


def headline(f: dict[str, Any]) -> str:
    """One line: the measure, passes or fails, rho and the saturated share, each checked against its physical
    range (:func:`lab.views.core.figure`)."""
    if not f["measure"]:
        return ""
    return (f"context health ({f['measure']}) {'reads' if f['valid'] else 'FAILS to read'} the context: "
            f"Spearman rho with length {figure(f['rho'], CORRELATION, 'rho', spec='+.2f')} "
            f"(p {figure(f['p'], PROBABILITY, 'a p-value', spec='.2g')}; bar |rho| <= "
            f"{figure(f['max_rho'], CORRELATION, 'rho', spec='g')}), "
            f"{figure(f['saturated_share'], PROBABILITY, 'a share', spec='.0%')} at an end of the scale "
            f"(bar {figure(f['max_share'], PROBABILITY, 'a share', spec='.0%')}), "
            f"{figure(f['n'], COUNT, 'a count')} measurable prompts")


def page(files: ReportFiles, report: Report) -> KindPage:
    """The verdict from ``report.json`` (a warning when it fails); the summary and prompts follow."""
    f = figures(report)
    if not f["measure"]:
        return KindPage()
    verdict = headline(f)
    return KindPage(headline=verdict, sections=(
        Section("Verdict", render("calibrate_health_validate_verdict.html.j2", f=f, verdict=verdict), "verdict"),))
