"""A llama.cpp peer binary that is there but broken: it dies by a signal, prints garbage, or hangs.

Fault class: a failed peer binary ended ``lab bench --peer llama.cpp`` in a traceback (exit 1 with
``PeerOutputError``, ``exited -11``), and a hung one could stall each call for 30 minutes
(``RUN_TIMEOUT_S = 1800``). Now each ends in one line naming the binary and the cause, exit 1,
before any model loads, and each call's timeout is sized from its tokens. Fake binaries are shell
scripts (no llama.cpp needed).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from lab.bench.peer import bench as peer_bench
from lab.runtime.build import TARGETS
from lab.bench.peer.llamacpp import locate
from lab.cli import main

VERSION_LINE = "version: 0.5.0-dev (build 0, commit 0c1e57098)"
BEHAVIOURS = {
    "segfault": "kill -SEGV $$\n",
    "garbage": "printf '\\377\\376 \\033[2J garbage\\n' >&2\nprintf '\\377\\000\\n'\n",
    "exit3": "echo 'error: cannot open model file' >&2\nexit 3\n",
}


def _bins(root: Path, body: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name in TARGETS:
        (root / name).write_text("#!/bin/sh\n" + body)
        os.chmod(root / name, 0o755)
    return root


@pytest.mark.parametrize("behaviour,cause", [("segfault", "died by signal SIGSEGV"),
                                              ("garbage", "cannot read"), ("exit3", "exited 3")])
def test_probe_version_broken_binary_raises_one_line_naming_it(tmp_path, behaviour, cause):
    from lab.bench.peer.llamacpp import PeerRunError

    bins = locate(_bins(tmp_path / "bin", BEHAVIOURS[behaviour]))
    with pytest.raises(PeerRunError) as exc:
        peer_bench.probe_version(bins)
    message = str(exc.value)
    assert cause in message and str(bins.completion) in message
    assert "\n" not in message
    if behaviour == "exit3":
        assert "cannot open model file" in message  # the binary's own last words


@pytest.mark.slow
def test_run_binary_hung_binary_is_killed_with_its_process_group(tmp_path):
    """A hang is cut at the timeout; the binary's children go with it (its process group)."""
    from lab.bench.peer.llamacpp import PeerRunError

    child_pid = tmp_path / "child.pid"
    script = _bins(tmp_path / "bin", f"sleep 600 &\necho $! > {child_pid}\nwait\n") / TARGETS[1]
    with pytest.raises(PeerRunError, match=r"did not finish within 1 s .* killed") as exc:
        peer_bench.run_binary([str(script), "--version"], timeout=1)
    assert str(script) in str(exc.value)
    pid = int(child_pid.read_text())
    # SIGKILL is delivered at once; the kernel may need a moment to end the process (a generous
    # wait, not a timing assertion). A zombie (state Z, not yet reaped by its new parent) is dead.
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), f"the hung binary's child {pid} outlived the timeout"


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (state Z, not yet reaped by its new parent) counts as dead."""
    if Path("/proc").is_dir():
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_call_timeout_sized_from_the_work_not_thirty_minutes():
    """The bound grows with the steps a call does, from a floor, and a small bench gets minutes, not 30."""
    assert peer_bench.call_timeout(0) == peer_bench.LOAD_S
    assert peer_bench.call_timeout(100) < peer_bench.call_timeout(200)
    assert peer_bench.call_timeout(40 + 16) < 1800 / 10


def test_peer_calls_pass_a_timeout_sized_from_budget_and_gamma(tmp_path):
    """Each call's timeout follows its tokens: speculative at gamma=G allows (G + 1) steps per token."""
    from lab.bench.peer.bench import LlamaCppPeer
    from lab.bench.peer.llamacpp import PeerRunError

    seen = []

    def runner(cmd, timeout=None):
        seen.append((Path(cmd[0]).name, timeout))
        if "--version" in cmd:
            return "", VERSION_LINE + "\n"
        raise PeerRunError("stop after the first call")

    peer = LlamaCppPeer(locate(_bins(tmp_path / "bin", "")), Path("/m/t.gguf"), Path("/m/d.gguf"),
                        {(1, 2, 3, 4): "text"}, threads=1, gammas=(4,), runner=runner)
    try:
        (_, target_only), (_, spec) = peer.methods(lambda *a, **k: None)
        import torch

        ids = torch.tensor([[1, 2, 3, 4]])
        for fn in (target_only, spec):
            with pytest.raises(PeerRunError):
                fn(ids, 16)
    finally:
        peer.close()
    timeouts = dict(seen)
    assert timeouts["llama-completion"] == peer_bench.call_timeout(4 + 16)
    assert timeouts["llama-speculative-simple"] == peer_bench.call_timeout(2 * 4 + 16 * 5)


@pytest.mark.parametrize("behaviour,cause", [("segfault", "SIGSEGV"), ("garbage", "cannot read")])
def test_cli_bench_broken_peer_exits_1_one_line_before_loading(tmp_path, capsys, monkeypatch, behaviour, cause):
    """Fault class (a broken peer binary ending in a traceback): a dead or garbage-printing binary: one line
    naming it, exit 1, no model loaded, no report."""
    import lab.models.loading
    from lab.bench.peer import cli as peer_cli

    monkeypatch.setattr(lab.models.loading, "load_model",
                        lambda *a, **k: pytest.fail("a model was loaded before the peer was checked"))
    monkeypatch.setattr(peer_cli, "_gguf", lambda name, flag: tmp_path / f"{name}.gguf")
    bins = _bins(tmp_path / "bin", BEHAVIOURS[behaviour])
    rc = main(["bench", "--model", "qwen2.5-coder", "--peer", "llama.cpp", "--llama-cpp", str(bins),
               "--device", "cpu", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 1, err
    assert len(lines) == 1 and cause in lines[0] and "llama-completion" in lines[0], err
    assert "Traceback" not in err and "\x1b" not in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
