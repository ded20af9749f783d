"""Rendering a :class:`lab.sinks.prefill.PrefillAnalysis`: Rich terminal view, CSV rows, markdown, heatmap.

Token text is always added to Rich as plain ``Text`` (never parsed as markup), so a
prompt containing ``[bold]`` or ``<|im_start|>`` shows literally.
"""

from __future__ import annotations

import math
import unicodedata
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from lab.render import pyplot, save_figure
from lab.render.markdown import busy_lines, md_table
from lab.sinks.candidates import STATISTIC_LABEL
from lab.sinks.prefill import PrefillAnalysis
from lab.sinks.profiles import is_packaged
from lab.sinks.structure import ROLE_CONTENT

if TYPE_CHECKING:  # the report's module runs workers; the view only reads it
    from lab.bench.sinks import SinksBenchReport
    from lab.kinds.bench_sinks import Comparison

STYLE_STRUCTURAL = "cyan"
STYLE_STRUCTURAL_SINK = "bold black on cyan"
STYLE_CONTENT_SINK = "bold white on red"
STYLE_TAIL = "dim"

# A terminal cannot usefully show an 8k-token prompt: show its head and tail.
MAX_SHOWN_HEAD = 400
MAX_SHOWN_TAIL = 100
# report.json carries the [L, H, S] per-head scores up to this many numbers (~1,100
# tokens on SmolLM2); beyond, the heatmap PNG and positions.csv summarize them.
MAX_PER_HEAD_IN_JSON = 300_000


def visible(token: str) -> str:
    """Token text with newlines and tabs made visible, for tables and CSV."""
    return token.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


def prompt_text(a: PrefillAnalysis) -> Text:
    """The prompt, token by token: structural, structural sink, content sink, unobserved tail, other."""
    text = Text()
    s = len(a.tokens)
    shown = list(range(s)) if s <= MAX_SHOWN_HEAD + MAX_SHOWN_TAIL else \
        [*range(MAX_SHOWN_HEAD), -1, *range(s - MAX_SHOWN_TAIL, s)]
    for i in shown:
        if i < 0:
            text.append(f" … {s - MAX_SHOWN_HEAD - MAX_SHOWN_TAIL} tokens … ", style="dim italic")
            continue
        sink = bool(a.is_sink[i])
        if a.roles[i] != ROLE_CONTENT:
            style = STYLE_STRUCTURAL_SINK if sink else STYLE_STRUCTURAL
        elif sink:
            style = STYLE_CONTENT_SINK
        elif not bool(a.observed[i]):
            style = STYLE_TAIL
        else:
            style = ""
        token = a.tokens[i]
        text.append(token.replace("\n", "↵\n") if token else "∅", style=style)
    return text


def legend() -> Text:
    return Text.assemble("legend: ", ("structural", STYLE_STRUCTURAL), "  ", ("structural sink", STYLE_STRUCTURAL_SINK),
                         "  ", ("content sink", STYLE_CONTENT_SINK), "  ",
                         ("tail (too few observers to flag)", STYLE_TAIL), "  content")


# Sink levels table: at most this many positions, those holding in the most layers first.
MAX_LEVEL_ROWS = 12


def health_text(a: PrefillAnalysis) -> str:
    """The one context health as shown everywhere: ``"9.3 / 10"`` or ``"not measurable (why)"``."""
    if not math.isfinite(a.context_health):
        measure = a.health_measure
        if measure.endswith("_for_length") and measure.removesuffix("_for_length") not in (a.length_reference or {}):
            return ("not measurable (no length reference for this model: "
                    "`lab calibrate-health --model <profile> --save` makes one)")
        return "not measurable (no content token is seen by enough queries to judge)"
    return f"{a.context_health:.1f} / 10"


def health_meaning(a: PrefillAnalysis) -> str:
    """One line on what the analysis's health measure reads (:mod:`lab.health.measures`)."""
    measure = a.health_measure
    if measure.endswith("_for_length"):
        return (f"({measure}: how evenly the content's received attention spreads, against clean prompts of "
                "the same length on this model; 5 = typical, lab.health.measures)")
    return f"({measure}: how evenly the content's received attention spreads over it; lab.health.measures)"


