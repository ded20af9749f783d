"""The first seconds of a run: a signal or a failed import from launch to the first token.

Fault class (handling in place too late): ``lab.cli`` imported torch after parsing but before its
error handling, so Ctrl-C in the first seconds printed a ``KeyboardInterrupt`` traceback, SIGTERM a
traceback ending in ``Terminated: 15`` and exit 1 (not 143), and torch failing to load under
``ulimit -v`` a raw ``ImportError``/``MemoryError`` traceback instead of the memory line.

The subprocess tests run ``lab`` as its console script does, through :data:`_LAUNCH`: it stalls at
one named moment (importing a module, or calling a function), touches a marker file there, and waits
until the test has sent its signal; or it makes one import fail as a short address space makes it
fail. The test signals only once the marker exists, so no verdict depends on timing.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab import cli

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD_S = 300  # bounds a hung child only (a busy 2-core machine imports torch in ~5 s); never a verdict

_LAUNCH = r'''
import errno, importlib, importlib.abc, signal, sys, time
from pathlib import Path

# Ctrl-C as a terminal delivers it: a test run started in the background (CI under `&`, make) hands
# its children SIGINT ignored, and Python keeps an ignored SIGINT ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)

marker, sent, stall_at, fail_at = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
FAILURES = {  # what an import says when the address space is too small for it, and one that is not that
    "map": ImportError("libtorch_cpu.so: failed to map segment from shared object"),
    "enomem": OSError(errno.ENOMEM, "Cannot allocate memory"),
    "tls": ImportError("libgomp.so.1: cannot allocate memory in static TLS block"),
}


def stall(*args, **kwargs):
    marker.touch()
    deadline = time.monotonic() + 300
    while not sent.exists() and time.monotonic() < deadline:  # the signal lands in here
        time.sleep(0.01)
    return "(the test's stand-in)"


class Moment(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == fail_at.partition("=")[0]:
            raise FAILURES[fail_at.partition("=")[2]]
        if name == stall_at:
            stall()
        return None


sys.meta_path.insert(0, Moment())
if ":" in stall_at:
    module, attr = stall_at.split(":")
    setattr(importlib.import_module(module), attr, stall)
from lab.cli import entry

sys.argv = [sys.argv[0], *sys.argv[5:]]
sys.exit(entry())
'''

# From launch to the first token of `lab entropy`, in order: the parser's imports, the logging setup
# (transformers), the command's imports (torch), the model's load.
MOMENTS = ("lab.commands.entropy", "transformers", "torch", "lab.models.loading:load_model")
SIGNALS = [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]


def _launch(tmp_path: Path, *, stall_at: str = "-", fail_at: str = "-", signals: tuple = ()) -> tuple[int, str]:
    """Run ``lab entropy hi`` through :data:`_LAUNCH`; send ``signals`` once it stalls. Returns (exit code, stderr)."""
    script, marker, sent = tmp_path / "launch.py", tmp_path / "stalled", tmp_path / "sent"
    script.write_text(_LAUNCH, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAB_LOG_DIR": str(tmp_path / "logs"), "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(script), str(marker), str(sent), stall_at, fail_at,
                             "entropy", "hi", "--max-new-tokens", "2", "--device", "cpu", "--out", str(tmp_path / "out")],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if signals:
        deadline = time.monotonic() + HANG_GUARD_S
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        for signum in signals:
            proc.send_signal(signum)
        sent.touch()
    _, err = proc.communicate(timeout=HANG_GUARD_S)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir()), "a report was left"
    return proc.returncode, err


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("signum, code, word", SIGNALS, ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("moment", MOMENTS)
def test_cli_signal_from_launch_to_first_token_ends_in_one_line_and_its_code(tmp_path, moment, signum, code, word):
    """Ctrl-C (130) and SIGTERM (143) while the parser, transformers, torch or the model loads."""
    rc, err = _launch(tmp_path, stall_at=moment, signals=(signum,))
    line = _one_line(err)
    assert rc == code and f": {word}" in line and line.startswith("lab"), err


@pytest.mark.slow
@pytest.mark.parametrize("failure, detail", [("map", "failed to map segment"), ("enomem", "Cannot allocate memory")])
def test_cli_import_failing_for_memory_ends_in_the_memory_line_exit_1(tmp_path, failure, detail):
    """torch's import failing as ``ulimit -v 400000`` / ``800000`` makes it fail: the memory line, not a traceback."""
    rc, err = _launch(tmp_path, fail_at=f"torch={failure}")
    line = _one_line(err)
    assert rc == 1 and line.startswith("lab entropy: error: out of memory (") and detail in line, err
    assert "try a smaller --model" in line and "ulimit -v" in line


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_cli_signal_while_the_memory_line_is_written_keeps_that_one_line(tmp_path, signum):
    """A signal (two, in fact) after the outcome is decided neither cuts its line short nor adds a traceback."""
    rc, err = _launch(tmp_path, fail_at="torch=map", stall_at="lab.cli:memory_text", signals=(signum, signum))
    line = _one_line(err)
    assert rc == 1 and "out of memory" in line and "the test's stand-in" in line, err


