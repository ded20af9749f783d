"""The lab's one sampling filter (temperature, top-k, top-p), and logits processors.

A ground-floor module: pure tensor math that imports nothing from the lab, so both
the decode core (:mod:`lab.decode`) and speculative decoding (:mod:`lab.speculative`)
stand on it (it lived in ``lab/speculative/sampling.py``, which now re-exports it).

Speculative sampling is lossless only if q is exactly the distribution the draft
token was drawn from and p is exactly the distribution plain sampling would draw
from (Leviathan et al. 2023, section 2.3: "the same sampling method" on both sides).
So draft and target go through :func:`sampling_probs` with the same
:class:`SamplingConfig`, and so does every target-only decode (the entropy tracker
and the baseline of ``lab bench``, through :mod:`lab.decode`): there is one filter
in the lab. Temperature 0 means greedy: the result is the one-hot argmax (no
division by zero). Top-k then top-p (nucleus, Holtzman et al. 2020) are applied to
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

import math
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
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
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
        the filters drop (at least one token per row is kept). The input is not
        modified.

    Raises:
        ValueError: ``config`` is greedy.
    """
    if config.greedy:
        raise ValueError("filter_logits needs temperature > 0; greedy decoding takes the argmax of the raw logits")
    x = logits.float() / config.temperature
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


def sampling_probs(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """Turn logits into the distribution a token is actually drawn from.

    Args:
        logits: float ``[..., V]`` logits (not probabilities).
        config: The sampling settings.

    Returns:
        float32 ``[..., V]`` probabilities: ``softmax(filter_logits(logits))``, or
        one-hot at the argmax when greedy. The input is not modified.
    """
    if config.greedy:
        x = logits.float()
        return torch.nn.functional.one_hot(x.argmax(dim=-1), x.shape[-1]).float()
    return filter_logits(logits, config).softmax(dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token id per row of ``probs`` (float ``[..., V]``); returns int64 ``[...]``."""
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
    """
    if logits_processor is None:
        return logits
    full = torch.cat([prefix_ids, row_tokens.to(prefix_ids.device)])  # [L + k]
    base = prefix_ids.shape[0]
    rows = [logits_processor(full[: base + i].unsqueeze(0), logits[i : i + 1].clone()) for i in range(logits.shape[0])]
    return torch.cat(rows, dim=0)
