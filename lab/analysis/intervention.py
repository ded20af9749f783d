"""The statistics of ``lab intervene``: four pre-stated tests, their power, five controls and the verdicts.

Pure functions on numbers (no model, no files, no Rich). The design: each triple is a
clean question, its poisoned twin P (a distractor text added) and its neutral twin N (relevant
text of the same added length); every arm of each twin scores the same teacher-forced
continuation, and a :class:`TripleSummary` holds each (twin, arm)'s means over the decode
positions: target entropy H (bits), expected acceptance b = sum_x min(p(x), q(x)) (p target,
q draft; Leviathan et al. 2023), the attention mass of the decode queries on the added span (the
mediator) and on key 0 (the sink).

**The four tests** (one Holm family, one-sided in the predicted direction, each value per triple):

* ``did_entropy``: d = [H(P,A0) - H(P,A1)] - [H(N,A0) - H(N,A1)] > 0 (masking a distractor lowers
  entropy more than masking relevant text);
* ``did_beta``: g = [b(P,A1) - b(P,A0)] - [b(N,A1) - b(N,A0)] > 0;
* ``h4b_forced``: H(P,A0) - H(N,A0) > 0 (the study's H4b on one continuation);
* ``dose``: the least-squares slope of D(lambda) = H(P,lambda) - H(N,lambda) over lambda = 0 (A1),
  0.25, 0.5, 1 (A0) > 0.

**Inference.** The unit is the triple, but triples that share a distractor text share its pull,
so they are not independent. Each test is a one-sample t test over the *per-distractor means* of
the per-triple values (t on G - 1 df for G distractors): the distractor is a random effect, each
distractor weighs the same, and the test is exact for normal values with a normal distractor effect
in a balanced design, whatever the share of variance between distractors (Donald & Lang 2007: with few
clusters, aggregate to the cluster and use t on G - 1 df). The estimate is the mean of the distractor means. Fewer than
:data:`MIN_DISTRACTORS` distractors, or distractor means all equal: not tested (inconclusive).

**Intervals and verdicts.** Holm (1979) over the four one-sided p-values
(:func:`lab.analysis.hypotheses.holm`); each interval's ends are one-sided bounds at
1 - alpha / 4 (Holm's first, Bonferroni step), so the interval is two-sided at
:data:`FAMILY_CI_LEVEL` = 1 - 2 alpha / 4. The rule is the study's
(:func:`lab.analysis.hypotheses.verdict`): ``supported`` when the Holm p < alpha with the predicted
sign and the interval's lower end above 0; ``not supported`` when the interval's upper end falls
short of the smallest effect of interest; else ``inconclusive``. One error control for both: a false
"supported" needs a one-sided test at alpha / 4 to err, a false "not supported" a one-sided bound at
1 - alpha / 4 to miss, each within the family-wise alpha. When a control fails every verdict reads
:data:`UNDECIDED` (the rule's own verdict is kept beside it).

**Controls** (a run whose controls fail decides nothing): the empty mask reproduces A0 within
:data:`EMPTY_MASK_TOL_BITS` on every triple; position only, H(P,A2) - H(N,A2) is equivalent to 0
within +-:data:`EQUIV_BITS` (two one-sided t tests on the distractor means at :data:`CONTROL_ALPHA`,
Schuirmann 1987); label swap, ``did_entropy`` on data with P and N exchanged in a random half of
the triples (:data:`N_SWAPS` draws, fixed seed) rejects at raw p < alpha in no more swaps than
Binomial(N_SWAPS, alpha) allows at :data:`LABEL_SWAP_P_THRESHOLD`; C+ (the decode queries blind to
the question) moves a twin's mean entropy by at least :data:`C_PLUS_MIN_BITS` on at least
:data:`C_PLUS_MIN_SHARE` of twins; manipulation, the mediator under A1 and the sink mass under the
``sink`` arm are 0 within :data:`MASS_ZERO_TOL` (the L0.5 and L0.25 mediator ratios to A0 are reported).

**Design version** :data:`lab.kinds.intervene.DESIGN` = 2 (recorded in every work directory and report). C+ is
a mask that must move any model that reads its prompt: the decode queries cannot attend to the question (every
key after the added span up to the last prompt token), the same kind of mask as A1 on text the continuation
was generated from. Masking key 0, the attention sink (Xiao et al. 2023), is not a control: a model can
give the sink much of its decode attention and not move its entropy when it is masked (the
Qwen2.5-Coder pair: 13 % of the attention there, under 0.05 bits on every twin), so it is the described
``sink`` arm (:class:`ArmMove`: how many twins it moves). ``docs/design.md`` says why design 1's C+,
the sink, was replaced.

**Secondary estimates** (reported, outside the family; 95 % intervals by resampling whole
distractors): the share of the P - N entropy gap that masking removes, mean(D(1) - D(0)) / mean(D(1));
within-pair mediation (Judd, Kenny & McClelland 2001; Montoya & Hayes 2017): the least-squares slope
of the P - N entropy gap at A0 on the P - N mediator gap at A0, the twins' mean mediator (centred) as
covariate, and the indirect share slope * mean(mediator gap) / mean(entropy gap).

**Power** (:func:`power_at`, :func:`required_triples`, :func:`power_table`): the noncentral t of the
same test at alpha / 4, one-sided, with the variance of a distractor mean
sd^2 (icc + (1 - icc) / k) for k triples a distractor; :data:`DESIGN_ICC` until a run measures it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

import numpy as np
from scipy import stats

from lab.analysis.effects import (CI_LEVEL, MeanInterval, cluster_bootstrap_ci, cluster_codes, cluster_means,
                                  mean_interval, one_way_icc, t_over_cluster_means)
from lab.analysis.hypotheses import ALPHA, N_RESAMPLES, judge
from lab.analysis.power import POWER
# The report's own types (lab.kinds.intervene): the analysis builds them, the writer and the page read them. A figure
# that could not be computed is NaN here and null in the file (the types say ``float | None`` for the file).
from lab.kinds.intervene import (Analysis, ArmMove, CPlusControl, DistractorRow, EmptyMaskControl, Estimate,
                                 LabelSwapControl, ManipulationControl, PositionOnlyControl, PowerRow, StatedTest)
from lab.verdicts import INCONCLUSIVE

VARIANTS = ("P", "N")
ARMS = ("A0", "empty", "A1", "L0.5", "L0.25", "sink", "C+", "A2")
DOSE = (("A1", 0.0), ("L0.25", 0.25), ("L0.5", 0.5), ("A0", 1.0))  # the dose test's arms and their lambda
TEST_NAMES = ("did_entropy", "did_beta", "h4b_forced", "dose")
FAMILY_SIZE = len(TEST_NAMES)
FAMILY_CI_LEVEL = 1 - 2 * ALPHA / FAMILY_SIZE  # each end a one-sided bound at 1 - ALPHA / 4
UNDECIDED = "undecided: controls failed"

# Smallest effects of interest. Entropy: a twentieth of a bit a decode token, one token in twenty of
# the continuation moving from certain to a coin flip between two tokens; smaller shifts of a mean over
# 24 tokens are one token's business, not the model's state. Beta: one point of expected acceptance;
# at beta 0.7 and gamma 4 it moves the expected tokens a verification round, (1 - beta^(gamma+1)) /
# (1 - beta) (Leviathan et al. 2023, eq. 1), by about 2 %, the smallest speed change worth reporting.
# Dose: a straight dose line that moves the P - N gap by the entropy effect from lambda 0 to 1.
SMALLEST_ENTROPY_BITS = 0.05
SMALLEST_BETA = 0.01
SMALLEST_DOSE_SLOPE = SMALLEST_ENTROPY_BITS
# Position-only equivalence bound: a P - N gap under A2 inside +-0.05 bits cannot by itself make an
# entropy effect of interest; a wider bound would let position alone fake one.
EQUIV_BITS = SMALLEST_ENTROPY_BITS
CONTROL_ALPHA = ALPHA  # TOST level of the position-only control (a 90 % interval inside the bound)
EMPTY_MASK_TOL_BITS = 1e-4  # the machinery with nothing masked is the plain forward, to float rounding (~1e-5 bits)
# C+ must move a twin by twice the entropy effect of interest: a mask that moves entropy less could not
# show that the arms can produce the effects the tests look for.
C_PLUS_MIN_BITS = 2 * SMALLEST_ENTROPY_BITS
C_PLUS_MIN_SHARE = 0.90  # a positive control that misses one twin in ten does not reliably move the model
# A masked key's softmax weight is 0 up to float rounding; 1e-4 of attention mass is far below what an
# unmasked span or sink receives.
MASS_ZERO_TOL = 1e-4
N_SWAPS = 1000  # label-swap draws; the rejecting count is Binomial(N_SWAPS, r) given the data
LABEL_SWAP_P_THRESHOLD = 1e-3  # the label swap fails when P(X >= count) < this, X ~ Binomial(N_SWAPS, alpha)
MIN_DISTRACTORS = 3  # a t over fewer distractor means has 1 df: its interval spans nearly everything
# Share of a per-triple value's variance between distractors, assumed by the power table until a run
# measures it (each test reports its own estimate, ``icc``).
DESIGN_ICC = 0.1

STATEMENTS = {
    "did_entropy": "Masking the added span lowers the poisoned twin's mean decode entropy more than the neutral "
                   "twin's: [H(P,A0) - H(P,A1)] - [H(N,A0) - H(N,A1)] > 0.",
    "did_beta": "Masking the added span raises the poisoned twin's expected acceptance more than the neutral "
                "twin's: [b(P,A1) - b(P,A0)] - [b(N,A1) - b(N,A0)] > 0.",
    "h4b_forced": "On the same continuation the poisoned twin's mean decode entropy exceeds the neutral twin's: "
                  "H(P,A0) - H(N,A0) > 0.",
    "dose": "The P - N entropy gap grows with the attention left to the span: the per-triple least-squares slope "
            "of H(P,lambda) - H(N,lambda) over lambda 0 (A1), 0.25, 0.5, 1 (A0) > 0.",
}
UNITS = {"did_entropy": "bits", "did_beta": "beta", "h4b_forced": "bits", "dose": "bits per unit lambda"}
SMALLEST = {"did_entropy": SMALLEST_ENTROPY_BITS, "did_beta": SMALLEST_BETA, "h4b_forced": SMALLEST_ENTROPY_BITS,
            "dose": SMALLEST_DOSE_SLOPE}
TABLES = ("entropy", "beta", "span_mass", "sink_mass")


def _finite(x: object) -> bool:
    try:
        return math.isfinite(x)  # type: ignore[arg-type]
    except TypeError:
        return False


@dataclass(frozen=True)
class TripleSummary:
    """One triple's per-twin, per-arm means over the decode positions.

    Attributes:
        question_id, category: The clean prompt's id and category.
        distractor: The poisoned twin's distractor label (the cluster of inference).
        entropy: ``(variant, arm) -> mean target entropy (bits)``, variants :data:`VARIANTS`, arms :data:`ARMS`.
        beta: The same keys -> mean expected acceptance sum_x min(p(x), q(x)).
        span_mass: The same keys -> mean attention mass of the decode queries on the added span (mediator).
        sink_mass: The same keys -> the same on key 0.
        empty_max_diff_bits: Max over both twins and decode positions of |H(empty) - H(A0)| (bits).

    Raises:
        ValueError: a table misses or adds a (variant, arm), or a value is not finite (names the triple).
    """

    question_id: str
    category: str
    distractor: str
    entropy: Mapping[tuple[str, str], float]
    beta: Mapping[tuple[str, str], float]
    span_mass: Mapping[tuple[str, str], float]
    sink_mass: Mapping[tuple[str, str], float]
    empty_max_diff_bits: float

    def __post_init__(self) -> None:
        keys = {(v, a) for v in VARIANTS for a in ARMS}
        for table in TABLES:
            got = getattr(self, table)
            if set(got) != keys:
                missing, extra = sorted(keys - set(got)), sorted(map(repr, set(got) - keys))
                raise ValueError(f"triple {self.question_id!r}: {table} "
                                 + (f"misses {missing}" if missing else f"has unknown keys {extra}"))
            bad = [k for k in sorted(got) if not _finite(got[k])]
            if bad:
                raise ValueError(f"triple {self.question_id!r}: {table}[{bad[0]}] = {got[bad[0]]!r} is not a finite "
                                 "number")
        if not (_finite(self.empty_max_diff_bits) and self.empty_max_diff_bits >= 0):
            raise ValueError(f"triple {self.question_id!r}: empty_max_diff_bits={self.empty_max_diff_bits!r} "
                             "must be finite and >= 0")


class InterventionTest(StatedTest):
    """One pre-stated test, judged: the report's :class:`lab.kinds.intervene.StatedTest` (NaN where the file holds
    null: not tested), as the study's judge reads it (:func:`lab.analysis.hypotheses.judge`)."""

    @property
    def effect(self) -> float:
        """The judge's name for ``estimate``."""
        return self.estimate

    @property
    def predicted_sign(self) -> int:
        """Every test predicts a positive estimate (one-sided)."""
        return 1


