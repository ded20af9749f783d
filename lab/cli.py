"""The ``lab`` command: a thin layer mapping flags to each part's config.

Subcommands live in :mod:`lab.commands`, one module each with ``register(subparsers)``, named by
the kind of report they write (:mod:`lab.kinds`); each sets ``func`` to a callable taking the parsed
namespace and returning an exit code. Building the parser imports every command module, so
their top-level imports and ``register`` stay light (no torch, no transformers: ``lab --help``
answers at once); what a command needs to run is imported inside its ``run``.

How a run ends, always in one line on stderr and never with a half-written report (reports
are staged and renamed into place, :func:`lab.reports.report_dir`):

- bad input (``ValueError``, an unavailable model, a name taken): exit 2;
- a report that could not be written, a failed peer binary, memory exhausted (an import that
  could not map its library too, torch under ``ulimit -v``): exit 1, the cause named (for
  memory: what was loading, what the machine has, what to try; a helper thread's memory error
  prints no traceback beside it, :func:`_quiet_memory_error`);
- Ctrl-C: 130, SIGTERM: 143, with what the command kept (also when the signal lands in a
  ``__del__``, where Python would swallow it: :func:`_signal_again`);
- any other exception (a fault the lab did not foresee): exit 1, the line gives its type and
  message and names a file holding the full traceback (:func:`write_traceback`, under
  :func:`lab.user_dirs.log_dir`); ``-v`` also prints the traceback on stderr.

These hold from the first line of :func:`main`: building the parser, importing torch and
transformers and the command itself all run inside its handlers, and once the outcome is
decided later signals are ignored, so none cuts the line short or adds a traceback. Before
:func:`main` runs (Python starting, ``import lab.cli``, kept light: the standard library,
:mod:`lab.safe_text` and :mod:`lab.machine`) a signal does what it does to any Python process.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import re
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from lab.machine import address_space_limit, memory_text
from lab.ranges import NumberTextError, read_number, typed_refusal
from lab.safe_text import clipped, printable

# How the dynamic loader says an extension did not fit (``ulimit -v``): it could not map or allocate
# it. glibc's "cannot allocate memory in static TLS block" is no shortage of memory, so not one.
# CPython's words when a thread's stack cannot be mapped (torch starts its pools under ``ulimit -v``).
NO_THREAD = "can't start new thread"
# torch's words when it cannot map a weights file (safetensors, ``ulimit -v``): the errno's text, ENOMEM.
NO_MAP = re.compile(r"unable to mmap .*Cannot allocate memory \(12\)")
# CPython's words when a C function failed without setting an exception: under ``ulimit -v``, an
# allocation that failed and lost its MemoryError (seen importing transformers' lazy modules).
NO_EXCEPTION_SET = re.compile(r"returned NULL without setting an exception|error return without exception set")
NO_MEMORY = re.compile(r"failed to map segment|cannot allocate memory(?! in static TLS)", re.IGNORECASE)


# A negative number as a flag's value, exponent included (argparse before Python 3.13 reads "-1e-320" as a flag
# and answers "expected one argument"; 3.13 reads any "-" followed by a digit as a number).
NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser, its refusals (a bad type or choice, a missing argument) in the lab's one line,
    ``lab COMMAND: error: ...`` with exit 2, without the usage block (``--help`` prints it); its
    subcommands' parsers are of this class too.

    An ``int`` or ``float`` flag's text is read by :func:`lab.ranges.read_number`: the number typed, or one
    line saying why not, with the flag's range (:func:`lab.commands.common.flag_range` for ``command``); a
    value that is no number keeps argparse's words, its echo cut.
    """

    command: str | None = None  # the subcommand this parser reads (build_parser sets it)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER  # argparse's own attribute, which it reads per argument

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {printable(one_line(message))}\n")

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        if action.type not in (int, float):
            return super()._get_value(action, arg_string)
        # Imported here: importing lab.cli stays light (no lab.commands, lab.models or torch) so the crash
        # handlers it installs wait on nothing (tests/unit/test_cli_startup.py).
        from lab.commands.common import flag_range

        try:
            return read_number(arg_string, integer=action.type is int)
        except NumberTextError as exc:
            flag = max(action.option_strings, key=len, default=action.dest)
            refusal = typed_refusal(flag, arg_string, exc, flag_range(self.command, action.dest))
            raise argparse.ArgumentError(None, refusal) from None
        except ValueError:
            raise argparse.ArgumentError(action, f"invalid {action.type.__name__} value: {clipped(arg_string)}") \
                from None

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        """argparse's, with a flag the command does not have refused by that command's parser (``lab bench-tune:
        error: unrecognized arguments: ...``), not the top-level one."""
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            sub = next((a.choices.get(getattr(namespace, a.dest, None)) for a in self._actions
                        if isinstance(a, argparse._SubParsersAction)), None)
            (sub or self).error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="lab",
        description="See inside LLM inference: entropy, attention sinks, speculative decoding, and the study.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from lab.kinds import command_modules  # the kinds' declarations name each subcommand's module, in --help order

    for name in command_modules():
        importlib.import_module(name).register(sub)
    for command, command_parser in sub.choices.items():
        command_parser.command = command
    return parser


