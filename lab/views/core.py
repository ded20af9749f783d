"""What a page is drawn from: a report directory's files as read, page sections, the Jinja2 environment.

A report directory holds ``report.json`` (the exact figures), ``summary.md`` (the prose and
tables), CSVs (one row per token, round, prompt ...) and plots (PNG, SVG). :func:`read_report`
reads them once, bounded (:data:`MAX_JSON_BYTES` ...), so a page is drawn from what the report
says, never from the run's objects. A kind's module (``lab/views/kinds/<kind>.py``) turns them
into :class:`Section` objects; :mod:`lab.views.page` lays the sections out.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import html
import json
import math
import os
import re
import sys
import unicodedata
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import jinja2
from markupsafe import Markup

from lab import ranges
from lab.files import FileRefused, read_bounded
from lab.numbers import PAGE_MISSING, number_text
from lab.ranges import ENTROPY_BITS, Range
from lab.runs.files import write_text_atomic
from lab.safe_text import printable

# Bounds on what a page embeds, so a page's size follows its data and a damaged or huge file
# cannot make a page of gigabytes: a study's report.json is ~1-3 MB, its CSVs ~100 kB.
MAX_JSON_BYTES = 32 * 1024 * 1024
MAX_CSV_BYTES = 8 * 1024 * 1024
MAX_IMAGE_BYTES = 4 * 1024 * 1024
MAX_TABLE_ROWS = 500  # rows of one CSV shown in a page's table; the file holds the rest

# Every kind of report the lab writes, longest first so "bench-sinks" is not read as "bench".
KINDS = ("calibrate-health-validate", "calibrate-health", "calibrate-sinks", "validate-context", "bench-weights",
         "bench-tracker", "bench-sinks", "bench", "entropy", "sinks", "speculate", "study", "stream", "intervene",
         "compare", "integration")

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
    for kind in KINDS:
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
        kind: The report kind (:data:`KINDS`), ``""`` when the name says none.
        report: ``report.json`` parsed, or the kind's own ``<kind>.json`` where it writes no report.json (a
            study's ``study.json``); ``{}`` when absent, unreadable or too large (see ``problems``). Its text
            (keys and strings), like ``summary``'s, ``csvs``' and ``jsons``', is as
            :func:`lab.safe_text.printable` shows it: control, bidirectional and invisible characters escaped.
        summary: ``summary.md`` as text (``""`` when absent).
        csvs: ``{file name: rows}`` of every CSV, each row a ``{column: cell text}``.
        images: ``{file name: data URI}`` of every PNG, and of every SVG that :func:`inline_svg` refuses
            to inline (an ``<img>`` runs no script, loads nothing and styles nothing outside itself).
        svgs: ``{file name: SVG markup}`` of every SVG :func:`inline_svg` passes, as it wrote it anew (links in
            them work).
        jsons: ``{file name: object}`` of the report's other JSON files (a calibration's ``calibration.json``,
            a bench's ``bench.json``), parsed and bounded like ``report``.
        other: Names of the other files (listed, not embedded).
        problems: One line per file that could not be read or was too large, shown on the page.
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

    @property
    def model(self) -> dict[str, Any]:
        """The report's model record, ``{}`` when none: its ``model`` or its environment's (``report.json``
        first, then the report's other JSON files), else a ``settings`` naming the model (``lab intervene``)."""
        for data in (self.report, *self.jsons.values()):
            environment = data.get("environment")
            for candidate in (data.get("model"), environment.get("model") if isinstance(environment, dict) else None):
                if isinstance(candidate, dict):
                    return candidate
            settings = data.get("settings")
            if isinstance(settings, dict) and isinstance(settings.get("model"), str):
                return {k: settings[k] for k in ("model", "weights", "runtime", "device", "dtype") if k in settings}
        return {}


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
    # The exact figures: report.json, or where a kind writes none, its own <kind>.json (a study's study.json).
    exact = "report.json" if (path / "report.json").is_file() else f"{kind or 'report'}.json"
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
                body = _svg_body(data.decode("utf-8"))
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
                       problems=tuple(problems))


