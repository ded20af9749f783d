"""Statistics of the study: the pre-stated hypotheses, their tests, power and verdicts.

Pure functions on numbers (no model, no files, no Rich). Every test statistic,
p-value and confidence interval comes from :mod:`scipy.stats`; the lab's own math
here is limited to effect sizes (matched-pairs rank-biserial, eta-squared_H),
Holm's step-down correction, a least-squares confidence band and the verdict rule.

The thesis: context quality shapes attention during prefill, attention
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

In the same family: **H1c** (H1 on clean prompts only, stated in
advance next to H1 on all prompts), **H5** (subword commitment points) and **H6**
(content moves acceptance more than temperature), both in
:mod:`lab.analysis.claims`. Every tested p-value (untested ones are NaN and do not
count) is Holm-corrected together (:func:`holm`; Holm 1979). The verdict rule
(:func:`verdict`) reads each effect and its CI in the direction the hypothesis
predicts (effects are stored and printed with their raw signs, next to the
predicted sign):

* ``supported``: corrected p < :data:`ALPHA`, the effect has the predicted sign,
  and the CI (when it could be computed) lies entirely on that side of 0;
* ``not supported``: corrected p < :data:`ALPHA` with the opposite sign, or the
  whole CI falls short of :data:`SMALLEST_EFFECT` in the predicted direction (the
  data rule out an effect of interest);
* ``inconclusive``: anything else, including too little data to test, and H5
  whenever its shuffled-label negative control rejects.

Every test reports its power (:mod:`lab.analysis.power`): the smallest effect
detectable at 80 % power with its n at alpha / m; an inconclusive verdict's note
says whether it was underpowered and about how many prompts would settle it.

Module layout: :mod:`lab.analysis.hypotheses` (tests, Holm, verdict rule),
:mod:`lab.analysis.effects` (effect sizes, bootstrap, Wilson bins, fit band),
:mod:`lab.analysis.claims` (H5, H6), :mod:`lab.analysis.power`,
:mod:`lab.analysis.study` (:func:`~lab.analysis.study.analyze`). Nothing is re-exported here:
import each name from its module.
"""
