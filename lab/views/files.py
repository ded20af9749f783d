"""A report directory's files as a page reads them: its kind and date from its name, each file bounded.

A report directory holds ``report.json`` (the exact figures), ``summary.md`` (the prose and
tables), CSVs (one row per token, round, prompt ...) and plots (PNG, SVG). :func:`read_report`
reads them once, bounded (:data:`MAX_JSON_BYTES` ...), so a page is drawn from what the report
says, never from the run's objects; a file it cannot read is named in ``problems``, never raised.
"""

from __future__ import annotations

import base64
import csv
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from lab.files import FileRefused, read_bounded
from lab.kinds import REPORT_JSON, ShapeError, kind_named, names_longest_first
from lab.kinds.intervene import Settings as InterveneSettings
from lab.provenance import Environment, ModelSource
from lab.safe_text import printable
from lab.views.svg import inline_svg, svg_body

# Bounds on what a page embeds, so a page's size follows its data and a damaged or huge file
# cannot make a page of gigabytes: a study's report.json is ~1-3 MB, its CSVs ~100 kB.
MAX_JSON_BYTES = 32 * 1024 * 1024
MAX_CSV_BYTES = 8 * 1024 * 1024
MAX_IMAGE_BYTES = 4 * 1024 * 1024

# The slug is anything (a folder renamed by hand may hold a newline): DOTALL, and \Z, which no trailing newline ends early.
_STAMP = re.compile(r"^(\d{8})-(\d{6})(?:-(.*))?\Z", re.DOTALL)


def kind_of(name: str) -> str:
    """The report kind in a directory name ``<YYYYmmdd-HHMMSS>-<kind>-<slug>``; ``""`` when none is known.

    >>> kind_of("20261205-015910-entropy-what-is-the-capital")
    'entropy'
    >>> kind_of("20261205-015910-bench-sinks-smollm2")
    'bench-sinks'
    >>> kind_of("notes")
    ''
    """
    m = _STAMP.match(name)
    rest = (m.group(3) or "") if m else name
    for kind in names_longest_first():  # so "bench-sinks" is not read as "bench"
        if rest == kind or rest.startswith(kind + "-"):
            return kind
    return ""


def stamp_of(name: str) -> str:
    """``YYYY-mm-dd HH:MM:SS`` from a report directory's name, ``""`` when it has no timestamp.

    >>> stamp_of("20261205-015910-entropy-x")
    '2026-12-05 01:59:10'
    """
    m = _STAMP.match(name)
    if not m:
        return ""
    d, t = m.group(1), m.group(2)
    return f"{d[:4]}-{d[4:6]}-{d[6:]} {t[:2]}:{t[2:4]}:{t[4:]}"


@dataclass(frozen=True)
class ReportFiles:
    """One report directory as read.

    Attributes:
        path: The directory.
        name: Its name (the final one, also while the report is still being staged).
        kind: The report kind (a name :mod:`lab.kinds` declares), ``""`` when the name says none.
        report: ``report.json`` parsed, or in a report written before every kind wrote one, the file its kind
            kept its figures in then (:attr:`lab.kinds.Kind.older_file`: a study's ``study.json``); ``{}`` when
            absent, unreadable or too large (see ``problems``). Its text (keys and strings), like ``summary``'s,
            ``csvs``' and ``jsons``', is as :func:`lab.safe_text.printable` shows it: control, bidirectional
            and invisible characters escaped.
        summary: ``summary.md`` as text (``""`` when absent).
        csvs: ``{file name: rows}`` of every CSV, each row a ``{column: cell text}``.
        images: ``{file name: data URI}`` of every PNG, and of every SVG that :func:`inline_svg` refuses
            to inline (an ``<img>`` runs no script, loads nothing and styles nothing outside itself).
        svgs: ``{file name: SVG markup}`` of every SVG :func:`inline_svg` passes, as it wrote it anew (links in
            them work).
        jsons: ``{file name: object}`` of the report's other JSON files (none the lab writes today; a hand-added
            one is listed), parsed and bounded like ``report``.
        other: Names of the other files (listed, not embedded).
        problems: One line per file that could not be read or was too large, shown on the page.
        exact: The file ``report`` was read from (``report.json``, or a kind's :attr:`lab.kinds.Kind.older_file`).
    """

    path: Path
    name: str
    kind: str
    report: dict[str, Any]
    summary: str = ""
    csvs: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    images: dict[str, str] = field(default_factory=dict)
    svgs: dict[str, str] = field(default_factory=dict)
    jsons: dict[str, dict[str, Any]] = field(default_factory=dict)
    other: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    exact: str = REPORT_JSON

    @cached_property
    def _typed(self) -> tuple[Any, ShapeError | None]:
        declared = kind_named(self.kind) if self.kind else None
        if declared is None or declared.report is None or not self.report:
            return None, None
        try:
            return declared.read(self.report), None
        except ShapeError as exc:
            return None, exc

    def typed(self) -> Any:
        """``report`` as its kind's typed report (:meth:`lab.kinds.Kind.read`), read once for the page, the log and
        the header; None for a kind with no typed report (or no kind the lab knows) or an empty ``report``.

        Raises:
            ShapeError: ``report`` is not in its kind's shape (one line naming where).
        """
        typed, error = self._typed
        if error is not None:
            raise error
        return typed

    @property
    def model(self) -> ModelSource | None:
        """The report's model record (:func:`model_record` of :meth:`typed`); None when it names none or is not in
        its kind's shape (its page says why)."""
        try:
            return model_record(self.typed())
        except ShapeError:
            return None


