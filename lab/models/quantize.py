"""A loaded GGUF model's linear layers swapped for quantized ones (:mod:`lab.models.qlinear`).

``weights`` names the representation of the linear layers (the attention and MLP
projections and the LM head; embeddings and norms stay as loaded):

* ``float32``: as loaded (transformers' float32 dequantization of the GGUF file);
* ``bfloat16``: every linear weight in bfloat16 (:class:`~lab.models.qlinear.CastLinear`);
* ``int8``: every linear weight requantized per output channel (:class:`~lab.models.qlinear.Int8Linear`);
* ``q4``: every linear weight the file stores as a 4-bit group-of-32 code (``Q4_K``,
  ``Q4_1``) kept as the file's own codes (:class:`~lab.models.qlinear.Int4Linear`); the
  others (``Q6_K``, ``Q8_0``, ``Q5_0`` ...) take the representation :data:`Q4_FALLBACK`
  names for their type.

The GGUF tensor behind each layer is found with transformers' own name map
(``get_gguf_hf_weights_map``), and the codes are checked against the loaded float32
weight before they replace it: their dequantization (rows permuted as transformers permutes
llama's q/k projections) must equal it exactly, or :class:`QuantizeError` names the layer.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from lab.models import gguf_blocks
from lab.models.qlinear import CastLinear, Int4Linear, Int8Linear
from lab.models.weights import Q4_FALLBACK, check_weights

logger = logging.getLogger(__name__)

class QuantizeError(RuntimeError):
    """A layer's GGUF codes do not reproduce its loaded weight, or a layer has no GGUF tensor."""


@dataclass
class QuantizeSummary:
    """What :func:`quantize_model` did: layers per representation and per GGUF type."""

    weights: str
    layers: Counter = field(default_factory=Counter)  # representation -> number of linear layers
    by_type: dict[str, Counter] = field(default_factory=dict)  # GGUF type -> representation -> count

    def as_dict(self) -> dict:
        return {"weights": self.weights, "layers": dict(self.layers),
                "by_gguf_type": {t: dict(c) for t, c in sorted(self.by_type.items())}}


def _linear_tensors(model: nn.Module, reader) -> dict[str, tuple[object, object]]:
    """``{module name: (gguf tensor, processor)}`` for every ``nn.Linear`` of ``model``."""
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor, get_gguf_hf_weights_map

    model_type = model.config.model_type
    arch = {"gemma3_text": "gemma3"}.get(model_type, model_type)
    processor = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config=model.config.to_dict())
    hf_from_gguf = get_gguf_hf_weights_map(model, processor)
    gguf_from_hf = {hf: g for g, hf in hf_from_gguf.items()}
    tensors = {t.name: t for t in reader.tensors}
    tied = getattr(model.config, "tie_word_embeddings", False)
    out = {}
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        gguf_name = gguf_from_hf.get(f"{name}.weight")
        if gguf_name is None or gguf_name not in tensors:
            if tied and module.weight is model.get_input_embeddings().weight and "token_embd.weight" in tensors:
                gguf_name = "token_embd.weight"
            else:
                raise QuantizeError(f"layer {name!r} has no tensor in the GGUF file")
        out[name] = (tensors[gguf_name], processor)
    return out


def _q4_layer(name: str, module: nn.Linear, tensor, processor) -> Int4Linear:
    type_name = tensor.tensor_type.name
    codes, scale, offset = gguf_blocks.decode(type_name, np.asarray(tensor.data))
    # transformers permutes some rows (llama's q/k) after dequantizing: permute codes the same way
    codes, scale, offset = (processor.process(a, tensor.name).weights for a in (codes, scale, offset))
    expected = module.weight.detach().float().numpy()
    if codes.shape != expected.shape or not np.array_equal(gguf_blocks.dequantize(codes, scale, offset), expected):
        raise QuantizeError(f"layer {name!r}: the {type_name} codes of {tensor.name!r} do not reproduce its "
                            "loaded weight")
    return Int4Linear.from_codes(torch.from_numpy(np.ascontiguousarray(codes)), torch.from_numpy(scale),
                                 torch.from_numpy(offset), module.bias)


def _replacement(representation: str, module: nn.Linear) -> nn.Module:
    if representation == "bfloat16":
        return CastLinear(module.weight, module.bias)
    if representation == "int8":
        return Int8Linear.from_weight(module.weight, module.bias)
    return module


def quantize_model(model: nn.Module, gguf_file: str | Path | None, weights: str) -> QuantizeSummary:
    """Replace ``model``'s linear layers in place by the representation ``weights`` names.

    Args:
        model: a float32 CPU model loaded from ``gguf_file`` (transformers' GGUF loader).
        gguf_file: the GGUF file it was loaded from (needed by ``q4`` only; None for other sources).
        weights: one of :data:`lab.models.weights.WEIGHTS`.

    Returns:
        A :class:`QuantizeSummary` (layers per representation and per GGUF type).

    Raises:
        ValueError: ``weights`` is unknown, the model is not on the CPU, or ``q4`` has no GGUF file.
        QuantizeError: a layer has no GGUF tensor, or its codes do not reproduce its weight.
    """
    check_weights(weights)
    summary = QuantizeSummary(weights)
    if weights == "float32":
        return summary
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("quantized weights run on the CPU only (torch's _for_cpu kernels)")
    if weights == "q4":
        if gguf_file is None:
            raise ValueError("weights='q4' keeps a GGUF file's own 4-bit codes, so it needs a GGUF model "
                             "(a profile such as smollm2 or qwen2.5-coder), not a hub id or a directory")
        from gguf import GGUFReader

        layers = _linear_tensors(model, GGUFReader(str(gguf_file)))
    else:
        layers = {name: (None, None) for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    for name, (tensor, processor) in layers.items():
        module = model.get_submodule(name)
        type_name = tensor.tensor_type.name if tensor is not None else "dense"
        if weights == "q4":
            representation = "q4" if type_name in gguf_blocks.DECODABLE else Q4_FALLBACK.get(type_name, "bfloat16")
        else:
            representation = weights
        new = _q4_layer(name, module, tensor, processor) if representation == "q4" else _replacement(representation, module)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, new)
        summary.layers[representation] += 1
        summary.by_type.setdefault(type_name, Counter())[representation] += 1
    logger.info("weights %s: %s", weights, dict(summary.layers))
    return summary
