"""Entropy of next-token distributions, from logits (pure math, no model code).

For a distribution p over V entries (``p = softmax(logits)``):

* Shannon entropy ``H = -sum_i p_i log p_i`` (Shannon 1948), in bits unless
  ``unit="nats"``; ``0 <= H <= log2 V``.
* Normalized entropy ``H / log V`` in ``[0, 1]``, where V is the number of entries
  along the reduced dimension (masked ``-inf`` entries included, so the scale is
  the same for every step of a decode).
* Varentropy ``V(p) = sum_i p_i (-log p_i - H)^2``, the variance of the surprisal
  ``-log p``: how unevenly the uncertainty is spread (used by entropix-style
  adaptive samplers; see also Kontoyiannis & Verdu 2013 on the varentropy of a source).

All functions take logits of any float dtype and compute in float32 (or float64 if
given float64), so fp16/bf16 logits with extreme values stay finite. Entries equal
to ``-inf`` (masked by top-k / top-p filters) have probability 0 and contribute 0
(the convention ``0 log 0 = 0``), never NaN. A row that is entirely ``-inf`` has no
distribution and raises.

Shapes: logits ``[..., V]`` (or any shape with the vocabulary along ``dim``);
results drop ``dim``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

_UNITS = {"bits": math.log(2.0), "nats": 1.0}


def _log_probs(logits: torch.Tensor, dim: int) -> torch.Tensor:
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise ValueError(f"logits must be a floating-point tensor, got {type(logits).__name__}"
                         f"{'' if not isinstance(logits, torch.Tensor) else ' of dtype ' + str(logits.dtype)}")
    if logits.dim() == 0 or not -logits.dim() <= dim < logits.dim():
        raise ValueError(f"dim={dim} is out of range for logits of shape {tuple(logits.shape)}")
    if logits.shape[dim] == 0:
        raise ValueError(f"logits has no entries along dim={dim} (shape {tuple(logits.shape)})")
    x = logits if logits.dtype == torch.float64 else logits.float()
    if torch.isnan(x).any():
        raise ValueError("logits contain NaN")
    if torch.isposinf(x).any():
        raise ValueError("logits contain +inf; a distribution needs finite logits or -inf masks")
    if (x == float("-inf")).all(dim=dim).any():
        raise ValueError("a row of logits is entirely -inf: no token is possible")
    return torch.log_softmax(x, dim=dim)


def _check_unit(unit: str) -> float:
    if unit not in _UNITS:
        raise ValueError(f"unit={unit!r} is not supported; use 'bits' or 'nats'")
    return _UNITS[unit]


def _plogp_terms(logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(p, surprisal)`` with masked entries' surprisal set to 0 (0 * inf -> 0)."""
    p = logp.exp()
    surprisal = torch.where(p > 0, -logp, torch.zeros_like(logp))
    return p, surprisal


def entropy(logits: torch.Tensor, dim: int = -1, unit: str = "bits") -> torch.Tensor:
    """Shannon entropy of ``softmax(logits)`` along ``dim``.

    Args:
        logits: Float tensor ``[..., V]`` of unnormalized log-probabilities; ``-inf``
            marks impossible entries.
        dim: The vocabulary dimension.
        unit: ``"bits"`` (log base 2) or ``"nats"``.

    Returns:
        Float32 tensor (float64 for float64 input) with ``dim`` removed; values in
        ``[0, log V]`` in the chosen unit.

    Raises:
        ValueError: non-float logits, NaN or +inf, a row entirely ``-inf``, or an
            unknown unit.

    Examples:
        Uniform over 4 tokens is log2 4 = 2 bits; masking two of them leaves 1 bit:

        >>> logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, -math.inf, -math.inf]])
        >>> [round(h, 4) for h in entropy(logits).tolist()]
        [2.0, 1.0]
        >>> [round(h, 4) for h in entropy(logits, unit="nats").tolist()]  # ln 4, ln 2
        [1.3863, 0.6931]
    """
    scale = _check_unit(unit)
    p, surprisal = _plogp_terms(_log_probs(logits, dim))
    return (p * surprisal).sum(dim=dim).clamp_min(0.0) / scale


def normalized_entropy(logits: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Entropy divided by its maximum ``log V`` (V = entries along ``dim``), in ``[0, 1]``.

    A single-entry distribution (V = 1) has normalized entropy 0.

    Returns / Raises: as :func:`entropy`.

    Examples:
        Masked entries still count in V: 1 bit out of log2 4 = 2 is 0.5.

        >>> logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, -math.inf, -math.inf]])
        >>> [round(h, 4) for h in normalized_entropy(logits).tolist()]
        [1.0, 0.5]
    """
    h = entropy(logits, dim=dim, unit="nats")  # validates logits and dim first
    n = logits.shape[dim]
    if n <= 1:
        return torch.zeros_like(h)
    return (h / math.log(n)).clamp(0.0, 1.0)


def varentropy(logits: torch.Tensor, dim: int = -1, unit: str = "bits") -> torch.Tensor:
    """Variance of the surprisal ``-log p`` under p, along ``dim``.

    ``sum_i p_i (-log p_i - H)^2``, in squared units (bits^2 by default). It is 0
    for a uniform or one-hot distribution and >= 0 always.

    Returns / Raises: as :func:`entropy`.

    Examples:
        p = (1/2, 1/4, 1/4) has surprisals 1, 2, 2 bits and H = 1.5, so the variance is
        1/2 * 0.25 + 1/4 * 0.25 + 1/4 * 0.25 = 0.25 bits^2; a uniform p has none:

        >>> round(float(varentropy(torch.tensor([0.5, 0.25, 0.25]).log())), 4)
        0.25
        >>> round(float(varentropy(torch.zeros(4))), 4)
        0.0
    """
    scale = _check_unit(unit)
    p, surprisal = _plogp_terms(_log_probs(logits, dim))
    h = (p * surprisal).sum(dim=dim, keepdim=True)
    dev = torch.where(p > 0, surprisal - h, torch.zeros_like(surprisal))
    return (p * dev.square()).sum(dim=dim).clamp_min(0.0) / (scale * scale)


@dataclass(frozen=True)
class TopK:
    """The k most likely entries of a distribution.

    Attributes:
        token_ids: int64 ``[..., k]``, most likely first.
        probs: float32 ``[..., k]``, their probabilities (not logits), descending.
    """

    token_ids: torch.Tensor
    probs: torch.Tensor


def top_k_alternatives(logits: torch.Tensor, k: int = 5, dim: int = -1) -> TopK:
    """The ``k`` most probable entries of ``softmax(logits)`` along ``dim`` (the last).

    Args:
        logits: Float tensor ``[..., V]``.
        k: Number of alternatives; clipped to V.
        dim: Must be the last dimension (``-1``).

    Returns:
        :class:`TopK` with ``[..., min(k, V)]`` ids and probabilities.

    Raises:
        ValueError: ``k < 1``, ``dim`` not last, or invalid logits (see :func:`entropy`).

    Examples:
        >>> top = top_k_alternatives(torch.tensor([0.1, 0.6, 0.3]).log(), k=2)
        >>> top.token_ids.tolist(), [round(p, 4) for p in top.probs.tolist()]
        ([1, 2], [0.6, 0.3])
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k={k!r} must be a positive integer")
    probs = _log_probs(logits, -1).exp()  # validates logits first
    if dim not in (-1, logits.dim() - 1):
        raise ValueError(f"dim={dim} must be the last dimension")
    values, ids = probs.topk(min(k, probs.shape[-1]), dim=-1)
    return TopK(token_ids=ids, probs=values)
