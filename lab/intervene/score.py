"""The teacher-forced passes of ``lab intervene``: each arm's entropy, acceptance and attention masses.

Every arm of a twin scores one sequence: the twin's prompt (S tokens) followed by the clean
prompt's greedy continuation c (T tokens, :func:`greedy_continuation`) up to its last token,
N = S + T - 1 positions; the T decode queries are positions S - 1 .. N - 1 (see
:mod:`lab.intervene.masks` for the span and the arms).

Passes, the same for the target and the draft (each on its own KV cache):

1. ``A0``: one plain forward of all N positions with the model's own causal mask, into a
   ``DynamicCache`` built without a config, so every layer (a sliding one included) keeps
   every position and a crop is a slice; the mask applies the sliding window. Logits at the
   decode rows only.
2. Each other arm (:func:`lab.intervene.masks.arm_intervention`): the cache is cropped to the
   arm's ``first_query`` positions (states of the plain pass, which the arm does not change)
   and positions ``first_query .. N - 1`` are fed again with the arm's 4D mask. ``empty``,
   ``A1``, ``L0.5``, ``L0.25`` and ``C+`` feed the T decode rows; ``A2`` feeds ``span.end ..
   N - 1`` and so runs last, since it rewrites prompt positions the others reuse.

Outcomes per decode position (an :class:`ArmOutcome` per arm):

* target entropy in bits of its float32 logits (:func:`lab.entropy.entropy`);
* beta = sum_x min(p(x), q(x)), p = target, q = draft, both at temperature 1 (Leviathan,
  Kalman & Matias 2023, Definition 3.1: the expected acceptance of one drafted token;
  :func:`lab.speculative.theory.acceptance_probability`). Vocabularies padded to different
  sizes are compared as :class:`lab.speculative.drafts.ModelDraft` does: p over the target's
  row, q over the draft's first min(V) logits, so a padding row holds q = 0;
* the mediator (span mass): the target's post-softmax attention probabilities from each
  decode query summed over the span keys, averaged over layers, heads and decode queries;
  the sink mass: the same on key 0 (Xiao et al. 2023, StreamingLLM). Read from each layer's
  attention module with a forward hook, so only the decode rows are kept (all N rows of
  every layer would be hundreds of MB at S = 500); the target must run eager attention.

An early-exit draft (:func:`lab.speculative.self_draft.early_exit_model`: the target's first L
layers, its final norm and head) runs no passes of its own: under the same mask its layers
compute exactly what the target's first L layers compute, so its logits are read from the
target's pass, the final norm and the head applied to layer L's output at the decode rows
(a hook; tested equal to running the draft). A model with final logit soft-capping runs the
draft's own passes.

Shapes: S prompt, T decode positions, N = S + T - 1, V vocabulary. Batch 1.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import torch
from transformers import DynamicCache

from lab.decode import context_length, eos_set, generate, rollback_cache
from lab.entropy import entropy
from lab.intervene.masks import ARMS, AddedSpan, Intervention, arm_intervention, check_eager, intervention_mask
from lab.models.hooks import attention_modules, decoder_layers, forward_hooks
from lab.speculative.theory import acceptance_probability


@dataclass(frozen=True)
class ArmOutcome:
    """One arm on one twin.

    Attributes:
        entropy_bits: Per decode position, the target's entropy in bits.
        beta: Per decode position, sum_x min(p(x), q(x)) in [0, 1].
        span_mass: The target's mean attention probability mass from decode queries onto span keys.
        sink_mass: The same onto key 0.
    """

    entropy_bits: tuple[float, ...]
    beta: tuple[float, ...]
    span_mass: float
    sink_mass: float

    @property
    def mean_entropy(self) -> float:
        """Mean target entropy over the decode positions, bits."""
        return sum(self.entropy_bits) / len(self.entropy_bits)

    @property
    def mean_beta(self) -> float:
        """Mean beta over the decode positions."""
        return sum(self.beta) / len(self.beta)


@dataclass(frozen=True)
class TwinOutcome:
    """Every arm of :data:`~lab.intervene.masks.ARMS` on one twin.

    Attributes:
        prompt_id / variant: The twin's id and ``"poisoned"`` or ``"neutral"``.
        n_prompt: S.
        span: The added span.
        n_decode: T.
        arms: Arm name -> :class:`ArmOutcome`, every arm.
        empty_max_diff_bits: max over decode positions of |H(empty) - H(A0)|: the control that the
            mask and cache machinery with a zero shift reproduces the plain forward.
    """

    prompt_id: str
    variant: str
    n_prompt: int
    span: AddedSpan
    n_decode: int
    arms: Mapping[str, ArmOutcome]
    empty_max_diff_bits: float


def greedy_continuation(model: Any, prompt_ids: torch.Tensor, n_tokens: int,
                        eos_token_ids: frozenset[int] = frozenset()) -> torch.Tensor:
    """The model's greedy continuation of a prompt (:func:`lab.decode.generate`, the lab's one decode loop).

    Args:
        model: A transformers causal LM in eval mode.
        prompt_ids: int64 ``[S]`` or ``[1, S]``.
        n_tokens: The budget T, >= 1.
        eos_token_ids: Ids that end the continuation (the EOS is kept).

    Returns:
        int64 ``[T']`` on the CPU, T' <= ``n_tokens``.

    Raises:
        ValueError: bad ids or budget, or prompt plus budget beyond the context.
    """
    result = generate(model, prompt_ids, max_new_tokens=n_tokens, eos_token_ids=eos_set(eos_token_ids))
    return torch.tensor(result.tokens, dtype=torch.long)


@contextmanager
def _attention_masses(model: Any, span: AddedSpan, n_decode: int, out: list[tuple[float, float]]) -> Iterator[None]:
    """While open, each attention layer of ``model`` that runs appends ``(span mass, sink mass)`` of its
    last ``n_decode`` query rows, means over heads and rows, to ``out``."""
    def hook(module: Any, args: Any, output: Any) -> None:
        probs = output[1]  # [1, H, Q, K] post-softmax (eager attention)
        assert probs is not None, "the attention layer returned no probabilities (not eager)"
        rows = probs[0, :, -n_decode:].float()  # [H, T, K]
        out.append((float(rows[..., span.start:span.end].sum(-1).mean()), float(rows[..., 0].mean())))

    with forward_hooks(attention_modules(model), hook):
        yield


def shared_layers(target: Any, draft: Any) -> int | None:
    """L when ``draft`` is the target's first L layers with its final norm and head (an early-exit view)
    and the model has no final logit soft-capping, so its logits can be read from the target's pass; else None."""
    t_layers, d_layers = decoder_layers(target), decoder_layers(draft)
    if len(d_layers) > len(t_layers) or any(a is not b for a, b in zip(d_layers, t_layers)):
        return None
    if draft.lm_head is not target.lm_head or getattr(draft.model, "norm", None) is not getattr(target.model, "norm", 1):
        return None
    if getattr(target.config, "final_logit_softcapping", None):
        return None
    return len(d_layers)


@contextmanager
def _early_exit_logits(target: Any, draft: Any, n_layers: int, n_decode: int, out: list[torch.Tensor]) -> Iterator[None]:
    """While open, each pass of ``target`` appends the early-exit draft's float32 logits ``[T, V]``: the
    draft's final norm and head on layer ``n_layers``'s output at the last ``n_decode`` rows."""
    def hook(module: Any, args: Any, output: Any) -> None:
        hidden = output[0] if isinstance(output, tuple) else output  # [1, Q, D]
        out.append(draft.lm_head(draft.model.norm(hidden[:, -n_decode:]))[0].float())

    with forward_hooks([decoder_layers(target)[n_layers - 1]], hook):
        yield


def _pass_logits(model: Any, ids: torch.Tensor, cache: Any, first: int, mask: Any, n_decode: int) -> torch.Tensor:
    """Feed positions ``first .. N - 1`` of ``ids`` (int64 ``[N]``) over ``cache`` (``first`` positions held);
    float32 logits ``[T, V]`` of the last ``n_decode`` rows."""
    device = next(model.parameters()).device
    out = model(input_ids=ids[None, first:].to(device), position_ids=torch.arange(first, ids.numel())[None].to(device),
                attention_mask=mask, cache=cache, use_cache=True, logits_to_keep=n_decode)
    return out.logits[0].float()


def plain_pass(model: Any, ids: torch.Tensor, n_decode: int) -> tuple[torch.Tensor, Any]:
    """Arm ``A0``: one forward of every position with the model's own causal mask.

    Args:
        model: A transformers causal LM (Llama, Qwen2, Gemma 3 families).
        ids: int64 ``[N]``, the prompt and the continuation but its last token.
        n_decode: T, the decode rows (the last T positions).

    Returns:
        ``(logits, cache)``: float32 logits ``[T, V]`` of the decode rows, and a ``DynamicCache``
        built without a config, so every layer (a sliding one too) holds all N positions and can
        be cropped for :func:`intervened_logits`.
    """
    cache = DynamicCache()
    return _pass_logits(model, ids, cache, 0, None, n_decode), cache


def intervened_logits(model: Any, ids: torch.Tensor, cache: Any, intervention: Intervention,
                      n_decode: int) -> torch.Tensor:
    """One arm's pass: crop ``cache`` to ``first_query`` positions, then feed positions ``first_query .. N - 1``
    of ``ids`` with the intervention's mask (:func:`lab.intervene.masks.intervention_mask`).

    Args:
        model: An eager causal LM.
        ids: int64 ``[N]``, as given to :func:`plain_pass`.
        cache: Its cache, holding the plain pass's states at least up to ``first_query``; it leaves
            holding all N positions, those from ``first_query`` on computed under the mask.
        intervention: The arm's :class:`~lab.intervene.masks.Intervention`.
        n_decode: T.

    Returns:
        Float32 logits ``[T, V]`` of the decode rows.

    Raises:
        ValueError: a non-eager model.
    """
    rollback_cache(cache, intervention.first_query)
    mask = intervention_mask(model, intervention, ids.numel())
    return _pass_logits(model, ids, cache, intervention.first_query, mask, n_decode)


def _outcome(target_logits: torch.Tensor, draft_logits: torch.Tensor, masses: list[tuple[float, float]]) -> ArmOutcome:
    """Entropy, beta and the mean masses from float32 logits ``[T, V_target]`` / ``[T, V_draft]``."""
    v = min(target_logits.shape[-1], draft_logits.shape[-1])
    target_probs = target_logits.softmax(-1)[:, :v]  # [T, v]: the target's own row, padding mass left out
    draft_probs = draft_logits[:, :v].softmax(-1).to(target_probs.device)  # [T, v]: q = 0 on padding rows
    assert masses, "no attention layer reported"
    return ArmOutcome(entropy_bits=tuple(entropy(target_logits).tolist()),
                      beta=tuple(acceptance_probability(target_probs, draft_probs).tolist()),
                      span_mass=sum(m for m, _ in masses) / len(masses),
                      sink_mass=sum(s for _, s in masses) / len(masses))


def _check_inputs(target: Any, draft: Any, prompt_ids: torch.Tensor, span: AddedSpan,
                  continuation: torch.Tensor, where: str) -> None:
    check_eager(target, "target")
    check_eager(draft, "draft")
    for name, t in (("prompt_ids", prompt_ids), ("continuation", continuation)):
        if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.numel() < 1 or t.dtype != torch.long:
            raise ValueError(f"{where}{name} must be a non-empty int64 [L] tensor, got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if span.end >= prompt_ids.numel() - 1:
        raise ValueError(f"{where}span=[{span.start}, {span.end}) must end before the question, which ends at the "
                         f"last prompt token ({prompt_ids.numel() - 1})")
    n = prompt_ids.numel() + continuation.numel() - 1
    for which, model in (("target", target), ("draft", draft)):
        limit = context_length(model)
        if limit is not None and n > limit:
            raise ValueError(f"{where}its {prompt_ids.numel()} tokens and the {continuation.numel()}-token continuation "
                             f"need {n} positions, more than the {which} model's context of {limit}")


@contextmanager
def _read_draft(target: Any, draft: Any, n_shared: int | None, n_decode: int, out: list[torch.Tensor]) -> Iterator[None]:
    """:func:`_early_exit_logits` for an early-exit draft; nothing for a separate one."""
    if n_shared is None:
        yield
    else:
        with _early_exit_logits(target, draft, n_shared, n_decode, out):
            yield


@torch.inference_mode()
def score_twin(target: Any, draft: Any, prompt_ids: torch.Tensor, span: AddedSpan, continuation: torch.Tensor, *,
               prompt_id: str = "", variant: str = "") -> TwinOutcome:
    """Every arm of :data:`~lab.intervene.masks.ARMS` on one twin, teacher-forced on ``continuation``.

    Args:
        target: The target causal LM, eager attention.
        draft: A causal LM with the target's vocabulary (a separate model, or
            :func:`lab.speculative.self_draft.early_exit_model`), eager attention; it gets the
            target's masks.
        prompt_ids: int64 ``[S]`` (:func:`lab.intervene.masks.twin_prompt_ids`).
        span: The twin's added span, ending before S - 2 (a question follows it).
        continuation: int64 ``[T]``, the clean prompt's greedy continuation.
        prompt_id / variant: Recorded in the result.

    Returns:
        :class:`TwinOutcome`.

    Raises:
        ValueError: a non-eager model, bad ids or span, or a sequence beyond a model's context.
    """
    where = f"prompt {prompt_id!r}: " if prompt_id else ""
    _check_inputs(target, draft, prompt_ids, span, continuation, where)
    n_prompt, n_decode = prompt_ids.numel(), continuation.numel()
    ids = torch.cat([prompt_ids, continuation[:-1]])  # [N]

    # 1. A0: the plain forward of each model fills its cache with every position (an early-exit
    #    draft's logits come from the target's pass).
    n_shared = shared_layers(target, draft)
    masses: list[tuple[float, float]] = []
    early: list[torch.Tensor] = []
    with _attention_masses(target, span, n_decode, masses), _read_draft(target, draft, n_shared, n_decode, early):
        target_logits, target_cache = plain_pass(target, ids, n_decode)
    draft_logits, draft_cache = (early.pop(), None) if n_shared else plain_pass(draft, ids, n_decode)
    arms = {"A0": _outcome(target_logits, draft_logits, masses)}

    # 2. The interventions: crop to the arm's first query, feed the rest with its mask. The positions
    #    below `plain` still hold the plain pass's states; an arm may only start at or below it.
    plain = ids.numel()
    for arm in ARMS[1:]:
        intervention = arm_intervention(arm, span, n_prompt)
        assert intervention.first_query <= plain, f"arm {arm} needs plain states the cache no longer holds"
        masses = []
        with _attention_masses(target, span, n_decode, masses), _read_draft(target, draft, n_shared, n_decode, early):
            target_logits = intervened_logits(target, ids, target_cache, intervention, n_decode)
        draft_logits = early.pop() if n_shared else intervened_logits(draft, ids, draft_cache, intervention, n_decode)
        plain = intervention.first_query
        arms[arm] = _outcome(target_logits, draft_logits, masses)

    # 3. The control: the empty mask reproduces the plain forward.
    diff = max(abs(a - b) for a, b in zip(arms["empty"].entropy_bits, arms["A0"].entropy_bits))
    return TwinOutcome(prompt_id=prompt_id, variant=variant, n_prompt=n_prompt, span=span, n_decode=n_decode,
                       arms=arms, empty_max_diff_bits=diff)
