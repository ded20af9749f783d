"""What every ``summary.md`` writer shares: table lines and the busy-machine note (a figure as text:
:func:`lab.numbers.number_text`)."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from lab.machine import busy_warning
from lab.provenance import MachineLoad

_RULE = {"l": "---", "r": "---:", "c": ":---:"}


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


def busy_lines(load: MachineLoad | None, label: str = "") -> list[str]:
    """The busy-machine warning (:func:`lab.machine.busy_warning`) as a bold quote and a blank line, after
    ``label``; no lines on a quiet machine or without a load record."""
    warning = busy_warning(load)
    return [f"> **{label}{warning}**", ""] if warning else []
