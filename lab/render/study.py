"""Rendering of the study: the Rich progress bar, the verdict table, the plots, summary.md
and the atomic report directory.

Consumes :class:`lab.study.StudyResult`; computes no statistics of its own (every
number shown comes from :mod:`lab.analysis`). Plots use matplotlib's Agg backend.

Report layout (``<out>/<timestamp>-study/``): ``study.json`` (settings,
environment, wall time, per-test results and verdicts, descriptive statistics),
``per_prompt.csv``, ``per_token.csv``, four PNG figures (:data:`FIGURES`) and
``summary.md``.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from lab.analysis import ALPHA, CI_LEVEL, SMALLEST_EFFECT, SMALLEST_ETA_SQ, TestResult
from lab.render.console import stderr_console
from lab.reports import environment, report_dir, timestamp, to_jsonable
from lab.study import PER_PROMPT_FIELDS, PER_TOKEN_FIELDS, StudyResult, config_dict, summarize_prompts

FIGURES = {
    "health_vs_entropy.png": "Context health (x, 0..10) against the mean decode entropy in bits (y), one dot per "
                             "prompt (clean and poisoned marked apart), with the least-squares line and its 95% "
                             "confidence band for the mean. H1 predicts a falling trend.",
    "acceptance_vs_draft_entropy.png": "Acceptance rate of drafted tokens (y) in quantile bins of the draft's "
                                       "entropy in bits (x), each with its Wilson 95% interval; the dashed line is "
                                       "the overall alpha. H2 predicts a falling curve.",
    "category_boxplots.png": "Per-prompt alpha (left) and mean decode entropy (right) by category, clean prompts. "
                             "H3 asks whether the alpha boxes differ.",
    "clean_vs_poisoned.png": "Each twin pair as a line from its clean to its poisoned prompt: context health (left) "
                             "and mean decode entropy (right). H4a predicts lines falling on the left, H4b rising "
                             "on the right.",
}


# --------------------------------------------------------------------------- progress


class StudyProgress:
    """A Rich progress bar on stderr: prompts done, elapsed and time left.

    Use as a context manager and pass it as ``progress`` to :func:`lab.study.run_study`.
    """

    def __init__(self) -> None:
        self._progress = Progress(
            TextColumn("[bold]study[/]"), BarColumn(), MofNCompleteColumn(), TextColumn("prompts"),
            TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(), TextColumn("{task.fields[last]}"),
            console=stderr_console(), transient=False,
        )
        self._task: Any = None

    def __enter__(self) -> "StudyProgress":
        self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.stop()

    def start(self, total: int, done: int) -> None:
        self._task = self._progress.add_task("study", total=total, completed=done, last="")

    def advance(self, prompt_id: str, wall_s: float) -> None:
        self._progress.update(self._task, advance=1, last=f"{prompt_id} ({wall_s:.1f} s)")


# --------------------------------------------------------------------------- numbers as text


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e-3 and x != 0 else f"{x:.{digits}f}"
    return str(x)


def _p(x: float) -> str:
    if not math.isfinite(x):
        return "n/a"
    return f"{x:.2e}" if x < 1e-3 else f"{x:.4f}"


def test_line(t: TestResult) -> str:
    """One sentence with a test's numbers and verdict (summary.md and the console)."""
    if not math.isfinite(t.p_value):
        return f"**{t.name}: {t.verdict}** (not tested: {t.note}; n = {t.n})"
    return (f"**{t.name}: {t.verdict}**: {t.effect_name} = {_fmt(t.effect)} "
            f"(95% CI {_fmt(t.ci_low)} to {_fmt(t.ci_high)}), p = {_p(t.p_value)}, "
            f"Holm-corrected p = {_p(t.p_holm)}, n = {t.n}" + (f"; {t.note}" if t.note else ""))


def verdict_table(result: StudyResult) -> Table:
    """The verdicts as a Rich table (printed to stdout by the command)."""
    table = Table(title="Study verdicts (Holm-corrected across H1-H4)")
    for col in ("test", "effect", "95% CI", "p (Holm)", "n", "verdict"):
        table.add_column(col)
    colors = {"supported": "green", "not supported": "red", "inconclusive": "yellow"}
    for t in result.analysis.tests:
        table.add_row(t.name, f"{t.effect_name} {_fmt(t.effect)}", f"[{_fmt(t.ci_low)}, {_fmt(t.ci_high)}]",
                      _p(t.p_holm), str(t.n), f"[{colors[t.verdict]}]{t.verdict}[/]")
    return table


# --------------------------------------------------------------------------- plots


def _finite(*v: Any) -> bool:
    return all(isinstance(x, (int, float)) and math.isfinite(x) for x in v)


