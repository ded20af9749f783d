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
from lab.models.qlinear import INNER_K_TILES, CastLinear, Int4Linear, Int8Linear
from lab.models.weights import Q4_FALLBACK, check_weights
from lab.schemas import FileSchemaError
from lab.schemas.cache import load_layers

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


def linear_tensors(model: nn.Module, reader) -> dict[str, tuple[object, object]]:
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


def q4_layer(name: str, module: nn.Linear, tensor, processor) -> Int4Linear:
    """The file's codes for one layer, checked against its loaded weight."""
    type_name = tensor.tensor_type.name
    codes, scale, offset = gguf_blocks.decode(type_name, np.asarray(tensor.data))
    # transformers permutes some rows (llama's q/k) after dequantizing: permute codes the same way
    codes, scale, offset = (processor.process(a, tensor.name).weights for a in (codes, scale, offset))
    expected = module.weight.detach().float().numpy()
    if codes.shape != expected.shape or not np.array_equal(gguf_blocks.dequantize(codes, scale, offset), expected):
        raise QuantizeError(f"layer {name!r}: the {type_name} codes of {tensor.name!r} do not reproduce its "
                            "loaded weight")
    layer = Int4Linear.from_codes(torch.from_numpy(np.ascontiguousarray(codes)), torch.from_numpy(scale),
                                  torch.from_numpy(offset), module.bias)
    layer.codes_for_cache = torch.from_numpy(np.ascontiguousarray(codes[:, 0::2] | (codes[:, 1::2] << 4)))
    return layer


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

        layers = linear_tensors(model, GGUFReader(str(gguf_file)))
    else:
        layers = {name: (None, None) for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    for name, (tensor, processor) in layers.items():
        module = model.get_submodule(name)
        type_name = tensor.tensor_type.name if tensor is not None else "dense"
        if weights == "q4":
            representation = "q4" if type_name in gguf_blocks.DECODABLE else Q4_FALLBACK.get(type_name, "bfloat16")
        else:
            representation = weights
        new = q4_layer(name, module, tensor, processor) if representation == "q4" else _replacement(representation, module)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, new)
        summary.layers[representation] += 1
        summary.by_type.setdefault(type_name, Counter())[representation] += 1
    logger.info("weights %s: %s", weights, dict(summary.layers))
    return summary


# --------------------------------------------------------------------------- the converted cache

CACHE_FILE = "weights.safetensors"  # beside lab-cache.json (the manifest of lab.models.cache)
LAYERS_FILE = "layers.json"  # module name -> representation, and the conversion summary
# Bumped whenever conversion changes what it writes for the same GGUF file; a cache written by
# another version is converted again (a cache that records none was written by version 1).
CONVERSION_VERSION = 1


