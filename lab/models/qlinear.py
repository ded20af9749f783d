"""Linear layers whose weights stay quantized: torch's CPU weight-only kernels.

Three stand-ins for ``torch.nn.Linear`` (same ``in_features`` / ``out_features``, input
``(..., K)``, output ``(..., N)`` in the input's dtype, bias kept in float32):

* :class:`Int4Linear`: group-wise 4-bit weights, groups of 32 along K, through
  ``aten._weight_int4pack_mm_for_cpu`` (the "tinygemm" layout: ``w = (q - 8) * s + z`` per
  group, ``s`` and ``z`` stored as ``(K / 32, N, 2)``). Built from a GGUF ``Q4_K`` / ``Q4_1``
  tensor's own codes (:mod:`lab.models.gguf_blocks`), so the codes are the file's; only ``s``
  and ``z`` are rounded to bfloat16.
* :class:`Int8Linear`: per-output-channel symmetric int8 (``w = s[n] * q``, ``q`` in
  -127..127) through ``aten._weight_int8pack_mm``, quantized from a float weight.
* :class:`CastLinear`: a dense weight held in bfloat16 (or any dtype), input cast to it.

A layer's ``dense_rows`` (None: never; :func:`set_dense_rows`) sends a pass of at least that
many rows through a dense bfloat16 GEMM on the layer's own dequantized weight instead of the
weight-only kernel: the int4 kernel's cost grows with the rows about linearly (it unpacks the
weight for every row block), so a prompt pass or a pass over many teacher-forced positions is
faster as a dense matmul on CPUs with bfloat16 GEMMs, at 2 bytes a weight of memory, built when
:func:`set_dense_rows` sets it. The dense weight is the kernel's weight rounded to bfloat16.

The kernels' fast paths take bfloat16 activations (their float32 paths are reference
loops, several times slower than a dense float32 matmul), so each layer casts its input to
bfloat16 and its output back: the rounding of activations to bfloat16 is part of what a
quantized run measures against the float32 reference. CPU only: the ``_for_cpu`` kernel
has no other backend here; :func:`check_cpu` says so.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from lab.ranges import DENSE_ROWS

GROUP = 32  # Q4_K and Q4_1 groups; the int4 kernel's qGroupSize
INNER_K_TILES = 2  # the CPU packer's tile argument (K must then be a multiple of 32)
INT4_MID = 8  # tinygemm's zero point: codes 0..15 are read as (q - 8)
ACT_DTYPE = torch.bfloat16  # the dtype the kernels' fast paths take


def check_cpu(device: torch.device | str) -> None:
    """Raise ``ValueError`` unless ``device`` is the CPU (the quantized kernels' only backend)."""
    if torch.device(device).type != "cpu":
        raise ValueError(f"quantized weights run on the CPU only (torch's _for_cpu kernels); got device={device}")


_UNPACK: dict[tuple[int, int], torch.Tensor] = {}  # (N, K) -> where each packed nibble's code sits


def _nibbles(packed: torch.Tensor) -> torch.Tensor:
    """``uint8 (N, K / 2)`` -> ``uint8 (N * K)``: each byte's low nibble, then its high one."""
    return torch.stack([packed & 0x0F, packed >> 4], dim=-1).reshape(-1)


def unpack_int4(packed: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """The codes ``uint8 (N, K)`` in 0..15 that torch's CPU int4 pack turned into ``packed``.

    The pack's layout follows the CPU's vector width and is not documented, so it is measured
    here rather than assumed: the pack is a permutation of nibbles, so packing the flat index
    of every code one hex digit at a time tells where each code lands (once per shape).

    Raises:
        ValueError: ``packed`` is not the ``uint8 (N, K / 2)`` of an ``(N, K)`` weight.
    """
    if packed.dtype != torch.uint8 or tuple(packed.shape) != (n, k // 2):
        raise ValueError(f"packed must be uint8 ({n}, {k // 2}); got {packed.dtype} {tuple(packed.shape)}")
    where = _UNPACK.get((n, k))
    if where is None:
        index = torch.arange(n * k, dtype=torch.int64).reshape(n, k)
        where = torch.zeros(n * k, dtype=torch.int64)
        for digit in range(max(1, math.ceil(math.log(n * k, 16)))):
            plane = ((index >> (4 * digit)) & 0x0F).to(torch.int32)
            where |= _nibbles(torch.ops.aten._convert_weight_to_int4pack_for_cpu(plane, INNER_K_TILES)).long() \
                << (4 * digit)
        _UNPACK[(n, k)] = where = where.to(torch.int32)
    codes = torch.empty(n * k, dtype=torch.uint8)
    codes[where.long()] = _nibbles(packed)
    return codes.reshape(n, k)


def set_dense_rows(model: nn.Module, rows: int | None) -> int:
    """Set every quantized layer's ``dense_rows`` (None: always the weight-only kernel, dense copies freed).

    The dense copies are built here, not on a layer's first many-row pass, so their memory (2 bytes a
    weight) is paid at load and the unpacking tables (:func:`unpack_int4`) are dropped once they are made.

    Returns:
        How many layers were set.

    Raises:
        ValueError: ``rows`` below 1.
    """
    if rows is not None and rows < DENSE_ROWS.lo:
        raise ValueError(f"dense_rows={rows} must be >= {DENSE_ROWS.lo} (or None)")
    layers = [m for m in model.modules() if isinstance(m, _Quantized)]
    for m in layers:
        m.dense_rows = rows
        m.dense = None if rows is None else m.dense if m.dense is not None else m.dequantized().to(ACT_DTYPE)
    _UNPACK.clear()
    return len(layers)


def _flat(x: torch.Tensor, k: int) -> torch.Tensor:
    if x.shape[-1] != k:
        raise ValueError(f"input has {x.shape[-1]} features, the layer takes {k}")
    return x.reshape(-1, k).to(ACT_DTYPE)


class _Quantized(nn.Module):
    """What the quantized layers share: the forward, the kernel or (for ``dense_rows`` rows or more) a dense
    bfloat16 copy of :meth:`dequantized` (:func:`set_dense_rows` builds it; a layer given ``dense_rows``
    directly builds it on its first such pass)."""

    in_features: int
    out_features: int
    bias: torch.Tensor | None
    dense_rows: int | None = None
    dense: torch.Tensor | None = None

    def kernel(self, flat: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def dequantized(self) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = _flat(x, self.in_features)
        if self.dense_rows is not None and flat.shape[0] >= self.dense_rows:
            if self.dense is None:
                self.dense = self.dequantized().to(ACT_DTYPE)
            y = torch.nn.functional.linear(flat, self.dense)
        else:
            y = self.kernel(flat)
        y = y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias.to(x.dtype)


class Int4Linear(_Quantized):
    """``y = x W^T + b`` with ``W`` as 4-bit codes in groups of 32 (tinygemm layout).

    Buffers: ``packed`` ``uint8 (N, K / 2)`` (torch's CPU int4 pack), ``scale_zeros``
    ``bfloat16 (K / 32, N, 2)``, ``bias`` ``float32 (N,)`` or None.
    """

    def __init__(self, packed: torch.Tensor, scale_zeros: torch.Tensor, bias: torch.Tensor | None,
                 in_features: int, out_features: int):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("packed", packed)
        self.register_buffer("scale_zeros", scale_zeros)
        self.register_buffer("bias", bias)

    @classmethod
    def from_codes(cls, codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor,
                   bias: torch.Tensor | None = None) -> "Int4Linear":
        """From ``w = scale * codes + offset`` per group of 32 (:func:`lab.models.gguf_blocks.decode`).

        Args:
            codes: ``uint8`` or integer ``(N, K)`` in 0..15.
            scale, offset: ``float32 (N, K / 32)``.
            bias: ``(N,)`` or None.

        Raises:
            ValueError: shapes disagree, K is not a multiple of 32, or a code is outside 0..15.
        """
        n, k = codes.shape
        if k % GROUP:  # also the packer's need: K a multiple of 16 * INNER_K_TILES
            raise ValueError(f"K={k} is not a multiple of the group size {GROUP}")
        if scale.shape != (n, k // GROUP) or offset.shape != scale.shape:
            raise ValueError(f"scale and offset must be ({n}, {k // GROUP}); got {tuple(scale.shape)}, "
                             f"{tuple(offset.shape)}")
        if int(codes.min()) < 0 or int(codes.max()) > 15:
            raise ValueError("int4 codes must lie in 0..15")
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32).contiguous(), INNER_K_TILES)
        # w = scale * q + offset = (q - 8) * scale + (offset + 8 * scale)
        zeros = offset.float() + INT4_MID * scale.float()
        scale_zeros = torch.stack([scale.float().t(), zeros.t()], dim=-1).to(ACT_DTYPE).contiguous()
        return cls(packed, scale_zeros, None if bias is None else bias.detach().float().clone(), k, n)

    def kernel(self, flat: torch.Tensor) -> torch.Tensor:
        """The weight-only kernel on bfloat16 rows ``(M, K)``: bfloat16 ``(M, N)``."""
        return torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.packed, GROUP, self.scale_zeros)

    def dequantized(self) -> torch.Tensor:
        """``float32 (N, K)``: the weight this layer multiplies by, ``(q - 8) s + z`` with ``s``, ``z`` as
        stored (bfloat16), from the unpacked codes (:func:`unpack_int4`)."""
        codes = unpack_int4(self.packed, self.out_features, self.in_features).float()  # (N, K)
        scale, zeros = (self.scale_zeros[..., i].float().t().repeat_interleave(GROUP, dim=1) for i in (0, 1))
        return (codes - INT4_MID) * scale + zeros

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int4 groups of {GROUP}"


class Int8Linear(_Quantized):
    """``y = x W^T + b`` with ``W = scales[n] * q[n, k]``, ``q`` int8 in -127..127.

    Buffers: ``weight_int8`` ``int8 (N, K)``, ``scales`` ``bfloat16 (N,)``, ``bias``.
    """

    def __init__(self, weight_int8: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = weight_int8.shape
        self.register_buffer("weight_int8", weight_int8)
        self.register_buffer("scales", scales)
        self.register_buffer("bias", bias)

    @classmethod
    def from_weight(cls, weight: torch.Tensor, bias: torch.Tensor | None = None) -> "Int8Linear":
        """Per-output-channel symmetric quantization of a float ``(N, K)`` weight (absmax / 127).

        Raises:
            ValueError: ``weight`` is not 2-D or holds a non-finite value.
        """
        if weight.ndim != 2:
            raise ValueError(f"weight must be (N, K); got shape {tuple(weight.shape)}")
        w = weight.detach().float()
        if not torch.isfinite(w).all():
            raise ValueError("weight holds a non-finite value")
        scales = (w.abs().amax(dim=1) / 127).clamp_min(torch.finfo(torch.float32).tiny)
        q = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)
        return cls(q.contiguous(), scales.to(ACT_DTYPE), None if bias is None else bias.detach().float().clone())

    def kernel(self, flat: torch.Tensor) -> torch.Tensor:
        """The weight-only kernel on bfloat16 rows ``(M, K)``: bfloat16 ``(M, N)``."""
        return torch.ops.aten._weight_int8pack_mm(flat, self.weight_int8, self.scales)

    def dequantized(self) -> torch.Tensor:
        """``float32 (N, K)``."""
        return self.weight_int8.float() * self.scales.float()[:, None]

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per channel"


class CastLinear(nn.Module):
    """``y = x W^T + b`` with ``W`` held in ``dtype`` (default bfloat16) and the input cast to it."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, dtype: torch.dtype = ACT_DTYPE):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.register_buffer("weight", weight.detach().to(dtype).contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.linear(x.to(self.weight.dtype), self.weight).to(x.dtype)
        return y if self.bias is None else y + self.bias.to(x.dtype)

    def dequantized(self) -> torch.Tensor:
        return self.weight.float()

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, {self.weight.dtype}"
