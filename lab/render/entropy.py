"""Rendering a tracked decode: Rich terminal view, matplotlib figure, Markdown summary.

Consumes :class:`lab.tracker.TrackResult`; computes nothing about the model. Token
texts are put into Rich ``Text`` objects (never parsed as markup), so a token such
as ``[bold]`` or ``[/]`` prints as itself.

Colours follow the normalized entropy ``H / log2 V`` of the model's raw
distribution at each step (:data:`ENTROPY_BUCKETS`); normalizing makes the buckets
mean the same thing for models with different vocabulary sizes.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Sequence

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from lab.kinds.bench_tracker import Report as TrackerBenchReport
from lab.render import pyplot
from lab.render.console import print_busy
from lab.render.markdown import busy_lines, md_table
from lab.tracker.results import StepRecord, TrackResult


@dataclass(frozen=True)
class EntropyBucket:
    """A band of normalized entropy ``[previous upper, upper)`` with its colour."""

    upper: float
    label: str
    style: str  # a Rich colour name; the matplotlib colour is `mpl_color`
    mpl_color: str


# Upper bounds on normalized entropy H / log2 V. For SmolLM2 (V = 49152, log2 V =
# 15.6 bits) they are 1.6, 3.9 and 7.0 bits: below 0.10 the model is effectively
# certain (top token usually > 80 %), 0.10-0.25 a few plausible continuations,
# 0.25-0.45 a broad choice, above 0.45 close to guessing among hundreds of tokens.
ENTROPY_BUCKETS: tuple[EntropyBucket, ...] = (
    EntropyBucket(0.10, "confident", "green", "tab:green"),
    EntropyBucket(0.25, "a few options", "yellow", "gold"),
    EntropyBucket(0.45, "uncertain", "dark_orange", "tab:orange"),
    EntropyBucket(math.inf, "guessing", "red", "tab:red"),
)

# Unicode eighth blocks, lowest to highest, for the entropy-over-time strip.
SPARK_BLOCKS = "▁▂▃▄▅▆▇█"
# Longer decodes are folded into this many columns (each column shows its maximum,
# so a single uncertain step is never averaged away).
SPARK_WIDTH = 96


def bucket_for(normalized: float) -> EntropyBucket:
    """The bucket a normalized entropy falls into (NaN -> the last, most uncertain)."""
    for b in ENTROPY_BUCKETS:
        if normalized < b.upper:
            return b
    return ENTROPY_BUCKETS[-1]


def visible(text: str) -> str:
    """Token text with whitespace made visible, for tables (``\\n`` -> ``⏎``, any space, no-break included, -> ``·``)."""
    text = "".join("·" if unicodedata.category(ch) == "Zs" else ch for ch in text)
    return text.replace("\n", "⏎").replace("\t", "⇥") or "∅"


def sparkline(values: Sequence[float], *, hi: float | None = None, width: int = SPARK_WIDTH) -> str:
    """Unicode block sparkline of ``values`` scaled to ``[0, hi]`` (default: their maximum).

    More than ``width`` values are folded into ``width`` columns by taking each
    column's maximum. Empty input gives an empty string.
    """
    vals = [0.0 if not math.isfinite(v) else v for v in values]
    if not vals:
        return ""
    if len(vals) > width:
        edges = [round(i * len(vals) / width) for i in range(width + 1)]
        vals = [max(vals[a:b]) for a, b in zip(edges, edges[1:]) if b > a]
    top = hi if hi is not None else max(vals)
    if top <= 0:
        return SPARK_BLOCKS[0] * len(vals)
    n = len(SPARK_BLOCKS) - 1
    return "".join(SPARK_BLOCKS[min(n, max(0, int(round(v / top * n))))] for v in vals)


def coloured_text(result: TrackResult, special_ids: Collection[int] = ()) -> Text:
    """The generated text, each token styled by its entropy bucket (no markup parsing).

    Tokens in ``special_ids`` (``<|im_end|>`` and the like) stay in the ids and the
    tables but are not shown in the answer, as ``result.text`` leaves them out.
    """
    text = Text()
    for s in result.steps:
        if s.token_id not in special_ids:
            text.append(s.token_text, style=bucket_for(s.normalized_entropy).style)
    return text


def legend() -> Text:
    """One line naming each bucket's colour and its normalized-entropy range."""
    text = Text("legend: ", style="dim")
    lower = 0.0
    for b in ENTROPY_BUCKETS:
        rng = f"{lower:.2f}-{b.upper:.2f}" if math.isfinite(b.upper) else f">= {lower:.2f}"
        text.append(f"■ {b.label} ({rng})  ", style=b.style)
        lower = b.upper
    text.append("H / log2 V of the model's own distribution", style="dim")
    return text


