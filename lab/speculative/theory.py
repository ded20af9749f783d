"""Closed forms for speculative decoding: expected tokens, speedup, breakeven, FLOPs.

References: Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via
Speculative Decoding": alpha = E[sum_x min(p(x), q(x))] (Definition 3.1, with
p = target, q = draft), tokens per round (1 - alpha^(gamma+1)) / (1 - alpha)
(Equation 1), walltime improvement (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1))
(Theorem 3.8), where c is the time of one draft step over one target step. Those
formulas assume acceptances are i.i.d. with rate alpha, so the number accepted per
round follows a geometric law truncated at gamma; :func:`accepted_length_pmf` is that law.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import torch
from scipy.optimize import brentq


def _check_alpha(alpha: float) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= alpha <= 1.0:  # NaN: False
        raise ValueError(f"alpha={alpha!r} must be a number in [0, 1]")
    return float(alpha)


def _check_gamma(gamma: int) -> int:
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma={gamma!r} must be an integer >= 1")
    if gamma > sys.float_info.max:  # the closed forms compute in floats
        raise ValueError(f"gamma={gamma!r} is past what a float holds")
    return gamma


# Past this gamma the tokens per round come from the closed form (the sum would take minutes or never end).
_SUMMED_GAMMA = 4096
# A law over gamma + 1 lengths is a list of that many floats: 2**20 + 1 of them is 8 MB.
MAX_PMF_GAMMA = 2**20


def _check_cost(cost_ratio: float) -> float:
    if (isinstance(cost_ratio, bool) or not isinstance(cost_ratio, (int, float)) or not cost_ratio >= 0  # NaN: False
            or isinstance(cost_ratio, int) and cost_ratio > sys.float_info.max):  # an int no float holds
        raise ValueError(f"cost_ratio={cost_ratio!r} must be a number >= 0")
    return float(cost_ratio)


def expected_tokens_per_round(alpha: float, gamma: int) -> float:
    """Expected tokens emitted per round, ``(1 - alpha^(gamma+1)) / (1 - alpha)``.

    Leviathan et al. 2023, Equation 1; equals gamma + 1 at alpha = 1. Computed as the
    finite sum ``sum_{k=0..gamma} alpha^k`` (the same value, stable near alpha = 1); past
    gamma = 4096 as ``-expm1((gamma + 1) log1p(-(1 - alpha))) / (1 - alpha)``, which stays
    accurate near alpha = 1 and takes any int gamma in constant time.

    Raises:
        ValueError: alpha outside [0, 1], gamma < 1, or gamma past what a float holds.

    Examples:
        >>> expected_tokens_per_round(0.5, 2)  # 1 + 0.5 + 0.25
        1.75
        >>> expected_tokens_per_round(1.0, 4)  # every draft kept, plus the bonus token
        5.0
    """
    a, g = _check_alpha(alpha), _check_gamma(gamma)
    if g <= _SUMMED_GAMMA:
        return float(sum(a ** k for k in range(g + 1)))
    if a in (0.0, 1.0):
        return 1.0 if a == 0.0 else float(g) + 1.0
    n = float(g) + 1.0
    if a < 0.5:  # no cancellation: 1 - a**n is near 1 (and 1 - a may round to 1, where log1p(-1) fails)
        return (1.0 - a ** n) / (1.0 - a)
    d = 1.0 - a  # exact for alpha >= 0.5 (Sterbenz), where the cancellation would bite
    return -math.expm1(n * math.log1p(-d)) / d


def expected_speedup(alpha: float, gamma: int, cost_ratio: float) -> float:
    """Expected walltime improvement ``E[tokens per round] / (gamma * c + 1)``.

    Leviathan et al. 2023, Theorem 3.8; c = ``cost_ratio`` = draft step time / target
    step time, and one verify call over gamma + 1 tokens is assumed to cost one target
    step (true when decoding is memory-bound; on a CPU it often is not, which
    ``lab bench`` measures separately).

    Raises:
        ValueError: alpha outside [0, 1], gamma < 1, or cost_ratio < 0.

    Examples:
        1.75 tokens per round for 2 draft steps at a quarter of a target step each:

        >>> round(expected_speedup(0.5, 2, 0.25), 4)  # 1.75 / (2 * 0.25 + 1)
        1.1667
    """
    c = _check_cost(cost_ratio)
    return expected_tokens_per_round(alpha, gamma) / (gamma * c + 1.0)


def breakeven_alpha(gamma: int, cost_ratio: float) -> float | None:
    """The acceptance rate at which the expected speedup is exactly 1.

    Root of ``expected_speedup(alpha, gamma, c) = 1`` in [0, 1] via
    :func:`scipy.optimize.brentq`. The speedup grows with alpha, from 1 / (gamma c + 1)
    at alpha = 0 to (gamma + 1) / (gamma c + 1) at alpha = 1.

    Returns:
        The breakeven alpha; 0.0 when c = 0 (any alpha helps); ``None`` when c >= 1
        (no alpha in [0, 1) gives a speedup above 1).

    Raises:
        ValueError: gamma < 1 or cost_ratio < 0.

    Examples:
        With gamma 1 and c = 0.5 the speedup is (1 + alpha) / 1.5, which is 1 at alpha = 0.5:

        >>> round(breakeven_alpha(1, 0.5), 4)
        0.5
        >>> breakeven_alpha(2, 0.0), breakeven_alpha(2, 1.0)
        (0.0, None)
    """
    g, c = _check_gamma(gamma), _check_cost(cost_ratio)
    if c == 0.0:
        return 0.0
    if expected_speedup(1.0, g, c) <= 1.0:
        return None
    return float(brentq(lambda a: expected_speedup(a, g, c) - 1.0, 0.0, 1.0, xtol=1e-12))


def accepted_length_pmf(alpha: float, gamma: int) -> list[float]:
    """Truncated geometric law of the number of accepted draft tokens per round.

    ``P(n = k) = alpha^k (1 - alpha)`` for k < gamma and ``P(n = gamma) = alpha^gamma``,
    for i.i.d. acceptances at rate alpha (the assumption behind Leviathan et al. Eq. 1).

    Returns:
        ``gamma + 1`` probabilities summing to 1, index k = k tokens accepted.

    Raises:
        ValueError: alpha outside [0, 1], gamma < 1, or gamma above :data:`MAX_PMF_GAMMA` (2**20:
            the list holds gamma + 1 floats).

    Examples:
        >>> accepted_length_pmf(0.5, 2)  # 0.5, 0.5 * 0.5, and all kept 0.5^2
        [0.5, 0.25, 0.25]
    """
    a, g = _check_alpha(alpha), _check_gamma(gamma)
    if g > MAX_PMF_GAMMA:
        raise ValueError(f"gamma={g!r} is past {MAX_PMF_GAMMA:,}: the law would be a list of gamma + 1 floats")
    return [a ** k * (1.0 - a) for k in range(g)] + [a ** g]


def acceptance_probability(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """Per-position acceptance probability ``beta = sum_x min(p(x), q(x))``.

    Leviathan et al. 2023, Definition 3.1 / Corollary 3.6 (beta = 1 - total variation
    distance). Args: float ``[..., V]`` probabilities p (target) and q (draft). Returns
    float ``[...]``.

    Examples:
        >>> target_probs, draft_probs = torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.25, 0.25, 0.5])
        >>> round(float(acceptance_probability(target_probs, draft_probs)), 4)  # 0.25 + 0.25 + 0
        0.5
    """
    if target_probs.shape != draft_probs.shape:
        raise ValueError(f"target_probs shape {tuple(target_probs.shape)} != draft_probs shape {tuple(draft_probs.shape)}")
    return torch.minimum(target_probs, draft_probs).sum(dim=-1)


def flops_per_token(config: Any, context_length: int = 0, num_layers: int | None = None) -> float:
    """Forward FLOPs for one token of a decoder-only transformer (a Llama-style config).

    Counts ``2 x`` the multiply-accumulates of every weight matmul (q, k, v and output
    projections, a gated MLP with three matrices, the LM head) plus the attention
    scores and weighted sum over ``context_length`` cached positions
    (``4 * layers * heads * head_dim * context``), as in Kaplan et al. 2020, Table 1.
    Omits norms, rotary embeddings, softmax, activations, residual adds and biases
    (each O(hidden) per layer, well under 1 % here) and the embedding lookup (no FLOPs).

    Args:
        config: A transformers config with ``hidden_size``, ``num_hidden_layers``,
            ``num_attention_heads``, ``intermediate_size``, ``vocab_size`` and
            optionally ``num_key_value_heads`` and ``head_dim``.
        context_length: Cached positions attended to (>= 0).
        num_layers: Count only this many layers (an early-exit draft).

    Returns:
        FLOPs as a float.

    Raises:
        ValueError: a missing config field, context_length < 0, or num_layers outside
            [1, num_hidden_layers].

    Examples:
        One layer, hidden size 2, one head of size 2, MLP 4, vocabulary 10: q, k, v, o are
        4 * 2 * 2 = 16 weights, the MLP 3 * 2 * 4 = 24, the LM head 2 * 10 = 20; twice 60 is
        120 FLOPs, and 3 cached positions add 4 * 1 * 1 * 2 * 3 = 24.

        >>> from types import SimpleNamespace
        >>> config = SimpleNamespace(hidden_size=2, num_hidden_layers=1, num_attention_heads=1,
        ...                          intermediate_size=4, vocab_size=10)
        >>> flops_per_token(config), flops_per_token(config, context_length=3)
        (120.0, 144.0)
    """
    try:
        h = int(config.hidden_size)
        total_layers = int(config.num_hidden_layers)
        n_heads = int(config.num_attention_heads)
        inter = int(config.intermediate_size)
        vocab = int(config.vocab_size)
    except AttributeError as exc:
        raise ValueError(f"config lacks a field flops_per_token needs: {exc}") from exc
    n_kv = int(getattr(config, "num_key_value_heads", None) or n_heads)
    head_dim = int(getattr(config, "head_dim", None) or h // n_heads)
    if context_length < 0:
        raise ValueError(f"context_length={context_length!r} must be >= 0")
    layers = total_layers if num_layers is None else num_layers
    if not 1 <= layers <= total_layers:
        raise ValueError(f"num_layers={num_layers!r} must be in [1, {total_layers}]")
    attn_params = h * n_heads * head_dim * 2 + h * n_kv * head_dim * 2  # q, o and k, v
    mlp_params = 3 * h * inter  # gate, up, down
    matmul = layers * (attn_params + mlp_params) + h * vocab
    attention = 4 * layers * n_heads * head_dim * context_length
    return float(2 * matmul + attention)


# Chi-square needs expected counts of at least 5 per bin; smaller bins are pooled.
MIN_EXPECTED_COUNT = 5.0


def geometric_fit(histogram: list[int], alpha: float) -> dict[str, Any]:
    """Compare an accepted-length histogram with the truncated geometric law at ``alpha``.

    Chi-square goodness of fit (``scipy.stats.chisquare``) on the raw counts, bins
    with expected count < 5 pooled with their neighbour, one degree of freedom removed
    because alpha is estimated from the same rounds (``ddof=1``). A small p-value says
    acceptances are not i.i.d. across positions (real text: easy and hard stretches),
    which is what breaks Leviathan et al.'s expected-speedup formula.

    Args:
        histogram: ``[gamma + 1]`` raw counts of rounds by tokens accepted.
        alpha: The acceptance rate.

    Returns:
        ``{"expected": [...], "chi2": float | None, "p_value": float | None, "bins": int}``;
        chi2 and p_value are None when fewer than 3 pooled bins remain.

    Examples:
        100 rounds at alpha 0.5 and gamma 2 expect 50, 25, 25; counts of 80, 10, 10 give
        chi2 = 30^2 / 50 + 15^2 / 25 + 15^2 / 25 = 36 on 1 degree of freedom:

        >>> fit = geometric_fit([80, 10, 10], alpha=0.5)
        >>> fit["expected"], round(fit["chi2"], 4), fit["p_value"] < 1e-6, fit["bins"]
        ([50.0, 25.0, 25.0], 36.0, True, 3)
    """
    from scipy.stats import chisquare

    gamma = len(histogram) - 1
    n = sum(histogram)
    if n == 0 or gamma < 1 or math.isnan(alpha):
        return {"expected": [0.0] * len(histogram), "chi2": None, "p_value": None, "bins": 0}
    expected = [n * p for p in accepted_length_pmf(alpha, gamma)]
    obs_bins, exp_bins, o_acc, e_acc = [], [], 0.0, 0.0
    for o, e in zip(histogram, expected):
        o_acc, e_acc = o_acc + o, e_acc + e
        if e_acc >= MIN_EXPECTED_COUNT:
            obs_bins.append(o_acc)
            exp_bins.append(e_acc)
            o_acc = e_acc = 0.0
    if e_acc > 0 and exp_bins:
        obs_bins[-1] += o_acc
        exp_bins[-1] += e_acc
    if len(obs_bins) < 3:
        return {"expected": expected, "chi2": None, "p_value": None, "bins": len(obs_bins)}
    scale = sum(obs_bins) / sum(exp_bins)
    res = chisquare(obs_bins, [e * scale for e in exp_bins], ddof=1)
    return {"expected": expected, "chi2": float(res.statistic), "p_value": float(res.pvalue), "bins": len(obs_bins)}
