"""Streaming capture of received attention during prefill, without S x S matrices.

``output_attentions=True`` with eager attention keeps every layer's ``[H, S, S]``
probability matrix: on SmolLM2-135M (30 layers, 9 heads) about 4.5 GB at 2,048
tokens and 72 GB at 8,192. Sink detection needs only one reduction of each matrix,
the mean attention each key receives (:func:`lab.sinks.scores.attention_received`), so
this module reduces each layer while it runs and keeps ``[H, S]`` per layer.

How: a custom attention function is registered with transformers'
``AttentionInterface`` (and the matching SDPA mask builder with
``AttentionMaskInterface``) under :data:`CAPTURE_IMPLEMENTATION`. For each layer it

1. computes the layer output with transformers' own SDPA function, so the model's
   numbers are exactly those of a plain SDPA prefill;
2. recomputes the attention probabilities in float32 over query chunks
   ``[q0, q1)`` against keys ``[0, q1)`` only (later keys are masked anyway):
   ``softmax(scale * q_chunk @ k^T + causal mask)``, with GQA handled by
   repeating KV heads; the chunk is sized so its scores stay under
   ``max_chunk_bytes`` (256 MB by default);
3. adds the chunk's column sums into a ``[H, S]`` accumulator and finally divides
   by the number of observing queries ``S - k``;
4. checks what it captured, cheaply, on every chunk: rows sum to 1 (as the
   chunk's total mass; row by row on the first chunk), the model's
   own mask (if it passes one) allows nothing above the diagonal, and on the first
   chunk the captured probabilities times V reproduce SDPA's output (this catches
   a mask mismatch between what SDPA ran and what was captured, the class of fault
   where transformers silently returned ``None`` attentions or fell back without a
   causal mask). A violation raises :class:`CaptureError`.

Peak extra memory: one chunk of scores and its softmax (two reused buffers of
at most ``max_chunk_bytes`` each) plus the repeated keys, independent of the
number of layers; kept state is ``L * H * S`` floats. The original attention
implementation is restored afterwards, also on error.

Supported: batch 1, prefill from an empty cache, models whose attention goes
through ``AttentionInterface`` (Llama, Qwen2, Gemma3, ...), boolean or additive
masks (sliding windows included; the score still divides by ``S - k``, Gu et
al.'s full-causal count, so on a local layer it reads as attention per potential
observer). Not supported (raises): attention softcapping,
position biases, learned attention sinks (``s_aux``).
"""

from __future__ import annotations

import contextvars
import logging
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from lab.sinks.scores import attention_received

logger = logging.getLogger(__name__)

CAPTURE_IMPLEMENTATION = "lab_sink_capture"

# Budget for one chunk of float32 scores [H, chunk, S]: ~256 MB keeps an 8,192-token capture
# within 2 GB beyond the model (lab bench-sinks' target).
DEFAULT_MAX_CHUNK_BYTES = 256 * 2**20

# Captured rows are float32 softmax outputs: they sum to 1 up to rounding (~S * 1e-7
# at S = 8192), so 1e-3 only fires on NaN, an all-masked row or a broken mask.
ROW_SUM_ATOL = 1e-3

# Captured P @ V against SDPA's output on the first chunk. Both are float32 on CPU
# (differences ~1e-6 of the values' scale from summation order); half-precision SDPA
# rounds its output to 3 significant digits, hence the looser bound there. The
# absolute part scales with max |V| of the layer: Qwen2.5-Coder-1.5B's value vectors
# reach magnitudes where float32 rounding alone gave 1.6e-4 (a fixed 1e-4 refused the
# model), while a wrong mask or a different attention function errs by O(|V|).
OUTPUT_TOL = {torch.float32: 1e-4, torch.float64: 1e-8, torch.float16: 2e-2, torch.bfloat16: 5e-2}
# ... plus the rounding of the logits themselves: a logit of size m is computed to about
# eps * m, which moves the softmax weights (and so P @ V) by about that much relative.
# Qwen2.5-Coder-1.5B's first layer has logits up to 1.3e4 (eps * m ~ 1.5e-3): a fixed
# bound refused "Why is water a polar molecule ...?" (error 4.5e-4). Measured on the
# Qwen pair, every layer's error stays below 1.9 * (u = eps / 2) * max|V| * max logit;
# the factor 4 on eps leaves a margin of four, while a wrong mask still errs by O(|V|).
LOGIT_ROUNDING_FACTOR = 4.0


class CaptureError(ValueError):
    """Attention cannot be captured from this model, or what was captured is invalid."""


