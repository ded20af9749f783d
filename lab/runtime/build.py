"""Build llama.cpp once from the pinned ``llama-cpp-python`` sdist: the peer's binaries and the lab's own runtime.

``python -m lab.runtime.build`` (what ``make peer`` runs) fetches the sdist with
``pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36``, checks its sha256,
unpacks only ``vendor/llama.cpp`` and builds, with cmake + ninja, Release, CPU only, no
HTTPS/network code, no tests and no server, exactly the targets the lab runs:

- ``llama-speculative-simple``: speculative decoding (target + draft) on one prompt;
- ``llama-completion``: the target alone on the same prompt with the same common
  arguments (threads, sampler, perf print). ``llama-simple`` would also decode greedily
  but takes no thread count, and this version builds ``llama-cli`` only with the server;
- ``llama-bench``: tokens/s of prompt processing and generation on synthetic tokens,
  for each model alone (the draft's cost c);
- ``llama`` (``libllama.so`` and the ``libggml*`` it loads), shared: the kernels of the lab's
  own ggml runtime (:mod:`lab.runtime.ggml`), reached through the sdist's own Python binding
  (its ``llama_cpp`` package, copied beside the libraries: the binding and the library come
  from one sdist and one compile, so they cannot disagree).

Install layout: ``<cache>/llama.cpp/<version>/bin/<binaries>``,
``<cache>/llama.cpp/<version>/python/llama_cpp/`` (the binding) with its shared libraries in
``python/llama_cpp/lib/`` (where the binding looks; the binaries find them by RPATH), and
``<cache>/llama.cpp/<version>/lab-peer.json`` (the manifest), ``<cache>`` being
:func:`lab.models.cache.cache_dir` (``$LAB_CACHE_DIR`` moves it). Everything is built in a
staging directory ``<cache>/llama.cpp/.staging-*`` and renamed into place, manifest
included, in one rename (:func:`lab.files.publish`): an interrupted build leaves only a staging directory,
which the next run deletes, never a directory that looks installed. A second run finds
the manifest and its binaries, checks that the binding imports, and does nothing. Runs are
serialized with a lock file (:func:`lab.runs.locks.waiting_lock`).

``pip``, cmake, ninja and the compilers run in a session of their own (ninja puts each compile
in its own process group, inside that session). SIGINT or SIGTERM (Ctrl-C, ``make`` stopped)
ends every process of it (SIGTERM, then SIGKILL after ``STOP_GRACE_SECONDS``), removes the staging directory and says so in one line, exit 130 or
143: nothing keeps compiling into a folder the next build deletes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab.files import make_staging, publish, sweep_staging
from lab.models.cache import cache_dir
from lab.runs.locks import waiting_lock
from lab.schemas import read_json

log = logging.getLogger(__name__)

SDIST_NAME = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
# sha256 of llama_cpp_python-0.3.36.tar.gz as PyPI serves it (checked on every fetch).
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
# The llama.cpp commit this sdist vendors (its CHANGELOG: "update llama.cpp to
# ggml-org/llama.cpp@0c1e57098"; checked against the submodule HEAD it ships). Passed to
# cmake so the binaries print it; the build number stays 0: the sdist's submodule is a
# shallow clone, whose commit count (1) would be no build number at all.
LLAMA_CPP_COMMIT = "0c1e57098"
TARGETS = ("llama-speculative-simple", "llama-completion", "llama-bench")
LIBRARY_TARGET = "llama"  # libllama.so; ninja builds the libggml* it links as dependencies
MANIFEST = "lab-peer.json"
# The install's layout version: an install of an older layout (static binaries, no binding)
# is incomplete and is rebuilt.
LAYOUT = 2
PYTHON_DIR = "python"  # <install>/python holds the binding's package, llama_cpp/
LIB_DIR = "python/llama_cpp/lib"
# Release, CPU only, shared libraries whose RPATH is fixed at build time to where the install
# puts them (so the binaries and libraries survive the rename out of the build tree), nothing that reaches the network (OpenSSL, the prebuilt web UI), no tests,
# server, unified app or web UI.
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    f"-DCMAKE_INSTALL_RPATH=$ORIGIN:$ORIGIN/../{LIB_DIR}",
    "-DGGML_BACKEND_DL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_EXAMPLES=ON",
    f"-DLLAMA_BUILD_COMMIT={LLAMA_CPP_COMMIT}",
)
# x86-64: not GGML_NATIVE. On the lab's machines (a Xeon whose cpuinfo lists AMX and
# AVX-512) -march=native builds binaries that die with SIGILL as soon as they compute
# (measured 2026-12-01: an AMX tile instruction raises SIGILL there, AVX-512 runs), so the
# flags are explicit: AVX2, FMA, F16C, BMI2 (ggml's defaults once native is off), AVX-512
# where torch's own runtime check (``torch.backends.cpu.get_cpu_capability()``, which asks
# the OS, not cpuinfo) reports it, never AMX. Elsewhere (arm64) the native default stays.
X86_FLAGS = ("-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
             "-DGGML_BMI2=ON", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF")


def _x86_avx512() -> bool:
    try:
        import torch
    except ImportError:  # the lab always has torch; without it, stay on AVX2
        return False
    return torch.backends.cpu.get_cpu_capability() == "AVX512"


def cmake_flags(machine: str | None = None, avx512: bool | None = None) -> tuple[str, ...]:
    """The configure flags for this machine (``platform.machine()``; AVX-512 as torch sees it)."""
    machine = machine or platform.machine()
    if machine.lower() not in ("x86_64", "amd64"):
        return CMAKE_FLAGS
    avx512 = _x86_avx512() if avx512 is None else avx512
    return CMAKE_FLAGS + X86_FLAGS + (f"-DGGML_AVX512={'ON' if avx512 else 'OFF'}",)


class BuildError(RuntimeError):
    """The sdist could not be fetched or verified, or cmake/ninja failed."""


class BuildInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM during the build (:func:`main` raises it from its signal handler).

    Attributes:
        signum: the signal.
        left: pids of the build's session still running after it was ended (empty: none).
    """

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.left: tuple[int, ...] = ()


