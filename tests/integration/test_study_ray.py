"""The study on a real local Ray cluster (``lab study --ray``): same numbers, faults, resume, cleanup.

One local cluster of :data:`ACTORS` single-CPU slots is started for the module
(:func:`ray_cluster`) and stopped at its end, which then checks that no Ray
process is left. On it:

* the embedded model's study (``--limit 12``) run by 2 actors, one of which is
  killed (``os._exit``) on a prompt in mid-run, equals the serial run with the
  same seed and one torch thread: per-prompt figures, per-token rows, effects,
  corrected p-values and verdicts;
* with a fake runner: a prompt that keeps killing its actor, and one that raises,
  are named and the rest complete; a driver stopped mid-run and resumed
  recomputes no stored prompt.

The first test runs ``lab study --ray`` in a subprocess, which starts its own local
cluster (dashboard off, sized to the machine) and must leave no process behind.
Workers import :mod:`tests.study_fakes` by name to unpickle the fake runners, so the
fixture puts the repository on the cluster's ``PYTHONPATH``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

import pytest

from lab.models.source import model_source
from lab.study.runner import ModelRunner, context_measure_inputs
from lab.study.config import StudyConfig
from lab.study.work import discard_work, plan_study, work_file
from lab.study.run import run_study
from lab.runs.cluster import ClusterConfig, RayExecutor
from tests.study_fakes import (ROOT, FaultyFactory, assert_no_ray_process_left, attempts, fake_config, ray_processes,
                               short_tmpdir, untimed)

ray = pytest.importorskip("ray", reason="the lab[cluster] extra (make setup-test installs it)")

ACTORS = 2  # a local cluster with 2 single-CPU actors: one can be killed while the other works
LIMIT = 12  # 6 twin pairs, every category
MAX_NEW_TOKENS = 2  # keeps the serial + cluster runs of the embedded model to ~1.5 min on 2 busy cores
RESAMPLES = 499  # the CIs must be equal, not precise


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster of ACTORS CPUs for the module; stopped and checked for leftovers at its end."""
    before = ray_processes()
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), old) if p)  # inherited by the workers
    try:
        ray.init(num_cpus=ACTORS, include_dashboard=False, log_to_driver=False)
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = old
    yield ray
    ray.shutdown()
    assert_no_ray_process_left(before)


def test_cli_study_ray_starts_and_stops_its_own_local_cluster(tmp_path, lab_log):
    """No address: a local cluster sized to the machine, stopped at the end with every Ray process, its
    session files (logs, sockets) in a lab-ray-* folder that goes with it. Fault class: Ray's session
    logs written to <TMPDIR>/ray, outside anything the lab names or removes."""
    import shutil

    before = ray_processes()
    out = lab_log.out
    seen = {p.name for p in out.iterdir()}
    tmpdir = short_tmpdir()
    try:
        proc = subprocess.run([sys.executable, "-m", "lab.cli", "study", "--ray", "--ray-actors", "1", "--limit", "2",
                               "--max-new-tokens", str(MAX_NEW_TOKENS), "--resamples", "99", "--device", "cpu",
                               "--out", str(out)], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                              env={**os.environ, "TMPDIR": str(tmpdir)})
        left = sorted(p.name for p in tmpdir.iterdir() if p.name == "ray" or p.name.startswith("lab-ray-"))
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert left == [], f"Ray left {left} in TMPDIR"
    (report,) = [p for p in out.iterdir() if p.name not in seen and p.name.endswith("-study")]
    lab_log.add_report(report)
    study = json.loads((report / "report.json").read_text())
    cluster = study["environment"]["cluster"]
    assert cluster["address"] == "local" and cluster["n_actors"] == 1 and cluster["torch_threads_per_actor"] == 1
    assert study["prompts"]["n_prompts"] == 2 and study["missing_prompts"] == []
    assert not list(out.glob(".study-work-*"))
    assert_no_ray_process_left(before)