def uncertain_table(result: TrackResult, n: int = 8) -> Table:
    """The ``n`` highest-entropy steps with the chosen token and its raw-distribution alternatives."""
    table = Table(title=f"Most uncertain tokens (top {n} by entropy)", title_justify="left")
    for col, justify in (("step", "right"), ("token", "left"), ("H bits", "right"), ("H/log2V", "right"),
                         ("p(chosen)", "right"), ("alternatives (p)", "left")):
        table.add_column(col, justify=justify)
    prompt_len = result.prompt_ids.shape[-1]
    for s in result.most_uncertain(n):
        alts = Text()
        for i, (_, alt_text, p) in enumerate(s.alternatives):
            alts.append(("  " if i else "") + f"{visible(alt_text)} {p:.2f}")
        style = bucket_for(s.normalized_entropy).style
        table.add_row(str(s.position - prompt_len), Text(visible(s.token_text), style=style),
                      f"{s.entropy_bits:.2f}", f"{s.normalized_entropy:.3f}", f"{s.chosen_prob:.2f}", alts)
    return table


def entropy_strip(result: TrackResult) -> Text:
    """The sparkline of per-step raw entropy, coloured by bucket, with its scale."""
    hs = [s.entropy_bits for s in result.steps]
    text = Text("entropy  ", style="dim")
    if not hs:
        return text
    hi = max(max(hs), 1e-9)
    if len(hs) <= SPARK_WIDTH:
        for s, ch in zip(result.steps, sparkline(hs, hi=hi)):
            text.append(ch, style=bucket_for(s.normalized_entropy).style)
    else:
        text.append(sparkline(hs, hi=hi))
    text.append(f"  0-{hi:.2f} bits over {len(hs)} steps", style="dim")
    return text


def settings_line(result: TrackResult) -> str:
    st = result.settings
    mode = "greedy" if not st.do_sample else (
        f"sampling T={st.temperature:g} top_p={st.top_p:g} top_k={st.top_k} seed={result.seed}")
    return f"{mode}, max_new_tokens={st.max_new_tokens}, stop={result.stop_reason}"


def render_result(result: TrackResult, console: Console, *, prompt: str | None = None, model_name: str = "",
                  special_ids: Collection[int] = ()) -> None:
    """Print the full terminal view of a tracked decode to ``console`` (stdout).

    ``special_ids``: token ids not shown in the answer (the tokenizer's ``all_special_ids``).
    """
    header = Text()
    if prompt is not None:
        header.append("prompt: ", style="bold")
        header.append(prompt + "\n")
    header.append(f"{model_name}  {settings_line(result)}", style="dim")
    console.print(Panel(Group(header, Text(""), coloured_text(result, frozenset(special_ids))), title="lab entropy", title_align="left"))
    console.print(legend())
    console.print(entropy_strip(result))
    summary = result.summary()
    console.print(
        f"mean H {summary['mean_entropy_bits']:.3f} bits · max {summary['max_entropy_bits']:.3f} · "
        f"var over steps {summary['var_entropy_bits']:.3f} bits² · mean varentropy "
        f"{summary['mean_varentropy_bits2']:.3f} bits²"
        + (f" · mean sampled H {summary['mean_sampled_entropy_bits']:.3f}" if result.settings.do_sample else "")
        + f" · {summary['n_steps']} tokens in {summary['elapsed_s']:.2f} s",
        markup=False, highlight=False,
    )
    console.print(uncertain_table(result))


