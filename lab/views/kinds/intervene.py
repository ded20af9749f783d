"""An intervention's page (``lab intervene``): the pre-stated tests' verdicts and the controls first,
then the arms plot, then one row per triple (``id="triple-<question id>"``).

Drawn from ``report.json`` (:func:`lab.render.intervention.write_report`) read as
:class:`lab.kinds.intervene.Report`, ``triples.csv`` and ``arms.png``; computes nothing: every number
is as the report holds it. The arms plot draws lines and means, not one point per triple, so it stays
a PNG; a triple's row is still the target a later scatter plot of triples can link to
(:func:`triple_anchor`).
"""

from __future__ import annotations

from typing import Any

from lab.kinds.intervene import Report
from lab.numbers import number_or_none
from lab.ranges import ENTROPY_BITS, PROBABILITY
from lab.verdicts import DECIDED, INCONCLUSIVE
from lab.views.core import KindPage, Section, figure, fmt, render, row_anchor, table
from lab.views.files import ReportFiles

CONTROLS = ("empty_mask", "position_only", "label_swap", "c_plus", "manipulation")
# The per-triple table: (column title, twin, arm, triples.csv column), read from triples.csv as written.
TRIPLE_CELLS = tuple((f"{what}({twin},{arm})", twin, arm, column)
                     for what, column in (("H", "entropy_bits"), ("beta", "beta"))
                     for arm in ("A0", "A1") for twin in ("P", "N"))
# Each triples.csv column's physical range and its name in an out-of-range note: beta, the draft's expected
# acceptance, is a probability.
CELL_RANGES = {"entropy_bits": (ENTROPY_BITS, "entropy"), "beta": (PROBABILITY, "beta")}


def triple_anchor(question_id: str) -> str:
    """The id of a triple's row on an intervention's page, ``triple-<question id>``.

    >>> triple_anchor("factual-P111")
    'triple-factual-P111'
    """
    return row_anchor("triple-", question_id)


def headline(report: Report) -> str:
    """``did_entropy supported (+0.12 bits); 3 inconclusive; controls passed``, or that the controls failed."""
    if not report.decides:
        failed = [k for k, v in report.controls.items() if not v]
        return f"CONTROLS FAILED ({', '.join(failed) or 'pilot'}): this run decides nothing"
    ts = report.analysis.tests
    decided = [f"{t.name} {t.verdict} ({fmt(t.estimate)} {t.unit})".replace(" )", ")")
               for t in ts if t.verdict in DECIDED]
    rest = len(ts) - len(decided)
    parts = [", ".join(decided)] if decided else []
    parts += [f"{rest} {INCONCLUSIVE}"] if rest else []
    return "; ".join(parts + ["controls passed"])


def triple_rows(files: ReportFiles) -> list[dict[str, Any]]:
    """One row per triple from ``triples.csv`` (one row per triple, twin and arm): the mean entropy and beta of
    both twins under A0 and A1, cells as the file writes them."""
    by_triple: dict[str, dict[str, Any]] = {}
    for r in files.csvs.get("triples.csv", []):
        qid = r.get("question_id", "")
        row = by_triple.setdefault(qid, {"question_id": qid, "category": r.get("category", ""),
                                         "distractor": r.get("distractor", "")})
        for title, twin, arm, column in TRIPLE_CELLS:
            if r.get("twin") == twin and r.get("arm") == arm:
                text = r.get(column, "")
                value = number_or_none(text, finite=False)
                row[title] = text if value is None and not _nan(text) else figure(value, *CELL_RANGES[column])
    return list(by_triple.values())


def _nan(text: Any) -> bool:
    """Whether a cell reads as NaN (a number not measured: the page's ``-``), not as text to show as written."""
    return isinstance(text, str) and text.strip().lower().lstrip("+-") == "nan"


def page(files: ReportFiles, report: Report) -> KindPage:
    """The intervention's own sections: verdicts and controls, the arms plot, one row per triple."""
    a = report.analysis
    controls = [(name, getattr(a, name)) for name in CONTROLS]
    sections = [Section("Verdicts", render("intervene_verdicts.html.j2", tests=a.tests, controls=controls,
                                           decides=report.decides), "verdicts")]
    covers = set()
    if "arms.png" in files.images:
        sections.append(Section("Arms", render("figure.html.j2", uri=files.images["arms.png"], name="arms.png"),
                                "arms"))
        covers.add("arms.png")
    rows = triple_rows(files)
    if rows:
        columns = ["question_id", "category", "distractor"] + [c[0] for c in TRIPLE_CELLS]
        sections.append(Section("Triples", table(rows, columns, limit=len(rows),
                                                 row_ids=[triple_anchor(r["question_id"]) for r in rows]),
                                "triples"))
    return KindPage(headline(report), tuple(sections), frozenset(covers))
