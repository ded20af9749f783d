"""Rendering of the study: the Rich progress bar, the verdict table, the plots, summary.md
and the atomic report directory.

Consumes :class:`lab.study.StudyResult`; computes no statistics of its own (every
number shown comes from :mod:`lab.analysis`). Plots use matplotlib's Agg backend.

Report layout (``<out>/<timestamp>-study/``): ``report.json`` (settings,
environment, wall time, per-test results and verdicts, descriptive statistics),
``per_prompt.csv``, ``per_token.csv``, four PNG figures (:data:`FIGURES`), an SVG beside each
plot whose points are prompts (:data:`LINKED_FIGURES`: each point a link to ``#prompt-<id>``, the
prompt's row on the report's page, with the prompt as its tooltip) and ``summary.md``.
"""

from __future__ import annotations

import io
import math
import re
import time
from html import escape
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from lab.kinds.study import KIND as STUDY
from lab.analysis.effects import CI_LEVEL
from lab.analysis.hypotheses import FAMILY_CI_LEVEL
from lab.numbers import effect_text, p_text
from lab.render import pyplot
from lab.render.console import stderr_console
from lab.render.study_summary import FIGURES, summary_markdown
from lab.reports import environment, timestamp, to_jsonable
from lab.views.publish import report_folder
from lab.study.outcome import PER_PROMPT_COLUMNS, PER_TOKEN_FIELDS
from lab.study.run import StudyResult, config_dict, summarize_prompts
from lab.verdicts import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, UNTESTABLE
from lab.views.kinds.study import prompt_anchor

# --------------------------------------------------------------------------- progress


class StudyProgress:
    """A Rich progress bar on stderr: prompts done, elapsed and time left; on a cluster
    also the prompts in flight and failed (``status``, from :mod:`lab.runs.cluster`).

    Use as a context manager and pass it as ``progress`` to :func:`lab.study.run_study`.
    """

    def __init__(self) -> None:
        self._progress = Progress(
            TextColumn("[bold]study[/]"), BarColumn(), MofNCompleteColumn(), TextColumn("prompts"),
            TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(), TextColumn("{task.fields[counts]}"),
            TextColumn("{task.fields[last]}"),
            console=stderr_console(), transient=False,
        )
        self._task: Any = None

    def __enter__(self) -> "StudyProgress":
        self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.stop()

    def start(self, total: int, done: int) -> None:
        self._task = self._progress.add_task("study", total=total, completed=done, last="", counts="")

    def status(self, in_flight: int, failed: int) -> None:
        self._progress.update(self._task, counts=f"{in_flight} in flight, {failed} failed")

    def advance(self, prompt_id: str, wall_s: float) -> None:
        self._progress.update(self._task, advance=1, last=f"{prompt_id} ({wall_s:.1f} s)")


# --------------------------------------------------------------------------- numbers as text


def verdict_table(result: StudyResult) -> Table:
    """The verdicts as a Rich table (printed to stdout by the command)."""
    tests = result.analysis.tests
    placebo = "; ".join(f"{t.name} placebo {'passed' if p['passes'] else 'FAILED'} (p = {p_text(p['p_value'])})"
                        for t in tests if (p := t.details.get("placebo")) and p.get("passes") is not None)
    table = Table(title="Study verdicts (Holm-corrected across the family)",
                  caption="effect: " + "; ".join(dict.fromkeys(f"{t.name} {t.effect_name}" for t in tests))
                  + ". pred: the sign the hypothesis predicts." + (f" {placebo}." if placebo else ""))
    for col in ("test", "effect", "pred", f"{FAMILY_CI_LEVEL:.1%} CI", "p (Holm)", "n", "verdict"):
        table.add_column(col, no_wrap=True)
    colors = {SUPPORTED: "green", NOT_SUPPORTED: "red", INCONCLUSIVE: "yellow", UNTESTABLE: "dim"}
    for t in tests:
        ci = f"[{effect_text(t.ci_low)}, {effect_text(t.ci_high)}]" if _finite(t.ci_low, t.ci_high) else "none"
        table.add_row(t.name, effect_text(t.effect), ">0" if t.predicted_sign > 0 else "<0", ci, p_text(t.p_holm), str(t.n),
                      Text(t.verdict, style=colors[t.verdict]))
    return table


# --------------------------------------------------------------------------- plots


def _finite(*v: Any) -> bool:
    return all(isinstance(x, (int, float)) and math.isfinite(x) for x in v)


