"""Rendering for ``lab intervene``: the console verdicts, summary.md, triples.csv, arms.png, the report.

Consumes :class:`lab.intervene.report.InterventionReport`; computes nothing (tests, controls, power
and the means per arm with their intervals come with the report, from :mod:`lab.analysis.intervention`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from lab.kinds.intervene import KIND as INTERVENE
from lab.analysis.intervention import ARMS, DOSE, ArmMeans, TripleSummary
from lab.numbers import number_text
from lab.render import pyplot, save_figure
from lab.render.markdown import md_table

# The arms in the order of their dose: no masking, the two shifts, the span masked; then the controls.
PLOT_ARMS = ("A0", "L0.5", "L0.25", "A1", "A2", "sink", "C+")
TWIN_NAMES = {"P": "poisoned (distractor)", "N": "neutral (relevant text)"}
assert set(PLOT_ARMS) <= set(ARMS)


def _md(text: str) -> str:
    """A user's label or id as one markdown table cell or inline text: control characters escaped
    (:func:`lab.safe_text.printable`), line breaks as ``\\n``, and ``|`` escaped, so no label splits a row."""
    from lab.safe_text import printable

    return printable(text).replace("\r", "\\r").replace("\n", "\\n").replace("\t", " ").replace("|", "\\|")


def triple_rows(summaries: Sequence[TripleSummary]) -> list[dict[str, Any]]:
    """One row per (triple, twin, arm) for ``triples.csv``: mean entropy (bits), mean beta, the mediator."""
    return [{"question_id": s.question_id, "category": s.category, "distractor": s.distractor, "twin": v, "arm": arm,
             "entropy_bits": s.entropy[v, arm], "beta": s.beta[v, arm], "span_mass": s.span_mass[v, arm],
             "sink_mass": s.sink_mass[v, arm]} for s in summaries for v in ("P", "N") for arm in ARMS]


def plot_arms(summaries: Sequence[TripleSummary], arms: ArmMeans, path: str | Path, title: str) -> None:
    """Three panels (PNG): entropy and beta per arm for each twin (thin lines: triples; markers: the means
    of ``arms`` with their 95 % intervals), and the dose-response of the P - N entropy gap over lambda."""
    plt = pyplot()

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    x = np.arange(len(PLOT_ARMS))
    for ax, (table, label) in zip(axes[:2], (("entropy", "mean target entropy (bits)"),
                                             ("beta", "mean expected acceptance beta"))):
        for offset, (v, colour) in zip((-0.08, 0.08), (("P", "tab:red"), ("N", "tab:blue"))):
            vals = np.array([[getattr(s, table)[v, a] for a in PLOT_ARMS] for s in summaries])
            if len(summaries) <= 400:
                for row in vals:
                    ax.plot(x + offset, row, color=colour, alpha=0.06, linewidth=0.6)
            stats = [arms.by_arm[table, v, a] for a in PLOT_ARMS]
            ax.errorbar(x + offset, [m.mean for m in stats], yerr=[m.half_width for m in stats], fmt="o-", color=colour,
                        label=TWIN_NAMES[v], capsize=3, linewidth=1.5)
        ax.set_xticks(x, PLOT_ARMS)
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    lam = np.array([d for _, d in DOSE])
    axes[2].errorbar(lam, [m.mean for m in arms.dose_gap], yerr=[m.half_width for m in arms.dose_gap], fmt="o-",
                     color="black", capsize=3)
    axes[2].axhline(0, color="grey", linewidth=0.8, linestyle=":")
    axes[2].set_xticks(lam, [f"{d:g}\n{a}" for a, d in DOSE])
    axes[2].set_xlabel("lambda (attention to the added span scaled by)")
    axes[2].set_ylabel("H(P) - H(N), bits")
    axes[2].set_title("dose-response", fontsize=10)
    fig.suptitle(title, fontsize=10)
    save_figure(fig, path)


def _ci(low: Any, high: Any, spec: str = "+.4f", sep: str = " to ") -> str:
    return f"{number_text(low, spec)}{sep}{number_text(high, spec)}"


def _test_row(t) -> tuple[str, ...]:
    return (t.name, f"{number_text(t.estimate, '+.4f')} {t.unit}", _ci(t.ci_low, t.ci_high), number_text(t.p_holm, ".2g"),
            f"{t.n_triples} / {t.n_distractors}", f"{number_text(t.power, '.2f')} at {t.smallest_effect:g}",
            f"**{t.verdict}**" + (f" ({t.note})" if t.note else ""))


def _control_lines(a) -> list[str]:
    e, po, ls, cp, m = a.empty_mask, a.position_only, a.label_swap, a.c_plus, a.manipulation
    ok = {True: "passed", False: "**FAILED**"}
    return [
        *md_table("control | what must hold | measured |"),
        f"| empty mask | every triple within {e.tolerance_bits:g} bits of A0 | max {e.max_diff_bits:.2e} bits "
        f"({e.n_over} over; worst {_md(str(e.worst))}) | {ok[e.passed]} |",
        f"| position only (A2) | H(P,A2) - H(N,A2) within +-{po.bound_bits:g} bits (TOST at {po.alpha:g}) | "
        f"{number_text(po.mean_bits, '+.4f')} ({_ci(po.ci_low, po.ci_high)}), p {number_text(po.p_tost, '.2g')}"
        f"{'; ' + po.note if po.note else ''} | {ok[po.passed]} |",
        f"| label swap | did_entropy rejects in at most {ls.max_rejecting} of {ls.n_swaps} swaps | {ls.n_rejecting} "
        f"({ls.share:.1%}){'; ' + ls.note if ls.note else ''} | {ok[ls.passed]} |",
        f"| C+ (question masked) | moves mean entropy by >= {cp.min_bits:g} bits on >= {cp.min_share:.0%} of twins | "
        f"{cp.n_moved} of {cp.n_twins} ({cp.share:.1%}) | {ok[cp.passed]} |",
        f"| manipulation | mediator 0 under A1, sink mass 0 under the sink arm (within {m.tolerance:g}) | A1 max "
        f"{m.a1_max:.1e}, sink arm's sink max {m.sink_max:.1e}; mediator A0 {m.a0_mean:.4f}, L0.5 / A0 {m.ratio_l05:.3f}, "
        f"L0.25 / A0 {m.ratio_l025:.3f} | {ok[m.passed]} |",
        "",
        f"Described, not a control: the sink arm (key 0 masked for the decode queries) moves mean entropy by "
        f"{number_text(a.sink.mean_bits, '+.3f')} bits on average and by >= {a.sink.min_bits:g} bits on "
        f"{a.sink.n_moved} of {a.sink.n_twins} twins ({a.sink.share:.1%}).",
    ]


def _arm_table(arms: ArmMeans) -> list[str]:
    cells = (("entropy", "P"), ("entropy", "N"), ("beta", "P"), ("beta", "N"), ("span_mass", "P"), ("span_mass", "N"))
    return md_table("arm | H(P) bits | H(N) bits | beta(P) | beta(N) | mediator P | mediator N",
                    [(arm, *(f"{arms.by_arm[t, v, arm].mean:.4f}" for t, v in cells)) for arm in ARMS])


def summary_markdown(report) -> str:
    """The report's summary.md: the controls first (a failed one voids the verdicts), then the tests."""
    s, a = report.settings, report.analysis
    head = ["# lab intervene: masking what the context added", ""]
    if not report.decides:
        failed = [k for k, v in a.controls.items() if not v]
        if report.pilot is not None:
            failed += [f"pilot {k}" for k, v in report.pilot.controls.items() if not v]
        head += [f"**CONTROLS FAILED ({', '.join(failed)}): this run decides nothing; every verdict below reads "
                 "'undecided'.**", ""]
    draft_weights = "the target's own layers" if s.draft.startswith("early-exit:") else s.draft_weights
    head += [f"Target `{s.model}` ({s.weights}), draft `{s.draft}` ({draft_weights}), "
             f"{s.dtype} on {s.device}; {a.n_triples} triples over {a.n_distractors} distractor texts "
             f"(`{s.triples_file}`), each scored on the clean prompt's greedy continuation of {s.new_tokens} tokens; "
             f"{report.seconds:.0f} s of scoring. Arms, tests and controls were stated before the run "
             f"(`lab intervene --help`, `lab.analysis.intervention`, design version {s.design}).", ""]
    head += ["## Pre-stated tests (one Holm family, one-sided, distractor as a random effect)", "",
             *md_table("test | estimate | CI (family level) | p (Holm) | triples / distractors | power at the smallest "
                       "effect | verdict", map(_test_row, a.tests))]
    head += [""] + [f"- **{t.name}**: {t.statement}" for t in a.tests]
    head += ["", "## Controls", ""] + _control_lines(a)
    if report.pilot is not None:
        head += ["", f"## Pilot ({len(report.pilot_ids)} triples, excluded from the analysis: "
                     f"{', '.join(map(_md, report.pilot_ids))})", ""] + _control_lines(report.pilot)
    if report.power:
        head += ["", "## Power, from the pilot's SDs, for this run's size (fixed before the main triples ran)", "",
                 *md_table("test | smallest effect | pilot SD | power at n | triples for 80 %", [
                     (r.test, f"{r.smallest_effect:g} {r.unit}", number_text(r.sd, ".4f"),
                      f"{number_text(r.power, '.2f')} at {r.n_triples}",
                      r.required_triples if r.required_triples is not None else "not reachable")
                     for r in report.power])]
    sec = (a.proportion_removed, a.mediation_slope, a.indirect_share)
    head += ["", "## Secondary (outside the family)", ""] + [
        f"- {e.name}: {number_text(e.value, '+.3f')} {e.unit} (95 % CI {_ci(e.ci_low, e.ci_high, '+.3f')}, "
        f"{e.n_triples} triples): {e.statement}" for e in sec]
    head += ["", "## Arms (means over triples)", ""] + _arm_table(report.arms)
    head += ["", "## Per distractor", "", *md_table(
        "distractor | triples | mean DiD entropy (bits) | mean H(P) - H(N) at A0",
        [(_md(d.distractor), d.n_triples, f"{d.mean_did_entropy:+.4f}", f"{d.mean_h4b_gap:+.4f}")
         for d in a.distractors])]
    return "\n".join(head) + "\n"


