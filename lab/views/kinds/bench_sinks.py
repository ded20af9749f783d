"""The page of a ``lab bench-sinks`` report: the capture against plain prefill in the headline.

The figures are ``bench.json``'s ``comparison`` (:func:`lab.render.sinks.comparison_sentence`
words them the same way in the summary); the summary's table and ``bench.csv`` follow.
"""

from __future__ import annotations

from lab.views.core import KindPage, ReportFiles
from lab.views.kinds._summary import own_json


def headline(bench: dict) -> str:
    """The streaming capture's time and memory against plain prefill at the longest length measured."""
    c = bench.get("comparison") or {}
    try:
        return (f"at {c['length']} tokens the streaming capture takes {c['time_ratio']:.2f}x the plain prefill's "
                f"time and {c['capture_extra_bytes'] / 2**30:.2f} GiB beyond the model (plain: "
                f"{c['plain_extra_bytes'] / 2**30:.2f} GiB)")
    except (KeyError, TypeError, ValueError):
        return ""


def page(files: ReportFiles) -> KindPage:
    """The headline from ``bench.json``; the summary and the CSV as the generic page shows them."""
    return KindPage(headline=headline(own_json(files, "bench.json")))