def portable_tensors(model: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The converted layers in a machine-independent form, for the cache.

    ``Int4Linear``: ``<name>.codes`` ``uint8 (N, K / 2)`` (code ``2j`` in the low nibble of byte
    ``j``, ``2j + 1`` in the high one) and ``<name>.scale_zeros``; torch's int4 pack (whose layout
    follows the CPU's vector width) is rebuilt from the codes on load. ``Int8Linear``:
    ``weight_int8``, ``scales``; ``CastLinear``: ``weight``. Biases as ``<name>.bias``.

    Returns:
        ``(tensors, {module name: representation})``.
    """
    tensors: dict[str, torch.Tensor] = {}
    kinds: dict[str, str] = {}
    for name, m in model.named_modules():
        if isinstance(m, Int4Linear):
            if not hasattr(m, "codes_for_cache"):
                raise QuantizeError(f"layer {name!r} no longer holds its portable codes (only a fresh conversion does)")
            tensors[f"{name}.codes"], tensors[f"{name}.scale_zeros"] = m.codes_for_cache, m.scale_zeros
            kinds[name] = "q4"
        elif isinstance(m, Int8Linear):
            tensors[f"{name}.weight_int8"], tensors[f"{name}.scales"] = m.weight_int8, m.scales
            kinds[name] = "int8"
        elif isinstance(m, CastLinear):
            tensors[f"{name}.weight"] = m.weight
            kinds[name] = "bfloat16"
        else:
            continue
        if m.bias is not None:
            tensors[f"{name}.bias"] = m.bias
    return {k: v.contiguous() for k, v in tensors.items()}, kinds


def install_portable(model: nn.Module, tensors: dict[str, torch.Tensor], kinds: dict[str, str]) -> None:
    """Replace ``model``'s linear layers by the cached converted ones (:func:`portable_tensors`).

    Every replacement is built and checked before the first is installed, so a cache that does not
    fit leaves ``model`` as it was.

    Raises:
        QuantizeError: a named module is missing or is not a linear layer, a tensor is missing, or
            the shapes or dtypes disagree.
    """
    replacements = {name: _portable_layer(model, name, kind, tensors) for name, kind in kinds.items()}
    for name, new in replacements.items():
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, new)


_PORTABLE_DTYPES = {"codes": torch.uint8, "weight_int8": torch.int8}  # what portable_tensors writes


def _portable_layer(model: nn.Module, name: str, kind: str, tensors: dict[str, torch.Tensor]) -> nn.Module:
    """The converted layer ``name`` rebuilt from the cached ``tensors``, checked against the model's."""
    try:
        old = model.get_submodule(name)
    except AttributeError:
        raise QuantizeError(f"the cached layer {name!r} is not in the model") from None
    if not isinstance(old, nn.Linear):
        raise QuantizeError(f"the cached layer {name!r} replaces a {type(old).__name__}, not a linear layer")
    parts = {"q4": ("codes", "scale_zeros"), "int8": ("weight_int8", "scales"), "bfloat16": ("weight",)}[kind]
    for part in parts:
        t = tensors.get(f"{name}.{part}")
        if t is None:
            raise QuantizeError(f"the cached layer {name!r} has no tensor {part!r}")
        if part in _PORTABLE_DTYPES and t.dtype != _PORTABLE_DTYPES[part]:
            raise QuantizeError(f"the cached layer {name!r}: {part} is {t.dtype}, not {_PORTABLE_DTYPES[part]}")
    bias = tensors.get(f"{name}.bias")
    try:
        if kind == "q4":
            packed = tensors[f"{name}.codes"]
            codes = torch.stack([packed & 0x0F, packed >> 4], dim=-1).reshape(packed.shape[0], -1)
            new: nn.Module = Int4Linear(
                torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32), INNER_K_TILES),
                tensors[f"{name}.scale_zeros"], bias, codes.shape[1], codes.shape[0])
        elif kind == "int8":
            new = Int8Linear(tensors[f"{name}.weight_int8"], tensors[f"{name}.scales"], bias)
        else:
            new = CastLinear(tensors[f"{name}.weight"], bias, dtype=tensors[f"{name}.weight"].dtype)
    except (RuntimeError, ValueError, IndexError) as exc:  # torch's shape and dtype checks
        raise QuantizeError(f"the cached layer {name!r} cannot be rebuilt ({type(exc).__name__})") from None
    if (new.out_features, new.in_features) != (old.out_features, old.in_features):
        raise QuantizeError(f"the cached layer {name!r} is {new.out_features}x{new.in_features}, the model's "
                            f"{old.out_features}x{old.in_features}")
    return new


def _drop_cache_codes(model: nn.Module) -> None:
    """Free the portable copy of the codes that conversion keeps for the cache."""
    for m in model.modules():
        if isinstance(m, Int4Linear) and hasattr(m, "codes_for_cache"):
            del m.codes_for_cache


def load_or_convert(model: nn.Module, gguf_file: str | Path | None, weights: str, cache: Path | None,
                    source: Path | dict | None = None) -> dict:
    """Quantize ``model`` from the converted cache at ``cache`` if it is sound, else convert and write it.

    The cache is a folder beside the float32 one (``<profile>.weights-<weights>``) holding
    :data:`CACHE_FILE`, :data:`LAYERS_FILE` and the manifest of :mod:`lab.models.cache`
    (sizes, sha256), staged and renamed into place (:func:`lab.models.cache.staged_cache`). A
    damaged one (a file changed or missing, a manifest or layers file outside its schema,
    :mod:`lab.schemas.cache`; layers that do not fit the model, or a layer of the model it lacks,
    :func:`unlisted_layers`) is discarded and rebuilt, with a warning naming the cache and why,
    and so is one made from another GGUF file than ``source``
    (:func:`lab.models.cache.source_problem`) or by another version of this conversion
    (:data:`CONVERSION_VERSION`). A cache that cannot be moved aside or written (a read-only
    cache folder, a full disk) is not used: the model is converted for this run only, with a
    warning. ``cache=None`` converts without caching.

    Args:
        model: The float32 model to quantize in place.
        gguf_file: The GGUF file it was loaded from (``q4`` reads its codes); None for other sources.
        weights: The representation (:func:`lab.models.weights.check_weights`).
        cache: The converted cache's folder, or None.
        source: What the cache is made from (:func:`lab.models.loading.gguf_source`); default the
            ``gguf_file`` itself when there is one.

    Returns:
        The conversion summary (:meth:`QuantizeSummary.as_dict`).
    """
    import json

    from safetensors import SafetensorError
    from safetensors.torch import save_file

    from lab.models import cache as model_cache

    if source is None and gguf_file is not None:
        source = Path(gguf_file)
    if cache is not None and cache.exists():
        summary = _from_cache(model, weights, cache, source, gguf_file)
        if summary is not None:
            return summary
        try:
            model_cache.discard(cache)
        except OSError as exc:
            logger.warning("the converted-weights cache %s cannot be moved aside (%s); converting for this run "
                           "only", cache, exc.strerror or exc)
            cache = None
    summary = quantize_model(model, gguf_file, weights).as_dict()
    if cache is None or weights == "float32":
        _drop_cache_codes(model)
        return summary
    tensors, kinds = portable_tensors(model)
    _drop_cache_codes(model)
    try:
        with model_cache.staged_cache(cache, source if source is not None else weights) as staging:
            save_file(tensors, str(staging / CACHE_FILE))
            (staging / LAYERS_FILE).write_text(json.dumps(
                {"layers": kinds, "summary": summary, "conversion": CONVERSION_VERSION}, indent=1))
    except (OSError, SafetensorError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0]
        logger.warning("the converted-weights cache %s cannot be written (%s); running without caching",
                       cache, why)
    return summary