def _link(prompt_id: str) -> str:
    return "#" + prompt_anchor(prompt_id)


def save_linked_svg(fig: Any, path: Path, tips: dict[str, str]) -> None:
    """Write ``fig`` as an SVG to inline in the report's page: each linked point (a collection's ``set_urls``)
    an ``<a href="#prompt-<id>">`` with a ``<title>`` tooltip from ``tips`` (keyed by the link), text as paths
    (no font), no metadata, and every id prefixed with the file's stem so several SVGs share one page.

    Args:
        fig: A matplotlib figure whose scatter collections carry ``#prompt-<id>`` urls.
        path: The ``.svg`` file to write.
        tips: ``{link: tooltip text}``; a link without one shows its prompt id.
    """
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": path.stem}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", buf.getvalue(), flags=re.S)

    def point(m: re.Match) -> str:  # matplotlib writes xlink:href and target="_blank"; the page wants a same-page jump
        link = m.group(1)
        return f'<a href="{link}"><title>{escape(tips.get(link, link.removeprefix("#prompt-")))}</title>'

    text = re.sub(r'<a xlink:href="(#prompt-[^"]*)"(?: target="_blank")?>', point, text)
    ids = set(re.findall(r' id="([^"]+)"', text))
    prefix = path.stem + "-"
    text = re.sub(r' id="([^"]+)"', lambda m: f' id="{prefix}{m.group(1)}"', text)
    text = re.sub(r'(url\(#|xlink:href="#)([^)"]+)',
                  lambda m: m.group(1) + (prefix if m.group(2) in ids else "") + m.group(2), text)
    path.write_text(text, encoding="utf-8")


def _tip(r: Any) -> str:
    return (f"{r.id} ({r.variant}, {r.category}): health {effect_text(r.context_health)}, "
            f"lookback_heads {effect_text(r.lookback_heads) if r.lookback_heads is not None else '-'}, "
            f"entropy {effect_text(r.mean_entropy_bits)} bits, alpha {effect_text(r.alpha)}")


def _save(fig: Any, folder: Path, stem: str, tips: dict[str, str] | None = None) -> list[str]:
    """Write ``fig`` as ``<stem>.png`` and, given its points' ``tips``, as the linked ``<stem>.svg``; close it and
    return the names written."""
    fig.savefig(folder / f"{stem}.png", dpi=110)
    if tips is not None:
        save_linked_svg(fig, folder / f"{stem}.svg", tips)
    pyplot().close(fig)
    return [f"{stem}.png", *([f"{stem}.svg"] if tips is not None else [])]


