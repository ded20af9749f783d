"""What every ``summary.md`` writer shares: figures as text, table lines and the busy-machine note."""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from lab.machine import busy_warning

_RULE = {"l": "---", "r": "---:", "c": ":---:"}


def fmt_number(x: Any, spec: str = ".3f") -> str:
    """``x`` in format ``spec``, or ``"n/a"`` for None or NaN (a figure that could not be measured)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return format(x, spec)


def fmt_finite(x: Any, spec: str = ".3f") -> str:
    """``x`` in format ``spec``, or ``"n/a"`` for None and a float that is not finite (NaN, +-inf: what
    ``report.json`` holds as None)."""
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def md_row(cells: Iterable[Any]) -> str:
    """One markdown table line, ``| a | b |``, of each cell's ``str``."""
    return "| " + " | ".join(map(str, cells)) + " |"


def md_table(header: str | Sequence[str], rows: Iterable[Iterable[Any]] = (), align: str = "") -> list[str]:
    """A markdown table's lines: the header, its rule and one line per row (:func:`md_row`).

    Args:
        header: The column names, or them as they read between the outer bars (``"pos | token"``).
        rows: Each row's cells.
        align: One letter per column: ``l`` (``---``), ``r`` (``---:``) or ``c`` (``:---:``); default all ``l``.
    """
    header = header if isinstance(header, str) else " | ".join(header)
    rule = "".join(_RULE[a] + "|" for a in align or "l" * (header.count("|") + 1))
    return [f"| {header} |", "|" + rule, *map(md_row, rows)]


def busy_lines(load: Mapping[str, Any] | None, label: str = "") -> list[str]:
    """The busy-machine warning (:func:`lab.machine.busy_warning`) as a bold quote and a blank line, after
    ``label``; no lines on a quiet machine or without a load record."""
    warning = busy_warning(load or {})
    return [f"> **{label}{warning}**", ""] if warning else []