def test_ray_study_embedded_model_with_actor_killed_equals_serial(ray_cluster, smollm2, tmp_path, lab_log):
    """2 single-CPU actors, one killed by os._exit on a prompt mid-run: the report equals the serial
    run's with one torch thread, and every prompt is in it once.

    Fault class: a test asserting more than Ray guarantees. Ray retries an actor's tasks at
    least once (https://docs.ray.io/en/latest/ray-core/fault_tolerance/actors.html): a prompt the
    killed actor had finished, whose reply was lost with it, is run again, so attempts are only
    bounded below (every prompt >= 1, the victim >= 2). What the lab guarantees is exact: each
    prompt's result in the report once, and the report equal to the serial run. The duplicates
    are recorded in the integration log (``duplicate_attempts``)."""
    import torch

    from lab.render.study import write_report
    from lab.reports import to_jsonable
    from lab.speculative.draft_specs import make_draft

    model, tok = smollm2
    config = StudyConfig(model="smollm2", device="cpu", limit=LIMIT, max_new_tokens=MAX_NEW_TOKENS,
                         out=str(tmp_path / "serial"), n_resamples=RESAMPLES)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t0 = time.perf_counter()
        serial = run_study(config, runner=ModelRunner(model, tok, make_draft(model, config.draft_spec()), config,
                                                      {"model": model_source(model).as_dict(), "draft": config.draft_spec()},
                                                      *context_measure_inputs(config)))
        serial_s = time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)
    plan = plan_study(dataclasses.replace(config, out=str(tmp_path / "ray")))
    victim = plan.prompts[LIMIT // 2].id
    log = tmp_path / "attempts.log"
    t0 = time.perf_counter()
    result = run_study(plan, executor=RayExecutor(ClusterConfig(n_actors=ACTORS, threads=1)),
                       runner_factory=FaultyFactory(str(log), die_on=victim, real=True))
    ray_s = time.perf_counter() - t0
    lab_log.add_report(write_report(result, lab_log.out))
    tried = attempts(log)
    duplicates = {pid: n - 1 - (pid == victim) for pid, n in tried.items() if n - 1 - (pid == victim) > 0}
    lab_log.record(serial_s=serial_s, ray_s=ray_s, actors=ACTORS, killed_on=victim, load_1m=os.getloadavg()[0],
                   duplicate_attempts=duplicates)

    assert result.failed == {} and result.missing == []
    assert all(tried[p.id] >= 1 for p in plan.prompts) and tried[victim] >= 2, tried
    assert [r.id for r in result.per_prompt] == [p.id for p in plan.prompts]  # each once, in order
    assert untimed(result.per_prompt) == untimed(serial.per_prompt)
    assert untimed(result.per_token) == untimed(serial.per_token)
    assert to_jsonable(result.analysis.tests) == to_jsonable(serial.analysis.tests)  # effects, CIs, p, Holm p
    assert result.analysis.verdicts() == serial.analysis.verdicts()
    assert result.info["cluster"]["n_actors"] == ACTORS and result.info["cluster"]["torch_threads_per_actor"] == 1
    discard_work(plan)


def test_ray_prompts_that_keep_failing_are_named_and_the_rest_complete(ray_cluster, tmp_path):
    """One prompt kills its actor on every attempt (until Ray gives up on the actor), one raises."""
    plan = plan_study(fake_config(tmp_path))
    dies, raises = plan.prompts[2].id, plan.prompts[7].id
    log = tmp_path / "attempts.log"
    executor = RayExecutor(ClusterConfig(n_actors=ACTORS, max_restarts=1, max_task_retries=1))
    result = run_study(plan, executor=executor,
                       runner_factory=FaultyFactory(str(log), die_on=dies, die_once=False, raise_on=raises))
    assert result.failed[raises] == f"ValueError: cannot measure {raises}"
    assert result.failed[dies].startswith("its actor died 2 times")
    # Ray retries deaths only: `dies` kills its actor on each of its 1 + max_task_retries attempts;
    # `raises` runs again only if its reply was lost with an actor that `dies` killed (at least once)
    assert attempts(log)[dies] == 2 and attempts(log)[raises] >= 1
    # the actor is dead after its one restart: at most the prompt queued behind `dies` fails with it
    others = set(result.failed) - {dies, raises}
    assert len(others) <= 1 and all("actor died" in result.failed[i] for i in others)
    done = [r.id for r in result.per_prompt]
    assert sorted(done + list(result.failed)) == sorted(p.id for p in plan.prompts)
    assert len(done) == len(set(done)) and result.missing == [p.id for p in plan.prompts if p.id in result.failed]


def test_ray_resumed_driver_never_recomputes_a_stored_prompt(ray_cluster, tmp_path):
    cfg = fake_config(tmp_path)
    plan = plan_study(cfg)

    class StopAfter:
        def __init__(self, n):
            self.n = n

        def start(self, total, done):
            pass

        def advance(self, prompt_id, wall_s):
            self.n -= 1
            if self.n == 0:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_study(plan, executor=RayExecutor(ClusterConfig(n_actors=ACTORS)),
                  runner_factory=FaultyFactory(str(tmp_path / "a.log")), progress=StopAfter(5))
    stored = {p.id for p in plan.prompts if work_file(plan, p).is_file()}
    assert len(stored) == 5
    log = tmp_path / "b.log"
    result = run_study(cfg, executor=RayExecutor(ClusterConfig(n_actors=ACTORS)), runner_factory=FaultyFactory(str(log)))
    assert set(attempts(log)) == {p.id for p in plan.prompts} - stored
    assert result.n_resumed == 5 and result.failed == {} and len(result.per_prompt) == LIMIT