def test_cli_import_stays_light_so_no_handler_waits_on_it():
    """The console script imports lab.cli before main sets its handlers: nothing slow may come with it."""
    heavy = ("torch", "transformers", "rich", "numpy", "lab.commands", "lab.models")
    code = f"import sys, lab.cli; print([m for m in {heavy!r} if m in sys.modules])"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=HANG_GUARD_S)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


@pytest.mark.parametrize("exc, expected", [
    (MemoryError(), True),
    (OSError(errno.ENOMEM, "Cannot allocate memory"), True),
    (ImportError("libtorch_cpu.so: failed to map segment from shared object"), True),
    (ImportError("libc10.so: cannot allocate memory"), True),
    (ImportError("libgomp.so.1: cannot allocate memory in static TLS block"), False),  # no shortage: a loader limit
    (ImportError("No module named 'torch'"), False),
    (OSError(errno.ENOENT, "No such file or directory"), False),
    (RuntimeError("cannot allocate memory"), False),
    (RuntimeError("can't start new thread"), True),  # a thread's stack not mapped under ulimit -v
    (RuntimeError("unable to mmap 538090408 bytes from file <m.safetensors>: Cannot allocate memory (12)"), True),
    (RuntimeError("unable to mmap 5 bytes from file <m.safetensors>: No such device (19)"), False),
])
def test_cli_out_of_memory_names_only_memory_failures(exc, expected):
    assert cli.out_of_memory(exc) is expected


def test_cli_static_tls_import_failure_is_not_called_memory(tmp_path, capsys, monkeypatch):
    """A loader failure that raising ``ulimit -v`` would not fix stays on the unforeseen path."""
    from lab.commands import entropy

    def fails(args):
        raise ImportError("libgomp.so.1: cannot allocate memory in static TLS block")

    monkeypatch.setenv("LAB_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setattr(entropy, "run", fails)
    rc = cli.main(["entropy", "hi", "--out", str(tmp_path / "out")])
    line = _one_line(capsys.readouterr().err)
    assert rc == 1 and "did not foresee" in line and "out of memory" not in line


@pytest.mark.parametrize("raised, code, word", [
    (KeyboardInterrupt(), 130, "interrupted"),
    (cli.Terminated(signal.SIGTERM), 143, "terminated"),
    (ImportError("libtorch_cpu.so: failed to map segment from shared object"), 1, "out of memory"),
])
def test_cli_logging_setup_failing_or_interrupted_ends_in_one_line(tmp_path, capsys, monkeypatch, raised, code, word):
    """The logging setup imports transformers (seconds): it runs inside the handlers, as the command does."""
    import lab.render.console

    def setup_logging(verbose):
        raise raised

    monkeypatch.setattr(lab.render.console, "setup_logging", setup_logging)
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        rc = cli.main(["entropy", "hi", "--out", str(tmp_path / "out")])
    except KeyboardInterrupt as exc:  # not pytest's to see: it would end the session
        pytest.fail(f"{type(exc).__name__} escaped lab.cli.main")
    line = _one_line(capsys.readouterr().err)
    assert rc == code and line.startswith("lab entropy: ") and word in line, line
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before  # restored


def test_cli_parser_build_failing_ends_in_one_line(tmp_path, capsys, monkeypatch):
    """A command module that cannot be imported fails in one line before any command is known."""
    def broken():
        raise RuntimeError("a command module is broken")

    monkeypatch.setenv("LAB_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setattr(cli, "build_parser", broken)
    rc = cli.main(["entropy", "hi"])
    line = _one_line(capsys.readouterr().err)
    assert rc == 1 and line.startswith("lab: error: RuntimeError: a command module is broken"), line


def test_cli_main_without_restore_keeps_signals_ignored_to_the_exit():
    """Fault class: a signal between the one line and the process's exit (the default handler put back)
    turning exit 130 into 143 or adding a traceback. The console script runs main(restore_signals=False)."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert cli.main(["entropy", "hi", "--max-new-tokens", "-5"], restore_signals=False) == 2
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN and signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    assert cli.main(["entropy", "hi", "--max-new-tokens", "-5"]) == 2
    assert {s: signal.getsignal(s) for s in before} == before  # in-process callers get theirs back
