"""The executor seam of ``run_study`` and the ``--ray`` plumbing, without Ray or weights.

A fake executor stands in for the cluster (the seam is what ``run_study`` and the
command see), so these tests check the bookkeeping a cluster run relies on: the
driver writes every finished prompt and nothing else, a prompt the executor gave
up on is named and missing, the executor is always closed, a study that lacks
prompts writes no report, and ``--ray`` fails before any model loads when Ray is
missing or the flags are wrong. The same run on a real local Ray cluster is in
``tests/integration/test_study_ray.py``.
"""

from __future__ import annotations

import logging
import sys

import pytest

from lab.study.work import plan_study, work_file
from lab.study.run import run_study
from lab.runs.cluster import ClusterConfig, plan_slots
from lab.runs.engine import UnitFailure
from lab.study.run import measure
from tests.study_fakes import FakeRunner, fake_config, untimed


class FakeExecutor:
    """Runs prompts in this process in reverse order (as a cluster may finish them),
    giving up on the ids in ``fail``; records the calls of the seam."""

    def __init__(self, fail: frozenset[str] = frozenset(), interrupt_after: int | None = None):
        self.fail, self.interrupt_after = fail, interrupt_after
        self.events: list[str] = []
        self.runner = FakeRunner()

    def start(self, experiment):
        self.events.append("start")
        self.plan = experiment.plan
        return {**self.runner.info, "cluster": {"address": "fake"}}

    def run(self, prompts, progress):
        self.events.append("run")
        for n, p in enumerate(reversed(list(prompts))):
            if self.interrupt_after is not None and n >= self.interrupt_after:
                raise KeyboardInterrupt
            getattr(progress, "status", lambda *a: None)(len(prompts) - n, n)
            yield p, UnitFailure("RuntimeError: boom") if p.id in self.fail else measure(self.runner, p, self.plan)

    def close(self):
        self.events.append("close")


def test_run_study_executor_failure_is_named_missing_and_redone_on_resume(tmp_path):
    cfg = fake_config(tmp_path)
    plan = plan_study(cfg)
    victim = plan.prompts[3].id
    ex = FakeExecutor(fail=frozenset({victim}))
    result = run_study(plan, executor=ex)
    assert ex.events == ["start", "run", "close"]
    assert result.failed == {victim: "RuntimeError: boom"}
    assert result.missing == [victim]
    assert [r.id for r in result.per_prompt] == [p.id for p in plan.prompts if p.id != victim]
    assert not work_file(plan, plan.prompts[3]).exists()
    assert all(work_file(plan, p).is_file() for p in plan.prompts if p.id != victim)
    rerun = FakeRunner()
    again = run_study(cfg, runner=rerun)
    assert rerun.calls == [victim] and again.missing == [] and again.failed == {}


def test_run_study_executor_results_in_any_order_equal_serial(tmp_path):
    serial = run_study(fake_config(tmp_path / "a"), runner=FakeRunner())
    reverse = run_study(fake_config(tmp_path / "b"), executor=FakeExecutor())
    assert untimed(serial.per_prompt, drop=["wall_s"]) == untimed(reverse.per_prompt, drop=["wall_s"])
    assert serial.per_token == reverse.per_token
    assert serial.analysis.verdicts() == reverse.analysis.verdicts()
    assert reverse.info["cluster"] == {"address": "fake"}


def test_run_study_executor_interrupted_is_closed_and_keeps_what_arrived(tmp_path):
    plan = plan_study(fake_config(tmp_path))
    ex = FakeExecutor(interrupt_after=4)
    with pytest.raises(KeyboardInterrupt):
        run_study(plan, executor=ex)
    assert ex.events[-1] == "close"
    stored = [p.id for p in plan.prompts if work_file(plan, p).is_file()]
    assert stored == [p.id for p in plan.prompts[-4:]]


def test_run_study_executor_that_fails_to_start_is_closed_and_leaves_no_work_dir(tmp_path):
    plan = plan_study(fake_config(tmp_path))
    ex = FakeExecutor()
    ex.start = lambda experiment: (_ for _ in ()).throw(ValueError("threads=4 per actor: the cluster has only 2 CPUs"))
    with pytest.raises(ValueError, match="only 2 CPUs"):
        run_study(plan, executor=ex)
    assert ex.events == ["close"] and not plan.work_dir.exists()


