"""The decode core: input checks, KV caches, prefill, the one-token step, and the target-only loop.

Every path in the lab that generates goes through this module, so a check or a
fix lands once:

* :func:`check_input_ids`, :func:`check_max_new_tokens` and :func:`check_context`
  validate a prompt and its budget (batch size 1, integer ids, prompt + budget
  within the model's context) with one wording, also used by the commands before
  they start any work;
* :func:`new_cache`, :func:`enable_rollback` and :func:`rollback_cache` own the KV
  cache's life cycle (see "Rollback" below);
* :func:`prefill` and :func:`decode_one` are the two forward kinds, in the style of
  gpt-fast's ``generate.py``; :func:`forward` is the timed, device-synchronized
  forward under both (and under the speculative loop's verify pass);
* :func:`generate` is the one target-only decode loop (prefill, then one token per
  forward, EOS and budget stops), choosing each token with the lab's one sampling
  filter (:mod:`lab.sampling`). The entropy tracker observes its steps
  through ``on_step``; the baseline of ``lab bench`` is this loop unobserved.

Rollback (speculative decoding). A sliding-window layer of transformers 5.24
(``DynamicSlidingWindowLayer``, built for every ``sliding_attention`` or
``chunked_attention`` entry of a model's ``layer_types``, e.g. 5 of 6 Gemma 3
layers) keeps only its last ``window - 1`` keys, so once the window is reached a
rejected draft token cannot be cropped ("crop was called, but the current layer
does not track past states"). transformers' own assisted generation calls
``Cache.activate_past_recording()``: each such layer then keeps the new states
until the next ``crop(-n)``, which removes the n rejected positions and trims the
layer back to ``window - 1`` keys; the layer's mask sizes (``get_mask_sizes``) and
the model's sliding-window mask function stay in step with that. Linear-attention
conv states are handled the same way. Layers with a recurrent state (Mamba-style
``linear_attention``, ``hybrid``) cannot be put back by cropping at all:
:func:`check_rollback_supported` refuses them before any work. The unit tests prove
on a tiny Gemma 3 (window 8) that cached logits after rollbacks equal a full
recomputation past the window, and that greedy speculative decoding equals the
target alone.

Shapes: S = prompt length, T = positions fed in one forward, V = vocabulary size.
Batch size 1 throughout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch

from lab import sampling as filters
from lab.ranges import TOKENS, check_value
from lab.runtime.ggml import is_ggml
from lab.sampling import SamplingConfig


# Layer kinds whose cached state is a recurrence over all past tokens: cropping
# cannot restore an earlier state (transformers' `is_croppable` is False for them).
RECURRENT_LAYER_TYPES = frozenset({"linear_attention", "hybrid", "hybrid_sliding"})


# --------------------------------------------------------------------------- checks


def check_input_ids(input_ids: Any) -> torch.Tensor:
    """Validate a prompt: a ``[1, S]`` (or ``[S]``) integer tensor with S >= 1.

    Returns:
        int64 ``[1, S]`` (a new tensor when the input was 1-D or int32).

    Raises:
        ValueError: not a tensor, wrong rank, batch size > 1, empty, or not integer ids.
    """
    if not isinstance(input_ids, torch.Tensor):
        raise ValueError(f"input_ids must be a torch.Tensor of token ids, got {type(input_ids).__name__}")
    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(0)  # [S] -> [1, S]
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must have shape [1, S], got {tuple(input_ids.shape)}")
    if input_ids.shape[0] != 1:
        raise ValueError(f"input_ids has batch size {input_ids.shape[0]} (shape {tuple(input_ids.shape)}); "
                         "the lab decodes one sequence at a time, pass shape [1, S]")
    if input_ids.shape[1] == 0:
        raise ValueError(f"input_ids is empty (shape {tuple(input_ids.shape)}); give at least one prompt token")
    if input_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
    return input_ids.to(torch.long)


def check_max_new_tokens(max_new_tokens: Any, *, arg: str = "max_new_tokens") -> int:
    """Raise ``ValueError`` naming ``arg`` unless ``max_new_tokens`` is in :data:`lab.ranges.TOKENS` (an integer >= 1)."""
    check_value(arg, max_new_tokens, TOKENS)
    return max_new_tokens


def context_length(model: Any) -> int | None:
    """The model's context: ``max_position_embeddings`` of its text config, or None if it has none."""
    config = model.config
    if hasattr(config, "get_text_config"):
        config = config.get_text_config(decoder=True)
    limit = getattr(config, "max_position_embeddings", None)
    return int(limit) if limit else None


