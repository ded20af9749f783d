"""Which positions a ``detected`` policy keeps: the lab's sink detector on the text's first chunk.

Reuses :mod:`lab.sinks.prefill`'s decision rule on a plain text (no chat template, so
every position is content): one streaming capture of received attention
(:func:`lab.sinks.capture.capture_received`), the detector's score (its chosen
statistic, :func:`lab.sinks.prefill.score_positions`) and the model's calibrated threshold
(:func:`lab.sinks.profiles.resolve_threshold`; the uncalibrated default, with a
warning, for a model without a calibration file). The policy keeps up to K flagged
positions, highest score first; spare slots go to its window, so its budget always
equals ``sinks:K+W``'s (see :func:`lab.stream.policies.policy_window`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from lab.ranges import DETECT_TOKENS
from lab.sinks.capture import capture_received
from lab.sinks.prefill import score_positions
from lab.sinks.profiles import resolve_threshold
from lab.stream.policies import rank_detected
from lab.sinks.structure import ROLE_CONTENT


@dataclass(frozen=True)
class Detection:
    """The detector's verdict on the first chunk.

    Attributes:
        n_tokens: Length of the chunk analysed.
        flagged: Positions with ``score > threshold`` (observed by enough queries).
        ranked: The flagged positions, highest score first.
        score: Float32 ``[n_tokens]`` the detector's score (its statistic,
            :func:`lab.sinks.prefill.score_positions`).
        received: Float32 ``[n_tokens]`` mean received attention (probability).
        threshold: The threshold on ``score`` used.
        calibration_file: The file it was read from (the user's, the packaged one or
            ``--calibration``'s; :func:`lab.sinks.profiles.resolve_threshold`); None when given.
    """

    n_tokens: int
    flagged: tuple[int, ...]
    ranked: tuple[int, ...]
    score: torch.Tensor
    received: torch.Tensor
    threshold: float
    calibration_file: str | None = None


@torch.no_grad()
def detect_sinks(model: Any, input_ids: torch.Tensor, n_tokens: int,
                 threshold: float | None = None, calibration: str | None = None) -> Detection:
    """Run the sink detector on the first ``n_tokens`` tokens of ``input_ids`` ``[1, S]``.

    ``threshold``: the detector's score above which a position is flagged; ``None``
    (default) reads the model's calibration (:func:`lab.sinks.profiles.resolve_threshold`),
    or ``calibration``, a calibration file given instead.

    Raises:
        ValueError: ``n_tokens`` < 2, or the capture's own errors (an attention
            implementation that cannot be captured).
    """
    n = min(int(n_tokens), input_ids.shape[1])
    if n < DETECT_TOKENS.lo:
        raise ValueError(f"n_tokens={n_tokens} must be >= {DETECT_TOKENS.lo}")
    threshold, _, _, calibration_file = resolve_threshold(model, threshold, calibration)
    ids = input_ids[:, :n].to(next(model.parameters()).device)
    per_head = capture_received(model, ids).per_head  # [L, H, n]
    scores = score_positions(per_head, [ROLE_CONTENT] * n)
    flagged = scores.observed & (scores.score > threshold)
    return Detection(n_tokens=n, flagged=tuple(int(i) for i in torch.nonzero(flagged).flatten()),
                     ranked=rank_detected(scores.score, scores.observed, flagged), score=scores.score,
                     received=scores.received, threshold=float(threshold), calibration_file=calibration_file)
