"""The conformance law test's size and power, on the fake engine (no server, no model).

Setting: two fixed logit vectors over V = 300 tokens, Zipf-like (logit = -s log rank + N(0,
0.3) noise, ranks permuted over the ids; s = 1.1, top token ~0.2 at T = 1, and s = 1.6, top
token ~0.4), a draft's logits = the target's + N(0, 1), and six settings: temperature 0.7
alone; top-k 20; temperature 0.7 with top-p 0.9; temperature 1.3 with min-p 0.05;
temperature 0.8 with top-k 40, top-p 0.95 and min-p 0.02; temperature 0.7 with top-k 50
and a draft. So a run is a family of m = 12 law tests (:func:`lab.conform.stats.law_test`),
Holm-corrected at ALPHA = 0.01 (:func:`~lab.conform.stats.holm_family`); each case draws
the n that :func:`~lab.conform.stats.samples_for_power` prescribes for TV = 0.05 at
ALPHA / m and power 0.9: n = 2,358 to 5,654 per case (51,243 draws a run on the llama.cpp
chain, 49,302 on the transformers chain). Both declared chains are run (llama.cpp's order
and transformers'/the lab's).

* SIZE: the correct :class:`~lab.conform.fake.FakeEngine`, R_SIZE = 300 seeded runs per
  chain. The family may fail in at most ``binom.isf(P_CHECK, R_SIZE, ALPHA)`` = 10 runs
  (3.3 %: the binomial slack at the check's own false-positive rate P_CHECK = 1e-3), and
  the 3,600 single tests may reject at ALPHA in at most ``binom.isf(P_CHECK, 3600,
  ALPHA)`` = 56. Measured: llama.cpp 4 / 300 families, 37 / 3,600 single tests;
  transformers 8 / 300 and 35 / 3,600. A longer run outside the tier, 3,000 families on
  the transformers chain: 1.27 % of families (standard error 0.18 %), single tests 1.12 %
  at 0.01 and 0.108 % at ALPHA / m = 0.083 %: Pearson's tail a little heavy at small
  expected counts, within 1.3 to 1.6 standard errors of the level; pooling at 10 or 20
  instead of 5, or Satterthwaite's variance correction, did not move it.
* POWER: each planted defect, R_POWER = 100 seeded runs per chain, the whole family at the
  same n; it must be rejected in >= 90 % of runs, with the setting that exposes it among
  the rejected: (a) top-p across temperature: "top-p" (T != 1 with top-p); (b) top-k keeps
  k + 1: "top-k" (its (k+1)-th token has mass 0.009 / 0.004, each draw of it an impossible
  token); (c) temperature ignored with a draft: "draft" (T != 1 with a draft); (d) accept
  when q >= p: "draft" (q differs from p; the emitted law is 0.29 / 0.50 from p in TV).
  Measured: 100 / 100 for every defect on both chains. Their distances at the exposing
  setting are far from the 0.05 the plans are sized for: TV 0.08 for (a), 0.21 to 0.22 for
  (c), 0.29 to 0.50 for (d); (b)'s 0.004 to 0.009 is mass on dropped tokens, which the
  exact check sees at once.
* NEGATIVE CONTROL, and samples_for_power checked by simulation: the correct engine's draws
  tested against a DIFFERENT law q, close to it: q sharpened so that the engine's law is
  exactly :func:`~lab.conform.stats.least_favourable` (q, TV), at n = samples_for_power(q,
  TV, ALPHA / m); R_CONTROL = 300 runs for each of the 12 llama.cpp-chain cases. The test
  must reject at the predicted power (~0.9), not always: each case within its two-sided
  binomial bounds at P_CHECK / 12, and the 3,600 rejections in all within 3.3 sd of the
  predicted total. Measured: 3,252 of 3,600 (0.903) against 3,240 predicted; per case
  0.86 to 0.93.

The seeds are fixed (each run's generator is seeded with its check and run number), so a
passing run stays passing; the stated rates are over the choice of seeds. 14 s on a 2-core
machine running another job.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from scipy.stats import binom

from lab.conform.chains import LLAMA_CPP, TRANSFORMERS, Chain, Settings, chain_probs
from lab.conform.fake import DEFECTS, FakeEngine
from lab.conform.stats import FamilyTest, holm_family, law_test, least_favourable, samples_for_power

pytestmark = pytest.mark.statistical

V = 300
TV = 0.05  # the distance every case is sized to detect
ALPHA = 0.01  # the family's level
POWER = 0.9
P_CHECK = 1e-3  # each check below fails a correct implementation with at most this probability
R_SIZE = 300
R_POWER = 100
R_CONTROL = 300
Z_CHECK = 3.29  # two-sided normal quantile at P_CHECK


def _zipf_logits(seed: int, exponent: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ranks = rng.permutation(V) + 1
    return (-exponent * np.log(ranks) + rng.normal(0.0, 0.3, V)).astype(np.float32)


LOGITS = {"zipf-1.1": _zipf_logits(1, 1.1), "zipf-1.6": _zipf_logits(2, 1.6)}
DRAFT_LOGITS = {name: (x + np.random.default_rng(9).normal(0.0, 1.0, V)).astype(np.float32)
                for name, x in LOGITS.items()}
SETTINGS = {  # name: (settings, with a draft)
    "temperature": (Settings(temperature=0.7), False),
    "top-k": (Settings(temperature=1.0, top_k=20), False),
    "top-p": (Settings(temperature=0.7, top_p=0.9), False),
    "min-p": (Settings(temperature=1.3, min_p=0.05), False),
    "combined": (Settings(temperature=0.8, top_k=40, top_p=0.95, min_p=0.02), False),
    "draft": (Settings(temperature=0.7, top_k=50), True),
}
CASES = [(logits, setting) for logits in LOGITS for setting in SETTINGS]
M = len(CASES)
EXPOSES = {"top_p_before_temperature": "top-p", "top_k_plus_one": "top-k",
           "draft_ignores_temperature": "draft", "accept_if_q_ge_p": "draft"}


@functools.cache
def _plans(chain: Chain) -> dict[tuple[str, str], tuple[np.ndarray, int]]:
    """Each case's reference law under ``chain`` and the n samples_for_power prescribes for it."""
    plans = {}
    for logits, setting in CASES:
        law = chain_probs(LOGITS[logits], chain, SETTINGS[setting][0])
        plans[(logits, setting)] = law, samples_for_power(law, TV, ALPHA / M, POWER).n
    return plans