class InterventionAnalysis(Analysis):
    """Everything :func:`analyze_intervention` computes from the triples: the report's
    :class:`lab.kinds.intervene.Analysis` (its tests :class:`InterventionTest`), with what the report derives."""

    @property
    def controls(self) -> dict[str, bool]:
        """Each control's name and whether it passed."""
        return {"empty_mask": self.empty_mask.passed, "position_only": self.position_only.passed,
                "label_swap": self.label_swap.passed, "c_plus": self.c_plus.passed,
                "manipulation": self.manipulation.passed}

    @property
    def controls_passed(self) -> bool:
        return all(self.controls.values())

    decides = controls_passed  # whether the verdicts stand: every control passed

    @property
    def sd_by_test(self) -> dict[str, float]:
        """Each test's SD of per-triple values, for :func:`power_table` (from a pilot)."""
        return {t.name: t.sd_triples for t in self.tests}


# --------------------------------------------------------------------------- per-triple values


def _table(triples: Sequence[TripleSummary], table: str, variant: str, arm: str) -> np.ndarray:
    return np.array([getattr(t, table)[variant, arm] for t in triples], dtype=float)


def outcome_values(triples: Sequence[TripleSummary]) -> dict[str, np.ndarray]:
    """Each test's per-triple value (:data:`TEST_NAMES`, in order), shape ``(n_triples,)``.

    The dose slope is ``sum_l w_l D(l)`` with ``w_l = (l - mean) / sum (l - mean)^2`` over :data:`DOSE`.
    """
    def e(v, a):
        return _table(triples, "entropy", v, a)

    def b(v, a):
        return _table(triples, "beta", v, a)

    lam = np.array([x for _, x in DOSE])
    w = (lam - lam.mean()) / ((lam - lam.mean()) ** 2).sum()
    gaps = np.stack([e("P", a) - e("N", a) for a, _ in DOSE])  # (len(DOSE), n_triples)
    return {"did_entropy": (e("P", "A0") - e("P", "A1")) - (e("N", "A0") - e("N", "A1")),
            "did_beta": (b("P", "A1") - b("P", "A0")) - (b("N", "A1") - b("N", "A0")),
            "h4b_forced": e("P", "A0") - e("N", "A0"),
            "dose": w @ gaps}