def _file_text(path: str | None) -> str:
    """Which calibration file: the packaged one, or the user's / a given one by its path."""
    if path is None:
        return "file unknown"
    return "packaged" if is_packaged(path) else f"from {path}"


def threshold_text(a: PrefillAnalysis) -> str:
    """Where the threshold came from, said plainly (an uncalibrated model says so)."""
    rule = f"{STATISTIC_LABEL.get(a.statistic, a.statistic)} > {a.threshold:g}"
    if a.calibrated_for:
        return f"{rule} (calibrated for {a.calibrated_for}, {_file_text(a.calibration_file)})"
    if a.threshold_source == "given":
        return f"{rule} (given with --threshold)"
    return f"{rule}: NOT calibrated for this model (the default; run `lab calibrate-sinks` on a profile)"


def health_panel(a: PrefillAnalysis) -> Panel:
    n_content = sum(1 for i in a.content_positions if bool(a.observed[i]))
    h = a.context_health
    colour = "dim" if not math.isfinite(h) else "green" if h >= 8 else "yellow" if h >= 5 else "red"
    body = Text()
    body.append(health_text(a) + "\n", style=f"bold {colour}")
    body.append(health_meaning(a) + "\n", style="dim")
    if a.health_invalid:
        body.append(f"NOT a reading of the context on this model: {a.health_invalid}\n", style="bold red")
    body.append(f"content sinks: {len(a.content_sinks)} of {n_content} observed content tokens\n")
    body.append(f"structural sinks: {len(a.structural_sinks)} of {len(a.structural)} structural positions\n")
    body.append(f"attention on position 0: {a.position0_share:.1%} (mean over queries, layers, heads)\n")
    uncalibrated = a.calibrated_for is None and a.threshold_source != "given"
    body.append(f"threshold {threshold_text(a)}\n", style="bold yellow" if uncalibrated else "")
    body.append(f"sink rate epsilon {a.epsilon:g}; last {a.min_observers - 1} positions not flagged")
    return Panel(body, title="context health", expand=False)


def level_rows(a: PrefillAnalysis) -> list[dict[str, Any]]:
    """Sink levels across layers, positions holding in the most layers first (all of them)."""
    spans = sorted(a.layer_spans(), key=lambda r: (-r["n_layers"], r["position"]))
    return [{**r, "token": visible(a.tokens[r["position"]]), "role": a.roles[r["position"]],
             "sink_overall": bool(a.is_sink[r["position"]])} for r in spans]


def levels_table(a: PrefillAnalysis) -> Table:
    """Per position: from which layer to which it is a sink (per-layer z > threshold), and in how many layers."""
    n_layers = a.layer_scores.shape[0]
    rows = level_rows(a)
    t = Table(title=f"sink levels across {n_layers} layers", title_justify="left", box=box.SIMPLE_HEAD,
              caption_justify="left", caption=f"{a.statistic} per layer > the threshold; "
                                              f"{max(0, len(rows) - MAX_LEVEL_ROWS)} more in report.json")
    for col in ("pos", "token", "role", "layers", "n", "sink"):
        t.add_column(col, justify="left" if col in ("token", "role") else "right", no_wrap=col != "token",
                     overflow="fold")
    for r in rows[:MAX_LEVEL_ROWS]:
        t.add_row(str(r["position"]), Text(token_repr(a.tokens[r["position"]])),
                  ROLE_LABEL.get(r["role"], r["role"]), f"{r['first_layer']}-{r['last_layer']}",
                  f"{r['n_layers']}/{n_layers}", "yes" if r["sink_overall"] else "")
    return t


def token_repr(token: str) -> str:
    """``repr`` of a token for tables, Unicode spaces (no-break space U+00A0 ...) shown as a space, not ``\\xa0``."""
    return repr("".join(" " if unicodedata.category(ch) == "Zs" else ch for ch in token))