# How long pip, cmake, ninja and the compilers get to exit on SIGTERM before SIGKILL: a compiler
# exits at once; the grace is only for cmake/ninja to remove their own temporary files.
STOP_GRACE_SECONDS = 5.0
# How long to wait for the group to be gone after SIGKILL (the kernel needs no more).
KILL_WAIT_SECONDS = 5.0


def session_members(sid: int) -> tuple[int, ...]:
    """The pids of session ``sid`` still running (zombies, already dead, are not counted).

    A session, not a process group: ninja starts each compile in a process group of its own, but
    within its session. Reads ``/proc`` on Linux; elsewhere asks ``killpg(sid, 0)`` (the group the
    session's leader leads; then the answer is ``(sid,)`` or ``()``).
    """
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        try:
            os.killpg(sid, 0)
        except (ProcessLookupError, PermissionError):
            return ()
        return (sid,)
    members = []
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()  # state, ppid, pgrp, session, ...
        except OSError:  # exited while listed
            continue
        if len(fields) > 3 and fields[0] not in ("Z", "X") and int(fields[3]) == sid:
            members.append(int(stat.parent.name))
    return tuple(sorted(members))


def _signal_all(sid: int, members: tuple[int, ...], signum: int) -> None:
    for target, kill in ((sid, os.killpg), *((pid, os.kill) for pid in members)):
        try:
            kill(target, signum)
        except (ProcessLookupError, PermissionError):  # gone already
            pass


def stop_group(proc: subprocess.Popen, grace: float | None = None) -> tuple[int, ...]:
    """End every process of ``proc``'s session (``proc`` leads it, :func:`_call`): SIGTERM, then
    SIGKILL to what is left after ``grace`` seconds (default ``STOP_GRACE_SECONDS``); reaps
    ``proc``. Returns the pids still running after that (normally none)."""
    deadline = time.monotonic() + (STOP_GRACE_SECONDS if grace is None else grace)
    left = session_members(proc.pid)
    for signum, until in ((signal.SIGTERM, deadline), (signal.SIGKILL, deadline + KILL_WAIT_SECONDS)):
        _signal_all(proc.pid, left, signum)
        while True:
            proc.poll()  # reap the leader, so that it does not count as running
            left = session_members(proc.pid)
            if not left or time.monotonic() >= until:
                break
            time.sleep(0.05)
        if not left:
            break
    proc.wait()
    return left