def swap_labels(triple: TripleSummary) -> TripleSummary:
    """The triple with its P and N twins exchanged in every table."""
    other = {"P": "N", "N": "P"}

    def swapped(m):
        return {(other[v], a): x for (v, a), x in m.items()}

    return TripleSummary(triple.question_id, triple.category, triple.distractor, swapped(triple.entropy),
                         swapped(triple.beta), swapped(triple.span_mass), swapped(triple.sink_mass),
                         triple.empty_max_diff_bits)


# --------------------------------------------------------------------------- the cluster t


def _power_from_se(smallest: float, se: float, df: int, alpha: float) -> float:
    if not (df >= 1 and math.isfinite(se)):
        return math.nan
    if se == 0:
        return 1.0
    return float(stats.nct.sf(stats.t.isf(alpha / FAMILY_SIZE, df), df, smallest / se))


def cluster_test(name: str, values: np.ndarray, codes: np.ndarray, alpha: float) -> InterventionTest:
    """The one-sided t over distractor means for one test (not yet Holm-corrected or judged)."""
    n, g = int(values.size), int(codes.max()) + 1
    sd = float(values.std(ddof=1)) if n >= 2 else math.nan
    icc = one_way_icc(values, codes)
    smallest, level = SMALLEST[name], 1 - 2 * alpha / FAMILY_SIZE
    untested = dict(estimate=math.nan, ci_low=math.nan, ci_high=math.nan, p_value=math.nan, power=math.nan)
    base = dict(name=name, statement=STATEMENTS[name], unit=UNITS[name], ci_level=level, p_holm=math.nan,
                verdict=INCONCLUSIVE, rule_verdict=INCONCLUSIVE, n_triples=n, n_distractors=g,
                smallest_effect=smallest, sd_triples=sd, icc=icc)
    if g < MIN_DISTRACTORS:
        return InterventionTest(**base, **untested, note=f"{g} distractor(s): the test needs {MIN_DISTRACTORS}")
    mean, se, df = t_over_cluster_means(cluster_means(values, codes))
    if not se > 0:
        return InterventionTest(**base, **untested, note="every distractor mean is equal: no variance to test on")
    half = float(stats.t.isf(alpha / FAMILY_SIZE, df)) * se
    return InterventionTest(**base, estimate=float(mean), ci_low=float(mean - half), ci_high=float(mean + half),
                            p_value=float(stats.t.sf(mean / se, df)), power=_power_from_se(smallest, se, df, alpha),
                            note="")


