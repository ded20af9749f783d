"""``lab intervene``: what a context added masked out, and what moves in entropy and acceptance.

The report (``report.json``, :class:`Report`) is what :func:`lab.render.intervention.write_report` writes from
:class:`lab.intervene.report.InterventionReport`: the analysis' dataclasses (:mod:`lab.analysis.intervention`) as
JSON, each NaN (a test that did not run, a ratio of a zero mean) as null, hence the ``| None`` of the figures a
run may leave unmeasured. Entropies are in bits, p = target and q = draft (Leviathan et al. 2023).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lab.kinds import Kind
from lab.provenance import Environment
from lab.typed import may_be_absent

# Version of the arms and controls (:mod:`lab.analysis.intervention`'s docstring says what each is): every work
# directory and report records it, and the records of another version are redone.
DESIGN = 2


@dataclass(frozen=True)
class Settings:
    """What fixed the run's numbers (:class:`lab.intervene.run.InterventionSettings` adds the work directory's key).

    Attributes:
        model, draft: The target profile or path; the draft spec (``early-exit:N`` or a model).
        weights, draft_weights, dtype, device: As ``lab speculate``'s flags.
        triples_file, triples_sha256: The triple file and its sha256 (hex).
        pilot_file, pilot_sha256: The pilot's triple file and its sha256; None without a pilot.
        limit: Main triples scored (None: all); pilot_limit: pilot triples scored.
        new_tokens: Decode positions scored per twin (the greedy continuation's length), tokens.
        seed: The analysis' seed (bootstrap, label swaps).
        dense_rows: Quantized layers send a pass of at least this many positions through a dense bfloat16 copy of
            their weights (:func:`lab.models.qlinear.set_dense_rows`); None (the default): the weight-only kernels
            throughout.
        design: The arms' version, :data:`DESIGN` unless given; another version scores anew.
    """

    model: str
    draft: str
    weights: str
    draft_weights: str
    dtype: str
    device: str
    triples_file: str
    triples_sha256: str
    pilot_file: str | None
    pilot_sha256: str | None
    limit: int | None
    pilot_limit: int
    new_tokens: int
    seed: int
    dense_rows: int | None = None
    design: int = DESIGN


@dataclass(frozen=True)
class StatedTest:
    """One pre-stated test, judged (:class:`lab.analysis.intervention.InterventionTest`); null figures: not tested.

    Attributes:
        name, statement: The test's name and its pre-stated hypothesis.
        estimate: Mean of the per-distractor means, in ``unit``.
        unit: ``bits``, ``beta`` (a probability) or ``bits per unit lambda``.
        ci_low, ci_high: The family-level interval's ends, in ``unit``; ci_level: its level (a probability).
        p_value: One-sided p; p_holm: Holm-adjusted within the four (probabilities).
        verdict: What the report says (``undecided: controls failed`` when a control failed); rule_verdict: the
            rule's own (:mod:`lab.verdicts`).
        n_triples, n_distractors: Units used (counts).
        smallest_effect: Smallest effect of interest, in ``unit``.
        power: Power at ``smallest_effect`` (a probability).
        sd_triples: SD of the per-triple values, in ``unit``; icc: their share of variance between distractors.
        note: Why the test did not run, or ``""``.
    """

    name: str
    statement: str
    estimate: float | None
    unit: str
    ci_low: float | None
    ci_high: float | None
    ci_level: float
    p_value: float | None
    p_holm: float | None
    verdict: str
    rule_verdict: str
    n_triples: int
    n_distractors: int
    smallest_effect: float
    power: float | None
    sd_triples: float | None
    icc: float | None
    note: str


@dataclass(frozen=True)
class Estimate:
    """A secondary estimate with its 95 % interval resampling whole distractors; null where undefined.

    Attributes:
        name, statement: What it estimates.
        value, ci_low, ci_high: The estimate and its interval, in ``unit``; ci_level: the level.
        unit: ``ratio`` or ``bits per unit of attention mass``.
        n_triples: Triples it is computed on.
    """

    name: str
    statement: str
    value: float | None
    unit: str
    ci_low: float | None
    ci_high: float | None
    ci_level: float
    n_triples: int


@dataclass(frozen=True)
class DistractorRow:
    """One distractor's triples: their count and mean ``did_entropy`` and ``h4b_forced`` values, bits."""

    distractor: str
    n_triples: int
    mean_did_entropy: float
    mean_h4b_gap: float


@dataclass(frozen=True)
class EmptyMaskControl:
    """Every triple's empty-mask difference at most ``tolerance_bits`` (bits): ``max_diff_bits`` the largest (of
    question ``worst``), ``n_over`` the triples over it."""

    passed: bool
    tolerance_bits: float
    max_diff_bits: float
    n_over: int
    worst: str


@dataclass(frozen=True)
class PositionOnlyControl:
    """TOST of H(P,A2) - H(N,A2) (bits) on the distractor means within +-``bound_bits``: its mean, interval and
    TOST p (null with one distractor) at level ``alpha``."""

    passed: bool
    bound_bits: float
    mean_bits: float | None
    ci_low: float | None
    ci_high: float | None
    p_tost: float | None
    alpha: float
    n_triples: int
    n_distractors: int
    note: str = ""


@dataclass(frozen=True)
class LabelSwapControl:
    """``did_entropy`` on ``n_swaps`` label-swapped copies rejecting at raw p < ``alpha`` in ``n_rejecting``
    (``share``, a proportion); passed at most ``max_rejecting`` (Binomial tail at ``p_threshold``)."""

    passed: bool
    n_swaps: int
    n_rejecting: int
    share: float
    max_rejecting: int
    alpha: float
    p_threshold: float
    seed: int
    note: str = ""


@dataclass(frozen=True)
class CPlusControl:
    """C+ moves a twin's mean entropy by >= ``min_bits`` (bits) on ``n_moved`` of ``n_twins`` twins (``share``);
    passed at share >= ``min_share``."""

    passed: bool
    min_bits: float
    min_share: float
    share: float
    n_moved: int
    n_twins: int


@dataclass(frozen=True)
class ArmMove:
    """What one arm (the ``sink`` arm) does to the twins' mean entropy: mean H(arm) - H(A0) in bits, and
    |H(arm) - H(A0)| >= ``min_bits`` on ``n_moved`` of ``n_twins`` twins (``share``). Described, not a control."""

    arm: str
    mean_bits: float | None
    min_bits: float
    share: float
    n_moved: int
    n_twins: int


@dataclass(frozen=True)
class ManipulationControl:
    """The masks did what they say: attention masses (probabilities) within ``tolerance`` of 0 where masked; the
    mediator's mean under A0 and A1, the largest under A1 and of the sink under the sink arm, and the L0.5 and
    L0.25 mediators as ratios to A0's (null when A0's is 0)."""

    passed: bool
    tolerance: float
    a0_mean: float
    a1_mean: float
    a1_max: float
    sink_max: float
    ratio_l05: float | None
    ratio_l025: float | None


@dataclass(frozen=True)
class Analysis:
    """The tests, secondary estimates and controls on one set of triples
    (:class:`lab.analysis.intervention.InterventionAnalysis`).

    Attributes:
        n_triples, n_distractors: Triples analysed and their distractor texts (counts).
        did_entropy, did_beta, h4b_forced, dose: The four pre-stated tests (one Holm family).
        proportion_removed, mediation_slope, indirect_share: The secondary estimates.
        distractors: One row per distractor.
        empty_mask, position_only, label_swap, c_plus, manipulation: The controls.
        sink: The sink arm, described.
        alpha: Family-wise error rate of the tests; seed: of the label swaps and bootstraps.
    """

    n_triples: int
    n_distractors: int
    did_entropy: StatedTest
    did_beta: StatedTest
    h4b_forced: StatedTest
    dose: StatedTest
    proportion_removed: Estimate
    mediation_slope: Estimate
    indirect_share: Estimate
    distractors: list[DistractorRow]
    empty_mask: EmptyMaskControl
    position_only: PositionOnlyControl
    label_swap: LabelSwapControl
    c_plus: CPlusControl
    manipulation: ManipulationControl
    sink: ArmMove
    alpha: float
    seed: int

    @property
    def tests(self) -> tuple[StatedTest, ...]:
        """The four pre-stated tests, in the report's order."""
        return self.did_entropy, self.did_beta, self.h4b_forced, self.dose


@dataclass(frozen=True)
class Pilot:
    """The pilot triples: excluded from the analysis, read for their controls (and SDs).

    Attributes:
        ids: The pilot's clean prompt ids.
        controls: Each control's name and whether it passed on the pilot.
        analysis: The same analysis as the main run's, on the pilot.
    """

    ids: list[str]
    controls: dict[str, bool]
    analysis: Analysis


@dataclass(frozen=True)
class PowerRow:
    """One test's power at its smallest effect of interest (in ``unit``) for the main run's size, from the pilot's
    SD (``sd``, in ``unit``) and ``icc``; ``power`` and its ``ceiling`` (unlimited triples) are probabilities, null
    when not computable; ``required_triples`` reach ``target`` (None: not reachable)."""

    test: str
    smallest_effect: float
    unit: str
    sd: float | None
    icc: float
    n_triples: int
    n_distractors: int
    power: float | None
    target: float
    ceiling: float | None
    required_triples: int | None


@dataclass(frozen=True)
class ArmRecord:
    """One arm of one twin: per decode position the target's entropy (bits) and beta = sum_x min(p(x), q(x)), and
    the decode queries' mean attention mass on the added span and on key 0 (probabilities)."""

    entropy_bits: list[float]
    beta: list[float]
    span_mass: float
    sink_mass: float


@dataclass(frozen=True)
class TwinRecord:
    """One twin's outcomes (:func:`lab.intervene.record._twin_json`): its prompt id, ``poisoned`` or ``neutral``,
    its prompt's length and the added span ``[start, end)`` (tokens), the decode positions scored, the empty arm's
    largest gap to A0 (bits), and each arm's outcomes."""

    prompt_id: str
    variant: str
    n_prompt: int
    span: list[int]
    n_decode: int
    empty_max_diff_bits: float
    arms: dict[str, ArmRecord]


@dataclass(frozen=True)
class TripleRecord:
    """One main triple's record as the work directory keeps it (:meth:`lab.intervene.record.TripleRecord.to_json`).

    Attributes:
        format: The record's format (the design version).
        question_id, category, distractor: The clean prompt's id and category; the distractor's label.
        continuation: The clean prompt's greedy continuation, token ids.
        seconds: Wall time of the triple, seconds.
        vocab_size: V, the target's vocabulary (tokens); absent in a record from before it was kept.
        twins: ``P`` (poisoned) and ``N`` (neutral).
    """

    format: int
    question_id: str
    category: str
    distractor: str
    continuation: list[int]
    seconds: float
    vocab_size: int | None = may_be_absent()
    # Always written, after vocab_size: keyword-only, so it needs no default and stays required.
    twins: dict[str, TwinRecord] = field(kw_only=True)


@dataclass(frozen=True)
class Report:
    """``report.json`` of ``lab intervene`` past its kind and format.

    Attributes:
        settings: What fixed the numbers.
        decides: Whether the verdicts stand (every control passed, the pilot's too).
        analysis: The main triples' tests, estimates and controls.
        controls: Each main control's name and whether it passed.
        pilot: The pilot's ids, controls and analysis; None without a pilot.
        power: The power table from the pilot's SDs; empty without one.
        seconds: Summed per-triple wall time, pilot included, seconds.
        environment: Machine, library versions, threads, load (:func:`lab.reports.environment`).
        work_dir: Where the records are kept.
        triples: The main triples' full records, in file order.
    """

    settings: Settings
    decides: bool
    analysis: Analysis
    controls: dict[str, bool]
    pilot: Pilot | None
    power: list[PowerRow]
    seconds: float
    environment: Environment
    work_dir: str
    triples: list[TripleRecord]


KIND = Kind("intervene", listed=130, commands=("lab.commands.intervene",), page="lab.views.kinds.intervene",
            report=Report)
