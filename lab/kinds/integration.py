"""The integration tier's run log (``pytest -m integration`` writes it; no subcommand does).

Its folder holds ``index.json`` and ``index.md`` (``tests/integration/conftest.py``), not a ``report.json``: the
run is a log of the reports its tests wrote, each a folder of its own kind inside it. :class:`RunLog` is
``index.json``'s shape, read by the experiment log's row for the run (:mod:`lab.views.log`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.kinds import Kind


@dataclass(frozen=True)
class Counts:
    """How many of the run's tests ended each way (counts)."""

    passed: int
    failed: int
    skipped: int
    running: int


@dataclass(frozen=True)
class TestRow:
    """One integration test as the log holds it.

    Attributes:
        test: Its pytest node id.
        outcome: ``passed``, ``failed``, ``skipped`` or ``running`` (not finished when the log was written).
        duration_s: Its wall time, seconds.
        reports: The report folders it wrote (names).
        figures: The key figures it recorded, by name (numbers or short text).
    """

    __test__ = False  # a record, not a pytest test class

    test: str
    outcome: str
    duration_s: float
    reports: list[str]
    figures: dict[str, Any]


@dataclass(frozen=True)
class RunLog:
    """``index.json`` of an integration run.

    Attributes:
        folder: The run's folder as written (an absolute path).
        torch_threads: Torch's intra-op threads in the pytest process.
        load_average: The 1-, 5- and 15-minute load averages when it was written; None where the system gives none.
        counts: Its tests by outcome.
        tests: Every test that ran, in the order it ran.
    """

    folder: str
    torch_threads: int | None
    load_average: list[float] | None
    counts: Counts
    tests: list[TestRow]


KIND = Kind("integration", listed=150)
