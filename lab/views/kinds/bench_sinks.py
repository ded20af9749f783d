"""The page of a ``lab bench-sinks`` report: the capture against plain prefill in the headline.

The figures are ``report.json``'s ``comparison`` (``bench.json``'s before format 1;
:func:`lab.render.sinks.comparison_sentence` words them the same way in the summary); the summary's table
and ``bench.csv`` follow.
"""

from __future__ import annotations

from typing import Any

from lab.kinds.bench_sinks import Report
from lab.ranges import COUNT, NONNEGATIVE
from lab.views.core import KindPage, figure
from lab.views.files import ReportFiles

def _gib(n: Any) -> str:
    """Bytes as GiB, checked: a memory size is not negative (:func:`lab.views.core.figure`)."""
    return figure(n / 2**30, NONNEGATIVE, "a memory size", spec=".2f")


def headline(report: Report) -> str:
    """The streaming capture's time and memory against plain prefill at the longest length measured; each figure
    checked against its physical range; ``""`` when there is no comparison (a measurement failed)."""
    c = report.comparison
    if c is None:
        return ""
    return (f"at {figure(c.length, COUNT, 'a token count')} tokens the streaming capture takes "
            f"{figure(c.time_ratio, NONNEGATIVE, 'a time ratio', spec='.2f')}x the plain prefill's time and "
            f"{_gib(c.capture_extra_bytes)} GiB beyond the model (plain: {_gib(c.plain_extra_bytes)} GiB)")


def page(files: ReportFiles, report: Report) -> KindPage:
    """The headline from ``report.json``; the summary and the CSV as the generic page shows it."""
    return KindPage(headline=headline(report))