# Short role names for the 80-column positions table (its caption explains them).
ROLE_LABEL = {"system-default": "system"}


def _figures(a: PrefillAnalysis, i: int) -> tuple[str, str, str]:
    """Position ``i``'s mean attention received, robust z and sink rate, as the tables print them."""
    return f"{float(a.received[i]):.4f}", f"{float(a.robust_z[i]):.2f}", f"{float(a.sink_rate[i]):.2f}"


def positions_table(a: PrefillAnalysis, positions, title: str) -> Table:
    """One row per position, legible at 80 columns: short headers, a caption for the legend."""
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, caption_justify="left",
              caption="attn: mean attention received per observing query; z: robust z against content positions "
                      "seen by as many queries; rate: share of heads with attn > epsilon; role system: the "
                      "template's own system prompt; sink tail: too few observers to flag")
    for col, just in (("pos", "right"), ("token", "left"), ("role", "left"), ("attn", "right"),
                      ("z", "right"), ("rate", "right"), ("sink", "center")):
        t.add_column(col, justify=just, no_wrap=col != "token", overflow="fold")
    for i in positions:
        t.add_row(str(i), Text(token_repr(a.tokens[i])), ROLE_LABEL.get(a.roles[i], a.roles[i]), *_figures(a, i),
                  "yes" if bool(a.is_sink[i]) else ("-" if bool(a.observed[i]) else "tail"))
    return t


def sink_heads_text(a: PrefillAnalysis) -> Text:
    if not a.sink_heads:
        return Text("sink heads: none (no head puts more than epsilon on a flagged sink)")
    by_layer: dict[int, list[int]] = {}
    for layer, head in a.sink_heads:
        by_layer.setdefault(layer, []).append(head)
    n_layers, n_heads = a.per_head.shape[:2]
    t = Text(f"sink heads ({len(a.sink_heads)} of {n_layers * n_heads} with > {a.epsilon:g} "
             "of their attention per query on a flagged sink):\n")
    for layer in sorted(by_layer):
        heads = by_layer[layer]
        t.append(f"  layer {layer:>2}: " + (f"all {n_heads} heads" if len(heads) == n_heads
                                            else "heads " + ", ".join(map(str, heads))) + "\n")
    return t


def render_analysis(a: PrefillAnalysis, console: Console, *, model_name: str = "") -> None:
    """Print the highlighted prompt, the health panel, tables and sink heads."""
    console.print(Panel(Group(prompt_text(a), Text(""), legend()),
                        title=f"prompt ({len(a.tokens)} tokens){' - ' + model_name if model_name else ''}"))
    console.print(health_panel(a))
    console.print(positions_table(a, a.structural, "structural positions (fixed by the template)"))
    if a.content_sinks:
        console.print(positions_table(a, a.content_sinks, "content sinks"))
    else:
        console.print(Text("content sinks: none"))
    console.print(levels_table(a))
    console.print(sink_heads_text(a))


def position_rows(a: PrefillAnalysis) -> list[dict[str, Any]]:
    """One CSV row per position."""
    s = len(a.tokens)
    return [{
        "position": i, "token_id": int(a.input_ids[i]), "token": visible(a.tokens[i]), "role": a.roles[i],
        "received": float(a.received[i]), "score": float(a.score[i]), "z": float(a.robust_z[i]),
        "sink_rate": float(a.sink_rate[i]),
        "observers": s - i, "observed": bool(a.observed[i]), "is_sink": bool(a.is_sink[i]),
    } for i in range(s)]


