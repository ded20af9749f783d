"""The speculative decode loop, the target-only baseline, and draft construction.

Each round has three phases (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023,
Algorithm 2), after a gamma for the round is chosen by a :class:`GammaPolicy`
(fixed by default): (1) draft: the drafter proposes up to gamma tokens; (2) verify:
the target scores the last committed token and every draft token in one forward
pass over gamma + 1 positions; (3) accept / resample:
:func:`lab.speculative.verify.verify` (or its greedy variant) keeps a prefix and
adds a correction or bonus token, and both KV caches are rolled back to the
committed sequence.

The target's prefill, forwards, input checks and KV cache come from the decode core
:mod:`lab.decode`, which also runs the target-only baseline
(:func:`target_generate`), so both loops check, time and cache the same way.

KV-cache invariant (tested): between rounds the target's cache holds exactly the
committed sequence except its last token, whose key/value is computed by the next
verify pass (so feeding that token reproduces a full recomputation). No rejected
draft token is ever left in a cache. A drafter that runs on the target's own first
layers (:class:`~lab.speculative.self_draft.EarlyExitDraft`) is lent this cache and
returns it as lent, n - 1 positions (asserted after every proposal). Sliding-window layers stay croppable past
their window through transformers' past recording (:func:`lab.decode.enable_rollback`).

Batch size 1 only. p = target, q = draft throughout.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable

import torch

from lab.decode import (check_decode_input, check_rollback_supported, enable_rollback, eos_set, forward, generate,
                        model_device, new_cache, prefill, rollback_cache)
from lab.speculative.drafts import (AdaptiveDraftLength, Drafter, PromptLookupDraft, Proposal, early_exit_draft,
                                    empty_proposal, model_draft)
from lab.speculative.results import RoundRecord, SpeculativeResult, TargetOnlyResult
from lab.sampling import SamplingConfig, apply_processors, sampling_probs
from lab.speculative.policies import FixedGamma, GammaPolicy
from lab.speculative.verify import verify, verify_greedy

logger = logging.getLogger(__name__)

__all__ = ["FixedGamma", "GammaPolicy", "RoundRecord", "SpeculativeResult", "TargetOnlyResult", "check_draft_spec",
           "make_draft", "speculative_generate", "target_generate"]


def target_generate(target: Any, input_ids: torch.Tensor, *, max_new_tokens: int, temperature: float = 0.0,
                    top_p: float = 1.0, top_k: int | None = None, generator: torch.Generator | None = None,
                    logits_processor: Any = None, eos_token_ids: Iterable[int] | None = None) -> TargetOnlyResult:
    """Plain KV-cache decoding with the target alone (the baseline of ``lab bench``).

    The decode core's loop, :func:`lab.decode.generate`, unobserved: the same loop
    the entropy tracker observes, with the same sampling filter and processors as
    :func:`speculative_generate`. So in greedy mode all three emit the same tokens,
    and in sampling mode this and the tracker emit the same tokens from the same
    generator state.

    Args / Raises: as :func:`speculative_generate` (without the draft arguments).
    """
    out = generate(target, input_ids, max_new_tokens=max_new_tokens,
                   sampling=SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p), generator=generator,
                   eos_token_ids=eos_token_ids, logits_processor=logits_processor)
    return TargetOnlyResult(out.tokens, out.prefill_time_s, out.forward_time_s, out.total_time_s, out.stop_reason)


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
    gamma_policy: GammaPolicy | None = None,
    on_commit: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
    target_cache: Any = None,
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
            (:class:`~lab.sampling.SamplingConfig`); temperature 0 = greedy.
        generator: Random source (sampling mode); seed it for reproducible runs.
        adaptive: An :class:`~lab.speculative.drafts.AdaptiveDraftLength` or its
            string form ``"entropy:X"`` / ``"pmin:X"``; None = always gamma.
        logits_processor: transformers ``LogitsProcessorList`` applied to the target's
            logits at each verified position with that position's prefix.
        eos_token_ids: Token ids that end generation. An EOS accepted mid-round ends
            it there: no bonus token, later draft tokens untested and uncounted.
        on_round: Called after each round with ``(record, committed_ids [n], target_cache)``
            (for streaming and for tests of the cache invariant); must not modify them.
        gamma_policy: Chooses each round's gamma in ``[1, gamma]`` (:class:`GammaPolicy`);
            None = :class:`FixedGamma` (always ``gamma``).
        on_commit: Called once per round with ``(target_logits [m, V], tokens [m])``: the
            target's raw logits (before ``logits_processor``, T = 1) at each of the m
            positions the round committed, row j predicting ``tokens[j]`` from the
            committed prefix, so the rows are the target's own next-token distributions
            along the emitted sequence (the entropy tracker's view of a plain decode,
            :func:`lab.tracker.track_speculative`); must not modify them.
        target_cache: A target KV cache that already holds the prompt (all S positions,
            or the first S - 1), e.g. filled by the attention capture's prefill; the
            loop crops it to S - 1 and skips its own prefill. Fill it with past
            recording on (:func:`lab.decode.enable_rollback` before the prefill), so a
            sliding-window layer can be cropped. None = a new cache and a prefill.

    Returns:
        :class:`SpeculativeResult`.

    Raises:
        ValueError: gamma < 1, batch size > 1, an empty prompt, max_new_tokens < 1,
            prompt + max_new_tokens past the target's context, bad sampling
            settings, a draft whose vocabulary width differs, or a target whose KV
            cache cannot be rolled back (recurrent layers), or a ``target_cache`` that
            does not hold S or S - 1 positions.
    """
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma={gamma!r} must be an integer >= 1")
    input_ids = check_decode_input(target, input_ids, max_new_tokens)
    check_rollback_supported(target)
    sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
    policy = gamma_policy if gamma_policy is not None else FixedGamma()
    if isinstance(adaptive, str):
        adaptive = AdaptiveDraftLength.parse(adaptive)
    eos = eos_set(eos_token_ids)
    vt = int(target.config.vocab_size)
    width = int(draft.vocab_size)
    if width != vt:
        raise ValueError(f"draft vocab width {width} differs from the target's vocab_size={vt}")
    dev = model_device(target)
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
    t_start = time.perf_counter()
    with torch.inference_mode():
        # 0. prefill the target with all but the last prompt token (the first verify feeds it);
        #    from then on the cache records what a rollback needs. A given cache holds the
        #    prompt already: only its last position, if there, is dropped.
        prefill_s = 0.0
        if target_cache is not None:
            cache = target_cache
            held = cache.get_seq_length()
            if held not in (prompt_len, prompt_len - 1):
                raise ValueError(f"target_cache holds {held} positions; it must hold the prompt's {prompt_len} "
                                 f"(or {prompt_len - 1})")
            enable_rollback(cache)
            rollback_cache(cache, prompt_len - 1)
        else:
            cache = new_cache(target)
            if prompt_len > 1:
                _, prefill_s = prefill(target, seq[: prompt_len - 1].unsqueeze(0), cache)
            enable_rollback(cache)
        lend = getattr(draft, "use_target_cache", None)
        if lend is not None:  # an early-exit draft drafts on the target's first layers of this cache
            lend(cache)
        while n - prompt_len < max_new_tokens:
            remaining = max_new_tokens - (n - prompt_len)
            # 0'. gamma for this round, from the policy (finished rounds only)
            round_gamma = policy.next_gamma(rounds, gamma)
            assert 1 <= round_gamma <= gamma, f"gamma policy returned {round_gamma}, outside [1, {gamma}]"
            g = min(round_gamma, remaining - 1)  # accepted + 1 must fit the budget
            # 1. draft: up to g tokens from the drafter's own distribution q
            if g >= 1:
                prop = draft.propose(seq[:n], g, sampling=sampling, generator=generator, adaptive=adaptive,
                                     eos_token_ids=eos)
            else:
                prop = empty_proposal(width, "budget", dev)
            assert cache.get_seq_length() == n - 1, (f"the drafter left the target's cache at "
                                                     f"{cache.get_seq_length()} positions, not {n - 1}")
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
            logits, dt = forward(target, torch.cat([seq[n - 1 : n], prop.tokens.to(dev)]).unsqueeze(0), cache,
                                 logits_to_keep=0)
            raw_logits = logits  # [k + 1, Vt], what on_commit sees
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
            if on_commit is not None:  # row j predicted emitted[j] from the committed prefix
                on_commit(raw_logits[: len(emitted)], seq[n : n + len(emitted)])
            n += len(emitted)
            # roll both caches back to the committed sequence minus its last token
            rollback_cache(cache, n - 1)
            draft.commit(n_acc)
            tested = min(k, n_acc + 1) if next_kind != "none" else n_acc
            n_drafted += k
            n_tested += tested
            n_acc_total += n_acc
            hist_all[n_acc] += 1
            # the geometric law's rounds: the full maximum gamma drafted (a policy's shorter
            # rounds follow another truncation), not cut by EOS, the budget or an adaptive stop
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
        gamma_policy=policy.describe() if gamma_policy is not None and hasattr(policy, "describe") else None)


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
    from lab.models.loading import check_model_name

    try:
        check_model_name(spec)
    except ValueError as exc:
        raise ValueError(f"draft={spec!r} is not early-exit:N, prompt-lookup or a model: {exc}") from None
    return "model"


