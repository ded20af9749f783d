"""The entropy tracker's settings and result types (no model, no loop).

:class:`DecodeSettings` (validated on construction), one :class:`StepRecord` per
generated token, and :class:`TrackResult` with the summary statistics derived from
the records. Filled by :func:`lab.tracker.track_generate`; consumed by
:mod:`lab.render.entropy` and the study.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

from lab import ranges
from lab.kinds.entropy import StepFigures
from lab.ranges import check_value


@dataclass(frozen=True)
class DecodeSettings:
    """How to decode; validated on construction.

    Attributes:
        max_new_tokens: Stop after this many generated tokens (>= 1).
        temperature: 0 means greedy (argmax, deterministic); > 0 samples from
            ``softmax(logits / temperature)`` after top-k / top-p.
        top_p: Nucleus mass in (0, 1]; 1 disables the filter (sampling only).
        top_k: Keep the k most likely tokens (ties at the k-th logit kept, as in
            transformers); ``None`` disables the filter (sampling only).
        seed: Seed of the ``torch.Generator`` used for sampling; ``None`` draws a
            fresh one, recorded in :attr:`TrackResult.seed`.
        top_alternatives: How many raw-distribution alternatives each step keeps.

    Raises:
        ValueError: any field out of range, naming the field and echoing the value.
    """

    max_new_tokens: int = 64
    temperature: float = 0.0  # greedy by default: a tracker run is then reproducible
    top_p: float = 1.0
    top_k: int | None = None
    seed: int | None = None
    top_alternatives: int = 5

    def __post_init__(self) -> None:
        check_value("max_new_tokens", self.max_new_tokens, ranges.TOKENS)
        check_value("temperature", self.temperature, ranges.TEMPERATURE, "must be a finite number >= 0 (0 = greedy)")
        check_value("top_p", self.top_p, ranges.TOP_P)
        check_value("top_k", self.top_k, ranges.TOP_K)
        if self.seed is not None:  # None: a fresh seed, recorded in the result
            check_value("seed", self.seed, ranges.SEED)
        check_value("top_alternatives", self.top_alternatives, ranges.TOP_ALTERNATIVES)

    @property
    def do_sample(self) -> bool:
        """True when tokens are drawn at random (temperature > 0), False for greedy."""
        return self.temperature > 0

    @property
    def sampling(self):
        """The same filter as a :class:`~lab.sampling.SamplingConfig` (the lab's one filter)."""
        from lab.sampling import SamplingConfig

        return SamplingConfig(temperature=float(self.temperature), top_k=self.top_k, top_p=float(self.top_p))


@dataclass(frozen=True)
class StepRecord(StepFigures):
    """What the tracker saw at one decode step: its :class:`lab.kinds.entropy.StepFigures` (the token, its
    entropies, varentropy and raw probability) and the raw top-k.

    Attributes:
        alternatives: ``(token_id, token_text, prob)`` of the raw top-k, most likely first; probabilities under
            the raw distribution.
    """

    alternatives: list[tuple[int, str, float]] = field(default_factory=list)


@dataclass
class TrackResult:
    """A tracked decode.

    Attributes:
        steps: One :class:`StepRecord` per generated token.
        prompt_ids: ``[1, S]`` int64 prompt, on the CPU.
        new_token_ids: Generated ids, EOS included when generation stopped on it.
        text: Decoded generated text, special tokens skipped.
        settings: The :class:`DecodeSettings` used.
        stop_reason: ``"eos"`` or ``"max_new_tokens"``.
        elapsed_s: Wall time of prefill + decode + statistics (excludes text decoding).
        seed: The sampling seed actually used (``None`` for greedy).
        vocab_size: V, the size of the logits row (sets the normalized-entropy scale).
    """

    steps: list[StepRecord]
    prompt_ids: torch.Tensor
    new_token_ids: list[int]
    text: str
    settings: DecodeSettings
    stop_reason: str
    elapsed_s: float
    seed: int | None = None
    vocab_size: int = 0

    def _entropies(self) -> list[float]:
        return [s.entropy_bits for s in self.steps]

    @property
    def mean_entropy_bits(self) -> float:
        """Mean raw entropy over steps (bits); NaN when there are no steps."""
        return statistics.fmean(self._entropies()) if self.steps else math.nan

    @property
    def max_entropy_bits(self) -> float:
        """Largest raw entropy of any step (bits); NaN when there are no steps."""
        return max(self._entropies()) if self.steps else math.nan

    @property
    def var_entropy_bits(self) -> float:
        """Population variance of the raw entropy over steps (bits^2): how much the
        uncertainty moves during the decode. 0 for a single step."""
        return statistics.pvariance(self._entropies()) if self.steps else math.nan

    @property
    def mean_varentropy_bits2(self) -> float:
        """Mean per-step varentropy (bits^2); NaN when there are no steps."""
        return statistics.fmean(s.varentropy_bits2 for s in self.steps) if self.steps else math.nan

    @property
    def mean_sampled_entropy_bits(self) -> float:
        """Mean entropy of the sampled-from distributions (bits); 0 for greedy."""
        return statistics.fmean(s.sampled_entropy_bits for s in self.steps) if self.steps else math.nan

    def most_uncertain(self, n: int = 5) -> list[StepRecord]:
        """The ``n`` steps with the highest raw entropy, highest first."""
        return sorted(self.steps, key=lambda s: s.entropy_bits, reverse=True)[:n]

    def summary(self) -> dict[str, Any]:
        """Summary statistics as plain numbers (for reports)."""
        return {
            "n_steps": len(self.steps),
            "stop_reason": self.stop_reason,
            "mean_entropy_bits": self.mean_entropy_bits,
            "max_entropy_bits": self.max_entropy_bits,
            "var_entropy_bits": self.var_entropy_bits,
            "mean_varentropy_bits2": self.mean_varentropy_bits2,
            "mean_sampled_entropy_bits": self.mean_sampled_entropy_bits,
            "elapsed_s": self.elapsed_s,
            "tokens_per_s": len(self.steps) / self.elapsed_s if self.elapsed_s > 0 else math.nan,
        }


def build_warpers(settings: DecodeSettings):
    """transformers' sampling warpers for ``settings``, in the order ``generate`` applies them.

    The decode loop does not use them: it applies the lab's one filter,
    :func:`lab.sampling.filter_logits`, which the unit tests check
    against these warpers (same kept tokens, same probabilities).

    Returns:
        A ``transformers.LogitsProcessorList`` (empty for greedy): temperature, then
        top-k (if set), then top-p (if < 1). Masked entries become ``-inf``.
    """
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    warpers = LogitsProcessorList()
    if not settings.do_sample:
        return warpers
    warpers.append(TemperatureLogitsWarper(float(settings.temperature)))
    if settings.top_k is not None:
        warpers.append(TopKLogitsWarper(top_k=settings.top_k))
    if settings.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=float(settings.top_p)))
    return warpers
