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

The same layout doubles the step on another CPU class (a 2-core Intel Xeon with AVX-512 FP16,
BF16 and VNNI, no AMX: SmolLM2's step 62 ms with it against 31-34 ms without), so it is chosen
by measuring on the machine, never from a table: :func:`few_row_pays` times one pass of a model's
float32 linear layers on one row both ways when the model loads (a few hundred milliseconds, once
per process and layer shapes) and the layout is used only where it is at least
:data:`PAY_MARGIN` faster.

Nothing at import beyond torch; :func:`use_few_row_gemm` switches a loaded model's layers in place.
``LAB_PLAIN_LINEAR=1`` in the environment keeps the plain layer, ``LAB_PLAIN_LINEAR=0`` takes the
few-row one, both without measuring (to compare the two, as the bench does).
"""

from __future__ import annotations

import os
import time

import torch
import torch.nn.functional as F

MAX_ROWS = 4  # above this the two kernels cost about the same here (measured up to 256 rows)
REL_TOL = 1e-5  # float32 summation order: a few ulps of a dot product of ~1,500 terms
PLAIN_ENV = "LAB_PLAIN_LINEAR"
PAY_MARGIN = 1.1  # the few-row pass must be at least 10 % faster than the plain one, measured, to be used
TIMED_PASSES = 3  # of each layout, alternating, after one untimed pass of each; the fastest of each is compared
_CHOSEN: dict[tuple, bool] = {}  # (layer shapes, threads) -> the choice made in this process


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


def layout_choices() -> dict[tuple, bool]:
    """The few-row choices this process made (:func:`few_row_pays`), to hand to another process that must decode
    the same way (:func:`adopt_layout_choices`)."""
    return dict(_CHOSEN)


def adopt_layout_choices(choices: dict[tuple, bool]) -> None:
    """Take another process's few-row choices (:func:`layout_choices`) as this process's, so that a model of the
    same layer shapes and thread count loads with the same layout instead of timing it again here."""
    _CHOSEN.update(choices)


def _plain_layers(model: torch.nn.Module) -> list[torch.nn.Linear]:
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear) and type(m) in (torch.nn.Linear, FewRowLinear)
            and m.weight.dtype == torch.float32 and m.weight.device.type == "cpu"]


def few_row_pays(model: torch.nn.Module) -> bool:
    """Whether the few-row layout makes ``model``'s one-row passes faster on this machine, measured.

    One pass through every float32 CPU linear layer of the model (what a one-token step reads, so
    the weights come from memory as in a real step, not from cache) is timed with ``F.linear`` and
    with :func:`few_row_linear`, alternating, :data:`TIMED_PASSES` times each after one untimed pass
    of each; the layout pays when its fastest pass is :data:`PAY_MARGIN` times faster than the plain
    one's. The answer is kept for the process per layer shapes and torch thread count, so every
    model of a run decodes the same way. ``LAB_PLAIN_LINEAR=1`` answers False and ``=0`` True
    without timing.

    Returns:
        True to switch the model's layers (:func:`use_few_row_gemm`).
    """
    forced = os.environ.get(PLAIN_ENV, "")
    if forced in ("0", "1"):
        return forced == "0"
    layers = _plain_layers(model)
    if not layers:
        return False
    key = (tuple(sorted({tuple(m.weight.shape) for m in layers})), torch.get_num_threads())
    if key not in _CHOSEN:
        xs = {k: torch.randn(1, k) for k in {m.weight.shape[1] for m in layers}}  # one row per input width

        def one_pass(fn) -> float:
            t0 = time.perf_counter()
            with torch.inference_mode():
                for m in layers:
                    fn(xs[m.weight.shape[1]], m.weight, None)
            return time.perf_counter() - t0

        plain, few = [], []
        for i in range(TIMED_PASSES + 1):
            p, f = one_pass(F.linear), one_pass(few_row_linear)
            if i:  # the first of each warms the kernels up
                plain.append(p)
                few.append(f)
        _CHOSEN[key] = min(few) * PAY_MARGIN <= min(plain)
    return _CHOSEN[key]


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