def _call(cmd: list[str], **popen: object) -> int:
    """Run ``cmd`` in a session (and process group) of its own and return its exit code; on any
    exception (SIGINT, SIGTERM) while it runs, end the session's processes with :func:`stop_group` first."""
    proc = subprocess.Popen(cmd, start_new_session=True, **popen)
    try:
        return proc.wait()
    except BaseException as exc:
        left = stop_group(proc)
        if isinstance(exc, BuildInterrupted):
            exc.left = exc.left + left
        raise


@dataclass(frozen=True)
class BuildConfig:
    """Where and how to build.

    Attributes:
        root: the llama.cpp cache, ``<cache_dir()>/llama.cpp`` by default.
        sdist: a local copy of the sdist to use instead of ``pip download`` (checked
            against ``SDIST_SHA256`` all the same).
        jobs: ninja's parallel jobs (default: the CPU count).
    """

    root: Path = field(default_factory=lambda: cache_dir() / "llama.cpp")
    sdist: Path | None = None
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)

    @property
    def install_dir(self) -> Path:
        return self.root / SDIST_VERSION


def installed(install_dir: Path) -> dict | None:
    """The manifest of a complete install in ``install_dir``, or None.

    Complete means: the manifest parses, is of this ``LAYOUT``, records the flags this
    machine builds with, every binary and shared library it lists exists with the size it
    records, and the binding's package is there (a file deleted or truncated since, a build
    made with other flags, or an older layout makes the install incomplete).
    """
    try:
        manifest = read_json(install_dir / MANIFEST, "peer manifest")  # bounded; a FIFO is refused unread
        if manifest.get("layout") != LAYOUT or manifest["cmake_flags"] != list(cmake_flags()):
            return None
        for name, size in manifest["binaries"].items():
            if (install_dir / "bin" / name).stat().st_size != size:
                return None
        for name, size in manifest["libraries"].items():
            if (install_dir / LIB_DIR / name).stat().st_size != size:
                return None
        if not (install_dir / PYTHON_DIR / "llama_cpp" / "llama_cpp.py").is_file():
            return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):  # RecursionError: deep JSON
        return None
    return manifest


# A generous bound on importing the binding in a child Python (about a second when it loads).
IMPORT_TIMEOUT_SECONDS = 120


def binding_problem(install_dir: Path) -> str | None:
    """Why the binding in ``install_dir`` does not import with its libraries, or None when it does.

    Imported in a child Python (``llama_cpp.llama_cpp``, as :func:`lab.runtime.ggml.binding` does),
    so a library that crashes the interpreter cannot take the caller down. An install whose
    files have the recorded sizes can still not load (a library overwritten with bytes of the
    same length, a binding edited): :func:`build` then builds it again.
    """
    code = "import sys; sys.path.insert(0, sys.argv[1]); import llama_cpp.llama_cpp"
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_CPP_LIB_PATH"}  # its own lib/, built with it
    try:
        done = subprocess.run([sys.executable, "-c", code, str(install_dir / PYTHON_DIR)], capture_output=True,
                              text=True, errors="replace", env=env, timeout=IMPORT_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        return f"importing its binding took over {IMPORT_TIMEOUT_SECONDS} s"
    if done.returncode == 0:
        return None
    last = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return last[-1] if last else f"importing its binding exited {done.returncode}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_sdist(dest: Path) -> Path:
    """``pip download`` the pinned sdist into ``dest``; returns the tarball's path."""
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
           "--no-binary", ":all:", f"{SDIST_NAME}=={SDIST_VERSION}", "-d", str(dest)]
    log.info("fetching the sdist: %s", " ".join(cmd))
    if _call(cmd) != 0:
        raise BuildError(f"`{' '.join(cmd)}` failed (is PyPI reachable?)")
    found = sorted(dest.glob(f"llama_cpp_python-{SDIST_VERSION}.tar.gz"))
    if not found:
        raise BuildError(f"pip download left no llama_cpp_python-{SDIST_VERSION}.tar.gz in {dest}")
    return found[0]