def judge_unless_undecided(tests: Sequence[InterventionTest], alpha: float, decides: bool) -> list[InterventionTest]:
    """The study's judge (Holm over the one-sided p, then the verdict rule) as ``rule_verdict``; the
    report's ``verdict`` is that rule's unless a control failed (``decides`` False): :data:`UNDECIDED`."""
    return [replace(t, rule_verdict=t.verdict, verdict=t.verdict if decides else UNDECIDED) for t in judge(tests, alpha)]


# --------------------------------------------------------------------------- controls


def empty_mask_control(triples: Sequence[TripleSummary]) -> EmptyMaskControl:
    diffs = np.array([t.empty_max_diff_bits for t in triples])
    worst = int(np.argmax(diffs))
    return EmptyMaskControl(bool((diffs <= EMPTY_MASK_TOL_BITS).all()), EMPTY_MASK_TOL_BITS, float(diffs[worst]),
                            int((diffs > EMPTY_MASK_TOL_BITS).sum()), triples[worst].question_id)


def position_only_control(triples: Sequence[TripleSummary], *, bound: float = EQUIV_BITS,
                          alpha: float = CONTROL_ALPHA) -> PositionOnlyControl:
    """TOST (Schuirmann 1987) of H(P,A2) - H(N,A2) = 0 within +-``bound`` on the distractor means, t on G - 1 df."""
    codes, _ = cluster_codes([t.distractor for t in triples])
    a2 = _table(triples, "entropy", "P", "A2") - _table(triples, "entropy", "N", "A2")
    g = int(codes.max()) + 1
    if g < 2:
        inside = bool((np.abs(a2) < bound).all())
        return PositionOnlyControl(inside, bound, float(a2.mean()), float(a2.min()), float(a2.max()), math.nan, alpha,
                                   a2.size, g, note="one distractor: every triple's gap must lie inside the bound")
    mean, se, df = t_over_cluster_means(cluster_means(a2, codes))
    mean, se = float(mean), float(se)
    if se > 0:
        p = max(float(stats.t.sf((mean + bound) / se, df)), float(stats.t.cdf((mean - bound) / se, df)))
        half = float(stats.t.isf(alpha, df)) * se
    else:
        p, half = (0.0 if abs(mean) < bound else 1.0), 0.0
    return PositionOnlyControl(bool(p < alpha), bound, mean, mean - half, mean + half, p, alpha, a2.size, g)