def flag_names(parser: argparse.ArgumentParser, command: str) -> dict[str, str]:
    """``{dest: "--flag"}`` for the options of one subcommand (``max_new_tokens`` -> ``--max-new-tokens``)."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: max(a.option_strings, key=len) for a in sub.choices[command]._actions
            if a.option_strings and a.dest not in ("help", "worker")}


def as_typed(message: str, flags: dict[str, str]) -> str:
    """Name arguments in an error as the user typed them: ``max_new_tokens=0`` -> ``--max-new-tokens=0``.

    The library's ``ValueError`` messages name Python parameters (``name=value``); at the
    CLI boundary every parameter that is also one of the command's flags is rewritten to
    the flag. Names already written as flags, and parameters that are no flag, are kept.
    """
    if not flags:
        return message
    pattern = re.compile(r"(?<![\w-])(" + "|".join(sorted(map(re.escape, flags), key=len, reverse=True)) + r")=")
    return pattern.sub(lambda m: flags[m.group(1)] + "=", message)


def check_utf8(args: argparse.Namespace, flags: dict[str, str]) -> None:
    """Refuse an argument that is not valid UTF-8 (Python keeps its bytes as lone surrogates, which no
    tokenizer or file name takes).

    Raises:
        ValueError: naming the flag (or the positional argument) and showing the text with the bad bytes escaped.
    """
    for dest, value in vars(args).items():
        for text in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(text, str) and any("\udc80" <= ch <= "\udcff" for ch in text):
                shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                raise ValueError(f"{flags.get(dest, dest)}: {shown} is not valid UTF-8")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is so that the cleanup of an interrupt runs (a report's
    staging directory removed, a study's finished prompts kept) instead of dying mid-write."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated(signum)


def one_line(text: str) -> str:
    """A multi-line message on one line: its non-blank lines, stripped, joined with `` / ``."""
    return " / ".join(line.strip() for line in text.splitlines() if line.strip())


def write_traceback(command: str, exc: BaseException) -> Path | None:
    """Write ``exc``'s full traceback to a new file; returns its path, or None when no folder takes it.

    The file is ``<log dir>/<timestamp>-<command>-<pid>.txt`` (:func:`lab.user_dirs.log_dir`,
    ``$LAB_LOG_DIR`` or ``~/.cache/lab/logs``), else the same name under ``<tempdir>/lab-logs``.
    """
    import tempfile
    import time

    from lab.user_dirs import log_dir

    text = (f"lab {command} (pid {os.getpid()}, {time.strftime('%Y-%m-%d %H:%M:%S %z')})\n"
            f"argv: {sys.argv!r}\n\n" + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{command}-{os.getpid()}.txt"
    for folder in (log_dir(), Path(tempfile.gettempdir()) / "lab-logs"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / name
            path.write_text(text, encoding="utf-8")
            return path
        except OSError:
            continue
    return None


def main(argv: list[str] | None = None, *, restore_signals: bool = True) -> int:
    """Run one ``lab`` command and return its exit code; how a run ends is the module docstring's.

    SIGTERM raises :class:`Terminated` from the first line on, so that it, Ctrl-C and a failed
    import end the same way whether they come while the parser is built, while torch loads or
    while the command runs. On return the previous SIGINT and SIGTERM handlers are restored
    (``restore_signals``, for callers in a process that goes on), or both stay ignored: the
    console script (:func:`entry`) exits with the code, and a signal between the line and the
    exit must not change it.
    """
    if threading.current_thread() is not threading.main_thread():  # signals can only be set there
        return _main(argv)
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    hooks = sys.unraisablehook, threading.excepthook
    signal.signal(signal.SIGTERM, _raise_terminated)
    sys.unraisablehook, threading.excepthook = _signal_again(hooks[0]), _quiet_memory_error(hooks[1])
    try:
        try:
            return _main(argv)
        except KeyboardInterrupt as exc:  # a second signal before _main's handler held them
            return _stopped("", exc)
    finally:
        sys.unraisablehook, threading.excepthook = hooks
        if not restore_signals:
            _hold_signals()
        else:
            for signum, handler in previous.items():
                if handler is not None:  # None: a handler not set from Python, which cannot be put back
                    signal.signal(signum, handler)


def _signal_again(previous: Any) -> Any:
    """A ``sys.unraisablehook`` that does not let a signal be swallowed: a ``KeyboardInterrupt`` (Ctrl-C,
    or :class:`Terminated`) raised inside a ``__del__`` or a callback Python cannot raise from (which it
    would print as "Exception ignored in ..." and go on) is raised again at the run's next call, so it
    ends the run where the run is; any other exception goes to ``previous``.

    The raise is a one-shot profile function: it fires at the first call made outside this hook
    (``signal.raise_signal`` would run the handler inside the hook, where its exception would be
    ignored once more). Raised in another finalizer, it comes back here and is set again.
    """
    import _thread

    def hook(unraisable: Any) -> None:
        exc = unraisable.exc_value
        if not isinstance(exc, KeyboardInterrupt):
            previous(unraisable)
            return
        if threading.current_thread() is not threading.main_thread():  # the main thread's handler raises it
            _thread.interrupt_main(signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)
            return
        prior = sys.getprofile()

        def raise_again(frame: Any, event: str, arg: Any) -> None:
            if frame.f_code is hook.__code__:  # still in this hook: its own calls and its return
                return
            sys.setprofile(prior)
            raise type(exc)(*exc.args)

        sys.setprofile(raise_again)
    return hook


def _quiet_memory_error(previous: Any) -> Any:
    """A ``threading.excepthook`` that keeps a helper thread's out-of-memory error (Rich's live
    display under ``ulimit -v``) out of the terminal: the run's own one line says memory ran out; the
    traceback goes to the debug log (``-v``). Any other exception goes to ``previous``."""
    def hook(args: Any) -> None:
        if out_of_memory(args.exc_value):
            logging.getLogger("lab").debug("a thread ran out of memory", exc_info=args.exc_value)
        else:
            previous(args)
    return hook


def entry() -> int:
    """The ``lab`` console script: :func:`main` with the signals held until the process exits."""
    try:
        return main(restore_signals=False)
    except KeyboardInterrupt as exc:  # a signal after main's handlers, before it held them: the same one line
        return _stopped("", exc)


def _main(argv: list[str] | None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    command, flags = "", {}
    try:  # everything slow or fallible is in here: the parser's imports, torch's, transformers'
        parser = build_parser()
        args = parser.parse_args(argv)
        command, flags = args.command, flag_names(parser, args.command)
        from lab.render.console import setup_logging
        from lab.commands.common import check_bounds

        setup_logging(args.verbose)
        check_utf8(args, flags)
        check_bounds(args)
        if getattr(args, "out", None) is not None:
            from lab.reports import check_reports_root

            check_reports_root(args.out)
        return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated); a command may say what it kept
        return _stopped(command, exc)
    except Exception as exc:
        return _failed(command, flags, exc)


def _hold_signals() -> None:
    """Ignore SIGINT and SIGTERM until :func:`main` returns: the run's outcome is decided, and a
    later signal must neither cut its one line short nor add a traceback to it."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _stopped(command: str, exc: KeyboardInterrupt) -> int:
    """Say that ``command`` (``""`` before it is known) was interrupted (130) or terminated (143),
    and what it kept."""
    _hold_signals()
    kept = next((a for a in exc.args if isinstance(a, str)), "")
    what = "terminated" if isinstance(exc, Terminated) else "interrupted"
    print(f"lab {command}".rstrip() + f": {what}; no report was written" + (f"; {printable(kept)}" if kept else ""),
          file=sys.stderr)
    return 128 + signal.SIGTERM if isinstance(exc, Terminated) else 130


