"""Prefill analysis: which prompt positions are attention sinks, and how healthy the context is.

Model-facing loop tying :mod:`lab.sinks.structure` (template positions),
:mod:`lab.sinks.capture` (streaming received attention, no S x S storage) and
:mod:`lab.sinks.scores` (scores, z, sink rate, health) together. References: Xiao et al.
2023 (StreamingLLM, arXiv:2309.17453) for sinks; Gu et al. 2024 (arXiv:2410.10781)
for the importance score and sink rate.

Decision rule. Let ``per_head[l, h, k]`` be the attention key ``k`` receives per
observing query in layer ``l``, head ``h`` (Gu et al.'s importance score);
``received[k]`` its arithmetic mean over layers and heads (reported) and
``typical[k]`` its geometric mean. The detector's score is one of the candidates in
:data:`lab.sinks.candidates.STATISTICS`, the one the rule of
:func:`lab.sinks.calibration.choose_statistic` chose across the calibrated profiles
(packaged data, :func:`lab.sinks.profiles.load_choice`):

* ``sink_rate`` (the rule's choice on the four shipped profiles): Gu et al.'s sink rate, the fraction of the
  ``L x H`` (layer, head) pairs in which ``per_head[l, h, k] > epsilon`` (0.3). A
  position is a sink when its rate exceeds the model's threshold and it is observed
  by at least :data:`MIN_OBSERVING_QUERIES` queries. The z candidates compare a
  position with the prompt's other positions, and failed where there are few to
  compare with: on Qwen2.5's chat prompts the template-injected system prompt ("You
  are Qwen, created by Alibaba Cloud ...") outnumbers a short question's content and
  is heavily attended, so the prose baseline (``gm_prose``) puts position 0 at z 2.6-3.9;
  on Gemma-3 (no template) a short prompt has one or two observed content tokens.
  The rate needs no baseline.
* the threshold belongs to the model: the profile's calibration
  (``lab/sinks/calibrations/<profile>.json``, written by ``lab calibrate-sinks``) via
  :func:`lab.sinks.profiles.resolve_threshold`, else the packaged default
  (``lab/sinks/calibrations/choice.json``), and the analysis then says it is not
  calibrated for the model.
* ``robust_z`` is reported beside it: the robust log-MAD z of the geometric mean
  against observed content positions seen by as many queries (``gm_content``,
  :func:`lab.sinks.scores.observer_matched_z`), how far a position stands out.

Sink levels across layers: ``layer_scores[l]`` is the statistic on layer ``l`` alone
(for ``sink_rate``: the fraction of the layer's heads above epsilon); a position is a
sink in layer ``l`` when ``layer_scores[l] > threshold`` (and observed).
:func:`lab.sinks.scores.layer_sink_spans` gives the first and last layer of each and the
number of layers it holds in.

The tail: position ``k`` is seen by only ``S - k`` queries, so the last few scores
average one to a handful of rows and are too noisy to judge. Positions with fewer
than :data:`MIN_OBSERVING_QUERIES` observers are never flagged and stay out of the
baseline; their scores are still reported.

Context health: :func:`lab.health.graded.graded_health` (the graded measure the study
uses), ``NaN`` ("not measurable") when no content position is observed; the
count-based :func:`lab.sinks.scores.context_health` is kept as ``content_sink_health``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from lab.health.measures import HealthInputs, LengthReference
from lab.health.choice import load_chosen
from lab.health.graded import candidate_values, graded_health, model_length_reference
from lab.health.validation import health_unmeasurable
from lab.models.source import model_source
from lab.sinks.candidates import STATISTICS
from lab.sinks.capture import DEFAULT_MAX_CHUNK_BYTES, capture_received
from lab.sinks.profiles import load_choice, resolve_threshold
from lab.sinks.scores import (DEFAULT_EPSILON, context_health, head_geometric_mean, layer_sink_spans, observer_matched_z,
                              sink_rate)
from lab.sinks.structure import ROLE_CONTENT, ROLE_TEMPLATE, analyze_structure

logger = logging.getLogger(__name__)

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
        score: Float32 ``[S]`` the detector's score, the statistic named by ``statistic``
            (a rate in ``[0, 1]`` for ``sink_rate``, else a robust z; module docstring).
        robust_z: Float32 ``[S]`` robust z of the log geometric-mean score, content baseline.
        is_sink: Bool ``[S]``: ``score > threshold`` and observed by enough queries.
        observed: Bool ``[S]``: observed by >= ``min_observers`` queries.
        sink_rate: Float32 ``[S]``: fraction of (layer, head) with score > ``epsilon``.
        position0_share: Attention mass on position 0, averaged over all queries,
            layers and heads (equals ``received[0]``).
        content_sinks: Content positions flagged as sinks.
        structural_sinks: Structural positions flagged as sinks.
        sink_heads: ``(layer, head)`` pairs whose score at some flagged sink exceeds
            ``epsilon``.
        context_health: The graded context health on ``[0, 10]``
            (:func:`lab.health.graded.graded_health`, what the study reports), ``NaN`` when
            not measurable (no observed content position).
        content_sink_health: The count-based score of :func:`lab.sinks.scores.context_health`
            over observed content positions (``NaN`` when there are none).
        threshold, epsilon, min_observers: The settings used.
        statistic: Which candidate statistic ``score`` is (:data:`lab.sinks.candidates.STATISTICS`).
        calibrated_for: The profile whose calibration file gave ``threshold``; ``None``
            when the threshold was given by the caller or is the uncalibrated default.
        threshold_source: ``"calibrated"``, ``"default (not calibrated for this model)"``
            or ``"given"``.
        calibration_file: The file the threshold (or the default) was read from: the
            user's, the packaged one or ``--calibration``'s; ``None`` when given.
        layer_scores: Float32 ``[L, S]``: the statistic per layer (:class:`SinkScores`).
        layer_sinks: Bool ``[L, S]``: ``layer_scores > threshold`` at observed positions.
        health_candidates: Every health candidate's value on 0..10 by name
            (:func:`lab.health.graded.candidate_values`; all ``NaN`` when not measurable).
        length_reference: The model's clean length references
            (:func:`lab.health.references.load_references` by profile), ``None`` without one.
        health_measure: The candidate ``context_health`` is (a key of
            :data:`lab.health.measures.CANDIDATES`): the choice read once by :func:`analyze_prefill`,
            so what is drawn or written later names the measure this analysis used.
        health_reference: The length-reference file ``length_reference`` was read from (the
            user's or the packaged one), ``None`` when the model has none.
        health_invalid: Why ``health_measure`` does not read the context on this model, with the
            figures of its stored validation (:func:`lab.health.validation.health_unmeasurable`);
            ``None`` when no failed validation is stored for this model and measure. Every place
            that shows ``context_health`` shows this beside it.
        last_logits: Float32 ``[V]`` next-token logits after the prompt.
    """

    input_ids: torch.Tensor
    tokens: tuple[str, ...]
    roles: tuple[str, ...]
    structural: tuple[int, ...]
    received: torch.Tensor
    per_head: torch.Tensor
    score: torch.Tensor
    robust_z: torch.Tensor
    is_sink: torch.Tensor
    observed: torch.Tensor
    sink_rate: torch.Tensor
    position0_share: float
    content_sinks: tuple[int, ...]
    structural_sinks: tuple[int, ...]
    sink_heads: tuple[tuple[int, int], ...]
    context_health: float
    content_sink_health: float
    threshold: float
    epsilon: float
    min_observers: int
    statistic: str
    calibrated_for: str | None
    threshold_source: str
    layer_scores: torch.Tensor
    layer_sinks: torch.Tensor
    last_logits: torch.Tensor
    health_measure: str
    health_reference: str | None
    calibration_file: str | None = None
    health_candidates: dict[str, float] = field(default_factory=dict)
    length_reference: dict[str, LengthReference] | None = None
    health_invalid: str | None = None

    @property
    def calibrated(self) -> bool:
        """Whether the threshold comes from this model's own calibration."""
        return self.calibrated_for is not None

    def layer_spans(self) -> list[dict[str, int]]:
        """Each position that is a sink in some layer: first and last such layer, and in how many."""
        first, last, count = layer_sink_spans(self.layer_sinks)
        return [{"position": k, "first_layer": int(first[k]), "last_layer": int(last[k]),
                 "n_layers": int(count[k])} for k in torch.nonzero(count).flatten().tolist()]

    @property
    def content_positions(self) -> tuple[int, ...]:
        return tuple(i for i, r in enumerate(self.roles) if r == ROLE_CONTENT)

    @property
    def received_per_layer(self) -> torch.Tensor:
        """Float32 ``[L, S]``: attention received, mean over each layer's heads of ``per_head``."""
        return self.per_head.float().mean(dim=1)


