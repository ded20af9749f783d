"""The entropy tracker's statistics from a speculative decode: one target decode, both answers.

Speculative decoding's verify pass runs the target over the last committed token
and the drafted ones; at every position the round commits (the accepted draft
tokens and the correction or bonus token) its logits row is the target's own
next-token distribution given the committed prefix, exactly the row a plain
target-only decode would have computed at that position (up to float rounding: a
multi-token forward and one-token steps sum in a different order). And the tokens
are distributed as sampling the target alone (Leviathan et al. 2023, Theorem 1;
:mod:`lab.speculative.verify`). So the tracker's per-step statistics (raw entropy at
T = 1, varentropy, the filtered entropy, top alternatives) can be read off the
speculative run instead of a second, tracked decode:

* greedy: the same tokens and, per step, the same entropies as
  :func:`lab.tracker.track_generate` to float tolerance (the unit and integration
  tests check it on tiny models, SmolLM2 and the Qwen2.5-Coder pair);
* sampling: per-step statistics with the same distribution as the tracker's
  (a seeded statistical test with a negative control checks it), not the same
  numbers: the random draws are consumed differently.

The target's prefill can be given as a filled KV cache (``target_cache``, e.g. the
attention capture's), so a study prompt costs one target prefill and one decode.

Shapes: S = prompt length, m = positions one round commits, V = vocabulary size.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import torch

from lab.decode import check_decode_input, model_device
from lab.sampling import filter_logits
from lab.tracker.loop import DecodeRun, build_track_result
from lab.tracker.results import DecodeSettings, TrackResult
from lab.tracker.stats import StepRecorder

# Greedy equality of track_speculative and track_generate, per step. A verify pass over
# k + 1 positions and k + 1 one-token steps compute the same float32 logits in another
# summation order (matmul blocking, SDPA over 1 vs k + 1 queries), and the prefill of
# S - 1 positions is part of one over S when the capture fills the cache. Measured max
# |difference| over 24-32 greedy tokens, float32 on CPU: entropy 2.4e-6 bits
# (tiny Llama, V = 230), 7.6e-6 (SmolLM2-135M, V = 49,152), 4.3e-6 (Qwen2.5-Coder-1.5B
# with its 0.5B draft, V = 151,936); varentropy 1.0e-5, 1.4e-5 and 1.8e-5 bits^2. The
# tolerances are >= 13x and >= 27x those, and 1e-4 bits is far below any effect the study
# reads (its entropies are 0.2-8 bits). Half precision would need its own measurement.
GREEDY_ENTROPY_ATOL_BITS = 1e-4
GREEDY_VARENTROPY_ATOL_BITS2 = 5e-4
GREEDY_PROB_ATOL = 1e-5  # chosen-token probability: measured up to 1.9e-6 (SmolLM2)


def commit_recorder(recorder: StepRecorder, settings: DecodeSettings):
    """An ``on_commit`` hook for :func:`lab.speculative.loop.speculative_generate` feeding ``recorder``.

    Each committed row ``[V]`` (raw logits) goes to :meth:`StepRecorder.record` as a
    one-token decode step would: the raw row, the filtered row the token would be
    drawn from by plain sampling (:func:`lab.sampling.filter_logits`; the raw row
    when greedy) and the token.
    """
    sampling = settings.sampling

    def on_commit(logits: torch.Tensor, tokens: torch.Tensor) -> None:
        assert logits.shape[0] == tokens.shape[0], f"{logits.shape[0]} rows for {tokens.shape[0]} committed tokens"
        warped = filter_logits(logits, sampling) if settings.do_sample else logits  # [m, V]
        for j in range(tokens.shape[0]):
            recorder.record(logits[j : j + 1], warped[j : j + 1], tokens[j].reshape(1, 1))

    return on_commit


def track_speculative(target: Any, draft: Any, tokenizer: Any, input_ids: torch.Tensor, settings: DecodeSettings,
                      *, gamma: int = 4, target_cache: Any = None) -> tuple[TrackResult, Any]:
    """Decode speculatively and record the tracker's statistics at every committed position.

    Args:
        target: The target causal LM (p), eval mode.
        draft: A drafter (:func:`lab.speculative.draft_specs.make_draft`).
        tokenizer: The target's tokenizer (token texts, after the loop; its EOS ids end the decode).
        input_ids: ``[1, S]`` (or ``[S]``) int64 prompt ids.
        settings: The tracker's settings, as :func:`lab.tracker.track_generate` takes them
            (:class:`DecodeSettings`: budget, sampling filter, seed, alternatives kept); kept in
            the result. The seed seeds one ``torch.Generator`` on the target's device (the CPU
            for MPS) that drafting and verification share.
        gamma: Draft tokens per round, >= 1.
        target_cache: A KV cache already holding the prompt (see
            :func:`lab.speculative.loop.speculative_generate`), or None for a fresh prefill.

    Returns:
        ``(track, spec)``: a :class:`TrackResult` with one step per emitted token
        (``elapsed_s`` is the speculative run's, statistics included) and the
        :class:`~lab.speculative.results.SpeculativeResult` (alpha, rounds, per-token draft data).

    Raises:
        ValueError: as :func:`lab.tracker.track_generate`,
            :class:`lab.speculative.settings.SpeculativeSettings` and
            :func:`lab.speculative.loop.speculative_generate`.
        RuntimeError: NaN or +inf target logits at some step.
    """
    from lab.models.chat import eos_token_ids
    from lab.speculative.loop import speculative_generate
    from lab.speculative.settings import SpeculativeSettings

    spec_settings = SpeculativeSettings(max_new_tokens=settings.max_new_tokens, gamma=gamma, sampling=settings.sampling,
                                        eos_token_ids=eos_token_ids(target, tokenizer))
    ids = check_decode_input(target, input_ids, settings.max_new_tokens)
    used_seed = None
    generator = None
    if settings.do_sample:
        used_seed = settings.seed if settings.seed is not None else secrets.randbits(62)
        device = model_device(target)
        generator = torch.Generator(device=device if device.type != "mps" else "cpu").manual_seed(used_seed)
    recorder = StepRecorder(settings.top_alternatives, settings.do_sample)
    start = time.perf_counter()
    spec = speculative_generate(target, draft, ids.to(model_device(target)), spec_settings, generator=generator,
                                on_commit=commit_recorder(recorder, settings), target_cache=target_cache)
    stats = recorder.finish()  # statistics to the host, once
    run = DecodeRun(spec.tokens, spec.stopped_by, time.perf_counter() - start, *stats, vocab_size=recorder.vocab_size)
    return build_track_result(tokenizer, ids, run, settings, used_seed), spec
