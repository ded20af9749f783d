"""Shared Rich consoles: results to stdout, progress and logs to stderr.

Terminal safety: prompts, file names and model output are echoed everywhere, and any
of them may hold an escape sequence (``ESC [2J`` clears the screen, ``ESC ]0;...``
retitles the window), a bidirectional control that reorders what is shown, an
invisible character, or Rich markup (``[bold]``). Every console made here
(:class:`SafeConsole`) therefore parses no markup in strings (styles come from
``Text`` objects and ``style=``) and shows each such character of the text it
prints as an escape (:func:`lab.safe_text.printable`), while the escape sequences Rich
itself emits for styles and cursor control are untouched.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable

from rich.console import Console
from rich.logging import RichHandler
from rich.segment import Segment
from rich.text import Text

from lab.machine import busy_warning, quiet_loaders
from lab.provenance import MachineLoad
from lab.safe_text import printable


class SafeConsole(Console):
    """A Rich console that cannot be driven by the text it prints (see the module docstring)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("markup", False)
        kwargs.setdefault("highlight", False)
        super().__init__(**kwargs)

    # Rich turns everything into segments of (text, style, control) and renders the styles to
    # escape sequences here; escaping the text of non-control segments just before that is the one
    # place every path (print, log, tables, panels, progress) goes through. A private hook of Rich
    # (stable since 10.x); tests/unit/test_terminal_safety.py fails if it stops being called.
    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(seg if seg.control else Segment(printable(seg.text), seg.style, seg.control)
                                      for seg in buffer)


def stdout_console() -> Console:
    """Console for results (the coloured decode, tables, panels)."""
    return SafeConsole()


def stderr_console() -> Console:
    """Console for progress bars and logs, so results on stdout stay pipeable."""
    return SafeConsole(stderr=True)


def setup_logging(verbose: bool = False) -> None:
    """Route the lab's logging to stderr through Rich; quiet transformers' progress bars."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(console=stderr_console(), show_path=False, markup=False)],
        force=True,
    )
    quiet_loaders()
    # torch's own default, set by its import; one that failed part-way (`ulimit -v`) never set it,
    # and its exit hooks then logged at INFO after the run's one line
    logging.getLogger("torch").setLevel(logging.WARNING)


def print_report(console: Console, folder: object, note: str = "") -> None:
    """The last lines of a run: where its report is (``report: DIR``, then ``note`` when given) and, when it has
    one, its page's address (``page: file:///.../index.html``, :mod:`lab.views`), so a run from a terminal
    without a browser says what to open or copy."""
    console.print(f"report: {folder}" + (f" {note}" if note else ""), markup=False, highlight=False, soft_wrap=True)
    page = Path(str(folder)) / "index.html"
    if page.is_file():
        console.print(f"page: {page.resolve().as_uri()}", markup=False, highlight=False, soft_wrap=True)


def print_busy(console: Console, load: MachineLoad | None) -> None:
    """The busy-machine warning (:func:`lab.machine.busy_warning`) in bold yellow; nothing on a quiet machine."""
    if warning := busy_warning(load):
        console.print(Text(warning, style="bold yellow"))
