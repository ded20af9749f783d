"""The experiment log: ``<root>/index.html``, one row per run in a reports folder.

Rebuilt whenever a report is written into the folder (:func:`lab.reports.report_dir` calls
:func:`rebuild_log`) and by ``lab view --rebuild``. A row gives the run's kind, model, weights,
runtime, date and headline figure, and links to its page; the table sorts by any column and
filters by kind and model (inline script; without it the table is all there, unsorted). A folder
of an older format (no page) is listed with what it holds.

A run's row is read from its page's head (``<meta name="lab-...">``, written with the page), so
the log costs a few kilobytes per run however large the reports are; only a run without a page
has its ``report.json`` read.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path

from lab.files import FileRefused, read_bounded
from lab.kinds.integration import RunLog
from lab.typed import from_json
from lab.views.core import asset, render
from lab.views.files import MAX_JSON_BYTES, kind_of, read_report, stamp_of
from lab.views.page import PAGE, kind_page, write_index

HEAD_BYTES = 16 * 1024  # a page's <meta> rows come before its styles, well inside this
_META = re.compile(r'<meta name="lab-(kind|model|weights|runtime|headline)" content="([^"]*)">')


@dataclass(frozen=True)
class LogRow:
    """One run in the experiment log.

    Attributes:
        name: The report directory's name.
        kind: Its kind (``""`` when the name says none).
        model, weights, runtime: From the report's model record (``""`` when absent).
        date: ``YYYY-mm-dd HH:MM:SS`` from the name.
        headline: The run's headline figure in a line.
        link: Where the row links, relative to the log: the page, else the folder.
        holds: For a folder with no page: what it holds (``"summary.md, 2 CSV, 1 PNG"``).
    """

    name: str
    kind: str
    model: str
    weights: str
    runtime: str
    date: str
    headline: str
    link: str
    holds: str = ""


def _holds(path: Path) -> str:
    counts: dict[str, int] = {}
    for f in path.iterdir():
        if f.is_file() and not f.name.startswith("."):
            key = f.name if f.name in ("summary.md", "report.json", "index.json", "index.md") else (
                f.suffix.lstrip(".").upper() or "other")
            counts[key] = counts.get(key, 0) + 1
    return ", ".join(k if k.endswith((".md", ".json")) else f"{n} {k}" for k, n in sorted(counts.items())) or "nothing"


def _page_meta(page: Path) -> dict[str, str] | None:
    """The ``lab-*`` meta rows of a page's head, or None when the page has none (not the lab's, or older)."""
    try:
        head = read_bounded(page, HEAD_BYTES, head=True).decode("utf-8", errors="replace")
    except FileRefused:
        return None
    found = {k: html.unescape(v) for k, v in _META.findall(head)}
    return found if "kind" in found else None


def log_row(path: Path) -> LogRow:
    """The log's row for one report directory: from its page's head, else from its files."""
    name = path.name
    if kind_of(name) == "integration" and (path / "index.json").is_file():
        return _integration_row(path)
    page = path / PAGE
    meta = _page_meta(page) if page.is_file() else None
    if meta is not None:
        return LogRow(name=name, kind=meta.get("kind", ""), model=meta.get("model", ""), weights=meta.get("weights", ""),
                      runtime=meta.get("runtime", ""), date=stamp_of(name), headline=meta.get("headline", ""),
                      link=f"{name}/{PAGE}")
    files = read_report(path)
    model = files.model
    headline = kind_page(files).headline if files.report or files.summary else ""
    return LogRow(name=name, kind=files.kind, model=model.model if model else "",
                  weights=model.weights if model else "", runtime=model.runtime if model else "", date=stamp_of(name),
                  headline=headline, link=f"{name}/{PAGE}" if page.is_file() else f"{name}/", holds=_holds(path))


def _integration_row(path: Path) -> LogRow:
    """An integration run's folder: its counts as the headline, its own log as the link."""
    try:
        counts = from_json(RunLog, json.loads(read_bounded(path / "index.json", MAX_JSON_BYTES).decode("utf-8"))).counts
        headline = f"{counts.passed} passed, {counts.failed} failed, {counts.skipped} skipped"
    except (OSError, ValueError):  # ShapeError is a ValueError
        headline = "index.json unreadable"
    link = f"{path.name}/{PAGE}" if (path / PAGE).is_file() else f"{path.name}/index.md"
    return LogRow(name=path.name, kind="integration", model="", weights="", runtime="", date=stamp_of(path.name),
                  headline=headline, link=link)


RUN_FILES = ("report.json", "summary.md", "index.json")  # a folder holding none of these is no run (screenshots/)


def is_run(path: Path) -> bool:
    """A visible folder holding a report's files (or an integration run's index); staging folders are hidden."""
    return path.is_dir() and not path.name.startswith(".") and any((path / f).is_file() for f in RUN_FILES)


def log_rows(root: str | Path) -> list[LogRow]:
    """Every run in ``root``, newest first (:func:`is_run`)."""
    root = Path(root)
    return [log_row(p) for p in sorted((p for p in root.iterdir() if is_run(p)), key=lambda p: p.name, reverse=True)]


def rebuild_log(root: str | Path) -> Path:
    """Write ``<root>/index.html``, the log: one row per run in ``root``, sortable and filterable by kind and model
    (:func:`lab.views.page.write_index`, which says what it returns and raises). Two runs that finish together each
    write a whole log, the later one listing both.

    Args:
        root: A reports folder (``reports/`` by default in the CLI).

    Raises:
        NotADirectoryError: ``root`` is not a directory.
    """
    root = Path(root)
    if not root.is_dir():
        raise NotADirectoryError(f"{str(root)!r} is not a reports folder")
    rows = log_rows(root)
    return write_index(root, render("log.html.j2", root=root.resolve().name, rows=rows,
                                    kinds=sorted({r.kind for r in rows if r.kind}),
                                    models=sorted({r.model for r in rows if r.model}), css=asset("page.css")))
