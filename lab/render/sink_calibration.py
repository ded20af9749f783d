"""Rendering of ``lab calibrate-sinks``: the sweep table, summary.md, the candidates' figures and the sweep plot.

Each function draws a :class:`lab.sinks.calibration_report.SinkCalibrationReport` (the table and the plot read its
sweep's rates) or its ``report.json`` (:class:`lab.kinds.calibrate_sinks.Report`) as given.
"""

from __future__ import annotations

from rich.table import Table

from lab.kinds.calibrate_sinks import Candidate, Report
from lab.render import pyplot, save_figure
from lab.render.markdown import md_table
from lab.sinks.calibration import SweepRow
from lab.sinks.calibration_report import SinkCalibrationReport
from lab.sinks.candidates import STATISTIC_LABEL


def _label(report: Report) -> str:
    """How the report's statistic reads ("sink rate" or "z")."""
    return STATISTIC_LABEL.get(report.statistic, "z")


def sweep_table(statistic: str, sweep: tuple[SweepRow, ...] | list[SweepRow], *, n_prompts: int,
                n_content_tokens: int, chosen: float | None) -> Table:
    """Sweep rows around the feasible range: counts and rates per threshold."""
    t = Table(title=f"sink threshold calibration ({n_prompts} prompts, "
                    f"{n_content_tokens} content tokens); chosen: {chosen}",
              title_justify="left")
    has_long = any(r.long_n_prompts for r in sweep)
    cols = ("rate" if statistic == "sink_rate" else "z", "position 0", "content flagged", *(("long: pos 0", "long: content") if has_long else ()), "feasible")
    for col in cols:
        t.add_column(col, justify="right", no_wrap=True)
    for r in sweep:
        if r.threshold * 4 % 2 and not r.feasible:
            continue  # keep the table short: every 0.5 outside the feasible range
        long_cells = (f"{r.long_position0_flagged}/{r.long_n_prompts}",
                      f"{r.long_content_flagged}/{r.long_n_content}") if has_long else ()
        t.add_row(f"{r.threshold:.2f}", f"{r.position0_flagged}/{r.n_prompts}",
                  f"{r.content_flagged}/{r.n_content} ({r.content_rate:.2%})",
                  *long_cells, "yes" if r.feasible else "")
    return t


def calibration_table(calibration: SinkCalibrationReport) -> Table:
    """The report's sweep as a table (:func:`sweep_table`)."""
    report = calibration.report
    return sweep_table(report.statistic, calibration.sweep, n_prompts=report.n_prompts,
                       n_content_tokens=report.n_content_tokens, chosen=report.chosen_threshold)


def calibration_markdown(report: Report) -> str:
    feas, label = report.feasible_thresholds, _label(report)
    model = report.model
    lines = [
        "# Sink threshold calibration", "",
        f"- model: {model.model} ({model.device}, {model.dtype})",
        f"- prompts: {report.n_prompts}; observed content tokens: {report.n_content_tokens}",
        f"- criteria: position 0 flagged on >= {report.criteria.position0_min_rate:.0%} of prompts; "
        f"< {report.criteria.content_max_rate:.0%} of content tokens flagged",
        f"- feasible thresholds: {f'{min(feas):g} .. {max(feas):g}' if feas else 'none'}",
        f"- chosen (middle of the feasible range): **{report.chosen_threshold}** "
        f"(current default: {report.current_default_threshold})",
        f"- lowest position-0 {label}: {report.position0_score_min:.2f}; highest content {label}: "
        f"{report.content_score_max if report.content_score_max is None else round(report.content_score_max, 2)}",
    ]
    for p in report.long_prompts:
        lines.append(f"- long prompt `{p.id}` ({p.n_tokens} tokens): position-0 {label} "
                     f"{p.position0_score:.2f}; highest content {label} {p.max_content_score:.2f}; "
                     "at the chosen threshold "
                     f"{p.content_flagged_at_chosen}/{p.n_content} content tokens flagged, "
                     f"{p.trailing_flagged_at_chosen} of them among the trailing positions (seen by < "
                     f"{report.trailing_fraction:.0%} of the queries)")
    held = report.held_out
    if held:
        h = held.short
        lines.append(f"- held-out set ({held.prompts}) at {held.threshold}: position 0 flagged on "
                     f"{h.position0_flagged}/{h.n_prompts} prompts; content {h.content_flagged}/{h.n_content} flagged")
        if held.long:
            hl = held.long
            lines.append(f"- held-out long prompts ({', '.join(map(str, held.long_n_tokens))} tokens): position 0 "
                         f"flagged on {hl.position0_flagged}/{hl.n_prompts}; content {hl.content_flagged}/"
                         f"{hl.n_content} flagged, {hl.trailing_flagged} of them trailing")
    rows = [(f"{r.threshold:.2f}", f"{r.position0_flagged}/{r.n_prompts}", f"{r.content_flagged}/{r.n_content}",
             f"{r.long_position0_flagged}/{r.long_n_prompts}", f"{r.long_content_flagged}/{r.long_n_content}",
             "yes" if r.feasible else "") for r in report.sweep]
    lines += ["", *md_table(f"{label} | position 0 flagged | content flagged | long: position 0 | "
                            "long: content flagged | feasible", rows, "rrrrrc")]
    return "\n".join(lines) + "\n"


