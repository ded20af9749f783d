"""``lab.runs.local``: the study's prompts on local worker processes, and how many run by default.

Fault classes: a worker-pool run whose records differ from the serial run's (order, lost or doubled
prompts), a worker's error or death lost (the driver waiting forever, or a report from what arrived),
worker processes left running, and a default that starts more workers than the machine's memory holds.
"""

from __future__ import annotations

import multiprocessing

import pytest

from lab.runs import local
from lab.runs.local import ProcessExecutor, auto_workers
from lab.study.run import run_study
from lab.study.work import plan_study, work_file
from tests.study_fakes import FakeRunner, FakeRunnerFactory, InterruptAfter, fake_config, untimed

pytestmark = pytest.mark.unit


def _alive_children() -> list:
    return [p for p in multiprocessing.active_children() if p.is_alive()]


@pytest.mark.slow
def test_workers_run_equals_the_serial_run_and_leaves_no_process(tmp_path):
    serial = run_study(fake_config(tmp_path / "a"), runner=FakeRunner())
    pooled = run_study(fake_config(tmp_path / "b"), runner_factory=FakeRunnerFactory(), executor=ProcessExecutor(2))
    assert untimed(serial.per_prompt, drop=["wall_s"]) == untimed(pooled.per_prompt, drop=["wall_s"])
    assert serial.per_token == pooled.per_token
    assert serial.analysis.verdicts() == pooled.analysis.verdicts()
    assert pooled.info["workers"] == {"processes": 2, "torch_threads_per_worker": 1}
    assert _alive_children() == []


@pytest.mark.slow
def test_a_workers_error_stops_the_run_in_the_driver_keeping_what_finished(tmp_path):
    plan = plan_study(fake_config(tmp_path))
    with pytest.raises(InterruptAfter):
        run_study(plan, runner_factory=FakeRunnerFactory(fail_after=2), executor=ProcessExecutor(2))
    stored = [p for p in plan.prompts if work_file(plan, p).is_file()]
    assert 2 <= len(stored) < len(plan.prompts)  # each worker finished 2 before its third raised
    assert _alive_children() == []


@pytest.mark.slow
def test_a_worker_that_dies_stops_the_run_naming_its_exit_code(tmp_path):
    plan = plan_study(fake_config(tmp_path))
    with pytest.raises(RuntimeError, match=r"worker process died \(exit code 3"):
        run_study(plan, runner_factory=FakeRunnerFactory(die_after=1), executor=ProcessExecutor(2))
    assert _alive_children() == []


@pytest.mark.slow
def test_more_workers_than_units_left_finish_the_run(tmp_path):
    """Fault class: a worker sent its None (nothing left when it was ready) exits with code 0; that closed pipe
    was read as a death, and a resumed study with one prompt left failed every time."""
    plan = plan_study(fake_config(tmp_path))
    with pytest.raises(InterruptAfter):
        run_study(plan, runner=FakeRunner(fail_after=len(plan.prompts) - 1))
    result = run_study(plan, runner_factory=FakeRunnerFactory(), executor=ProcessExecutor(2))
    assert result.n_resumed == len(plan.prompts) - 1 and len(result.per_prompt) == len(plan.prompts)
    assert _alive_children() == []


def test_executor_refuses_no_worker():
    with pytest.raises(ValueError, match="workers=0"):
        ProcessExecutor(0)


def test_auto_workers_one_per_cpu_for_the_embedded_model_where_it_fits(monkeypatch):
    monkeypatch.delenv(local.WORKERS_ENV, raising=False)
    monkeypatch.setattr(local.os, "cpu_count", lambda: 2)
    assert auto_workers("smollm2", "early-exit:24", "cpu") == 2
    assert auto_workers("smollm2", "early-exit:24", "cuda") == 1  # a GPU: one process
    assert auto_workers("Qwen/Qwen2.5-3B-Instruct", None, "cpu") == 1  # a hub model: size unknown before it loads
    monkeypatch.setattr(local.os, "cpu_count", lambda: 1)
    assert auto_workers("smollm2", None, "cpu") == 1


def test_auto_workers_planted_small_memory_gives_fewer_workers(monkeypatch):
    """Negative control of the memory rule: the same model on a machine with little memory gets one worker."""
    monkeypatch.delenv(local.WORKERS_ENV, raising=False)
    monkeypatch.setattr(local.os, "cpu_count", lambda: 8)
    page = 4096
    pages = {"SC_PAGE_SIZE": page}
    monkeypatch.setattr(local.os, "sysconf", lambda name: pages.get(name, 64 * 2**30 // page))
    assert auto_workers("qwen2.5-coder", "qwen2.5-coder-0.5b", "cpu") >= 2  # 64 GiB: a few pairs fit
    monkeypatch.setattr(local.os, "sysconf", lambda name: pages.get(name, 8 * 2**30 // page))
    assert auto_workers("qwen2.5-coder", "qwen2.5-coder-0.5b", "cpu") == 1  # 8 GiB: not two float32 pairs


def test_auto_workers_env_answers_and_a_bad_value_is_named(monkeypatch):
    monkeypatch.setattr(local.os, "cpu_count", lambda: 4)
    monkeypatch.setenv(local.WORKERS_ENV, "3")
    assert auto_workers("smollm2", None, "cpu") == 3
    for bad in ("two", "0", "5", "\u00b2"):  # not a count, none, more than the CPUs, a digit int() refuses
        monkeypatch.setenv(local.WORKERS_ENV, bad)
        with pytest.raises(ValueError, match=r"\$LAB_STUDY_WORKERS=.* must be a count of worker processes in \[1, 4\]"):
            auto_workers("smollm2", None, "cpu")


@pytest.mark.parametrize("argv, says", [
    (["--workers", "2", "--ray"], "choose one"),
    (["--merge", "x", "--workers", "2"], "--workers would have no effect"),
])
def test_cli_study_workers_refused_where_it_would_not_run(tmp_path, capsys, no_model_loading, argv, says):
    from lab import cli

    rc = cli.main(["study", *argv, "--out", str(tmp_path / "reports")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and says in err and len(err.splitlines()) == 1, err