def unpack_vendor(sdist: Path, dest: Path) -> Path:
    """Unpack ``<top>/vendor/llama.cpp/`` and the binding ``<top>/llama_cpp/`` of ``sdist``
    into ``dest``; returns the llama.cpp source root (the binding is its ``../../llama_cpp``).

    Raises:
        BuildError: the tarball's sha256 is not the pinned one, it has no vendored
            llama.cpp, or its submodule HEAD is not ``LLAMA_CPP_COMMIT``.
    """
    if _sha256(sdist) != SDIST_SHA256:
        raise BuildError(f"{sdist}: sha256 is not the pinned {SDIST_SHA256} (corrupt or wrong file)")
    top = f"llama_cpp_python-{SDIST_VERSION}"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(f"{top}/vendor/llama.cpp/")]
        if not members:
            raise BuildError(f"{sdist} has no {top}/vendor/llama.cpp/")
        binding = [m for m in tar.getmembers() if m.name.startswith(f"{top}/llama_cpp/")]
        if not any(m.name == f"{top}/llama_cpp/llama_cpp.py" for m in binding):
            raise BuildError(f"{sdist} has no {top}/llama_cpp/llama_cpp.py (the Python binding)")
        members += binding
        tar.extractall(dest, members=members, filter="data")
        try:  # the submodule's git directory ships in the sdist: its HEAD names the commit
            head = tar.extractfile(f"{top}/.git/modules/vendor/llama.cpp/HEAD").read().decode().strip()
        except (KeyError, AttributeError):
            head = ""
    if not head.startswith(LLAMA_CPP_COMMIT):
        raise BuildError(f"{sdist}: vendored llama.cpp is at {head or 'an unknown commit'!r}, "
                         f"not the pinned {LLAMA_CPP_COMMIT}")
    root = dest / top / "vendor" / "llama.cpp"
    # Its .git file points into a git directory not unpacked; remove it so cmake's git
    # probe cannot walk up into an unrelated repository around the cache (the commit is
    # passed explicitly in CMAKE_FLAGS instead).
    (root / ".git").unlink(missing_ok=True)
    return root


def _run(cmd: list[str], log_file: Path) -> None:
    log.info("%s", " ".join(cmd))
    with log_file.open("ab") as out:
        code = _call(cmd, stdout=out, stderr=subprocess.STDOUT)
    if code != 0:
        tail = log_file.read_text(errors="replace")[-3000:]
        raise BuildError(f"`{' '.join(cmd)}` exited {code}; last output:\n{tail}")


def compile_targets(src: Path, build: Path, jobs: int, log_file: Path) -> None:
    """Configure with :func:`cmake_flags` and build ``TARGETS`` with ninja.

    Raises:
        BuildError: cmake or ninja is not on PATH, or either exits non-zero.
    """
    missing = [tool for tool in ("cmake", "ninja") if shutil.which(tool) is None]
    if missing:
        raise BuildError(f"{' and '.join(missing)} not found on PATH; `make peer` needs cmake (>= 3.14) and ninja "
                         "(e.g. apt-get install cmake ninja-build)")
    _run(["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja", *cmake_flags()], log_file)
    _run(["cmake", "--build", str(build), "-j", str(jobs), "--target", *TARGETS, LIBRARY_TARGET], log_file)


