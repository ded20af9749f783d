"""What several kinds' pages share: ``summary.md``'s prose without what the page draws, a report's own JSON.

A kind's page draws its verdict (the summary's bold lines) and its tables from the report's exact
figures; the summary's remaining prose (what was measured, how, the bar) is shown under them, so a
page shows nothing twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lab.files import FileRefused, read_bounded
from lab.views.core import MAX_JSON_BYTES, ReportFiles


def prose(summary: str) -> str:
    """``summary`` without its title, its tables and its bold (verdict) lines.

    >>> prose("# T\\n\\n**Verdict: ok.**\\n\\nHow.\\n\\n| a |\\n|---|\\n| 1 |\\n")
    'How.'
    """
    keep = [line for line in summary.splitlines()
            if not (line.startswith("# ") or line.lstrip().startswith("|") or "**" in line)]
    text = "\n".join(keep)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.strip()


def own_json(files: ReportFiles, name: str) -> dict[str, Any]:
    """A report's own JSON file other than ``report.json`` (``calibration.json``, ``bench.json`` ...), parsed.

    :func:`lab.views.core.read_report` parses ``report.json`` only; the calibration and benchmark
    commands write their figures under another name. Bounded like it (:data:`MAX_JSON_BYTES`).

    Returns:
        The parsed object, ``{}`` when the file is absent, too large, unreadable or not an object.
    """
    try:
        data = json.loads(read_bounded(Path(files.path) / name, MAX_JSON_BYTES).decode("utf-8"))
    except (FileRefused, UnicodeDecodeError, ValueError, RecursionError):  # ValueError: not JSON
        return {}
    return data if isinstance(data, dict) else {}