def check_context(model: Any, prompt_length: int, max_new_tokens: int, *, arg: str = "max_new_tokens") -> None:
    """Refuse a decode whose prompt plus budget does not fit the model's context.

    The one wording for every path that generates: the Python functions pass
    ``arg="max_new_tokens"``, the commands ``arg="--max-new-tokens"``, and call it
    before any decoding work.

    Args:
        model: A transformers causal LM (its config gives the context).
        prompt_length: S, prompt tokens.
        max_new_tokens: The budget of new tokens.
        arg: The budget's name as the caller's user typed it.

    Raises:
        ValueError: ``prompt_length + max_new_tokens`` exceeds the context, naming ``arg``.
    """
    limit = context_length(model)
    if limit is None or prompt_length + max_new_tokens <= limit:
        return
    room = limit - prompt_length
    advice = (f"use {arg} <= {room} or a shorter prompt" if room >= 1
              else "the prompt alone fills it; shorten the prompt")
    raise ValueError(f"{arg}={max_new_tokens}: the prompt ({prompt_length} tokens) plus {max_new_tokens} new tokens "
                     f"needs {prompt_length + max_new_tokens} positions, more than the model's context of {limit}; "
                     f"{advice}")


def check_decode_input(model: Any, input_ids: Any, max_new_tokens: Any) -> torch.Tensor:
    """All input checks of a decode, in order: ids, budget, context. Returns int64 ``[1, S]``."""
    ids = check_input_ids(input_ids)
    check_max_new_tokens(max_new_tokens)
    check_context(model, ids.shape[1], max_new_tokens)
    return ids


def eos_set(eos_token_ids: Iterable[int] | int | None) -> frozenset[int]:
    """EOS ids as a frozenset (None = never stop on a token)."""
    if eos_token_ids is None:
        return frozenset()
    if isinstance(eos_token_ids, int):
        return frozenset({eos_token_ids})
    return frozenset(int(e) for e in eos_token_ids)


# --------------------------------------------------------------------------- KV cache


def _layer_types(model: Any) -> list[str]:
    from transformers.cache_utils import get_layer_types_and_kwargs

    return list(get_layer_types_and_kwargs(model.config.get_text_config(decoder=True))[0])


def check_rollback_supported(model: Any) -> None:
    """Raise ``ValueError`` when the model's KV cache cannot be rolled back (recurrent layers)."""
    if is_ggml(model):
        return  # lab.runtime.ggml refuses recurrent models when it loads them
    recurrent = sorted(set(_layer_types(model)) & RECURRENT_LAYER_TYPES)
    if recurrent:
        raise ValueError(f"the model has {', '.join(recurrent)} layers, whose recurrent state cannot be rolled back "
                         "after a rejected draft token; speculative decoding needs a cache that can")


def new_cache(model: Any) -> Any:
    """An empty ``transformers.DynamicCache`` with the layer kinds the model's config asks for
    (on the llama.cpp runtime, the model's own cache: :class:`lab.runtime.ggml.GgmlCache`)."""
    if is_ggml(model):
        return model.new_cache()
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def enable_rollback(cache: Any) -> None:
    """Make ``cache`` croppable from now on (transformers' past recording); see the module docstring.

    Call it after the prefill (transformers does the same): the prompt's states need
    no rollback, so a sliding layer never holds more than its window for them.

    Raises:
        ValueError: a layer whose state cannot be restored by cropping.
    """
    cache.activate_past_recording()
    stuck = [i for i, layer in enumerate(cache.layers) if not getattr(layer, "is_croppable", True)]
    if stuck:
        raise ValueError(f"KV-cache layers {stuck} cannot be rolled back (recurrent state); speculative decoding "
                         "needs a cache that can")


def rollback_cache(cache: Any, keep_len: int, *, num_layers: int | None = None) -> None:
    """Drop cached positions beyond ``keep_len``.

    transformers' ``Cache.crop`` takes minus the count. ``crop`` is called even with
    nothing to drop: a past-recording sliding layer then trims back to its window.

    Args:
        cache: A transformers cache.
        keep_len: Positions to keep.
        num_layers: Crop only the first N layers, each by its own excess (an early-exit
            draft extends only the target's first N layers of a shared cache); None = all.
    """
    if num_layers is None:
        extra = cache.get_seq_length() - keep_len
        assert extra >= 0, f"cache holds {cache.get_seq_length()} positions, fewer than keep_len={keep_len}"
        cache.crop(-extra)
        return
    for i, layer in enumerate(cache.layers[:num_layers]):
        extra = layer.get_seq_length() - keep_len
        assert extra >= 0, f"cache layer {i} holds {layer.get_seq_length()} positions, fewer than keep_len={keep_len}"
        layer.crop(-extra)


# --------------------------------------------------------------------------- forward passes


def model_device(model: Any) -> torch.device:
    return next(model.parameters()).device


