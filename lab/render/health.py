"""Rendering of the context-health calibration and its validation: tables and summary.md.

Each function draws a :class:`lab.kinds.calibrate_health.Report` or a
:class:`lab.health.validation.HealthValidationReport` as given.
"""

from __future__ import annotations

from rich.table import Table

from lab.health.measures import PROPERTIES as _PROPS
from lab.health.validation import END_MARGIN, MAX_LENGTH_RHO, MAX_SATURATED_SHARE, HealthValidationReport
from lab.kinds.calibrate_health import Candidate, Report
from lab.kinds.calibrate_health_validate import Figures
from lab.render.markdown import md_table
from lab.verdicts import NOT_SUPPORTED, SUPPORTED, meets_bars

_COLS = ("candidate", "props", "rho N", "IQR", "SD", "distinct", "max tie", "below neutral", "tied", "below clean")


def _row(c: Candidate, compact: bool = False) -> tuple[str, ...]:
    failed = [k for k, v in c.properties.items() if not v]
    props = "all" if c.eligible else f"{len(failed)} fail" if compact else "fails " + ", ".join(failed)
    name = c.name + (" (control)" if c.control else "")
    return (name, props, f"{c.length_rho:+.2f}", f"{c.iqr:.2f}", f"{c.std:.2f}",
            f"{c.n_distinct}/{c.n_pairs}", f"{c.max_tie_share:.0%}", f"{c.n_pairs_below}/{c.n_pairs}",
            f"{c.n_pairs_tied}/{c.n_pairs}", f"{c.n_pairs_below_clean}/{c.n_pairs}")


def candidates_table(report: Report) -> Table:
    """The candidates' figures as a Rich table (clean calibration prompts; twins = poisoned variants)."""
    table = Table(title=f"Context-health candidates (chosen: {report.chosen})",
                  caption="props: the six properties (length_neutral: |rho N| <= "
                          f"{report.length_rho_tolerance:g}); rho N: Spearman with content length over "
                          "clean + neutral; below neutral / tied: poisoned vs its neutral twin (equal length)")
    for col in _COLS:
        table.add_column(col, no_wrap=col == "candidate", overflow="fold")
    for c in report.candidates:
        table.add_row(*_row(c, compact=True))
    return table


def calibration_markdown(report: Report) -> str:
    """summary.md of ``lab calibrate-health``."""
    lines = [
        "# Context-health calibration", "",
        f"Model: {report.model.model}. Prompts: {report.n_clean} clean calibration prompts "
        f"({report.prompts_file}), one poisoned variant of each, built like the study's twins from the "
        f"distractors of {report.distractors_file}, and one neutral variant of each with the same added length "
        "(standard-library docstring text, lab/data/calibration_neutral.jsonl).", "",
        f"**Rule (stated before the study's entropy was looked at):** {report.rule}.", "",
        (f"**Chosen: `{report.chosen}`** ({report.decided_by})." if report.chosen is not None
         else f"**Chosen: none** ({report.decided_by})."), "",
        *md_table((*_COLS, "median", "range"),
                  [(*_row(c), f"{c.median:.2f}", f"{c.min:.2f} to {c.max:.2f}") for c in report.candidates]),
    ]
    rejected = report.controls_rejected
    lines += ["", "IQR, SD, distinct values, median and range are over the clean calibration prompts (0..10 scale); "
              "'rho N' is the Spearman correlation with the content length N over the clean prompts and their "
              "neutral variants (the sixth property: within the tolerance); 'max tie' is the largest share of clean "
              "prompts sharing one value to 0.01; 'below neutral' and 'tied' count poisoned variants strictly below "
              "or equal (to 0.01) to their neutral twin of the same length, 'below clean' those below their shorter "
              "clean twin (what a length proxy gets).", "",
              "Controls: " + (", ".join(f"`{k}` {'rejected' if v else '**not rejected**'}" for k, v in rejected.items())
                              or "none") + ".", "",
              "Files: `report.json` (rule, figures, per-prompt values), `prompts.csv`."]
    ref = report.length_reference
    if ref:
        lines += ["", f"## Clean length reference ({ref['n_prompts']} prompts of {ref['prompts_file']}, "
                  f"{ref['n_content_range'][0]} to {ref['n_content_range'][1]} content tokens)", "",
                  "Each `*_for_length` candidate is its base read against this line: "
                  "10 Phi((value - (intercept + slope ln N)) / scale). The fit never saw the calibration prompts, "
                  "so 'rho N' in the table above is an out-of-sample check of the reference.", "",
                  *md_table("base | intercept | slope per ln N | scale | base rho N here | read for length, rho N here",
                            [(base, f"{f['intercept']:.3f}", f"{f['slope']:+.3f}", f"{f['scale']:.3f}",
                              f"{f['rho_base_n']:+.2f}", f"{f['rho_for_length_n']:+.2f}")
                             for base, f in ref["bases"].items()])]
    if report.properties_on_prompts:
        on = report.properties_on_prompts
        n = next(iter(on.values()))
        lines += ["", f"## The five random-input properties on this model's own prefills ({n['n_checked']} prompts checked, "
                  f"{n['n_not_measurable']} not measurable)", "",
                  "Eligibility above is the pre-stated check on fixed random inputs; here each property is checked "
                  "on the received attention, z and sink flags this model actually produced.", "",
                  *md_table(("candidate", *_PROPS),
                            [(name, *("holds" if f[k] else "fails" for k in _PROPS)) for name, f in on.items()])]
        if report.chosen is not None:
            lines += ["", f"The chosen measure (`{report.chosen}`) "
                  + ("holds all five on this model's prompts." if report.chosen_holds_on_prompts
                     else "does **not** hold all five on this model's prompts.")]
    if report.study_set:
        lines += ["", f"## On the study prompt set ({report.study_set_file}; prefill only, no decode)", "",
                  "The ranking targets: no value shared by more than 10 % of clean prompts; no tied twin pair "
                  "(poisoned against its neutral twin).", "",
                  *md_table("candidate | clean prompts | largest tie share | distinct | range | twins below | twins tied",
                            [(name, f["n_clean"], f"{f['max_tie_share']:.0%}", f["n_distinct"],
                              f"{f['min']:.2f} to {f['max']:.2f}", f"{f['n_twins_below']}/{f['n_twins']}",
                              f"{f['n_twins_tied']}/{f['n_twins']}") for name, f in report.study_set.items()])]
    return "\n".join(lines) + "\n"


