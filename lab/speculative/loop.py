"""The speculative decode loop, a plain target-only loop, and draft construction.

Each round has three phases (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023,
Algorithm 2): (1) draft: the drafter proposes up to gamma tokens; (2) verify: the
target scores the last committed token and every draft token in one forward pass
over gamma + 1 positions; (3) accept / resample: :func:`lab.speculative.verify.verify`
(or its greedy variant) keeps a prefix and adds a correction or bonus token, and
both KV caches are rolled back to the committed sequence.

KV-cache invariant (tested): between rounds the target's cache holds exactly the
committed sequence except its last token, whose key/value is computed by the next
verify pass (so feeding that token reproduces a full recomputation). No rejected
draft token is ever left in a cache.

Batch size 1 only. p = target, q = draft throughout.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch

from lab.speculative.drafts import (AdaptiveDraftLength, Drafter, PromptLookupDraft, Proposal, _sync,
                                    early_exit_draft, empty_proposal, model_draft, rollback_cache)
from lab.speculative.sampling import SamplingConfig, apply_processors, sample, sampling_probs
from lab.speculative.theory import accepted_length_pmf
from lab.speculative.verify import verify, verify_greedy

logger = logging.getLogger(__name__)


@dataclass
class RoundRecord:
    """One draft-verify-accept round.

    Attributes:
        round: 0-based round index.
        proposed: draft token ids proposed (k <= gamma).
        n_accepted: leading draft tokens kept.
        next_token: the correction (a draft token was rejected) or bonus (all kept)
            token, or None when an accepted EOS ended the round.
        next_kind: ``"correction"``, ``"bonus"`` or ``"none"``.
        stop_reason: why drafting stopped (see :data:`lab.speculative.drafts.STOP_REASONS`).
        draft_entropies: entropy in bits of the draft's distribution per proposed token.
        draft_normalized_entropies: the same over log2 V, in [0, 1].
        accepted_mask: per proposed token, whether it was kept.
        tested_mask: per proposed token, whether the target tested it (tokens after
            the first rejection, or after an accepted EOS, are not tested).
        draft_time_s / verify_time_s: forward-pass wall time of the draft / target.
        n_draft_forwards: draft forward passes this round.
    """

    round: int
    proposed: list[int]
    n_accepted: int
    next_token: int | None
    next_kind: str
    stop_reason: str
    draft_entropies: list[float]
    draft_normalized_entropies: list[float]
    accepted_mask: list[bool]
    tested_mask: list[bool]
    draft_time_s: float
    verify_time_s: float
    n_draft_forwards: int

    @property
    def emitted(self) -> list[int]:
        kept = self.proposed[: self.n_accepted]
        return kept + ([self.next_token] if self.next_token is not None else [])


@dataclass
class SpeculativeResult:
    """The outcome of :func:`speculative_generate`.

    Acceptance figures are raw counts first, rates derived: ``alpha`` =
    ``n_accepted / n_drafted_tested`` (only tokens the target actually tested),
    ``tau`` = mean tokens emitted per round (accepted + correction/bonus; compare with
    :func:`lab.speculative.theory.expected_tokens_per_round`).

    Attributes:
        tokens: new token ids (the prompt excluded), at most max_new_tokens.
        rounds: per-round records.
        gamma: the maximum draft length.
        prompt_length: prompt tokens.
        n_drafted: tokens proposed; n_drafted_tested: of those, tested; n_accepted: kept.
        accepted_length_histogram: ``[gamma + 1]`` counts of rounds by n_accepted, over
            rounds that drafted the full gamma tokens and were not cut by EOS or the
            budget (the rounds the truncated geometric law describes).
        all_rounds_histogram: the same over every round.
        stopped_by: ``"eos"`` or ``"max_new_tokens"``.
        prefill_time_s, draft_time_s, verify_time_s, total_time_s: wall times; the
            orchestration overhead is ``total - prefill - draft - verify``.
        draft_name, sampling: what was run.
    """

    tokens: list[int]
    rounds: list[RoundRecord]
    gamma: int
    prompt_length: int
    n_drafted: int
    n_drafted_tested: int
    n_accepted: int
    accepted_length_histogram: list[int]
    all_rounds_histogram: list[int]
    stopped_by: str
    prefill_time_s: float
    draft_time_s: float
    verify_time_s: float
    total_time_s: float
    draft_name: str
    sampling: SamplingConfig
    adaptive: str | None = None
    gamma_policy: str | None = None

    @property
    def alpha(self) -> float:
        return self.n_accepted / self.n_drafted_tested if self.n_drafted_tested else float("nan")

    @property
    def tau(self) -> float:
        return len(self.tokens) / len(self.rounds) if self.rounds else float("nan")

    @property
    def decode_time_s(self) -> float:
        return self.total_time_s - self.prefill_time_s

    @property
    def overhead_time_s(self) -> float:
        return self.total_time_s - self.prefill_time_s - self.draft_time_s - self.verify_time_s

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.total_time_s if self.total_time_s > 0 else float("nan")

    def expected_histogram(self) -> list[float]:
        """Expected counts of :attr:`accepted_length_histogram` under the truncated geometric law at :attr:`alpha`."""
        n = sum(self.accepted_length_histogram)
        if not n or math.isnan(self.alpha):
            return [0.0] * (self.gamma + 1)
        return [n * p for p in accepted_length_pmf(self.alpha, self.gamma)]

    def per_token(self) -> list[dict[str, Any]]:
        """One dict per drafted token: round, index, draft_entropy_bits,
        draft_normalized_entropy, accepted, tested, token_id."""
        rows = []
        for r in self.rounds:
            for i, tok in enumerate(r.proposed):
                rows.append({"round": r.round, "index": i, "token_id": tok,
                             "draft_entropy_bits": r.draft_entropies[i],
                             "draft_normalized_entropy": r.draft_normalized_entropies[i],
                             "accepted": r.accepted_mask[i], "tested": r.tested_mask[i]})
        return rows


@dataclass
class TargetOnlyResult:
    """Plain decoding with the target alone (the baseline of ``lab bench``)."""

    tokens: list[int]
    prefill_time_s: float
    forward_time_s: float
    total_time_s: float
    stopped_by: str

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.total_time_s if self.total_time_s > 0 else float("nan")

    @property
    def decode_step_time_s(self) -> float:
        """Mean wall time of one one-token decode forward (prefill excluded)."""
        steps = max(1, len(self.tokens) - 1)
        return (self.forward_time_s - self.prefill_time_s) / steps


# --------------------------------------------------------------------------- helpers


def _check_input(input_ids: torch.Tensor, max_new_tokens: int, model: Any) -> None:
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.dtype != torch.long:
        raise ValueError(f"input_ids must be an int64 tensor [1, S], got "
                         f"{getattr(input_ids, 'shape', type(input_ids))}")
    if input_ids.shape[0] != 1:
        raise ValueError(f"input_ids has batch size {input_ids.shape[0]}; speculative decoding here supports batch size 1")
    if input_ids.shape[1] < 1:
        raise ValueError("input_ids is empty; give at least one prompt token")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens!r} must be a positive integer")
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit and input_ids.shape[1] + max_new_tokens > limit:
        raise ValueError(f"prompt ({input_ids.shape[1]} tokens) + max_new_tokens={max_new_tokens} exceeds the "
                         f"model's context of {limit}")


def _device(model: Any) -> torch.device:
    return next(model.parameters()).device


def _new_cache(model: Any) -> Any:
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def _timed_forward(model: Any, ids: torch.Tensor, cache: Any, logits_to_keep: int = 0) -> tuple[torch.Tensor, float]:
    """Forward ``ids`` (int64 ``[T]``) through ``model`` with ``cache``; logits ``[T or keep, V]`` and seconds."""
    dev = _device(model)
    t0 = time.perf_counter()
    logits = model(input_ids=ids.unsqueeze(0), cache=cache, use_cache=True, logits_to_keep=logits_to_keep).logits[0]
    _sync(dev)
    return logits, time.perf_counter() - t0


def _eos_set(eos_token_ids: Iterable[int] | int | None) -> frozenset[int]:
    if eos_token_ids is None:
        return frozenset()
    if isinstance(eos_token_ids, int):
        return frozenset({eos_token_ids})
    return frozenset(int(e) for e in eos_token_ids)


def _sampling(temperature: float, top_p: float, top_k: int | None) -> SamplingConfig:
    return SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)


# --------------------------------------------------------------------------- loops


def target_generate(target: Any, input_ids: torch.Tensor, *, max_new_tokens: int, temperature: float = 0.0,
                    top_p: float = 1.0, top_k: int | None = None, generator: torch.Generator | None = None,
                    logits_processor: Any = None, eos_token_ids: Iterable[int] | None = None) -> TargetOnlyResult:
    """Plain KV-cache decoding with the target alone: prefill, then one token per forward.

    Same sampling filter and processors as :func:`speculative_generate`, so with the
    same generator state in greedy mode both emit the same tokens.

    Args / Raises: as :func:`speculative_generate` (without the draft arguments).
    """
    _check_input(input_ids, max_new_tokens, target)
    sampling = _sampling(temperature, top_p, top_k)
    eos = _eos_set(eos_token_ids)
    dev = _device(target)
    seq = input_ids[0].to(dev)
    tokens: list[int] = []
    stopped_by = "max_new_tokens"
    t_start = time.perf_counter()
    with torch.inference_mode():
        cache = _new_cache(target)
        # 1. prefill: the whole prompt, logits for the last position only
        logits, prefill_s = _timed_forward(target, seq, cache, logits_to_keep=1)
        fw = prefill_s
        # 2. decode: one token per forward
        while True:
            row = apply_processors(logits_processor, seq, seq[:0], logits[-1:])[0]  # [V]
            if sampling.greedy:
                tok = row.argmax()
            else:
                tok = sample(sampling_probs(row, sampling), generator)
            tok_id = int(tok)
            tokens.append(tok_id)
            seq = torch.cat([seq, tok.reshape(1)])
            if tok_id in eos:
                stopped_by = "eos"
                break
            if len(tokens) >= max_new_tokens:
                break
            logits, dt = _timed_forward(target, tok.reshape(1), cache, logits_to_keep=1)
            fw += dt
    total = time.perf_counter() - t_start
    return TargetOnlyResult(tokens, prefill_s, fw, total, stopped_by)


def speculative_generate(
    target: Any,
    draft: Drafter,
    input_ids: torch.Tensor,
    *,
    gamma: int = 4,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    adaptive: AdaptiveDraftLength | str | None = None,
    logits_processor: Any = None,
    eos_token_ids: Iterable[int] | int | None = None,
    on_round: Callable[[RoundRecord, torch.Tensor, Any], None] | None = None,
    gamma_policy: Any = None,
) -> SpeculativeResult:
    """Generate with speculative decoding; the output is distributed as sampling the target alone.

    Args:
        target: The transformers causal LM that verifies (p).
        draft: A :class:`~lab.speculative.drafts.Drafter` (see :func:`make_draft`).
        input_ids: int64 ``[1, S]`` prompt ids (batch size 1).
        gamma: Maximum draft tokens per round, >= 1. A round drafts at most
            ``remaining - 1`` tokens so the emitted tokens never exceed the budget.
        max_new_tokens: Budget of new tokens, >= 1.
        temperature / top_p / top_k: The sampling filter for both sides
            (:class:`~lab.speculative.sampling.SamplingConfig`); temperature 0 = greedy.
        generator: Random source (sampling mode); seed it for reproducible runs.
        adaptive: An :class:`~lab.speculative.drafts.AdaptiveDraftLength` or its
            string form ``"entropy:X"`` / ``"pmin:X"``; None = always gamma.
        logits_processor: transformers ``LogitsProcessorList`` applied to the target's
            logits at each verified position with that position's prefix.
        eos_token_ids: Token ids that end generation. An EOS accepted mid-round ends
            it there: no bonus token, later draft tokens untested and uncounted.
        on_round: Called after each round with ``(record, committed_ids [n], target_cache)``
            (for streaming and for tests of the cache invariant); must not modify them.
        gamma_policy: A draft-length policy (:mod:`lab.speculative.policies`) that sets
            each round's gamma from the last round's counts, capped at ``gamma``;
            None = ``gamma`` every round.

    Returns:
        :class:`SpeculativeResult`.

    Raises:
        ValueError: gamma < 1, batch size > 1, an empty prompt, max_new_tokens < 1,
            bad sampling settings, or a draft whose vocabulary width differs.
    """
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma={gamma!r} must be an integer >= 1")
    _check_input(input_ids, max_new_tokens, target)
    sampling = _sampling(temperature, top_p, top_k)
    if isinstance(adaptive, str):
        adaptive = AdaptiveDraftLength.parse(adaptive)
    eos = _eos_set(eos_token_ids)
    vt = int(target.config.vocab_size)
    width = int(draft.vocab_size)
    if width != vt:
        raise ValueError(f"draft vocab width {width} differs from the target's vocab_size={vt}")
    dev = _device(target)
    prompt_len = input_ids.shape[1]
    # Committed sequence buffer, reused across rounds: prompt + up to max_new_tokens.
    seq = torch.empty(prompt_len + max_new_tokens, dtype=torch.long, device=dev)
    seq[:prompt_len] = input_ids[0]
    n = prompt_len
    rounds: list[RoundRecord] = []
    hist = [0] * (gamma + 1)
    hist_all = [0] * (gamma + 1)
    n_drafted = n_tested = n_acc_total = 0
    draft_s = verify_s = 0.0
    stopped_by = "max_new_tokens"
    draft.reset()
    current = gamma if gamma_policy is None else min(gamma, gamma_policy.initial)
    t_start = time.perf_counter()
    with torch.inference_mode():
        cache = _new_cache(target)
        # 0. prefill the target with all but the last prompt token (the first verify feeds it)
        prefill_s = 0.0
        if prompt_len > 1:
            _, prefill_s = _timed_forward(target, seq[: prompt_len - 1], cache, logits_to_keep=1)
        while n - prompt_len < max_new_tokens:
            remaining = max_new_tokens - (n - prompt_len)
            g = min(current, remaining - 1)  # accepted + 1 must fit the budget
            # 1. draft: up to g tokens from the drafter's own distribution q
            if g >= 1:
                prop = draft.propose(seq[:n], g, sampling=sampling, generator=generator, adaptive=adaptive,
                                     eos_token_ids=eos)
            else:
                prop = empty_proposal(width, "budget", dev)
            k = int(prop.tokens.shape[0])
            if eos and k:  # nothing after an EOS is ever tested, whoever drafted it
                cut = next((i for i, t in enumerate(prop.tokens.tolist()) if t in eos), k - 1)
                if cut < k - 1:
                    prop = Proposal(prop.tokens[: cut + 1], prop.probs[: cut + 1], prop.entropies[: cut + 1],
                                    prop.normalized_entropies[: cut + 1], "eos", prop.forward_time_s, prop.n_forwards)
                    k = cut + 1
            if k and prop.probs.shape[-1] != width:
                raise ValueError(f"draft proposed rows of width {prop.probs.shape[-1]}, expected {width}")
            # 2. verify: one target forward over the last committed token and the k drafts
            logits, dt = _timed_forward(target, torch.cat([seq[n - 1 : n], prop.tokens.to(dev)]), cache)
            logits = apply_processors(logits_processor, seq[:n], prop.tokens, logits)  # [k + 1, Vt]
            # 3. accept / resample
            if sampling.greedy:
                n_acc, nxt = verify_greedy(prop.tokens, logits)
            else:
                n_acc, nxt = verify(prop.tokens, prop.probs, sampling_probs(logits, sampling), generator=generator)
            kept = prop.tokens[:n_acc].tolist()
            next_token: int | None = nxt
            next_kind = "bonus" if n_acc == k else "correction"
            if n_acc and kept[-1] in eos:  # an accepted EOS ends the round: no bonus
                next_token, next_kind = None, "none"
            emitted = kept + ([next_token] if next_token is not None else [])
            seq[n : n + len(emitted)] = torch.tensor(emitted, dtype=torch.long, device=dev)
            n += len(emitted)
            # roll both caches back to the committed sequence minus its last token
            rollback_cache(cache, n - 1)
            draft.commit(n_acc)
            if gamma_policy is not None:  # gamma for the next round, from this round's counts
                current = min(gamma, gamma_policy.next_gamma(current, k, n_acc))
            tested = min(k, n_acc + 1) if next_kind != "none" else n_acc
            n_drafted += k
            n_tested += tested
            n_acc_total += n_acc
            hist_all[n_acc] += 1
            if k == gamma and prop.stop_reason == "gamma" and next_kind != "none":
                hist[n_acc] += 1
            draft_s += prop.forward_time_s
            verify_s += dt
            rounds.append(RoundRecord(
                round=len(rounds), proposed=prop.tokens.tolist(), n_accepted=n_acc, next_token=next_token,
                next_kind=next_kind, stop_reason=prop.stop_reason,
                draft_entropies=prop.entropies.tolist(), draft_normalized_entropies=prop.normalized_entropies.tolist(),
                accepted_mask=[i < n_acc for i in range(k)], tested_mask=[i < tested for i in range(k)],
                draft_time_s=prop.forward_time_s, verify_time_s=dt, n_draft_forwards=prop.n_forwards))
            if on_round is not None:
                on_round(rounds[-1], seq[:n], cache)
            if emitted and emitted[-1] in eos:
                stopped_by = "eos"
                break
    total = time.perf_counter() - t_start
    return SpeculativeResult(
        tokens=seq[prompt_len:n].tolist(), rounds=rounds, gamma=gamma, prompt_length=prompt_len,
        n_drafted=n_drafted, n_drafted_tested=n_tested, n_accepted=n_acc_total,
        accepted_length_histogram=hist, all_rounds_histogram=hist_all, stopped_by=stopped_by,
        prefill_time_s=prefill_s, draft_time_s=draft_s, verify_time_s=verify_s, total_time_s=total,
        draft_name=getattr(draft, "name", type(draft).__name__), sampling=sampling,
        adaptive=adaptive.describe() if adaptive is not None else None,
        gamma_policy=gamma_policy.describe() if gamma_policy is not None else None)


def check_draft_spec(spec: str, num_layers: int | None = None) -> str:
    """Validate a draft spec without building anything, so commands fail before loading.

    Args:
        spec: ``"early-exit:N"``, ``"prompt-lookup"``, or a model profile / path / hub id.
        num_layers: The target's layer count, to check N; ``None`` skips that check.

    Returns:
        ``"early-exit"``, ``"prompt-lookup"`` or ``"model"``.

    Raises:
        ValueError: an empty or malformed spec, N out of range, or a model name that is
            neither a profile, a path nor a hub id.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"draft={spec!r} is empty; use early-exit:N, prompt-lookup or a model name")
    if spec.startswith("early-exit"):
        head, _, value = spec.partition(":")
        try:
            layers = int(value)
        except ValueError:
            raise ValueError(f"draft={spec!r} must be early-exit:N with an integer N") from None
        if head != "early-exit" or layers < 1:
            raise ValueError(f"draft={spec!r} must be early-exit:N with N >= 1")
        if num_layers is not None and layers >= num_layers:
            raise ValueError(f"draft={spec!r}: N must be in [1, {num_layers - 1}] (the target has {num_layers} layers)")
        return "early-exit"
    if spec == "prompt-lookup":
        return "prompt-lookup"
    from lab.models import check_model_name

    try:
        check_model_name(spec)
    except ValueError as exc:
        raise ValueError(f"draft={spec!r} is not early-exit:N, prompt-lookup or a model: {exc}") from None
    return "model"


