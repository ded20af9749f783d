"""What a page is drawn with: page sections, the number formatter, the Jinja2 environment and its assets.

A kind's module (named by its declaration in :mod:`lab.kinds`) turns a report's files as read
(:mod:`lab.views.files`) into :class:`Section` objects; :mod:`lab.views.page` lays the sections out.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
import sys
import unicodedata
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import jinja2
from markupsafe import Markup

from lab import ranges
from lab.numbers import PAGE_MISSING, number_text
from lab.ranges import ENTROPY_BITS, Range
from lab.runs.files import write_text_atomic
from lab.safe_text import printable

MAX_TABLE_ROWS = 500  # rows of one CSV shown in a page's table; the file holds the rest


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
    """What a kind's page module (:attr:`lab.kinds.Kind.page`) adds to its reports' pages, its ``page(files)``.

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