@dataclass(frozen=True)
class SinkScores:
    """The threshold-independent part of a detection.

    Attributes:
        received: ``[S]`` arithmetic mean over layers and heads of received attention.
        typical: ``[S]`` geometric mean over layers and heads.
        score: ``[S]`` the detector's score, the statistic named by ``statistic`` (a rate
            in ``[0, 1]`` for ``sink_rate``, else a robust z).
        observed: Bool ``[S]``, observed by enough queries to be flagged.
        layer_scores: ``[L, S]`` the statistic per layer (for the sink levels across
            layers): for ``sink_rate`` the fraction of the layer's heads above epsilon,
            else the robust z of the layer's geometric mean over heads (content baseline).
        robust_z: ``[S]`` the ``gm_content`` z, reported whatever the statistic.
        statistic: Which candidate ``score`` is.
    """

    received: torch.Tensor
    typical: torch.Tensor
    score: torch.Tensor
    observed: torch.Tensor
    layer_scores: torch.Tensor
    robust_z: torch.Tensor
    statistic: str


def _observed(s: int, min_observers: int) -> torch.Tensor:
    return torch.arange(s, 0, -1) >= min(min_observers, s)  # position 0 always observed


def baseline_mask(roles: Sequence[str], observed: torch.Tensor, pool: str) -> torch.Tensor:
    """Bool ``[S]``: the positions a z is measured against.

    ``pool="content"``: observed content positions; ``"prose"``: observed content and
    injected system-prompt positions. Template markers (expected sinks) and the tail are
    never in it. Falls back to observed prose, then to every observed position, when
    the pool is empty (a prompt whose content all lies in the tail, or all template).
    """
    content = torch.tensor([r == ROLE_CONTENT for r in roles], dtype=torch.bool)
    prose = torch.tensor([r != ROLE_TEMPLATE for r in roles], dtype=torch.bool)
    for mask in ((content if pool == "content" else prose), prose):
        if (observed & mask).any():
            return observed & mask
    return observed.clone()