def build(config: BuildConfig | None = None) -> dict:
    """Build and install the peer binaries unless a complete install exists whose binding imports
    (:func:`installed`, :func:`binding_problem`); an incomplete or unloadable one is built anew.

    Returns:
        The install's manifest (``"built": false`` when it was already there).

    Raises:
        BuildError: fetching, verifying, configuring or compiling failed; nothing is
            installed then.
        KeyboardInterrupt: (:class:`BuildInterrupted` under :func:`main`) a signal; the running
            tool's session was ended (:func:`stop_group`) and the staging directory removed.
    """
    config = config or BuildConfig()
    config.root.mkdir(parents=True, exist_ok=True)
    with waiting_lock(config.root / ".lock"):  # one build at a time; a second waits, then finds it done
        manifest = installed(config.install_dir)
        if manifest is not None:
            problem = binding_problem(config.install_dir)
            if problem is None:
                return {**manifest, "built": False}
            log.info("the install in %s does not load (%s); building it again", config.install_dir, problem)
        sweep_staging(config.root, ".staging-*")  # interrupted builds' leftovers (the lock keeps out a live one)
        if config.install_dir.exists():  # incomplete (a binary removed or truncated)
            shutil.rmtree(config.install_dir)
        staging = make_staging(config.root, config.install_dir.name, prefix=".staging-", private=True)
        try:
            manifest = _build_in(staging, config)
            publish(staging / "install", config.install_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return {**manifest, "built": True}


def _build_in(staging: Path, config: BuildConfig) -> dict:
    started, load_before = time.monotonic(), os.getloadavg()
    sdist = config.sdist or fetch_sdist(staging / "sdist")
    src = unpack_vendor(sdist, staging / "src")
    compile_targets(src, staging / "build", config.jobs, staging / "build.log")
    out = staging / "install"
    (out / "bin").mkdir(parents=True)
    sizes = {}
    for name in TARGETS:
        binary = staging / "build" / "bin" / name
        if not binary.is_file():
            raise BuildError(f"the build finished without {binary}")
        shutil.copy2(binary, out / "bin" / name)
        sizes[name] = (out / "bin" / name).stat().st_size
    shutil.copytree(src.parent.parent / "llama_cpp", out / PYTHON_DIR / "llama_cpp",
                    ignore=shutil.ignore_patterns("server", "__pycache__"))
    (out / LIB_DIR).mkdir(parents=True, exist_ok=True)
    libraries = {}
    for lib in sorted((staging / "build" / "bin").glob("lib*.so*")):  # versioned names are links
        shutil.copy2(lib, out / LIB_DIR / lib.name, follow_symlinks=False)
        if not lib.is_symlink():
            libraries[lib.name] = (out / LIB_DIR / lib.name).stat().st_size
    if not any(name.startswith("libllama.so") for name in libraries):
        raise BuildError(f"the build finished without libllama.so in {staging / 'build' / 'bin'}")
    manifest = {
        "sdist": f"{SDIST_NAME}=={SDIST_VERSION}", "sdist_sha256": SDIST_SHA256,
        "llama_cpp_commit": LLAMA_CPP_COMMIT, "cmake_flags": list(cmake_flags()),
        "layout": LAYOUT, "targets": list(TARGETS), "binaries": sizes, "libraries": libraries,
        "build_seconds": round(time.monotonic() - started, 1),
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "jobs": config.jobs,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")  # written last
    return manifest


def _hold_signals() -> None:
    """Ignore SIGINT and SIGTERM: ending the build's processes and removing its staging
    directory must not be cut short by a second signal."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _interrupt(signum: int, frame: object) -> None:
    _hold_signals()
    raise BuildInterrupted(signum)


def stopped_line(exc: KeyboardInterrupt, config: BuildConfig) -> str:
    """The one line :func:`main` prints when a signal stopped the build: which signal, whether any
    of its processes is still running (pids), whether a staging directory is left and whether
    the install is complete."""
    name = signal.Signals(getattr(exc, "signum", signal.SIGINT)).name
    left = getattr(exc, "left", ())
    ended = (f"processes {', '.join(map(str, left))} of the build still run after SIGKILL" if left
             else "the build's processes (pip, cmake, ninja, the compilers) were ended, none is left running")
    staging = sorted(config.root.glob(".staging-*"))
    kept = (f"{staging[0]} is left (the next build deletes it)" if staging
            else "its staging directory was removed")
    if installed(config.install_dir) is not None:  # the signal came after the install was renamed into place
        return f"stopped by {name}: {ended}; {kept}; the install in {config.install_dir} is complete"
    return f"stopped by {name}: {ended}; {kept}; nothing was installed; run `make peer` again to build"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.runtime.build", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, help="llama.cpp cache (default <cache_dir()>/llama.cpp)")
    parser.add_argument("--sdist", type=Path, help="use this local sdist instead of pip download")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="ninja jobs (default: CPU count)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    config = BuildConfig(**{k: v for k, v in (("root", args.root), ("sdist", args.sdist)) if v},
                         jobs=args.jobs)
    handlers = {signum: signal.signal(signum, _interrupt) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        manifest = build(config)
    except BuildError as exc:
        print(f"lab.runtime.build: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # BuildInterrupted from _interrupt; a plain one if raised before it was set
        _hold_signals()
        print(f"lab.runtime.build: {stopped_line(exc, config)}", file=sys.stderr)
        return 128 + getattr(exc, "signum", signal.SIGINT)
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    state = (f"built in {manifest['build_seconds']} s" if manifest["built"]
             else f"already installed (its build took {manifest['build_seconds']} s)")
    print(f"llama.cpp {manifest['llama_cpp_commit']} ({manifest['sdist']}) {state}: {config.install_dir / 'bin'}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
