"""What Python would print beside the run's one line, or swallow: a signal raised inside a finalizer,
a helper thread out of memory, an allocation that lost its MemoryError under ``ulimit -v``."""

from __future__ import annotations

import signal
import threading

import pytest

from lab import cli

pytestmark = pytest.mark.unit

LOST_MEMORY_ERROR = SystemError("<function _LazyModule.__getattr__ at 0x7fdd36fd9f80> returned NULL without "
                                "setting an exception")


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def ctrl_c():
    """SIGINT raising KeyboardInterrupt, as at a terminal (a test run started under `&` has it ignored)."""
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


class _Finalized:
    """An object whose ``__del__`` is where the signal lands (pyparsing's, in the reported run)."""

    def __init__(self, raised: KeyboardInterrupt):
        self.raised = raised

    def __del__(self):
        raise self.raised


@pytest.mark.parametrize("raised, code, word", [
    (KeyboardInterrupt(), 130, "interrupted"),
    (cli.Terminated(signal.SIGTERM), 143, "terminated"),
])
def test_cli_signal_raised_inside_a_finalizer_still_ends_the_run(tmp_path, capsys, monkeypatch, ctrl_c, raised, code,
                                                                  word):
    """Fault class: Ctrl-C landing in a ``__del__`` was printed as "Exception ignored in ...
    KeyboardInterrupt" and swallowed, and the run went on to its end (exit 0)."""
    from lab.commands import entropy

    finished = []

    def run(args):
        obj = _Finalized(raised)
        del obj  # the KeyboardInterrupt is raised in __del__, where Python cannot pass it on
        for _ in range(1000):  # the run going on
            pass
        finished.append(True)
        return 0

    monkeypatch.setattr(entropy, "run", run)
    rc = cli.main(["entropy", "hi", "--out", str(tmp_path / "out")])
    line = _one_line(capsys.readouterr().err)
    assert rc == code and line.startswith(f"lab entropy: {word}"), line
    assert finished == []


def test_cli_thread_out_of_memory_prints_no_traceback_beside_the_memory_line(tmp_path, capsys, monkeypatch):
    """Fault class: under ``ulimit -v`` Rich's live-display thread printed a 13-line traceback
    ("Exception in thread ...: MemoryError") before the run's out-of-memory line."""
    from lab.commands import entropy

    def run(args):
        def refresh():
            raise MemoryError()

        thread = threading.Thread(target=refresh)
        thread.start()
        thread.join()
        raise MemoryError("loading model 'smollm2'")

    monkeypatch.setattr(entropy, "run", run)
    monkeypatch.setattr(threading, "excepthook", threading.__excepthook__)  # Python's own, not pytest's
    rc = cli.main(["entropy", "hi", "--out", str(tmp_path / "out")])
    line = _one_line(capsys.readouterr().err)
    assert rc == 1 and line.startswith("lab entropy: error: out of memory (loading model 'smollm2')"), line


def test_cli_thread_other_error_still_reaches_the_previous_hook(monkeypatch):
    seen = []
    hook = cli._quiet_memory_error(lambda args: seen.append(args.exc_type))
    for exc in (MemoryError(), ValueError("x")):
        hook(threading.ExceptHookArgs((type(exc), exc, None, None)))
    assert seen == [ValueError]


@pytest.mark.parametrize("limit, expected", [(1 << 30, True), (None, False)])
def test_cli_out_of_memory_lost_memory_error_counts_only_under_an_address_space_limit(monkeypatch, limit, expected):
    """Fault class: ``ulimit -v`` on ``lab speculate --runtime llama.cpp`` ended in an unforeseen
    ``SystemError ... returned NULL without setting an exception`` while transformers imported."""
    monkeypatch.setattr(cli, "address_space_limit", lambda: limit)
    assert cli.out_of_memory(LOST_MEMORY_ERROR) is expected
    assert cli.out_of_memory(SystemError("some other internal error")) is False