def sync(device: torch.device) -> None:
    """Wait for the device's queued kernels (honest timing on CUDA / MPS; nothing on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def forward(model: Any, ids: torch.Tensor, cache: Any, *, logits_to_keep: int = 1) -> tuple[torch.Tensor, float]:
    """One timed forward of ``ids`` (int64 ``[1, T]``) that extends ``cache`` by T positions.

    Returns:
        ``(logits, seconds)``: float logits ``[min(T, keep) or T, V]`` (``logits_to_keep=0``
        keeps all T rows) and the wall time including a device sync.
    """
    t0 = time.perf_counter()
    logits = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=logits_to_keep).logits[0]
    sync(ids.device)
    return logits, time.perf_counter() - t0


def prefill(model: Any, input_ids: torch.Tensor, cache: Any) -> tuple[torch.Tensor, float]:
    """Run the prompt ``[1, S]`` once, filling ``cache``; logits ``[1, V]`` for the next position, and seconds."""
    return forward(model, input_ids, cache, logits_to_keep=1)


def decode_one(model: Any, token: torch.Tensor, cache: Any) -> tuple[torch.Tensor, float]:
    """One decode step: feed one token ``[1, 1]``, extend ``cache``; logits ``[1, V]`` and seconds."""
    return forward(model, token, cache, logits_to_keep=1)


# --------------------------------------------------------------------------- the target-only loop

# on_step(logits [1, V] raw, filtered [1, V] (-inf where dropped; the raw row when greedy), token [1, 1])
StepHook = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]


@dataclass
class DecodeResult:
    """What :func:`generate` did.

    Attributes:
        tokens: New token ids (EOS included when it stopped there).
        stop_reason: ``"eos"`` or ``"max_new_tokens"``.
        prefill_time_s: The prefill forward (synced).
        forward_time_s: All forwards, prefill included (synced).
        total_time_s: The whole loop, choosing tokens and the ``on_step`` hook included.
        prompt_length: S.
    """

    tokens: list[int]
    stop_reason: str
    prefill_time_s: float
    forward_time_s: float
    total_time_s: float
    prompt_length: int


def generate(model: Any, input_ids: torch.Tensor, *, max_new_tokens: int, sampling: SamplingConfig | None = None,
             generator: torch.Generator | None = None, eos_token_ids: Iterable[int] | int | None = None,
             logits_processor: Any = None, on_step: StepHook | None = None) -> DecodeResult:
    """Decode with the target alone: prefill, then one token per forward with a KV cache.

    Args:
        model: A transformers causal LM in eval mode.
        input_ids: int64 ``[1, S]`` (or ``[S]``) prompt ids.
        max_new_tokens: Budget of new tokens, >= 1; prompt + budget must fit the context.
        sampling: A :class:`~lab.sampling.SamplingConfig` (default greedy).
        generator: Random source for sampling (on the model's device); seed it to
            reproduce a run. The same generator state gives the same tokens as any
            other caller of this loop.
        eos_token_ids: Ids that stop the decode (kept in ``tokens``); None = run the budget out.
        logits_processor: transformers ``LogitsProcessorList`` (or callable
            ``(ids [1, L], scores [1, V]) -> scores``) applied before the filter.
        on_step: Observer called once per generated token with the raw logits, the
            filtered logits the token was drawn from, and the token; must not modify them.

    Returns:
        :class:`DecodeResult`.

    Raises:
        ValueError: bad ids, budget or context (see :func:`check_decode_input`).
    """
    sampling = sampling if sampling is not None else SamplingConfig()
    ids = check_decode_input(model, input_ids, max_new_tokens)
    eos = eos_set(eos_token_ids)
    ids = ids.to(model_device(model))
    seq = ids[0]  # [L]: what the processors see; grown only when there are processors
    tokens: list[int] = []
    stop_reason = "max_new_tokens"
    t_start = time.perf_counter()
    with torch.inference_mode():
        cache = new_cache(model)
        # 1. Prefill: the prompt fills the KV cache; logits for the first new token.
        logits, prefill_s = prefill(model, ids, cache)  # [1, V]
        forward_s = prefill_s
        while True:
            # 2. Choose: processors, then greedy argmax or a draw through the sampling filter.
            row = filters.apply_processors(logits_processor, seq, seq[:0], logits)  # [1, V]
            if sampling.greedy:
                filtered = row
                token = row.argmax(dim=-1, keepdim=True)  # [1, 1]
            else:
                filtered = filters.filter_logits(row, sampling)  # [1, V], -inf where dropped
                token = filters.sample(filtered.softmax(dim=-1), generator).reshape(1, 1)
            # 3. Observe (the tracker's statistics), on the device.
            if on_step is not None:
                on_step(logits, filtered, token)
            # 4. Stop on EOS or budget (one host sync per token).
            token_id = int(token.item())
            tokens.append(token_id)
            if token_id in eos:
                stop_reason = "eos"
                break
            if len(tokens) >= max_new_tokens:
                break
            if logits_processor is not None:
                seq = torch.cat([seq, token[0]])
            # 5. Decode the next position.
            logits, dt = decode_one(model, token, cache)
            forward_s += dt
    return DecodeResult(tokens, stop_reason, prefill_s, forward_s, time.perf_counter() - t_start, ids.shape[1])