def make_draft(target: Any, spec: str, *, target_tokenizer: Any = None, device: Any = None) -> Drafter:
    """Build a drafter from a spec string.

    Args:
        target: The target model.
        spec: ``"early-exit:N"`` (the target's first N layers, shared weights),
            ``"prompt-lookup"`` (n-gram lookup, no model), or a model profile / path /
            hub id loaded with :func:`lab.models.load_model` on the target's device.
        target_tokenizer: The target's tokenizer, to check a separate draft's
            vocabulary token by token (without it, the two ``vocab_size`` values
            must be equal).

    Raises:
        ValueError: a malformed spec, N out of range, or a vocabulary mismatch
            (decided from the draft's tokenizer before its weights load). A draft
            model of any depth or cost is admitted; see ``.cost`` on the result.
        lab.models.ModelUnavailableError: a draft model that cannot be loaded.
    """
    kind = check_draft_spec(spec, int(target.config.num_hidden_layers))
    if kind == "early-exit":
        return early_exit_draft(target, int(spec.partition(":")[2]))
    if kind == "prompt-lookup":
        return PromptLookupDraft(int(target.config.vocab_size))
    from lab.models import ModelUnavailableError, load_model, load_tokenizer
    from lab.speculative.admission import check_tokenizer_vocab

    if target_tokenizer is not None:  # vocabulary from metadata, before any draft weights load
        try:
            check_tokenizer_vocab(target_tokenizer, load_tokenizer(spec), spec)
        except ModelUnavailableError:
            pass  # load_model below says why the draft is unavailable, in the same words
    dev = device or _device(target)
    dtype = next(target.parameters()).dtype
    draft_model, draft_tok = load_model(spec, device=dev, dtype=dtype)
    if target_tokenizer is None:  # without both tokenizers only equal vocab_size passes
        return model_draft(target, draft_model, name=spec)
    return model_draft(target, draft_model, target_tokenizer=target_tokenizer, draft_tokenizer=draft_tok, name=spec)
