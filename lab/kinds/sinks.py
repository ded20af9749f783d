"""``lab sinks``: attention received per key over one prompt's prefill, its sinks and template positions."""

from __future__ import annotations

from dataclasses import dataclass

from lab.kinds import Kind
from lab.provenance import Environment, ModelSource
from lab.typed import may_be_absent


@dataclass(frozen=True)
class LayerLevel:
    """A position that is a sink in some layer (:func:`lab.render.sinks.level_rows`).

    Attributes:
        position: The prompt position (0-based).
        first_layer: The first layer in which it is a sink (0-based).
        last_layer: The last such layer (0-based).
        n_layers: Layers in which it is a sink (a count).
        token: Its token, newlines and tabs shown as escapes.
        role: Its role (``content``, or one the chat template fixes).
        sink_overall: Whether it is flagged a sink over all layers.
    """

    position: int
    first_layer: int
    last_layer: int
    n_layers: int
    token: str
    role: str
    sink_overall: bool


@dataclass(frozen=True)
class Analysis:
    """The prefill's analysis as written (:func:`lab.render.sinks.report_data` of
    :class:`lab.sinks.prefill.PrefillAnalysis`). ``S`` positions, ``L`` layers, ``H`` query heads; attention
    received is a share of an observing query's attention (in [0, 1]).

    Attributes:
        n_tokens: Prompt positions S (a count).
        threshold: The statistic's value above which a position is a sink (the statistic's units).
        epsilon: Per-head score above which a (layer, head) counts toward the sink rate (a share, in [0, 1]).
        min_observers: Observing queries a position needs to be flagged (a count).
        statistic: Which candidate statistic ``score`` is (:data:`lab.sinks.candidates.STATISTICS`).
        threshold_source: ``calibrated``, ``given`` or the uncalibrated default's words.
        calibrated_for: The profile whose calibration gave the threshold; None when given or the default.
        calibration_file: The file the threshold was read from; None when given.
        context_health: The graded context health (0 to 10); None when not measurable.
        context_health_measure: The health candidate ``context_health`` is.
        context_health_invalid: Why that measure does not read the context on this model; None when no failed
            validation is stored for it.
        content_sink_health: The count-based score over observed content positions (0 to 10); None when there
            are none.
        position0_share: Attention on position 0, mean over queries, layers and heads (a share, in [0, 1]).
        layer_levels: Positions a sink in some layer, those a sink in the most layers first.
        layer_sinks: Per layer (L), the positions that are a sink in it.
        structural: Positions the chat template fixes.
        structural_sinks: Of those, the positions flagged as sinks.
        content_sinks: Content positions flagged as sinks.
        sink_heads: ``[layer, head]`` pairs whose score at some flagged sink exceeds ``epsilon``.
        input_ids: The prompt's token ids (S).
        tokens: Each position's decoded token (S).
        roles: Each position's role (S).
        received: Attention each position receives, mean over layers and heads (S shares).
        score: The detector's statistic per position (S, the statistic's units).
        z: The robust log-MAD z per position (S, dimensionless).
        sink_rate: Share of (layer, head) with a score above ``epsilon`` per position (S shares).
        is_sink: Whether each position is flagged a sink (S).
        observed: Whether each position is observed by at least ``min_observers`` queries (S).
        per_head_shape: ``[L, H, S]``.
        per_head: The per-head score ``[L][H][S]`` (shares); None for a long prompt (too large to keep).
    """

    n_tokens: int
    threshold: float
    epsilon: float
    min_observers: int
    statistic: str
    threshold_source: str
    calibrated_for: str | None
    calibration_file: str | None
    context_health: float | None
    context_health_measure: str
    context_health_invalid: str | None
    content_sink_health: float | None
    position0_share: float
    layer_levels: tuple[LayerLevel, ...]
    layer_sinks: tuple[tuple[int, ...], ...]
    structural: tuple[int, ...]
    structural_sinks: tuple[int, ...]
    content_sinks: tuple[int, ...]
    sink_heads: tuple[tuple[int, ...], ...]
    input_ids: tuple[int, ...]
    tokens: tuple[str, ...]
    roles: tuple[str, ...]
    received: tuple[float, ...]
    score: tuple[float, ...]
    z: tuple[float, ...]
    sink_rate: tuple[float, ...]
    is_sink: tuple[bool, ...]
    observed: tuple[bool, ...]
    per_head_shape: tuple[int, ...]
    per_head: tuple[tuple[tuple[float, ...], ...], ...] | None


@dataclass(frozen=True)
class ContextReading:
    """The ``--context`` reading as written (:meth:`lab.health.context_items.ContextReading.to_json`; ``lab
    entropy --context`` writes the same record).

    Attributes:
        value: The context measure of the prompt (``lookback_heads``: a lookback ratio less its length line,
            dimensionless; higher = the decode reads the context more, for its length); None when the model has no
            fitted measure.
        n_context: Tokens of the context span (a count).
        measure: The measure's name.
        file: The fitted measure's file read; None when the model has none.
        verdicts: Each judged set's verdict line, by set name.
        unmeasurable: Why the value may not be read as the context; None where the measure passed its validation.
    """

    value: float | None
    n_context: int
    measure: str
    file: str | None
    verdicts: dict[str, str]
    unmeasurable: str | None


@dataclass(frozen=True)
class Report:
    """``report.json`` of ``lab sinks`` past its kind and format.

    Attributes:
        prompt: The user message as the model was given it.
        system: The ``--system`` prompt; None for the template's own.
        messages: The chat messages run (``role`` and ``content``), the context before the question with
            ``--context``.
        model: The model as loaded (:meth:`lab.models.source.ModelSource.as_dict`).
        environment: The machine, libraries and model (:func:`lab.reports.environment`).
        analysis: The prefill's attention received, sinks and context health.
        context: The ``--context`` text; absent without ``--context``.
        context_measure: Its reading with the measure's validity record; absent without ``--context``.
    """

    prompt: str
    system: str | None
    messages: tuple[dict[str, str], ...]
    model: ModelSource
    environment: Environment
    analysis: Analysis
    context: str | None = may_be_absent()
    context_measure: ContextReading | None = may_be_absent()


KIND = Kind("sinks", listed=30, commands=("lab.commands.sinks",), page="lab.views.kinds.sinks", report=Report)