def make_draft(target: Any, spec: str, *, target_tokenizer: Any = None, device: Any = None,
               dtype: Any = None) -> Drafter:
    """Build a drafter from a spec string.

    Args:
        target: The target model.
        spec: ``"early-exit:N"`` (the target's first N layers, shared weights),
            ``"prompt-lookup"`` (n-gram lookup, no model), or a model profile / path /
            hub id loaded with :func:`lab.models.loading.load_model` on the target's device.
        target_tokenizer: The target's tokenizer, to check a separate draft's
            vocabulary token by token (without it, the two ``vocab_size`` values
            must be equal).
        device: Where a draft model goes (default: the target's device).
        dtype: A draft model's dtype (``"bfloat16"``, ``torch.float32`` ...; default:
            the target's), or per pass shape: ``"PREFILL:STEP"`` / ``"per-pass"``
            (:class:`~lab.speculative.per_pass.PerPassDraft`). Early-exit drafts share
            the target's weights and dtype: asking another dtype for one is an error.

    Raises:
        ValueError: a malformed spec, N out of range, a dtype for a draft without its
            own weights, or a vocabulary mismatch
            (decided from the draft's tokenizer before its weights load). A draft
            model of any depth or cost is admitted; see ``.cost`` on the result.
        lab.models.loading.ModelUnavailableError: a draft model that cannot be loaded.
    """
    kind = check_draft_spec(spec, int(target.config.num_hidden_layers))
    target_dtype = next(target.parameters()).dtype
    if isinstance(dtype, str) and (":" in dtype or dtype == "per-pass"):
        from lab.speculative.per_pass import parse_draft_dtype, per_pass_draft

        prefill_dtype, _ = parse_draft_dtype(dtype)
        if kind != "model":
            raise ValueError(f"draft dtype={dtype!r}: the {kind} draft {spec!r} has no weights of its own")
        return per_pass_draft(make_draft(target, spec, target_tokenizer=target_tokenizer, device=device,
                                         dtype=prefill_dtype), dtype)
    if dtype is not None and kind != "model":
        from lab.models.devices import parse_dtype

        if parse_dtype(dtype, model_device(target)) != target_dtype:
            raise ValueError(f"draft dtype={dtype!r}: the {kind} draft {spec!r} has no weights of its own "
                             f"(it runs in the target's {str(target_dtype).removeprefix('torch.')})")
    if kind == "early-exit":
        return early_exit_draft(target, int(spec.partition(":")[2]))
    if kind == "prompt-lookup":
        return PromptLookupDraft(int(target.config.vocab_size))
    from lab.models.loading import ModelUnavailableError, load_model, load_tokenizer
    from lab.speculative.admission import check_tokenizer_vocab

    if target_tokenizer is not None:  # vocabulary from metadata, before any draft weights load
        try:
            check_tokenizer_vocab(target_tokenizer, load_tokenizer(spec), spec)
        except ModelUnavailableError:
            pass  # load_model below says why the draft is unavailable, in the same words

    dev = device or model_device(target)
    draft_model, draft_tok = load_model(spec, device=dev, dtype=dtype if dtype is not None else target_dtype)
    if target_tokenizer is None:  # without both tokenizers only equal vocab_size passes
        return model_draft(target, draft_model, name=spec)
    return model_draft(target, draft_model, target_tokenizer=target_tokenizer, draft_tokenizer=draft_tok, name=spec)
