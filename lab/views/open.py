"""What ``lab view`` does with folders: draw a page or a log, draw them all again, open a page in a browser."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from lab.views.core import kind_of
from lab.views.log import rebuild_log
from lab.views.page import PAGE, write_page

logger = logging.getLogger(__name__)


def _written(what: Path, write, *args) -> Path:
    """``write(*args)``; an ``OSError`` (a read-only folder, an ``index.html`` that is a folder) as one line."""
    try:
        return write(*args)
    except OSError as exc:
        raise ValueError(f"{str(what)!r}: its page could not be written ({exc.strerror or exc})") from exc


def is_report(path: Path) -> bool:
    """A report directory (it holds ``report.json`` or ``summary.md``), not a folder of reports."""
    return (path / "report.json").is_file() or (path / "summary.md").is_file()


def show(path: Path) -> Path:
    """The page of ``path``: a report's ``index.html`` drawn again from its files, or a reports folder's log.

    Raises:
        ValueError: ``path`` does not exist or is not a folder, or its page could not be written.
    """
    if not path.is_dir():
        raise ValueError(f"DIR={str(path)!r} is not a folder" if path.exists() else f"DIR={str(path)!r} does not exist")
    if is_report(path):
        page = _written(path, write_page, path)
        try:
            rebuild_log(path.parent)
        except OSError as exc:  # the page is drawn; only the log beside it is not updated
            logger.warning("the experiment log %s was not updated (%s)", path.parent / PAGE, exc.strerror or exc)
        return page
    return _written(path, rebuild_log, path)


def rebuild_folder(root: Path) -> tuple[Path, int]:
    """Draw every report's page under ``root`` again (and an integration run's reports inside it), then
    the log; returns the log's path and the number of pages drawn.

    Raises:
        ValueError: ``root`` is not a folder, or a page or the log could not be written.
    """
    if not root.is_dir():
        raise ValueError(f"DIR={str(root)!r} is not a reports folder")
    count = 0
    for path in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if is_report(path):
            _written(path, write_page, path)
            count += 1
        elif kind_of(path.name) == "integration":
            page, n = rebuild_folder(path)
            count += n
    return _written(root, rebuild_log, root), count


def open_page(page: Path) -> bool:
    """Open ``page`` in the user's browser when one is at hand (a terminal, and a display or a desktop
    system); False when none is (the path is already printed)."""
    import webbrowser

    if not sys.stdout.isatty():
        return False
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return False
    try:
        return webbrowser.open(page.resolve().as_uri())
    except webbrowser.Error:
        return False
