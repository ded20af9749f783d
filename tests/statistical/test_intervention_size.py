"""Statistical tests: the four tests of ``lab intervene`` keep their size under a simulated null with the
design's structure, find a planted effect of the smallest size of interest at the power
:func:`lab.analysis.intervention.power_at` states, and the label-swap and position-only controls pass
under the null and fail on a planted breach.

Data: :func:`tests.simulated_study.simulate_triples`, 240 triples over 24 distractors in turn (the
issue's main run), with a question level, a twin effect, each twin's own response to masking, noise
per (twin, arm) and a random effect of the distractor on the poisoned twin's pull (the clustering the
tests must respect). Every count is compared with a binomial, never a proportion with a tolerance:

* size: an event (raw one-sided p < ALPHA; "supported"; a control failing) happens in ``count`` of N
  null studies; the check fails when ``P(X >= count) < P_THRESHOLD`` for X ~ Binomial(N, nominal).
  "Supported" needs a one-sided p below ALPHA / 4 (the interval's lower end above 0), so its nominal
  rate per test is ALPHA / 4 = 0.0125: with N = 400 up to 13 pass; the family's any-supported rate is
  ALPHA (up to 32 of 400).
* power: with the effect planted at each test's smallest effect of interest, "supported" in ``count`` of
  N studies; the check fails when ``count`` lies in either tail of Binomial(N, stated power) beyond
  P_THRESHOLD / 2 (the stated power from the simulation's own SDs and between-distractor share).

False-positive rate of each check: at most P_THRESHOLD = 0.1 %. Seeds are fixed, so a passing run stays
passing. The secondary intervals are not computed (``n_resamples = 0``: they decide nothing). Negative
controls: the did_entropy test with triples taken as independent (the distractor ignored) fails the
size check on the same null studies; a statistic blind to the P/N labels fails the label swap.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from lab.analysis.hypotheses import ALPHA, SUPPORTED
from lab.analysis.intervention import (CONTROL_ALPHA, EQUIV_BITS, FAMILY_SIZE, LABEL_SWAP_P_THRESHOLD, SMALLEST,
                                       SMALLEST_ENTROPY_BITS, TEST_NAMES, analyze_intervention, label_swap_control,
                                       outcome_values, position_only_control, power_at)
from tests.simulated_study import label_blind_masking, simulate_triples, simulated_triple_sd

pytestmark = pytest.mark.statistical

P_THRESHOLD = 1e-3  # per-check false-positive rate
N_TRIPLES, N_DISTRACTORS = 240, 24  # issue 37's main run
FEW_DISTRACTORS = 6  # the power prompt set's distractor texts (lab/data/prompts_power.jsonl)
N_NULL = 400  # null studies through analyze_intervention (about 40 ms each)
N_FEW = 200  # null studies over FEW_DISTRACTORS
N_POWER = 200  # planted studies
N_BOUNDARY = 300  # position-only studies at the equivalence bound (the control alone, about 12 ms each)
N_BREACH = 40  # studies with a planted breach of a control
MIN_FLAGGED = 0.8  # a control must flag a planted breach in at least this share (binomial lower tail)


def _size_ok(count: int, n: int, rate: float) -> tuple[bool, str]:
    tail = float(stats.binom.sf(count - 1, n, rate))
    return tail >= P_THRESHOLD, f"{count} of {n} at nominal {rate:g}: P(X >= {count}) = {tail:.2g}"


def _power_ok(count: int, n: int, rate: float) -> tuple[bool, str]:
    low, high = float(stats.binom.cdf(count, n, rate)), float(stats.binom.sf(count - 1, n, rate))
    return min(low, high) >= P_THRESHOLD / 2, f"{count} of {n} at stated power {rate:.3f}: tails {low:.2g}, {high:.2g}"


def _flagged_ok(count: int, n: int) -> tuple[bool, str]:
    tail = float(stats.binom.cdf(count, n, MIN_FLAGGED))
    return tail >= P_THRESHOLD, f"flagged {count} of {n}: P(X <= {count}) = {tail:.2g} at {MIN_FLAGGED}"


def _independent_p(triples) -> float:
    """did_entropy's p as a test that ignores the distractor would give: one-sided t over triples."""
    return float(stats.ttest_1samp(outcome_values(triples)["did_entropy"], 0.0, alternative="greater").pvalue)


def _run(seed: int, n_distractors: int = N_DISTRACTORS, **plant) -> dict:
    triples = simulate_triples(N_TRIPLES, n_distractors, seed=seed, **plant)
    a = analyze_intervention(triples, seed=seed, n_resamples=0)
    return {"p": {t.name: t.p_value for t in a.tests}, "rule": {t.name: t.rule_verdict for t in a.tests},
            "controls": a.controls, "p_independent": _independent_p(triples)}


@pytest.fixture(scope="module")
def null_runs():
    return [_run(seed) for seed in range(N_NULL)]


@pytest.fixture(scope="module")
def planted_runs():
    return [_run(50_000 + seed, effect_bits=SMALLEST_ENTROPY_BITS) for seed in range(N_POWER)]


@pytest.mark.slow
@pytest.mark.parametrize("name", TEST_NAMES)
def test_intervention_size_each_test_rejects_and_supports_at_most_nominal(null_runs, name):
    """Under the null each test's one-sided p falls below ALPHA in at most ALPHA of studies, and "supported"
    (Holm, the interval above 0) in at most ALPHA / 4."""
    ok, msg = _size_ok(sum(r["p"][name] < ALPHA for r in null_runs), len(null_runs), ALPHA)
    assert ok, f"{name} rejected (raw one-sided p < {ALPHA}) {msg}"
    ok, msg = _size_ok(sum(r["rule"][name] == SUPPORTED for r in null_runs), len(null_runs), ALPHA / FAMILY_SIZE)
    assert ok, f"{name} supported {msg}"


