"""Flags shared by several subcommands, with the same names and help everywhere."""

from __future__ import annotations

import argparse

from lab.models import DEFAULT_PROFILE, PROFILES


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
