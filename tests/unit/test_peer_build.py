"""``python -m lab.runtime.build`` (``make peer``): installs once, idempotently, never half.

cmake/ninja are replaced by a fake that writes the binaries (or fails, or is interrupted);
the sdist is a tiny tarball with the pinned layout. The real build is exercised by the
integration tier (its binaries) and measured in the README.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from lab.runtime import build as peer_build


def _fake_sdist(path, head=peer_build.LLAMA_CPP_COMMIT + "bba43ac29e6e3b677cdceebdd22334f"):
    top = f"llama_cpp_python-{peer_build.SDIST_VERSION}"
    files = {f"{top}/vendor/llama.cpp/CMakeLists.txt": b"project(fake)\n",
             f"{top}/vendor/llama.cpp/.git": b"gitdir: ../../.git/modules/vendor/llama.cpp\n",
             f"{top}/vendor/llama.cpp/vendor/llama.cpp/nested.txt": b"a nested vendor dir\n",
             f"{top}/.git/modules/vendor/llama.cpp/HEAD": head.encode() + b"\n",
             f"{top}/llama_cpp/__init__.py": b"",
             f"{top}/llama_cpp/llama_cpp.py": b"# the binding\n",
             f"{top}/llama_cpp/server/app.py": b"not copied\n",
             f"{top}/setup.py": b"not unpacked\n"}
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def fake_build(tmp_path, monkeypatch):
    """A BuildConfig on a tmp root with a fake sdist; ``calls`` counts compile runs."""
    sdist = _fake_sdist(tmp_path / "sdist.tar.gz")
    monkeypatch.setattr(peer_build, "SDIST_SHA256", hashlib.sha256(sdist.read_bytes()).hexdigest())
    calls = {"n": 0, "fail": None, "sources": []}

    def compile_targets(src, build, jobs, log_file):
        calls["n"] += 1
        calls["sources"].append(sorted(p.name for p in src.iterdir()))
        (build / "bin").mkdir(parents=True)
        for i, name in enumerate(peer_build.TARGETS):
            (build / "bin" / name).write_bytes(b"\x7fELF" + bytes(i + 10))
            if calls["fail"] is not None and i == 1:  # dies mid-way, one binary written
                raise calls["fail"]
        (build / "bin" / "libllama.so.0.5.0").write_bytes(b"\x7fELF library")
        (build / "bin" / "libllama.so.0").symlink_to("libllama.so.0.5.0")
        (build / "bin" / "libllama.so").symlink_to("libllama.so.0")

    monkeypatch.setattr(peer_build, "compile_targets", compile_targets)
    return peer_build.BuildConfig(root=tmp_path / "llama.cpp", sdist=sdist, jobs=1), calls


def test_build_first_run_installs_second_run_does_nothing(fake_build):
    config, calls = fake_build
    first = peer_build.build(config)
    assert first["built"] is True and calls["n"] == 1
    assert calls["sources"] == [["CMakeLists.txt", "vendor"]]  # only vendor/llama.cpp, its .git file removed
    manifest = json.loads((config.install_dir / peer_build.MANIFEST).read_text())
    assert sorted(manifest["binaries"]) == sorted(peer_build.TARGETS)
    assert manifest["libraries"] == {"libllama.so.0.5.0": len(b"\x7fELF library")}  # links are copied, not listed
    lib = config.install_dir / peer_build.LIB_DIR
    assert (lib / "libllama.so").is_symlink() and (lib / "libllama.so").read_bytes() == b"\x7fELF library"
    binding = config.install_dir / peer_build.PYTHON_DIR / "llama_cpp"
    assert (binding / "llama_cpp.py").is_file() and not (binding / "server").exists()
    assert manifest["llama_cpp_commit"] == peer_build.LLAMA_CPP_COMMIT
    second = peer_build.build(config)
    assert second["built"] is False and calls["n"] == 1
    assert [p.name for p in config.root.iterdir() if p.name.startswith(".staging")] == []


@pytest.mark.parametrize("fault", [KeyboardInterrupt(), peer_build.BuildError("ninja exited 1")])
def test_build_interrupted_or_failed_leaves_nothing_installed(fake_build, fault):
    config, calls = fake_build
    calls["fail"] = fault
    with pytest.raises(type(fault)):
        peer_build.build(config)
    assert not config.install_dir.exists()
    assert peer_build.installed(config.install_dir) is None
    assert [p.name for p in config.root.iterdir() if p.name.startswith(".staging")] == []
    calls["fail"] = None
    assert peer_build.build(config)["built"] is True  # the next run builds from scratch


def test_build_killed_leftover_staging_is_removed_and_not_installed(fake_build):
    """A build killed outright (SIGKILL: no cleanup ran) leaves a staging dir with binaries;
    it must not count as installed, and the next run deletes it."""
    config, calls = fake_build
    stale = config.root / ".staging-killed" / "install" / "bin"
    stale.mkdir(parents=True)
    for name in peer_build.TARGETS:
        (stale / name).write_bytes(b"half")
    assert peer_build.installed(config.install_dir) is None
    assert peer_build.build(config)["built"] is True
    assert not (config.root / ".staging-killed").exists()


def test_build_truncated_binary_is_rebuilt(fake_build):
    config, calls = fake_build
    peer_build.build(config)
    (config.install_dir / "bin" / peer_build.TARGETS[0]).write_bytes(b"")
    assert peer_build.installed(config.install_dir) is None
    assert peer_build.build(config)["built"] is True and calls["n"] == 2


def test_build_wrong_sdist_hash_or_commit_raises_and_installs_nothing(fake_build, tmp_path, monkeypatch):
    config, calls = fake_build
    monkeypatch.setattr(peer_build, "SDIST_SHA256", "0" * 64)
    with pytest.raises(peer_build.BuildError, match="sha256"):
        peer_build.build(config)
    other = _fake_sdist(tmp_path / "other.tar.gz", head="deadbeef" * 5)
    monkeypatch.setattr(peer_build, "SDIST_SHA256", hashlib.sha256(other.read_bytes()).hexdigest())
    with pytest.raises(peer_build.BuildError, match="deadbeef"):
        peer_build.build(peer_build.BuildConfig(root=config.root, sdist=other, jobs=1))
    assert calls["n"] == 0 and not config.install_dir.exists()


def test_build_main_reports_failure_with_exit_1(fake_build, capsys, monkeypatch):
    config, calls = fake_build
    calls["fail"] = peer_build.BuildError("ninja exited 1")
    rc = peer_build.main(["--root", str(config.root), "--sdist", str(config.sdist), "--jobs", "1"])
    assert rc == 1 and "ninja exited 1" in capsys.readouterr().err


def test_cmake_flags_never_native_or_amx_on_x86_and_native_elsewhere():
    """Fault class: -march=native on a CPU whose cpuinfo lists AMX the OS does not grant (SIGILL)."""
    for avx512 in (True, False):
        flags = peer_build.cmake_flags("x86_64", avx512=avx512)
        assert "-DGGML_NATIVE=OFF" in flags and "-DGGML_AVX2=ON" in flags
        assert not any(f.startswith("-DGGML_AMX") and f.endswith("=ON") for f in flags)
        assert f"-DGGML_AVX512={'ON' if avx512 else 'OFF'}" in flags
    arm = peer_build.cmake_flags("aarch64")
    assert not any(f.startswith(("-DGGML_NATIVE", "-DGGML_AVX")) for f in arm)
    assert "-DLLAMA_BUILD_SERVER=OFF" in arm and "-DLLAMA_OPENSSL=OFF" in arm and "-DLLAMA_BUILD_TESTS=OFF" in arm


def test_build_made_with_other_flags_is_rebuilt(fake_build):
    config, calls = fake_build
    peer_build.build(config)
    path = config.install_dir / peer_build.MANIFEST
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "cmake_flags": manifest["cmake_flags"] + ["-DGGML_NATIVE=ON"]}))
    assert peer_build.installed(config.install_dir) is None
    assert peer_build.build(config)["built"] is True and calls["n"] == 2


def test_compile_without_cmake_or_ninja_names_them(tmp_path, monkeypatch):
    monkeypatch.setattr(peer_build.shutil, "which", lambda tool: None if tool == "ninja" else "/usr/bin/cmake")
    with pytest.raises(peer_build.BuildError, match="ninja not found on PATH"):
        peer_build.compile_targets(tmp_path, tmp_path / "build", 1, tmp_path / "log")


def test_installed_older_layout_or_missing_library_is_rebuilt(fake_build):
    config, calls = fake_build
    peer_build.build(config)
    manifest_file = config.install_dir / peer_build.MANIFEST
    manifest = json.loads(manifest_file.read_text())
    manifest_file.write_text(json.dumps({**manifest, "layout": 1}))  # the static-binaries layout
    assert peer_build.installed(config.install_dir) is None
    assert peer_build.build(config)["built"] is True and calls["n"] == 2
    (config.install_dir / peer_build.LIB_DIR / "libllama.so.0.5.0").unlink()
    assert peer_build.installed(config.install_dir) is None
    assert peer_build.build(config)["built"] is True and calls["n"] == 3


# A fake cmake for the signal tests: it starts a "compiler" in a process group of its own (as ninja
# starts each compile) that ignores SIGTERM (so only SIGKILL ends it, as a compiler stuck in a long
# write would), records both pids, then waits.
COMPILER = ("import os, signal, sys, time; os.setpgid(0, 0); signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); os.rename(sys.argv[1] + '.tmp', sys.argv[1]); "
            "time.sleep(600)")
FAKE_CMAKE = f"""#!/bin/sh
echo $$ > "$PIDS/cmake"
"$PYTHON" -c "{COMPILER}" "$PIDS/compiler" &
wait
"""
BUILD_MAIN = """import sys
from lab.runtime import build
build.SDIST_SHA256, build.STOP_GRACE_SECONDS = sys.argv[1], 0.5
build._x86_avx512 = lambda: False
sys.exit(build.main(sys.argv[2:]))
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to reap it has stopped)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_build_main_signal_ends_every_process_of_the_build_and_says_so_in_one_line(tmp_path, signum):
    """Fault class: SIGTERM to ``make peer`` exited 143 while cmake, ninja and the compilers went
    on (reparented to PID 1) writing into a staging folder the next build deletes; SIGINT
    printed a 36-line traceback. Now every process of the build's session is ended (SIGTERM,
    then SIGKILL), a compiler in a process group of its own too, no pid of it is left running,
    the staging folder is removed, and one line says so."""
    sdist = _fake_sdist(tmp_path / "sdist.tar.gz")
    tools, pids, root = tmp_path / "tools", tmp_path / "pids", tmp_path / "llama.cpp"
    tools.mkdir()
    pids.mkdir()
    for tool in ("cmake", "ninja"):
        (tools / tool).write_text(FAKE_CMAKE)
        (tools / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}", "PIDS": str(pids), "PYTHON": sys.executable}
    proc = subprocess.Popen([sys.executable, "-c", BUILD_MAIN, hashlib.sha256(sdist.read_bytes()).hexdigest(),
                             "--root", str(root), "--sdist", str(sdist), "--jobs", "1"],
                            env=env, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):  # until the fake compiler runs (a bound, not a timing the test relies on)
            if (pids / "compiler").exists() and (pids / "cmake").exists():
                break
            time.sleep(0.05)
        started = [int((pids / name).read_text()) for name in ("cmake", "compiler")]
        proc.send_signal(signum)
        err = proc.communicate(timeout=120)[1]
    finally:
        proc.kill()
    running = [pid for pid in started if _running(pid)]
    for pid in running:  # what a failing build left: ended here, not by the next test run
        os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 128 + signum, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"lab.runtime.build: stopped by {signal.Signals(signum).name}: ") and "none is left running" in last
    assert "staging directory was removed" in last and "run `make peer` again" in last
    assert running == []
    assert list(root.glob(".staging-*")) == [] and not (root / peer_build.SDIST_VERSION).exists()