def report_data(a: PrefillAnalysis) -> dict[str, Any]:
    """The analysis as JSON-ready data (per-position arrays and per-head scores included)."""
    return {
        "n_tokens": len(a.tokens),
        **{k: getattr(a, k) for k in ("threshold", "epsilon", "min_observers", "statistic", "threshold_source",
                                      "calibrated_for", "calibration_file")},
        "context_health": a.context_health,  # null: not measurable
        "context_health_measure": a.health_measure,
        "context_health_invalid": a.health_invalid,  # null: no failed validation stored for this model
        "content_sink_health": a.content_sink_health,
        "position0_share": a.position0_share,
        "layer_levels": level_rows(a),
        "layer_sinks": [torch_nonzero_list(row) for row in a.layer_sinks],  # per layer: its sink positions
        **{k: list(getattr(a, k)) for k in ("structural", "structural_sinks", "content_sinks")},
        "sink_heads": [list(p) for p in a.sink_heads],
        "input_ids": a.input_ids.tolist(),
        "tokens": list(a.tokens),
        "roles": list(a.roles),
        "received": a.received.tolist(),
        "score": a.score.tolist(),  # the detector's statistic (see "statistic")
        "z": a.robust_z.tolist(),
        **{k: getattr(a, k).tolist() for k in ("sink_rate", "is_sink", "observed")},
        "per_head_shape": list(a.per_head.shape),
        # [L, H, S]; omitted for long prompts (8,192 tokens would be ~40 MB of JSON)
        "per_head": a.per_head.tolist() if a.per_head.numel() <= MAX_PER_HEAD_IN_JSON else None,
    }


def torch_nonzero_list(row) -> list[int]:
    """Indices of the True entries of a bool ``[S]`` tensor."""
    return [int(i) for i in row.nonzero().flatten()]


def _md(token: str) -> str:
    return "`" + visible(token).replace("`", "'").replace("|", "\\|") + "`"


def summary_markdown(a: PrefillAnalysis, *, prompt: str, system: str | None, model_info: dict[str, Any]) -> str:
    """Human-readable summary.md."""
    lines = [
        "# Attention sinks (prefill)", "",
        f"- model: {model_info.get('model')} ({model_info.get('device')}, {model_info.get('dtype')})",
        f"- tokens: {len(a.tokens)}; system prompt: {'given' if system else 'template default (if any)'}",
        f"- context health: **{health_text(a)}** (lab.health.graded.graded_health, as in the study)"
        + (f"; **not a reading of the context on this model**: {a.health_invalid}" if a.health_invalid else ""),
        f"- attention on position 0: {a.position0_share:.1%} (mean over queries, layers, heads)",
        f"- threshold: {threshold_text(a)} on `{a.statistic}`; positions observed by < {a.min_observers} "
        "queries are not flagged",
        f"- structural sinks: {len(a.structural_sinks)}; content sinks: {len(a.content_sinks)}; "
        f"sink heads: {len(a.sink_heads)}",
        "", "## Structural positions", "",
        *md_table("pos | token | role | mean attn | z | sink rate | sink?",
                  [(i, _md(a.tokens[i]), a.roles[i], *_figures(a, i), "yes" if bool(a.is_sink[i]) else "")
                   for i in a.structural], "rllrrrc"),
        "", "## Content sinks", "",
        *(md_table("pos | token | mean attn | z | sink rate",
                   [(i, _md(a.tokens[i]), *_figures(a, i)) for i in a.content_sinks], "rlrrr")
          if a.content_sinks else ["None."]),
    ]
    levels = level_rows(a)
    lines += ["", f"## Sink levels across {a.layer_scores.shape[0]} layers", "",
              f"`{a.statistic}` computed per layer, above the threshold.", ""]
    lines += md_table("pos | token | role | first layer | last layer | layers | sink overall",
                      [(r["position"], _md(a.tokens[r["position"]]), r["role"], r["first_layer"], r["last_layer"],
                        r["n_layers"], "yes" if r["sink_overall"] else "") for r in levels[:50]],
                      "rllrrrc") if levels else ["None."]
    head = prompt if len(prompt) <= 500 else prompt[:500] + " …"
    lines += ["", "## Prompt", "", "```text", head.replace("```", "'''"), "```", ""]
    return "\n".join(lines)