def label_swap_control(triples: Sequence[TripleSummary], *, alpha: float = ALPHA, seed: int = 0,
                       n_swaps: int = N_SWAPS,
                       outcome: Callable[[Sequence[TripleSummary]], np.ndarray] | None = None) -> LabelSwapControl:
    """``did_entropy``'s test on copies of the data with P and N exchanged in a random half of the triples.

    Each triple's value after a swap is its value on :func:`swap_labels` (a per-triple statistic), so the
    draws reuse two evaluations. Given the data the rejecting count is Binomial(n_swaps, r), r the test's
    rejection rate over swaps; the control fails when the count is implausible for r = alpha.

    Args:
        outcome: Per-triple values of the statistic; default ``outcome_values(...)["did_entropy"]``.

    Raises:
        ValueError: ``n_swaps`` < 1.
    """
    if n_swaps < 1:
        raise ValueError(f"n_swaps={n_swaps!r} must be at least 1")
    outcome = outcome or (lambda ts: outcome_values(ts)["did_entropy"])
    codes, _ = cluster_codes([t.distractor for t in triples])
    max_rejecting = int(stats.binom.isf(LABEL_SWAP_P_THRESHOLD, n_swaps, alpha))
    if int(codes.max()) + 1 < MIN_DISTRACTORS:
        return LabelSwapControl(True, n_swaps, 0, 0.0, max_rejecting, alpha, LABEL_SWAP_P_THRESHOLD, seed,
                                note=f"fewer than {MIN_DISTRACTORS} distractors: the test does not run")
    kept, swapped = np.asarray(outcome(triples), float), np.asarray(outcome([swap_labels(t) for t in triples]), float)
    flip = np.random.default_rng(seed).random((n_swaps, kept.size)) < 0.5  # (n_swaps, n_triples)
    mean, se, df = t_over_cluster_means(cluster_means(np.where(flip, swapped, kept), codes))
    with np.errstate(divide="ignore", invalid="ignore"):
        p = stats.t.sf(mean / se, df)
    count = int(np.sum(p < alpha))
    return LabelSwapControl(count <= max_rejecting, n_swaps, count, count / n_swaps, max_rejecting, alpha,
                            LABEL_SWAP_P_THRESHOLD, seed)


