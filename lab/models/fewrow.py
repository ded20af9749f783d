"""A float32 linear layer for passes of a few rows: the one-token step and the short verify pass on a CPU.

Why: on the lab's 2-core AMD EPYC machines (torch 2.13's CPU wheel, MKL), ``F.linear`` with one
to four input rows reads a weight matrix that is not in cache at 9-13 GB/s, while the same
product laid out as ``W @ X^T`` with an even row count (2 or 4) reads it at 32-38 GB/s; both are
float32 BLAS products, only the kernel MKL picks differs (docs/results.md, "Float32 steps
through a few-row product"). A SmolLM2 one-token step with a 250-token KV cache fell from 54 to 32
ms and a three-position verify pass from 95 to 38 ms.

So a pass of 1 to :data:`MAX_ROWS` rows is padded with zero rows to 2 or 4 and multiplied as
``W @ X^T``; every other pass (the prompt's prefill, any other dtype or device) is ``F.linear``
unchanged. Rows are independent in a product, so padding changes no row's value; the result
differs from ``F.linear``'s only by float32 summation order (SmolLM2's logits within 6e-5 of the
plain layer's; relative tolerance :data:`REL_TOL` in the tests).

Nothing at import beyond torch; :func:`use_few_row_gemm` switches a loaded model's layers in place.
``LAB_PLAIN_LINEAR=1`` in the environment keeps the plain layer (to compare the two, as the bench does).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

MAX_ROWS = 4  # above this the two kernels cost about the same here (measured up to 256 rows)
REL_TOL = 1e-5  # float32 summation order: a few ulps of a dot product of ~1,500 terms
PLAIN_ENV = "LAB_PLAIN_LINEAR"


def _padded_rows(rows: int) -> int:
    """The even row count a pass of ``rows`` (1 <= rows <= MAX_ROWS) is padded to: 2 or 4.

    Odd counts (1, 3) were the slow ones for ``W @ X^T`` too (0.27 ms against 0.11 ms for a
    576 x 1536 matrix at 3 rows), so they are rounded up.
    """
    return 2 if rows <= 2 else 4


def few_row_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for a float32 CPU input of 1 to :data:`MAX_ROWS` rows, as ``W @ X^T``.

    Args:
        x: ``(..., in_features)`` float32 on the CPU; the rows are the product of the leading dims.
        weight: ``(out_features, in_features)`` float32.
        bias: ``(out_features,)`` or None.

    Returns:
        ``(..., out_features)`` float32, contiguous: each row's value as ``F.linear`` gives it up to
        float32 summation order.

    Raises:
        ValueError: ``x`` has 0 or more than :data:`MAX_ROWS` rows, or is not float32.
    """
    k = x.shape[-1]
    rows = x.numel() // k if k else 0
    if not 1 <= rows <= MAX_ROWS:
        raise ValueError(f"few_row_linear takes 1 to {MAX_ROWS} rows, got {rows}")
    if x.dtype != torch.float32 or weight.dtype != torch.float32:
        raise ValueError(f"few_row_linear is for float32, got x {x.dtype} and weight {weight.dtype}")
    x2 = x.reshape(rows, k)  # (rows, in)
    pad = _padded_rows(rows)
    if pad > rows:
        x2 = torch.cat([x2, x2.new_zeros(pad - rows, k)])  # (pad, in): zero rows, never read back
    out = torch.mm(weight, x2.T).T[:rows].contiguous()  # (out, pad) -> (rows, out)
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], weight.shape[0])


class FewRowLinear(torch.nn.Linear):
    """``nn.Linear`` whose float32 CPU passes of up to :data:`MAX_ROWS` rows go through :func:`few_row_linear`.

    Same parameters and state dict as ``nn.Linear`` (a model is switched by class, so tied
    weights stay tied); every other pass is ``F.linear``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102 - as nn.Linear
        k = x.shape[-1]
        rows = x.numel() // k if k else 0
        if (1 <= rows <= MAX_ROWS and x.dtype == torch.float32 and self.weight.dtype == torch.float32
                and x.device.type == "cpu" and self.weight.device.type == "cpu"):
            return few_row_linear(x, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)


def use_few_row_gemm(model: torch.nn.Module) -> int:
    """Switch every plain float32 CPU ``nn.Linear`` of ``model`` to :class:`FewRowLinear`, in place.

    Subclasses of ``nn.Linear`` (the quantized layers) and layers in another dtype or on another
    device are left alone. Does nothing when ``LAB_PLAIN_LINEAR=1`` is set.

    Returns:
        How many layers were switched.
    """
    if os.environ.get(PLAIN_ENV, "") == "1":
        return 0
    n = 0
    for module in model.modules():
        if (type(module) is torch.nn.Linear and module.weight.dtype == torch.float32
                and module.weight.device.type == "cpu"):
            module.__class__ = FewRowLinear
            n += 1
    return n