@dataclass
class _Accumulator:
    """Per-forward state: one ``[H, S]`` received-attention tensor per layer."""

    max_chunk_bytes: int
    chunk_size: int | None
    layers: dict[int, torch.Tensor] = field(default_factory=dict)
    calls: int = 0


# The capture function is called by transformers with a fixed signature, so the
# active accumulator reaches it through a context variable, set only for the
# duration of one forward in `capture_received` (not a module-level setting).
_ACTIVE: contextvars.ContextVar[_Accumulator | None] = contextvars.ContextVar("lab_sink_capture", default=None)


def _ensure_registered() -> None:
    """Register the capture attention and its mask builder with transformers (idempotent)."""
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    from transformers.modeling_utils import AttentionInterface

    if CAPTURE_IMPLEMENTATION not in AttentionInterface._global_mapping:
        AttentionInterface.register(CAPTURE_IMPLEMENTATION, _capture_attention)
    if CAPTURE_IMPLEMENTATION not in AttentionMaskInterface._global_mapping:
        AttentionMaskInterface.register(CAPTURE_IMPLEMENTATION, sdpa_mask)


def _capture_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                       scaling: float | None = None, is_causal: bool | None = None, **kwargs):
    """Attention function for ``AttentionInterface``: SDPA output plus received-attention capture."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    acc = _ACTIVE.get()
    if acc is not None:
        for name in ("softcap", "position_bias", "s_aux"):
            if kwargs.get(name) is not None:
                raise CaptureError(f"attention with {name} is not supported by the sink capture")
    out, _ = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                    scaling=scaling, is_causal=is_causal, **kwargs)
    if acc is not None:
        layer = getattr(module, "layer_idx", acc.calls)
        acc.layers[int(layer)] = _received_one_layer(module, query, key, value, attention_mask, scaling, out, acc)
        acc.calls += 1
    return out, None


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """``[Hkv, S, D] -> [Hkv * n_rep, S, D]``, each KV head repeated for its query group."""
    if n_rep == 1:
        return x
    hkv, s, d = x.shape
    return x[:, None].expand(hkv, n_rep, s, d).reshape(hkv * n_rep, s, d)


def _received_one_layer(module, query, key, value, attention_mask, scaling, out, acc: _Accumulator) -> torch.Tensor:
    """Mean received attention ``[H, S]`` (float32, CPU) of one layer, over query chunks."""
    b, h, s, d = query.shape  # B=1, H query heads, S positions, D head dim
    if b != 1:
        raise CaptureError(f"sink capture supports batch size 1, got {b}")
    if key.shape[2] != s:
        raise CaptureError(f"sink capture needs prefill from an empty cache: {s} queries but {key.shape[2]} keys")
    if h % key.shape[1]:
        raise CaptureError(f"{h} query heads are not a multiple of {key.shape[1]} KV heads")
    scale = scaling if scaling is not None else 1.0 / math.sqrt(d)
    q = query[0].float() * scale                          # [H, S, D], pre-scaled
    k = _repeat_kv(key[0].float(), h // key.shape[1])     # [H, S, D]
    v = _repeat_kv(value[0].float(), h // value.shape[1]) # [H, S, Dv]
    chunk = acc.chunk_size or max(1, acc.max_chunk_bytes // (h * s * 4))
    mask = attention_mask[0] if attention_mask is not None else None  # [1 or H, S, S], bool or additive
    positions = torch.arange(s, device=q.device)
    total = torch.zeros(h, s, dtype=torch.float32, device=q.device)
    # Chunk buffers are allocated once per layer and reused: a fresh 256 MB tensor
    # per chunk costs more in page faults than the softmax itself on CPU.
    chunk = min(chunk, s)
    scores_buf = torch.empty(h * chunk * s, dtype=torch.float32, device=q.device)
    probs_buf = torch.empty_like(scores_buf)
    k_t = k.transpose(-1, -2).contiguous()  # [H, D, S]
    future = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1)  # [c, c], True = later key
    for q0 in range(0, s, chunk):
        q1 = min(s, q0 + chunk)
        n = q1 - q0
        # 1. scores of queries [q0, q1) against keys [0, q1): [H, c, q1]
        scores = torch.matmul(q[:, q0:q1], k_t[:, :, :q1], out=scores_buf[: h * n * q1].view(h, n, q1))
        if mask is None:
            # keys before q0 are visible to every query of the chunk: only the
            # diagonal block [q0, q1) x [q0, q1) holds future keys to hide
            scores[:, :, q0:q1].masked_fill_(future[:n, :n], float("-inf"))
        else:
            causal = positions[None, :q1] <= positions[q0:q1, None]  # [c, q1], True = visible
            allowed = causal & _check_model_mask(mask[:, q0:q1, :q1], causal, scores, q0)
            scores.masked_fill_(~allowed, float("-inf"))
        # 2. softmax into the second buffer
        max_logit = float(scores.amax()) if q0 == 0 else 0.0  # largest visible logit, for the output check
        probs = _softmax_into(scores, probs_buf[: h * n * q1].view(h, n, q1))
        # 3. column sums: attention each key receives from this chunk's queries: [H, q1]
        received = probs.sum(dim=1)
        # 4. validate: every row sums to 1, so the chunk's total mass per head is its
        #    row count (a NaN or an all-masked row breaks it); full row check and
        #    SDPA-output check on the first chunk
        mass_err = float((received.sum(dim=-1) - (q1 - q0)).abs().max())
        if not mass_err <= ROW_SUM_ATOL * (q1 - q0):  # also catches NaN
            raise CaptureError(f"captured attention rows do not sum to 1 (total mass off by {mass_err:.3g}) "
                               f"at queries {q0}..{q1 - 1}")
        if q0 == 0:
            row_err = float((probs.sum(dim=-1) - 1.0).abs().max())
            if not row_err <= ROW_SUM_ATOL:
                raise CaptureError(f"captured attention rows do not sum to 1 (max error {row_err:.3g})")
            check_output(probs, v[:, :q1], out[0, q0:q1], query.dtype, max_logit=max_logit)
        total[:, :q1] += received
    observers = torch.arange(s, 0, -1, dtype=torch.float32, device=q.device)  # S - k
    return (total / observers).cpu()


def _softmax_into(scores: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``softmax(scores, -1)`` written into ``out`` (aten's out variant; plain softmax if unavailable)."""
    try:
        return torch.ops.aten._softmax.out(scores, -1, False, out=out)
    except (AttributeError, RuntimeError, NotImplementedError):  # an op set without the out overload
        return torch.softmax(scores, dim=-1)