def _svg_body(text: str) -> str:
    """An SVG file's ``<svg>`` element alone (no XML declaration or DOCTYPE, which HTML does not take)."""
    start = text.find("<svg")
    return text[start:] if start >= 0 else ""


# What an inlined SVG may hold: SVG's drawing elements by local name, so no element runs script, embeds a document,
# animates an attribute or leaves SVG for HTML (an HTML parser reads <p>, <img> ... inside an <svg> as HTML). No event
# handler, and every link and url(...) inside the page (#...). The lab's own plots (matplotlib's SVG, the study's
# linked points) hold nothing else. <metadata> (matplotlib's RDF) is dropped, never shown.
SVG_ELEMENTS = frozenset({
    "svg", "g", "defs", "symbol", "use", "path", "rect", "circle", "ellipse", "line", "polyline", "polygon",
    "text", "tspan", "textpath", "title", "desc", "clippath", "mask", "pattern", "marker",
    "lineargradient", "radialgradient", "stop", "style", "a", "image", "filter", "feblend", "fecolormatrix",
    "fecomponenttransfer", "fecomposite", "feflood", "fefunca", "fefuncb", "fefuncg", "fefuncr",
    "fegaussianblur", "femerge", "femergenode", "femorphology", "feoffset", "fetile"})
# Elements whose content an HTML parser reads as HTML (SVG's HTML integration points): they may hold text only.
SVG_TEXT_ONLY = frozenset({"title", "desc", "style"})
# The one stylesheet an inlined SVG may carry: matplotlib's own. A <style> applies to the whole page, so any other
# (restyling or blanking the page) sends the SVG to an <img>, where its styles stay inside it.
MATPLOTLIB_SVG_STYLE = "*{stroke-linejoin: round; stroke-linecap: butt}"
_SVG_NS = "http://www.w3.org/2000/svg"
# Namespaced attributes an HTML parser maps back to the same namespace (the HTML standard's "adjust foreign
# attributes"), so writing them with these prefixes reads the same in both parsers.
_SVG_ATTRIBUTE_PREFIXES = {"http://www.w3.org/1999/xlink": "xlink:", "http://www.w3.org/XML/1998/namespace": "xml:"}
_SVG_URL = re.compile(r"url\s*\(\s*['\"]?\s*([^)'\"\s]*)", re.IGNORECASE)
# The CSS functions an attribute (a presentation attribute, ``style``, ``transform``) may call: url(#...) and the
# transforms matplotlib writes. Any other (``image-set("http://...")``, ``src()``, ``cross-fade()``) may name a file
# with no url( for the check to find; and no backslash, whose CSS escape (``u\72l(``) spells url( unseen.
_SVG_FUNCTION = re.compile(r"([A-Za-z0-9_-]*)\s*\(")
SVG_CSS_FUNCTIONS = frozenset({"url", "translate", "rotate", "scale", "matrix", "skewx", "skewy", "rgb", "rgba"})
# What the outer <svg> (a CSS box of the page) may carry: its size and coordinates. overflow="visible" or a transform
# there (presentation attributes, as a style would be) lays the drawing over the rest of the page.
SVG_OUTER_ATTRIBUTES = frozenset({"width", "height", "viewbox", "version", "preserveaspectratio"})
_SVG_DATA_IMAGE = re.compile(r"data:image/(png|jpeg|gif|webp);", re.IGNORECASE)
# Markup an XML parser reads as a comment or a declaration but an HTML parser may end early (<!--> ...):
# refused, so the file's own reading is never in doubt.
_SVG_MARKUP_DECLARATION = re.compile(r"<\?|<!(?!--|\[CDATA\[)|<!-->|<!---", re.IGNORECASE)


