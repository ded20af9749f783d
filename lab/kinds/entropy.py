"""``lab entropy``: one prompt decoded with the entropy tracker (``report.json``, ``tokens.csv``, ``entropy.png``,
``summary.md``)."""

from __future__ import annotations

from dataclasses import dataclass

from lab.kinds import Kind
from lab.kinds.sinks import ContextReading
from lab.provenance import Environment, ModelSource
from lab.typed import may_be_absent


@dataclass(frozen=True)
class Settings:
    """How the prompt was decoded (:class:`lab.tracker.results.DecodeSettings`, as written).

    Attributes:
        max_new_tokens: The most tokens generated, tokens.
        temperature: Sampling temperature (dimensionless, >= 0; 0 = greedy).
        top_p: Nucleus mass kept, in (0, 1]; 1 = no filter.
        top_k: Tokens kept by top-k; None = no filter.
        seed: The ``--seed``; None when none was given (the seed used is :attr:`Report.seed`).
        top_alternatives: Alternatives recorded per step.
    """

    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int | None
    seed: int | None
    top_alternatives: int


@dataclass(frozen=True)
class Summary:
    """The decode's figures over its steps (:meth:`lab.tracker.results.TrackResult.summary`); a mean or a rate that
    is undefined (no steps, no time) is None.

    Attributes:
        n_steps: Generated tokens.
        stop_reason: ``"eos"`` or ``"max_new_tokens"``.
        mean_entropy_bits: Mean raw entropy over steps, bits.
        max_entropy_bits: Largest raw entropy of a step, bits.
        var_entropy_bits: Population variance of the raw entropy over steps, bits².
        mean_varentropy_bits2: Mean per-step varentropy, bits².
        mean_sampled_entropy_bits: Mean entropy of the distributions sampled from, bits (0 for greedy).
        elapsed_s: Wall time of prefill, decode and statistics, seconds.
        tokens_per_s: Generated tokens per second.
    """

    n_steps: int
    stop_reason: str
    mean_entropy_bits: float | None
    max_entropy_bits: float | None
    var_entropy_bits: float | None
    mean_varentropy_bits2: float | None
    mean_sampled_entropy_bits: float | None
    elapsed_s: float
    tokens_per_s: float | None


@dataclass(frozen=True)
class Alternative:
    """One of a step's most likely tokens under the raw distribution (T = 1).

    Attributes:
        token_id: The token's id.
        token_text: Its text as decoded (special tokens kept).
        prob: Its raw probability, in [0, 1].
    """

    token_id: int
    token_text: str
    prob: float


@dataclass(frozen=True)
class StepFigures:
    """One generated token and what the tracker measured there: the fields :class:`Step` (the file's) and
    :class:`lab.tracker.results.StepRecord` (the tracker's, with its alternatives as tuples) share.

    Attributes:
        position: Index of the token in the full sequence (prompt length + step), tokens: the position its logits
            were predicted for.
        token_id: The chosen token's id.
        token_text: Its text as decoded (special tokens kept, e.g. ``<|im_end|>``).
        entropy_bits: Entropy of the raw next-token distribution (T = 1), bits.
        normalized_entropy: ``entropy_bits / log2 V``, in [0, 1].
        varentropy_bits2: Variance of the raw surprisal, bits².
        sampled_entropy_bits: Entropy of the distribution sampled from (after T, top-k, top-p), bits; 0 for greedy.
        sampled_normalized_entropy: The same over ``log2 V``.
        chosen_prob: The chosen token's raw probability, in [0, 1].
    """

    position: int
    token_id: int
    token_text: str
    entropy_bits: float
    normalized_entropy: float
    varentropy_bits2: float
    sampled_entropy_bits: float
    sampled_normalized_entropy: float
    chosen_prob: float


@dataclass(frozen=True)
class Step(StepFigures):
    """One generated token as the file holds it (:func:`lab.render.entropy.step_dicts`): its :class:`StepFigures`,
    its entropy band and its alternatives.

    Attributes:
        bucket: The label of its normalized-entropy band (:data:`lab.render.entropy.ENTROPY_BUCKETS`).
        alternatives: The raw top-k, most likely first.
    """

    bucket: str
    alternatives: list[Alternative]


@dataclass(frozen=True)
class Report:
    """``report.json`` of ``lab entropy`` past its kind and format (:func:`lab.commands.entropy.report_data`, then
    :func:`lab.commands.common.context_fields`).

    Attributes:
        prompt: The user message as the model was given it.
        system: The ``--system`` prompt; None for the template's own.
        messages: The chat messages encoded (``role``, ``content``), the context included.
        prompt_ids: The encoded prompt's token ids.
        settings: How it was decoded.
        seed: The sampling seed used; None for greedy.
        model: The model record (:meth:`lab.models.source.ModelSource.as_dict`).
        device: The device the model ran on.
        dtype: The model's dtype.
        runtime: ``"torch"`` or ``"llama.cpp"``.
        runtime_source: Why that runtime, in words.
        vocab_size: V, the size of a logits row, tokens (log2 V bounds an entropy).
        environment: The machine, libraries and model (:func:`lab.reports.environment`).
        summary: The figures over the steps.
        text: The generated text, special tokens skipped.
        new_token_ids: The generated ids, EOS included when the decode stopped on it.
        stop_reason: ``"eos"`` or ``"max_new_tokens"``.
        steps: One per generated token, in order.
        context: The ``--context`` text; absent without one.
        context_measure: The decode's reading of the context with the measure's validity record
            (:meth:`lab.health.context_items.ContextReading.to_json`); absent without ``--context``.
    """

    prompt: str
    system: str | None
    messages: list[dict[str, str]]
    prompt_ids: list[int]
    settings: Settings
    seed: int | None
    model: ModelSource
    device: str
    dtype: str
    runtime: str
    runtime_source: str
    vocab_size: int
    environment: Environment
    summary: Summary
    text: str
    new_token_ids: list[int]
    stop_reason: str
    steps: list[Step]
    context: str | None = may_be_absent()
    context_measure: ContextReading | None = may_be_absent()


KIND = Kind("entropy", listed=10, commands=("lab.commands.entropy",), page="lab.views.kinds.entropy", report=Report)
