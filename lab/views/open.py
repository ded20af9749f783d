"""What ``lab view`` does with folders: draw a page or a log, draw them all again, open a page in a browser."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from lab.kinds import ShapeError
from lab.kinds.compare import KIND as COMPARE
from lab.views.compare import compare_html, read_pair
from lab.views.files import kind_of, raw_json
from lab.views.log import rebuild_log
from lab.views.page import PAGE, write_index, write_page

logger = logging.getLogger(__name__)


class PageNotDrawnError(ValueError):
    """A page or a log that could not be drawn or written; the message names its folder and why, in one line."""


def drawn(what: str, write, *args) -> Any:
    """``write(*args)``; whatever stops it, as one line naming ``what`` (a folder's name as the user reads it,
    quoted) (:class:`PageNotDrawnError`): an ``OSError`` (a read-only folder, an ``index.html`` that is a
    folder), or anything a report's files provoke."""
    try:
        return write(*args)
    except OSError as exc:
        raise PageNotDrawnError(f"{what}: its page could not be written ({exc.strerror or exc})") from exc
    except Exception as exc:  # a report folder holds anything: what its files provoke costs this page only
        logger.debug("page of %s not drawn", what, exc_info=exc)
        first = (str(exc).splitlines() or [""])[0]
        raise PageNotDrawnError(f"{what}: its page could not be drawn ({type(exc).__name__}"
                                f"{': ' + first if first else ''})") from exc


def redraw(path: Path) -> Path:
    """Draw a report's page again: a comparison from the two reports its ``report.json`` names (their paths as
    written, while both exist; else its page is kept as it is: it cannot be drawn again from nothing), any other
    report from its own files.

    Raises:
        OSError: the page could not be written.
    """
    if kind_of(path.name) != "compare":
        return write_page(path)
    data = raw_json(path / "report.json")  # the folders' paths as written: read_report escapes what it shows
    try:
        names = COMPARE.read(data) if isinstance(data, dict) else None
    except ShapeError:  # a hand-edited or damaged report.json names no two reports: the page is kept as it is
        names = None
    if names is not None and names.a and names.b and Path(names.a).is_dir() and Path(names.b).is_dir():
        try:
            html = compare_html(*read_pair(Path(names.a), Path(names.b)))
        except ValueError:
            return path / PAGE
        return write_index(path, html)
    return path / PAGE


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
        page = drawn(repr(str(path)), redraw, path)
        try:
            rebuild_log(path.parent)
        except OSError as exc:  # the page is drawn; only the log beside it is not updated
            logger.warning("the experiment log %s was not updated (%s)", path.parent / PAGE, exc.strerror or exc)
        return page
    return drawn(repr(str(path)), rebuild_log, path)


def rebuild_folder(root: Path) -> tuple[Path, int, list[str]]:
    """Draw every report's page under ``root`` again (and an integration run's reports inside it; a link to a
    folder is not followed), then the log. A page that cannot be drawn costs that page only: the others and the log are drawn.

    Returns:
        The log's path, the number of pages drawn, and one line per page (or integration log) not drawn,
        naming its folder and why.

    Raises:
        ValueError: ``root`` is not a folder, or its log could not be written.
    """
    if not root.is_dir():
        raise ValueError(f"DIR={str(root)!r} is not a reports folder")
    count, failed = 0, []
    # A link to a folder is not followed: the lab writes none, and one back up the tree (an integration folder's
    # link to its parent) drew the same pages again at every depth, twice as many per level with two such links.
    for path in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")):
        try:
            if is_report(path):
                drawn(repr(str(path)), redraw, path)
                count += 1
            elif kind_of(path.name) == "integration":
                _, n, more = rebuild_folder(path)
                count += n
                failed += more
        except PageNotDrawnError as exc:
            failed.append(str(exc))
    return drawn(repr(str(root)), rebuild_log, root), count, failed


def open_page(page: Path) -> bool:
    """Open ``page`` in the user's browser when one is at hand (a terminal, and a display or a desktop
    system); False when none is (the caller says where the page is: copy it, or open its file:// address)."""
    import webbrowser

    if not sys.stdout.isatty():
        return False
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return False
    try:
        return webbrowser.open(page.resolve().as_uri())
    except webbrowser.Error:
        return False
