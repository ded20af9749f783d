"""summary.md of the study: the experiment log a user reads (hypotheses, rule, verdicts, power, figures).

Consumes :class:`lab.study.StudyResult`; computes no statistics (power figures come
from :mod:`lab.analysis.power` via each test's ``details``).
"""

from __future__ import annotations

import math
from typing import Any

from lab.analysis.claims import SMALLEST_VARIANCE_GAP
from lab.analysis.distractors import DistractorTable
from lab.analysis.length_drift import MIN_GROUP, LengthDrift
from lab.analysis.hypotheses import ALPHA, FAMILY_CI_LEVEL, SMALLEST_EFFECT, SMALLEST_ETA_SQ, TestResult
from lab.numbers import MISSING, effect_text, p_text
from lab.render.markdown import md_table
from lab.study.run import StudyResult
from lab.study.work import prompts_display
from lab.verdicts import INCONCLUSIVE

FIGURES = {
    "health_vs_entropy.png": "H1's context measure, lookback_heads (x: how much the decode reads the twin's added "
                             "text, for its length), against the mean decode entropy in bits (y), one dot per twin "
                             "(poisoned and neutral marked apart; clean prompts have no context span), with the "
                             "least-squares line and its 95% confidence band for the mean. H1 predicts a falling "
                             "trend over all dots, H1c over the neutral dots alone.",
    "acceptance_vs_draft_entropy.png": "Acceptance rate of drafted tokens (y) in quantile bins of the draft's "
                                       "entropy in bits (x), each with its Wilson 95% interval; the dashed line is "
                                       "the overall alpha. H2 predicts a falling curve.",
    "category_boxplots.png": "Per-prompt alpha (left) and mean decode entropy (right) by category, clean prompts. "
                             "H3 asks whether the alpha boxes differ.",
    "clean_vs_poisoned.png": "Each twin triple as a line from its clean prompt through its neutral twin to its "
                             "poisoned twin (neutral and poisoned of the same length): context health (left) and "
                             "mean decode entropy (right); red lines rise from neutral to poisoned, blue lines fall, "
                             "grey dashed lines are tied (difference 0), counted in the legend. H4a predicts the "
                             "neutral-to-poisoned step falling on the left, H4b rising on the right.",
}

# The figures whose points are prompts, also written as SVG with each point a link to its prompt's row.
LINKED_FIGURES = ("health_vs_entropy.svg", "category_boxplots.svg", "clean_vs_poisoned.svg")
assert {n[:-4] for n in LINKED_FIGURES} <= {n[:-4] for n in FIGURES}

_SIGN_WORD = {1: "> 0", -1: "< 0"}


def _ci_text(t: TestResult) -> str:
    if math.isfinite(t.ci_low) and math.isfinite(t.ci_high):
        return f"{t.ci_level:.1%} CI {effect_text(t.ci_low)} to {effect_text(t.ci_high)}"
    return "no CI (the bootstrap had too few distinct resamples)"


def context_measure_lines(cm: dict[str, Any]) -> list[str]:
    """The set-up bullet of H1's context measure: what it is, the file read and its validity record."""
    if not cm:
        return []
    verdicts = "; ".join(f"{line}" for line in cm.get("verdicts", {}).values()) or "no saved verdict"
    unmeasurable = cm.get("unmeasurable")
    gate = ("it passed the bar on the validation set, so H1 and H1c are tested" if not unmeasurable else
            "**H1 and H1c are untestable on this model**: its validation verdict fails the bar"
            if cm.get("verdicts", {}).get("validation") else f"**H1 and H1c are untestable on this model**: {unmeasurable}")
    return [f"- H1's context measure: `{cm.get('measure', '?')}` (`lab.health.context_validity`: the decode's "
            "Lookback-Lens ratio on a twin's added text over the model's fitted heads, less its length line; a "
            f"clean prompt has no context span and no value), from `{cm.get('file')}`. Validity record: {verdicts}. "
            f"{gate[0].upper()}{gate[1:]}."]


