"""The integration tier's experiment log (tests/integration/conftest.py), on a throwaway project.

A temporary project gets copies of the repository's root conftest and integration
conftest plus tiny fake tests (no model); pytest runs in a subprocess and the log it
leaves is inspected.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import report_dirs

pytestmark = pytest.mark.slow  # each test runs a whole pytest session in a subprocess (10-20 s)

REPO = Path(__file__).resolve().parents[2]

FAKE_INTEGRATION = '''
import pytest

def test_measures(lab_log):
    lab_log.record(alpha=0.75, n_tokens=32)
    lab_log.write_report("speculate", "fake prompt", {"alpha": 0.75})

def test_fails(lab_log):
    lab_log.record(alpha=0.1)
    assert False, "deliberate"

@pytest.mark.skip(reason="deliberate")
def test_skipped():
    pass
'''

FAKE_UNIT = '''
def test_unit_only():
    assert True
'''


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "tests" / "integration").mkdir(parents=True)
    (root / "tests" / "unit").mkdir()
    shutil.copy(REPO / "conftest.py", root / "conftest.py")
    shutil.copy(REPO / "tests" / "integration" / "conftest.py", root / "tests" / "integration" / "conftest.py")
    (root / "tests" / "integration" / "test_fake.py").write_text(FAKE_INTEGRATION)
    (root / "tests" / "unit" / "test_fake_unit.py").write_text(FAKE_UNIT)
    (root / "pytest.ini").write_text("[pytest]\nmarkers =\n    unit: u\n    statistical: s\n    integration: i\n")
    return root


def _pytest(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    full_env.pop("LAB_TEST_REPORTS", None) if env is None or "LAB_TEST_REPORTS" not in env else None
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
                          cwd=root, env=full_env, capture_output=True, text=True, timeout=300)


def test_integration_log_writes_one_folder_with_index_and_reports(tmp_path):
    root = _project(tmp_path)
    out = tmp_path / "log"
    proc = _pytest(root, "-m", "unit or integration", "--lab-reports", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # one deliberate failure
    (run,) = report_dirs(out)
    assert run.name.endswith("-integration")
    index = json.loads((run / "index.json").read_text())
    rows = {r["test"].split("::")[-1]: r for r in index["tests"]}
    assert set(rows) == {"test_measures", "test_fails", "test_skipped"}, "unit tests are not in the log"
    assert [rows[t]["outcome"] for t in ("test_measures", "test_fails", "test_skipped")] == ["passed", "failed", "skipped"]
    assert rows["test_measures"]["figures"] == {"alpha": 0.75, "n_tokens": 32}
    (report,) = rows["test_measures"]["reports"]
    assert Path(report).parent == run and Path(report).name.endswith("-speculate-fake-prompt")
    assert json.loads((Path(report) / "report.json").read_text()) == {"alpha": 0.75}
    md = (run / "index.md").read_text()
    assert "1 passed, 1 failed, 1 skipped" in md and "alpha = 0.75" in md
    assert not [p for p in run.iterdir() if p.name.startswith(".")], "no partial files left"
    from lab.kinds.integration import RunLog
    from lab.typed import from_json
    from lab.views.log import log_rows

    assert from_json(RunLog, index).counts.failed == 1  # the shape the experiment log reads it as
    (row,) = [r for r in log_rows(out) if r.kind == "integration"]
    assert row.headline == "1 passed, 1 failed, 1 skipped"


def test_integration_log_env_variable_moves_it_and_unit_tier_writes_nothing(tmp_path):
    root = _project(tmp_path)
    out = tmp_path / "env-log"
    proc = _pytest(root, "-m", "unit", env={"LAB_TEST_REPORTS": str(out)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not out.exists() and not (root / "reports").exists(), "a unit-tier run writes no log"
    proc = _pytest(root, "tests/integration/test_fake.py::test_measures", env={"LAB_TEST_REPORTS": str(out)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(report_dirs(out)) == 1 and not (root / "reports").exists()
    assert (out / "index.html").is_file(), "the reports root's experiment log lists the integration run"
