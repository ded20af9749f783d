"""Entropy tracker: per-step uncertainty of a decode, raw and as sampled.

At every decode step the tracker records, from the one logits row the model
already produced:

* the Shannon entropy of the model's own next-token distribution (raw logits,
  temperature 1), its normalized entropy ``H / log2 V`` and its varentropy;
* the entropy of the distribution the token was actually drawn from, after the
  temperature, top-k and top-p filter (0 for greedy decoding, which draws from a
  point mass on the argmax);
* the top-k alternatives under the raw distribution with their probabilities, and
  the chosen token with its raw probability.

The tracker owns no loop. It decodes with the lab's decode core,
:func:`lab.decode.generate` (one prefill, then one-token decodes with a KV cache,
in the style of gpt-fast; the same loop is the target-only baseline of ``lab
bench``), and observes each step through the core's ``on_step`` hook with a
:class:`~lab.tracker.stats.StepRecorder`. Tokens are chosen by the lab's one
sampling filter (:func:`lab.sampling.filter_logits`: temperature ->
top-k -> top-p, the operations of transformers' warpers, in the order
``generate`` applies them), so "the distribution sampled from" here is exactly the
distribution speculative decoding verifies against.

Why an own loop instead of a ``LogitsProcessor`` inside ``generate``: in
transformers 5.24, ``generate`` merges user processors into a list whose content
depends on the model's ``generation_config`` (repetition penalties, forced tokens,
``min_new_tokens`` ...), so what a custom processor sees, and whether "raw" is
raw, would depend on the model. Here ``logits`` are exactly the model's output and
nothing from ``generation_config`` is applied: the numbers describe the model, not
a model-specific decoding recipe.

Cost: the statistics stay on the device as 0-d tensors and move to the host once,
after the loop (where NaN logits are detected and raised); token texts are decoded
after the loop too. The only per-step host sync is the one the untracked loop also
needs (the EOS check). ``lab bench-tracker`` measures the overhead.

References: Shannon (1948) for entropy; varentropy as the variance of the
surprisal (Kontoyiannis & Verdu 2013), used per token by entropix-style samplers;
top-k sampling (Fan et al. 2018); nucleus / top-p sampling (Holtzman et al. 2020).

Shapes: B = batch (must be 1), S = prompt length, V = vocabulary size.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from dataclasses import dataclass
from typing import Any

import torch

from lab.decode import check_decode_input, generate, model_device
from lab.tracker.results import DecodeSettings, StepRecord, TrackResult
from lab.tracker.stats import StepRecorder

logger = logging.getLogger(__name__)


@dataclass
class DecodeRun:
    """Raw output of :func:`run_decode`.

    Attributes:
        new_token_ids: Generated ids.
        stop_reason: ``"eos"`` or ``"max_new_tokens"``.
        elapsed_s: Wall time of the loop (prefill, decode and, if on, the statistics and
            their one copy to the host).
        stats: Per step ``[H, H_norm, varentropy, H_sampled, p_chosen]`` (bits), or
            ``None`` when not recording.
        alt_ids, alt_probs: Per step the raw top-k ids and probabilities.
        vocab_size: V of the logits rows (0 when not recording).
    """

    new_token_ids: list[int]
    stop_reason: str
    elapsed_s: float
    stats: list[list[float]] | None = None
    alt_ids: list[list[int]] | None = None
    alt_probs: list[list[float]] | None = None
    vocab_size: int = 0


def run_decode(model: Any, input_ids: torch.Tensor, settings: DecodeSettings, *, eos_ids: set[int],
               record: bool, seed: int | None) -> DecodeRun:
    """The tracked (or untracked) decode of :func:`track_generate` and ``lab bench-tracker``.

    The loop is :func:`lab.decode.generate`; with ``record`` a
    :class:`~lab.tracker.stats.StepRecorder` observes every step.

    Args:
        input_ids: ``[1, S]`` int64.
        settings: Decoding settings.
        eos_ids: Tokens that stop the decode; an empty set decodes exactly
            ``max_new_tokens`` tokens (the benchmark does this).
        record: Whether to run the tracker's statistics.
        seed: Seed of the sampling generator, created on the model's device
            (ignored when greedy); the baseline given a generator in the same state
            emits the same tokens.

    Returns:
        A :class:`DecodeRun`.

    Raises:
        ValueError: sampling without a seed, or bad ids / budget / context.
    """
    if settings.do_sample and seed is None:
        raise ValueError("seed=None: run_decode needs an explicit seed when sampling (track_generate draws one)")
    generator = None
    if settings.do_sample:
        generator = torch.Generator(device=model_device(model))
        generator.manual_seed(seed)
    recorder = StepRecorder(settings.top_alternatives, settings.do_sample) if record else None
    start = time.perf_counter()
    out = generate(model, input_ids, max_new_tokens=settings.max_new_tokens, sampling=settings.sampling,
                   generator=generator, eos_token_ids=eos_ids,
                   on_step=recorder.record if recorder is not None else None)
    stats = recorder.finish() if recorder is not None else (None, None, None)  # statistics to the host, once
    elapsed = time.perf_counter() - start  # the host copy is part of the tracker's cost
    return DecodeRun(out.tokens, out.stop_reason, elapsed, *stats,
                     vocab_size=recorder.vocab_size if recorder is not None else 0)


def _token_pieces(tokenizer: Any, ids: list[int]) -> list[str]:
    """Text each generated token adds to the decoded output (specials kept).

    Decoding prefixes keeps multi-byte characters split over byte-level tokens
    whole: the piece of a token that completes a character carries it, the pieces
    before it are empty. Falls back to a single-token decode where a prefix's text
    is not a prefix of the next (tokenizers that rewrite whitespace).
    """
    pieces: list[str] = []
    prev = ""
    for i in range(len(ids)):
        text = tokenizer.decode(ids[: i + 1], skip_special_tokens=False)
        if text.startswith(prev) and not text.endswith("\ufffd"):
            pieces.append(text[len(prev):])
            prev = text
        elif text.endswith("\ufffd") and i + 1 < len(ids):
            pieces.append("")  # incomplete character; the next token completes it
        elif text.startswith(prev):
            pieces.append(text[len(prev):])  # the decode ended inside a character: show what is there
            prev = text
        else:
            pieces.append(tokenizer.decode([ids[i]], skip_special_tokens=False))
            prev = text
    return pieces


def track_generate(model: Any, tokenizer: Any, input_ids: torch.Tensor, *, max_new_tokens: int = 64,
                   temperature: float = 0.0, top_p: float = 1.0, top_k: int | None = None,
                   seed: int | None = None, top_alternatives: int = 5) -> TrackResult:
    """Decode from ``input_ids`` and record the entropy of every step.

    Args:
        model: A transformers causal LM in eval mode (any device).
        tokenizer: Its tokenizer (decodes token texts after the loop).
        input_ids: ``[1, S]`` (or ``[S]``) int64 prompt ids, e.g. from
            :func:`lab.models.loading.encode_chat`.
        max_new_tokens, temperature, top_p, top_k, seed, top_alternatives: See
            :class:`DecodeSettings`. ``temperature=0`` is greedy; top-p/top-k then
            have no effect.

    Returns:
        A :class:`TrackResult`. Stops at an EOS id (:func:`lab.models.loading.eos_token_ids`)
        or after ``max_new_tokens``.

    Raises:
        ValueError: empty prompt, batch size > 1, prompt + ``max_new_tokens`` past
            the model's context (:func:`lab.decode.check_context`), or a setting out
            of range (the message names the argument and echoes the value).
    """
    from lab.models.chat import eos_token_ids

    settings = DecodeSettings(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                              top_k=top_k, seed=seed, top_alternatives=top_alternatives)
    ids = check_decode_input(model, input_ids, settings.max_new_tokens)  # before any work
    if not settings.do_sample and (settings.top_k is not None or settings.top_p < 1.0):
        logger.info("temperature=0 decodes greedily; top_k=%s and top_p=%s have no effect",
                    settings.top_k, settings.top_p)
    used_seed = None
    if settings.do_sample:
        used_seed = settings.seed if settings.seed is not None else secrets.randbits(62)
    run = run_decode(model, ids, settings, eos_ids=eos_token_ids(model, tokenizer), record=True, seed=used_seed)
    return build_track_result(tokenizer, ids, run, settings, used_seed)


def build_track_result(tokenizer: Any, ids: torch.Tensor, run: DecodeRun, settings: DecodeSettings,
                       seed: int | None) -> TrackResult:
    """A :class:`TrackResult` from a recorded run: NaN check, token texts, one record per step.

    Shared by :func:`track_generate` and :func:`lab.tracker.track_speculative`, so both
    turn the recorder's rows into steps the same way.

    Raises:
        RuntimeError: NaN or +inf logits at some step (the entropy there is undefined).
    """
    new_ids, rows, alt_ids, alt_probs = run.new_token_ids, run.stats, run.alt_ids, run.alt_probs
    assert rows is not None and alt_ids is not None and alt_probs is not None
    assert len(rows) == len(new_ids), f"{len(rows)} records for {len(new_ids)} tokens"
    bad = [i for i, row in enumerate(rows) if not all(math.isfinite(x) for x in row)]
    if bad:
        raise RuntimeError(f"the model produced NaN or +inf logits at decode step(s) {bad[:10]}; "
                           "the entropy there is undefined (try float32: --dtype float32)")

    # Token texts are decoded once, after the loop.
    pieces = _token_pieces(tokenizer, new_ids)
    alt_text = {t: tokenizer.decode([t], skip_special_tokens=False) for t in {t for row in alt_ids for t in row}}
    vocab_size = run.vocab_size
    log2_v = math.log2(vocab_size) if vocab_size > 1 else math.nan
    prompt_len = ids.shape[1]
    steps = []
    for i, (tid, (h, h_norm, varent, h_sampled, p_chosen)) in enumerate(zip(new_ids, rows)):
        steps.append(StepRecord(
            position=prompt_len + i, token_id=tid, token_text=pieces[i], entropy_bits=h,
            normalized_entropy=h_norm, varentropy_bits2=varent, sampled_entropy_bits=h_sampled,
            sampled_normalized_entropy=h_sampled / log2_v if vocab_size > 1 else 0.0,
            chosen_prob=p_chosen,
            alternatives=[(a, alt_text[a], p) for a, p in zip(alt_ids[i], alt_probs[i])],
        ))
    return TrackResult(
        steps=steps, prompt_ids=ids.cpu(), new_token_ids=new_ids,
        text=tokenizer.decode(new_ids, skip_special_tokens=True), settings=settings,
        stop_reason=run.stop_reason, elapsed_s=run.elapsed_s, seed=seed, vocab_size=vocab_size,
    )
