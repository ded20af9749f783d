"""The lab's one sampling filter (temperature, top-k, top-p), and logits processors.

A ground-floor module: pure tensor math that imports nothing from the lab, so both
the decode core (:mod:`lab.decode`) and speculative decoding (:mod:`lab.speculative`)
stand on it.

Speculative sampling is lossless only if q is exactly the distribution the draft
token was drawn from and p is exactly the distribution plain sampling would draw
from (Leviathan et al. 2023, section 2.3: "the same sampling method" on both sides).
So draft and target go through :func:`sampling_probs` with the same
:class:`SamplingConfig`, and so does every target-only decode (the entropy tracker
and the baseline of ``lab bench``, through :mod:`lab.decode`): there is one filter
in the lab. Temperature 0 means greedy: the result is the one-hot argmax (no
division by zero). A tiny positive temperature whose scaled logits overflow float32
is handled exactly, as its limit: the row is shifted by its maximum before dividing,
which leaves the distribution unchanged and makes it uniform over the tied maxima
(:func:`_scale`). Top-k then top-p (nucleus, Holtzman et al. 2020) are applied to
the temperature-scaled logits, in that order, as transformers' ``generate`` does.

:func:`filter_logits` performs exactly the tensor operations of transformers 5.24's
``TemperatureLogitsWarper`` -> ``TopKLogitsWarper`` -> ``TopPLogitsWarper``
(``generation/logits_process.py``), written out so this module stays free of
transformers: the same comparison at the k-th logit (ties there are all kept), the
same ascending sort and cumulative sum for top-p (a token is dropped when the mass
of the tokens below it and itself is <= 1 - top_p; the most likely token is always
kept). The unit tests check, with hypothesis on random logits with ties, that both
keep the same token set and give the same probabilities.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class SamplingConfig:
    """How tokens are drawn.

    Attributes:
        temperature: 0 for greedy (argmax), else > 0; logits are divided by it.
        top_k: Keep the k most likely tokens (ties at the k-th value kept); None = all.
        top_p: Keep the smallest set of most likely tokens whose mass reaches top_p
            (the token that crosses it included); 1.0 = all.
    """

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float = 1.0

    def __post_init__(self) -> None:
        t = self.temperature
        # abs(t) <= float max: an int no float holds (10**400) is refused, not an OverflowError in isfinite
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not abs(t) <= sys.float_info.max or t < 0:
            raise ValueError(f"temperature={t!r} must be a finite number >= 0 (0 = greedy)")
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1):
            raise ValueError(f"top_k={self.top_k!r} must be a positive integer or None")
        p = self.top_p
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
            raise ValueError(f"top_p={p!r} must be in (0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def filter_logits(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """Temperature, then top-k, then top-p, as transformers' warpers apply them.

    Args:
        logits: float ``[..., V]`` logits (not probabilities).
        config: The sampling settings; must not be greedy (temperature 0 has no
            filtered logits: the draw is the argmax).

    Returns:
        float32 ``[..., V]`` temperature-scaled logits with ``-inf`` at every token
        the filters drop (at least one token per row is kept). In a row where the
        division by a tiny temperature overflows, the scaled logits are shifted by the
        row's maximum first (same distribution; see :func:`_scale`). The input is not
        modified.

    Raises:
        ValueError: ``config`` is greedy.

    Examples:
        Temperature 0.5 doubles the logits, top-k 2 masks all but the two largest; top-p
        0.7 over p = (0.5, 0.3, 0.15, 0.05) keeps the first two (0.5 < 0.7 <= 0.8):

        >>> top_k = SamplingConfig(temperature=0.5, top_k=2)
        >>> filter_logits(torch.tensor([2.0, 1.0, 0.0, -1.0]), top_k).tolist()
        [4.0, 2.0, -inf, -inf]
        >>> top_p = SamplingConfig(temperature=1.0, top_p=0.7)
        >>> filter_logits(torch.tensor([0.5, 0.3, 0.15, 0.05]).log(), top_p).isfinite().tolist()
        [True, True, False, False]
    """
    if config.greedy:
        raise ValueError("filter_logits needs temperature > 0; greedy decoding takes the argmax of the raw logits")
    x = _scale(logits.float(), config.temperature)
    if config.top_k is not None:
        k = min(config.top_k, x.shape[-1])
        kth = x.topk(k, dim=-1).values[..., -1:]  # [..., 1]
        x = x.masked_fill(x < kth, float("-inf"))  # ties at the k-th value are kept
    if config.top_p < 1.0:
        sorted_x, order = x.sort(dim=-1, descending=False)  # least likely first, as transformers sorts
        cum = sorted_x.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = cum <= (1 - config.top_p)  # the low tail whose mass stays within 1 - top_p
        drop_sorted[..., -1:] = False  # the most likely token always stays
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        x = x.masked_fill(drop, float("-inf"))
    return x


# Half of float32's largest value: a logit below temperature * this bound divides to at most
# half the maximum in exact arithmetic, so the float32 quotient cannot round to inf.
NO_OVERFLOW_BOUND = float(torch.finfo(torch.float32).max) / 2
_FLOAT32_TINY = float(torch.finfo(torch.float32).tiny)  # smallest normal float32
_FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def _scale(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``logits / temperature``, exactly as transformers divides, except in rows where that overflows.

    A tiny positive temperature (1e-38, say) turns finite logits into +-inf, and softmax
    of +inf is NaN. There the row is shifted by its maximum first: ``(logits - max) /
    temperature`` lies in [-inf, 0], so the maximum stays 0 and the rest may only
    underflow to -inf (computed in float64, so that temperatures below float32's
    smallest subnormal do not round to 0 and give 0/0). Softmax is shift-invariant and top-k / top-p only compare and
    softmax, so this is the same distribution, now computable: as temperature -> 0+ it
    is uniform over the tied maxima (the greedy limit). Rows that do not overflow keep
    the plain division (shifting rounds, and could merge logits transformers keeps apart).

    The overflow test (two passes over V and a reduction, per row of every decode step) is
    skipped where no row can overflow: temperature >= 1 (``|x / t| <= |x|``), or a normal float32
    temperature and every logit finite and below ``t * NO_OVERFLOW_BOUND`` in magnitude (one pass). Same result, fewer passes.
    """
    # Past float32's largest the divisor would round to inf (-inf / inf = NaN) and an int past 2**63 is refused by
    # torch: the largest float32 gives the same distribution (every finite logit scaled to within 1 of 0)
    temperature = min(float(temperature), _FLOAT32_MAX)
    x = logits / temperature
    if temperature >= 1.0:
        return x
    # a temperature below float32's smallest normal may round to 0 (0 / 0): always the full test
    if temperature >= _FLOAT32_TINY and float(logits.abs().amax()) < temperature * NO_OVERFLOW_BOUND:
        return x  # (a NaN or inf logit makes the comparison False: the full test below)
    overflow = (~torch.isfinite(x) & torch.isfinite(logits)).any(dim=-1, keepdim=True)  # [..., 1]
    if not bool(overflow.any()):
        return x
    # float64: a temperature below float32's smallest subnormal (~1.4e-45) would round to 0 in float32
    top = logits.amax(dim=-1, keepdim=True)  # [..., 1]
    shifted = ((logits.double() - top.double()) / temperature).float()  # [..., V], <= 0 where logits are finite
    return torch.where(overflow, shifted, x)


