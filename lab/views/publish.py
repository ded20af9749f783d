"""A report written with its page and its line in the experiment log: what every command writes through.

:func:`lab.reports.report_dir` writes a report's files and renames the folder into place; it imports no
view. This module is the driver that adds the views: the report's ``index.html`` drawn from its written
files before the rename (so a visible report has its page) and the root's ``index.html``, the experiment
log, redrawn after it. A page or a log that cannot be drawn costs that page or that log, never the
report: a warning says so (``lab view --rebuild`` redraws both).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from lab.kinds import Kind
from lab.reports import ReportDir, report_dir
from lab.views.log import rebuild_log
from lab.views.page import PAGE, write_page

logger = logging.getLogger(__name__)


def draw_page(staging: Path, name: str, kind: str) -> None:
    """The report's ``index.html``, written into its staging folder (a command that drew its own, ``lab view A B``,
    keeps it); a failure is a warning."""
    if (staging / PAGE).exists():
        return
    try:
        write_page(staging, name=name, kind=kind)
    except Exception as exc:  # noqa: BLE001 - the report's files are complete; only its page is lost
        logger.warning("the report's page (index.html) was not written: %s: %s", type(exc).__name__, exc)


def update_log(root: Path) -> None:
    """Rebuild ``<root>/index.html``, the experiment log; a failure costs the log's update, with a warning."""
    try:
        rebuild_log(root)
    except Exception as exc:  # noqa: BLE001 - the report is in place; `lab view --rebuild` redraws the log
        logger.warning("the experiment log %s was not updated: %s: %s", root / "index.html", type(exc).__name__, exc)


@contextmanager
def report_folder(root: str | Path, kind: Kind | str, slug: str = "", *,
                  name: str | None = None) -> Iterator[ReportDir]:
    """:func:`lab.reports.report_dir` with the report's page drawn before its rename and the experiment log
    after it; arguments, what it yields and what it raises as there."""
    with report_dir(root, kind, slug, name=name, before_rename=draw_page, after_rename=update_log) as rd:
        yield rd