def plot_entropy(result: TrackResult, path: str | Path) -> None:
    """Save a PNG of entropy over decode steps: raw H (points coloured by bucket), the
    sampled-from H when sampling, and bucket boundaries as dashed lines (in bits)."""
    plt = pyplot()

    steps = list(range(len(result.steps)))
    hs = [s.entropy_bits for s in result.steps]
    fig, ax = plt.subplots(figsize=(10, 3.6), dpi=120)
    try:
        ax.plot(steps, hs, color="0.5", linewidth=1, label="model H (T = 1)")
        ax.scatter(steps, hs, c=[bucket_for(s.normalized_entropy).mpl_color for s in result.steps], s=18, zorder=3)
        if result.settings.do_sample:
            ax.plot(steps, [s.sampled_entropy_bits for s in result.steps], color="tab:blue", linewidth=1,
                    linestyle="--", label="sampled-from H (after T, top-k, top-p)")
        if result.vocab_size > 1:
            log2_v = math.log2(result.vocab_size)
            ymax = max(hs + [0.0]) * 1.1 + 0.1
            for b in ENTROPY_BUCKETS[:-1]:
                if b.upper * log2_v <= ymax:
                    ax.axhline(b.upper * log2_v, color=b.mpl_color, linewidth=0.8, linestyle=":")
        ax.set_xlabel("decode step")
        ax.set_ylabel("entropy (bits)")
        ax.set_title(f"Next-token entropy per step ({settings_line(result)})", fontsize=9)
        ax.set_ylim(bottom=0)
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)


def _md_cell(text: str) -> str:
    return visible(text).replace("|", "\\|").replace("`", "\\`")


def summary_markdown(result: TrackResult, *, prompt: str, system: str | None, model_info: dict[str, Any],
                     plot_name: str = "entropy.png", n_uncertain: int = 10) -> str:
    """A readable experiment log: prompt, settings, summary statistics, uncertain tokens, plot."""
    st, summ = result.settings, result.summary()
    lines = [
        "# Entropy run", "",
        f"- **prompt**: {prompt}",
        f"- **system**: {system if system is not None else '(template default)'}",
        f"- **model**: {model_info.get('model')} ({model_info.get('source')}), device {model_info.get('device')}, "
        f"dtype {model_info.get('dtype')}",
        f"- **decoding**: {settings_line(result)}; temperature={st.temperature:g}, top_p={st.top_p:g}, "
        f"top_k={st.top_k}, seed={result.seed}",
        f"- **prompt tokens**: {result.prompt_ids.shape[-1]}, **generated**: {len(result.steps)}, "
        f"vocabulary V = {result.vocab_size}", "",
        "## Output", "", "```text", result.text, "```", "",
        "## Summary", "",
        "| statistic | value |", "|---|---|",
        f"| mean entropy (bits) | {summ['mean_entropy_bits']:.4f} |",
        f"| max entropy (bits) | {summ['max_entropy_bits']:.4f} |",
        f"| variance of entropy over steps (bits²) | {summ['var_entropy_bits']:.4f} |",
        f"| mean varentropy (bits²) | {summ['mean_varentropy_bits2']:.4f} |",
        f"| mean sampled-from entropy (bits) | {summ['mean_sampled_entropy_bits']:.4f} |",
        f"| decode time (s) | {summ['elapsed_s']:.3f} |", "",
        f"Entropy strip: `{sparkline([s.entropy_bits for s in result.steps])}`", "",
        f"## Most uncertain tokens (top {n_uncertain})", "",
        "| step | token | H (bits) | H / log2 V | p(chosen) | alternatives (p) |", "|---:|---|---:|---:|---:|---|",
    ]
    prompt_len = result.prompt_ids.shape[-1]
    for s in result.most_uncertain(n_uncertain):
        alts = ", ".join(f"`{_md_cell(t)}` {p:.3f}" for _, t, p in s.alternatives)
        lines.append(f"| {s.position - prompt_len} | `{_md_cell(s.token_text)}` | {s.entropy_bits:.3f} | "
                     f"{s.normalized_entropy:.3f} | {s.chosen_prob:.3f} | {alts} |")
    lines += ["", "## Entropy over time", "", f"![entropy over decode steps]({plot_name})", "",
              "Colours (normalized entropy H / log2 V): "
              + ", ".join(f"{b.label} < {b.upper:g}" if math.isfinite(b.upper) else b.label for b in ENTROPY_BUCKETS),
              ""]
    return "\n".join(lines)


_STEP_FIELDS = ("position", "token_id", "token_text", "entropy_bits", "normalized_entropy", "varentropy_bits2",
                "sampled_entropy_bits", "sampled_normalized_entropy", "chosen_prob")


def _step_dict(s: StepRecord) -> dict[str, Any]:
    """A step's figures (:data:`_STEP_FIELDS`) and its entropy bucket, shared by ``tokens.csv`` and ``report.json``."""
    return {**{k: getattr(s, k) for k in _STEP_FIELDS}, "bucket": bucket_for(s.normalized_entropy).label}