def plot_sweep(calibration: SinkCalibrationReport, path) -> None:
    """Position-0 flag rate and content flag rate against the threshold."""
    plt = pyplot()

    report, sweep = calibration.report, calibration.sweep
    xs = [r.threshold for r in sweep]
    p0 = [r.position0_rate for r in sweep]
    ct = [r.content_rate for r in sweep]
    fig, ax = plt.subplots(figsize=(8, 4.5), constrained_layout=True)
    ax.plot(xs, p0, label="position 0 flagged (share of prompts)")
    ax.plot(xs, ct, label="content tokens flagged (share)")
    if any(r.long_n_prompts for r in sweep):
        ax.plot(xs, [r.long_content_rate for r in sweep], ls="--",
                label="content tokens flagged, long prompts (share)")
    ax.axhline(report.criteria.position0_min_rate, ls=":", color="grey")
    ax.axhline(report.criteria.content_max_rate, ls=":", color="grey")
    if report.chosen_threshold is not None:
        ax.axvline(report.chosen_threshold, color="black", lw=1,
                   label=f"chosen {_label(report)} = {report.chosen_threshold}")
    ax.set_xlabel(f"{_label(report)} threshold")
    ax.set_ylabel("rate")
    ax.legend()
    save_figure(fig, path, tight=False)


def _counts(c: Candidate, key: str) -> str:
    e = c.counts.get(key)
    if not e:
        return ""
    return (f"{e.position0_flagged}/{e.n_prompts}; {e.content_flagged}/{e.n_content}"
            + (f" ({e.trailing_flagged} trailing)" if key.endswith("long") else ""))


def candidates_markdown(report: Report) -> str:
    """Every candidate statistic on this model: feasible range, its own threshold, counts there."""
    rows = [(name, f"{c.feasible[0]:g} .. {c.feasible[1]:g}" if c.feasible else "none",
             "" if c.chosen is None else c.chosen, f"{c.position0_lowest:.2f}",
             "" if c.content_highest is None else f"{c.content_highest:.2f}",
             *(_counts(c, key) for key in ("calibration", "calibration_long", "held_out", "held_out_long")))
            for name, c in report.candidates.items()]
    lines = ["", "## Candidate statistics", "",
             f"The detector uses `{report.statistic}`. Each candidate's threshold is the middle of its own feasible "
             "range on the calibration prompts (short and long). Counts: position 0 flagged / prompts; content "
             "tokens flagged / observed content tokens.", "",
             *md_table("statistic | feasible | threshold | lowest pos-0 | highest content | calibration | "
                       "calibration long | held-out | held-out long", rows, "llrrrllll")]
    cross = report.cross_model
    if cross:
        lines += ["", f"Rule across the calibrated profiles ({', '.join(cross.profiles)}): the first statistic "
                  f"feasible on all of them is **{cross.chosen}**; a threshold feasible on all: "
                  f"{cross.default_threshold}."]
    if report.saved_to:
        lines += ["", f"Saved for the commands that read it (after this report): `{report.saved_to}` "
                  "(the user's calibration folder, read before the packaged files)."]
    return "\n".join(lines) + "\n"
