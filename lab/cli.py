"""The ``lab`` command: a thin layer mapping flags to each part's config.

Subcommands live in :mod:`lab.commands`, one module each with
``register(subparsers)``; each sets ``func`` to a callable taking the parsed
namespace and returning an exit code. Building the parser imports every command module, so
their top-level imports and ``register`` stay light (no torch, no transformers: ``lab --help``
answers at once); what a command needs to run is imported inside its ``run``.

How a run ends, always in one line on stderr and never with a half-written report (reports
are staged and renamed into place, :func:`lab.reports.report_dir`):

- bad input (``ValueError``, an unavailable model, a name taken): exit 2;
- a report that could not be written, a failed peer binary, memory exhausted: exit 1, the
  cause named (for memory: what was loading, what the machine has, what to try);
- Ctrl-C: 130, SIGTERM: 143, with what the command kept;
- any other exception (a fault the lab did not foresee): exit 1, the line gives its type and
  message and names a file holding the full traceback (:func:`write_traceback`, under
  :func:`lab.user_dirs.log_dir`); ``-v`` also prints the traceback on stderr.
"""

from __future__ import annotations

import argparse
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

# Subcommand modules, in the order `lab --help` lists them.
COMMANDS = (
    "lab.commands.entropy",
    "lab.commands.bench_tracker",
    "lab.commands.sinks",
    "lab.commands.calibrate_sinks",
    "lab.commands.calibrate_health",
    "lab.commands.bench_sinks",
    "lab.commands.bench_weights",
    "lab.commands.speculate",
    "lab.commands.bench",
    "lab.commands.study",
    "lab.commands.stream",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lab",
        description="See inside LLM inference: entropy, attention sinks, speculative decoding, and the study.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
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


def main(argv: list[str] | None = None) -> int:
    """Run one ``lab`` command; SIGTERM is handled as an interrupt while it runs (then restored)."""
    if threading.current_thread() is not threading.main_thread():  # signals can only be set there
        return _main(argv)
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:  # Ctrl-C while the parser is built is an interrupt too
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt as exc:
        print("lab: interrupted", file=sys.stderr)
        return 128 + signal.SIGTERM if isinstance(exc, Terminated) else 130
    from lab.render.console import setup_logging
    from lab.safe_text import printable
    from lab.models.loading import ModelUnavailableError
    from lab.reports import ReportWriteError
    from lab.bench.peer.llamacpp import PeerRunError

    setup_logging(args.verbose)
    try:
        from lab.commands.common import check_bounds

        check_bounds(args)
        if getattr(args, "out", None) is not None:
            from lab.reports import check_reports_root

            check_reports_root(args.out)
        return int(args.func(args) or 0)
    except (ValueError, ModelUnavailableError, FileExistsError) as exc:
        logging.getLogger("lab").debug("failed", exc_info=True)
        message = printable(as_typed(str(exc), flag_names(parser, args.command)))
        print(f"lab {args.command}: error: {message}", file=sys.stderr)
        return 2
    except (ReportWriteError, PeerRunError) as exc:  # after the work started: not bad input (2), a failure (1)
        logging.getLogger("lab").debug("failed", exc_info=True)
        print(f"lab {args.command}: error: {printable(str(exc))}", file=sys.stderr)
        return 1
    except MemoryError as exc:  # a model or a tensor that does not fit: say so, and what to try
        from lab.machine import memory_text

        logging.getLogger("lab").debug("failed", exc_info=True)
        what = one_line(str(exc)) or "no detail given"
        print(f"lab {args.command}: error: out of memory ({printable(what)}); {memory_text()}; try a smaller "
              "--model, --dtype bfloat16, shorter prompts or fewer tokens, or free memory (or raise `ulimit -v`)",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated); a command may say what it kept
        kept = next((a for a in exc.args if isinstance(a, str)), "")
        what = "terminated" if isinstance(exc, Terminated) else "interrupted"
        print(f"lab {args.command}: {what}; no report was written" + (f"; {printable(kept)}" if kept else ""),
              file=sys.stderr)
        return 128 + signal.SIGTERM if isinstance(exc, Terminated) else 130
    except Exception as exc:  # not foreseen: one line, the traceback kept in a file (no blanket silence)
        logging.getLogger("lab").debug("failed", exc_info=True)
        path = write_traceback(args.command, exc)
        where = f"full traceback in {path}" if path is not None else "no traceback file could be written; run with -v"
        print(f"lab {args.command}: error: {type(exc).__name__}: {printable(one_line(str(exc))) or '(no message)'} "
              f"(an error the lab did not foresee; {where})", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
