"""Two reports of one kind side by side: ``lab view A B``.

A kind's module may define ``compare(a, b) -> tuple[Section, ...]`` (two entropy runs: the
tokens aligned and the entropy difference coloured; two studies: verdicts and effects with both
intervals; two benches: rows with both figures). Every comparison page also shows the two
headlines and summaries in two columns, so a kind without its own comparison still compares.
"""

from __future__ import annotations

from pathlib import Path

from lab.kinds import ShapeError, kind_named
from lab.views.core import Section, asset, markdown, render
from lab.views.files import ReportFiles, read_report
from lab.views.page import kind_module, kind_page, not_drawn


class KindMismatchError(ValueError):
    """The two reports are of different kinds (or one is of no known kind)."""


def kind_compare(a: ReportFiles, b: ReportFiles) -> tuple[Section, ...]:
    """The kind's own comparison sections (``lab.views.kinds.<kind>.compare``), or none; for a typed kind
    (:attr:`lab.kinds.Kind.report`) whose report A or B is of another shape, one note saying which and why in one
    line (as its page does, :func:`lab.views.page.not_drawn`) instead."""
    made = getattr(kind_module(a.kind), "compare", None)
    if made is None:
        return ()
    declared = kind_named(a.kind)
    if declared is not None and declared.report is not None:
        if not (a.report and b.report):  # a summary without its figures: nothing of the kind's own to compare
            return ()
        for label, files in (("A", a), ("B", b)):
            try:
                declared.read(files.report)
            except ShapeError as exc:  # a hand-edited or damaged report: the reason in one line, no comparison
                return (not_drawn(files.kind, f"{label}'s {files.exact}: ", str(exc)),)
    return tuple(made(a, b))


def read_pair(a: str | Path, b: str | Path) -> tuple[ReportFiles, ReportFiles]:
    """Read two report directories and check they are of one kind.

    Raises:
        ValueError: a path is not a report directory (no ``report.json`` or ``summary.md``), or holds nothing
            else than a ``report.json`` that could not be read (the file and why are named).
        KindMismatchError: the two are of different kinds, or of none the lab knows.
    """
    pair = []
    for label, path in (("A", a), ("B", b)):
        p = Path(path)
        if not p.is_dir():
            raise ValueError(f"{label}={str(path)!r} is not a report directory")
        files = read_report(p)
        if not files.report and not files.summary:
            unread = next((x for x in files.problems if x.startswith(("report.json:", f"{files.kind}.json:"))), "")
            if unread:  # the report's figures are there, and could not be read: say which file and why
                raise ValueError(f"{label}={str(path)!r}: {unread}")
            raise ValueError(f"{label}={str(path)!r} holds no report.json or summary.md: not a report directory")
        pair.append(files)
    ra, rb = pair
    if not ra.kind or ra.kind != rb.kind:
        def kind(files: ReportFiles) -> str:
            return f"of kind {files.kind!r}" if files.kind else "of no known kind"

        raise KindMismatchError(f"A is {kind(ra)} and B {kind(rb)}: lab view A B compares two reports of one kind")
    return ra, rb


def compare_html(a: ReportFiles, b: ReportFiles) -> str:
    """The comparison page of two reports of one kind, as HTML text."""
    heads = (kind_page(a).headline, kind_page(b).headline)
    sections = list(kind_compare(a, b))
    sections.append(Section("Summaries", render("pair.html.j2", a=a, b=b, heads=heads,
                                                 a_html=markdown(a.summary, a.images),
                                                 b_html=markdown(b.summary, b.images)), "summaries"))
    return render("compare.html.j2", a=a, b=b, heads=heads, sections=sections, css=asset("page.css"))