def inline_svg(body: str) -> str | None:
    """``body`` (an SVG file from ``<svg`` on) as markup a page may inline, or None when it must be an ``<img>``.

    The file is parsed as XML (expat), checked, and written anew from the parsed tree: every element by its local
    name, every text and attribute value escaped, no comment, CDATA section or processing instruction kept. So an
    HTML parser (the browser's) reads exactly the elements the check saw: a CDATA section in a ``<title>`` that an
    HTML parser would end early, or any markup hidden from the XML parser, reaches the page as text. Checked:
    only :data:`SVG_ELEMENTS` in SVG's namespace, text only in :data:`SVG_TEXT_ONLY`, no ``on*`` attribute, every
    ``href``/``src`` and ``url(...)`` inside the page (``#...``; an ``<image>`` may also take a PNG/JPEG/GIF/WebP
    data URI), no ``@import`` or ``javascript:``, no stylesheet but :data:`MATPLOTLIB_SVG_STYLE`, no CSS function in an attribute
    but :data:`SVG_CSS_FUNCTIONS` and no backslash (a CSS escape), the outer ``<svg>`` holding only
    :data:`SVG_OUTER_ATTRIBUTES` (no style, overflow or transform that lays it over the page), no attribute in a namespace other than xlink's and xml's. Anything else is shown as an ``<img>``, where an SVG runs no script,
    loads nothing and styles nothing outside itself.

    >>> inline_svg('<svg xmlns="http://www.w3.org/2000/svg"><title><![CDATA[</title><img src=x>]]></title></svg>')
    '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"><title>&lt;/title&gt;&lt;img src=x&gt;</title></svg>'
    >>> inline_svg('<svg xmlns="http://www.w3.org/2000/svg"><style>svg{display:none}</style></svg>') is None
    True
    """
    lowered = body.lower()
    if not body or "javascript:" in lowered or "@import" in lowered or _SVG_MARKUP_DECLARATION.search(body):
        return None
    try:
        root = ElementTree.fromstring(body)  # expat: no external entities; entity expansion bounded (2.4+)
    except (ElementTree.ParseError, ValueError, RecursionError):
        return None
    if root.tag != f"{{{_SVG_NS}}}svg":
        return None
    out: list[str] = []
    try:
        _write_svg_element(root, out, top=True)
    except (_NotInert, RecursionError):
        return None
    return "".join(out)


class _NotInert(Exception):
    """An SVG holds what :func:`inline_svg` does not inline."""


def _write_svg_element(element: ElementTree.Element, out: list[str], top: bool = False) -> None:
    """Append ``element`` (checked) and its content to ``out`` as HTML-safe markup; raise :class:`_NotInert`."""
    tag = element.tag if isinstance(element.tag, str) else ""
    if not tag.startswith(f"{{{_SVG_NS}}}"):
        raise _NotInert(tag)
    name = tag.rsplit("}", 1)[1]
    lower = name.lower()
    if lower == "metadata":
        return
    if lower not in SVG_ELEMENTS:
        raise _NotInert(name)
    if lower in SVG_TEXT_ONLY and len(element):
        raise _NotInert(name)
    if lower == "style" and (element.text or "").strip() != MATPLOTLIB_SVG_STYLE:
        raise _NotInert(name)
    attributes = [f'xmlns="{_SVG_NS}" xmlns:xlink="http://www.w3.org/1999/xlink"'] if top else []
    for key, value in element.attrib.items():
        namespace, _, local = key[1:].partition("}") if key.startswith("{") else ("", "", key)
        if namespace and namespace not in _SVG_ATTRIBUTE_PREFIXES:
            raise _NotInert(key)
        if local.lower().startswith("on") or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", local):
            raise _NotInert(key)
        if top and (namespace or local.lower() not in SVG_OUTER_ATTRIBUTES):  # a CSS box of the page: kept in it
            raise _NotInert(key)
        if "\\" in value or any(f and f.lower() not in SVG_CSS_FUNCTIONS for f in _SVG_FUNCTION.findall(value)):
            raise _NotInert(key)
        if local.lower() in ("href", "src") and not (
                value.startswith("#") or (lower == "image" and _SVG_DATA_IMAGE.match(value))):
            raise _NotInert(key)
        if any(not ref.startswith("#") for ref in _SVG_URL.findall(value)):
            raise _NotInert(key)
        attributes.append(f'{_SVG_ATTRIBUTE_PREFIXES.get(namespace, "")}{local}="{html.escape(value, quote=True)}"')
    text = element.text or ""
    if any(not ref.startswith("#") for ref in _SVG_URL.findall(text)):
        raise _NotInert(name)
    out.append(f"<{name}{''.join(' ' + a for a in attributes)}>{html.escape(text, quote=False)}")
    for child in element:
        _write_svg_element(child, out)
        out.append(html.escape(child.tail or "", quote=False))
    out.append(f"</{name}>")


