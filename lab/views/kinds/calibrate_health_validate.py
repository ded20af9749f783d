"""The page of a ``lab calibrate-health --validate`` report: whether context health reads the context.

Figures from ``report.json`` (:mod:`lab.health.validation`; ``validation.json`` before format 1): the
chosen measure's Spearman rho with content length and its saturated share, against the bars it was
judged by. A measure that fails is shown as a warning with those figures before the summary.
"""

from __future__ import annotations

from typing import Any

from lab.ranges import CORRELATION, COUNT, PROBABILITY
from lab.views.core import KindPage, Section, figure, render
from lab.views.files import ReportFiles


def figures(v: dict[str, Any]) -> dict[str, Any]:
    """The chosen measure's figures and its bars, as the verdict shows them."""
    f = v.get("figures") or {}
    bars = v.get("bars") or {}
    return {"measure": v.get("measure") or f.get("name") or "", "valid": bool(v.get("valid")), "rho": f.get("rho"),
            "p": f.get("p"), "saturated_share": f.get("saturated_share"), "n": f.get("n_measurable"),
            "max_rho": bars.get("max_length_rho"), "max_share": bars.get("max_saturated_share"),
            "valid_candidates": list(v.get("valid_candidates") or [])}


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


def page(files: ReportFiles) -> KindPage:
    """The verdict from ``report.json`` (a warning when it fails); the summary and prompts follow."""
    f = figures(files.report)
    if not f["measure"]:
        return KindPage()
    verdict = headline(f)
    return KindPage(headline=verdict, sections=(
        Section("Verdict", render("calibrate_health_validate_verdict.html.j2", f=f, verdict=verdict), "verdict"),))
