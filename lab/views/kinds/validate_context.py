"""The page of a ``lab validate-context`` report: the verdict, then every measure's figures against the bar.

Drawn from ``report.json`` (``verdict`` and ``validation``: :class:`lab.health.context_validity.ContextValidation`
as written, its ``chosen`` and ``others`` figures and the fitted ``reference``). The summary's prose
(the pairs, the chosen measure, the bar) is shown without its verdict line and its table, which
the page's own sections already show, so nothing appears twice.
"""

from __future__ import annotations

import math
from typing import Any

from lab.ranges import PROBABILITY
from lab.views.core import KindPage, Section, figure, first_bold_line, markdown, render
from lab.views.files import ReportFiles
from lab.views.kinds._summary import prose


def _interval(f: dict[str, Any]) -> str:
    lo, hi = f.get("ci_low"), f.get("ci_high")
    ok = all(isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x) for x in (lo, hi))
    return (f"{figure(lo, PROBABILITY, 'an AUROC', spec='.2f')}-{figure(hi, PROBABILITY, 'an AUROC', spec='.2f')}"
            if ok else "-")


def measure_rows(validation: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per measure and direction, the chosen measure first; figures as the report holds them."""
    rows = []
    chosen = validation.get("chosen")
    for f, is_chosen in [(chosen, True)] + [(o, False) for o in validation.get("others") or []]:
        if not isinstance(f, dict):
            continue
        failed = f.get("failed") or []
        rows.append({"chosen": is_chosen, "measure": f.get("measure", ""),
                     "dir": "+" if f.get("direction", 1) >= 0 else "-", "auroc": f.get("auroc"),
                     "interval": _interval(f), "length_auroc": f.get("length_auroc"),
                     "placebo_auroc": f.get("placebo_auroc"), "length_rho": f.get("length_rho"),
                     "end_share": f.get("end_share"), "n_pairs": f.get("n_pairs"), "passes": not failed,
                     "failed": "; ".join(str(x) for x in failed)})
    return rows


def failed(report: dict[str, Any]) -> bool:
    """Whether the chosen measure failed the bar on a set it was judged on (not the set it was fitted on)."""
    v = report.get("validation") or {}
    chosen = v.get("chosen") or {}
    return v.get("reference_from") != "fitted on this set" and bool(chosen.get("failed"))


def page(files: ReportFiles) -> KindPage:
    """Verdict first, then the measure table, then the summary's prose."""
    report = files.report
    v = report.get("validation") or {}
    verdict = str(report.get("verdict") or first_bold_line(files.summary))
    rows = measure_rows(v)
    sections = [Section("Verdict", render("validate_context_verdict.html.j2", verdict=verdict, v=v,
                                          failed=failed(report), ref=v.get("reference") or {}), "verdict")]
    if rows:
        sections.append(Section("Measures", render("validate_context_measures.html.j2", rows=rows), "measures"))
    covers = set()
    if files.summary:
        text = prose(files.summary)
        if text:
            sections.append(Section("How it was measured", markdown(text, files.images), "method"))
        covers.add("summary.md")
    return KindPage(headline=verdict, sections=tuple(sections), covers=frozenset(covers))

