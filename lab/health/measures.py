"""Graded context health: candidate measures, their properties, and the calibrated choice.

One measure everywhere, so that figures from different commands compare:
:func:`graded_health` is what ``lab sinks``, the study and the calibrations all
report, ``NaN`` ("not measurable") when no content position is observed by enough
queries to judge. Which candidate it applies is packaged data
(``lab/health/chosen.json``, :func:`lab.health.choice.load_chosen`), or the user's own
choice written by ``lab calibrate-health --save``.

Context health keeps one scale: 0..10. What it measures is the chosen candidate's
reading (below): since the clean length references it is how evenly the content's
received attention spreads (relative to uniform causal attention) *against clean prompts
of the same length on the same model*, 5 being typical; it does not drift with length on
the three families calibrated, and at equal length it ranks a distractor below relevant
text on two of them. The
count-based score of :func:`lab.sinks.scores.context_health` is 10 for every clean prompt
of the study (no clean prompt has a content sink at the calibrated threshold), so
it cannot rank clean prompts; it stays in the study as ``content_sink_health``.

Pure functions on a prompt's prefill outputs (:class:`HealthInputs`, built from a
:class:`lab.sinks.prefill.PrefillAnalysis`); no model code. Shapes: ``S`` prompt
positions, ``N`` content positions. Received attention is Gu et al.'s importance
score (arXiv:2410.10781, Sec. 3): mean attention per observing query, averaged
over layers and heads.

Candidates (:data:`CANDIDATES`), all on 0..10:

* ``soft_penalty`` -- a continuous version of the count penalty: each observed
  content position contributes ``sigmoid((z - threshold) / SOFT_WIDTH) *
  (1 + max(0, z - threshold) / SEVERITY_SCALE)``; health = ``10 exp(-HEALTH_RATE *
  mean)``. Reads the sink detector's score and threshold (designed on the z scale;
  with ``sink_rate`` as the detector's statistic its width is in rate units), so it
  moves with the detector.
* ``content_share`` -- 10 x (1 - the share of received attention absorbed by
  structural positions and flagged sinks).
* ``content_entropy`` -- 10 x the normalized Shannon entropy of the received
  attention over content positions, ``H(p) / log N`` with ``p_k = r_k / sum r``;
  10 when ``N <= 1`` (one token cannot pool attention away from the others).
* ``content_sink_rate`` -- 10 x (1 - Gu et al.'s sink rate averaged over content
  positions) at epsilon = 0.3.
* ``relative_entropy`` -- ``content_entropy`` of received attention divided by what
  uniform causal attention would give each position (:func:`uniform_baseline`).
* ``local_entropy`` -- the mean of ``content_entropy`` within consecutive blocks of
  :data:`LOCAL_BLOCK` content positions (evenness at a fixed scale).
* ``content_entropy_for_length``, ``relative_entropy_for_length``,
  ``local_entropy_for_length`` -- the base read against clean prompts of the same length
  on the same model (:func:`for_length`): ``10 Phi((value - expected(N)) / scale)`` with
  the model's :class:`LengthReference` (a Theil-Sen line of the base on ``ln N`` and the
  residuals' robust SD, fitted by ``lab calibrate-health`` on 120 clean length-reference
  prompts that share no question with the calibration prompts;
  :mod:`lab.health.references`). 5 is a typical clean prompt of that length; NaN for a
  model without a reference. They exist because every base falls with the content length
  by a slope of each model's own, so a base alone reads length as much as the context
  (measured per family in ``docs/results.md``, "Context health calibration").

Control (:data:`CONTROLS`), run through the same rule, which must reject it:
``length_only`` = 10 (1 - log N / log 8192), a function of the content length N alone.

Choice rule, stated before any study entropy was looked at, and applied on the
calibration prompts only (``lab/data/calibration_prompts.jsonl``, a poisoned and a
neutral variant of each; the study's prompt set is never used), by ``lab calibrate-health``:

1. *eligible*: the candidate has the six properties below (the first five checked on
   :data:`PROPERTY_CASES` fixed random cases by :func:`check_properties`; the sixth on
   the calibration prompts);
2. *admissible*: it ranks every poisoned calibration variant strictly below its
   *neutral* variant (the same added length, to 5 % in tokens: relevant, harmless text
   where the poisoned one has a distractor; :func:`lab.health.calibration.neutral_variants`),
   and no value (to 0.01) is shared by more than 10 % of the clean calibration prompts;
3. among admissible candidates the one with the largest spread over the clean
   calibration prompts wins, spread = interquartile range on the 0..10 scale;
4. if none is admissible: the eligible candidate with the most poisoned variants below
   their neutral twin, ties broken by spread;
5. a control chosen by steps 1-4 is an error (the rule failed to reject length alone).

Poisoned variants (one of the study's six distractor texts, then a blank line, then the
clean question; :func:`lab.health.calibration.poisoned_variants`) are longer than their
clean twin, so ordering them below the clean twin, the criterion before the neutral
variants existed, is what a measure of length alone does (``length_only`` orders all 36).

Properties (the first five tested with hypothesis in ``tests/unit/test_health.py``):
bounded in [0, 10]; non-increasing when attention mass moves from the content position
holding the least onto the one holding the most (a sink forming among the content), where
"holding" is what the candidate reads: received attention for ``content_entropy``, received
attention over :func:`uniform_baseline` for ``relative_entropy`` (a move ranked by raw
attention can raise that one: the raw-richer position may hold less than its baseline, so
the move evens the content out; :func:`move_to_content_sink` takes the ranking);
invariant to the values at structural positions; defined and finite for 1-token
content; equal for equal inputs; and *length-neutral*: over the clean calibration
prompts and their neutral variants (clean context from about 5 to 500 content tokens)
the Spearman correlation of the value with the content length N lies within
[-0.2, 0.2] (:data:`lab.health.calibration.LENGTH_RHO_TOLERANCE`). The clean prompts
alone span too few lengths (5 to 40 tokens) for a drift to show.

What the rule chose on each calibrated family, with every candidate's drift with length
and its twin orderings, is measured data and lives with its date in ``docs/results.md``
("Context health calibration"); the packaged choice is ``lab/health/chosen.json``, checked
against this rule by ``lab calibrate-health``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import torch

# soft_penalty: below the threshold a position fades in over SOFT_WIDTH robust SDs
# (half an SD: z = threshold - 2 contributes ~2 % of a sink). Severity and rate are
# those of lab.sinks.scores.context_health, so a clear sink costs what it costs there.
SOFT_WIDTH = 0.5
SEVERITY_SCALE = 2.0
HEALTH_RATE = 10.0
SINK_RATE_EPSILON = 0.3  # Gu et al. 2024's epsilon; the sink_rate field of the prefill uses it


@dataclass(frozen=True)
class HealthInputs:
    """What a health measure may read from one prompt's prefill analysis.

    Attributes:
        received: Float ``[S]`` mean received attention per observing query (probabilities).
        content: Bool ``[S]``, True at content positions (not template, not injected system prompt).
        score: Float ``[S]`` the sink detector's score (its statistic: a sink rate in
            ``[0, 1]`` for ``sink_rate``, else a robust z).
        is_sink: Bool ``[S]`` sink flags.
        observed: Bool ``[S]`` observed by enough queries to be flagged.
        sink_rate: Float ``[S]`` Gu et al.'s sink rate per position, in [0, 1].
        threshold: The threshold on ``score`` the flags used.
        length_reference: The model's clean length references by base candidate name
            (:class:`LengthReference`, :mod:`lab.health.references`); ``None`` or a missing
            base makes that base's ``*_for_length`` candidate NaN (no reference to read against).
    """

    received: torch.Tensor
    content: torch.Tensor
    score: torch.Tensor
    is_sink: torch.Tensor
    observed: torch.Tensor
    sink_rate: torch.Tensor
    threshold: float
    length_reference: Mapping[str, "LengthReference"] | None = None

    @classmethod
    def from_prefill(cls, pre: Any) -> "HealthInputs":
        """From a :class:`lab.sinks.prefill.PrefillAnalysis` (its public fields only)."""
        # "content" is lab.sinks.structure.ROLE_CONTENT; spelled out so this math module imports no tokenizer code
        content = torch.tensor([r == "content" for r in pre.roles], dtype=torch.bool)
        return cls(received=pre.received.detach().float().cpu(), content=content,
                   score=pre.score.detach().float().cpu(),
                   is_sink=pre.is_sink.detach().bool().cpu(), observed=pre.observed.detach().bool().cpu(),
                   sink_rate=pre.sink_rate.detach().float().cpu(), threshold=float(pre.threshold),
                   length_reference=getattr(pre, "length_reference", None))


def _clamp10(x: float) -> float:
    return float(min(10.0, max(0.0, x)))


def soft_penalty(h: HealthInputs) -> float:
    """Continuous content-sink penalty on 0..10 (module docstring); 10 without observed content."""
    sel = h.content & h.observed
    if not bool(sel.any()):
        return 10.0
    excess = h.score[sel].double() - h.threshold
    weight = torch.sigmoid(excess / SOFT_WIDTH) * (1.0 + excess.clamp_min(0.0) / SEVERITY_SCALE)
    return _clamp10(10.0 * math.exp(-HEALTH_RATE * float(weight.mean())))


def content_share(h: HealthInputs) -> float:
    """10 x the share of received attention on content positions that are not flagged sinks."""
    r = h.received.double().clamp_min(0.0)
    total = float(r.sum())
    if total <= 0.0:
        return 10.0
    kept = float(r[h.content & ~h.is_sink].sum())
    return _clamp10(10.0 * kept / total)


def content_entropy(h: HealthInputs) -> float:
    """10 x normalized Shannon entropy of received attention over content positions.

    ``p_k = r_k / sum_content r``; ``H(p) / log N`` in [0, 1] (Schur-concave, so moving
    mass from a poorer content position to a richer one never raises it). 10 when
    ``N <= 1`` or no content position receives anything.
    """
    r = h.received.double()[h.content].clamp_min(0.0)
    n = int(r.numel())
    total = float(r.sum())
    if n <= 1 or total <= 0.0:
        return 10.0
    p = r / total
    ent = float(-(p[p > 0] * p[p > 0].log()).sum())
    return _clamp10(10.0 * ent / math.log(n))


def content_sink_rate(h: HealthInputs) -> float:
    """10 x (1 - mean sink rate over content positions); 10 without content."""
    if not bool(h.content.any()):
        return 10.0
    return _clamp10(10.0 * (1.0 - float(h.sink_rate.double()[h.content].mean())))


def uniform_baseline(s: int) -> torch.Tensor:
    """Received attention each of ``s`` positions gets when every query attends uniformly.

    Query ``i`` (0-based) spreads 1 over its ``i + 1`` keys, so key ``k`` receives, per
    observing query, ``u_k = (1 / (S - k)) sum_{i=k}^{S-1} 1 / (i + 1)`` (the importance
    score of :func:`lab.sinks.scores.attention_received` under uniform causal attention).
    ``u`` is not flat (``u_0 ~ ln S / S`` against ``u_{S-1} = 1 / S``) and its unevenness
    grows with S, so received attention is uneven by position alone, more so in a longer
    prompt. Returns float64 ``[S]``; full causal attention (a sliding window, as in
    Gemma-3's local layers, has another baseline).
    """
    inv = 1.0 / torch.arange(1, s + 1, dtype=torch.float64)  # 1 / (i + 1): [S]
    tail = torch.flip(torch.cumsum(torch.flip(inv, [0]), 0), [0])  # sum_{i >= k} 1 / (i + 1): [S]
    return tail / torch.arange(s, 0, -1, dtype=torch.float64)


def _normalized_entropy(w: torch.Tensor) -> float:
    """``H(w / sum w) / log N`` in [0, 1] for non-negative ``w`` of N > 1 entries with a positive sum."""
    p = w / w.sum()
    p = p[p > 0]
    return float(-(p * p.log()).sum()) / math.log(int(w.numel()))


def relative_entropy(h: HealthInputs) -> float:
    """10 x normalized entropy over content positions of received attention relative to the uniform baseline.

    ``w_k = r_k / u_k`` (:func:`uniform_baseline`), ``p_k = w_k / sum_content w``,
    ``H(p) / log N``: 10 when every content position receives what uniform attention
    would give it, whatever the prompt's length, so the position-driven unevenness that
    grows with S is not read as pooling. 10 when ``N <= 1`` or no content position
    receives anything.
    """
    r = h.received.double().clamp_min(0.0)
    w = (r / uniform_baseline(int(r.numel())))[h.content]
    if int(w.numel()) <= 1 or float(w.sum()) <= 0.0:
        return 10.0
    return _clamp10(10.0 * _normalized_entropy(w))


# local_entropy: content positions in consecutive blocks of 8. Chosen after looking at
# SmolLM2's calibration prompts (blocks of 16 drifted at rho -0.18, of 8 at +0.02); the
# pair's calibration is the check made after that choice.
LOCAL_BLOCK = 8


def local_entropy(h: HealthInputs) -> float:
    """10 x the mean normalized entropy of received attention within blocks of LOCAL_BLOCK content positions.

    Content positions (in order) are cut into consecutive blocks of :data:`LOCAL_BLOCK`
    (the last may be shorter; a block of one position is skipped); in each block
    ``H(p) / log B`` with ``p`` the block's received attention renormalized; the mean
    over blocks, x 10. It judges how evenly attention spreads at a fixed scale, so it
    does not fall just because the prompt is longer (its normalizer does not grow with
    N), but it no longer compares far-apart positions: a sink formed in the distractor
    counts only within its block. 10 when ``N <= 1`` or no block receives anything.
    """
    r = h.received.double()[h.content].clamp_min(0.0)
    vals = [_normalized_entropy(b) for b in torch.split(r, LOCAL_BLOCK) if b.numel() > 1 and float(b.sum()) > 0.0]
    return _clamp10(10.0 * sum(vals) / len(vals)) if vals else 10.0


@dataclass(frozen=True)
class LengthReference:
    """How one base candidate falls with content length N on one model's clean prompts.

    ``expected(N) = intercept + slope * ln N`` (Theil-Sen fit on the clean length-reference
    prompts, :func:`lab.health.references.fit_reference`); ``scale`` is the robust SD of
    the residuals there (1.4826 MAD, on the 0..10 scale, > 0).
    """

    base: str
    intercept: float
    slope: float
    scale: float

    def expected(self, n_content: int) -> float:
        """The base candidate's value a clean prompt of ``n_content`` content tokens gets on this model."""
        return self.intercept + self.slope * math.log(max(int(n_content), 1))


def for_length(value: float, n_content: int, ref: LengthReference) -> float:
    """``10 Phi((value - ref.expected(N)) / ref.scale)``: a base value read against clean prompts of its length.

    The standard normal CDF of the value's robust z among clean reference prompts of
    the same content length on the same model, x 10: 5 is the typical clean prompt of
    that length, 10 far more even, 0 far less. Monotone in ``value`` at fixed N, so
    it keeps every ordering of the base among prompts of equal length (a poisoned twin
    against its neutral twin) and removes the drift with N the reference measured.
    """
    z = (value - ref.expected(n_content)) / ref.scale
    return _clamp10(10.0 * 0.5 * math.erfc(-z / math.sqrt(2.0)))


def _for_length(base: str, fn: Callable[[HealthInputs], float]) -> Callable[[HealthInputs], float]:
    def measure(h: HealthInputs) -> float:
        ref = (h.length_reference or {}).get(base)
        if ref is None:
            return math.nan
        return for_length(fn(h), int(h.content.sum()), ref)

    measure.__name__ = f"{base}_for_length"
    measure.__doc__ = (f"``{base}`` read against the model's clean prompts of the same length "
                       f"(:func:`for_length`); NaN without the model's reference for ``{base}``.")
    return measure


# Bases that fall with length on some model and are worth referring to it (the three
# entropy readings; the others fail a random-input property or tie too often).
REFERENCED_BASES = ("content_entropy", "relative_entropy", "local_entropy")
FOR_LENGTH = "_for_length"
# A reference for random-input property checks: any positive scale and any line keep the
# five properties (the transform is monotone at fixed N), so these values are arbitrary.
SYNTHETIC_REFERENCES: Mapping[str, LengthReference] = {
    b: LengthReference(base=b, intercept=9.0, slope=-0.3, scale=0.4) for b in REFERENCED_BASES}

_BASES: dict[str, Callable[[HealthInputs], float]] = {
    "soft_penalty": soft_penalty,
    "content_share": content_share,
    "content_entropy": content_entropy,
    "content_sink_rate": content_sink_rate,
    "relative_entropy": relative_entropy,
    "local_entropy": local_entropy,
}
CANDIDATES: dict[str, Callable[[HealthInputs], float]] = {
    **_BASES, **{b + FOR_LENGTH: _for_length(b, _BASES[b]) for b in REFERENCED_BASES}}

# The length-only control: 10 at one content token, 0 at LENGTH_CONTROL_MAX_N (past any
# calibration prompt), log-linear between; what a measure that only reads length gives.
LENGTH_CONTROL_MAX_N = 8192


def length_only(h: HealthInputs) -> float:
    """Negative control: ``10 (1 - log N / log LENGTH_CONTROL_MAX_N)``, N = content positions.

    Reads no attention at all. It has the five random-input properties (bounded;
    unchanged when mass moves, so non-increasing; blind to structure; 10 at N = 1;
    deterministic) and orders every poisoned twin below its shorter clean twin, so a
    rule that cannot reject it cannot tell a measure of the context from a measure of
    its length. The choice rule must reject it (the sixth property).
    """
    n = int(h.content.sum())
    return _clamp10(10.0 * (1.0 - math.log(max(n, 1)) / math.log(LENGTH_CONTROL_MAX_N)))


# Controls the choice rule is run on beside the candidates and must reject; never chosen.
CONTROLS: dict[str, Callable[[HealthInputs], float]] = {"length_only": length_only}



PROPERTY_CASES = 200  # random cases per property in check_properties (fixed seed)
def random_inputs(gen: torch.Generator, s: int, n_content: int) -> HealthInputs:
    """A random but valid :class:`HealthInputs`: ``s`` positions, the last ``n_content`` before 2 template ones."""
    received = torch.rand(s, generator=gen, dtype=torch.float64) ** 3
    received[0] = 0.5 + 0.5 * float(torch.rand(1, generator=gen))  # a position-0 sink, as in real prompts
    content = torch.zeros(s, dtype=torch.bool)
    start = max(1, s - 2 - n_content)
    content[start:start + n_content] = True
    score = torch.randn(s, generator=gen, dtype=torch.float64) * 2
    threshold = 3.5
    observed = torch.arange(s, 0, -1) >= 2
    return HealthInputs(received=received, content=content, score=score, is_sink=(score > threshold) & observed,
                        observed=observed, sink_rate=torch.rand(s, generator=gen, dtype=torch.float64) ** 4,
                        threshold=threshold, length_reference=SYNTHETIC_REFERENCES)


def move_to_content_sink(h: HealthInputs, frac: float, baseline: torch.Tensor | None = None) -> HealthInputs:
    """Move ``frac`` of the poorest content position's received attention to the richest one.

    The receiving position's z rises and the giver's falls in step (log-scale, as the
    detector's z does for a fixed baseline), and the richest becomes a flagged sink
    with all heads above epsilon once it holds most of the content's attention.

    Args:
        h: The inputs; not changed.
        frac: Share in [0, 1] of the giver's received attention that moves.
        baseline: Float ``[S]`` positive; when given, "poorest" and "richest" rank content
            positions by ``received / baseline`` (``uniform_baseline(S)``: what
            ``relative_entropy`` reads) instead of by ``received``. The amount moved is
            received attention either way.
    """
    idx = torch.nonzero(h.content).flatten()
    r = h.received.clone()
    vals = r[idx] if baseline is None else (r / baseline)[idx]
    rich, poor = int(idx[int(vals.argmax())]), int(idx[int(vals.argmin())])
    if rich == poor:
        return h
    delta = frac * float(r[poor])
    score = h.score.clone()
    sink_rate = h.sink_rate.clone()
    is_sink = h.is_sink.clone()
    if r[rich] > 0 and r[poor] > delta:
        score[rich] = score[rich] + math.log((float(r[rich]) + delta) / float(r[rich]))
        score[poor] = score[poor] + math.log((float(r[poor]) - delta) / float(r[poor]))
    r[rich] += delta
    r[poor] -= delta
    sink_rate[rich] = max(float(sink_rate[rich]), float(sink_rate[poor]))
    sink_rate[poor] = min(float(sink_rate[rich]), float(sink_rate[poor]))
    is_sink[rich] = bool(is_sink[rich] or is_sink[poor] or (score[rich] > h.threshold and h.observed[rich]))
    is_sink[poor] = bool(is_sink[poor] and score[poor] > h.threshold)
    return replace(h, received=r, score=score, is_sink=is_sink, sink_rate=sink_rate)


def perturb_structural(h: HealthInputs, gen: torch.Generator) -> HealthInputs:
    """Redraw every value at structural (non-content) positions."""
    s = h.received.numel()
    st = ~h.content
    r, score, rate = h.received.clone(), h.score.clone(), h.sink_rate.clone()
    r[st] = torch.rand(s, generator=gen, dtype=r.dtype)[st]
    score[st] = (torch.randn(s, generator=gen, dtype=score.dtype) * 3)[st]
    rate[st] = torch.rand(s, generator=gen, dtype=rate.dtype)[st]
    is_sink = h.is_sink.clone()
    is_sink[st] = score[st] > h.threshold
    return replace(h, received=r, score=score, is_sink=is_sink, sink_rate=rate)


PROPERTIES = ("bounded", "non_increasing", "structural_invariant", "one_token", "deterministic")


def _check_case(measure: Callable[[HealthInputs], float], h: HealthInputs, one: HealthInputs,
                gen: torch.Generator, ok: dict[str, bool]) -> None:
    """Fold one input's five property checks into ``ok`` (``one``: the input with 1 content token)."""
    v = measure(h)
    ok["bounded"] &= math.isfinite(v) and 0.0 <= v <= 10.0
    ok["deterministic"] &= measure(h) == v
    ok["non_increasing"] &= measure(move_to_content_sink(h, 0.5)) <= v + 1e-9
    ok["structural_invariant"] &= abs(measure(perturb_structural(h, gen)) - v) <= 1e-9
    w = measure(one)
    ok["one_token"] &= math.isfinite(w) and 0.0 <= w <= 10.0


def check_properties(measure: Callable[[HealthInputs], float], cases: int = PROPERTY_CASES,
                     seed: int = 0) -> dict[str, bool]:
    """Check the five properties of the module docstring on ``cases`` fixed random inputs.

    Returns:
        ``{"bounded", "non_increasing", "structural_invariant", "one_token", "deterministic"}``
        each True when no case violated it. Used by the calibration's eligibility
        step; the unit tests check the chosen measure with hypothesis as well.
    """
    gen = torch.Generator().manual_seed(seed)
    ok = dict.fromkeys(PROPERTIES, True)
    for _ in range(cases):
        s = int(torch.randint(6, 40, (1,), generator=gen))
        n = int(torch.randint(2, s - 3, (1,), generator=gen))
        h = random_inputs(gen, s, n)
        _check_case(measure, h, random_inputs(gen, s, 1), gen, ok)
    return ok


def check_properties_on(measure: Callable[[HealthInputs], float], inputs: Sequence[HealthInputs],
                        seed: int = 0) -> dict[str, Any]:
    """The five properties checked on real prefills (one model's prompts) instead of random inputs.

    Each input is taken as measured (received attention, z, sink flags of the model's
    own prefill); the moves are :func:`move_to_content_sink` and
    :func:`perturb_structural` as in :func:`check_properties`, and the one-token case
    keeps only the input's first observed content position. An input with no observed
    content is not measurable (:func:`graded_health` gives NaN) and is counted, not checked.

    Args:
        measure: A candidate of :data:`CANDIDATES`.
        inputs: ``HealthInputs.from_prefill`` of each prompt (any model's, Qwen's as well as SmolLM2's).
        seed: Seed of the structural perturbation.

    Returns:
        ``{property: bool for each of PROPERTIES, "n_checked": int, "n_not_measurable": int}``.
    """
    gen = torch.Generator().manual_seed(seed)
    ok = dict.fromkeys(PROPERTIES, True)
    checked = 0
    for h in inputs:
        judged = torch.nonzero(h.content & h.observed).flatten()
        if judged.numel() == 0:
            continue
        content = torch.zeros_like(h.content)
        content[int(judged[0])] = True
        one = replace(h, content=content)
        _check_case(measure, h, one, gen, ok)
        checked += 1
    return {**ok, "n_checked": checked, "n_not_measurable": len(inputs) - checked}
