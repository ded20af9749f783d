"""Statistics of the study: the four pre-stated hypotheses, their tests and verdicts.

Pure functions on numbers (no model, no files, no Rich). Every test statistic,
p-value and confidence interval comes from :mod:`scipy.stats`; the lab's own math
here is limited to effect sizes (matched-pairs rank-biserial, eta-squared_H),
Holm's step-down correction, a least-squares confidence band and the verdict rule.

The thesis (issue 5): context quality shapes attention during prefill, attention
shapes the model's confidence (entropy) during decode, and confidence decides how
well speculative decoding works. The pre-stated hypotheses, one family:

* **H1** lower context health goes with higher mean decode entropy:
  Spearman rho(health, mean entropy) < 0, over all prompts; CI by
  ``scipy.stats.bootstrap`` (BCa, paired resampling of prompts).
* **H2** higher draft entropy goes with lower acceptance, per drafted token:
  point-biserial r(draft entropy, accepted) < 0 (``scipy.stats.pointbiserialr``)
  over the tokens the target tested. Tokens of one prompt are not independent,
  so the CI is a *cluster* bootstrap over prompts (percentile); binned acceptance
  rates with Wilson intervals (``binomtest(...).proportion_ci``) describe the curve.
* **H3** acceptance differs by category: Kruskal-Wallis on per-prompt alpha
  (clean prompts), effect eta-squared_H = (H - k + 1) / (n - k) for k groups (Cohen
  2008, as given by Tomczak & Tomczak 2014), about 0 when the groups do not differ
  (unlike epsilon-squared = H / (n - 1), whose null expectation is (k - 1) / (n - 1));
  then pairwise Mann-Whitney U with Holm correction inside the pairwise family.
* **H4** poisoned twins have lower health (H4a) and higher mean entropy (H4b) than
  their clean twins: paired Wilcoxon signed-rank on poisoned - clean, effect the
  matched-pairs rank-biserial correlation (Kerby 2014).

The five p-values (H1, H2, H3, H4a, H4b) are Holm-corrected together
(:func:`holm`; Holm 1979). The verdict rule (:func:`verdict`) is, with the effect
and its CI oriented so that the predicted direction is positive:

* ``supported``: corrected p < :data:`ALPHA`, effect > 0, and the CI (when it
  could be computed) lies entirely above 0;
* ``not supported``: corrected p < :data:`ALPHA` with effect < 0 (the opposite
  direction), or the CI's upper end is below :data:`SMALLEST_EFFECT` (the data
  rule out an effect of interest in the predicted direction);
* ``inconclusive``: anything else, including too little data to test.
"""

from lab.analysis.effects import (CI_LEVEL, AcceptanceBin, LinearFit, binned_acceptance, bootstrap_ci,
                                  eta_squared_h, linear_fit_band, pearson_r, rank_biserial_paired)
from lab.analysis.hypotheses import (ALPHA, HYPOTHESES, INCONCLUSIVE, MIN_N, N_RESAMPLES, NOT_SUPPORTED,
                                     SMALLEST_EFFECT, SMALLEST_ETA_SQ, SUPPORTED, VERDICTS, TestResult,
                                     acceptance_entropy_test, category_test, correlation_test, holm, judge,
                                     paired_test, verdict)
from lab.analysis.study import StudyAnalysis, analyze

__all__ = [
    "ALPHA", "CI_LEVEL", "HYPOTHESES", "INCONCLUSIVE", "MIN_N", "N_RESAMPLES", "NOT_SUPPORTED", "SMALLEST_EFFECT",
    "SMALLEST_ETA_SQ", "SUPPORTED", "VERDICTS", "AcceptanceBin", "LinearFit", "StudyAnalysis", "TestResult",
    "acceptance_entropy_test", "analyze", "binned_acceptance", "bootstrap_ci", "category_test", "correlation_test",
    "eta_squared_h", "holm", "judge", "linear_fit_band", "paired_test", "pearson_r", "rank_biserial_paired",
    "verdict",
]