def candidate_scores(per_head: torch.Tensor, roles: Sequence[str], *,
                     min_observers: int = MIN_OBSERVING_QUERIES) -> dict[str, torch.Tensor]:
    """Every candidate of :data:`lab.sinks.candidates.STATISTICS` at every position (``[S]`` each), and per-layer scores.

    ``layer_z`` ``[L, S]``: the robust z (content baseline) of each layer's geometric
    mean over heads; ``layer_sink_rate`` ``[L, S]``: the fraction of each layer's heads
    above epsilon (0.3).

    Args:
        per_head: Float ``[L, H, S]`` received attention (probabilities).
        roles: ``S`` role strings (see :mod:`lab.sinks.structure`).
        min_observers: Minimum observing queries for a position to count.

    Raises:
        ValueError: shapes disagree or ``min_observers < 1``.
    """
    if per_head.dim() != 3 or per_head.shape[-1] != len(roles):
        raise ValueError(f"per_head {tuple(per_head.shape)} does not match {len(roles)} roles")
    if isinstance(min_observers, bool) or not isinstance(min_observers, int) or min_observers < 1:
        raise ValueError(f"min_observers={min_observers!r} must be a positive integer")
    observed = _observed(len(roles), min_observers)
    prose, content = baseline_mask(roles, observed, "prose"), baseline_mask(roles, observed, "content")
    typical = head_geometric_mean(per_head)  # [S]
    per_layer = head_geometric_mean(per_head, dims=1)  # [L, S]
    layer_z = torch.stack([observer_matched_z(row, exclude=~content) for row in per_layer]) \
        if per_layer.shape[0] else per_layer
    return {
        "gm_prose": observer_matched_z(typical, exclude=~prose),
        "gm_content": observer_matched_z(typical, exclude=~content),
        "layer_median": layer_z.quantile(0.5, dim=0) if layer_z.shape[0] else typical * 0,
        "am_content": observer_matched_z(per_head.float().mean(dim=(0, 1)), exclude=~content),
        "sink_rate": sink_rate(per_head.float(), DEFAULT_EPSILON),
        "layer_z": layer_z,
        "layer_sink_rate": sink_rate(per_head.float(), DEFAULT_EPSILON, per_layer=True),
    }


