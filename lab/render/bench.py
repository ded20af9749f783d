"""Rendering ``lab bench``: 80-column tables, the comparisons, the busy-machine warning, plot, summary.

Consumes :func:`lab.bench.run.run_bench`'s :class:`~lab.bench.results.BenchResult` and the whole
:class:`~lab.bench.results.BenchReport`, reading their attributes; computes nothing new except
formatting. A figure that is not finite prints as "n/a" (as ``report.json`` holds it: None).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from lab.bench.results import BenchReport, BenchResult, MethodFigures, Spread
from lab.numbers import number_text
from lab.render import pyplot, save_figure
from lab.render.console import print_busy
from lab.render.markdown import busy_lines, md_table
from lab.sampling import SamplingConfig


def _finite(x: Any) -> Any:
    """``x``, or None for a float that is not finite (NaN, +-inf): what ``report.json`` holds for it."""
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _spec(m: MethodFigures, figure: str) -> Any:
    """A speculative figure of ``m`` (a :class:`~lab.bench.results.SpeculativeFigures` field), None for
    a method that does not draft."""
    return None if m.speculative is None else getattr(m.speculative, figure)


def method_label(name: str) -> str:
    """Short method name for 80-column tables (:data:`METHOD_LEGEND` explains them)."""
    if name == "target-only (lab loop)":
        return "target lab"
    if name == "target-only (transformers generate)":
        return "target hf"
    if name.startswith("transformers assisted gamma="):
        return "hf assist g" + name.split("=", 1)[1]
    if name.startswith("speculative "):  # e.g. "speculative dynamic:4:12 adaptive=pmin:0.6 draft=bfloat16"
        rest = name[len("speculative "):]
        for long, short in (("gamma=", "g"), ("adaptive=", ""), ("draft=", ""), ("dynamic:", "dyn"),
                            ("bfloat16", "bf16"), ("float32", "f32"), ("float16", "f16")):
            rest = rest.replace(long, short)
        return "spec " + rest
    return name


METHOD_LEGEND = ("target lab / target hf: target-only decoding, the lab's KV-cache loop / transformers generate; "
                 "spec gN: the lab's speculative decoding at gamma=N (with its adaptive rule, if named; dynA:B a "
                 "dynamic gamma policy; bf16, f32, f32:bf16, per-pass: the draft's dtype); "
                 "hf assist gN: transformers' assisted generation at gamma=N")


def _same(value: Any) -> str:
    """The "same tokens" cell: yes / NO, or "-" in sampling mode (not compared)."""
    return "-" if value is None else ("yes" if value else "NO")


def sampling_text(sampling: SamplingConfig | None, seed: int | None) -> str:
    """``"greedy"`` or ``"sampling (temperature 0.7, top-p 0.9, top-k off; seed 0, ...)"``.

    Args:
        sampling: The bench's sampling (None or temperature 0: greedy).
        seed: The bench's base seed.
    """
    if sampling is None or not sampling.temperature:
        return "greedy"
    top_k = sampling.top_k
    return (f"sampling (temperature {sampling.temperature:g}, top-p {sampling.top_p:g}, "
            f"top-k {top_k if top_k else 'off'}; "
            f"seed {seed}, one seed per repeat and prompt, the same for every method)")


def _method_table(title: str, caption: str, columns: Sequence[str]) -> Table:
    """An 80-column table: the method's short name, then ``columns`` of figures, right-aligned and never wrapped."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, caption=caption, caption_justify="left")
    table.add_column("method", no_wrap=True)
    for col in columns:
        table.add_column(col, justify="right", no_wrap=True)
    return table


def _bench_tables(bench: BenchResult) -> tuple[Table, Table | None]:
    """Throughput of every method, and the speculative figures, each fitting 80 columns."""
    speed = _method_table(f"lab bench: draft {bench.draft}", "tok/s: end-to-end tokens/s, median and min-max over "
                          "repeats; speedup: decode tokens/s over target lab's; same: same tokens as target lab",
                          ("tok/s", "min", "max", "speedup", "same"))
    spec = _method_table("speculative methods", "predicted: speedup from the measured alpha and step times; "
                         "efficiency = speedup / predicted; overhead: share of decode time outside forward passes",
                         ("alpha", "tau", "predicted", "efficiency", "overhead"))
    for name, m in bench.methods.items():
        t = m.tokens_per_s
        speed.add_row(method_label(name), *(number_text(x, ".1f") for x in (t.median, t.min, t.max)),
                      number_text(_spec(m, "measured_speedup"), ".2f"), _same(m.same_tokens_as_lab_target_loop))
        s = m.speculative
        if s is not None:
            spec.add_row(method_label(name), number_text(s.alpha), number_text(s.tau, ".2f"),
                         number_text(s.speedup_predicted_from_measured_times, ".2f"),
                         number_text(s.efficiency, ".2f"), number_text(s.overhead_fraction, ".1%"))
    return speed, (spec if spec.row_count else None)


