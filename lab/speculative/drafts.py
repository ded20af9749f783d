"""Candidate generation: who drafts, behind one two-method interface.

A drafter proposes up to gamma tokens after the committed sequence
(:meth:`Drafter.propose`) and is told how many of them the target kept
(:meth:`Drafter.commit`), so it can roll its own KV cache back; the verifier never
knows who drafted. Three kinds:

* :class:`ModelDraft`: a separate causal LM with the same vocabulary (sizes that
  differ only by padding rows are zero-padded);
* :class:`~lab.speculative.self_draft.EarlyExitDraft`: the target's first N layers
  plus its final norm and LM head, a :class:`ModelDraft` sharing the target's
  weights and, in the decode loop, its KV cache (self-speculation in the style of
  LayerSkip, Elhoushi et al. 2024, without its training);
* :class:`PromptLookupDraft`: n-gram continuation copied from earlier in the
  sequence (Saxena 2023, "prompt lookup decoding"); no model, q is one-hot, which
  is a valid draft distribution, so min(1, p/q) and the residual stay lossless.

Adaptive draft length (:class:`AdaptiveDraftLength`) stops drafting when the draft's
own next-token distribution is too uncertain. The decision uses only the draft's
distribution, never the target's or the sampled token, so the output distribution
is unchanged (the stopping rule is a stopping time of the draft's process).

What a drafter is beyond proposing (the model behind it, if any; whether it borrows the
target's KV cache; the dtype of its own weights; its cost; a transformers model for
assisted generation; the forwards it logged) it states in one record,
:class:`DraftFacts`, returned by :meth:`Drafter.facts`: callers ask the drafter, never
its type or its attributes.
Drafters are built from spec strings in :mod:`lab.speculative.draft_specs`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import torch

from lab.decode import check_rollback_supported, enable_rollback, new_cache, rollback_cache, sync
from lab.entropy import entropy
from lab.ranges import ADAPTIVE_ENTROPY, ADAPTIVE_PMIN, NumberTextError, Underscored, read_number
from lab.safe_text import clipped
from lab.sampling import SamplingConfig, sample, sampling_probs
from lab.speculative.admission import DraftCost, draft_cost
from lab.speculative.theory import flops_per_token

STOP_REASONS = ("gamma", "entropy", "pmin", "eos", "no-match", "budget", "cost")


@dataclass
class Proposal:
    """What a drafter proposes for one round.

    Attributes:
        tokens: int64 ``[k]``, k <= gamma draft token ids.
        probs: float32 ``[k, V]``: q, the distribution each token was sampled from.
        entropies: float32 ``[k]``, entropy in bits of the draft model's own
            (temperature-1, unfiltered) next-token distribution at each drafted token.
        normalized_entropies: float32 ``[k]``, the same divided by log2 V, in [0, 1].
        stop_reason: why drafting stopped: one of :data:`STOP_REASONS`.
        forward_time_s: wall time of the draft's forward passes this round.
        n_forwards: number of draft forward passes this round.
        source: who drafted, for a drafter that chooses per round (:class:`~lab.speculative.auto.AutoDraft`:
            ``"none"``, ``"prompt-lookup"`` or ``"model"``); ``""`` for a drafter of one kind.
    """

    tokens: torch.Tensor
    probs: torch.Tensor
    entropies: torch.Tensor
    normalized_entropies: torch.Tensor
    stop_reason: str
    forward_time_s: float = 0.0
    n_forwards: int = 0
    source: str = ""


def empty_proposal(vocab_size: int, stop_reason: str, device: Any = "cpu") -> Proposal:
    z = torch.zeros(0, dtype=torch.float32, device=device)
    return Proposal(torch.zeros(0, dtype=torch.long, device=device),
                    torch.zeros(0, vocab_size, dtype=torch.float32, device=device), z, z.clone(), stop_reason)


@dataclass(frozen=True)
class AdaptiveDraftLength:
    """Stop drafting early when the draft is unsure (decided from the draft alone).

    Before drafting token j >= 2 of a round (the first is always drafted), drafting
    stops if the draft's normalized entropy exceeds ``entropy_threshold`` or its top
    probability is below ``pmin``. Entropy and top probability are of the draft's
    temperature-1 distribution, so the rule also works in greedy mode.

    Attributes:
        entropy_threshold: in (0, 1], on normalized entropy (entropy / log V); None = off.
        pmin: in (0, 1), floor on the draft's top probability; None = off.
    """

    entropy_threshold: float | None = None
    pmin: float | None = None

    def __post_init__(self) -> None:
        if self.entropy_threshold is None and self.pmin is None:
            raise ValueError("adaptive needs entropy_threshold or pmin")
        if self.entropy_threshold is not None:
            ADAPTIVE_ENTROPY.check("entropy_threshold", self.entropy_threshold)
        if self.pmin is not None:
            ADAPTIVE_PMIN.check("pmin", self.pmin)

    @classmethod
    def parse(cls, spec: str) -> "AdaptiveDraftLength":
        """Parse ``"entropy:X"`` or ``"pmin:X"``.

        Raises:
            ValueError: any other form (the message echoes ``spec``, cut when long), or an X that
                :func:`lab.ranges.read_number` refuses (the message names the field and its range, not X).
        """
        kind, _, value = str(spec).partition(":")
        name, rng = {"entropy": ("entropy_threshold", ADAPTIVE_ENTROPY), "pmin": ("pmin", ADAPTIVE_PMIN)}.get(
            kind, (None, None))
        try:
            x = read_number(value, integer=False)
        except NumberTextError as exc:
            if name is None:
                raise ValueError(f"adaptive={clipped(spec)} must be 'entropy:X' or 'pmin:X'") from None
            raise ValueError(f"{name} {exc}" + ("" if isinstance(exc, Underscored) else f": {rng.must}")) from None
        except ValueError:
            raise ValueError(f"adaptive={clipped(spec)} must be 'entropy:X' or 'pmin:X' with a number X") from None
        if name is None:
            raise ValueError(f"adaptive={clipped(spec)} must be 'entropy:X' or 'pmin:X'")
        return cls(**{name: x})

    def describe(self) -> str:
        return f"entropy:{self.entropy_threshold}" if self.entropy_threshold is not None else f"pmin:{self.pmin}"

    def stop(self, norm_entropy: float, top_prob: float) -> str | None:
        if self.entropy_threshold is not None and norm_entropy > self.entropy_threshold:
            return "entropy"
        if self.pmin is not None and top_prob < self.pmin:
            return "pmin"
        return None


@dataclass(frozen=True)
class DraftFacts:
    """What a drafter is, beyond proposing: the one record the loop and the bench read about a draft.

    A snapshot taken when :meth:`Drafter.facts` is called (the logged forwards and casts are
    those since the drafter's last :meth:`~Drafter.reset`). The defaults describe a drafter
    that runs no model (prompt lookup).

    Attributes:
        model: The transformers causal LM that drafts (the early-exit shell on the target's
            layers, a per-pass draft's step-dtype copy); None for a drafter that runs no model.
        assistant_model: A transformers causal LM that drafts as this drafter does, for
            transformers' assisted generation (``generate(assistant_model=...)``); None when
            there is none (prompt lookup, a draft with an evicting cache).
        cost: The FLOP cost ratio c against the target stated at admission
            (:func:`lab.speculative.admission.draft_cost`; a separate model draft), else None.
        weight_dtype: The dtype of the draft's own weights as ``--draft-dtype`` spells it
            (``"bfloat16"``, or ``"float32:bfloat16"`` for a per-pass draft); None when it
            has no weights of its own (prompt lookup) or runs on the target's (early exit).
        drafts_on_target_cache: True for a drafter that drafts on the target's own KV cache
            (:meth:`Drafter.use_target_cache`; the early-exit draft): it needs the target's prefill
            before its first proposal, so the loop does not fuse that prefill into the first verify pass.
        passes: ``(tokens fed, weight dtype, seconds)`` per forward on the draft's own cache, in
            order (the first is its prefill); () for a drafter that logs none.
        n_casts: KV-cache dtype casts (a per-pass draft; 0 otherwise).
        cast_time_s: Seconds of those casts (also inside the rounds' draft time).
        observes_rounds: True for a drafter that learns from each finished round (its ``observe(record)``,
            which the decode loop then calls: :class:`~lab.speculative.auto.AutoDraft`).
    """

    model: Any = None
    assistant_model: Any = None
    cost: DraftCost | None = None
    weight_dtype: str | None = None
    drafts_on_target_cache: bool = False
    passes: tuple[tuple[int, str, float], ...] = ()
    n_casts: int = 0
    cast_time_s: float = 0.0
    observes_rounds: bool = False

    def flops_per_token(self, context: int) -> float:
        """Forward FLOPs of one draft step at ``context`` cached positions
        (:func:`lab.speculative.theory.flops_per_token` of :attr:`model`); 0.0 without a model."""
        return flops_per_token(self.model.config, context) if self.model is not None else 0.0


class Drafter(Protocol):
    """The candidate-generation interface the decode loop codes against.

    Two methods draft (:meth:`propose`, :meth:`commit`), as transformers' candidate
    generators; :meth:`reset` and :meth:`use_target_cache` frame one sequence; :meth:`facts`
    states what the drafter is, so no caller probes its class or attributes.

    Attributes:
        name: For reports.
        vocab_size: Width V of the q rows (the target's vocabulary size).
    """

    name: str
    vocab_size: int

    def propose(self, prefix_ids: torch.Tensor, gamma: int, *, sampling: SamplingConfig,
                generator: torch.Generator | None = None, adaptive: AdaptiveDraftLength | None = None,
                eos_token_ids: frozenset[int] = frozenset()) -> Proposal:
        """Propose up to ``gamma`` tokens after ``prefix_ids`` (int64 ``[L]``, the committed sequence)."""
        ...

    def commit(self, n_kept: int) -> None:
        """The target kept the first ``n_kept`` proposed tokens; roll back the rest."""
        ...

    def reset(self) -> None:
        """Forget all state (a new sequence starts)."""
        ...

    def use_target_cache(self, cache: Any) -> None:
        """Take the decode loop's target KV cache for this sequence (until :meth:`reset`).

        A drafter that runs on the target's own layers drafts on it and must leave it as
        lent (n - 1 positions, asserted by the loop); one with its own cache, or none,
        ignores it.
        """
        ...

    def facts(self) -> DraftFacts:
        """What this drafter is now (:class:`DraftFacts`)."""
        ...


def draft_loop(forward: Callable[[torch.Tensor], torch.Tensor], feed: torch.Tensor, gamma: int, vocab_size: int,
               device: Any, *, sampling: SamplingConfig, generator: torch.Generator | None = None,
               adaptive: AdaptiveDraftLength | None = None, eos_token_ids: frozenset[int] = frozenset()) -> Proposal:
    """Draft up to ``gamma`` >= 1 tokens autoregressively with a model draft's one-step ``forward``.

    Shared by every drafter that owns a model and a KV cache (:class:`ModelDraft`, and
    ``lab.stream``'s evicting draft), which differ only in how ``forward`` feeds the cache.

    Args:
        forward: ``ids`` (int64 ``[T]``) -> next-token logits ``[vocab_size]`` after them.
        feed: int64 ``[T]``, the committed tokens the draft's cache still lacks (T >= 1).
        gamma, vocab_size, device: at most ``gamma`` tokens over ``vocab_size`` ids; ``device`` to sync timing.
        sampling, generator, adaptive, eos_token_ids: as in :meth:`Drafter.propose`.

    Returns:
        :class:`Proposal` with the draft's filtered probs per token and its raw (T = 1) entropy in bits.
    """
    tokens, rows, ents, norms = [], [], [], []
    stop_reason = "gamma"
    elapsed = 0.0
    log2v = math.log2(vocab_size)
    for j in range(gamma):
        t0 = time.perf_counter()
        logits = forward(feed)  # [V]
        sync(device)
        elapsed += time.perf_counter() - t0
        h_bits = entropy(logits)  # bits, of the draft's own temperature-1 distribution
        if adaptive is not None and j > 0:
            top = float(logits.float().softmax(-1).max()) if adaptive.pmin is not None else 1.0
            reason = adaptive.stop(float(h_bits) / log2v, top)
            if reason is not None:
                stop_reason = reason
                break
        q = sampling_probs(logits, sampling)  # [V]
        tok = q.argmax() if sampling.greedy else sample(q, generator)
        tokens.append(tok.reshape(1))
        rows.append(q)
        ents.append(h_bits)
        norms.append(h_bits / log2v)
        feed = tok.reshape(1)
        if int(tok) in eos_token_ids:
            stop_reason = "eos"
            break
    n_fw = len(tokens) + (1 if stop_reason in ("entropy", "pmin") else 0)
    return Proposal(torch.cat(tokens), torch.stack(rows), torch.stack(ents).float(), torch.stack(norms).float(),
                    stop_reason, elapsed, n_fw)


class ModelDraft:
    """A causal LM as the draft, with its own KV cache.

    Cache invariant: after :meth:`commit` the cache holds only positions of the
    committed sequence (never a rejected draft token); :meth:`propose` first feeds
    the committed tokens the cache lacks.

    Args:
        model: A transformers causal LM (batch size 1).
        vocab_size: Width V of the probability rows: the target's vocabulary size.
            When the two sizes differ only by padding rows, the draft's logits are
            cut to V or padded with -inf (probability 0) up to V, so no padding id
            is ever proposed.
        name: For reports.

    Attributes:
        cost: Set by :func:`model_draft` (None until then); see :class:`DraftFacts`.
        passes: ``(tokens fed, weight dtype, seconds)`` per forward since :meth:`reset`.
    """

    cost: DraftCost | None = None

    def __init__(self, model: Any, vocab_size: int | None = None, name: str = "draft-model"):
        check_rollback_supported(model)
        self.model = model
        self.name = name
        self.model_vocab = int(model.config.vocab_size)
        self.vocab_size = int(vocab_size or self.model_vocab)
        self.device = next(model.parameters()).device
        self.reset()

    def facts(self) -> DraftFacts:
        """Its model (also transformers' assistant), cost, weight dtype and logged forwards; its own cache."""
        return DraftFacts(model=self.model, assistant_model=self.model, cost=self.cost,
                          weight_dtype=getattr(self.model, "weight_type", None)
                          or str(next(self.model.parameters()).dtype).removeprefix("torch."),
                          passes=tuple(self.passes))

    def use_target_cache(self, cache: Any) -> None:
        """Ignored: this draft keeps its own cache."""

    def reset(self) -> None:
        self.cache = new_cache(self.model)  # the decode core's cache; croppable after the first forward
        self._rollback_on = False
        self._committed_len = 0
        self.passes: list[tuple[int, str, float]] = []  # (tokens fed, weight dtype, seconds) per forward

    def _pass_model(self, n_tokens: int) -> Any:
        """The model that runs a pass of ``n_tokens`` (one here; :class:`~lab.speculative.per_pass.PerPassDraft` picks)."""
        return self.model

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        model = self._pass_model(int(ids.shape[0]))
        t0 = time.perf_counter()
        out = model(input_ids=ids.unsqueeze(0).to(self.device), cache=self.cache, use_cache=True, logits_to_keep=1)
        sync(self.device)
        self.passes.append((int(ids.shape[0]), str(model.dtype).removeprefix("torch."), time.perf_counter() - t0))
        if not self._rollback_on:  # the first forward is the draft's prefill: nothing before it is ever cropped
            enable_rollback(self.cache)
            self._rollback_on = True
        logits = out.logits[0, -1]  # [V_draft]
        if self.model_vocab > self.vocab_size:  # padding rows: no such token exists, q = 0 there
            logits = logits[: self.vocab_size]
        elif self.model_vocab < self.vocab_size:  # the target's padding rows: q = 0 there too
            logits = torch.nn.functional.pad(logits, (0, self.vocab_size - self.model_vocab), value=float("-inf"))
        return logits  # [V]

    def propose(self, prefix_ids: torch.Tensor, gamma: int, *, sampling: SamplingConfig,
                generator: torch.Generator | None = None, adaptive: AdaptiveDraftLength | None = None,
                eos_token_ids: frozenset[int] = frozenset()) -> Proposal:
        """Draft up to ``gamma`` tokens autoregressively; see :class:`Drafter`."""
        if gamma < 1:
            return empty_proposal(self.vocab_size, "budget", self.device)
        self._committed_len = prefix_ids.shape[0]
        cached = self.cache.get_seq_length()
        assert cached < self._committed_len, "draft cache must lack at least the last committed token"
        return draft_loop(self._forward, prefix_ids[cached:], gamma, self.vocab_size, self.device, sampling=sampling,
                          generator=generator, adaptive=adaptive, eos_token_ids=eos_token_ids)

    def commit(self, n_kept: int) -> None:
        """Crop the cache to the committed prefix plus the kept draft tokens it holds."""
        keep = min(self.cache.get_seq_length(), self._committed_len + n_kept)
        rollback_cache(self.cache, keep)


def _check_vocab(target: Any, draft: Any, target_tokenizer: Any = None, draft_tokenizer: Any = None) -> int:
    """Return the common width V, or raise naming both vocabularies."""
    vt, vd = int(target.config.vocab_size), int(draft.config.vocab_size)
    if target_tokenizer is not None and draft_tokenizer is not None:
        if target_tokenizer.get_vocab() != draft_tokenizer.get_vocab():
            raise ValueError(
                f"draft vocabulary ({getattr(draft_tokenizer, 'name_or_path', '?')}, {len(draft_tokenizer)} tokens) "
                f"differs from the target's ({getattr(target_tokenizer, 'name_or_path', '?')}, {len(target_tokenizer)} "
                "tokens); speculative decoding needs the same vocabulary"
            )
        return vt  # same tokens: any size difference is padding rows
    if vt != vd:
        raise ValueError(f"draft vocab_size={vd} differs from target vocab_size={vt}; pass both tokenizers "
                         "if the difference is only padding")
    return vt


def model_draft(target: Any, draft: Any, *, target_tokenizer: Any = None, draft_tokenizer: Any = None,
                name: str = "draft-model") -> ModelDraft:
    """Wrap a separate draft model after checking it fits the target.

    Admission is by vocabulary only; the draft's FLOP cost ratio c is attached as
    ``.cost`` (:func:`lab.speculative.admission.draft_cost`), with a note when c >= 1:
    such a draft is run, never refused (layer count is not cost).

    Raises:
        ValueError: the vocabularies differ (naming both).
    """
    drafter = ModelDraft(draft, _check_vocab(target, draft, target_tokenizer, draft_tokenizer), name)
    drafter.cost = draft_cost(target.config, draft.config)
    return drafter


class PromptLookupDraft:
    """Draft by copying what followed the latest earlier occurrence of the sequence's last n-gram.

    Searches the whole committed sequence (prompt and generated text) for the most
    recent earlier match of its last ``max_ngram`` tokens, then shorter n-grams down
    to ``min_ngram``, and proposes up to gamma tokens that followed the match.
    q is one-hot on each proposed token (no model, no cache).

    Args:
        vocab_size: Width V of the q rows (the target's vocabulary size).
        max_ngram / min_ngram: n-gram sizes tried, longest first.
    """

    def __init__(self, vocab_size: int, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"min_ngram={min_ngram!r}, max_ngram={max_ngram!r} need 1 <= min_ngram <= max_ngram")
        self.vocab_size = int(vocab_size)
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.name = "prompt-lookup"

    def facts(self) -> DraftFacts:
        """No model, no weights, no cache, no cost: transformers runs prompt lookup itself
        (``prompt_lookup_num_tokens``), so there is no assistant model either."""
        return DraftFacts()

    def use_target_cache(self, cache: Any) -> None:
        """Ignored: no model, no cache."""

    def reset(self) -> None:
        pass

    def commit(self, n_kept: int) -> None:
        pass  # no state

    def match(self, seq: list[int], gamma: int, max_run: int = 64) -> tuple[int, list[int]]:
        """``(run, continuation)`` for the latest earlier occurrence of the longest n-gram ending ``seq``
        (``max_ngram`` down to ``min_ngram``): up to ``gamma`` tokens that followed it, and how many tokens
        before the end of ``seq`` agree with what preceded that occurrence (the n-gram and as far back as the
        two keep agreeing, at most ``max_run``: a long run means the text is copying); ``(0, [])`` if none."""
        n_seq = len(seq)
        for n in range(min(self.max_ngram, n_seq - 1), self.min_ngram - 1, -1):
            tail = seq[n_seq - n:]
            for start in range(n_seq - n - 1, -1, -1):  # latest earlier occurrence first
                if seq[start:start + n] == tail:
                    run = n
                    while run < max_run and start + n - run - 1 >= 0 and seq[start + n - run - 1] == seq[n_seq - run - 1]:
                        run += 1
                    return run, seq[start + n: start + n + gamma]
        return 0, []

    def propose(self, prefix_ids: torch.Tensor, gamma: int, *, sampling: SamplingConfig,
                generator: torch.Generator | None = None, adaptive: AdaptiveDraftLength | None = None,
                eos_token_ids: frozenset[int] = frozenset()) -> Proposal:
        device = prefix_ids.device
        if gamma < 1:
            return empty_proposal(self.vocab_size, "budget", device)
        return self.proposal(self.match(prefix_ids.tolist(), gamma)[1], gamma, eos_token_ids, device)

    def proposal(self, cont: list[int], gamma: int, eos_token_ids: frozenset[int], device: Any) -> Proposal:
        """The proposal of a match's continuation ``cont`` (at most ``gamma`` ids, from :meth:`match`): cut
        after its first EOS, q one-hot; ``"no-match"`` when it is empty or shorter than ``gamma``."""
        if not cont:
            return empty_proposal(self.vocab_size, "no-match", device)
        reason = "gamma" if len(cont) == gamma else "no-match"
        for i, t in enumerate(cont):
            if t in eos_token_ids:
                cont, reason = cont[: i + 1], "eos"
                break
        tokens = torch.tensor(cont, dtype=torch.long, device=device)
        probs = torch.nn.functional.one_hot(tokens, self.vocab_size).float()  # q: one-hot, [k, V]
        z = torch.zeros(len(cont), dtype=torch.float32, device=device)
        return Proposal(tokens, probs, z, z.clone(), reason)
