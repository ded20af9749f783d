"""One self-contained ``index.html`` per report directory.

The page is the report's files laid out for looking: the kind's own sections first (from the
module its declaration in :mod:`lab.kinds` names, where it names one: a token view, a plot whose
points link to their rows), then the summary, then every CSV as a table and every plot inline. Styles and
script are inline, images are data URIs, so the file opens from disk with no network and can be
sent on its own; without script the tables and summary are all there.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from lab.kinds import ShapeError, kind_named
from lab.views.core import KindPage, Section, asset, first_bold_line, markdown, render, table, write_html
from lab.views.files import ReportFiles, read_report

PAGE = "index.html"
# Characters of the error a page gives for a kind's part not drawn: its reason, not a value it echoes whole.
MAX_ERROR_CHARS = 200


def kind_module(kind: str) -> ModuleType | None:
    """The module drawing ``kind``'s own sections, as its declaration names it (:attr:`lab.kinds.Kind.page`);
    None for a kind with no module of its own or a name no kind has."""
    declared = kind_named(kind)
    return declared.page_module() if declared is not None else None


def kind_page(files: ReportFiles) -> KindPage:
    """The kind's own part of a page: its page module's ``page(files, report)`` with the report read as its kind's
    typed report (:meth:`lab.kinds.Kind.read`); an empty one for a kind with no page module of its own (its page is
    then the summary and the files) or no readable report.json (the page's problems say why). A report of another
    shape (hand-edited, damaged) keeps the generic parts and says why in one line: no broad catch, the typed read
    is the one check."""
    declared = kind_named(files.kind) if files.kind else None
    if declared is None or declared.page is None or not files.report:
        return KindPage(headline=first_bold_line(files.summary))
    try:
        report = files.typed()
    except ShapeError as exc:
        return _not_drawn(files, f"{files.exact}: ", str(exc))
    made = declared.page_module().page(files, report)
    return made if made.headline else KindPage(first_bold_line(files.summary), made.sections, made.covers)


def _not_drawn(files: ReportFiles, what: str, reason: str) -> KindPage:
    """The generic parts of a page (summary, files) and a note saying why the kind's own sections are missing:
    ``what`` (the file, or the error's type) then ``reason``'s first line, cut."""
    return KindPage(headline=first_bold_line(files.summary), sections=(not_drawn(files.kind, what, reason),))


def not_drawn(kind: str, what: str, reason: str) -> Section:
    """The note saying why a kind's own part of a page (or of a comparison) is missing: ``what`` (the file, or
    the error's type) then ``reason``'s first line, cut to :data:`MAX_ERROR_CHARS`."""
    first = (reason.splitlines() or [""])[0]  # one line, cut: a reason may echo a value of any length
    error = f"{what}{first[:MAX_ERROR_CHARS]}{'...' if len(first) > MAX_ERROR_CHARS else ''}"
    return Section("Not drawn", render("not_drawn.html.j2", kind=kind, error=error), "not-drawn")


def file_sections(files: ReportFiles, covers: frozenset[str]) -> list[Section]:
    """The summary, then each CSV as a table and each plot inline, skipping what the kind's sections show."""
    out = []
    if files.summary and "summary.md" not in covers:
        # A plot the kind's sections already show is named in the summary, not embedded twice.
        shown = {k: v for k, v in files.images.items() if k not in covers}
        out.append(Section("summary.md", markdown(files.summary, shown, covers), "summary"))
    for name, svg in files.svgs.items():
        if name not in covers:
            out.append(Section(name, render("figure.html.j2", svg=svg, name=name), "file-" + _anchor(name)))
    for name, uri in files.images.items():
        if name not in covers:
            out.append(Section(name, render("figure.html.j2", uri=uri, name=name), "file-" + _anchor(name)))
    for name, rows in files.csvs.items():
        if name not in covers:
            out.append(Section(name, table(rows), "file-" + _anchor(name)))
    return out


def _anchor(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name)


def page_html(files: ReportFiles) -> str:
    """The whole page of one report as HTML text."""
    made = kind_page(files)
    model = files.model
    return render("page.html.j2", files=files, headline=made.headline, model=model,
                  sections=list(made.sections) + file_sections(files, made.covers),
                  css=asset("page.css"))


def write_index(folder: Path, html: str) -> Path:
    """Write ``<folder>/index.html`` (a report's page, a reports folder's log) whole or not at all: a partial file,
    then a rename (:func:`lab.views.core.write_html`).

    Returns:
        The page's path.

    Raises:
        OSError: the page could not be written.
    """
    write_html(folder / PAGE, html)
    return folder / PAGE


def write_page(path: str | Path, name: str | None = None, kind: str | None = None) -> Path:
    """Write the report directory ``path``'s page (:func:`write_index`, which says what it returns and raises).

    Args:
        path: The report directory (its staging directory while the report is written).
        name: The report's final directory name (default: ``path``'s).
        kind: The report kind (default: read from ``name``).

    Raises:
        NotADirectoryError: ``path`` is not a directory.
    """
    return write_index(Path(path), page_html(read_report(path, name=name, kind=kind)))