def test_stopped_line_names_processes_still_running_and_a_staging_left(tmp_path):
    config = peer_build.BuildConfig(root=tmp_path, jobs=1)
    (tmp_path / ".staging-x").mkdir()
    exc = peer_build.BuildInterrupted(signal.SIGTERM)
    exc.left = (123, 456)
    line = peer_build.stopped_line(exc, config)
    assert line.startswith("stopped by SIGTERM: processes 123, 456 of the build still run after SIGKILL")
    assert ".staging-x is left" in line and "\n" not in line


def test_build_install_whose_binding_does_not_import_is_rebuilt(fake_build):
    """Fault class: an install with the recorded sizes whose binding is cut (or library
    overwritten) did not load, and `make peer` said "already installed": it could not be mended."""
    config, calls = fake_build
    peer_build.build(config)
    binding = config.install_dir / peer_build.PYTHON_DIR / "llama_cpp" / "llama_cpp.py"
    size = binding.stat().st_size
    binding.write_text("def (\n"[:size].ljust(size))  # same size, not Python
    assert peer_build.installed(config.install_dir) is not None
    assert "SyntaxError" in peer_build.binding_problem(config.install_dir)
    assert peer_build.build(config)["built"] is True and calls["n"] == 2
    assert peer_build.binding_problem(config.install_dir) is None


def test_installed_deeply_nested_manifest_is_not_installed(fake_build):
    """Fault class: a manifest nested 100,000 deep raised RecursionError out of the check."""
    config, calls = fake_build
    peer_build.build(config)
    (config.install_dir / peer_build.MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    assert peer_build.installed(config.install_dir) is None
    assert peer_build.build(config)["built"] is True
