"""``python -m lab.runtime.build`` (``make peer``): installs once, idempotently, never half.

cmake/ninja are replaced by a fake that writes the binaries (or fails, or is interrupted);
the sdist is a tiny tarball with the pinned layout. The real build is exercised by the
integration tier (its binaries) and measured in the README.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

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