def _check_model_mask(mask: torch.Tensor, causal: torch.Tensor, scores: torch.Tensor, q0: int) -> torch.Tensor:
    """Visibility ``[c, q1]`` or ``[H, c, q1]`` from the model's mask; raise if it sees the future."""
    if mask.dtype == torch.bool:
        visible = mask
    else:
        visible = mask > torch.finfo(mask.dtype).min / 2  # additive: large negative = hidden
        scores.add_(mask.float().clamp_min(-1e30).masked_fill(~visible, 0.0))
    if (visible & ~causal).any():
        raise CaptureError(f"the model's attention mask lets queries from position {q0} see later keys; "
                           "refusing to capture non-causal attention")
    return visible


def check_output(probs: torch.Tensor, v: torch.Tensor, sdpa_out: torch.Tensor, dtype: torch.dtype, *,
                  max_logit: float = 0.0) -> None:
    """Captured ``probs @ v`` ``[H, c, Dv]`` must match SDPA's output ``[c, H, Dv]``.

    The bound is ``max(1, max|V|) * (OUTPUT_TOL[dtype] + LOGIT_ROUNDING_FACTOR * eps(dtype) * max_logit)``:
    rounding scales with the values' magnitude and with the largest (visible) logit.
    """
    ours = torch.matmul(probs, v).transpose(0, 1)  # [c, H, Dv]
    tol = OUTPUT_TOL.get(dtype, 5e-2)
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else torch.finfo(torch.float32).eps
    logit_tol = LOGIT_ROUNDING_FACTOR * eps * max(0.0, max_logit) if math.isfinite(max_logit) else 0.0
    atol = (tol + logit_tol) * max(1.0, float(v.abs().max()))
    theirs = sdpa_out.float()
    if not torch.allclose(ours, theirs, atol=atol, rtol=tol):
        err = float((ours - theirs).abs().max())
        raise CaptureError(f"captured attention does not reproduce the layer's SDPA output (max error {err:.3g} > "
                           f"{atol:.3g}); "
                           "the model's attention is not the causal softmax the capture assumes")


@dataclass(frozen=True)
class CapturedAttention:
    """Received attention of one prefill.

    Attributes:
        per_head: Float32 ``[L, H, S]`` mean received attention per layer and head
            (Gu et al. 2024 importance score), on the CPU.
        last_logits: Float32 ``[V]`` next-token logits after the prompt.
        chunk_size: Query rows per chunk used for the largest layer.
    """

    per_head: torch.Tensor
    last_logits: torch.Tensor
    chunk_size: int


