"""Statistical tests: H4's pooled test with the distractor as a random effect
(:func:`lab.analysis.distractors.distractor_table`) keeps its size when the distractor texts pull
their pairs, finds a planted effect at the power the noncentral t states, and a t over pairs that
ignores the texts does not keep its size on the same data (the negative control: why the random effect).

Data: :func:`tests.simulated_study.simulate_distractor_pairs`, poisoned - neutral differences with a
random effect of the text and pair noise of H4b's SD, in the two designs of the lab's prompt sets:
6 texts x 3 pairs (`make study`, ``lab/data/prompts.jsonl``) and 6 texts x 60 pairs (the power set,
``lab/data/prompts_power.jsonl``). Every count is compared with a binomial, never a proportion with a
tolerance:

* size: the pooled test rejects (two-sided p < ALPHA) in ``count`` of N null studies; the test is
  exact here (normal differences, normal text effect, balanced), so the check fails when ``count``
  lies in either tail of Binomial(N, ALPHA) beyond P_THRESHOLD / 2. With N = 1000: 28 to 76.
* power: with an effect planted at :data:`PLANTED_NCP` standard errors of the mean of the text means,
  the count of rejections must lie inside Binomial(N, stated power) by the same rule; the stated power
  is the noncentral t's, two-sided, on texts - 1 df.
* negative control: the one-sample t over pairs (texts ignored) on the same null studies with a large
  text effect rejects in more studies than Binomial(N, 2 ALPHA) allows at P_THRESHOLD.

False-positive rate of each check: at most P_THRESHOLD = 0.1 %. Seeds are fixed, so a passing run stays
passing.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from lab.analysis.distractors import distractor_table
from lab.analysis.hypotheses import ALPHA
from tests.simulated_study import H4_PAIR_SD, simulate_distractor_pairs

pytestmark = [pytest.mark.statistical, pytest.mark.slow]

P_THRESHOLD = 1e-3  # per-check false-positive rate
N_STUDIES = 1000  # simulated studies per check (a table costs about 1 ms)
DESIGNS = {"make-study": (6, 3), "power-set": (6, 60)}  # (texts, pairs a text) of the lab's prompt sets
# A text's pull as large as the pair-to-pair spread (half the variance between texts): the two
# filler texts of the study (one repeated sentence, a list of numbers) are unlike the prose ones.
LARGE_TEXT_SD = H4_PAIR_SD
TEXT_SDS = (0.0, LARGE_TEXT_SD)
PLANTED_NCP = 3.0  # the planted mean in standard errors of the mean of text means (power about 0.7 on 5 df)
FAR_ABOVE = 2 * ALPHA  # the negative control must reject beyond twice the nominal rate


def _two_tailed_ok(count: int, n: int, rate: float) -> tuple[bool, str]:
    low, high = float(stats.binom.cdf(count, n, rate)), float(stats.binom.sf(count - 1, n, rate))
    return min(low, high) >= P_THRESHOLD / 2, f"{count} of {n} at rate {rate:.3f}: tails {low:.2g}, {high:.2g}"


def _pooled_p(d: np.ndarray, labels: list[str]) -> float:
    return distractor_table(d, labels, name="H4b", measure="mean_entropy_bits", predicted_sign=1).pooled.p_value


def _se_of_mean(texts: int, pairs_each: int, text_sd: float) -> float:
    """SD of the mean of the text means: each text mean has variance text_sd^2 + pair_sd^2 / pairs_each."""
    return math.sqrt((text_sd ** 2 + H4_PAIR_SD ** 2 / pairs_each) / texts)


def _stated_power(texts: int) -> float:
    df, crit = texts - 1, float(stats.t.isf(ALPHA / 2, texts - 1))
    return float(stats.nct.sf(crit, df, PLANTED_NCP) + stats.nct.cdf(-crit, df, PLANTED_NCP))


def _seed(design: str, text_sd: float, i: int) -> int:
    return 10_000 * list(DESIGNS).index(design) + 100_000 * TEXT_SDS.index(text_sd) + i


@pytest.fixture(scope="module")
def null_runs() -> dict[tuple[str, float], list[tuple[float, float]]]:
    """Per (design, text SD): N_STUDIES null studies' (pooled p, p of the t over pairs)."""
    out = {}
    for design, (texts, each) in DESIGNS.items():
        for sd in TEXT_SDS:
            runs = []
            for i in range(N_STUDIES):
                d, labels = simulate_distractor_pairs(texts, each, seed=_seed(design, sd, i), distractor_sd=sd)
                runs.append((_pooled_p(d, labels), float(stats.ttest_1samp(d, 0.0).pvalue)))
            out[design, sd] = runs
    return out


@pytest.mark.parametrize("text_sd", TEXT_SDS, ids=["no-text-effect", "large-text-effect"])
@pytest.mark.parametrize("design", DESIGNS)
def test_pooled_test_null_with_text_effect_rejects_at_nominal(null_runs, design, text_sd):
    """Under no effect, with or without a random effect of the text, the pooled t rejects at about ALPHA."""
    count = sum(p < ALPHA for p, _ in null_runs[design, text_sd])
    ok, msg = _two_tailed_ok(count, N_STUDIES, ALPHA)
    assert ok, f"{design}, text SD {text_sd:.3f}: pooled test rejected {msg}"


@pytest.mark.parametrize("design", DESIGNS)
def test_pooled_test_planted_effect_detected_at_stated_power(design):
    """An effect of PLANTED_NCP standard errors, with the large text effect, is found at the noncentral t's power."""
    texts, each = DESIGNS[design]
    effect = PLANTED_NCP * _se_of_mean(texts, each, LARGE_TEXT_SD)
    count = 0
    for i in range(N_STUDIES):
        d, labels = simulate_distractor_pairs(texts, each, seed=500_000 + i, distractor_sd=LARGE_TEXT_SD,
                                              effect=effect)
        count += _pooled_p(d, labels) < ALPHA
    ok, msg = _two_tailed_ok(count, N_STUDIES, _stated_power(texts))
    assert ok, f"{design}, planted {effect:.3f} bits: pooled test detected {msg}"


@pytest.mark.parametrize("design", DESIGNS)
def test_pairs_as_independent_large_text_effect_rejects_far_above_nominal(null_runs, design):
    """Negative control: on the same null studies a t over pairs that ignores the texts rejects beyond
    twice ALPHA, so the size check above can see a test that treats the texts as fixed."""
    count = sum(p < ALPHA for _, p in null_runs[design, LARGE_TEXT_SD])
    tail = float(stats.binom.sf(count - 1, N_STUDIES, FAR_ABOVE))
    assert tail < P_THRESHOLD, (f"{design}: pairs-as-independent t rejected {count} of {N_STUDIES}, "
                                f"P(X >= {count}) = {tail:.2g} at {FAR_ABOVE:g}: not far above nominal")
