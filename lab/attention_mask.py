"""The attention mask a transformers causal LM reads for a boolean keep-mask.

Beside the decode core (:mod:`lab.decode`), the other model-facing piece every masked
forward shares: the masked one-pass NLL (:mod:`lab.stream.perplexity`), the evicting
draft (:mod:`lab.stream.acceptance`) and the intervention's arms (:mod:`lab.intervene.masks`)
pass their keep-masks through :func:`model_attention_mask`, so the convention lands once.
:func:`sliding_visibility` is a model's own sliding-window layer, which a keep-mask is
intersected with on such layers.

Mask convention (transformers 5.x): a 4D mask ``[1, 1, Q, K]`` is passed through
as-is by ``masking_utils``; the SDPA path reads a *boolean keep-mask* (True =
attend), the eager path *adds* the mask to the scores, so it needs 0 / -inf-like
floats. :func:`model_attention_mask` builds the right one and refuses other
implementations (an inverted or wrong-kind mask silently scores the wrong keys).
Models with their own sliding-window layers (Gemma 3, ``layer_types``) get a dict
``{"full_attention": keep, "sliding_attention": keep AND sliding window}``.

Shapes: Q = queries, K = keys of one forward. Batch size 1.
"""

from __future__ import annotations

from typing import Any

import torch


def sliding_visibility(query_pos: torch.Tensor, key_pos: torch.Tensor, sliding_window: int) -> torch.Tensor:
    """A model's own sliding-window layer: ``q - sliding_window < k <= q``, bool ``[Q, K]``.

    The same convention as transformers' ``sliding_window_overlay`` (the query sees
    ``sliding_window`` keys, itself included). A policy's keep-mask must be intersected
    with it on such layers (Gemma 3's local layers), never replace it.

    Examples:
        >>> sliding_visibility(torch.arange(4), torch.arange(4), 2).int()
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0],
                [0, 1, 1, 0],
                [0, 0, 1, 1]], dtype=torch.int32)
    """
    q = query_pos.reshape(-1, 1)  # [Q, 1]
    k = key_pos.reshape(1, -1)  # [1, K]
    return (k <= q) & (q - k < sliding_window)


def _sliding_window(model: Any) -> int | None:
    """The model's own sliding window if some layers use one, else None.

    Raises:
        ValueError: a model-wide sliding window without per-layer types (its 4D mask
            could not keep the window apart from the policy).
    """
    cfg = model.config
    types = getattr(cfg, "layer_types", None)
    if types and "sliding_attention" in types:
        return int(cfg.sliding_window)
    if not types and getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        raise ValueError(f"model type {cfg.model_type!r} has a sliding window but no layer_types; not supported")
    return None


def _as_model_mask(keep: torch.Tensor, impl: str, dtype: torch.dtype) -> torch.Tensor:
    """Bool keep ``[Q, K]`` -> the 4D mask the attention implementation reads, ``[1, 1, Q, K]``."""
    if impl == "sdpa":
        return keep[None, None]  # torch SDPA: True = attend
    if impl == "eager":  # added to the scores: 0 where kept, the dtype's minimum elsewhere
        return torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)[None, None]
    raise ValueError(f"attention implementation {impl!r} is not supported for policy masks; use sdpa or eager")


def model_attention_mask(model: Any, keep: torch.Tensor, query_pos: torch.Tensor,
                         key_pos: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
    """The attention mask to pass as ``attention_mask`` for a policy's keep-mask.

    Args:
        model: A transformers causal LM (Llama, Qwen2, Gemma 3 families).
        keep: Bool ``[Q, K]`` policy keep-mask.
        query_pos / key_pos: int64 ``[Q]`` / ``[K]`` positions (for the model's own
            sliding layers).

    Returns:
        ``[1, 1, Q, K]`` (bool for SDPA, additive float for eager), or for a model with
        sliding layers a dict by layer type, the sliding entry intersected with the
        model's window.

    Raises:
        ValueError: an unsupported attention implementation or sliding set-up.
    """
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    dtype = next(model.parameters()).dtype
    device = next(model.parameters()).device
    sw = _sliding_window(model)
    full = _as_model_mask(keep, impl, dtype).to(device)
    if sw is None:
        return full
    local = keep & sliding_visibility(query_pos, key_pos, sw)
    return {"full_attention": full, "sliding_attention": _as_model_mask(local, impl, dtype).to(device)}