def write_plots(result: StudyResult, folder: Path) -> list[str]:
    """Write the four figures of :data:`FIGURES` into ``folder``; return their names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a = result.analysis
    rows = result.per_prompt
    names = []

    # 1. health vs entropy, fit and band
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    for variant, marker, color in (("clean", "o", "tab:blue"), ("poisoned", "x", "tab:red")):
        pts = [(r["context_health"], r["mean_entropy_bits"]) for r in rows
               if r["variant"] == variant and _finite(r["context_health"], r["mean_entropy_bits"])]
        if pts:
            ax.scatter(*zip(*pts), marker=marker, color=color, label=f"{variant} (n={len(pts)})", alpha=0.8)
    if a.health_entropy_fit is not None:
        f = a.health_entropy_fit
        ax.plot(f.grid, f.fit, color="black", lw=1.2, label=f"OLS fit, slope {f.slope:.3f}")
        ax.fill_between(f.grid, f.band_low, f.band_high, color="gray", alpha=0.25, label=f"{CI_LEVEL:.0%} CI of mean")
    h1 = a.tests[0]
    ax.set_title(f"H1: rho = {_fmt(h1.effect)} [{_fmt(h1.ci_low)}, {_fmt(h1.ci_high)}], {h1.verdict}", fontsize=10)
    ax.set_xlabel("context health (0..10)")
    ax.set_ylabel("mean decode entropy (bits)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "health_vs_entropy.png", dpi=110)
    plt.close(fig)
    names.append("health_vs_entropy.png")

    # 2. acceptance vs draft entropy, binned with Wilson intervals
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    bins = a.acceptance_bins
    if bins:
        mids = [(b.low + b.high) / 2 for b in bins]
        ax.errorbar(mids, [b.rate for b in bins],
                    yerr=[[b.rate - b.ci_low for b in bins], [b.ci_high - b.rate for b in bins]],
                    xerr=[[m - b.low for m, b in zip(mids, bins)], [b.high - m for m, b in zip(mids, bins)]],
                    fmt="o-", capsize=3, label="binned acceptance (Wilson 95%)")
        total_n, total_k = sum(b.n for b in bins), sum(b.k for b in bins)
        ax.axhline(total_k / total_n, ls="--", color="gray", label=f"overall alpha {total_k / total_n:.3f}")
        for m, b in zip(mids, bins):
            ax.annotate(f"n={b.n}", (m, b.ci_low), textcoords="offset points", xytext=(0, -12), ha="center", fontsize=7)
    h2 = a.tests[1]
    ax.set_title(f"H2: r_pb = {_fmt(h2.effect)} [{_fmt(h2.ci_low)}, {_fmt(h2.ci_high)}], {h2.verdict}", fontsize=10)
    ax.set_xlabel("draft entropy (bits)")
    ax.set_ylabel("acceptance rate")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "acceptance_vs_draft_entropy.png", dpi=110)
    plt.close(fig)
    names.append("acceptance_vs_draft_entropy.png")

    # 3. per-category boxplots (clean prompts)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    cats = list(a.categories)
    for ax, key, label in ((axes[0], "alpha", "alpha (per prompt)"),
                           (axes[1], "mean_entropy_bits", "mean decode entropy (bits)")):
        data = [[r[key] for r in rows if r["category"] == c and r["variant"] == "clean" and _finite(r[key])]
                for c in cats]
        keep = [(c, d) for c, d in zip(cats, data) if d]
        if keep:
            ax.boxplot([d for _, d in keep])
            ax.set_xticks(range(1, len(keep) + 1), [c for c, _ in keep])
        ax.set_ylabel(label)
        ax.tick_params(axis="x", rotation=30)
    h3 = a.tests[2]
    fig.suptitle(f"H3: eta^2_H = {_fmt(h3.effect)}, Kruskal-Wallis p = {_p(h3.p_value)}, {h3.verdict}", fontsize=10)
    fig.tight_layout()
    fig.savefig(folder / "category_boxplots.png", dpi=110)
    plt.close(fig)
    names.append("category_boxplots.png")

    # 4. clean vs poisoned, one line per pair
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    for ax, key, label, t in ((axes[0], "context_health", "context health (0..10)", a.tests[3]),
                              (axes[1], "mean_entropy_bits", "mean decode entropy (bits)", a.tests[4])):
        for p in a.pairs:
            c, q = p[f"{key}_clean"], p[f"{key}_poisoned"]
            if _finite(c, q):
                ax.plot([0, 1], [c, q], "-o", color="tab:red" if q > c else "tab:blue", alpha=0.6)
        ax.set_xticks([0, 1], ["clean", "poisoned"])
        ax.set_xlim(-0.3, 1.3)
        ax.set_ylabel(label)
        ax.set_title(f"{t.name}: r_rb = {_fmt(t.effect)}, p(Holm) = {_p(t.p_holm)}, {t.verdict}", fontsize=10)
    fig.tight_layout()
    fig.savefig(folder / "clean_vs_poisoned.png", dpi=110)
    plt.close(fig)
    names.append("clean_vs_poisoned.png")
    return names


# --------------------------------------------------------------------------- summary.md


def summary_markdown(result: StudyResult, study: dict[str, Any]) -> str:
    """The experiment log a user reads: hypotheses, rule, verdicts with numbers, figures."""
    a, plan = result.analysis, result.plan
    s = plan.settings
    env = study["environment"]
    lines = [
        f"# Study: {s['model']} with draft {s['draft']}",
        "",
        "The lab's thesis: context quality shapes attention during prefill, attention shapes the model's "
        "confidence (entropy) during decode, and confidence decides how well speculative decoding works.",
        "",
        "## Set-up",
        "",
        f"- Prompts: {study['prompts']['n_prompts']} ({', '.join(f'{k} {v}' for k, v in study['prompts']['by_category'].items())}),"
        f" of which {study['prompts']['n_poisoned']} poisoned twins; file `{s['prompts_file']}`.",
        f"- Decoding: sampling at temperature {s['temperature']} (no top-k/top-p), seed {s['seed']} (each prompt's "
        f"seed derived from it and the prompt id), max_new_tokens {s['max_new_tokens']}; speculative decoding "
        f"with gamma {s['gamma']}, so alpha is the probabilistic acceptance rate (Leviathan et al. 2023).",
        f"- Model: {s['model']} on {s['device']} ({s['dtype']}); draft `{s['draft']}`.",
        f"- Wall time: {study['timing']['wall_s_total']:.1f} s for this run "
        f"({study['timing']['n_resumed']} prompts resumed from an earlier run; "
        f"{study['timing']['compute_s_prompts']:.1f} s of per-prompt compute in all).",
        f"- Versions: {', '.join(f'{k} {v}' for k, v in env['libraries'].items() if v)}; Python {env['python']}.",
        "",
        "## Pre-stated hypotheses and the verdict rule",
        "",
    ]
    for t in a.tests:
        lines.append(f"- **{t.name}**: {t.hypothesis} Test: {t.test}.")
    lines += [
        "",
        f"The five p-values are Holm-corrected together. With the effect oriented so the predicted direction "
        f"is positive: **supported** if corrected p < {ALPHA}, the effect is in the predicted direction and its "
        f"95% CI lies entirely on that side of 0; **not supported** if corrected p < {ALPHA} with the effect "
        f"in the opposite direction, or the CI's upper end is below the smallest effect of interest "
        f"({SMALLEST_EFFECT} for correlations and rank-biserial r, {SMALLEST_ETA_SQ} for eta^2_H); "
        f"**inconclusive** otherwise (including too little data).",
        "",
        "## Verdicts",
        "",
    ]
    lines += [f"- {test_line(t)}" for t in a.tests]
    h2 = a.tests[1]
    lines += [
        "",
        "Notes: H2 counts only drafted tokens the target tested "
        f"({h2.details.get('n_accepted', 'n/a')} accepted of {h2.n}); its p-value treats tokens as independent, "
        "its CI resamples whole prompts. H3 uses clean prompts only; H1 uses all prompts.",
    ]
    pw = a.tests[2].details.get("pairwise") or []
    sig = [r for r in pw if r["p_holm"] < ALPHA]
    if pw:
        lines += ["", f"H3 pairwise Mann-Whitney (Holm within {len(pw)} pairs): "
                  + ("; ".join(f"{r['a']} vs {r['b']}: r = {r['rank_biserial_r']:.2f}, p(Holm) = {_p(r['p_holm'])}"
                               for r in sig) if sig else "no pair differs at the corrected level") + "."]
    lines += ["", "## Per category (clean prompts)", "", "| category | n | median alpha | median mean entropy (bits) |",
              "|---|---|---|---|"]
    for cat, d in a.categories.items():
        lines.append(f"| {cat} | {d['n']} | {_fmt(d['median_alpha'])} | {_fmt(d['median_mean_entropy_bits'])} |")
    lines += ["", "## Figures", ""]
    for name, text in FIGURES.items():
        lines += [f"![{name}]({name})", "", text, ""]
    lines += ["## Files", "",
              "- `study.json`: settings, environment, timing, every test with its numbers and verdict.",
              "- `per_prompt.csv`: one row per prompt (prefill, decode and speculative figures).",
              "- `per_token.csv`: one row per drafted token (draft entropy, accepted, tested).", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the report


def study_document(result: StudyResult, wall_s_total: float) -> dict[str, Any]:
    """The content of study.json."""
    a = result.analysis
    env = environment()
    if result.info.get("model"):
        env["model"] = result.info["model"]
    env["draft"] = result.info.get("draft", result.plan.settings["draft"])
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
        "figures": FIGURES,
    }


def write_report(result: StudyResult, out: str | Path | None = None) -> Path:
    """Write ``<out>/<timestamp>-study/`` atomically (see the module docstring).

    Args:
        result: From :func:`lab.study.run_study`.
        out: Reports root; default the study config's ``out``.

    Returns:
        The report directory.

    Raises:
        FileExistsError: a report of the same second already exists.
    """
    root = Path(out) if out is not None else Path(result.plan.config.out)
    with report_dir(root, "study", name=f"{timestamp()}-study") as rd:
        rd.write_csv("per_prompt.csv", result.per_prompt, PER_PROMPT_FIELDS)
        rd.write_csv("per_token.csv", result.per_token, PER_TOKEN_FIELDS)
        write_plots(result, rd.path)
        # study.json last, so its wall time covers the plots too
        study = study_document(result, time.perf_counter() - result.started)
        rd.write_text("summary.md", summary_markdown(result, study))
        rd.write_json("study.json", study)
    return rd.path
