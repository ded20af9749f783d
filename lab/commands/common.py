"""Flags shared by several subcommands, with the same names and help everywhere."""

from __future__ import annotations

import argparse

import torch

from lab.models import DEFAULT_PROFILE, PROFILES, check_model_available, parse_dtype, resolve_device


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_PROFILE,
                   help=f"profile ({', '.join(PROFILES)}), local path or hub id (default: {DEFAULT_PROFILE})")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N or mps (default: mps, then cuda, then cpu)")
    p.add_argument("--dtype", default=None, help="float32, float16 or bfloat16 (default: float32 on CPU, half on GPU)")


def add_prompt_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("prompt", help="the user message")
    p.add_argument("--system", default=None, help="system prompt (default: the template's own, if any)")


def add_out_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="reports", help="reports root; a new <timestamp>-<kind>-<slug>/ goes inside (default: reports/)")


def add_threads_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads for the whole benchmark (default: torch's choice); the report "
                        "records them with the load average and warns when the machine was busy")


def check_model_args(args: argparse.Namespace) -> torch.device:
    """Validate ``--model``, ``--device`` and ``--dtype`` before any model loads.

    Returns:
        The device to load on.

    Raises:
        ValueError: an unavailable device, an unknown dtype, or a model name that is
            neither a profile, a path nor a hub id.
        ModelUnavailableError: an embedded model's package is missing, or a hub model
            is neither cached nor fetchable (offline mode, hub unreachable).
    """
    device = resolve_device(args.device)
    parse_dtype(args.dtype, device)
    check_model_available(args.model)
    return device
