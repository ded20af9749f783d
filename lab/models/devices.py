"""Devices and dtypes: which device the lab runs on and in which precision.

Device policy (:func:`resolve_device`): MPS, then CUDA, then CPU, unless asked.
Dtype policy (:func:`default_dtype`): float32 on CPU (half-precision matmuls are slow
and inexact there), bfloat16 on CUDA when supported else float16, float16 on MPS
(bfloat16 support on MPS varies by macOS version).
"""

from __future__ import annotations

import torch

from lab.safe_text import clipped


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """Pick the device: MPS, then CUDA, then CPU; or check the one asked for.

    Args:
        device: ``None``/``"auto"`` to choose, or a torch device string (``"cpu"``,
            ``"cuda"``, ``"cuda:1"``, ``"mps"``).

    Returns:
        The :class:`torch.device` to use.

    Raises:
        ValueError: ``device`` is not a device string, or names a device that is not
            available on this machine.
    """
    if device is None or device == "auto":
        if torch.backends.mps.is_available():
            return torch.device("mps")
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device={clipped(device)} is not a valid torch device") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={clipped(device)} requested but CUDA is not available here")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"device={clipped(device)} requested but only {torch.cuda.device_count()} CUDA device(s) exist"
            )
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device={clipped(device)} requested but MPS is not available here")
    elif dev.type != "cpu":
        raise ValueError(f"device={clipped(device)} is not supported; use cpu, cuda or mps")
    return dev


def default_dtype(device: torch.device) -> torch.dtype:
    """The lab's dtype policy: float32 on CPU, bf16 (else fp16) on CUDA, fp16 on MPS."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
           "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def parse_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """Turn a dtype name (or ``None`` for the policy) into a :class:`torch.dtype`.

    Raises:
        ValueError: ``dtype`` is not one of float32/float16/bfloat16.
    """
    if dtype is None or dtype == "auto":
        return default_dtype(device)
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPES.values():
            raise ValueError(f"dtype={dtype!r} is not supported; use float32, float16 or bfloat16")
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {sorted(_DTYPES)}")
    return _DTYPES[dtype]