def _run(engine: FakeEngine, seed: tuple[int, ...]) -> FamilyTest:
    """One conformance run: every case drawn at its planned n and law-tested, Holm across the family."""
    rng = np.random.default_rng(seed)
    p_values = {}
    for (logits, setting), (law, n) in _plans(engine.chain).items():
        settings, with_draft = SETTINGS[setting]
        tokens = engine.sample(LOGITS[logits], settings, n, rng, draft_logits=DRAFT_LOGITS[logits] if with_draft else None)
        p_values[f"{logits}/{setting}"] = law_test(np.bincount(tokens, minlength=V), law).p_value
    return holm_family(p_values, ALPHA)


@pytest.mark.parametrize("chain", [LLAMA_CPP, TRANSFORMERS], ids=lambda c: c.engine)
def test_size_correct_engine_passes_family_at_alpha(chain):
    """A correct engine fails the Holm family in at most ALPHA of runs, up to the binomial slack."""
    runs = [_run(FakeEngine(chain), (1, r)) for r in range(R_SIZE)]
    failed = sum(not run.passed for run in runs)
    single = sum(p <= ALPHA for run in runs for p in run.p_values)
    assert failed <= binom.isf(P_CHECK, R_SIZE, ALPHA), (
        f"{chain.engine}: family failed in {failed} / {R_SIZE} runs at alpha {ALPHA}")
    assert single <= binom.isf(P_CHECK, R_SIZE * M, ALPHA), (
        f"{chain.engine}: {single} / {R_SIZE * M} single tests rejected at {ALPHA}")


@pytest.mark.parametrize("chain", [LLAMA_CPP, TRANSFORMERS], ids=lambda c: c.engine)
@pytest.mark.parametrize("defect", DEFECTS)
def test_power_planted_defect_caught_in_ninety_percent_of_runs(defect, chain):
    """Each planted defect fails the family, its exposing setting rejected, in >= 90 % of runs."""
    runs = [_run(FakeEngine(chain, defect), (2, DEFECTS.index(defect), r)) for r in range(R_POWER)]
    caught = sum(not run.passed for run in runs)
    exposed = sum(any(name.endswith("/" + EXPOSES[defect]) for name in run.rejected) for run in runs)
    assert caught >= POWER * R_POWER and exposed >= POWER * R_POWER, (
        f"{defect} on {chain.engine}: family rejected in {caught} / {R_POWER} runs, "
        f"'{EXPOSES[defect]}' in {exposed}")


def _sharpened(law: np.ndarray, tv: float) -> np.ndarray:
    """A law q with least_favourable(q, tv) == law: mass tv moved back from the rest to a likely prefix A of
    ``law``, A chosen (nearest 1/2 first) so that A is also q's own prefix nearest 1/2."""
    order = np.argsort(-law, kind="stable")
    cum = np.cumsum(law[order])[:-1]
    for j in np.argsort(np.abs(cum - 0.5), kind="stable"):
        in_a = np.zeros(law.size, dtype=bool)
        in_a[order[: j + 1]] = True
        q = np.where(in_a, law * (1 + tv / cum[j]), law * (1 - tv / (1 - cum[j])))
        if np.allclose(least_favourable(q, tv), law, rtol=0, atol=1e-12):
            return q
    raise AssertionError("no prefix of the law round-trips")


def test_control_correct_engine_against_close_law_rejected_at_predicted_power():
    """Negative control: the test rejects a law TV away at the power samples_for_power predicts, not always."""
    engine = FakeEngine(LLAMA_CPP)
    rejected, predicted, rows = 0, 0.0, []
    for i, ((logits, setting), (law, _)) in enumerate(_plans(LLAMA_CPP).items()):
        close = _sharpened(law, TV)  # the engine's law is the plan's own alternative for ``close``
        plan = samples_for_power(close, TV, ALPHA / M, POWER)
        settings, with_draft = SETTINGS[setting]
        rng = np.random.default_rng((3, i))
        hits = 0
        for _ in range(R_CONTROL):
            tokens = engine.sample(LOGITS[logits], settings, plan.n, rng,
                                   draft_logits=DRAFT_LOGITS[logits] if with_draft else None)
            hits += law_test(np.bincount(tokens, minlength=V), close).p_value <= ALPHA / M
        low, high = binom.ppf(P_CHECK / (2 * M), R_CONTROL, plan.achieved), binom.isf(P_CHECK / (2 * M), R_CONTROL,
                                                                                       plan.achieved)
        rows.append(f"{logits}/{setting}: n={plan.n} predicted {plan.achieved:.3f} observed {hits / R_CONTROL:.3f}")
        assert low <= hits <= high, rows[-1]
        rejected, predicted = rejected + hits, predicted + R_CONTROL * plan.achieved
    spread = Z_CHECK * np.sqrt(predicted * (1 - predicted / (R_CONTROL * M)))
    assert abs(rejected - predicted) <= spread, f"{rejected} rejected, {predicted:.0f} predicted:\n" + "\n".join(rows)