def c_plus_control(triples: Sequence[TripleSummary]) -> CPlusControl:
    moved = np.concatenate([np.abs(_table(triples, "entropy", v, "C+") - _table(triples, "entropy", v, "A0"))
                            for v in VARIANTS])
    n_moved = int((moved >= C_PLUS_MIN_BITS).sum())
    share = n_moved / moved.size
    return CPlusControl(share >= C_PLUS_MIN_SHARE, C_PLUS_MIN_BITS, C_PLUS_MIN_SHARE, share, n_moved, int(moved.size))


def arm_move(triples: Sequence[TripleSummary], arm: str) -> ArmMove:
    """How ``arm`` moves each twin's mean entropy from A0 (the ``sink`` arm's line in the report)."""
    delta = np.concatenate([_table(triples, "entropy", v, arm) - _table(triples, "entropy", v, "A0")
                            for v in VARIANTS])
    n_moved = int((np.abs(delta) >= C_PLUS_MIN_BITS).sum())
    return ArmMove(arm, float(delta.mean()), C_PLUS_MIN_BITS, n_moved / delta.size, n_moved, int(delta.size))


def manipulation_control(triples: Sequence[TripleSummary]) -> ManipulationControl:
    def twins(table: str, arm: str) -> np.ndarray:
        return np.concatenate([_table(triples, table, v, arm) for v in VARIANTS])

    a0, a1, sink = twins("span_mass", "A0"), twins("span_mass", "A1"), twins("sink_mass", "sink")
    a0_mean = float(a0.mean())

    def ratio(arm: str) -> float:
        return float(twins("span_mass", arm).mean()) / a0_mean if a0_mean > 0 else math.nan

    return ManipulationControl(bool(a1.max() <= MASS_ZERO_TOL and sink.max() <= MASS_ZERO_TOL), MASS_ZERO_TOL,
                               a0_mean, float(a1.mean()), float(a1.max()), float(sink.max()), ratio("L0.5"),
                               ratio("L0.25"))


# --------------------------------------------------------------------------- secondary estimates


def _ratio(num: np.ndarray, den: np.ndarray) -> float:
    d = float(den.mean())
    return float(num.mean()) / d if d != 0 else math.nan


def mediation_fit(gap: np.ndarray, m_gap: np.ndarray, m_mean: np.ndarray) -> tuple[float, float]:
    """Within-pair mediation (Montoya & Hayes 2017): least squares of the outcome gap on the mediator gap
    and the centred mediator mean; returns (slope on the mediator gap, indirect share
    slope * mean(m_gap) / mean(gap)). NaN when the design is singular or the mean gap is 0."""
    if gap.size < 4:
        return math.nan, math.nan
    design = np.column_stack([np.ones_like(gap), m_gap, m_mean - m_mean.mean()])
    if np.linalg.matrix_rank(design) < 3:
        return math.nan, math.nan
    slope = float(np.linalg.lstsq(design, gap, rcond=None)[0][1])
    total = float(gap.mean())
    return slope, (slope * float(m_gap.mean()) / total if total != 0 else math.nan)


