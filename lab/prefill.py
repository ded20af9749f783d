"""Prefill analysis: which prompt positions are attention sinks, and how healthy the context is.

Model-facing loop tying :mod:`lab.structure` (template positions),
:mod:`lab.attention_capture` (streaming received attention, no S x S storage) and
:mod:`lab.sinks` (scores, z, sink rate, health) together. References: Xiao et al.
2023 (StreamingLLM, arXiv:2309.17453) for sinks; Gu et al. 2024 (arXiv:2410.10781)
for the importance score and sink rate.

Decision rule. Let ``per_head[l, h, k]`` be the attention key ``k`` receives per
observing query in layer ``l``, head ``h``; ``received[k]`` its arithmetic mean over
layers and heads (reported) and ``typical[k]`` its geometric mean (scored). Then

* ``z = observer_matched_z(typical, exclude=...)``: the robust log-MAD z of
  :func:`lab.sinks.robust_z`, but against a baseline that depends on how many
  queries see the position: key ``k`` is seen by ``S - k`` queries, all within
  ``S - k`` tokens, and queries attend mostly to their recent past, so late keys get
  a higher mean score from position alone. The baseline at ``k`` interpolates the
  medians of *prose* positions (content and any template-injected system prompt)
  binned by observer count (one octave per bin, >= 32 positions each), leaving out
  template markers (expected sinks) and the tail (below). A prompt with at most 32
  baseline positions has one bin: the plain global median of the robust log-MAD z.
  Before this (issue 11), a 7,974-token uniform prompt had 94 "content sinks", all
  among its last 181 positions.
* a position is a sink when ``z > threshold`` and it is observed by at least
  :data:`MIN_OBSERVING_QUERIES` queries.

The tail: position ``k`` is seen by only ``S - k`` queries, so the last few scores
average one to a handful of rows and are too noisy to judge. Positions with fewer
than :data:`MIN_OBSERVING_QUERIES` observers are never flagged and stay out of the
baseline; their scores are still reported.

Calibration (``lab calibrate-sinks``; figures in :data:`DEFAULT_THRESHOLD`'s comment).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from lab.attention_capture import DEFAULT_MAX_CHUNK_BYTES, capture_received
from lab.sinks import DEFAULT_EPSILON, LOG_FLOOR, context_health, observer_matched_z, sink_rate
from lab.structure import ROLE_CONTENT, ROLE_TEMPLATE, analyze_structure

logger = logging.getLogger(__name__)

# Calibrated with `lab calibrate-sinks` on the embedded model (SmolLM2-135M-Instruct,
# float32, CPU) over the 36 prompts of lab/data/calibration_prompts.jsonl (765
# observed content tokens) and one 2,078-token uniform prompt built from them:
# thresholds 2.5..5.0 meet both criteria on both (position 0 flagged on >= 95 % of
# prompts, < 1 % of content tokens flagged); 3.75 is the middle of that range. At 3.75:
# - calibration set: position 0 flagged on 36/36 prompts (lowest z 4.90), content
#   0/765 (highest content z 3.64);
# - long calibration prompt: position 0 flagged (z 14.7), content 0/2,047, trailing 0;
# - held-out set (tests/statistical/test_sinks_real.py): position 0 24/24 (lowest z
#   5.24), content 0/289 (highest 2.98); its 2,030-token repetition: content 1/1,999
#   (an early repetition), trailing 0 (the pre-fix baseline flagged 22 trailing);
# - long prompts, not used for calibration: a 7,980-token repetition of one sentence:
#   content 25/7,949 (0.3 %, all among the first 12 repetitions of the sentence, which
#   later copies attend to), trailing 0 (pre-fix: 77, all trailing); 7,930 tokens of
#   the study prompts' text: content 0/7,899 (pre-fix: 159, 158 trailing).
DEFAULT_THRESHOLD = 3.75

# A position must be observed by at least this many queries (S - k >= 8) to be
# flagged or to enter the baseline; below that its score averages < 8 rows.
MIN_OBSERVING_QUERIES = 8


@dataclass(frozen=True)
class PrefillAnalysis:
    """Received attention and sink flags for one prompt.

    Shapes: ``S`` positions, ``L`` layers, ``H`` query heads. Attention values are
    probabilities (mean attention received per observing query, in ``[0, 1]``).

    Attributes:
        input_ids: int64 ``[S]``.
        tokens: ``S`` decoded token strings.
        roles: ``S`` strings: ``"template"``, ``"system-default"`` or ``"content"``.
        structural: Positions fixed by the template (template markers and injected
            system prompt).
        received: Float32 ``[S]``, mean over layers and heads of ``per_head``.
        per_head: Float32 ``[L, H, S]`` (Gu et al. importance score per head).
        z: Float32 ``[S]`` robust z of the log geometric-mean score (see module docstring).
        is_sink: Bool ``[S]``: ``z > threshold`` and observed by enough queries.
        observed: Bool ``[S]``: observed by >= ``min_observers`` queries.
        sink_rate: Float32 ``[S]``: fraction of (layer, head) with score > ``epsilon``.
        position0_share: Attention mass on position 0, averaged over all queries,
            layers and heads (equals ``received[0]``).
        content_sinks: Content positions flagged as sinks.
        structural_sinks: Structural positions flagged as sinks.
        sink_heads: ``(layer, head)`` pairs whose score at some flagged sink exceeds
            ``epsilon``.
        context_health: ``[0, 10]``, :func:`lab.sinks.context_health` over observed
            content positions.
        threshold, epsilon, min_observers: The settings used.
        last_logits: Float32 ``[V]`` next-token logits after the prompt.
    """

    input_ids: torch.Tensor
    tokens: tuple[str, ...]
    roles: tuple[str, ...]
    structural: tuple[int, ...]
    received: torch.Tensor
    per_head: torch.Tensor
    z: torch.Tensor
    is_sink: torch.Tensor
    observed: torch.Tensor
    sink_rate: torch.Tensor
    position0_share: float
    content_sinks: tuple[int, ...]
    structural_sinks: tuple[int, ...]
    sink_heads: tuple[tuple[int, int], ...]
    context_health: float
    threshold: float
    epsilon: float
    min_observers: int
    last_logits: torch.Tensor

    @property
    def content_positions(self) -> tuple[int, ...]:
        return tuple(i for i, r in enumerate(self.roles) if r == ROLE_CONTENT)


@dataclass(frozen=True)
class SinkScores:
    """The threshold-independent part of a detection (all ``[S]``).

    Attributes:
        received: Arithmetic mean over layers and heads of received attention.
        typical: Geometric mean over layers and heads (what ``z`` is computed on).
        z: Robust z of ``log typical``.
        observed: Bool, observed by enough queries to be flagged.
    """

    received: torch.Tensor
    typical: torch.Tensor
    z: torch.Tensor
    observed: torch.Tensor


def score_positions(per_head: torch.Tensor, roles: Sequence[str], *,
                    min_observers: int = MIN_OBSERVING_QUERIES) -> SinkScores:
    """Robust z of received attention with the lab's baseline and tail rule.

    Args:
        per_head: Float ``[L, H, S]`` received attention.
        roles: ``S`` role strings (see :mod:`lab.structure`).
        min_observers: Minimum observing queries for a position to count.

    Returns:
        :class:`SinkScores` with ``received`` ``[S]``, ``z`` ``[S]``, ``observed`` ``[S]``.

    Raises:
        ValueError: shapes disagree or ``min_observers < 1``.
    """
    if per_head.dim() != 3 or per_head.shape[-1] != len(roles):
        raise ValueError(f"per_head {tuple(per_head.shape)} does not match {len(roles)} roles")
    if not isinstance(min_observers, int) or min_observers < 1:
        raise ValueError(f"min_observers={min_observers!r} must be a positive integer")
    s = len(roles)
    received = per_head.float().mean(dim=(0, 1))
    # z is taken on the geometric mean over (layer, head), i.e. the mean log score:
    # a position one or two heads single out (previous-token or delimiter heads on
    # ordinary words) moves the arithmetic mean a lot but the geometric mean little,
    # while a sink draws attention across the network. On the calibration set this
    # separates position 0 from content far better (see `lab calibrate-sinks`).
    typical = per_head.float().clamp_min(LOG_FLOOR).log().mean(dim=(0, 1)).exp()
    observers = torch.arange(s, 0, -1)
    observed = observers >= min(min_observers, s)  # position 0 always observed
    prose = torch.tensor([r != ROLE_TEMPLATE for r in roles])
    baseline = observed & prose
    if not baseline.any():  # a prompt that is all template: fall back to every observed position
        baseline = observed
    z = observer_matched_z(typical, exclude=~baseline)
    return SinkScores(received=received, typical=typical, z=z, observed=observed)


def _check_threshold(threshold: float, epsilon: float) -> None:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise ValueError(f"threshold={threshold!r} must be a finite number")
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon={epsilon!r} must lie in (0, 1)")


def analyze_prefill(model: Any, tokenizer: Any, messages: Sequence[dict[str, str]], *,
                    threshold: float = DEFAULT_THRESHOLD, epsilon: float = DEFAULT_EPSILON,
                    min_observers: int = MIN_OBSERVING_QUERIES,
                    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES, cache: Any = None) -> PrefillAnalysis:
    """Find the attention sinks of a chat prompt in one streaming prefill.

    Args:
        model: A transformers causal LM (batch 1; attention via ``AttentionInterface``).
        tokenizer: Its fast tokenizer, with the chat template if the model has one.
        messages: Non-empty chat messages (``lab.models.build_messages``).
        threshold: z above which an observed position is a sink
            (:data:`DEFAULT_THRESHOLD`, calibrated on the embedded model).
        epsilon: Received-attention level for the sink rate and sink heads (Gu et al.: 0.3).
        min_observers: See :data:`MIN_OBSERVING_QUERIES`.
        max_chunk_bytes: Budget for one chunk of attention scores in the capture.
        cache: An empty KV cache the capture's prefill fills
            (:func:`lab.attention_capture.capture_received`), so a decode can go on
            from this prefill instead of running its own; None = no cache.

    Returns:
        :class:`PrefillAnalysis`.

    Raises:
        ValueError: empty or malformed messages, a prompt longer than the model's
            context, a bad threshold/epsilon/min_observers, a template whose
            positions cannot be attributed.
        lab.attention_capture.CaptureError (a ValueError): the model's attention
            cannot be captured, or the capture failed validation.
    """
    _check_threshold(threshold, epsilon)
    # 1. tokenize and attribute positions to the template or the content
    structure = analyze_structure(tokenizer, messages)
    ids = structure.input_ids
    # 2. one streaming prefill: received attention per layer and head
    captured = capture_received(model, ids, max_chunk_bytes=max_chunk_bytes, cache=cache)
    per_head = captured.per_head
    # 3. scores and flags
    scores = score_positions(per_head, structure.roles, min_observers=min_observers)
    is_sink = scores.observed & (scores.z > threshold)
    content = torch.tensor([r == ROLE_CONTENT for r in structure.roles])
    content_sinks = tuple(int(i) for i in torch.nonzero(is_sink & content).flatten())
    structural_sinks = tuple(int(i) for i in torch.nonzero(is_sink & ~content).flatten())
    # 4. heads that put more than epsilon on some sink
    flagged = torch.nonzero(is_sink).flatten()
    sink_heads: tuple[tuple[int, int], ...] = ()
    if flagged.numel():
        heavy = per_head[:, :, flagged].amax(dim=-1) > epsilon  # [L, H]
        sink_heads = tuple((int(l), int(h)) for l, h in torch.nonzero(heavy))
    health = context_health(scores.z[content & scores.observed], threshold)
    ids_list = ids[0].tolist()
    return PrefillAnalysis(
        input_ids=ids[0],
        tokens=tuple(tokenizer.decode([t]) for t in ids_list),
        roles=structure.roles,
        structural=structure.structural,
        received=scores.received,
        per_head=per_head,
        z=scores.z,
        is_sink=is_sink,
        observed=scores.observed,
        sink_rate=sink_rate(per_head, epsilon),
        position0_share=float(per_head[:, :, 0].mean()),
        content_sinks=content_sinks,
        structural_sinks=structural_sinks,
        sink_heads=sink_heads,
        context_health=health,
        threshold=float(threshold),
        epsilon=float(epsilon),
        min_observers=min_observers,
        last_logits=captured.last_logits,
    )