def _groups(bench: BenchResult) -> list[str]:
    """The prompt groups of a bench, "all" last (alone when there is one group)."""
    named = [g for g in (bench.by_group or {}) if g != "all"]
    return named + ["all"] if len(named) > 1 else ["all"]


def phase_table(bench: BenchResult) -> Table | None:
    """End-to-end and decode-only speedups over target lab, per prompt group (:mod:`lab.bench.phases`)."""
    by = bench.by_group or {}
    if not by:
        return None
    groups = [g for g in _groups(bench) if g != "all"] or ["all"]  # 80 columns: "all" is in summary.md
    short = {"humaneval": "HE", "grounded": "GR"}
    t = _method_table("speedup over target lab: end to end (e2e) and decode-only (dec), per prompt group",
                      "e2e: all time, prefill included; dec: after the first new token(s); see summary.md",
                      [f"{phase} {short.get(g, g)}" for g in groups for phase in ("e2e", "dec")])
    for name in by["all"]:
        cells = []
        for g in groups:
            row = by.get(g, {}).get(name, {})
            cells += [number_text(row.get("e2e_speedup"), ".2f"), number_text(row.get("decode_speedup"), ".2f")]
        t.add_row(method_label(name), *cells)
    return t


def comparisons_panel(bench: BenchResult) -> Panel:
    """The comparisons stated as measured (no pass/fail against internal targets)."""
    lines = [c.text for c in bench.comparisons]
    for name, err in bench.assisted_errors.items():
        lines.append(f"transformers refused {name}: {err}")
    return Panel("\n".join(lines) or "nothing to compare", title="comparisons", title_align="left")


def render_bench(bench: BenchResult, console: Console) -> None:
    """The terminal view: throughput, speculative figures, per-group speedups, the legend, the
    comparisons and, on a busy machine, the warning."""
    speed, spec = _bench_tables(bench)
    console.print(speed)
    if spec is not None:
        console.print(spec)
    phases = phase_table(bench)
    if phases is not None:
        console.print(phases)
    console.print(Text(METHOD_LEGEND, style="dim"))
    console.print(comparisons_panel(bench))
    for label, side in bench.sides.items():
        console.print(Text(f"{label}, in the same schedule (speedups against its own target alone)", style="bold"))
        for table in _bench_tables(side):
            if table is not None:
                console.print(table)
    print_busy(console, bench.machine_load)


def plot_bench(bench: BenchResult, path: str | Path) -> None:
    """Left: tokens/s per method (median, min-max bars). Right: speedup vs gamma, measured and predicted."""
    plt = pyplot()

    methods = bench.methods
    names = list(methods)
    med = [methods[n].tokens_per_s.median for n in names]
    lo = [m - methods[n].tokens_per_s.min for n, m in zip(names, med)]
    hi = [methods[n].tokens_per_s.max - m for n, m in zip(names, med)]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.8))
    a1.barh(range(len(names)), med, xerr=[lo, hi], color=["tab:gray" if "target-only" in n else
                                                          "tab:orange" if "assisted" in n else "tab:blue" for n in names])
    a1.set_yticks(range(len(names)))
    a1.set_yticklabels(names, fontsize=8)
    a1.invert_yaxis()
    a1.set_xlabel("tokens/s (median; bars: min-max over repeats)")
    fixed = [(m.speculative.gamma, m) for n, m in methods.items()
             if m.speculative is not None and not m.speculative.adaptive]
    fixed.sort(key=lambda x: x[0])
    if fixed:
        gs = [g for g, _ in fixed]
        for key, label in (("measured_speedup", "measured"),
                           ("speedup_predicted_from_measured_times", "predicted: measured alpha, draft and verify times"),
                           ("speedup_theory_time_ratio", "Leviathan Thm 3.8, c from time"),
                           ("speedup_theory_flops", "Leviathan Thm 3.8, c from FLOPs")):
            values = [_finite(_spec(m, key)) for _, m in fixed]
            a2.plot(gs, [v if v is not None else float("nan") for v in values], marker="o", label=label)
        a2.axhline(1.0, color="black", lw=0.8, ls="--")
        a2.set_xlabel("gamma")
        a2.set_ylabel("speedup over target-only (lab loop)")
        a2.legend(fontsize=8)
    save_figure(fig, path)