@pytest.mark.parametrize("resources, threads, n_actors, expected", [
    ({"CPU": 2.0}, 1, None, (2, 1, 0)),
    ({"CPU": 16.0}, 4, None, (4, 4, 0)),
    ({"CPU": 16.0, "GPU": 4.0}, 1, None, (4, 1, 1)),
    ({"CPU": 3.0, "GPU": 8.0}, 1, None, (3, 1, 1)),  # GPUs beyond the CPUs get no actor
    ({"CPU": 2.0}, 1, 1, (1, 1, 0)),
])
def test_plan_slots_one_actor_per_gpu_else_per_threads_cpus(resources, threads, n_actors, expected):
    s = plan_slots(resources, ClusterConfig(threads=threads, n_actors=n_actors), local=True)
    assert (s.n_actors, s.num_cpus, s.num_gpus) == expected


def test_plan_slots_too_many_actors_local_raises_remote_warns(caplog):
    with pytest.raises(ValueError, match=r"n_actors=3: this machine's cluster has 2 slots"):
        plan_slots({"CPU": 2.0}, ClusterConfig(n_actors=3), local=True)
    with caplog.at_level(logging.WARNING, logger="lab.runs.cluster"):
        s = plan_slots({"CPU": 2.0}, ClusterConfig(n_actors=3, address="auto"), local=False)
    assert s.n_actors == 3 and "wait for nodes" in caplog.text
    with pytest.raises(ValueError, match=r"threads=4 per actor: the cluster has only 2 CPUs"):
        plan_slots({"CPU": 2.0}, ClusterConfig(threads=4), local=True)


@pytest.mark.parametrize("field, value", [("n_actors", 0), ("threads", 0), ("threads", True),
                                          ("max_restarts", -1), ("max_task_retries", 1.5), ("address", " ")])
def test_cluster_config_bad_value_raises_naming_it(field, value):
    with pytest.raises(ValueError, match=rf"{field}="):
        ClusterConfig(**{field: value})


def _no_model(monkeypatch):
    from lab.models import loading as models
    from lab.study import runner

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("model loaded despite bad input"))
    monkeypatch.setattr(runner.ModelRunner, "load", classmethod(lambda cls, cfg: pytest.fail("runner loaded")))


def test_cli_study_ray_without_ray_exits_2_naming_the_extra(tmp_path, capsys, monkeypatch):
    from lab import cli

    _no_model(monkeypatch)
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    code = cli.main(["study", "--ray", "--limit", "4", "--out", str(tmp_path), "--device", "cpu"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--ray needs Ray" in err and "pip install 'lab[cluster]'" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv, message", [
    (["--ray-actors", "2"], "--ray-actors needs --ray"),
    (["--ray", "--ray-actors", "0"], "--ray-actors=0 must be in [1, 1000]"),
    (["--ray", "auto", "--threads", "0"], "--threads=0 must be in [1, this machine's CPU count]"),
    (["--ray", "--merge", "x"], "--merge cannot be combined with --resume, --shard or --ray"),
])
def test_cli_study_bad_ray_flags_exit_2_before_model_work(tmp_path, capsys, monkeypatch, argv, message):
    from lab import cli

    _no_model(monkeypatch)
    code = cli.main(["study", *argv, "--out", str(tmp_path), "--device", "cpu"])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_cli_study_ray_with_failed_prompt_exits_1_names_it_and_writes_no_report(tmp_path, capsys, monkeypatch):
    from lab import cli
    from lab.runs import cluster

    made = []

    def fake_executor(config, runner_factory=None):
        assert config == ClusterConfig(address="auto", n_actors=2, threads=1)
        made.append(FakeExecutor(fail=frozenset({"math-02"})))
        return made[-1]

    monkeypatch.setattr(cluster, "require_ray", lambda: None)
    monkeypatch.setattr(cluster, "RayExecutor", fake_executor)
    code = cli.main(["study", "--ray", "auto", "--ray-actors", "2", "--limit", "8", "--out", str(tmp_path),
                     "--device", "cpu", "--resamples", "99"])
    assert code == 1
    err = capsys.readouterr().err
    (work,) = tmp_path.glob(".study-work-*")
    assert "1 of 8 prompts failed on the cluster; the study lacks 1 prompt, so no report was written" in err
    assert "math-02: RuntimeError: boom" in err and f"--resume {work}" in err
    assert not list(tmp_path.glob("*-study"))
    assert made[0].events == ["start", "run", "close"]