def step_rows(result: TrackResult) -> list[dict[str, Any]]:
    """One flat dict per step, for ``tokens.csv``."""
    prompt_len = result.prompt_ids.shape[-1]
    rows = []
    for s in result.steps:
        row = {"step": s.position - prompt_len, **_step_dict(s)}
        for i, (tid, text, p) in enumerate(s.alternatives, start=1):
            row[f"alt{i}_id"], row[f"alt{i}_text"], row[f"alt{i}_prob"] = tid, text, p
        rows.append(row)
    return rows


def step_dicts(steps: Sequence[StepRecord]) -> list[dict[str, Any]]:
    """Steps as JSON-ready dicts, alternatives as ``{"token_id", "token_text", "prob"}``."""
    return [{**_step_dict(s), "alternatives": [{"token_id": t, "token_text": x, "prob": p}
                                                for t, x, p in s.alternatives]} for s in steps]


# --------------------------------------------------------------------------- bench-tracker


def bench_rows(report: TrackerBenchReport) -> list[tuple[str, str]]:
    """``(measure, value)`` rows of a ``lab bench-tracker`` report, shared by the table and the markdown."""
    off, on = report.off_s, report.on_s
    return [
        ("tracker off: min / median / max (s)", f"{off.min:.3f} / {off.median:.3f} / {off.max:.3f}"),
        ("tracker on: min / median / max (s)", f"{on.min:.3f} / {on.median:.3f} / {on.max:.3f}"),
        ("overhead of medians", f"{report.overhead_pct_median:+.2f} %"),
        ("overhead of minima", f"{report.overhead_pct_min:+.2f} %"),
        ("median per-pair overhead", f"{report.overhead_pct_paired_median:+.2f} %"),
        ("decode step, tracker off (ms/token)", f"{report.per_token_ms_off:.2f}"),
        ("statistics alone (µs/step)", f"{report.statistics_us_per_step:.1f}"),
        ("statistics alone, % of a decode step", f"{report.statistics_pct_of_decode_step:.2f} %"),
        ("same tokens with and without tracker", "yes" if report.identical_tokens else "NO"),
    ]


def render_bench(report: TrackerBenchReport, console: Console) -> None:
    """Print the bench-tracker result table to ``console``."""
    model = report.model
    table = Table(title=Text(f"Tracker overhead: {model.model} on {model.device} ({model.dtype}), "
                             f"{report.repeats} alternating pairs x {report.tokens_per_run} tokens"),
                  title_justify="left")  # Text: a model path with brackets is not markup
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in bench_rows(report):
        table.add_row(Text(name), Text(value))
    console.print(table)
    console.print(Text(overhead_sentence(report)))
    print_busy(console, report.machine_load)


def overhead_sentence(report: TrackerBenchReport) -> str:
    """The measured overhead in words (medians, with the minima beside)."""
    return (f"The tracker adds {report.overhead_pct_median:+.2f} % to decode time (medians; "
            f"{report.overhead_pct_min:+.2f} % between the fastest runs), "
            f"{report.torch_threads} torch thread(s).")


def bench_markdown(report: TrackerBenchReport) -> str:
    """``summary.md`` of a bench-tracker run."""
    model, st = report.model, report.settings
    sampled = st.temperature > 0  # DecodeSettings.do_sample, of the settings as the report holds them
    mode = "greedy" if not sampled else f"sampling T={st.temperature:g} top_k={st.top_k} top_p={st.top_p:g}"
    load = report.machine_load
    lines = [
        "# Entropy tracker overhead", "",
        *busy_lines(load),
        f"- **model**: {model.model} on {model.device} ({model.dtype})",
        f"- **runs**: {report.repeats} alternating off/on pairs after one warm-up pair; "
        f"{report.tokens_per_run} new tokens each (EOS ignored), {mode}; prompt of "
        f"{report.prompt_tokens} tokens, V = {report.vocab_size}",
        f"- **machine**: {report.environment.platform}, {report.environment.cpu_count} CPUs, "
        f"torch threads {report.torch_threads}"
        + f"; 1-minute load average up to {load.max_load_1m:.2f} ({load.rule})", "",
        *md_table("measure | value", bench_rows(report), "lr"), "",
        overhead_sentence(report), "",
        "Times are wall-clock seconds of prefill + decode for one run. On a shared machine the",
        "spread (min to max) shows how much load noise there is; the statistics-alone line is",
        "measured without the model and is the tracker's own cost per step.", "",
        "Raw times per run: `report.json` (`times_s`).", "",
    ]
    return "\n".join(lines)