def _weights_note(weights: str | None) -> str:
    """``", weights q4"`` when the linear layers are not the loaded float weights, else ``""``."""
    return f", weights {weights}" if weights and weights != "float32" else ""


# summary.md's speculative columns: (SpeculativeFigures field, format)
_SUMMARY_FIGURES = (("measured_speedup", ".2f"), ("alpha", ".3f"), ("tau", ".2f"), ("cost_ratio_time", ".3f"),
                    ("cost_ratio_flops", ".3f"), ("verify_over_target_step", ".2f"),
                    ("speedup_predicted_from_measured_times", ".2f"), ("speedup_theory_time_ratio", ".2f"),
                    ("speedup_theory_flops", ".2f"), ("efficiency", ".2f"), ("overhead_fraction", ".1%"),
                    ("breakeven_alpha_time_ratio", ".3f"))


def bench_summary_markdown(bench: BenchResult, model_info: Mapping[str, Any]) -> str:
    """``summary.md``'s bench part: the set-up, every method's figures, the spreads over repeats,
    the per-group phases, the draft's passes and the comparisons.

    Args:
        bench: The result.
        model_info: The target's provenance (``model``, ``device``, ``dtype``, ``weights``; each may be missing).
    """
    cfg = bench.config
    load = bench.machine_load
    lines = [
        "# lab bench: speculative decoding on this machine",
        "",
        *busy_lines(load),
        f"- model: {model_info.get('model')} ({model_info.get('device')}, {model_info.get('dtype')}"
        f"{_weights_note(model_info.get('weights'))}); draft {bench.draft}; {sampling_text(cfg.sampling, cfg.seed)}; "
        f"max_new_tokens {cfg.max_new_tokens}; repeats {cfg.repeats}; "
        f"mean prompt {bench.mean_prompt_tokens:.0f} tokens",
        f"- one target decode step: {bench.target_step_s * 1e3:.2f} ms (lab loop)",
        *([f"- machine: {load.threads} torch thread(s), {load.cpu_count} CPUs; 1-minute load average up to "
           f"{number_text(load.max_load_1m, '.2f')} ({load.rule}; per-method samples in report.json)"]
          if load is not None else []),
        "",
        *md_table("method | tok/s median (min-max) | speedup | alpha | tau | c (time) | c (FLOPs) | verify / step | "
                  "predicted | Thm 3.8 (time c) | Thm 3.8 (FLOP c) | efficiency | overhead | breakeven alpha | "
                  "same tokens",
                  [(name, _median_range(m.tokens_per_s, ".1f"),
                    *(number_text(_spec(m, figure), spec) for figure, spec in _SUMMARY_FIGURES),
                    _same(m.same_tokens_as_lab_target_loop)) for name, m in bench.methods.items()]),
    ]
    lines += _spread_markdown(bench) + _phase_markdown(bench) + _passes_markdown(bench)
    lines += ["", "## Comparisons", ""]
    lines += [f"- {c.text}" for c in bench.comparisons]
    for name, err in bench.assisted_errors.items():
        lines.append(f"- transformers refused {name}: {err}")
    lines += [
        "",
        "## How to read this",
        "",
        "- *speedup* (first table): speculative methods' tokens/s after the target's prefill (the draft's prefill "
        "included) over the lab's own target-only loop's decode tokens/s; *tok/s* is end to end.",
        "- *end to end* / *decode-only* (per-group table): tokens/s over all the time, prefill included / after the "
        "first committed new token(s), over the same for the lab's target-only loop. The first tokens come from "
        "the prefill (target alone), the first round (the lab's speculative loop: target and draft prefill, one "
        "draft, one verify) or the first streamer chunk (transformers generate and assisted generation).",
        "- *predicted*: E[tokens per round] at the measured alpha (Leviathan et al. 2023, Eq. 1) times one target "
        "step, over gamma draft steps plus one measured verify pass of gamma + 1 tokens; the loop's ceiling.",
        "- *Thm 3.8*: the paper's formula, which assumes a verify pass costs one target step; *verify / step* "
        "shows how far that is from true here (on a CPU, a pass over gamma + 1 tokens costs more).",
        "- *efficiency* = speedup / predicted; *overhead* = share of decode time outside forward passes "
        "(bookkeeping, sampling, cache rollback).",
        "- *breakeven alpha*: the acceptance rate at which Thm 3.8 with the time ratio c gives speedup 1.",
        "",
        "`bench.png`: left, tokens/s per method; right, speedup against gamma, measured and predicted.",
        "",
    ]
    return "\n".join(lines)