def sampling_probs(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """Turn logits into the distribution a token is actually drawn from.

    Args:
        logits: float ``[..., V]`` logits (not probabilities).
        config: The sampling settings.

    Returns:
        float32 ``[..., V]`` probabilities: ``softmax(filter_logits(logits))``, or
        one-hot at the argmax when greedy. The input is not modified.

    Examples:
        Top-k 2 renormalizes 0.5 and 0.3 to 0.5 / 0.8 and 0.3 / 0.8; greedy is one-hot:

        >>> logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()
        >>> probs = sampling_probs(logits, SamplingConfig(temperature=1.0, top_k=2))
        >>> [round(p, 4) for p in probs.tolist()]
        [0.625, 0.375, 0.0, 0.0]
        >>> sampling_probs(logits, SamplingConfig(temperature=0.0)).tolist()
        [1.0, 0.0, 0.0, 0.0]
    """
    if config.greedy:
        x = logits.float()
        return torch.nn.functional.one_hot(x.argmax(dim=-1), x.shape[-1]).float()
    return filter_logits(logits, config).softmax(dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token id per row of ``probs`` (float ``[..., V]``); returns int64 ``[...]``.

    Examples:
        >>> sample(torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])).tolist()  # one-hot rows
        [1, 0]
    """
    flat = probs.reshape(-1, probs.shape[-1])  # [B, V]
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


def apply_processors(logits_processor: Any, prefix_ids: torch.Tensor, row_tokens: torch.Tensor,
                     logits: torch.Tensor) -> torch.Tensor:
    """Apply transformers logits processors to each verified position with its own prefix.

    Row i of ``logits`` predicts the token after ``prefix_ids + row_tokens[:i]``, so a
    repetition penalty (say) at row i sees the earlier draft tokens, exactly as plain
    decoding would have seen them had it emitted those tokens.

    Args:
        logits_processor: A ``transformers.LogitsProcessorList`` (or any callable
            ``(input_ids [1, L], scores [1, V]) -> scores``), or None.
        prefix_ids: int64 ``[L]``, the committed sequence.
        row_tokens: int64 ``[k]``, draft tokens; ``logits`` has k + 1 rows.
        logits: float ``[k + 1, V]``.

    Returns:
        New float ``[k + 1, V]`` logits; the input is not modified.

    Examples:
        A processor that adds the length of the sequence it sees: row i sees the
        2-token prefix plus i draft tokens.

        >>> add_length = lambda input_ids, scores: scores + input_ids.shape[-1]
        >>> prefix_ids, row_tokens = torch.tensor([5, 6]), torch.tensor([7, 8])
        >>> apply_processors(add_length, prefix_ids, row_tokens, torch.zeros(3, 2)).tolist()
        [[2.0, 2.0], [3.0, 3.0], [4.0, 4.0]]
    """
    if logits_processor is None:
        return logits
    full = torch.cat([prefix_ids, row_tokens.to(prefix_ids.device)])  # [L + k]
    base = prefix_ids.shape[0]
    rows = [logits_processor(full[: base + i].unsqueeze(0), logits[i : i + 1].clone()) for i in range(logits.shape[0])]
    return torch.cat(rows, dim=0)