def placebo_line(p: dict[str, Any], verdict: str = INCONCLUSIVE) -> str:
    """H1's placebo control in words: its partial rho, p, tolerance and whether it passed (a failure beside the
    test's ``verdict``, inconclusive unless the test was untestable anyway)."""
    if p.get("passes") is None:
        return f"placebo control: not run (too few prompts: {p.get('n', 0)})."
    state = "passed" if p["passes"] else f"FAILED: the verdict is {verdict}"
    return (f"placebo control (each of {p['n']} prompts given the lookback_heads of a length-matched prompt of "
            f"another question): partial rho = {effect_text(p['rho'])}, p = {p_text(p['p_value'])}; it must stay "
            f"at p >= {p['tolerance']:g}: {state}.")


def test_line(t: TestResult) -> str:
    """One sentence with a test's numbers and verdict (summary.md and the console).

    Effects and CIs are printed with their raw signs, next to the sign the
    hypothesis predicts, so the verdict rule can be read off directly.
    """
    if not math.isfinite(t.p_value):
        return f"**{t.name}: {t.verdict}** (not tested: {t.note}; n = {t.n})"
    return (f"**{t.name}: {t.verdict}**: {t.effect_name} = {effect_text(t.effect)} (predicted "
            f"{_SIGN_WORD[t.predicted_sign]}; {_ci_text(t)}), p = {p_text(t.p_value)}, "
            f"Holm-corrected p = {p_text(t.p_holm)}, n = {t.n}" + (f"; {t.note}" if t.note else ""))


def _power_row(t: TestResult) -> str:
    pw = t.details.get("power") or {}
    md = pw.get("min_detectable", math.nan)
    if t.untestable:  # no n settles it: its measure does not read what it names on this model
        return f"| {t.name} | {t.n} | {MISSING} | {MISSING} | {t.smallest_effect:g} | untestable: {t.untestable} |"
    if not isinstance(md, float) or not math.isfinite(md):
        return f"| {t.name} | {t.n} | {MISSING} | {MISSING} | {t.smallest_effect:g} | too little data |"
    state = "underpowered" if pw.get("underpowered") else "adequate"
    return (f"| {t.name} | {pw['n']} {pw['unit']} | {pw['alpha']:.3g} | {md:.3g} | {t.smallest_effect:g} | "
            f"{state}; {pw['n_needed']} {pw['unit']} detect {t.smallest_effect:g} |")


def distractor_lines(tables: dict[str, DistractorTable]) -> list[str]:
    """H4a's and H4b's poisoned - neutral per distractor text and pooled (the distractor a random effect);
    nothing when no pair names its text."""
    if not any(t.rows for t in tables.values()):
        return []
    lines = ["", "### H4a and H4b per distractor text (secondary)", "",
             "Poisoned - neutral per pair, grouped by the poisoned twin's distractor text. The pooled row takes the "
             "texts as a sample (the distractor a random effect): a one-sample t over the per-text means, t on "
             "texts - 1 df, two-sided, each text weighing the same. It is secondary: outside the Holm family, it "
             "changes no verdict above."]
    for t in tables.values():
        p = t.pooled
        if math.isfinite(p.p_value):
            test = (f"t({p.df}) = {effect_text(p.t)}, p = {p_text(p.p_value)}; {p.ci_level:.0%} CI "
                    f"{effect_text(p.ci_low)} to {effect_text(p.ci_high)}; share between texts {effect_text(p.icc, 2)}")
        else:
            test = f"not tested: {p.note}"
        lines += ["", f"{t.name} ({t.measure}, predicted {_SIGN_WORD[t.predicted_sign]}):", "",
                  *md_table("distractor | pairs | mean poisoned - neutral | SD | test")]
        lines += [f"| {r.distractor} | {r.n_pairs} | {effect_text(r.mean_difference)} | {effect_text(r.sd_difference)} | |"
                  for r in t.rows]
        lines.append(f"| pooled, distractor random | {p.n_pairs} in {p.n_distractors} texts | {effect_text(p.estimate)} "
                     f"| | {test} |")
        if t.n_unlabelled:
            lines += ["", f"{t.n_unlabelled} pairs name no distractor text and are left out."]
    return lines


