"""The integration tier's experiment log, and the real-model fixtures it shares.

Every integration test that runs a real model leaves its report under one folder
per tier run, ``<root>/<timestamp>-integration/``, so that after
``pytest -m integration`` the user reads ``reports/`` as the log of what was
measured:

* commands run through :meth:`LabLog.cli` write their reports there, named as the
  commands name theirs (``<ts>-speculate-<slug>/`` ...);
* library-level tests record their key figures with :meth:`LabLog.record` and may
  write a JSON report with :meth:`LabLog.write_report`;
* ``index.md`` and ``index.json`` list every integration test that ran: outcome,
  duration, the reports it wrote and its key figures. They are rewritten after each
  test, so an interrupted run still leaves an index of what did run.

``<root>`` is ``--lab-reports DIR``, else ``$LAB_TEST_REPORTS``, else ``reports/``
in the repository (git-ignored). The folder is created when the first integration
test starts: the unit and statistical tiers write nothing there.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lab.reports import slugify, timestamp, to_jsonable

_LOG_KEY = pytest.StashKey["LabLogSession"]()
_HERE = Path(__file__).resolve().parent


class LabLogSession:
    """The one run folder of a session and the index rows of the tests that ran."""

    def __init__(self, root: Path):
        self.root = root
        self.folder: Path | None = None
        self.rows: dict[str, dict[str, Any]] = {}

    def ensure_folder(self) -> Path:
        if self.folder is None:
            self.root.mkdir(parents=True, exist_ok=True)
            base = f"{timestamp()}-integration"
            folder, n = self.root / base, 1
            while folder.exists():  # two runs in the same second
                n += 1
                folder = self.root / f"{base}-{n}"
            folder.mkdir()
            self.folder = folder
        return self.folder

    def row(self, nodeid: str) -> dict[str, Any]:
        return self.rows.setdefault(nodeid, {"test": nodeid, "outcome": "running", "duration_s": 0.0,
                                             "reports": [], "figures": {}})

    def write_index(self) -> None:
        if self.folder is None:
            return
        rows = list(self.rows.values())
        counts = {k: sum(r["outcome"] == k for r in rows) for k in ("passed", "failed", "skipped", "running")}
        torch = sys.modules.get("torch")  # not imported here: the log itself needs no torch
        data = {"folder": str(self.folder), "torch_threads": torch.get_num_threads() if torch else None,
                "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
                "counts": counts, "tests": rows}
        tmp = self.folder / ".index.json.partial"
        tmp.write_text(json.dumps(to_jsonable(data), indent=2, allow_nan=True) + "\n", encoding="utf-8")
        os.replace(tmp, self.folder / "index.json")
        lines = [f"# Integration run {self.folder.name}", "",
                 f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
                 + (f", {counts['running']} unfinished" if counts["running"] else "")
                 + f"; torch threads {data['torch_threads'] or 'n/a'}; load average at the last test "
                 + (", ".join(f"{x:.2f}" for x in data["load_average"]) if data["load_average"] else "n/a") + ".",
                 "", "| test | outcome | time (s) | reports | key figures |", "|---|---|---|---|---|"]
        for r in rows:
            figs = ", ".join(f"{k} = {_fmt(v)}" for k, v in r["figures"].items()) or "-"
            reps = ", ".join(f"[{Path(p).name}]({Path(p).name}/)" for p in r["reports"]) or "-"
            lines.append(f"| `{r['test']}` | {r['outcome']} | {r['duration_s']:.1f} | {reps} | {figs} |")
        tmp = self.folder / ".index.md.partial"
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.replace(tmp, self.folder / "index.md")
        from lab.views.log import rebuild_log

        rebuild_log(self.folder)  # the run's own log of its reports, and the reports root's, listing this run
        rebuild_log(self.root)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


class LabLog:
    """One test's handle on the run folder (the ``lab_log`` fixture)."""

    def __init__(self, session: LabLogSession, nodeid: str):
        self._session, self.nodeid = session, nodeid

    @property
    def out(self) -> Path:
        """The run folder: pass it as ``--out`` so reports land in the log."""
        return self._session.ensure_folder()

    def record(self, **figures: Any) -> None:
        """Add key figures (numbers or short strings) to this test's index row."""
        self._session.row(self.nodeid)["figures"].update(to_jsonable(figures))

    def add_report(self, path: Path) -> None:
        self._session.row(self.nodeid)["reports"].append(str(path))

    def cli(self, argv: list[str]) -> tuple[int, Path | None]:
        """Run ``lab`` with ``--out`` set to the run folder; return the exit code and the new report."""
        from lab import cli

        before = {p.name for p in self.out.iterdir()}
        rc = cli.main([*argv, "--out", str(self.out)])
        new = sorted(p for p in self.out.iterdir() if p.name not in before and not p.name.startswith(".")
                     and p.is_dir())
        assert len(new) <= 1, f"one command wrote several reports: {new}"
        report = new[0] if new else None
        if report is not None:
            self.add_report(report)
        return rc, report

    def write_report(self, kind: str, slug: str, data: dict[str, Any]) -> Path:
        """Write a library-level test's figures as ``<ts>-<kind>-<slug>/report.json`` (atomic)."""
        from lab.views.publish import report_folder

        with report_folder(self.out, kind, slugify(slug)) as rd:
            rd.write_json("report.json", data)
        self.add_report(rd.final)
        return rd.final