def _failed(command: str, flags: dict[str, str], exc: Exception) -> int:
    """Say in one line why ``command`` (``""`` before it is known) failed; returns 2 for bad input, else 1."""
    _hold_signals()
    who = f"lab {command}".rstrip()
    logging.getLogger("lab").debug("failed", exc_info=exc)
    if isinstance(exc, (ValueError, FileExistsError)) or _raised(exc, "lab.models.loading", "ModelUnavailableError"):
        print(f"{who}: error: {printable(as_typed(str(exc), flags))}", file=sys.stderr)
        return 2
    if _raised(exc, "lab.reports", "ReportWriteError") or _raised(exc, "lab.bench.peer.llamacpp", "PeerRunError"):
        print(f"{who}: error: {printable(str(exc))}", file=sys.stderr)  # after the work started: not bad input
        return 1
    if out_of_memory(exc):  # a model, a tensor or a library that does not fit: say so, and what to try
        what = one_line(str(exc)) or "no detail given"
        print(f"{who}: error: out of memory ({printable(what)}); {memory_text()}; try a smaller --model, "
              "--dtype bfloat16, shorter prompts or fewer tokens, or free memory (or raise `ulimit -v`)",
              file=sys.stderr)
        return 1
    path = write_traceback(command or "lab", exc)  # not foreseen: one line, the traceback in a file
    where = f"full traceback in {path}" if path is not None else "no traceback file could be written; run with -v"
    print(f"{who}: error: {type(exc).__name__}: {printable(one_line(str(exc))) or '(no message)'} "
          f"(an error the lab did not foresee; {where})", file=sys.stderr)
    return 1