@pytest.mark.slow
def test_intervention_size_family_any_supported_at_most_alpha(null_runs):
    ok, msg = _size_ok(sum(SUPPORTED in r["rule"].values() for r in null_runs), len(null_runs), ALPHA)
    assert ok, f"some test supported in {msg}"


@pytest.mark.slow
def test_intervention_size_few_distractors_family_at_most_alpha():
    """Over the power set's six distractors (t on 5 df) the family still holds its size."""
    runs = [_run(90_000 + seed, FEW_DISTRACTORS) for seed in range(N_FEW)]
    ok, msg = _size_ok(sum(SUPPORTED in r["rule"].values() for r in runs), N_FEW, ALPHA)
    assert ok, f"{FEW_DISTRACTORS} distractors: some test supported in {msg}"


@pytest.mark.slow
def test_intervention_size_negative_control_triples_as_independent_fail(null_runs):
    """Negative control: did_entropy with the distractor ignored (a t over triples) fails the same size
    check on the same null studies, so the check can see a clustered unit."""
    ok, msg = _size_ok(sum(r["p_independent"] < ALPHA for r in null_runs), len(null_runs), ALPHA)
    assert not ok, f"triples-as-independent did_entropy passed the size check: {msg}"


@pytest.mark.slow
def test_intervention_controls_under_null_fail_at_most_nominal(null_runs):
    """Under the null the position-only control fails in at most CONTROL_ALPHA of studies (its TOST has
    nearly full power here), the label swap in at most LABEL_SWAP_P_THRESHOLD, the others never."""
    for name, rate in (("position_only", CONTROL_ALPHA), ("label_swap", LABEL_SWAP_P_THRESHOLD)):
        ok, msg = _size_ok(sum(not r["controls"][name] for r in null_runs), len(null_runs), rate)
        assert ok, f"{name} failed under the null in {msg}"
    for name in ("empty_mask", "c_plus", "manipulation"):
        assert all(r["controls"][name] for r in null_runs), name


@pytest.mark.slow
@pytest.mark.parametrize("name", TEST_NAMES)
def test_intervention_power_at_smallest_effect_as_stated(planted_runs, name):
    """At the smallest effect of interest (0.05 bits; 0.01 of beta) each test is supported in about the
    power power_at states for the simulation's SD and between-distractor share."""
    sd, icc = simulated_triple_sd()[name]
    stated = power_at(sd, N_TRIPLES, N_DISTRACTORS, SMALLEST[name], icc=icc)
    ok, msg = _power_ok(sum(r["rule"][name] == SUPPORTED for r in planted_runs), len(planted_runs), stated)
    assert ok, f"{name}: {msg}"


@pytest.mark.slow
def test_intervention_label_swap_passes_under_a_true_effect(planted_runs):
    """A true effect is no breach: swapped labels still give a null."""
    ok, msg = _size_ok(sum(not r["controls"]["label_swap"] for r in planted_runs), len(planted_runs),
                       LABEL_SWAP_P_THRESHOLD)
    assert ok, f"label swap failed under a true effect in {msg}"


@pytest.mark.slow
def test_intervention_label_swap_flags_a_label_blind_statistic():
    """Planted breach: a statistic that P and N trading places leaves unchanged, on data where masking moves
    both twins alike: the swaps keep rejecting and the control must fail."""
    flagged = sum(not label_swap_control(simulate_triples(N_TRIPLES, N_DISTRACTORS, seed=70_000 + seed), seed=seed,
                                         outcome=label_blind_masking).passed for seed in range(N_BREACH))
    ok, msg = _flagged_ok(flagged, N_BREACH)
    assert ok, f"label swap with a label-blind statistic: {msg}"


@pytest.mark.slow
def test_intervention_position_only_at_the_bound_passes_at_most_alpha():
    """TOST's size: with the twins' A2 gap exactly at EQUIV_BITS the control passes (declares equivalence)
    in at most CONTROL_ALPHA of studies; at twice the bound it fails in nearly all."""
    at_bound = sum(position_only_control(simulate_triples(N_TRIPLES, N_DISTRACTORS, seed=80_000 + seed,
                                                          a2_gap_bits=EQUIV_BITS)).passed for seed in range(N_BOUNDARY))
    ok, msg = _size_ok(at_bound, N_BOUNDARY, CONTROL_ALPHA)
    assert ok, f"position-only passed at its bound in {msg}"
    flagged = sum(not position_only_control(simulate_triples(N_TRIPLES, N_DISTRACTORS, seed=85_000 + seed,
                                                             a2_gap_bits=2 * EQUIV_BITS)).passed
                  for seed in range(N_BREACH))
    ok, msg = _flagged_ok(flagged, N_BREACH)
    assert ok, f"position-only at twice its bound: {msg}"


def test_simulated_triples_have_the_design_structure():
    """240 triples over 24 distractors of 10 each, every question once, every arm of both twins."""
    triples = simulate_triples(N_TRIPLES, N_DISTRACTORS, seed=1)
    sizes = np.unique([t.distractor for t in triples], return_counts=True)[1]
    assert len(triples) == N_TRIPLES and sizes.tolist() == [N_TRIPLES // N_DISTRACTORS] * N_DISTRACTORS
    assert len({t.question_id for t in triples}) == N_TRIPLES