def score_positions(per_head: torch.Tensor, roles: Sequence[str], *,
                    min_observers: int = MIN_OBSERVING_QUERIES, statistic: str | None = None) -> SinkScores:
    """The detector's score with the lab's baseline and tail rule.

    Args:
        per_head: Float ``[L, H, S]`` received attention.
        roles: ``S`` role strings (see :mod:`lab.sinks.structure`).
        min_observers: Minimum observing queries for a position to count.
        statistic: One of :data:`lab.sinks.candidates.STATISTICS`; ``None`` (default): the
            packaged choice (:func:`lab.sinks.profiles.load_choice`).

    Returns:
        :class:`SinkScores` with ``received``, ``score``, ``observed`` ``[S]`` and ``layer_scores`` ``[L, S]``.

    Raises:
        ValueError: shapes disagree, ``min_observers < 1`` or an unknown ``statistic``;
            the choice file's own errors when ``statistic`` is None.
    """
    statistic = load_choice().statistic if statistic is None else statistic
    if statistic not in STATISTICS:
        raise ValueError(f"statistic={statistic!r} is not one of {', '.join(STATISTICS)}")
    cands = candidate_scores(per_head, roles, min_observers=min_observers)
    return SinkScores(received=per_head.float().mean(dim=(0, 1)), typical=head_geometric_mean(per_head),
                      score=cands[statistic], observed=_observed(len(roles), min_observers),
                      layer_scores=cands["layer_sink_rate" if statistic == "sink_rate" else "layer_z"],
                      robust_z=cands["gm_content"],
                      statistic=statistic)


def _check_threshold(threshold: float | None, epsilon: float) -> None:
    """``threshold`` None (read from the calibration later) or a finite number; ``epsilon`` in (0, 1)."""
    bad = isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold)
    if threshold is not None and bad:
        raise ValueError(f"threshold={threshold!r} must be a finite number")
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon={epsilon!r} must lie in (0, 1)")


def check_calibration_files(model: str, *, threshold: float | None = None,
                            calibration: str | Path | None = None) -> None:
    """Read now the calibration files :func:`analyze_prefill` will read for ``model``, so that a bad one (outside
    its schema, or a folder or FIFO where the user's goes) is refused before the model loads: the
    context-health choice, and for a named profile its length reference and, without ``threshold``, its
    sink calibration (``calibration`` instead when given). A model that is no profile is checked for the
    choice only; its files are known once it loads.

    Raises:
        ValueError: as :func:`lab.sinks.profiles.load_calibration`, :func:`lab.health.choice.load_chosen`
            and :func:`lab.health.references.load_references`, naming the file.
    """
    from lab.health.references import load_references
    from lab.models.profiles import PROFILES
    from lab.sinks.profiles import load_calibration

    load_chosen()
    if threshold is None and calibration is not None:
        load_calibration(None, calibration)
    if model in PROFILES:
        load_references(model)
        if threshold is None and calibration is None:
            load_calibration(model)


def _invalid_on(model: Any, measure: str) -> str | None:
    """The stored validation's reason when ``measure`` failed it on ``model``'s profile; None otherwise."""
    source = model_source(model, default=None)
    profile = getattr(source, "profile", None)
    return health_unmeasurable(profile, measure) if profile else None