def _raised(exc: BaseException, module: str, name: str) -> bool:
    """Whether ``exc`` is a ``module.name`` without importing ``module``: a class whose module was
    never imported was never raised (and ``lab.models.loading`` imports torch, which may be what failed)."""
    cls = getattr(sys.modules.get(module), name, None)
    return isinstance(cls, type) and isinstance(exc, cls)


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says memory ran out: a ``MemoryError``, an ``OSError`` with errno ENOMEM, or an
    ``ImportError``/``OSError`` in which the dynamic loader could not map or allocate an extension
    (``libtorch_cpu.so: failed to map segment from shared object`` under ``ulimit -v``), or a
    thread whose stack could not be mapped (:data:`NO_THREAD`), or, under an address-space limit
    (``ulimit -v``), a ``SystemError`` for a C call that failed without setting an exception
    (:data:`NO_EXCEPTION_SET`)."""
    if isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM):
        return True
    if isinstance(exc, RuntimeError) and (str(exc).startswith(NO_THREAD) or NO_MAP.search(str(exc))):
        return True
    if isinstance(exc, SystemError) and NO_EXCEPTION_SET.search(str(exc)) and address_space_limit() is not None:
        return True  # an allocation that failed inside CPython or an extension and lost its MemoryError
    return isinstance(exc, (ImportError, OSError)) and NO_MEMORY.search(str(exc)) is not None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(entry())