def model_record(report: Any) -> ModelSource | None:
    """A typed report's model record: its ``model``, else its environment's, else for a report that names its model
    only in its settings (``lab intervene``'s, which runs on torch) a record of what they say; None for one that
    records no model (or for None).

    >>> model_record(None) is None
    True
    """
    match report:
        case object(model=ModelSource() as model) | object(environment=Environment(model=ModelSource() as model)):
            return model
        case object(settings=InterveneSettings() as settings):
            return ModelSource(model=settings.model, weights=settings.weights, device=settings.device,
                               dtype=settings.dtype)
    return None


class _LongIntegerError(ValueError):
    """A JSON integer with more digits than Python converts (``sys.int_info.default_max_str_digits``, 4,300):
    no report the lab writes holds one, and ``int()`` refuses it with a message that names no file."""

    def __init__(self, digits: int):
        super().__init__(f"an integer of {digits:,} digits")


def _json_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _LongIntegerError(len(text.lstrip("-"))) from None


def _parsed(data: bytes) -> Any:
    """A JSON file's bytes parsed, its text as written.

    Raises:
        UnicodeDecodeError, json.JSONDecodeError, RecursionError: as :func:`json.loads`.
        ValueError: an integer longer than Python converts (the message says how many digits).
    """
    return json.loads(data.decode("utf-8"), parse_int=_json_int)


def _json(data: bytes) -> Any:
    """A JSON file's bytes parsed (:func:`_parsed`), its text as :func:`printable_data` shows it."""
    return printable_data(_parsed(data))


def raw_json(path: Path) -> Any:
    """A JSON file parsed with its text as written, bounded like every read (:data:`MAX_JSON_BYTES`), for what is
    used, never shown: a folder's path, whose escaped form (:func:`read_report`) names no folder on the disk.

    Returns:
        The parsed value; None when the file is absent, too large, not a regular file or not JSON.
    """
    try:
        return _parsed(read_bounded(path, MAX_JSON_BYTES, follow_links=False))
    except (FileRefused, UnicodeDecodeError, ValueError, RecursionError):  # json.JSONDecodeError is a ValueError
        return None


def printable_data(value: Any) -> Any:
    """``value`` (parsed JSON, a CSV row) with every string in it, keys too, as :func:`lab.safe_text.printable`
    shows it: a page shows a report's text as the terminal and ``summary.md`` do, never a raw right-to-left
    override or zero-width space.

    >>> printable_data({"prompt\u200b": ["a\u202eb", 1, None]})
    {'prompt\\\\u200b': ['a\\\\u202eb', 1, None]}
    """
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(k) if isinstance(k, str) else k: printable_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable_data(v) for v in value]
    return value


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Rows of a CSV with more cells than its header keep them under this column, so none is lost unseen.
EXTRA_CELLS = "(extra cells)"