def analyze_prefill(model: Any, tokenizer: Any, messages: Sequence[dict[str, str]], *,
                    threshold: float | None = None, epsilon: float = DEFAULT_EPSILON,
                    min_observers: int = MIN_OBSERVING_QUERIES,
                    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES, cache: Any = None,
                    calibration: str | Path | None = None) -> PrefillAnalysis:
    """Find the attention sinks of a chat prompt in one streaming prefill.

    Args:
        model: A transformers causal LM (batch 1; attention via ``AttentionInterface``).
        tokenizer: Its fast tokenizer, with the chat template if the model has one.
        messages: Non-empty chat messages (``lab.models.loading.build_messages``).
        threshold: Score above which an observed position is a sink. ``None`` (default):
            the model's calibrated threshold (:func:`lab.sinks.profiles.load_calibration`,
            by the model's :class:`~lab.models.source.ModelSource` profile), else the packaged default
            (:func:`lab.sinks.profiles.load_choice`) with a warning that it is not calibrated for this model.
        epsilon: Received-attention level for the sink rate and sink heads (Gu et al.: 0.3).
        min_observers: See :data:`MIN_OBSERVING_QUERIES`.
        max_chunk_bytes: Budget for one chunk of attention scores in the capture.
        cache: An empty KV cache the capture's prefill fills
            (:func:`lab.sinks.capture.capture_received`), so a decode can go on
            from this prefill instead of running its own; None = no cache.
        calibration: A calibration file to read the threshold from instead of the
            profile's (``--calibration FILE``); ignored when ``threshold`` is given.

    Returns:
        :class:`PrefillAnalysis`.

    Raises:
        ValueError: empty or malformed messages, a prompt longer than the model's
            context, a bad threshold/epsilon/min_observers, a template whose
            positions cannot be attributed, a calibration file that does not parse.
        lab.sinks.capture.CaptureError (a ValueError): the model's attention
            cannot be captured, or the capture failed validation.
    """
    _check_threshold(threshold, epsilon)
    threshold, calibrated_for, source, calibration_file = resolve_threshold(model, threshold, calibration)
    # 1. tokenize and attribute positions to the template or the content
    structure = analyze_structure(tokenizer, messages)
    ids = structure.input_ids
    # 2. one streaming prefill: received attention per layer and head
    captured = capture_received(model, ids, max_chunk_bytes=max_chunk_bytes, cache=cache)
    per_head = captured.per_head
    # 3. scores and flags, overall and per layer
    scores = score_positions(per_head, structure.roles, min_observers=min_observers)
    is_sink = scores.observed & (scores.score > threshold)
    layer_sinks = scores.observed.unsqueeze(0) & (scores.layer_scores > threshold)  # [L, S]
    content = torch.tensor([r == ROLE_CONTENT for r in structure.roles], dtype=torch.bool)
    content_sinks = tuple(int(i) for i in torch.nonzero(is_sink & content).flatten())
    structural_sinks = tuple(int(i) for i in torch.nonzero(is_sink & ~content).flatten())
    # 4. heads that put more than epsilon on some sink
    flagged = torch.nonzero(is_sink).flatten()
    sink_heads: tuple[tuple[int, int], ...] = ()
    if flagged.numel():
        heavy = per_head[:, :, flagged].amax(dim=-1) > epsilon  # [L, H]
        sink_heads = tuple((int(l), int(h)) for l, h in torch.nonzero(heavy))
    # 5. context health: the graded measure; the count-based one kept beside it
    rates = sink_rate(per_head, epsilon)
    measure = load_chosen()  # read once: the analysis records the measure it used
    reference = model_length_reference(model, measure)
    inputs = HealthInputs(received=scores.received, content=content, score=scores.score, is_sink=is_sink,
                          observed=scores.observed, sink_rate=rates, threshold=float(threshold),
                          length_reference=reference.references)
    health = graded_health(inputs, measure)
    observed_content = content & scores.observed
    count_health = context_health(scores.score[observed_content], threshold) if observed_content.any() else math.nan
    ids_list = ids[0].tolist()
    return PrefillAnalysis(
        input_ids=ids[0],
        tokens=tuple(tokenizer.decode([t]) for t in ids_list),
        roles=structure.roles,
        structural=structure.structural,
        received=scores.received,
        per_head=per_head,
        score=scores.score,
        robust_z=scores.robust_z,
        is_sink=is_sink,
        observed=scores.observed,
        sink_rate=rates,
        position0_share=float(per_head[:, :, 0].mean()),
        content_sinks=content_sinks,
        structural_sinks=structural_sinks,
        sink_heads=sink_heads,
        context_health=health,
        content_sink_health=count_health,
        threshold=float(threshold),
        epsilon=float(epsilon),
        min_observers=min_observers,
        statistic=scores.statistic,
        calibrated_for=calibrated_for,
        threshold_source=source,
        calibration_file=calibration_file,
        layer_scores=scores.layer_scores,
        layer_sinks=layer_sinks,
        last_logits=captured.last_logits,
        health_candidates=candidate_values(inputs),
        length_reference=reference.references,
        health_measure=measure,
        health_reference=reference.path,
        health_invalid=_invalid_on(model, measure),
    )
