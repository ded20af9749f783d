"""Shared Rich consoles: results to stdout, progress and logs to stderr."""

from __future__ import annotations

import logging

from rich.console import Console
from rich.logging import RichHandler


def stdout_console() -> Console:
    """Console for results (the coloured decode, tables, panels)."""
    return Console(highlight=False)


def stderr_console() -> Console:
    """Console for progress bars and logs, so results on stdout stay pipeable."""
    return Console(stderr=True, highlight=False)


def setup_logging(verbose: bool = False) -> None:
    """Route the lab's logging to stderr through Rich; quiet transformers' progress bars."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(console=stderr_console(), show_path=False, markup=False)],
        force=True,
    )
    for noisy in ("transformers", "accelerate", "httpx", "huggingface_hub", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover
        pass
