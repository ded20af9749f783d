"""The ``lab`` command: a thin layer mapping flags to each part's config.

Subcommands live in :mod:`lab.commands`, one module each with
``register(subparsers)``; each sets ``func`` to a callable taking the parsed
namespace and returning an exit code. Bad input (``ValueError``, an unavailable
model) prints one clear line to stderr and exits 2 without writing a report.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

# Subcommand modules, in the order `lab --help` lists them.
COMMANDS = (
    "lab.commands.entropy",
    "lab.commands.bench_tracker",
    "lab.commands.sinks",
    "lab.commands.calibrate_sinks",
    "lab.commands.bench_sinks",
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


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser()
    args = parser.parse_args(argv)
    from lab.render.console import setup_logging
    from lab.models import ModelUnavailableError

    setup_logging(args.verbose)
    try:
        if getattr(args, "out", None) is not None:
            from lab.reports import check_reports_root

            check_reports_root(args.out)
        return int(args.func(args) or 0)
    except (ValueError, ModelUnavailableError, FileExistsError) as exc:
        logging.getLogger("lab").debug("failed", exc_info=True)
        print(f"lab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"lab {args.command}: interrupted; no report was written", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