def secondary_estimates(triples: Sequence[TripleSummary], values: Mapping[str, np.ndarray], *, seed: int,
                        n_resamples: int) -> tuple[Estimate, Estimate, Estimate]:
    """The share removed by masking and the within-pair mediation, with distractor-bootstrap intervals."""
    removed, gap = values["did_entropy"], values["h4b_forced"]
    span = {v: _table(triples, "span_mass", v, "A0") for v in VARIANTS}
    m_gap, m_mean = span["P"] - span["N"], (span["P"] + span["N"]) / 2
    clusters = [t.distractor for t in triples]
    n = len(triples)

    def ci(stat: Callable[[np.ndarray], float]) -> tuple[float, float]:
        return cluster_bootstrap_ci(stat, clusters, method="percentile", seed=seed, n_resamples=n_resamples)

    def share(idx):
        return _ratio(removed[idx], gap[idx])

    def slope(idx):
        return mediation_fit(gap[idx], m_gap[idx], m_mean[idx])[0]

    def indirect(idx):
        return mediation_fit(gap[idx], m_gap[idx], m_mean[idx])[1]

    all_idx = np.arange(n)
    return (Estimate("proportion_removed", "Share of the P - N entropy gap at A0 that masking the span removes: "
                     "mean(D(1) - D(0)) / mean(D(1)).", share(all_idx), "ratio", *ci(share), CI_LEVEL, n),
            Estimate("mediation_slope", "Slope of the P - N entropy gap at A0 on the P - N mediator gap at A0 "
                     "(twins' mean mediator held fixed).", slope(all_idx), "bits per unit of attention mass",
                     *ci(slope), CI_LEVEL, n),
            Estimate("indirect_share", "Share of the P - N entropy gap at A0 carried by the mediator gap: "
                     "slope * mean(mediator gap) / mean(entropy gap).", indirect(all_idx), "ratio", *ci(indirect),
                     CI_LEVEL, n))


# --------------------------------------------------------------------------- means per arm (described)


@dataclass(frozen=True)
class ArmMeans:
    """Means over triples per (table, twin, arm) with normal 95 % intervals: the report's arm table and plot.

    Attributes:
        by_arm: ``(table, variant, arm) -> MeanInterval`` for every table of :data:`TABLES`, variant and arm.
        dose_gap: The P - N entropy gap per arm of :data:`DOSE`, in its order.
    """

    by_arm: Mapping[tuple[str, str, str], MeanInterval]
    dose_gap: tuple[MeanInterval, ...]


def arm_means(triples: Sequence[TripleSummary]) -> ArmMeans:
    """Each (table, twin, arm)'s mean over ``triples`` and the P - N entropy gap per dose arm, with intervals."""
    by_arm = {(table, v, a): mean_interval(_table(triples, table, v, a)) for table in TABLES for v in VARIANTS
              for a in ARMS}
    gaps = tuple(mean_interval(_table(triples, "entropy", "P", a) - _table(triples, "entropy", "N", a))
                 for a, _ in DOSE)
    return ArmMeans(by_arm, gaps)


# --------------------------------------------------------------------------- the analysis


def _check(triples: Sequence[TripleSummary], alpha: float) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha!r} must lie in (0, 1)")
    if len(triples) == 0:
        raise ValueError("no triples to analyse: the run has no finished main triple")
    seen: set[str] = set()
    for t in triples:
        if not isinstance(t, TripleSummary):
            raise ValueError(f"triples must be TripleSummary, got {type(t).__name__}")
        if t.question_id in seen:
            raise ValueError(f"triple {t.question_id!r} appears twice")
        seen.add(t.question_id)


def analyze_intervention(triples: Sequence[TripleSummary], *, alpha: float = ALPHA, seed: int = 0,
                         n_resamples: int = N_RESAMPLES, n_swaps: int = N_SWAPS) -> InterventionAnalysis:
    """The four tests, judged with Holm and the study's rule, the secondary estimates and the controls.

    Args:
        triples: One summary per triple (the pilot's are analysed apart).
        alpha: Family-wise error rate of the four tests.
        seed: Seed of the label swaps and the bootstraps.
        n_resamples: Bootstrap resamples of the secondary intervals (0: none, NaN intervals).
        n_swaps: Label-swap draws.

    Returns:
        An :class:`InterventionAnalysis`.

    Raises:
        ValueError: no triples, a question twice, alpha outside (0, 1), an entry not a TripleSummary, or
            ``n_swaps`` < 1.
    """
    _check(triples, alpha)
    triples = list(triples)
    codes, labels = cluster_codes([t.distractor for t in triples])
    values = outcome_values(triples)
    controls = dict(empty_mask=empty_mask_control(triples), position_only=position_only_control(triples),
                    label_swap=label_swap_control(triples, alpha=alpha, seed=seed, n_swaps=n_swaps),
                    c_plus=c_plus_control(triples), manipulation=manipulation_control(triples))
    decides = all(c.passed for c in controls.values())
    tests = judge_unless_undecided([cluster_test(name, values[name], codes, alpha) for name in TEST_NAMES], alpha,
                                   decides)
    sizes = np.bincount(codes)
    rows = [DistractorRow(label, int(sizes[i]), float(values["did_entropy"][codes == i].mean()),
                          float(values["h4b_forced"][codes == i].mean())) for i, label in enumerate(labels)]
    removed, slope, indirect = secondary_estimates(triples, values, seed=seed, n_resamples=n_resamples)
    return InterventionAnalysis(n_triples=len(triples), n_distractors=len(labels), **{t.name: t for t in tests},
                                proportion_removed=removed, mediation_slope=slope, indirect_share=indirect,
                                distractors=rows, **controls, sink=arm_move(triples, "sink"), alpha=alpha, seed=seed)


