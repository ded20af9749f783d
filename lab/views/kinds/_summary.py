"""What several kinds' pages share: ``summary.md``'s prose without what the page draws.

A kind's page draws its verdict (the summary's bold lines) and its tables from the report's exact
figures; the summary's remaining prose (what was measured, how, the bar) is shown under them, so a
page shows nothing twice.
"""

from __future__ import annotations



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
