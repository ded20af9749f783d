"""Flags shared by several subcommands, with the same names and help everywhere.

Every command module imports this one while ``lab --help`` builds the parser, so it stays light:
torch and the model loader are imported inside :func:`check_model_args`, which runs a command.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from lab.models.profiles import DEFAULT_PROFILE, PROFILES
from lab.models.weights import WEIGHTS

if TYPE_CHECKING:
    import torch


# Bounds on values that pass as integers but break, or run for hours, after the model loads.
SEED_MAX = 2**64 - 1  # torch.Generator.manual_seed takes [0, 2**64 - 1]; beyond: "Overflow when unpacking long long"
# Draft tokens per round. With acceptance rate alpha a round yields (1 - alpha**(gamma+1)) / (1 - alpha)
# tokens in expectation (Leviathan et al. 2023, eq. 1): at alpha = 0.9, the best measured here (the Qwen
# pair), gamma = 64 already gives 99.9 % of the gamma -> infinity limit, while every further drafted token
# costs a draft forward, and the per-round table and histogram have gamma + 1 columns.
MAX_GAMMA = 64
# Bootstrap resamples. The Monte Carlo error of a percentile CI endpoint shrinks as 1/sqrt(B): at B = 100,000
# (50x the default 1,999) it is ~0.07 percentage points of coverage; the analysis time grows linearly with B.
MAX_RESAMPLES = 100_000
# Alternatives recorded per decode step: a table for reading, saved per step in report.json
# (1,000 x 64 steps is already 64,000 records); the full distribution is not what it is for.
MAX_TOP_ALTERNATIVES = 1000


# dest -> (flag, low, high, why): checked for every command that has the flag, before it runs.
_BOUNDS = {
    "seed": ("--seed", 0, SEED_MAX, " (2**64 - 1, what torch's generator takes)"),
    "gamma": ("--gamma", 1, MAX_GAMMA, f": beyond {MAX_GAMMA} drafted tokens a round gains nothing measurable"),
    "resamples": ("--resamples", 1, MAX_RESAMPLES, " (50x the default; the CI's Monte Carlo error is negligible there)"),
    "top_alternatives": ("--top-alternatives", 1, MAX_TOP_ALTERNATIVES, " (alternatives shown and saved per step)"),
}


def check_bounds(args: argparse.Namespace) -> None:
    """Check the integer flags whose out-of-range values would otherwise fail only after the model loaded.

    Raises:
        ValueError: ``--seed`` outside [0, 2**64 - 1], ``--gamma`` outside [1, :data:`MAX_GAMMA`],
            ``--resamples`` outside [1, :data:`MAX_RESAMPLES`], ``--top-alternatives`` outside
            [1, :data:`MAX_TOP_ALTERNATIVES`], naming the flag as typed.
    """
    for dest, (flag, lo, hi, why) in _BOUNDS.items():
        value = getattr(args, dest, None)
        if isinstance(value, int) and not lo <= value <= hi:
            raise ValueError(f"{flag}={value} must be in [{lo}, {hi}]{why}")


def parse_adaptive(text: str):
    """``--adaptive entropy:X`` / ``pmin:X`` as a :class:`lab.speculative.AdaptiveDraftLength`.

    Raises:
        ValueError: a bad spec, naming ``--adaptive`` as typed and the threshold as X.
    """
    import re

    from lab.speculative.drafts import AdaptiveDraftLength

    try:
        return AdaptiveDraftLength.parse(text)
    except ValueError as exc:
        message = re.sub(r"^(entropy_threshold|pmin)=", "X=", str(exc))  # the README's name for the threshold
        raise ValueError(f"--adaptive {text!r}: {message}") from None


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_PROFILE,
                   help=f"profile ({', '.join(PROFILES)}), local path or hub id (default: {DEFAULT_PROFILE})")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N or mps (default: mps, then cuda, then cpu)")
    p.add_argument("--dtype", default=None, help="float32, float16 or bfloat16 (default: float32 on CPU, half on GPU)")
    p.add_argument("--weights", default="float32", choices=WEIGHTS,
                   help="the linear layers' weights: float32 (as dequantized), bfloat16, int8 (per channel) or q4 "
                        "(a GGUF profile's own 4-bit codes through torch's CPU int4 kernel); CPU only unless "
                        "float32 (default: float32)")


def add_draft_weights_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--draft-weights", default="float32", choices=WEIGHTS,
                   help="a draft model's linear-layer weights, as --weights (default: float32)")


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
    from lab.models.devices import parse_dtype, resolve_device
    from lab.models.loading import check_model_available, is_gguf_model
    from lab.models.qlinear import check_cpu

    device = resolve_device(args.device)
    parse_dtype(args.dtype, device)
    if getattr(args, "weights", "float32") != "float32":
        check_cpu(device)
        if args.weights == "q4" and not is_gguf_model(args.model):
            raise ValueError(f"--weights q4 keeps a GGUF file's own 4-bit codes; {args.model!r} is not a GGUF profile "
                             "(use bfloat16 or int8 for it)")
    check_model_available(args.model)
    return device