# --------------------------------------------------------------------------- power before the run


def power_at(sd: float, n_triples: int, n_distractors: int, smallest_effect: float, *, icc: float = DESIGN_ICC,
             alpha: float = ALPHA) -> float:
    """Power of one test (one-sided t on G - 1 df over distractor means, at alpha / 4) at ``smallest_effect``.

    Args:
        sd: SD of the per-triple values (a pilot's); icc: its share between distractors, in [0, 1].
        n_triples, n_distractors: Triples spread over G distractors (k = n / G each).

    Returns:
        ``nct.sf(t_{1-alpha/4, G-1}, G - 1, effect sqrt(G) / s)``, s = sd sqrt(icc + (1 - icc) / k);
        NaN with under 2 distractors or a NaN sd (a pilot too small to give one).

    Raises:
        ValueError: a negative sd, icc outside [0, 1], or fewer triples than distractors.
    """
    if sd < 0 or not 0 <= icc <= 1:
        raise ValueError(f"sd={sd!r} must be >= 0 and icc={icc!r} in [0, 1]")
    if n_triples < n_distractors:
        raise ValueError(f"n_triples={n_triples!r} must be at least n_distractors={n_distractors!r}")
    if n_distractors < 2 or not math.isfinite(sd):
        return math.nan
    s = sd * math.sqrt(icc + (1 - icc) * n_distractors / n_triples)
    return _power_from_se(smallest_effect, s / math.sqrt(n_distractors), n_distractors - 1, alpha)


def required_triples(sd: float, n_distractors: int, smallest_effect: float, *, icc: float = DESIGN_ICC,
                     alpha: float = ALPHA, power: float = POWER) -> int | None:
    """The fewest triples over ``n_distractors`` distractors at which :func:`power_at` reaches ``power``;
    None when even unlimited triples would not (the between-distractor variance caps it)."""
    ceiling = power_at(sd, 10 ** 9, n_distractors, smallest_effect, icc=icc, alpha=alpha)
    if not ceiling >= power:
        return None
    lo, hi = n_distractors - 1, n_distractors  # power(lo) < target (or lo below the design), power(hi) to find
    while power_at(sd, hi, n_distractors, smallest_effect, icc=icc, alpha=alpha) < power:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok = power_at(sd, mid, n_distractors, smallest_effect, icc=icc, alpha=alpha) >= power
        lo, hi = (lo, mid) if ok else (mid, hi)
    return hi


def power_table(sd_by_test: Mapping[str, float], n_triples: int, n_distractors: int, *, icc: float = DESIGN_ICC,
                alpha: float = ALPHA, power: float = POWER) -> tuple[PowerRow, ...]:
    """The power of each test at its smallest effect of interest, stated before the run.

    Args:
        sd_by_test: SD of each test's per-triple values (:attr:`InterventionAnalysis.sd_by_test` of a pilot).
        n_triples, n_distractors: The planned run.
        icc, alpha, power: As :func:`power_at`; ``power`` the target of ``required_triples``.

    Raises:
        ValueError: an unknown test name, or a bad sd / icc / size (:func:`power_at`).
    """
    unknown = sorted(set(sd_by_test) - set(TEST_NAMES))
    if unknown:
        raise ValueError(f"sd_by_test has unknown tests {unknown}; known: {list(TEST_NAMES)}")
    rows = []
    for name in (n for n in TEST_NAMES if n in sd_by_test):
        sd, smallest = float(sd_by_test[name]), SMALLEST[name]
        rows.append(PowerRow(name, smallest, UNITS[name], sd, icc, n_triples, n_distractors,
                             power_at(sd, n_triples, n_distractors, smallest, icc=icc, alpha=alpha), power,
                             power_at(sd, 10 ** 9, n_distractors, smallest, icc=icc, alpha=alpha)
                             if n_distractors >= 2 else math.nan,
                             required_triples(sd, n_distractors, smallest, icc=icc, alpha=alpha, power=power)))
    return tuple(rows)