def write_plots(result: StudyResult, folder: Path) -> list[str]:
    """Write the four figures of :data:`FIGURES` (PNG) and the SVGs of :data:`LINKED_FIGURES` into ``folder``;
    return their names."""
    plt = pyplot()

    a = result.analysis
    rows = result.per_prompt
    tips = {_link(r.id): _tip(r) for r in rows}

    # 1. H1's context measure vs entropy, fit and band (the twins: clean prompts have no span); each dot a link
    fig, ax = plt.subplots(figsize=(6.4, 4.8), layout="constrained")
    for variant, marker, color in (("poisoned", "x", "tab:red"), ("neutral", "^", "tab:green")):
        pts = [(r.lookback_heads, r.mean_entropy_bits, r.id) for r in rows
               if r.variant == variant and _finite(r.lookback_heads, r.mean_entropy_bits)]
        if pts:
            xs, ys, ids = zip(*pts)
            dots = ax.scatter(xs, ys, marker=marker, color=color, label=f"{variant} (n={len(pts)})", alpha=0.8)
            dots.set_urls([_link(i) for i in ids])
    if a.health_entropy_fit is not None:
        f = a.health_entropy_fit
        ax.plot(f.grid, f.fit, color="black", lw=1.2, label=f"OLS fit, slope {f.slope:.3f}")
        ax.fill_between(f.grid, f.band_low, f.band_high, color="gray", alpha=0.25, label=f"{CI_LEVEL:.0%} CI of mean")
    h1, h1c = a.test("H1"), a.test("H1c")
    ax.set_title(f"H1: partial rho | length = {effect_text(h1.effect)}, p(Holm) = {p_text(h1.p_holm)}, {h1.verdict}\n"
                 f"H1c (neutral twins): rho = {effect_text(h1c.effect)}, {h1c.verdict}", fontsize=9)
    ax.set_xlabel("lookback_heads: the decode's reading of the added text, for its length")
    ax.set_ylabel("mean decode entropy (bits)")
    if ax.get_legend_handles_labels()[0]:  # a study without a measured twin draws no dot and needs no legend
        ax.legend(fontsize=8)
    names = _save(fig, folder, "health_vs_entropy", tips)

    # 2. acceptance vs draft entropy, binned with Wilson intervals
    fig, ax = plt.subplots(figsize=(6.4, 4.6), layout="constrained")
    bins = a.acceptance_bins
    if bins:
        mids = [(b.low + b.high) / 2 for b in bins]
        ax.errorbar(mids, [b.rate for b in bins],
                    yerr=[[b.rate - b.ci_low for b in bins], [b.ci_high - b.rate for b in bins]],
                    xerr=[[m - b.low for m, b in zip(mids, bins)], [b.high - m for m, b in zip(mids, bins)]],
                    fmt="o-", capsize=3, label="binned acceptance (Wilson 95%)")
        ax.axhline(a.overall_alpha, ls="--", color="gray", label=f"overall alpha {a.overall_alpha:.3f}")
        for m, b in zip(mids, bins):
            ax.annotate(f"n={b.n}", (m, b.ci_low), textcoords="offset points", xytext=(0, -12), ha="center", fontsize=7)
    h2 = a.test("H2")
    ax.set_title(f"H2: r_pb = {effect_text(h2.effect)}, p(Holm) = {p_text(h2.p_holm)}, {h2.verdict}", fontsize=10)
    ax.set_xlabel("draft entropy (bits)")
    ax.set_ylabel("acceptance rate")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=8)
    names += _save(fig, folder, "acceptance_vs_draft_entropy")

    # 3. per-category boxplots (clean prompts), every prompt a dot over its box (spread evenly across the box,
    # not at random, so the figure is the same on every run), each dot a link to its prompt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6), layout="constrained")
    cats = list(a.categories)
    for ax, key, label in ((axes[0], "alpha", "alpha (per prompt)"),
                           (axes[1], "mean_entropy_bits", "mean decode entropy (bits)")):
        clean = [(r.category, getattr(r, key), r.id) for r in rows if r.variant == "clean"]
        data = [[(v, i) for cat, v, i in clean if cat == c and _finite(v)] for c in cats]
        keep = [(c, d) for c, d in zip(cats, data) if d]
        if keep:
            ax.boxplot([[v for v, _ in d] for _, d in keep], showfliers=False)
            ax.set_xticks(range(1, len(keep) + 1), [c for c, _ in keep])
            for k, (_, d) in enumerate(keep, start=1):
                spread = [0.0] if len(d) == 1 else [-0.15 + 0.3 * j / (len(d) - 1) for j in range(len(d))]
                dots = ax.scatter([k + dx for dx in spread], [v for v, _ in d], s=12, color="tab:gray", alpha=0.7,
                                  zorder=3)
                dots.set_urls([_link(i) for _, i in d])
        ax.set_ylabel(label)
        ax.tick_params(axis="x", rotation=30)
    h3 = a.test("H3")
    fig.suptitle(f"H3: eta^2_H = {effect_text(h3.effect)}, Kruskal-Wallis p(Holm) = {p_text(h3.p_holm)}, {h3.verdict}",
                 fontsize=10)
    names += _save(fig, folder, "category_boxplots", tips)

    # 4. clean -> neutral -> poisoned, one line per triple; the neutral-to-poisoned step (equal length) is what
    # H4a/H4b test; tied steps dashed grey and nudged apart so they can be counted
    from matplotlib.lines import Line2D

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.8), layout="constrained")
    for ax, key, label, t in ((axes[0], "context_health", "context health (0..10)", a.test("H4a")),
                              (axes[1], "mean_entropy_bits", "mean decode entropy (bits)", a.test("H4b"))):
        counts = {"rises": 0, "falls": 0, "tied": 0}
        for p in a.pairs:
            c, n, q = p[f"{key}_clean"], p.get(f"{key}_neutral"), p[f"{key}_poisoned"]
            ref = n if _finite(n) else c  # a set without neutral twins: the clean twin
            if not _finite(ref, q):
                continue
            kind = "rises" if q > ref else "falls" if q < ref else "tied"
            counts[kind] += 1
            xs, ys, ids = (([0, 1, 2], [c, n, q], [p["clean"], p.get("neutral"), p["poisoned"]]) if _finite(c, n)
                           else ([0, 2], [c, q], [p["clean"], p["poisoned"]]))
            # the line, then its markers as a scatter so that each one links to its own prompt
            if kind == "tied":
                dx = 0.04 * (counts["tied"] - 1)  # each tied triple its own column, so n tied = n lines
                xs = [x + dx for x in xs]
                ax.plot(xs, ys, "--", color="tab:gray", alpha=0.9)
                dots = ax.scatter(xs, ys, marker="s", s=16, color="tab:gray", alpha=0.9, zorder=3)
            else:
                colour = "tab:red" if kind == "rises" else "tab:blue"
                ax.plot(xs, ys, "-", color=colour, alpha=0.6)
                dots = ax.scatter(xs, ys, marker="o", s=36, color=colour, alpha=0.6, zorder=3)
            dots.set_urls([_link(i) for i in ids])
        ax.legend(handles=[Line2D([], [], color="tab:red", marker="o", label=f"poisoned higher ({counts['rises']})"),
                           Line2D([], [], color="tab:blue", marker="o", label=f"poisoned lower ({counts['falls']})"),
                           Line2D([], [], color="tab:gray", ls="--", marker="s",
                                  label=f"tied, difference 0 ({counts['tied']})")], fontsize=8, loc="best")
        ax.set_xticks([0, 1, 2], ["clean", "neutral", "poisoned"])
        ax.set_xlim(-0.3, 2.5)
        ax.set_ylabel(label)
        ax.set_title(f"{t.name}: r_rb = {effect_text(t.effect)}, p(Holm) = {p_text(t.p_holm)}, {t.verdict}", fontsize=10)
    return names + _save(fig, folder, "clean_vs_poisoned", tips)