def _session_log(config: pytest.Config) -> LabLogSession:
    if _LOG_KEY not in config.stash:
        root = config.getoption("--lab-reports") or os.environ.get("LAB_TEST_REPORTS") or config.rootpath / "reports"
        config.stash[_LOG_KEY] = LabLogSession(Path(root))
    return config.stash[_LOG_KEY]


@pytest.fixture(scope="session")
def lab_log_dir(request) -> Path:
    """The run folder itself, for session- or module-scoped fixtures that write reports."""
    return _session_log(request.config).ensure_folder()


@pytest.fixture
def lab_log(request) -> LabLog:
    """This test's handle on the integration run's experiment log."""
    return LabLog(_session_log(request.config), request.node.nodeid)


def pytest_collection_modifyitems(session, config, items):
    """The page tests (``test_pages_browser.py``) run last, so they open the pages of every report the
    tier's other tests wrote into the run folder."""
    last = [item for item in items if Path(str(item.fspath)).name == "test_pages_browser.py"]
    if last:
        items[:] = [item for item in items if item not in last] + last


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Every integration test gets an index row (outcome and time), written as it finishes.

    pytest calls this hook for every item of the session, wherever its conftest is,
    so items outside this directory (the unit and statistical tiers) are passed over.
    """
    if not Path(str(item.fspath)).resolve().is_relative_to(_HERE):
        yield
        return
    log = _session_log(item.config)
    log.ensure_folder()
    log.row(item.nodeid)
    t0 = time.perf_counter()
    yield
    row = log.row(item.nodeid)
    row["duration_s"] = time.perf_counter() - t0
    log.write_index()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Outcome per test: failed if any phase failed, skipped if skipped, else passed."""
    report = (yield).get_result()
    row = _session_log(item.config).row(item.nodeid)
    if report.failed:
        row["outcome"] = "failed"
    elif report.skipped and row["outcome"] != "failed":
        row["outcome"] = "skipped"
    elif report.when == "call" and report.passed and row["outcome"] == "running":
        row["outcome"] = "passed"


# --------------------------------------------------------------------------- the Qwen pair


@pytest.fixture(scope="session")
def qwen_pair():
    """Qwen2.5-Coder-1.5B-Instruct (target) and 0.5B (draft), float32 on CPU, loaded once.

    ``(target, tokenizer, draft_model, draft_tokenizer)``; read-only: tests must not
    modify them. About 9 GB of RAM together.
    """
    from lab.models.loading import load_model

    target, tok = load_model("qwen2.5-coder", device="cpu")  # noqa: the tier's one load of the pair
    draft, dtok = load_model("qwen2.5-coder-0.5b", device="cpu")
    return target, tok, draft, dtok
