"""Context reliance: how much a decode reads the context span of its prompt, measured two ways.

A prompt here is a context (a span of text, e.g. a docstring or a study twin's added text)
followed by a question. The prompt is rendered with the chat template, the model's greedy
continuation c (T tokens) is decoded from it, and both measures are read teacher-forced on
that one continuation, so they describe the answer the model actually gives.

* **Lookback ratio** (Chuang et al. 2024, "Lookback Lens", Sec. 2, eq. 1). At decode query
  t (predicting c_t), for every layer l and head h:
  ``A_ctx = mean attention probability over the context span's keys``,
  ``A_new = mean attention probability over the keys of the tokens generated so far``
  (c_0 .. c_{t-1}), ``LR = A_ctx / (A_ctx + A_new)``. The first query has no generated
  token before it and is left out. Aggregation, fixed before any validation: the mean over
  layers, heads and the remaining T - 1 queries (Lookback Lens fits a probe on the per-head
  ratios; a fixed mean needs no labels). Range [0, 1]; higher = the decode reads the
  context more than its own answer. The per-layer means are kept.
* **Context contrast** (after Sarti et al. 2024, PECoRe's context-sensitive token
  identification, KL variant): the mean over the T decode positions of
  ``KL(p_with || p_without)`` in bits, where ``p_with`` is the next-token distribution with
  the context and ``p_without`` the one for the question alone, both teacher-forced on c.
  Range [0, inf); 0 = the context changes nothing the model predicts.

A prompt without a context span has neither measure: :func:`context_reliance` needs a span
and the lab reports such a prompt's reliance as not measured (``None``), never as 0.

Shapes: S prompt tokens with the context, S0 without, T continuation tokens, V vocabulary,
H heads, K keys. Batch 1. The model must run eager attention (the lookback ratio reads the
post-softmax probabilities from each layer's attention module with a forward hook).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from lab.intervene.masks import AddedSpan, check_eager
from lab.models.hooks import attention_modules, forward_hooks

LN2 = math.log(2.0)


@dataclass(frozen=True)
class ContextReliance:
    """Both reliance measures of one prompt with a context.

    Attributes:
        lookback_ratio: Mean Lookback-Lens ratio over layers, heads and decode queries 1..T-1, in [0, 1].
        lookback_per_layer: The same mean per layer (index = layer), each in [0, 1].
        lookback_per_head: The mean over queries per layer and head, ``[L][H]`` (a probe's features).
        contrast_bits: Mean over the T decode positions of KL(p_with || p_without), bits, >= 0.
        gain_bits: Mean over the T positions of log2 p_with(c_t) - log2 p_without(c_t): how much the
            context raises the answer's own tokens (pointwise mutual information of answer and context).
        n_context: Tokens in the context span.
        n_decode: T, the teacher-forced continuation's length.
    """

    lookback_ratio: float
    lookback_per_layer: tuple[float, ...]
    contrast_bits: float
    gain_bits: float
    n_context: int
    n_decode: int
    lookback_per_head: tuple[tuple[float, ...], ...] = ()


def answer_gain_bits(with_logits: torch.Tensor, without_logits: torch.Tensor, continuation: torch.Tensor) -> torch.Tensor:
    """Per-position log2 p_with(c_t) - log2 p_without(c_t) of the continuation's own tokens.

    Args:
        with_logits, without_logits: float logits ``[T, V]``; row t predicts ``continuation[t]``.
        continuation: int64 ``[T]``.

    Returns:
        float32 ``[T]``, bits (negative where the context makes the token less likely).

    Examples:
        >>> import torch
        >>> answer_gain_bits(torch.tensor([[0.0, -1e9]]), torch.zeros(1, 2), torch.tensor([0]))
        tensor([1.])
    """
    if with_logits.shape != without_logits.shape or with_logits.shape[:1] != continuation.shape:
        raise ValueError(f"logits [T, V] and continuation [T] must agree, got {tuple(with_logits.shape)}, "
                         f"{tuple(without_logits.shape)} and {tuple(continuation.shape)}")
    idx = continuation[:, None].to(with_logits.device)
    lp = with_logits.float().log_softmax(-1).gather(-1, idx)[:, 0]
    lq = without_logits.float().log_softmax(-1).gather(-1, idx)[:, 0]
    return (lp - lq) / LN2


def lookback_ratios(probs: torch.Tensor, span: AddedSpan, n_prompt: int) -> torch.Tensor:
    """Lookback Lens ratios of one layer's decode queries (Chuang et al. 2024, eq. 1).

    Args:
        probs: float ``[H, T, K]``, post-softmax attention probabilities of the T decode queries
            (positions ``n_prompt - 1 .. n_prompt + T - 2``) over K >= n_prompt + T - 1 keys.
        span: The context's key positions ``[start, end)``, inside the prompt.
        n_prompt: S; keys ``S .. S + t - 1`` are the tokens generated before query t.

    Returns:
        float32 ``[H, T - 1]``: the ratio at queries 1..T-1 (query 0 has no generated token
        before it). A query whose context and generated means are both 0 gets 0.5.

    Raises:
        ValueError: ``probs`` not 3-D, T < 2, or the span not inside the prompt.

    Examples:
        >>> import torch
        >>> from lab.intervene.masks import AddedSpan
        >>> p = torch.zeros(1, 2, 4); p[0, 1] = torch.tensor([0.0, 0.5, 0.0, 0.5])
        >>> lookback_ratios(p, AddedSpan(1, 2), n_prompt=3)  # ctx mean 0.5, new mean 0.5
        tensor([[0.5000]])
    """
    if probs.dim() != 3 or probs.shape[1] < 2:
        raise ValueError(f"probs must be [H, T, K] with T >= 2, got {tuple(probs.shape)}")
    if span.end > n_prompt:
        raise ValueError(f"span=[{span.start}, {span.end}) must lie inside the {n_prompt}-token prompt")
    h, t, k = probs.shape
    p = probs[:, 1:].float()  # [H, T-1, K]: queries 1..T-1
    ctx = p[..., span.start:span.end].mean(-1)  # [H, T-1]
    n_new = torch.arange(1, t, dtype=torch.float32)  # query j has j generated keys before it (itself included)
    keys = torch.arange(k)
    new_mask = (keys[None, :] >= n_prompt) & (keys[None, :] < n_prompt + n_new[:, None])  # [T-1, K]
    new = (p * new_mask).sum(-1) / n_new  # [H, T-1]
    total = ctx + new
    return torch.where(total > 0, ctx / total.clamp_min(torch.finfo(torch.float32).tiny), torch.full_like(ctx, 0.5))


def kl_bits(with_logits: torch.Tensor, without_logits: torch.Tensor) -> torch.Tensor:
    """Per-row KL(p_with || p_without) in bits from two logit tensors.

    Args:
        with_logits, without_logits: float logits ``[T, V]`` (same V).

    Returns:
        float32 ``[T]``, each >= 0 (clamped at 0 against rounding).

    Raises:
        ValueError: shapes differ or are not 2-D.

    Examples:
        >>> import torch
        >>> kl_bits(torch.zeros(1, 2), torch.zeros(1, 2))
        tensor([0.])
        >>> round(float(kl_bits(torch.tensor([[0.0, -1e9]]), torch.zeros(1, 2))[0]), 6)  # log2(2)
        1.0
    """
    if with_logits.dim() != 2 or with_logits.shape != without_logits.shape:
        raise ValueError(f"logits must be two [T, V] tensors of one shape, got {tuple(with_logits.shape)} and "
                         f"{tuple(without_logits.shape)}")
    log_p = with_logits.float().log_softmax(-1)
    log_q = without_logits.float().log_softmax(-1)
    return ((log_p.exp() * (log_p - log_q)).sum(-1) / LN2).clamp_min(0.0)


@contextmanager
def _layer_ratios(model: Any, span: AddedSpan, n_prompt: int, n_decode: int, out: list[torch.Tensor]) -> Iterator[None]:
    """While open, each attention layer appends its ``[H, T - 1]`` lookback ratios to ``out``."""
    def hook(module: Any, args: Any, output: Any) -> None:
        probs = output[1]  # [1, H, Q, K] post-softmax (eager attention)
        assert probs is not None, "the attention layer returned no probabilities (not eager)"
        out.append(lookback_ratios(probs[0, :, -n_decode:], span, n_prompt))

    with forward_hooks(attention_modules(model), hook):
        yield


@contextmanager
def eager_attention(model: Any) -> Iterator[Any]:
    """While open, ``model`` runs transformers' eager attention (the path that returns attention probabilities);
    its own implementation is restored on exit, error or not.

    Raises:
        ValueError: the model cannot switch (no ``set_attn_implementation``) or refuses eager.
    """
    original = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if original == "eager":
        yield model
        return
    if not callable(getattr(model, "set_attn_implementation", None)):
        raise ValueError(f"{type(model).__name__} cannot switch to eager attention (no set_attn_implementation)")
    model.set_attn_implementation("eager")
    try:
        check_eager(model, "model")
        yield model
    finally:
        model.set_attn_implementation(original)


def _decode_logits(model: Any, prompt_ids: torch.Tensor, continuation: torch.Tensor) -> torch.Tensor:
    """float32 logits ``[T, V]`` at the T decode positions of ``prompt_ids`` + ``continuation[:-1]``."""
    ids = torch.cat([prompt_ids, continuation[:-1]])[None]  # [1, S + T - 1]
    device = next(model.parameters()).device
    n = continuation.numel()
    return model(input_ids=ids.to(device), use_cache=False, logits_to_keep=n).logits[0, -n:].float().cpu()


def _with_context(model: Any, prompt_ids: torch.Tensor, span: AddedSpan,
                  continuation: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Every layer's ``[H, T - 1]`` lookback ratios and the ``[T, V]`` logits of one teacher-forced pass."""
    ratios: list[torch.Tensor] = []
    with _layer_ratios(model, span, prompt_ids.numel(), continuation.numel(), ratios):
        logits = _decode_logits(model, prompt_ids, continuation)
    return ratios, logits


@torch.inference_mode()
def lookback_per_head(model: Any, prompt_ids: torch.Tensor, span: AddedSpan,
                      continuation: torch.Tensor) -> tuple[tuple[float, ...], ...]:
    """The Lookback-Lens ratio per layer and head, ``[L][H]``, each the mean over decode queries 1..T-1:
    :func:`context_reliance`'s ``lookback_per_head`` without the pass on the question alone (what a fitted
    measure, :class:`lab.health.context_validity.HeadReference`, reads).

    Raises:
        ValueError: as :func:`context_reliance`.
    """
    check_eager(model, "model")
    if continuation.numel() < 2:
        raise ValueError(f"continuation has {continuation.numel()} token(s); the lookback ratio needs at least 2")
    if span.end > prompt_ids.numel():
        raise ValueError(f"span=[{span.start}, {span.end}) must lie inside the {prompt_ids.numel()}-token prompt")
    ratios, _ = _with_context(model, prompt_ids, span, continuation)
    return tuple(tuple(r.mean(-1).tolist()) for r in ratios)


@torch.inference_mode()
def context_reliance(model: Any, prompt_ids: torch.Tensor, span: AddedSpan, question_ids: torch.Tensor,
                     continuation: torch.Tensor) -> ContextReliance:
    """Lookback ratio and context contrast of one prompt, teacher-forced on ``continuation``.

    Args:
        model: A transformers causal LM in eval mode with eager attention.
        prompt_ids: int64 ``[S]``, the prompt with its context (chat template applied).
        span: The context's positions in ``prompt_ids`` (:func:`lab.intervene.masks.twin_prompt_ids`).
        question_ids: int64 ``[S0]``, the same prompt without the context.
        continuation: int64 ``[T]``, T >= 2, the model's continuation of ``prompt_ids``.

    Returns:
        :class:`ContextReliance`.

    Raises:
        ValueError: a non-eager model, bad ids, T < 2, or a span not inside the prompt.
    """
    check_eager(model, "model")
    for name, t in (("prompt_ids", prompt_ids), ("question_ids", question_ids), ("continuation", continuation)):
        if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.numel() < 1 or t.dtype != torch.long:
            raise ValueError(f"{name} must be a non-empty int64 [L] tensor")
    if continuation.numel() < 2:
        raise ValueError(f"continuation has {continuation.numel()} token(s); the lookback ratio needs at least 2")
    if span.end > prompt_ids.numel():
        raise ValueError(f"span=[{span.start}, {span.end}) must lie inside the {prompt_ids.numel()}-token prompt")
    # 1. The prompt with its context: logits and every layer's lookback ratios in one pass.
    ratios, with_logits = _with_context(model, prompt_ids, span, continuation)
    # 2. The question alone, teacher-forced on the same continuation.
    without_logits = _decode_logits(model, question_ids, continuation)
    # 3. Aggregate by the fixed rule: means over heads and queries, then over layers.
    per_layer = tuple(float(r.mean()) for r in ratios)
    per_head = tuple(tuple(r.mean(-1).tolist()) for r in ratios)
    return ContextReliance(lookback_ratio=sum(per_layer) / len(per_layer), lookback_per_layer=per_layer,
                           contrast_bits=float(kl_bits(with_logits, without_logits).mean()),
                           gain_bits=float(answer_gain_bits(with_logits, without_logits, continuation).mean()),
                           n_context=len(span), n_decode=continuation.numel(), lookback_per_head=per_head)
