"""Statistics of the study: the pre-stated hypotheses, their tests, power and verdicts.

Pure functions on numbers (no model, no files, no Rich). Test statistics, p-values and
intervals come from :mod:`scipy.stats` where it has them; the lab's own math is effect
sizes (matched-pairs rank-biserial, eta-squared_H, epsilon^2, variance components), the
cluster-robust slope test, the jackknife and permutation tests of H6 / H6c, Holm's
step-down correction, a least-squares confidence band and the verdict rule.

The thesis: context quality shapes attention during prefill, attention
shapes the model's confidence (entropy) during decode, and confidence decides how
well speculative decoding works. The pre-stated hypotheses, one family:

A twin triple (a clean prompt, its poisoned and its neutral twin) asks one *question*
(:func:`lab.analysis.study.question_of`: ``twin_of``, else the prompt's own id), and the
tokens of a prompt share the prompt: each test infers on its independent unit.

* **H1** lower context health goes with higher mean decode entropy at equal prompt
  length: partial Spearman rho(health, mean entropy | log prompt tokens) < 0, all
  prompts; p cluster-robust by question (CR1 slope of the rank residuals, t on
  questions - 1 df), CI by a BCa bootstrap of whole questions. **H1c**: the same on
  clean prompts. Each carries a **placebo control**: prompts of half the questions get
  the health of a length-matched prompt of the other half
  (:func:`lab.analysis.placebo.placebo_check`); the same test on it must give p >=
  0.05, else the hypothesis is ``inconclusive``.
* **H2** higher draft entropy goes with lower acceptance, per drafted token:
  point-biserial r(draft entropy, accepted) < 0 over the tokens the target tested; p
  cluster-robust by prompt (CR1 slope of acceptance on entropy, t on prompts - 1 df), CI
  by a bootstrap of whole prompts (percentile); binned acceptance rates with Wilson
  intervals (``binomtest(...).proportion_ci``) describe the curve.
* **H3** acceptance differs by category: Kruskal-Wallis on per-prompt alpha
  (clean prompts), effect eta-squared_H = (H - k + 1) / (n - k) for k groups (Cohen
  2008, as given by Tomczak & Tomczak 2014), about 0 when the groups do not differ
  (unlike epsilon-squared = H / (n - 1), whose null expectation is (k - 1) / (n - 1));
  then pairwise Mann-Whitney U with Holm correction inside the pairwise family.
* **H4** poisoned twins have lower health (H4a) and higher mean entropy (H4b) than
  their neutral twins: paired Wilcoxon signed-rank on poisoned - neutral (one pair a
  question), effect the matched-pairs rank-biserial correlation (Kerby 2014).
* **H5** (subword commitment points, paired Wilcoxon over questions), **H6** (content
  moves alpha more than temperature: variance between prompts against variance between
  temperatures in a two-way decomposition) and **H6c** (category on the same subset,
  permutation of the labels), in :mod:`lab.analysis.claims`.

Every tested p-value (untested ones are NaN and do not count) is Holm-corrected
together (:func:`~lab.analysis.hypotheses.holm`; Holm 1979). Every interval is at
:data:`~lab.analysis.hypotheses.FAMILY_CI_LEVEL` = 1 - ALPHA / 9 (Bonferroni over the
family, Holm's first step), fixed in advance. The verdict rule
(:func:`~lab.analysis.hypotheses.verdict`) reads each effect and its interval in the
direction the hypothesis predicts (effects are stored and printed with their raw signs,
next to the predicted sign):

* ``supported``: Holm-corrected p < ALPHA, the effect has the predicted sign, and the
  interval (when it could be computed) lies entirely on that side of 0;
* ``not supported``: Holm-corrected p < ALPHA with the opposite sign, or the whole
  interval falls short of the smallest effect of interest in the predicted direction
  (the data rule out an effect of interest);
* ``inconclusive``: anything else, including too little data to test, and any test whose
  negative control rejects (H5's shuffled labels, H1's and H1c's placebo);
* ``untestable``: a precondition of the test failed, so no n would decide it (H1 and H1c
  where their context measure fails its validation on the model or drifts with length):
  not tested, with the reason, no p-value and outside the Holm family.

One error control for both verdicts: a false "supported" (true effect on the other side
of 0) needs the Holm test to err, a false "not supported" (true effect at least the
smallest of interest) needs the family-level interval to miss it; each holds at the
family-wise ALPHA = 0.05. Simulated nulls with the study's structure check every test's
size, and planted effects its power (``tests/statistical/test_hypothesis_size.py``).

Every test reports its power (:mod:`lab.analysis.power`): the smallest effect
detectable at 80 % power with its n at alpha / m; an inconclusive verdict's note
says whether it was underpowered and about how many prompts would settle it.

Module layout: :mod:`lab.analysis.hypotheses` (tests, Holm, verdict rule),
:mod:`lab.analysis.effects` (effect sizes, bootstrap, Wilson bins, fit band),
:mod:`lab.analysis.claims` (H5, H6, H6c), :mod:`lab.analysis.distractors` (H4 per distractor text,
secondary), :mod:`lab.analysis.placebo`, :mod:`lab.analysis.power`,
:mod:`lab.analysis.study` (:func:`~lab.analysis.study.analyze`). Nothing is re-exported here:
import each name from its module.
"""