def bench_report_markdown(report: BenchReport) -> str:
    """``summary.md`` of ``lab bench``: :func:`bench_summary_markdown`, then the process's peak memory,
    the draft's cost note and a llama.cpp peer's section, each when the report has it.

    Args:
        report: The report.
    """
    summary = bench_summary_markdown(report.bench, report.model)
    rss = report.environment["peak_rss_bytes"]
    if rss is not None:
        summary += (f"\n**Memory.** Peak RSS of this process (the target and the draft loaded, every lab method "
                    f"run): {rss / 2**30:.2f} GiB; a peer's processes are not included.\n")
    note = report.draft_cost.note if report.draft_cost is not None else None
    if note:
        summary += f"\n**Draft cost.** {note}.\n"
    for label, side in report.bench.sides.items():
        summary += (f"\n## {label}, in the same alternating schedule\n\nThe same prompts, budget and gammas on "
                    f"{label}, each of its runs between the main set-up's; its speedups are against its own "
                    "target alone.\n\n")
        summary += bench_summary_markdown(side, report.side_models.get(label, {}))
    if report.bench.peer is not None:
        summary += peer_markdown(report.bench.peer)
    return summary


def peer_markdown(peer: dict[str, Any]) -> str:
    """A llama.cpp peer's ``summary.md`` section (:func:`lab.bench.peer.report.peer_summary_markdown`).

    The peer's report has no type of its own yet: its section reads the JSON-ready form of its dict,
    as ``report.json`` holds it.
    """
    from lab.bench.peer.report import peer_summary_markdown
    from lab.reports import to_jsonable

    return peer_summary_markdown(to_jsonable(peer))


def spread_cell(stats: Spread | None, fmt: str = ".2f") -> str:
    """``"median (min-max)"`` of a spread, "-" when missing or its median is not finite."""
    return "-" if stats is None or _finite(stats.median) is None else _median_range(stats, fmt)


def _median_range(stats: Spread, fmt: str) -> str:
    return f"{number_text(stats.median, fmt)} ({number_text(stats.min, fmt)}-{number_text(stats.max, fmt)})"


def _spread_markdown(bench: BenchResult) -> list[str]:
    rows = [(name, *(spread_cell(m.per_repeat.get(key), spec) for key, spec in (
        ("e2e_tokens_per_s", ".2f"), ("decode_tokens_per_s", ".2f"), ("alpha", ".3f"), ("e2e_speedup", ".2f"),
        ("decode_speedup", ".2f")))) for name, m in bench.methods.items() if m.per_repeat]
    if not rows:
        return []
    return ["", "## Over repeats: median (min-max)", "",
            "Each repeat's figure pools its prompts; speedups divide by the lab's target-only loop in the same "
            "repeat.", "",
            *md_table("method | tok/s e2e | tok/s decode-only | alpha | speedup e2e | speedup decode-only", rows)]


def _phase_markdown(bench: BenchResult) -> list[str]:
    by = bench.by_group or {}
    if not by:
        return []
    rows = [(g, name, *(number_text(row[key], ".2f") for key in ("e2e_tokens_per_s", "e2e_speedup",
                                                                 "decode_tokens_per_s", "decode_speedup",
                                                                 "prefill_phase_s")), row["n_runs"])
            for g in _groups(bench) for name, row in by.get(g, {}).items()]
    return ["", "## End to end and decode-only, per prompt group", "",
            *md_table("group | method | tok/s e2e | speedup e2e | tok/s decode-only | speedup decode-only | "
                      "prefill phase s (mean) | runs", rows)]


def _passes_markdown(bench: BenchResult) -> list[str]:
    rows = [(name, shape, ", ".join(p["dtypes"]) or "-", p["n"], p["tokens"], number_text(p["time_s"], ".2f"),
             number_text(p["mean_s"], ".4f"))
            for name, m in bench.methods.items() for shape, p in (m.draft_passes or {}).items()]
    if not rows:
        return []
    return ["", "## Draft forward passes by shape", "",
            *md_table("method | pass shape | dtype | passes | tokens | total s | mean s", rows)]
