"""``lab study``'s default on the CPU: the embedded model's prompts on two one-thread worker processes
(:mod:`lab.runs.local`), equal to the same study in one process on one thread.

Fault class: a prompt's numbers that depend on the worker that ran it (a layout or thread count chosen per
worker), prompts lost or doubled between workers, and a default that does not start the workers.
"""

from __future__ import annotations

import csv
import json
import multiprocessing

import pytest

pytestmark = pytest.mark.integration

# Two prompts per worker: enough for one to be lost, doubled or scored by the wrong worker.
ARGV = ["study", "--limit", "4", "--max-new-tokens", "8", "--resamples", "99", "--device", "cpu"]
TIMING = {"prefill_s", "speculative_s", "wall_s", "temperature_s", "decode_s"}


def _rows(report, name: str) -> list[dict]:
    with open(report / name, newline="", encoding="utf-8") as f:
        return [{k: v for k, v in row.items() if k not in TIMING} for row in csv.DictReader(f)]


@pytest.mark.skipif((multiprocessing.cpu_count() or 1) < 2, reason="one CPU: the default is one process")
def test_study_default_runs_two_workers_equal_to_one_thread_in_one_process(lab_log, monkeypatch):
    monkeypatch.delenv("LAB_STUDY_WORKERS")  # the default's own test: the tiers' 1 would hide it
    rc, pooled = lab_log.cli(ARGV)
    assert rc == 0 and pooled is not None
    rc, alone = lab_log.cli([*ARGV, "--workers", "1", "--threads", "1"])
    assert rc == 0 and alone is not None
    env = json.loads((pooled / "report.json").read_text())["environment"]
    assert env["workers"] == {"processes": 2, "torch_threads_per_worker": 1}
    assert "workers" not in json.loads((alone / "report.json").read_text())["environment"]
    for name in ("per_prompt.csv", "per_token.csv"):
        assert _rows(pooled, name) == _rows(alone, name), name
    assert multiprocessing.active_children() == []
    lab_log.record(prompts=len(_rows(pooled, "per_prompt.csv")))