def render_console(report, console) -> None:
    """The verdicts and the controls on the terminal (Rich)."""
    from rich.table import Table

    a = report.analysis
    if not report.decides:
        console.print("controls failed: this run decides nothing", style="bold red")
    table = Table(title=f"lab intervene: {a.n_triples} triples, {a.n_distractors} distractors")
    for col in ("test", "estimate", "CI", "p (Holm)", "verdict"):
        table.add_column(col)
    for t in a.tests:
        table.add_row(t.name, f"{number_text(t.estimate, '+.4f')} {t.unit}", _ci(t.ci_low, t.ci_high, sep=" .. "),
                      number_text(t.p_holm, ".2g"), t.verdict)
    console.print(table)
    console.print("controls: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}" for k, v in a.controls.items()),
                  markup=False, highlight=False)


def report_json(report, work: Path) -> dict[str, Any]:
    """What ``report.json`` holds (:class:`lab.kinds.intervene.Report`, with its kind): the analysis' dataclasses as
    they are, the pilot's ids, controls and analysis, every main triple's record."""
    from dataclasses import asdict

    return {
        "kind": "intervene", "settings": asdict(report.settings), "decides": report.decides,
        "analysis": asdict(report.analysis), "controls": report.analysis.controls,
        "pilot": None if report.pilot is None else {"ids": list(report.pilot_ids),
                                                    "controls": report.pilot.controls,
                                                    "analysis": asdict(report.pilot)},
        "power": [asdict(r) for r in report.power], "seconds": report.seconds,
        "environment": report.environment, "work_dir": str(work),
        "triples": [r.to_json() for r in report.records]}


def write_report(report, root: Path, work: Path) -> Path:
    """Write ``<root>/<timestamp>-intervene-<model>/`` atomically; returns its final path."""
    from lab.views.publish import report_folder

    with report_folder(root, INTERVENE, report.settings.model) as rd:
        rd.write_report(report_json(report, work))
        rd.write_csv("triples.csv", triple_rows(report.main))
        plot_arms(report.main, report.arms, rd.file("arms.png"),
                  f"lab intervene, {report.settings.model}: arms per twin")
        rd.write_text("summary.md", summary_markdown(report))
    return rd.final