def unlisted_layers(model: nn.Module, layers: dict[str, str], weights: str,
                    gguf_file: str | Path | None) -> list[str]:
    """The linear layers of ``model`` that a converted cache's ``layers`` do not list although the
    conversion to ``weights`` converts them (every linear layer, except under ``q4`` one whose GGUF
    tensor stays float32, :data:`Q4_FALLBACK`). A cache that lacks one would run it in float32
    while its report says ``weights``.

    Raises:
        QuantizeError: under ``q4``, an unlisted layer has no tensor in ``gguf_file``.
    """
    unlisted = [name for name, m in model.named_modules() if isinstance(m, nn.Linear) and name not in layers]
    if not unlisted or weights != "q4" or gguf_file is None:
        return unlisted
    from gguf import GGUFReader

    tensors = linear_tensors(model, GGUFReader(str(gguf_file)))
    types = {name: tensors[name][0].tensor_type.name for name in unlisted}
    return [name for name in unlisted
            if types[name] in gguf_blocks.DECODABLE or Q4_FALLBACK.get(types[name], "bfloat16") != "float32"]


def _from_cache(model: nn.Module, weights: str, cache: Path, source: Path | dict | None,
                gguf_file: str | Path | None = None) -> dict | None:
    """Install the converted layers from ``cache`` and return its summary; ``None`` (after a warning
    saying why) when it is damaged or stale, to be discarded and converted again."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from lab.models import cache as model_cache

    problem = model_cache.cache_problem(cache, index=LAYERS_FILE)
    if problem is None and not (cache / model_cache.MANIFEST).is_file():
        problem = f"no {model_cache.MANIFEST}"
    meta: dict = {}
    if problem is None:
        try:
            meta = load_layers(cache / LAYERS_FILE)
        except FileSchemaError as exc:
            problem = str(exc)
    if problem is None and meta["summary"]["weights"] != weights:
        problem = f"it holds {meta['summary']['weights']} weights, not {weights}"
    if problem is None:
        try:
            missing = unlisted_layers(model, meta["layers"], weights, gguf_file)
        except QuantizeError as exc:
            missing, problem = [], str(exc)
        if missing:
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            problem = f"its {LAYERS_FILE} lacks the model's layer {missing[0]!r}{more}, which would run in float32"
    stale = None
    if problem is None and meta.get("conversion", 1) != CONVERSION_VERSION:
        stale = f"written by conversion version {meta.get('conversion', 1)}, this lab's is {CONVERSION_VERSION}"
    if problem is None and stale is None and source is not None:
        stale = model_cache.source_problem(cache, source)
    if problem is None and stale is None:
        # Fresh allocations: tensors read from the file may sit at addresses the kernels' vector
        # loads cannot take (an unaligned int8 weight crashed _weight_int8pack_mm with SIGSEGV).
        try:
            tensors = {k: v.clone() for k, v in load_file(str(cache / CACHE_FILE)).items()}
            install_portable(model, tensors, meta["layers"])
            return meta["summary"]
        except (QuantizeError, SafetensorError) as exc:
            problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    logger.warning("the converted-weights cache %s is %s (%s); converting again", cache,
                   "damaged" if problem else "stale", problem or stale)
    return None
