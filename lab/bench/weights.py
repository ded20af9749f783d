"""What each weight representation costs and changes: kernel times and next-token numerics.

Two measurements behind the choice of :data:`lab.models.weights.Q4_FALLBACK` and of ``--weights``:

* **Kernels** (:func:`kernel_times`): per GGUF tensor type of a model's linear layers, the time of
  one layer of each shape in each representation (float32 and bfloat16 dense, int8 per channel,
  int4 from the file's codes where the type has them) at ``M = 1`` rows (a decode step) and
  ``M = gamma + 1`` (a verify pass), summed over the layers of that shape. The ratio
  ``t(M = gamma + 1) / t(M = 1)`` is what speculation pays for a verify in target steps: a
  kernel whose verify costs several of its steps leaves little for a draft to win (llama.cpp
  measured the same with K-quant targets).
* **Numerics** (:func:`numerics`): the model in each representation against its float32
  dequantization on held-out text: top-1 agreement of next-token distributions, mean and max
  KL(p_float32 || p_rep) in nats, and the shift of the entropy the tracker reports, in bits.

Times are medians over ``repeats`` after one warm-up call, on ``torch.get_num_threads()``
threads; the caller records the load average (:mod:`lab.machine`).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

LOG2 = float(np.log(2.0))


@dataclass(frozen=True)
class KernelRow:
    """One GGUF type in one representation: times summed over the model's layers of that type."""

    gguf_type: str
    representation: str
    layers: int
    params: int
    step_ms: float  # M = 1
    verify_ms: float  # M = gamma + 1

    @property
    def verify_in_steps(self) -> float:
        return self.verify_ms / self.step_ms


def _median_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm-up: first-call allocations and packing
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def kernel_times(model: nn.Module, gguf_file: Any, *, gamma: int, repeats: int = 5,
                 seed: int = 0) -> list[KernelRow]:
    """Kernel time per GGUF type and representation for ``model``'s linear layers.

    Args:
        model: the float32 model loaded from ``gguf_file`` (not quantized).
        gguf_file: its GGUF file.
        gamma: draft tokens per round; the verify pass has ``gamma + 1`` rows.
        repeats: timed calls per (shape, representation, M).

    Returns:
        One :class:`KernelRow` per (GGUF type, representation), types in file order.

    Raises:
        ValueError: ``gamma`` or ``repeats`` below 1.
    """
    from gguf import GGUFReader

    from lab.models import gguf_blocks
    from lab.models.qlinear import CastLinear, Int8Linear
    from lab.models.quantize import linear_tensors, q4_layer

    if gamma < 1 or repeats < 1:
        raise ValueError(f"gamma={gamma} and repeats={repeats} must be >= 1")
    layers = linear_tensors(model, GGUFReader(str(gguf_file)))
    shapes: dict[tuple[str, int, int], list[str]] = defaultdict(list)  # (type, N, K) -> layer names
    for name, (tensor, _) in layers.items():
        m = model.get_submodule(name)
        shapes[(tensor.tensor_type.name, m.out_features, m.in_features)].append(name)
    gen = torch.Generator().manual_seed(seed)
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0])
    for (type_name, n, k), names in shapes.items():
        module = model.get_submodule(names[0])
        tensor, processor = layers[names[0]]
        built: dict[str, nn.Module] = {"float32": module, "bfloat16": CastLinear(module.weight, module.bias),
                                       "int8": Int8Linear.from_weight(module.weight, module.bias)}
        if type_name in gguf_blocks.DECODABLE:
            built["q4"] = q4_layer(names[0], module, tensor, processor)
        for rep, layer in built.items():
            row = totals[(type_name, rep)]
            row[0] += len(names)
            row[1] += len(names) * n * k
            with torch.no_grad():
                for col, m_rows in ((2, 1), (3, gamma + 1)):
                    x = torch.randn(1, m_rows, k, generator=gen)
                    row[col] += len(names) * _median_ms(lambda: layer(x), repeats)
    return [KernelRow(t, rep, int(v[0]), int(v[1]), v[2], v[3]) for (t, rep), v in totals.items()]


@dataclass(frozen=True)
class NumericsRow:
    """A representation against float32 over every position of the held-out texts."""

    representation: str
    positions: int
    top1_agree: int  # a count: positions whose most likely token equals float32's
    mean_kl_nats: float
    max_kl_nats: float
    mean_abs_entropy_shift_bits: float
    max_abs_entropy_shift_bits: float


def _log_probs(model: nn.Module, batches: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    with torch.no_grad():
        return [torch.log_softmax(model(ids).logits[0].float(), dim=-1) for ids in batches]


def _entropy_bits(log_probs: torch.Tensor) -> torch.Tensor:
    return -(log_probs.exp() * log_probs).sum(-1) / LOG2


def compare(reference: Sequence[torch.Tensor], other: Sequence[torch.Tensor], representation: str) -> NumericsRow:
    """Top-1 agreement, KL(reference || other) and entropy shift over matching ``(S, V)`` log-prob rows.

    Raises:
        ValueError: the two lists differ in length or shapes.
    """
    if len(reference) != len(other) or any(r.shape != o.shape for r, o in zip(reference, other)):
        raise ValueError("reference and compared log-probs must have the same texts and shapes")
    ref, out = torch.cat(list(reference)), torch.cat(list(other))
    kl = (ref.exp() * (ref - out)).sum(-1)
    shift = (_entropy_bits(out) - _entropy_bits(ref)).abs()
    return NumericsRow(representation, ref.shape[0], int((ref.argmax(-1) == out.argmax(-1)).sum()),
                       float(kl.mean()), float(kl.max()), float(shift.mean()), float(shift.max()))


def numerics(load: Callable[[str], nn.Module], batches: Sequence[torch.Tensor],
             representations: Sequence[str]) -> list[NumericsRow]:
    """Each representation against float32 on ``batches`` (token ids ``(1, S)`` each).

    ``load(weights)`` returns the model in that representation; models are loaded one at a time
    and released, so at most two are held (float32's log-probs are kept, not the model).
    """
    reference_model = load("float32")
    reference = _log_probs(reference_model, batches)
    del reference_model
    rows = []
    for rep in representations:
        model = load(rep)
        rows.append(compare(reference, _log_probs(model, batches), rep))
        del model
    return rows


def layer_counts(model: nn.Module) -> dict[str, int]:
    """Linear layers of a loaded model by class name (``Linear``, ``Int4Linear`` ...)."""
    from lab.models.qlinear import CastLinear, Int4Linear, Int8Linear

    kinds = (nn.Linear, Int4Linear, Int8Linear, CastLinear)
    return dict(Counter(type(m).__name__ for m in model.modules() if isinstance(m, kinds)))