_VCOLS = ("measure", "valid", "rho N", "p", "at 0", "at 10", "measurable", "median", "range")


def _vrow(f: Figures) -> tuple[str, ...]:
    return (f.name + (" (control)" if f.control else ""), "yes" if f.valid else "no", f"{f.rho:+.2f}", f"{f.p:.2g}",
            f"{f.low_share:.0%}", f"{f.high_share:.0%}", f"{f.n_measurable}/{f.n}", f"{f.median:.2f}",
            f"{f.low:.2f} to {f.high:.2f}")


def validation_table(report: HealthValidationReport) -> Table:
    """Every candidate's drift with length and saturation on the validation set, the lab's measure first."""
    table = Table(title=f"Context health on independent text (measure: {report.measure}; "
                        f"{'valid' if report.valid else 'NOT valid'} on this model)",
                  caption=f"valid: |Spearman rho(value, N)| <= {MAX_LENGTH_RHO:g} and at most "
                          f"{MAX_SATURATED_SHARE:.0%} of prompts within {END_MARGIN:g} of 0 or 10")
    for col in _VCOLS:
        table.add_column(col, no_wrap=col == "measure", overflow="fold")
    for f in sorted(report.candidates.values(), key=lambda f: f.name != report.measure):
        table.add_row(*_vrow(f))
    return table


def validation_markdown(report: HealthValidationReport) -> str:
    """summary.md of ``lab calibrate-health --validate``."""
    f = report.figures
    missed = ", ".join(w for w, ok in (("drifts with length", f.length_neutral), ("saturates", f.unsaturated))
                       if not ok)
    # The validation's verdict (lab.verdicts.meets_bars) in this summary's words: the bars it misses named.
    verdict = {SUPPORTED: "meets both bars", NOT_SUPPORTED: f"**fails** ({missed})"}[meets_bars(f.valid)]
    lines = [
        "# Context health on independent text", "",
        f"Model: {report.model.model}. Prompts: {f.n} clean prompts of {report.prompts_file} "
        "(docstrings of installed packages, spread evenly in log content length, one neutral question), "
        "none from the calibration, length-reference or study prompts. Length reference read: "
        f"{report.reference_file or 'none'}.", "",
        f"**The lab's context health (`{report.measure}`) {verdict}**: Spearman rho with the content length N "
        f"{f.rho:+.2f} (p {f.p:.2g}), {f.saturated_share:.0%} of measurable prompts at an end of the scale "
        f"({f.low_share:.0%} at 0, {f.high_share:.0%} at 10), range {f.low:.2f} to {f.high:.2f}. Bars: "
        f"|rho| <= {MAX_LENGTH_RHO:g}; at most {MAX_SATURATED_SHARE:.0%} within {END_MARGIN:g} of 0 or 10.", "",
        *md_table(_VCOLS, map(_vrow, report.candidates.values())),
        "", f"## `{report.measure}` within each source", "",
        *md_table(("source", *_VCOLS[1:]), [(src, *_vrow(c)[1:]) for src, c in report.by_source.items()]),
        "", "Files: `report.json` (bars, figures, per-prompt values), `prompts.csv`."]
    return "\n".join(lines) + "\n"
