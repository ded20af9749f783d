"""``lab intervene --ray`` on a local Ray cluster equals its serial run (the run engine's two executors).

Six packaged triples on the embedded SmolLM2, scored once serially with one torch thread and once by
``--ray`` (a local cluster this command starts and stops, two single-CPU actors, each loading the models
once); every record and every figure of the report but the wall times must be equal, and no Ray process
may be left.

Fault class: records that depend on where or in which order the triples were scored, an experiment that
cannot be sent to a worker, or a cluster left running after the command.
"""

from __future__ import annotations

import json
import os

import pytest

from lab.cli import main
from tests.study_fakes import assert_no_ray_process_left, ray_processes
from tests.support import without_seconds

pytestmark = pytest.mark.integration
ray = pytest.importorskip("ray", reason="the lab[cluster] extra (make setup-test installs it)")

TRIPLES = 6  # both actors score several triples (three each, on average), and out of order
NEW_TOKENS = 8  # the arms score every position: a short continuation keeps the two runs to minutes
SAME = ("settings", "decides", "analysis", "controls", "pilot", "power", "triples")  # all but the wall times


def _report(out) -> tuple:
    (rd,) = [p for p in out.iterdir() if "-intervene-" in p.name and not p.name.startswith(".")]
    return rd, json.loads((rd / "report.json").read_text())


def test_cli_intervene_ray_local_cluster_equals_the_serial_run(tmp_path, lab_log, one_torch_thread):
    """The serial run takes one torch thread (``--threads 1``, restored by the fixture), as each actor does."""
    argv = ["intervene", "--limit", str(TRIPLES), "--pilot-limit", "0", "--new-tokens", str(NEW_TOKENS),
            "--device", "cpu", "--threads", "1"]
    before = ray_processes()
    assert main([*argv, "--out", str(tmp_path / "serial")]) == 0
    assert main([*argv, "--ray", "--ray-actors", "2", "--out", str(tmp_path / "ray")]) == 0
    (serial_dir, serial), (ray_dir, on_ray) = _report(tmp_path / "serial"), _report(tmp_path / "ray")
    lab_log.add_report(serial_dir)
    lab_log.add_report(ray_dir)
    assert len(on_ray["triples"]) == TRIPLES
    assert {k: without_seconds(on_ray[k]) for k in SAME} == {k: without_seconds(serial[k]) for k in SAME}
    lab_log.record(triples=TRIPLES, serial_s=serial["seconds"], ray_s=on_ray["seconds"], load_1m=os.getloadavg()[0])
    assert_no_ray_process_left(before)