def _check_capturable(model: Any, input_ids: torch.Tensor) -> None:
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must be a [1, S] tensor, got "
                         f"{tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__}")
    if input_ids.shape[1] == 0:
        raise ValueError("input_ids is empty (S = 0)")
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and input_ids.shape[1] > limit:
        raise ValueError(f"prompt has {input_ids.shape[1]} tokens, longer than the model's context of {limit}")
    can_set = getattr(model, "_can_set_attn_implementation", None)
    if can_set is None or not can_set():
        raise CaptureError(f"{type(model).__name__} does not route attention through transformers' "
                           "AttentionInterface, so its attention cannot be captured")


def capture_received(model: Any, input_ids: torch.Tensor, *, max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
                     chunk_size: int | None = None, cache: Any = None) -> CapturedAttention:
    """Run one prefill and return every layer's received attention, without S x S storage.

    Args:
        model: A transformers causal LM whose attention uses ``AttentionInterface``.
        input_ids: int64 ``[1, S]``, ``S`` at most the model's context length.
        max_chunk_bytes: Budget for one chunk of float32 scores ``[H, c, S]``.
        chunk_size: Force this many query rows per chunk (tests use it to exercise
            chunking); ``None`` derives it from ``max_chunk_bytes``.
        cache: An empty transformers KV cache for the prefill to fill (its keys and
            values are those of a plain SDPA prefill, so a decode can go on from it:
            the study's speculative run does); None = no cache.

    Returns:
        :class:`CapturedAttention` with ``per_head`` ``[L, H, S]``.

    Raises:
        ValueError: bad ``input_ids`` (shape, empty, longer than the context) or
            chunk arguments.
        CaptureError: the model's attention cannot be captured (no
            ``AttentionInterface`` support, unsupported attention features, a layer
            that never called the capture), or the capture failed validation.
    """
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size={chunk_size!r} must be a positive integer")
    if not isinstance(max_chunk_bytes, int) or max_chunk_bytes < 1:
        raise ValueError(f"max_chunk_bytes={max_chunk_bytes!r} must be a positive integer")
    _check_capturable(model, input_ids)
    _ensure_registered()
    n_layers = model.config.num_hidden_layers
    original = model.config._attn_implementation
    acc = _Accumulator(max_chunk_bytes=max_chunk_bytes, chunk_size=chunk_size)
    device = next(model.parameters()).device
    # 1. switch the attention implementation; 2. run the prefill; 3. restore, always
    model.set_attn_implementation(CAPTURE_IMPLEMENTATION)
    if model.config._attn_implementation != CAPTURE_IMPLEMENTATION:
        model.set_attn_implementation(original)
        raise CaptureError(f"{type(model).__name__} refused the capture attention implementation")
    token = _ACTIVE.set(acc)
    try:
        with torch.no_grad():
            # logits_to_keep=1: only the last position's logits; [S, V] logits would
            # cost S * V * 4 bytes (1.6 GB at 8,192 tokens on a 49k vocabulary).
            if cache is None:
                out = model(input_ids.to(device), use_cache=False, logits_to_keep=1)
            else:
                out = model(input_ids.to(device), cache=cache, use_cache=True, logits_to_keep=1)
    finally:
        _ACTIVE.reset(token)
        model.set_attn_implementation(original)
    # 4. every layer must have been captured
    if sorted(acc.layers) != list(range(n_layers)):
        raise CaptureError(f"attention captured from layers {sorted(acc.layers)} but the model has {n_layers}; "
                           "some layers bypass AttentionInterface")
    per_head = torch.stack([acc.layers[i] for i in range(n_layers)])  # [L, H, S]
    s = input_ids.shape[1]
    used = chunk_size or max(1, max_chunk_bytes // (per_head.shape[1] * s * 4))
    return CapturedAttention(per_head=per_head, last_logits=out.logits[0, -1].float().cpu(), chunk_size=min(used, s))


def eager_received(model: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """Reference: received attention from ``output_attentions=True`` with eager attention.

    Materializes every layer's ``[H, S, S]`` matrix (the memory blow-up the
    streaming capture avoids); for tests and the benchmark only.

    Returns:
        Float32 ``[L, H, S]``.

    Raises:
        ValueError: bad ``input_ids``. CaptureError: the model returned no attentions.
    """
    _check_capturable(model, input_ids)
    original = model.config._attn_implementation
    device = next(model.parameters()).device
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(input_ids.to(device), use_cache=False, output_attentions=True, logits_to_keep=1)
    finally:
        model.set_attn_implementation(original)
    if out.attentions is None or any(a is None for a in out.attentions):
        raise CaptureError("the model returned no attention weights with output_attentions=True")
    return torch.stack([attention_received(a[0].float()).cpu() for a in out.attentions])