def row_anchor(prefix: str, key: Any) -> str:
    """The id of a table row a plotted point links to: ``prefix`` then ``key``, each character outside
    ``[A-Za-z0-9_-]`` written as ``.<hex>.``, so any key gives a valid fragment and two keys never one id.

    >>> row_anchor("prompt-", "factual-01"), row_anchor("prompt-", "a b.c")
    ('prompt-factual-01', 'prompt-a.20.b.2e.c')
    """
    return prefix + "".join(c if c.isascii() and (c.isalnum() or c in "_-") else f".{ord(c):x}." for c in str(key))


@dataclass(frozen=True)
class Section:
    """One part of a page: a heading and its HTML (already escaped, or built by a template)."""

    title: str
    html: Markup
    anchor: str = ""


# A figure on a page is read, not copied: six significant figures are past any this lab measures to (timings
# to a microsecond of a second, probabilities to 1e-6), and a hand-edited 1e308 must not fill a line. An integer
# of up to seven digits (a count: tokens, rounds, prompts, a seed as typed) is shown whole; report.json keeps
# every figure exact.
MAX_FIGURES = 6
MAX_EXACT_DIGITS = 7


def fmt(value: Any, digits: int = 3) -> str:
    """A number as a page shows it: ``digits`` significant figures (at most :data:`MAX_FIGURES`; a negative zero as
    ``0``), ``-`` for None or NaN (:func:`lab.numbers.number_text` with the page's marker,
    :data:`lab.numbers.PAGE_MISSING`); an integer whole up to :data:`MAX_EXACT_DIGITS` digits, past it as a float is.

    >>> fmt(0.123456), fmt(None), fmt(float("nan")), fmt(12), fmt("x"), fmt(1e308, 400), fmt(10**400)
    ('0.123', '-', '-', '12', 'x', '1e+308', '1.00000e+400')
    """
    if value is None:
        return number_text(value, missing=PAGE_MISSING)
    if isinstance(value, bool):
        return "yes" if value else "no"
    figures = max(1, min(digits, MAX_FIGURES))
    if isinstance(value, int):
        if abs(value) < 10 ** MAX_EXACT_DIGITS:
            return str(value)
        if abs(value) <= sys.float_info.max:
            return f"{float(value):.{MAX_FIGURES}g}"
        return f"{Decimal(value):.{MAX_FIGURES - 1}e}"  # past a float: no int-to-text digit limit either
    if isinstance(value, float):
        return number_text(value + 0.0, f".{figures}g", PAGE_MISSING)  # -0.0 + 0.0 is 0.0
    return str(value)