def read_report(path: str | Path, name: str | None = None, kind: str | None = None) -> ReportFiles:
    """Read a report directory's files for a page.

    Args:
        path: The report directory (a staging directory while the report is being written).
        name: Its final name (default: ``path``'s name); the kind and date are read from it.
        kind: The report kind, when the caller knows it (default: read from ``name``).

    Returns:
        A :class:`ReportFiles`; a file that cannot be read is named in ``problems``, never raised.

    Raises:
        NotADirectoryError: ``path`` is not a directory.
    """
    path = Path(path)
    if not path.is_dir():
        raise NotADirectoryError(f"{str(path)!r} is not a report directory")
    name = name or path.name
    kind = kind if kind is not None else kind_of(name)
    # The exact figures: report.json, or in a report written before it (REPORT_FORMAT), where its kind kept them then
    # (a study's study.json): an older report opens as it did.
    declared = kind_named(kind)
    older = declared.older_file if declared is not None else None
    exact = older if older and not (path / REPORT_JSON).is_file() else REPORT_JSON
    problems: list[str] = []
    report: dict[str, Any] = {}
    summary = ""
    csvs: dict[str, list[dict[str, str]]] = {}
    images: dict[str, str] = {}
    svgs: dict[str, str] = {}
    jsons: dict[str, dict[str, Any]] = {}
    other: list[str] = []
    for f in sorted(path.iterdir(), key=lambda p: p.name):
        if f.name.startswith(".") or f.name == "index.html" or (f.is_dir() and not f.is_symlink()):
            continue
        if f.is_symlink() or not f.is_file():  # the lab writes neither: a page shows the report's own files only
            problems.append(f"{f.name}: not read ({'a link' if f.is_symlink() else 'not a regular file'})")
            continue
        suffix = f.suffix.lower()
        limit = {".json": MAX_JSON_BYTES, ".csv": MAX_CSV_BYTES, ".png": MAX_IMAGE_BYTES,
                 ".svg": MAX_IMAGE_BYTES, ".md": MAX_CSV_BYTES}.get(suffix)
        if limit is None:
            other.append(f.name)
            continue
        try:
            data = read_bounded(f, limit, follow_links=False)  # a page shows the report's own files only
        except FileRefused:
            problems.append(f"{f.name}: not read (larger than {limit // (1024 * 1024)} MB or unreadable)")
            other.append(f.name)
            continue
        try:
            if f.name == exact:
                parsed = _json(data)
                if isinstance(parsed, dict):
                    report = parsed
                else:
                    kind_of_value = "an array" if isinstance(parsed, list) else "null" if parsed is None else "a single value"
                    problems.append(f"{f.name}: not read ({kind_of_value}, not a JSON object)")
            elif f.name == "summary.md":
                summary = printable(data.decode("utf-8"))
            elif suffix == ".csv":
                rows = printable_data(list(csv.DictReader(data.decode("utf-8").splitlines(), restkey=EXTRA_CELLS)))
                csvs[f.name] = rows
                if any(EXTRA_CELLS in r or None in r.values() for r in rows):
                    problems.append(f"{f.name}: some rows have more or fewer cells than the header")
            elif suffix == ".png":
                if not data.startswith(PNG_SIGNATURE):
                    problems.append(f"{f.name}: not shown (not a PNG image)")
                    other.append(f.name)
                    continue
                images[f.name] = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
            elif suffix == ".svg":
                body = svg_body(data.decode("utf-8"))
                inline = inline_svg(body)
                if inline is not None:
                    svgs[f.name] = inline
                elif body:
                    images[f.name] = "data:image/svg+xml;base64," + base64.b64encode(data).decode("ascii")
                    problems.append(f"{f.name}: shown as an image, not inline (it holds what a plot does not: a "
                                    "script, an event handler, a non-SVG element, a stylesheet or an outside reference)")
                else:
                    problems.append(f"{f.name}: not shown (not an SVG image)")
                    other.append(f.name)
            elif suffix == ".json":
                parsed = _json(data)
                if isinstance(parsed, dict):
                    jsons[f.name] = parsed
                other.append(f.name)
            else:
                other.append(f.name)
        except (UnicodeDecodeError, json.JSONDecodeError, csv.Error) as exc:
            problems.append(f"{f.name}: not read ({type(exc).__name__})")
        except _LongIntegerError as exc:
            problems.append(f"{f.name}: not read ({exc})")
        except RecursionError:  # JSON nested deeper than Python's parser recurses
            problems.append(f"{f.name}: not read (nested too deeply)")
    return ReportFiles(path=path, name=name, kind=kind, report=report,
                       summary=summary, csvs=csvs, images=images, svgs=svgs, jsons=jsons, other=tuple(other),
                       problems=tuple(problems), exact=exact)
