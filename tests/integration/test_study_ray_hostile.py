"""Hostile ``lab study --ray`` runs in a subprocess: a signal, an address nobody answers, no cluster for 'auto'.

Kept apart from ``test_study_ray.py``, whose module-wide cluster would be found by
``--ray auto``. The stalling runner (``FaultyFactory(stall_after=2)``) makes each
case wait for a marker, never for time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.study_fakes import ROOT, assert_no_ray_process_left, ray_processes, short_tmpdir

pytest.importorskip("ray", reason="the lab[cluster] extra (make setup-test installs it)")


_STALLING_STUDY = """
import sys
import lab.commands.study as study_cmd
from lab import cli
from tests.study_fakes import FaultyFactory

study_cmd.checked_runner_factory = lambda plan: FaultyFactory(sys.argv[1], stall_after=2)
sys.exit(cli.main(sys.argv[2:]))
"""


def test_cli_study_ray_sigterm_exits_143_with_the_resume_line(tmp_path):
    """SIGTERM to a --ray driver ends as without --ray: exit 143, "terminated", the finished prompts kept
    and the --resume line, and no Ray process left. Fault class: Ray's own SIGTERM handlers (its
    sys.exit, its core worker's stack dump + abort, exit 134) replaced the CLI's."""
    import signal

    before = ray_processes()
    log = tmp_path / "attempts.log"
    stalled = Path(str(log) + ".stalled")
    out = tmp_path / "out"
    tmpdir = short_tmpdir()
    env = {**os.environ, "TMPDIR": str(tmpdir),
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen([sys.executable, "-c", _STALLING_STUDY, str(log), "study", "--ray", "--ray-actors", "1",
                             "--limit", "6", "--resamples", "99", "--device", "cpu", "--out", str(out)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300  # a bound on a hang, not a timing assumption: the run waits for the marker
        while not stalled.exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the stalling study never reached its third prompt"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        import shutil

        shutil.rmtree(tmpdir, ignore_errors=True)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "SIGTERM received" not in err, err[-3000:]
    (work,) = out.glob(".study-work-*")
    kept = re.search(r"terminated; no report was written; (\d+) finished prompts are kept in (\S+); continue with: "
                     r"lab study --resume (\S+)", err)
    assert kept, err[-3000:]
    assert int(kept[1]) == len(list((work / "outcomes").glob("*.json"))) and kept[3] == str(work)
    assert_no_ray_process_left(before)


def test_cli_study_ray_address_nobody_answers_one_line_within_the_bound(tmp_path):
    """--ray localhost:1 (nothing listens) ends in one line naming the address, exit 2, leaving no work
    directory. Fault class: Ray's connect retried for minutes, printing GCS time-outs."""
    proc = subprocess.run([sys.executable, "-m", "lab.cli", "study", "--ray", "localhost:1", "--ray-timeout", "5",
                           "--limit", "2", "--device", "cpu", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("lab study:")]
    assert "'localhost:1'" in line and "Traceback" not in proc.stderr
    assert not list(tmp_path.glob(".study-work-*"))


def test_cli_study_ray_auto_without_a_cluster_one_line(tmp_path):
    """--ray auto with no cluster running: one line saying so and what to do, exit 2. Fault class: the
    ConnectionError of ray.init as a traceback."""
    empty = short_tmpdir()  # no ray_current_cluster file in it, and RAY_ADDRESS unset
    try:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"TMPDIR": str(empty)}
        if ray_processes():
            pytest.skip("a Ray cluster runs on this machine: 'auto' would find it")
        proc = subprocess.run([sys.executable, "-m", "lab.cli", "study", "--ray", "auto", "--limit", "2",
                               "--device", "cpu", "--out", str(tmp_path)],
                              capture_output=True, text=True, cwd=ROOT, timeout=240, env=env)
    finally:
        import shutil

        shutil.rmtree(empty, ignore_errors=True)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "no running Ray cluster" in proc.stderr and "ray start --head" in proc.stderr
