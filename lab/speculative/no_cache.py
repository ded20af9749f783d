"""The speculative loop without KV caches: every forward re-reads the whole sequence.

What caching buys, measured: the seed's Part 3 compared a speculative loop that re-forwards
the whole sequence every round ("No cache: 100 tokens in 14.9s ... Cached: 100 tokens in
7.1s ... Speedup from caching: 2.12x"). :func:`no_cache_generate` is that loop, beside the
cached one (:func:`lab.speculative.loop.speculative_generate`), sharing everything but the
caching: the same draft loop (:func:`lab.speculative.drafts.draft_loop`), the same filter
on both sides, the same accept / resample step (:func:`lab.speculative.loop.accept`) and
the same round records. Only the forwards differ: each draft step forwards the committed
sequence plus the tokens drafted so far, and each verify pass forwards the committed
sequence plus the k drafts (keeping the last k + 1 rows), all with ``use_cache=False``.
There is no prefill (the first round's forwards read the prompt), so ``prefill_time_s``
is 0 and nothing is ever rolled back.

In greedy mode it emits exactly the cached loop's tokens (tested), up to float rounding
between a cached and a recomputed forward. Batch size 1; p = target, q = draft.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable

import torch

from lab.decode import check_decode_input, model_device, sync
from lab.ranges import GAMMA, check_value
from lab.sampling import SamplingConfig, sampling_probs
from lab.speculative.drafts import Drafter, draft_loop, empty_proposal
from lab.speculative.loop import accept, cut_at_eos, round_record
from lab.speculative.results import RoundRecord, SpeculativeResult
from lab.speculative.settings import GREEDY, SpeculativeSettings


def _fit(logits: torch.Tensor, width: int) -> torch.Tensor:
    """Draft logits ``[..., V_draft]`` cut or -inf-padded to the target's width (padding rows: q = 0)."""
    have = logits.shape[-1]
    if have > width:
        return logits[..., :width]
    if have < width:
        return torch.nn.functional.pad(logits, (0, width - have), value=float("-inf"))
    return logits


def no_cache_generate(target: Any, draft: Drafter, input_ids: torch.Tensor, *, max_new_tokens: int, gamma: int = 4,
                      sampling: SamplingConfig = GREEDY, generator: torch.Generator | None = None,
                      eos_token_ids: Iterable[int] | int | None = None,
                      on_round: Callable[[RoundRecord], None] | None = None) -> SpeculativeResult:
    """Speculative decoding with no KV cache on either side (the caching comparison's baseline).

    Args:
        target: The transformers causal LM that verifies (p).
        draft: A drafter that runs a transformers model (its ``facts().model``: a model draft,
            an early-exit draft); that model drafts, re-reading the sequence at every step.
        input_ids: int64 ``[1, S]`` prompt ids.
        max_new_tokens: Budget of new tokens, >= 1.
        gamma: Draft tokens per round, >= 1 (at most ``remaining - 1``, as the cached loop).
        sampling: The filter for both sides; default greedy.
        generator: Random source (sampling mode).
        eos_token_ids: Ids that end generation.
        on_round: Called with each finished round's record (the bench times the first one).

    Returns:
        :class:`~lab.speculative.results.SpeculativeResult` (``prefill_time_s`` 0).

    Raises:
        ValueError: gamma < 1, a drafter without a model (prompt lookup), or the checks of
            :func:`lab.decode.check_decode_input` (batch size, empty prompt, budget, context).
    """
    check_value("gamma", gamma, GAMMA)
    draft_model = draft.facts().model
    if draft_model is None:
        raise ValueError(f"draft {draft.name!r} has no model to re-forward; the no-cache loop needs a model draft")
    input_ids = check_decode_input(target, input_ids, max_new_tokens)
    settings = SpeculativeSettings(max_new_tokens, gamma, sampling, eos_token_ids=eos_token_ids)
    width, dev = int(target.config.vocab_size), model_device(target)
    draft_dev = model_device(draft_model)
    prompt_len = input_ids.shape[1]
    seq = torch.empty(prompt_len + max_new_tokens, dtype=torch.long, device=dev)  # committed ids
    seq[:prompt_len] = input_ids[0]
    n, rounds, stopped_by = prompt_len, [], "max_new_tokens"
    t_start = time.perf_counter()
    with torch.inference_mode():
        while n - prompt_len < max_new_tokens:
            g = min(gamma, max_new_tokens - (n - prompt_len) - 1)
            # 1. draft: every step forwards the committed sequence and the drafts so far, no cache
            context = [seq[: n - 1].to(draft_dev)]

            def step(feed: torch.Tensor) -> torch.Tensor:
                context[0] = torch.cat([context[0], feed.to(draft_dev)])  # [L]
                out = draft_model(input_ids=context[0].unsqueeze(0), use_cache=False, logits_to_keep=1)
                return _fit(out.logits[0, -1], width)  # [V]

            prop = (draft_loop(step, seq[n - 1 : n], g, width, draft_dev, sampling=sampling, generator=generator,
                               eos_token_ids=settings.eos_token_ids) if g >= 1 else empty_proposal(width, "budget", dev))
            prop = cut_at_eos(prop, settings.eos_token_ids)
            k = int(prop.tokens.shape[0])
            # 2. verify: one target forward over the whole sequence and the k drafts, the last k + 1 rows kept
            t0 = time.perf_counter()
            full = torch.cat([seq[:n], prop.tokens.to(dev)]).unsqueeze(0)  # [1, n + k]
            logits = target(input_ids=full, use_cache=False, logits_to_keep=k + 1).logits[0]  # [k + 1, V]
            sync(dev)
            verify_s = time.perf_counter() - t0
            # 3. accept / resample and commit (nothing to roll back)
            n_acc, next_token, next_kind, emitted = accept(prop, logits, settings, generator)
            seq[n : n + len(emitted)] = torch.tensor(emitted, dtype=torch.long, device=dev)
            n += len(emitted)
            rounds.append(round_record(len(rounds), prop, n_acc, next_token, next_kind, verify_s,
                                       target_probs=sampling_probs(logits[:k], settings.sampling) if k else None))
            if on_round is not None:
                on_round(rounds[-1])
            if emitted[-1] in settings.eos_token_ids:
                stopped_by = "eos"
                break
    total = time.perf_counter() - t_start
    return SpeculativeResult(
        tokens=seq[prompt_len:n].tolist(), rounds=rounds, gamma=gamma, prompt_length=prompt_len, stopped_by=stopped_by,
        prefill_time_s=0.0, total_time_s=total, draft_name=f"{draft.name} (no cache)", sampling=sampling,
        adaptive=None, gamma_policy=None)