def figure_problem(value: Any, rng: Range, what: str, top: tuple[float, str] | None = None) -> str | None:
    """Why ``value`` cannot be the figure ``what`` (outside its physical range ``rng``, or above ``top``), or None.

    The one check of a report's figures against their physical ranges (:mod:`lab.ranges`' "physical ranges of
    a report's figures"); every kind's page calls it, through :func:`figure` or to leave a value out of a chart.

    Args:
        value: The figure as the report holds it; None or NaN (not measured) is never a problem.
        rng: Its physical range (``lab.ranges.PROBABILITY`` ...).
        what: The figure's name, as the problem says it (``"entropy"``).
        top: An upper end the report itself sets, with its words: ``(log2 V, "log2 V = 15.9 bits")``.

    Returns:
        ``"entropy above log2 V = 15.9 bits"``, ``"alpha must be in [0, 1]"`` ..., or None.

    >>> from lab.ranges import ENTROPY_BITS, PROBABILITY
    >>> figure_problem(0.5, PROBABILITY, "alpha"), figure_problem(1.5, PROBABILITY, "alpha")
    (None, 'alpha must be in [0, 1]')
    >>> figure_problem(20.0, ENTROPY_BITS, "entropy", (15.9, "log2 V = 15.9 bits"))
    'entropy above log2 V = 15.9 bits'
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    problem = rng.problem(value)
    if problem is not None:
        return f"{what} {problem}"
    if top is not None and value > top[0]:
        return f"{what} above {top[1]}"
    return None


def figure(value: Any, rng: Range, what: str, digits: int = 3, top: tuple[float, str] | None = None,
           spec: str = "") -> str:
    """A report's figure as a page shows it: :func:`fmt` (or ``format(value, spec)`` where that needs no more
    than :data:`MAX_FIGURES` figures), and where :func:`figure_problem` finds it impossible, said so beside it,
    never shown as fact.

    >>> from lab.ranges import ENTROPY_BITS, PROBABILITY, VARENTROPY_BITS2
    >>> figure(0.25, PROBABILITY, "p"), figure(None, PROBABILITY, "p"), figure(4.2, VARENTROPY_BITS2, "v", spec=".2f")
    ('0.25', '-', '4.20')
    >>> figure(1e308, ENTROPY_BITS, "entropy", top=(15.9, "log2 V = 15.9 bits"), spec=".2f")
    '1e+308 (out of range: entropy above log2 V = 15.9 bits)'
    >>> figure(1e308, VARENTROPY_BITS2, "varentropy", spec=".2f")
    '1e+308'
    """
    problem = figure_problem(value, rng, what, top)
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    shown = fmt(value, digits)
    if number and spec and abs(value) <= sys.float_info.max and math.isfinite(value):  # no float of a huge int
        written = format(value, spec)
        if len(written.lstrip("-+0.").replace(".", "")) <= MAX_FIGURES:
            shown = written
    if problem is None:
        return shown
    if isinstance(value, float):  # an infinity, which fmt shows as "-" (not measured), is shown as itself here
        shown = f"{value:.{max(1, min(digits, MAX_FIGURES))}g}"
    return f"{shown} (out of range: {problem})"


def figure_in(ranges: Mapping[str, tuple[Range, str]], key: str, value: Any, digits: int = 3, spec: str = "",
              top: tuple[float, str] | None = None) -> str:
    """``value`` as a kind's page prints its figure ``key``: checked (:func:`figure`) against the kind's table of
    physical ranges, ``{key: (range, its words)}``, an entropy also against ``top`` (log2 V); a key with no
    range as :func:`fmt` prints it.

    >>> from lab.ranges import ENTROPY_BITS, PROBABILITY
    >>> table = {"alpha": (PROBABILITY, "alpha"), "h": (ENTROPY_BITS, "entropy")}
    >>> figure_in(table, "alpha", 1.5), figure_in(table, "h", 20.0, top=(15.9, "log2 V")), figure_in(table, "x", 2.0)
    ('1.5 (out of range: alpha must be in [0, 1])', '20 (out of range: entropy above log2 V)', '2')
    """
    if key not in ranges:
        return fmt(value, digits)
    rng, what = ranges[key]
    return figure(value, rng, what, digits, top if rng is ENTROPY_BITS else None, spec)


# An integer of more digits than any 64-bit count, id or seed (2**64 - 1 has 20) is no figure a run writes: a
# template printing one as it is (a round number, a token id) shows it as fmt does, never hundreds of digits.
MAX_PRINTED_DIGITS = 20


def _printed(value: Any) -> Any:
    """What a template prints: a string as :func:`lab.safe_text.printable` shows it (a file or folder name read
    from the disk, a model name), an integer past :data:`MAX_PRINTED_DIGITS` digits as :func:`fmt` shows it,
    markup built by the pages as it is."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** MAX_PRINTED_DIGITS:
        return fmt(value)
    return printable(value) if isinstance(value, str) and not isinstance(value, Markup) else value


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The one Jinja2 environment of the pages: templates from ``lab/views/templates``, autoescaping on, every
    printed string as :func:`lab.safe_text.printable` shows it (:func:`_printed`), a report's figure checked
    against its physical range by the ``figure`` filter (:func:`figure`, with :mod:`lab.ranges` as ``ranges``)."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("lab.views", "templates"),
                             autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             finalize=_printed)
    env.filters["fmt"] = fmt
    env.filters["figure"] = figure  # {{ x | figure(ranges.PROBABILITY, "a probability") }}
    env.globals["ranges"] = ranges
    env.filters["href"] = href
    env.globals["asset"] = asset
    env.globals["content_security_policy"] = content_security_policy()
    return env


