"""The run engine's flags tried as a hostile user would (issue 53's fresh round): each test is one case that
once ran with a flag that had no effect, or ended otherwise than the docs say."""

from __future__ import annotations

import argparse

import pytest

from lab.commands.common import cluster_config


def _args(ray, timeout=None, actors=None) -> argparse.Namespace:
    return argparse.Namespace(ray=ray, ray_timeout=timeout, ray_actors=actors, threads=None)


@pytest.mark.parametrize("ray", ["", "local"], ids=["no-address", "local"])
def test_cluster_config_ray_timeout_on_a_local_cluster_refused(ray):
    """Fault class: ``--ray --ray-timeout 5`` ran, the timeout bounding nothing (it bounds only how long a
    running cluster at ``--ray ADDRESS`` has to answer); a flag with no effect is refused, naming it."""
    with pytest.raises(ValueError, match="--ray-timeout has no effect on the local cluster"):
        cluster_config(_args(ray, timeout=5.0))


def test_cluster_config_ray_timeout_with_an_address_kept():
    """The same flag with an address is what it is for."""
    pytest.importorskip("ray")
    assert cluster_config(_args("127.0.0.1:6379", timeout=5.0)).connect_timeout_s == 5.0


class _ShutdownInterrupted:
    """A stand-in for the ``ray`` module whose ``shutdown`` is interrupted (a SIGTERM in its ~2 s)."""

    def kill(self, actor, no_restart=True):
        pass

    def is_initialized(self):
        return True

    def shutdown(self):
        raise KeyboardInterrupt("terminated")


def test_ray_executor_close_interrupted_in_shutdown_still_removes_its_session_folder(monkeypatch, tmp_path):
    """Fault class: a SIGTERM while ``ray.shutdown`` stopped the local cluster left Ray's session folder
    (``lab-ray-*``) behind and this process's SIGTERM handler wrapped."""
    import signal

    from lab.runs import cluster

    monkeypatch.setattr(cluster, "require_ray", lambda: _ShutdownInterrupted())
    ex = cluster.RayExecutor(cluster.ClusterConfig())
    session = tmp_path / "lab-ray-x"
    session.mkdir()
    ex._session_dir, ex._owns_cluster = str(session), True
    before = signal.getsignal(signal.SIGTERM)
    ex._sigterm_handler = before
    signal.signal(signal.SIGTERM, ex._on_sigterm)
    try:
        with pytest.raises(KeyboardInterrupt):
            ex.close()
        assert not session.exists() and signal.getsignal(signal.SIGTERM) is before
    finally:
        signal.signal(signal.SIGTERM, before)


def test_require_ray_turns_off_rays_native_signal_handlers(monkeypatch):
    """Fault class: Ray's core worker reset SIGTERM to SIG_DFL in ``ray.shutdown``, so a SIGTERM in the ~2 s it
    stops a local cluster killed the run with no line (exit -15); its switch must be set before Ray is imported."""
    import os

    from lab.runs import cluster

    pytest.importorskip("ray")
    monkeypatch.delenv(cluster.RAY_NO_FAILURE_HANDLER, raising=False)
    cluster.require_ray()
    assert os.environ[cluster.RAY_NO_FAILURE_HANDLER] == "1"


def test_merge_study_one_work_directory_named_twice_refused(tmp_path, monkeypatch):
    """Fault class: ``lab study --merge DIR DIR`` (or DIR and a link to it) reported "merged from 2 shard work
    directories" listing one twice."""
    from lab.study.run import merge_study

    work = tmp_path / ".study-work-0123"
    work.mkdir()
    (tmp_path / "link").symlink_to(work)
    with pytest.raises(ValueError, match=r"names the work directory .*\.study-work-0123' twice; name each once"):
        merge_study([work, work])
    with pytest.raises(ValueError, match=r"twice \(again as .*link'\)"):
        merge_study([work, tmp_path / "link"])
