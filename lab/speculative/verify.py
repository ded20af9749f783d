"""Speculative verification: the probability-ratio test (pure math, no model code).

References: Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via
Speculative Decoding" (Algorithm 1, section 2.3); Chen et al. 2023, "Accelerating Large
Language Model Decoding with Speculative Sampling" (Algorithm 2). Notation: p = target
distribution, q = draft distribution. A draft token x ~ q is kept with probability
min(1, p(x)/q(x)); at the first rejection the next token is drawn from the residual
norm(max(0, p - q)); when every draft token is kept, a bonus token is drawn from the
target's distribution after the last one. The emitted tokens are then distributed
exactly as sampling the target alone (Leviathan et al., Theorem 3.5 / appendix A.1).

Randomness comes from a :class:`RandomSource`: the ratio test's uniforms and the final
categorical draw. The default, :class:`TorchRandom`, draws both from a
``torch.Generator``; tests pass a stub that returns exact boundary values (a uniform of
exactly 0, the largest float64 below 1, or exactly ``p/q``), which a seeded generator
practically never produces, so boundary faults such as accepting a token the target
gives p = 0 when u = 0 (vLLM PR #23803) become visible.

Shapes: gamma = number of draft tokens, V = vocabulary size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

# When the residual's total mass is below this floor, p and q are equal up to float32
# rounding (softmax over ~5e4 entries carries ~1e-7 relative error per entry, summing
# to ~1e-6 at most), so the residual is numerically meaningless. The rejection that
# reaches it happens with probability equal to that mass (< 1e-6), and falling back to
# p changes the emitted distribution by at most that much.
RESIDUAL_MASS_FLOOR = 1e-6


def residual_probs(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """Normalized ``max(0, p - q)``, the distribution drawn from after a rejection.

    Args:
        target_probs: p, float ``[..., V]`` probabilities (not logits), rows summing to 1.
        draft_probs: q, float ``[..., V]`` probabilities, same shape.

    Returns:
        Float ``[..., V]`` probabilities. A row whose residual mass is at or below
        :data:`RESIDUAL_MASS_FLOOR` (p == q up to rounding, including an all-zero
        ``max(0, p - q)``) returns p for that row, never NaN. Inputs are not modified.

    Raises:
        ValueError: shapes differ.

    Examples:
        ``max(0, p - q) = (0.375, 0.125, 0)`` has mass 0.5:

        >>> target_probs, draft_probs = torch.tensor([0.5, 0.25, 0.25]), torch.tensor([0.125, 0.125, 0.75])
        >>> residual_probs(target_probs, draft_probs).tolist()
        [0.75, 0.25, 0.0]
    """
    if target_probs.shape != draft_probs.shape:
        raise ValueError(f"target_probs shape {tuple(target_probs.shape)} != draft_probs shape {tuple(draft_probs.shape)}")
    diff = (target_probs - draft_probs).clamp_min(0.0)
    mass = diff.sum(dim=-1, keepdim=True)
    usable = mass > RESIDUAL_MASS_FLOOR
    return torch.where(usable, diff / mass.clamp_min(RESIDUAL_MASS_FLOOR), target_probs)


class RandomSource(Protocol):
    """Where :func:`verify` gets its randomness; :class:`TorchRandom` is the default."""

    def uniforms(self, n: int, device: torch.device) -> torch.Tensor:
        """float64 ``[n]`` draws from U[0, 1) on ``device``, one per draft token."""
        ...

    def categorical(self, probs: torch.Tensor) -> int:
        """One index drawn from ``probs`` (float ``[V]`` probabilities summing to 1)."""
        ...


@dataclass(frozen=True)
class TorchRandom:
    """The default :class:`RandomSource`: ``torch.rand`` and ``torch.multinomial``.

    Attributes:
        generator: The ``torch.Generator`` to draw from; None = torch's global one.
    """

    generator: torch.Generator | None = None

    def uniforms(self, n: int, device: torch.device) -> torch.Tensor:
        return torch.rand(n, generator=self.generator, dtype=torch.float64, device=device)

    def categorical(self, probs: torch.Tensor) -> int:
        return int(torch.multinomial(probs, 1, generator=self.generator))


def _check_rows(draft_tokens: torch.Tensor, draft_rows: int, target_rows: int, vocab: int) -> int:
    if draft_tokens.dim() != 1 or draft_tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"draft_tokens must be a 1-D integer tensor [gamma], got shape "
                         f"{tuple(draft_tokens.shape)} dtype {draft_tokens.dtype}")
    gamma = draft_tokens.shape[0]
    if target_rows != gamma + 1:
        raise ValueError(f"target rows must be gamma + 1 = {gamma + 1}, got {target_rows}")
    if draft_rows != gamma:
        raise ValueError(f"draft_probs rows must be gamma = {gamma}, got {draft_rows}")
    if gamma and (int(draft_tokens.min()) < 0 or int(draft_tokens.max()) >= vocab):
        raise ValueError(f"draft_tokens={draft_tokens.tolist()} has ids outside [0, {vocab})")
    return gamma


def verify(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    *,
    generator: torch.Generator | None = None,
    random_source: RandomSource | None = None,
) -> tuple[int, int]:
    """Speculative sampling's accept/resample step (Leviathan et al. 2023, Algorithm 1).

    Token i is accepted when ``u_i < p_i(x_i) / q_i(x_i)`` with ``u_i ~ U[0, 1)``
    (tested as ``u_i * q < p`` so a token with p = 0 is never accepted); the first
    rejection stops the round and the next token comes from
    :func:`residual_probs` of that row; with all accepted the bonus token comes from
    row gamma of ``target_probs``.

    Args:
        draft_tokens: int64 ``[gamma]`` (gamma >= 0), the drafted token ids.
        draft_probs: float ``[gamma, V]``: q, the distribution each draft token was
            actually sampled from (after temperature / top-k / top-p). A one-hot row
            (greedy draft, prompt lookup) is a valid q.
        target_probs: float ``[gamma + 1, V]``: p, the target's probabilities after the
            same sampling filter, row i conditioned on the prefix plus drafts < i.
        generator: ``torch.Generator`` for the uniforms and the final draw (the
            default path, :class:`TorchRandom`).
        random_source: Instead of ``generator``, any :class:`RandomSource`; tests use
            it to feed exact boundary uniforms (0, ``p/q``) and to see which row the
            final token is drawn from. Its uniforms must be float ``[gamma]`` in [0, 1).

    Returns:
        ``(n_accepted, next_token)``: how many leading draft tokens are kept (0..gamma)
        and the correction (n_accepted < gamma) or bonus (n_accepted == gamma) token.

    Raises:
        ValueError: wrong shapes, ids out of range, a draft token that its own
            q gives probability 0 (it cannot have been sampled from q), both
            ``generator`` and ``random_source`` given, or uniforms from
            ``random_source`` of the wrong shape or outside [0, 1).

    Examples:
        A :class:`RandomSource` whose uniforms are all 0.5 and whose final draw is the
        argmax. Draft token 0 has p/q = 1/0.5 and is kept; draft token 2 has p = 0 and
        is rejected, so the next token comes from the residual (0, 0.5, 0) / 0.5. Drafting
        token 1 instead (p/q = 3) keeps both, and the bonus comes from the last row.

        >>> class HalfAndArgmax:
        ...     def uniforms(self, n, device): return torch.full((n,), 0.5, dtype=torch.float64)
        ...     def categorical(self, probs): return int(probs.argmax())
        >>> draft_probs = torch.tensor([[0.5, 0.5, 0.0], [0.25, 0.25, 0.5]])
        >>> target_probs = torch.tensor([[1.0, 0.0, 0.0], [0.25, 0.75, 0.0], [0.0, 0.0, 1.0]])
        >>> verify(torch.tensor([0, 2]), draft_probs, target_probs, random_source=HalfAndArgmax())
        (1, 1)
        >>> verify(torch.tensor([0, 1]), draft_probs, target_probs, random_source=HalfAndArgmax())
        (2, 2)
    """
    if generator is not None and random_source is not None:
        raise ValueError("pass generator or random_source, not both")
    source = TorchRandom(generator) if random_source is None else random_source
    vocab = target_probs.shape[-1]
    if target_probs.dim() != 2 or draft_probs.dim() != 2 or draft_probs.shape[-1] != vocab:
        raise ValueError(f"target_probs {tuple(target_probs.shape)} and draft_probs {tuple(draft_probs.shape)} "
                         "must be [gamma + 1, V] and [gamma, V]")
    gamma = _check_rows(draft_tokens, draft_probs.shape[0], target_probs.shape[0], vocab)
    if gamma == 0:
        return 0, source.categorical(target_probs[0])
    idx = draft_tokens.long().unsqueeze(-1)
    p = target_probs[:gamma].gather(-1, idx).squeeze(-1).double()  # [gamma]
    q = draft_probs.gather(-1, idx).squeeze(-1).double()  # [gamma]
    if bool((q <= 0).any()):
        bad = int((q <= 0).nonzero()[0])
        raise ValueError(f"draft_probs gives draft_tokens[{bad}]={int(draft_tokens[bad])} probability 0; "
                         "q must be the distribution the draft token was sampled from")
    u = source.uniforms(gamma, p.device).double()  # [gamma]
    if u.shape != (gamma,) or not bool(((u >= 0) & (u < 1)).all()):
        raise ValueError(f"random_source.uniforms({gamma}) returned {u.tolist()}; need float [gamma] in [0, 1)")
    accepted = u * q < p  # u < p/q without dividing; p = 0 -> never accepted
    n_accepted = int(accepted.long().cumprod(0).sum())
    if n_accepted < gamma:
        row = residual_probs(target_probs[n_accepted], draft_probs[n_accepted])
    else:
        row = target_probs[gamma]
    return n_accepted, source.categorical(row)


def verify_greedy(draft_tokens: torch.Tensor, target_logits: torch.Tensor) -> tuple[int, int]:
    """Greedy verification: keep draft tokens while each is the target's argmax.

    With temperature 0 both p and q are one-hot, and :func:`verify` reduces to this
    comparison; this variant skips the softmax and the random draws.

    Args:
        draft_tokens: int64 ``[gamma]``.
        target_logits: float ``[gamma + 1, V]`` target logits (or probabilities: only
            the argmax is used), row i conditioned on the prefix plus drafts < i.

    Returns:
        ``(n_accepted, next_token)`` with ``next_token`` the target's argmax after the
        kept tokens (the correction, or the bonus when all are kept).

    Raises:
        ValueError: wrong shapes or ids out of range.

    Examples:
        The target's argmaxes are 2, 1, 0: draft token 2 is kept, draft token 0 is not,
        and the target's 1 replaces it; drafting 2, 1 keeps both and adds the bonus 0.

        >>> target_logits = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
        >>> verify_greedy(torch.tensor([2, 0]), target_logits)
        (1, 1)
        >>> verify_greedy(torch.tensor([2, 1]), target_logits)
        (2, 0)
    """
    if target_logits.dim() != 2:
        raise ValueError(f"target_logits must be [gamma + 1, V], got {tuple(target_logits.shape)}")
    gamma = _check_rows(draft_tokens, draft_tokens.shape[0] if draft_tokens.dim() == 1 else -1,
                        target_logits.shape[0], target_logits.shape[-1])
    best = target_logits.argmax(dim=-1)  # [gamma + 1]
    matches = (best[:gamma] == draft_tokens.to(best.device)).long()
    n_accepted = int(matches.cumprod(0).sum()) if gamma else 0
    return n_accepted, int(best[n_accepted])