# --------------------------------------------------------------------------- the report


def study_document(result: StudyResult, wall_s_total: float) -> dict[str, Any]:
    """The content of the study's report.json."""
    a = result.analysis
    env = environment()
    if result.info.get("model"):
        env["model"] = result.info["model"]
    env["draft"] = result.info.get("draft", result.plan.settings["draft"])
    for key in ("cluster", "workers"):  # where the prompts ran: a Ray cluster, local worker processes
        if result.info.get(key):
            env[key] = result.info[key]
    for key in ("target_dtype", "draft_dtype", "draft_dtype_source", "pipeline"):  # what ModelRunner reports
        if key in result.info:
            env[key] = result.info[key]
    return {
        "kind": "study",
        "settings": result.plan.settings,
        "config": config_dict(result.plan.config),
        "environment": env,
        "prompts": summarize_prompts(result.plan.prompts),
        "timing": {"wall_s_total": wall_s_total, "wall_s_pipeline": result.wall_s,
                   "compute_s_prompts": result.compute_s, "n_resumed": result.n_resumed,
                   "model_load_s": result.info.get("load_s")},
        "tests": [to_jsonable(t) for t in a.tests],
        "verdicts": a.verdicts(),
        "acceptance_bins": to_jsonable(a.acceptance_bins),
        "health_entropy_fit": to_jsonable(a.health_entropy_fit),
        "categories": to_jsonable(a.categories),
        "pairs": to_jsonable(a.pairs),
        "distractor_tables": to_jsonable(a.distractor_tables),  # secondary: outside the Holm family
        "context_measure": result.context_measure,  # H1's measure, its file and its validity record
        "length_drift": to_jsonable(a.length_drift),  # H1's measure on length within each variant
        "missing_prompts": list(result.missing),
        "merged_from": list(result.merged_from),
        "figures": FIGURES,
    }


def write_report(result: StudyResult, out: str | Path | None = None) -> Path:
    """Write ``<out>/<timestamp>-study/`` atomically (see the module docstring).

    Args:
        result: From :func:`lab.study.run_study`.
        out: Reports root; default the study config's ``out``.

    Returns:
        The report directory.

    Another study's report of the same second makes this one ``<timestamp>-study-2``
    (:func:`lab.reports.report_dir`).
    """
    root = Path(out) if out is not None else Path(result.plan.config.out)
    with report_folder(root, STUDY, name=f"{timestamp()}-study") as rd:
        rd.write_csv("per_prompt.csv", [r.as_columns() for r in result.per_prompt], PER_PROMPT_COLUMNS)
        rd.write_csv("per_token.csv", [t.as_columns() for t in result.per_token], PER_TOKEN_FIELDS)
        write_plots(result, rd.path)
        # report.json last, so its wall time covers the plots too
        study = study_document(result, time.perf_counter() - result.started)
        rd.write_text("summary.md", summary_markdown(result, study))
        rd.write_report(study)
    return rd.path