def drift_lines(drift: LengthDrift | None) -> list[str]:
    """Context health's Spearman rho with prompt length within each variant and each category."""
    if drift is None or not drift.rows:
        return []
    lines = ["", "### Context health against prompt length, within each variant and category", "",
             f"H1 and H1c partial out one length trend over all prompts; a measure that drifts differently "
             f"within a kind of prompt is not read. A group drifts when its whole {drift.level:.1%} interval "
             f"(Fisher z, Bonferroni over the judged groups) lies beyond |rho| {drift.bar:g}; groups under "
             f"{MIN_GROUP} prompts are shown, not judged.", "",
             *md_table("group | prompts | rho | interval |", [
                 (f"{r.kind} {r.group}", r.n, effect_text(r.rho),
                  f"{effect_text(r.ci_low)} to {effect_text(r.ci_high)}" if r.judged else "not judged",
                  "**drifts**" if r.drifts else "") for r in drift.rows])]
    reason = drift.reason()
    lines += ["", f"H1 and H1c are untestable here: {reason}." if reason else "No judged group drifts."]
    return lines


def summary_markdown(result: StudyResult, study: dict[str, Any]) -> str:
    """The experiment log a user reads: hypotheses, rule, verdicts with numbers, power, figures."""
    a, plan = result.analysis, result.plan
    s = plan.settings
    env = study["environment"]
    m = sum(math.isfinite(t.p_value) for t in a.tests)
    total = len(result.per_prompt) + len(result.missing)
    incomplete = (f" — INCOMPLETE: results for {len(result.per_prompt)} of {total} prompts"
                  if result.missing else "")  # on the first line, where a reader cannot miss it
    lines = [
        f"# Study: {s['model']} with draft {s['draft']}{incomplete}",
        "",
        "The lab's thesis: context quality shapes attention during prefill, attention shapes the model's "
        "confidence (entropy) during decode, and confidence decides how well speculative decoding works.",
        "",
        "## Set-up",
        "",
        f"- Prompts: {study['prompts']['n_prompts']} ({', '.join(f'{k} {v}' for k, v in study['prompts']['by_category'].items())}),"
        f" of which {study['prompts']['n_poisoned']} poisoned and {study['prompts'].get('n_neutral', 0)} neutral twins;"
        f" file `{prompts_display(s['prompts_file'])}`.",
        f"- Decoding: sampling at temperature {s['temperature']} (no top-k/top-p), seed {s['seed']} (each prompt's "
        f"seed derived from it and the prompt id), max_new_tokens {s['max_new_tokens']}; speculative decoding "
        f"with gamma {s['gamma']}, so alpha is the probabilistic acceptance rate (Leviathan et al. 2023). "
        f"H6 subset: {len(s.get('temperature_subset', []))} clean prompts also decoded speculatively at "
        f"temperatures {', '.join(f'{t:g}' for t in s.get('design_temperatures', []))}.",
        f"- Context health: `{s.get('health_measure', '?')}` (`lab.health.graded.graded_health`, the candidate "
        "`lab calibrate-health` chose on the calibration prompts"
        + (f"; read against the model's clean length reference, sha256 {s['length_reference_sha256'][:12]}"
           if s.get("length_reference_sha256") else "")
        + "); every candidate's value and the content length are in per_prompt.csv (`health_*`, "
        "`n_content_tokens`), and the count-based score as `content_sink_health`. H4a reads it.",
        *context_measure_lines(study.get("context_measure") or {}),
        f"- Model: {s['model']} on {s['device']} ({s['dtype']}"
        + (f", {s['weights']} weights" if s.get("weights") else "") + f"); draft `{s['draft']}`"
        + (f" ({s['draft_weights']} weights)" if s.get("draft_weights") else "") + ".",
        f"- Wall time: {study['timing']['wall_s_total']:.1f} s for this run "
        f"({study['timing']['n_resumed']} prompts resumed or merged from earlier runs; "
        f"{study['timing']['compute_s_prompts']:.1f} s of per-prompt compute in all).",
        f"- Versions: {', '.join(f'{k} {v}' for k, v in env['libraries'].items() if v)}; Python {env['python']}.",
    ]
    if result.merged_from:
        lines.append(f"- Merged from {len(result.merged_from)} shard work directories: "
                     + ", ".join(f"`{d}`" for d in result.merged_from) + ".")
    if result.missing:
        lines.append(f"- **{len(result.missing)} prompts of the plan have no finished result and are left out:** "
                     + ", ".join(result.missing[:20]) + (" ..." if len(result.missing) > 20 else "") + ".")
    lines += ["", "## Pre-stated hypotheses and the verdict rule", ""]
    for t in a.tests:
        lines.append(f"- **{t.name}**: {t.hypothesis} Test: {t.test}.")
    lines += [
        "",
        f"The {m} tested p-values are Holm-corrected together (untested hypotheses do not count). Effects are "
        f"printed with their raw signs beside the sign each hypothesis predicts; every interval is at "
        f"{FAMILY_CI_LEVEL:.2%} (1 - {ALPHA} / the family's size: Bonferroni over the family), so both verdicts "
        f"below hold at the family-wise {ALPHA}. The rule reads them in the predicted direction: **supported** if "
        f"corrected p < {ALPHA}, the effect has the predicted sign and its interval lies entirely on that side of "
        f"0; **not supported** if corrected p < {ALPHA} with the opposite sign, or the whole interval falls short "
        f"of the smallest effect of interest in the predicted direction ({SMALLEST_EFFECT} for correlations and "
        f"rank-biserial r, {SMALLEST_ETA_SQ} for eta^2 and epsilon^2, {SMALLEST_VARIANCE_GAP:g} alpha^2 for H6's "
        f"variance gap); **inconclusive** otherwise (including too little data). A test whose negative control "
        f"rejects is inconclusive: H5's (labels shuffled within each prompt) and H1's and H1c's placebo (each "
        f"prompt given the lookback_heads of a length-matched prompt of another question). A test whose "
        f"precondition fails is **untestable**, with the reason, and not tested (no p-value, outside the Holm "
        f"family): H1 and H1c where their context measure fails its validation on the model or drifts with length.",
        "",
        "## Verdicts",
        "",
    ]
    lines += [f"- {test_line(t)}" for t in a.tests]
    h2, h5, h6 = a.test("H2"), a.test("H5"), a.test("H6")
    lines += [
        "",
        "Notes: H2 counts only drafted tokens the target tested "
        f"({h2.details.get('n_accepted', 'none')} accepted of {h2.n}, from {h2.details.get('n_clusters', MISSING)} "
        "prompts); its p-value is cluster-robust by prompt and its CI resamples whole prompts (scipy's p taking "
        f"tokens as independent: {p_text(h2.details.get('p_independent_tokens', math.nan))}). H3 uses clean prompts "
        "only; H1 uses the twins (the prompts with a context span), H1c the neutral twins only; a twin triple "
        "shares its question, and H1, H1c and H5 infer on questions (cluster-robust p, intervals resampling whole questions).",
    ]
    lines += ["", "Length held fixed (a context measure may drift with length, and the poisoned twins are the "
              "longest prompts): H1 and H1c are partial Spearman correlations given log prompt tokens; H4a and H4b "
              "compare each poisoned twin with its neutral twin of the same added length (relevant, harmless "
              "text). The unadjusted figures, beside them:"]
    for t in (a.test("H1"), a.test("H1c")):
        d = t.details
        if "unadjusted_rho" in d:
            lines.append(f"- {t.name} unadjusted: Spearman rho = {effect_text(d['unadjusted_rho'])}, "
                         f"p = {p_text(d['unadjusted_p'])}; lookback_heads' rho with length {effect_text(d['x_length_rho'])}, "
                         f"entropy's {effect_text(d['y_length_rho'])}.")
        if d.get("placebo"):
            lines.append(f"- {t.name} {placebo_line(d['placebo'], t.verdict)}")
    for t in (a.test("H4a"), a.test("H4b")):
        d = t.details.get("vs_clean")
        if d:
            lines.append(f"- {t.name} unadjusted (poisoned - clean, the clean twin shorter): rank-biserial r = "
                         f"{effect_text(d['effect'])}, p = {p_text(d['p_value'])}, n = {d['n']} pairs.")
    if "control_p" in h5.details:
        lines.append(f"H5 negative control (shuffled labels): r = {effect_text(h5.details['control_r'])}, "
                     f"p = {p_text(h5.details['control_p'])} ({'rejected' if h5.details['control_rejects'] else 'not rejected'}).")
    if "var_prompt" in h6.details:
        d = h6.details
        lines.append(f"H6: variance of alpha between prompts {effect_text(d['var_prompt'], 4)} "
                     f"({effect_text(d['share_prompt'])} of the total), between temperatures "
                     f"{effect_text(d['var_temperature'], 4)} ({effect_text(d['share_temperature'])}), run-to-run "
                     f"(interaction) {effect_text(d['var_error'], 4)}; mean alpha by temperature "
                     + ", ".join(effect_text(x) for x in d["mean_alpha_by_temperature"]) + ".")
    groups = a.test("H6c").details.get("groups") or {}
    if groups:
        lines.append("H6c: mean alpha over the temperatures by category: "
                     + ", ".join(f"{k} {effect_text(v['mean_alpha'])} (n {v['n']})" for k, v in groups.items()) + ".")
    pw = a.test("H3").details.get("pairwise") or []
    sig = [r for r in pw if r["p_holm"] < ALPHA]
    if pw:
        lines += ["", f"H3 pairwise Mann-Whitney (Holm within {len(pw)} pairs): "
                  + ("; ".join(f"{r['a']} vs {r['b']}: r = {r['rank_biserial_r']:.2f}, p(Holm) = {p_text(r['p_holm'])}"
                               for r in sig) if sig else "no pair differs at the corrected level") + "."]
    lines += distractor_lines(a.distractor_tables)
    lines += drift_lines(a.length_drift)
    lines += ["", "## What the study could detect", "",
              f"Smallest effect detectable at 80% power, two-sided at alpha / {max(m, 1)} (Holm's strictest step):", "",
              *md_table("test | n | alpha | detectable | of interest |"), *map(_power_row, a.tests),
              "", "## Per category (counts are clean prompts)", "",
              *md_table("category | clean prompts | median alpha | median mean entropy (bits)", [
                  (cat, d["n"], effect_text(d["median_alpha"]), effect_text(d["median_mean_entropy_bits"]))
                  for cat, d in a.categories.items()])]
    lines += ["", "## Figures", ""]
    for name, text in FIGURES.items():
        lines += [f"![{name}]({name})", "", text, ""]
    lines += ["## Files", "",
              "- `report.json`: settings, environment, timing, every test with its numbers, power and verdict; "
              "H4's per-distractor tables (`distractor_tables`); health against length within each variant and category "
              "(`length_drift`).",
              "- `per_prompt.csv`: one row per prompt (prefill, decode and speculative figures; "
              "`content_sink_health` is the old count-based health; `alpha_t*` the H6 runs).",
              "- `per_token.csv`: one row per drafted token (draft entropy, accepted, tested).",
              "- " + ", ".join(f"`{n}`" for n in LINKED_FIGURES) + ": those figures with each point a link to its "
              "prompt's row on `index.html` (hover a point for its prompt).", ""]
    return "\n".join(lines)
