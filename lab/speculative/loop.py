"""The speculative decode loop and the target-only baseline.

Each round (:func:`speculative_round`) has three phases (Leviathan et al. 2023,
Algorithm 1; Chen et al. 2023, Algorithm 2), after a gamma for the round is chosen by
a :class:`~lab.speculative.policies.GammaPolicy` (fixed by default): (1) draft: the
drafter proposes up to gamma tokens; (2) verify: the target scores the last committed
token and every draft token in one forward pass over gamma + 1 positions; (3) accept /
resample: :func:`lab.speculative.verify.verify` (or its greedy variant) keeps a prefix
and adds a correction or bonus token, and both KV caches are rolled back to the
committed sequence. :func:`speculative_generate` prefills, runs rounds until EOS or
the budget, and returns the rounds; the result derives every count from them.

The target's prefill, forwards, input checks and KV cache come from the decode core
:mod:`lab.decode`, which also runs the target-only baseline
(:func:`target_generate`), so both loops check, time and cache the same way. Drafters
are built from spec strings in :mod:`lab.speculative.draft_specs`.

KV-cache invariant (tested): between rounds the target's cache holds exactly the
committed sequence except its last token, whose key/value is computed by the next
verify pass (so feeding that token reproduces a full recomputation). No rejected
draft token is ever left in a cache. Every drafter is offered this cache
(:meth:`~lab.speculative.drafts.Drafter.use_target_cache`); one that drafts on the
target's own first layers (:class:`~lab.speculative.self_draft.EarlyExitDraft`)
returns it as lent, n - 1 positions (asserted after every proposal). Sliding-window
layers stay croppable past their window through transformers' past recording
(:func:`lab.decode.enable_rollback`).

Batch size 1 only. p = target, q = draft throughout.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any, Callable, Iterable

import torch

from lab.decode import (check_decode_input, check_rollback_supported, enable_rollback, forward, generate,
                        model_device, new_cache, prefill, rollback_cache)
from lab.sampling import SamplingConfig, apply_processors, sampling_probs
from lab.speculative.drafts import Drafter, Proposal, empty_proposal
from lab.speculative.policies import FixedGamma
from lab.speculative.results import RoundRecord, SpeculativeResult, TargetOnlyResult
from lab.speculative.settings import GREEDY, SpeculativeSettings
from lab.speculative.verify import verify, verify_greedy

logger = logging.getLogger(__name__)


def target_generate(target: Any, input_ids: torch.Tensor, *, max_new_tokens: int, sampling: SamplingConfig = GREEDY,
                    generator: torch.Generator | None = None, logits_processor: Any = None,
                    eos_token_ids: Iterable[int] | None = None) -> TargetOnlyResult:
    """Plain KV-cache decoding with the target alone (the baseline of ``lab bench``).

    The decode core's loop, :func:`lab.decode.generate`, unobserved: the same loop
    the entropy tracker observes, with the same sampling filter and processors as
    :func:`speculative_generate`. So in greedy mode all three emit the same tokens,
    and in sampling mode this and the tracker emit the same tokens from the same
    generator state.

    Args:
        target: The transformers causal LM (p).
        input_ids: int64 ``[1, S]`` prompt ids (batch size 1).
        max_new_tokens: Budget of new tokens, >= 1.
        sampling: The filter (:class:`~lab.sampling.SamplingConfig`); default greedy.
        generator: Random source (sampling mode).
        logits_processor: transformers ``LogitsProcessorList`` for the logits, or None.
        eos_token_ids: Ids that end generation.

    Returns:
        :class:`~lab.speculative.results.TargetOnlyResult`.

    Raises:
        ValueError: batch size > 1, an empty prompt, max_new_tokens < 1, or prompt +
            max_new_tokens past the target's context (:func:`lab.decode.check_decode_input`).
    """
    out = generate(target, input_ids, max_new_tokens=max_new_tokens, sampling=sampling, generator=generator,
                   eos_token_ids=eos_token_ids, logits_processor=logits_processor)
    return TargetOnlyResult(out.tokens, out.prefill_time_s, out.forward_time_s, out.total_time_s, out.stop_reason)


def cut_at_eos(proposal: Proposal, eos_token_ids: frozenset[int]) -> Proposal:
    """The proposal up to and including its first EOS token (nothing after an EOS is ever tested, whoever
    drafted it), with stop reason ``"eos"``; the proposal itself when no EOS comes before its last token."""
    k = int(proposal.tokens.shape[0])
    if not eos_token_ids or not k:
        return proposal
    cut = next((i for i, t in enumerate(proposal.tokens.tolist()) if t in eos_token_ids), k - 1)
    if cut == k - 1:
        return proposal
    p = proposal
    return Proposal(p.tokens[: cut + 1], p.probs[: cut + 1], p.entropies[: cut + 1], p.normalized_entropies[: cut + 1],
                    "eos", p.forward_time_s, p.n_forwards, p.source)


def prefilled_cache(target: Any, prompt_ids: torch.Tensor, target_cache: Any = None) -> tuple[Any, float]:
    """The target's KV cache holding the prompt except its last token (the first verify pass feeds it).

    Past recording is on (:func:`lab.decode.enable_rollback`), so each round can roll it back.

    Args:
        target: The target causal LM.
        prompt_ids: int64 ``[S]`` prompt ids on the target's device.
        target_cache: A cache that already holds the prompt (all S positions or the first
            S - 1), cropped to S - 1 here; None = a new cache, prefilled.

    Returns:
        ``(cache, prefill seconds)``; 0.0 seconds for a given cache.

    Raises:
        ValueError: a ``target_cache`` that holds neither S nor S - 1 positions.
    """
    prompt_len = int(prompt_ids.shape[0])
    if target_cache is None:
        cache, prefill_s = new_cache(target), 0.0
        if prompt_len > 1:
            _, prefill_s = prefill(target, prompt_ids[: prompt_len - 1].unsqueeze(0), cache)
        enable_rollback(cache)  # from here on the cache records what a rollback needs
        return cache, prefill_s
    held = target_cache.get_seq_length()
    if held not in (prompt_len, prompt_len - 1):
        raise ValueError(f"target_cache holds {held} positions; it must hold the prompt's {prompt_len} "
                         f"(or {prompt_len - 1})")
    enable_rollback(target_cache)
    rollback_cache(target_cache, prompt_len - 1)
    return target_cache, 0.0


def speculative_round(target: Any, draft: Drafter, cache: Any, seq: torch.Tensor, n: int, gamma: int,
                      settings: SpeculativeSettings, *, generator: torch.Generator | None = None,
                      on_commit: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
                      index: int = 0) -> RoundRecord:
    """One round: draft up to ``gamma`` tokens, verify them in one target forward, accept / resample, roll back.

    Args:
        target: The target causal LM (p).
        draft: The drafter (q), reset for this sequence and offered ``cache``.
        cache: The target's KV cache (past recording on), holding ``seq[: n - 1]``, or nothing: then
            this round's verify pass is also the prompt's prefill (fused; the record's
            ``prefill_positions``). Left holding the new committed sequence minus its last token.
        seq: int64 ``[S + max_new_tokens]`` buffer of committed ids, ``seq[:n]`` committed; the
            round writes the tokens it emits into ``seq[n:]``.
        n: Committed length, >= 1.
        gamma: Draft tokens this round, >= 0 (0: only the target's next token).
        settings: The decode's settings (:class:`~lab.speculative.settings.SpeculativeSettings`); the round
            reads its sampling, adaptive stop, EOS ids and logits processor.
        generator: Random source of the draft and of the accept / resample step (sampling mode).
        on_commit: As in :func:`speculative_generate`.
        index: The round's 0-based index, for the record.

    Returns:
        The :class:`~lab.speculative.results.RoundRecord`; its ``emitted`` tokens are
        ``seq[n : n + len(emitted)]``.

    Raises:
        ValueError: the draft proposed probability rows of another width than its ``vocab_size``.
    """
    eos, width, dev = settings.eos_token_ids, int(draft.vocab_size), seq.device
    held = cache.get_seq_length()  # n - 1, or 0 when this round's verify pass is also the prefill
    # 1. draft: up to gamma tokens from the drafter's own distribution q
    if gamma >= 1:
        prop = draft.propose(seq[:n], gamma, sampling=settings.sampling, generator=generator,
                             adaptive=settings.adaptive, eos_token_ids=eos)
    else:
        prop = empty_proposal(width, "budget", dev)
    assert cache.get_seq_length() == held and held in (0, n - 1), (
        f"the drafter left the target's cache at {cache.get_seq_length()} positions, not {held} (n - 1 = {n - 1})")
    prop = cut_at_eos(prop, eos)
    k = int(prop.tokens.shape[0])
    if k and prop.probs.shape[-1] != width:
        raise ValueError(f"draft proposed rows of width {prop.probs.shape[-1]}, expected {width}")
    # 2. verify: one target forward over what its cache lacks (the last committed token, or the whole
    # prompt when the prefill is fused in) and the k drafts; rows for the last k + 1 positions
    raw_logits, verify_s = forward(target, torch.cat([seq[held:n], prop.tokens.to(dev)]).unsqueeze(0), cache,
                                   logits_to_keep=k + 1)  # [k + 1, V], what on_commit sees
    logits = apply_processors(settings.logits_processor, seq[:n], prop.tokens, raw_logits)  # [k + 1, V]
    # 3. accept / resample, commit, and roll both caches back to the committed sequence minus its last token
    n_acc, next_token, next_kind, emitted = accept(prop, logits, settings, generator)
    m = len(emitted)
    seq[n : n + m] = torch.tensor(emitted, dtype=torch.long, device=dev)
    if on_commit is not None:  # row j predicted emitted[j] from the committed prefix
        on_commit(raw_logits[:m], seq[n : n + m])
    rollback_cache(cache, n + m - 1)
    draft.commit(n_acc)
    return round_record(index, prop, n_acc, next_token, next_kind, verify_s, prefill_positions=n - 1 - held,
                        target_probs=sampling_probs(logits[:k], settings.sampling) if k else None)


def accept(prop: Proposal, logits: torch.Tensor, settings: SpeculativeSettings,
           generator: torch.Generator | None = None) -> tuple[int, int | None, str, list[int]]:
    """Phase 3 of a round: keep a prefix of the proposal and add a correction or bonus token.

    Args:
        prop: The (EOS-cut) proposal of k tokens (q = its probs).
        logits: float ``[k + 1, V]`` target logits (processors applied) at the last committed
            position and after each draft token (p after the filter).
        settings: The round's sampling and EOS ids.
        generator: Random source of the accept / resample step (sampling mode).

    Returns:
        ``(n_accepted, next_token or None, next_kind, emitted ids)``; ``next_kind`` is
        ``"bonus"``, ``"correction"`` or ``"none"`` (an accepted EOS ends the round).
    """
    k = int(prop.tokens.shape[0])
    if settings.sampling.greedy:
        n_acc, nxt = verify_greedy(prop.tokens, logits)
    else:
        n_acc, nxt = verify(prop.tokens, prop.probs, sampling_probs(logits, settings.sampling), generator=generator)
    kept = prop.tokens[:n_acc].tolist()
    next_token: int | None = nxt
    next_kind = "bonus" if n_acc == k else "correction"
    if n_acc and kept[-1] in settings.eos_token_ids:  # an accepted EOS ends the round: no bonus
        next_token, next_kind = None, "none"
    return n_acc, next_token, next_kind, kept + ([next_token] if next_token is not None else [])


def round_record(index: int, prop: Proposal, n_acc: int, next_token: int | None, next_kind: str,
                 verify_s: float, *, prefill_positions: int = 0, target_probs: torch.Tensor | None = None) -> RoundRecord:
    """The :class:`~lab.speculative.results.RoundRecord` of a finished round (``prefill_positions``: prompt
    positions its verify pass also filled, the fused prefill; ``target_probs``: float ``[k, V]`` probabilities
    p the accept step used at the k draft positions, or None to record no p(x) / q(x))."""
    k = int(prop.tokens.shape[0])
    tested = min(k, n_acc + 1) if next_kind != "none" else n_acc
    p_x: list[float] = []
    q_x: list[float] = []
    if target_probs is not None and k:
        ids = prop.tokens.unsqueeze(-1)  # [k, 1]
        p_x = target_probs.gather(-1, ids.to(target_probs.device)).squeeze(-1).float().tolist()  # [k]
        q_x = prop.probs.gather(-1, ids.to(prop.probs.device)).squeeze(-1).float().tolist()  # [k]
    return RoundRecord(
        round=index, proposed=prop.tokens.tolist(), n_accepted=n_acc, next_token=next_token, next_kind=next_kind,
        stop_reason=prop.stop_reason, draft_entropies=prop.entropies.tolist(),
        draft_normalized_entropies=prop.normalized_entropies.tolist(), accepted_mask=[i < n_acc for i in range(k)],
        tested_mask=[i < tested for i in range(k)], draft_time_s=prop.forward_time_s, verify_time_s=verify_s,
        n_draft_forwards=prop.n_forwards, prefill_positions=prefill_positions, target_probs=p_x, draft_probs=q_x,
        draft_source=prop.source)


def speculative_generate(target: Any, draft: Drafter, input_ids: torch.Tensor, settings: SpeculativeSettings, *,
                         generator: torch.Generator | None = None,
                         on_round: Callable[[RoundRecord, torch.Tensor, Any], None] | None = None,
                         on_commit: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
                         target_cache: Any = None) -> SpeculativeResult:
    """Generate with speculative decoding; the output is distributed as sampling the target alone.

    With ``settings.fuse_prefill`` (and no ``target_cache``, and a drafter that keeps its own
    cache: ``draft.facts().drafts_on_target_cache`` False), the target's prefill is not a pass of
    its own: the draft proposes first and the first verify pass runs over the prompt and the draft
    tokens together, as transformers' assisted generation does. That saves one target pass per
    generation (a verify over gamma + 1 positions costs 1.3-2.3 target steps on the lab's CPUs);
    the tokens are the same, the cache ends the same. The fused pass is then the result's
    ``prefill_time_s`` (it also verified the first round's drafts).

    Args:
        target: The transformers causal LM that verifies (p).
        draft: A :class:`~lab.speculative.drafts.Drafter` (q; :func:`lab.speculative.draft_specs.make_draft`).
        input_ids: int64 ``[1, S]`` prompt ids (batch size 1).
        settings: Budget, gamma and gamma policy, sampling filter (both sides), adaptive stop,
            logits processor, EOS ids and prefill fusion
            (:class:`~lab.speculative.settings.SpeculativeSettings`, validated there).
        generator: Random source (sampling mode); seed it for reproducible runs.
        on_round: Called after each round with ``(record, committed_ids [n], target_cache)``; must not modify them.
        on_commit: Called once per round with ``(target_logits [m, V], tokens [m])``: the target's
            raw logits (before ``logits_processor``, T = 1) at the m positions the round committed,
            row j predicting ``tokens[j]`` from the committed prefix (the entropy tracker's view,
            :func:`lab.tracker.speculative.track_speculative`); must not modify them.
        target_cache: A target KV cache already holding the prompt, filled with past recording on
            (:func:`prefilled_cache`); None = a new cache and a prefill.

    Returns:
        :class:`~lab.speculative.results.SpeculativeResult`.

    Raises:
        ValueError: ``settings`` not a :class:`~lab.speculative.settings.SpeculativeSettings`, batch
            size > 1, an empty prompt, prompt + max_new_tokens past the target's context, a draft
            whose vocabulary width differs, a target whose KV cache cannot be rolled back
            (recurrent layers), or a ``target_cache`` that does not hold S or S - 1 positions.
    """
    if not isinstance(settings, SpeculativeSettings):
        raise ValueError(f"settings={settings!r} must be a lab.speculative.settings.SpeculativeSettings")
    max_new_tokens, gamma = settings.max_new_tokens, settings.gamma
    input_ids = check_decode_input(target, input_ids, max_new_tokens)
    check_rollback_supported(target)
    policy = settings.gamma_policy if settings.gamma_policy is not None else FixedGamma()
    if int(draft.vocab_size) != int(target.config.vocab_size):
        raise ValueError(f"draft vocab width {int(draft.vocab_size)} differs from the target's "
                         f"vocab_size={int(target.config.vocab_size)}")
    prompt_len = input_ids.shape[1]
    seq = torch.empty(prompt_len + max_new_tokens, dtype=torch.long, device=model_device(target))  # committed ids
    seq[:prompt_len] = input_ids[0]
    n, rounds, stopped_by = prompt_len, [], "max_new_tokens"
    draft.reset()
    facts = draft.facts()
    fused = settings.fuse_prefill and target_cache is None and prompt_len > 1 and not facts.drafts_on_target_cache
    t_start = time.perf_counter()
    with torch.inference_mode():
        if fused:  # the first verify pass carries the prompt: one target pass fewer
            cache, prefill_s = new_cache(target), 0.0
            enable_rollback(cache)
        else:
            cache, prefill_s = prefilled_cache(target, seq[:prompt_len], target_cache)
        draft.use_target_cache(cache)  # an early-exit draft drafts on this cache's first layers
        while n - prompt_len < max_new_tokens:
            round_gamma = policy.next_gamma(rounds, gamma)  # from the finished rounds only
            assert 1 <= round_gamma <= gamma, f"gamma policy returned {round_gamma}, outside [1, {gamma}]"
            g = min(round_gamma, max_new_tokens - (n - prompt_len) - 1)  # accepted + 1 must fit the budget
            rounds.append(speculative_round(target, draft, cache, seq, n, g, settings, generator=generator,
                                            on_commit=on_commit, index=len(rounds)))
            n += len(rounds[-1].emitted)
            if facts.observes_rounds:  # a drafter that chooses per round learns the round's costs and acceptance
                if not rounds[-1].draft_source:  # the budget left no room to draft: nobody did
                    rounds[-1] = replace(rounds[-1], draft_source="none")
                draft.observe(rounds[-1])
            if on_round is not None:
                on_round(rounds[-1], seq[:n], cache)
            if rounds[-1].emitted[-1] in settings.eos_token_ids:
                stopped_by = "eos"
                break
    total = time.perf_counter() - t_start
    if fused and rounds:
        prefill_s = rounds[0].verify_time_s  # the fused pass (the prompt and the first round's drafts)
    return SpeculativeResult(
        tokens=seq[prompt_len:n].tolist(), rounds=rounds, gamma=gamma, prompt_length=prompt_len, stopped_by=stopped_by,
        prefill_time_s=prefill_s, total_time_s=total, draft_name=draft.name, sampling=settings.sampling,
        adaptive=settings.adaptive.describe() if settings.adaptive is not None else None,
        gamma_policy=settings.gamma_policy.describe() if settings.gamma_policy is not None else None)