def plot_heatmap(a: PrefillAnalysis, path) -> None:
    """Layer x position heatmap of received attention (mean over heads), log colour scale."""
    plt = pyplot()
    from matplotlib.colors import LogNorm

    data = a.received_per_layer.clamp_min(1e-6).numpy()  # [L, S]
    fig, ax = plt.subplots(figsize=(min(16, 4 + len(a.tokens) / 12), 5), constrained_layout=True)
    im = ax.imshow(data, aspect="auto", interpolation="nearest", cmap="magma",
                   norm=LogNorm(vmin=max(1e-6, float(data.min())), vmax=max(float(data.max()), 2e-6)))
    ax.set_xlabel("key position")
    ax.set_ylabel("layer")
    ax.set_title("attention received per observing query, mean over heads\n(squares: a sink in that layer)", fontsize=9)
    for i in range(len(a.tokens)):
        if bool(a.is_sink[i]):
            ax.axvline(i, color="red" if a.roles[i] == ROLE_CONTENT else "cyan", lw=0.6, alpha=0.6, ymax=0.03)
    layer, pos = (x.numpy() for x in a.layer_sinks.nonzero(as_tuple=True))  # flagged (layer, position) cells
    if layer.size:
        ax.scatter(pos, layer, s=6 if len(a.tokens) > 200 else 14, marker="s", facecolors="none",
                   edgecolors="lime", linewidths=0.6, label="sink in this layer")
        ax.legend(loc="upper right", fontsize=7)
    fig.colorbar(im, ax=ax, label="attention (log scale)")
    save_figure(fig, path, tight=False)


# --------------------------------------------------------------------------- benchmark


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def bench_table(data: SinksBenchReport) -> Table:
    """``lab bench-sinks``' table: one row per measurement, the capture against plain prefill as its caption.

    Each measurement is its worker's JSON dict (:func:`lab.bench.sinks.measure`), which has no type.
    """
    t = Table(title=f"sink capture benchmark ({data.model})", title_justify="left")
    for col in ("method", "tokens", "seconds", "peak beyond model"):
        t.add_column(col, justify="left" if col == "method" else "right", no_wrap=col != "seconds")
    names = {"sdpa": "plain SDPA prefill", "capture": "streaming capture", "eager": "eager output_attentions"}
    for r in data.results:
        cells = (Text(f"failed: {r['error']}"), "") if "error" in r else (f"{r['seconds']:.2f}", _gib(r["extra_bytes"]))
        t.add_row(names.get(r["mode"], r["mode"]), str(r["length"]), *cells)
    cmp_ = data.comparison
    if cmp_:
        t.caption = comparison_sentence(cmp_)
        t.caption_justify = "left"
    return t


def comparison_sentence(cmp_: Comparison) -> str:
    """The capture against plain prefill at the longest length, as measured."""
    return (f"At {cmp_.length} tokens the streaming capture takes {cmp_.time_ratio:.2f}x the plain prefill's "
            f"time and {_gib(cmp_.capture_extra_bytes)} beyond the model (plain: "
            f"{_gib(cmp_.plain_extra_bytes)}).")


def bench_markdown(data: SinksBenchReport) -> str:
    """``summary.md`` of ``lab bench-sinks``."""
    load = data.machine_load
    lines = ["# Sink capture benchmark", "", *busy_lines(load),
             f"- model: {data.model}",
             f"- machine: {data.environment.platform}, {data.environment.cpu_count} CPUs",
             "- each row ran in its own subprocess; memory is peak RSS beyond the loaded model (VmHWM - VmRSS)",
             f"- torch threads: {data.torch_threads}; 1-minute load average up to "
             f"{load.max_load_1m if load.max_load_1m is not None else float('nan'):.2f} ({load.rule})",
             "", *md_table("method | tokens | seconds | peak beyond model", align="lrrr")]
    for r in data.results:
        if "error" in r:
            lines.append(f"| {r['mode']} | {r['length']} | failed: {r['error']} | |")
        else:
            lines.append(f"| {r['mode']} | {r['length']} | {r['seconds']:.2f} | {_gib(r['extra_bytes'])} |")
    if data.comparison:
        lines += ["", comparison_sentence(data.comparison)]
    return "\n".join(lines) + "\n"