def href(path: str) -> str:
    """A relative link to ``path`` (a file or folder name, ``/`` kept): ``./`` then every byte of its file-system
    name percent-encoded but ``/``, so no name reads as a scheme (``javascript:``), a fragment (``#``) or a query.

    >>> href("a b#?.csv"), href("javascript:x/index.html")
    ('./a%20b%23%3F.csv', './javascript%3Ax/index.html')
    """
    from urllib.parse import quote

    return "./" + quote(os.fsencode(path))


def render(template: str, **context: Any) -> Markup:
    """Render one template of ``lab/views/templates`` with ``context``; the result is safe HTML."""
    return Markup(environment().get_template(template).render(**context))


@lru_cache(maxsize=None)
def asset(name: str) -> Markup:
    """An inline asset of ``lab/views/static`` (the pages' CSS and scripts), as text."""
    return Markup(resources.files("lab.views").joinpath("static", name).read_text(encoding="utf-8"))


# Every script a page may run: the files of ``lab/views/static`` that templates inline as ``<script>{{ asset(name)
# }}</script>``. The Content-Security-Policy allows these by their SHA-256 and nothing else, so markup that reaches
# a page from a report's files (an SVG, a prompt) cannot run script even if it gets past every check.
PAGE_SCRIPTS = ("page.js", "entropy_chart.js", "sinks_bars.js")


@lru_cache(maxsize=1)
def content_security_policy() -> str:
    """The pages' Content-Security-Policy: no request of any kind (``default-src 'none'``), images only as data
    URIs, inline styles, and as script only :data:`PAGE_SCRIPTS`, each by its hash (CSP Level 3, ``'sha256-...'``).

    >>> policy = content_security_policy()
    >>> "'unsafe-inline'" in policy.split("script-src")[1], policy.count("'sha256-")
    (False, 3)
    """
    hashes = " ".join("'sha256-" + base64.b64encode(hashlib.sha256(asset(name).encode("utf-8")).digest()).decode("ascii")
                      + "'" for name in PAGE_SCRIPTS)
    return (f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src {hashes}; "
            "base-uri 'none'; form-action 'none'")


def table(rows: list[dict[str, Any]], columns: list[str] | None = None, *, limit: int = MAX_TABLE_ROWS,
          row_ids: list[str] | None = None) -> Markup:
    """An HTML table of ``rows`` (the first ``limit``; a line says how many more the file holds).

    Args:
        rows: One mapping per row.
        columns: The columns in order (default: the first row's keys).
        limit: Rows shown.
        row_ids: An ``id`` per row (so a plotted point can link to ``#<id>``), or None.
    """
    columns = columns or (list(rows[0].keys()) if rows else [])
    return render("table.html.j2", rows=rows[:limit], columns=columns, more=max(0, len(rows) - limit),
                  row_ids=row_ids[:limit] if row_ids else None)


@dataclass(frozen=True)
class KindPage:
    """What a kind's module adds to its reports' pages (``lab/views/kinds/<kind>.py``'s ``page(files)``).

    Attributes:
        headline: The run's headline figure in a line (shown under the title and in the experiment log).
        sections: The kind's own sections, shown first (verdicts before plots, plots before raw rows).
        covers: Files those sections already show; the page's generic "Files" part skips them.
    """

    headline: str = ""
    sections: tuple[Section, ...] = ()
    covers: frozenset[str] = frozenset()


