"""GGUF 4-bit blocks as integer codes with per-group scales and offsets (pure math, numpy).

A GGUF file stores most of a quantized model's matrices in blocks. Two of its 4-bit block
types are an affine code over groups of 32 consecutive weights along a row (the input
dimension K), which is exactly the layout of torch's group-wise int4 weight-only matmul:

* ``Q4_K`` (llama.cpp ``block_q4_K``, 144 bytes per 256 weights): a super-block with float16
  ``d`` and ``dmin``, eight 6-bit scales ``sc`` and eight 6-bit minimums ``m`` packed into 12
  bytes, and 256 4-bit codes ``q``. Weight ``j`` of group ``g``: ``w = d * sc[g] * q - dmin * m[g]``.
* ``Q4_1`` (``block_q4_1``, 20 bytes per 32 weights): float16 ``d`` and ``m``, 32 codes;
  ``w = d * q + m``.

Both are written here as ``w = scale[g] * q + offset[g]`` with ``q`` in 0..15, float32 ``scale``
and ``offset`` computed as the reference dequantizer computes them (gguf-py's
``gguf.quants``; llama.cpp ``ggml-quants.c``, ``dequantize_row_q4_K`` / ``_q4_1``), so that
``scale * q + offset`` equals gguf's float32 dequantization bit for bit. The 6-bit scale
unpacking is gguf-py's own (``Q4_K.get_scale_min``).

Shapes: a GGUF matrix of ``N`` rows (output features) and ``K`` columns (input features) is
read by gguf's ``GGUFReader`` as ``uint8`` blocks of shape ``(N, K / block_size * type_size)``.
Decoding returns ``codes`` ``uint8 (N, K)``, ``scale`` and ``offset`` ``float32 (N, K / 32)``.
"""

from __future__ import annotations

import numpy as np

GROUP = 32  # weights per scale/offset group in both block types
Q4_K_WEIGHTS, Q4_K_BYTES = 256, 144  # QK_K and sizeof(block_q4_K)
Q4_1_WEIGHTS, Q4_1_BYTES = 32, 20  # QK4_1 and sizeof(block_q4_1)
DECODABLE = ("Q4_K", "Q4_1")


def _blocks(raw: np.ndarray, block_bytes: int) -> tuple[np.ndarray, int]:
    """``raw`` ``uint8 (N, n * block_bytes)`` -> ``(N * n, block_bytes)`` and ``n``."""
    if raw.dtype != np.uint8 or raw.ndim != 2:
        raise ValueError(f"raw blocks must be a 2-D uint8 array, got {raw.dtype} with shape {raw.shape}")
    if raw.shape[1] % block_bytes:
        raise ValueError(f"a row of {raw.shape[1]} bytes is not a whole number of {block_bytes}-byte blocks")
    return raw.reshape(-1, block_bytes), raw.shape[1] // block_bytes


def decode_q4_k(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes, scales and offsets of a ``Q4_K`` matrix.

    Args:
        raw: ``uint8 (N, K / 256 * 144)``, the tensor's data as ``GGUFReader`` gives it.

    Returns:
        ``codes`` ``uint8 (N, K)`` in 0..15; ``scale``, ``offset`` ``float32 (N, K / 32)``, with
        ``w[r, k] = scale[r, k // 32] * codes[r, k] + offset[r, k // 32]``.

    Raises:
        ValueError: ``raw`` is not 2-D ``uint8`` or its rows are not whole blocks.
    """
    from gguf.quants import Q4_K

    blocks, per_row = _blocks(raw, Q4_K_BYTES)
    n_rows = raw.shape[0]
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)  # (B, 1)
    dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    sc, m = Q4_K.get_scale_min(blocks[:, 4:16].copy())  # (B, 8) each, 6-bit
    qs = blocks[:, 16:]  # (B, 128): 4 chunks of 32 bytes, low nibbles then high nibbles
    qs = qs.reshape(-1, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    codes = (qs & np.uint8(0x0F)).reshape(n_rows, per_row * Q4_K_WEIGHTS)  # (N, K)
    scale = (d * sc.astype(np.float32)).reshape(n_rows, -1)  # (N, K / 32)
    offset = -(dmin * m.astype(np.float32)).reshape(n_rows, -1)
    return codes, scale, offset


def decode_q4_1(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes, scales and offsets of a ``Q4_1`` matrix (shapes as :func:`decode_q4_k`).

    Args:
        raw: ``uint8 (N, K / 32 * 20)``.

    Raises:
        ValueError: ``raw`` is not 2-D ``uint8`` or its rows are not whole blocks.
    """
    blocks, per_row = _blocks(raw, Q4_1_BYTES)
    n_rows = raw.shape[0]
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    qs = blocks[:, 4:].reshape(-1, 1, 16) >> np.array([0, 4], dtype=np.uint8).reshape(1, 2, 1)
    codes = (qs & np.uint8(0x0F)).reshape(n_rows, per_row * Q4_1_WEIGHTS)
    return codes, d.reshape(n_rows, per_row), m.reshape(n_rows, per_row)


def decode(type_name: str, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`decode_q4_k` or :func:`decode_q4_1` by GGUF type name.

    Raises:
        ValueError: a type that is not a group-of-32 4-bit affine code (see :data:`DECODABLE`).
    """
    if type_name == "Q4_K":
        return decode_q4_k(raw)
    if type_name == "Q4_1":
        return decode_q4_1(raw)
    raise ValueError(f"GGUF type {type_name!r} is not a 4-bit group-of-32 code; decodable: {', '.join(DECODABLE)}")


def dequantize(codes: np.ndarray, scale: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """``float32 (N, K)``: ``scale * codes + offset`` with each group's values repeated 32 times."""
    n_rows, k = codes.shape
    grouped = codes.reshape(n_rows, k // GROUP, GROUP).astype(np.float32)
    return (scale[..., None] * grouped + offset[..., None]).reshape(n_rows, k)