def markdown(text: str, images: dict[str, str] | None = None, shown_above: frozenset[str] = frozenset()) -> Markup:
    """``summary.md`` as HTML: CommonMark with tables (markdown-it-py, Rich's own parser).

    Raw HTML in the text is escaped, never passed through, so a prompt cannot inject markup into a
    page. An image the summary shows (``![](entropy.png)``) becomes the report's own data URI from
    ``images``; one the report does not hold is shown as its alt text, so the page asks for no file, and
    one the page already draws (``shown_above``) says so.
    """
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(text)
    for token in tokens:
        for child in token.children or ():
            if child.type == "image":
                src = str(child.attrGet("src") or "")
                if images and src in images:
                    child.attrSet("src", images[src])
                else:
                    child.type, child.tag, child.children = "text", "", None
                    child.content = f"({child.content or src}: drawn above)" if src in shown_above else \
                        f"[{child.content or src}]"
    return Markup('<div class="md">' + md.renderer.render(tokens, md.options, {}) + "</div>")


def first_bold_line(text: str) -> str:
    """The first ``**...**`` line of a summary (the lab's summaries put their verdict there), ``""`` if none.

    >>> first_bold_line("# T\\n\\n**Verdict: H2 supported.**\\n")
    'Verdict: H2 supported.'
    >>> first_bold_line("**Verdict: rho **0.31** fails.**")
    'Verdict: rho 0.31 fails.'
    """
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("**") and s.count("**") >= 2:
            return s[2:s.rfind("**")].replace("**", "").strip()  # bold inside bold: the whole line, marks dropped
    return ""


# The pages' one colour scale for a quantity in [0, 1] (normalized entropy, attention, a difference
# mapped to [0, 1]): matplotlib's cividis, made to be read by colour-blind viewers (Nunez et al. 2018)
# and monotone in lightness, so it also reads in greyscale.
COLOUR_MAP = "cividis"


def colour(value: float | None, cmap: str = COLOUR_MAP) -> str:
    """``value`` in [0, 1] (clipped) as ``#rrggbb`` on the pages' scale; grey for None or non-finite.

    >>> colour(0.0), colour(1.0), colour(None)
    ('#00224e', '#fee838', '#999999')
    """
    if value is None or not math.isfinite(value):
        return "#999999"
    import matplotlib

    r, g, b, _ = matplotlib.colormaps[cmap](min(1.0, max(0.0, float(value))))
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def text_colour(background: str) -> str:
    """Black or white, whichever reads on ``background`` (``#rrggbb``), by its relative luminance (WCAG 2)."""
    r, g, b = (int(background[i:i + 2], 16) / 255 for i in (1, 3, 5))
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    return "#000000" if 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2] > 0.179 else "#ffffff"


def legend(low: str, high: str, cmap: str = COLOUR_MAP, steps: int = 11) -> Markup:
    """A colour bar from ``low`` to ``high`` on the scale (a CSS gradient, no image)."""
    stops = ", ".join(colour(i / (steps - 1), cmap) for i in range(steps))
    return render("legend.html.j2", low=low, high=high, stops=stops)


def token_cell(text: str) -> str:
    """Token text for a table cell or tooltip: spaces as ``·``, newline ``⏎``, tab ``⇥``, empty ``∅``.

    >>> token_cell(" Paris\\n")
    '·Paris⏎'
    """
    text = "".join("·" if unicodedata.category(ch) == "Zs" else ch for ch in text)
    return text.replace("\r", "␍").replace("\n", "⏎").replace("\t", "⇥") or "∅"


def token_inline(text: str) -> str:
    """Token text in running text: as written, a newline shown as ``⏎`` and kept as a line break, an empty
    token as ``∅`` (so every token has something to hover and focus).

    >>> token_inline("a\\n")
    'a⏎\\n'
    """
    return text.replace("\r", "␍").replace("\n", "⏎\n") or "∅"


def write_html(path: Path, text: str) -> Path:
    """Write a page whole or not at all (:func:`lab.runs.files.write_text_atomic`); a lone surrogate a report
    carried (``\\ud800``, which UTF-8 cannot hold) is written as its escape instead of failing the page.

    Raises:
        OSError: the page could not be written.
    """
    return write_text_atomic(path, text.encode("utf-8", "backslashreplace").decode("utf-8"))
