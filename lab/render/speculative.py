"""Rendering for speculative decoding: Rich replay, round table, acceptance panel, plots, summaries.

Consumes :class:`lab.speculative.SpeculativeResult` and the dict from
:func:`lab.speculative.bench.run_bench`; computes nothing new except formatting.
"""

from __future__ import annotations

import math
import unicodedata
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from lab.speculative.loop import SpeculativeResult
from lab.speculative.theory import expected_tokens_per_round, geometric_fit

STYLES = {
    "accepted": "green",
    "correction": "bold red",
    "bonus": "bold cyan",
    "early-stop": "magenta",
}


def visible(text: str) -> str:
    """Token text with control characters shown (``\\n`` -> ``⏎``); no Rich markup is interpreted.

    Unicode spaces (no-break space U+00A0 and the other ``Zs`` characters) show as a
    plain space, as they look in the answer; other unprintable characters as ``\\xNN``.
    """
    out = text.replace("\r", "␍").replace("\n", "⏎").replace("\t", "⇥")
    return "".join(ch if ch.isprintable() or ch in "⏎⇥␍" else " " if unicodedata.category(ch) == "Zs"
                   else f"\\x{ord(ch):02x}" for ch in out)


def _special_ids(tokenizer: Any) -> frozenset[int]:
    return frozenset(getattr(tokenizer, "all_special_ids", None) or ())


def _tok(tokenizer: Any, token_id: int) -> str:
    if tokenizer is None:
        return f"[{token_id}]"
    return visible(tokenizer.decode([token_id]))


def answer_text(tokenizer: Any, token_ids: list[int]) -> str:
    """The generated text as a user reads it: special tokens (``<|im_end|>``) kept in the ids, not shown."""
    if tokenizer is None:
        return " ".join(map(str, token_ids))
    return tokenizer.decode(token_ids, skip_special_tokens=True)


def replay_text(result: SpeculativeResult, tokenizer: Any) -> Text:
    """The generated text, each token styled by how it was produced; special tokens are not shown."""
    text = Text()
    special = _special_ids(tokenizer)
    for r in result.rounds:
        for t in r.proposed[: r.n_accepted]:
            if t not in special:
                text.append(_tok(tokenizer, t), style=STYLES["accepted"])
        if r.next_token is not None and r.next_token not in special:
            text.append(_tok(tokenizer, r.next_token), style=STYLES[r.next_kind])
        if r.stop_reason in ("entropy", "pmin"):
            text.append("¦", style=STYLES["early-stop"])
    return text


def legend() -> Text:
    t = Text("legend: ")
    t.append("accepted draft", style=STYLES["accepted"])
    t.append("  ")
    t.append("correction", style=STYLES["correction"])
    t.append("  ")
    t.append("bonus", style=STYLES["bonus"])
    t.append("  ")
    t.append("¦ adaptive early stop", style=STYLES["early-stop"])
    return t


# Short names for the next-token kind in the rounds table (legend in its caption).
NEXT_KIND_SHORT = {"correction": "corr", "bonus": "bonus"}


def round_table(result: SpeculativeResult, tokenizer: Any, max_rows: int = 40) -> Table:
    """One row per round, legible at 80 columns: tokens wrap between tokens, never inside one."""
    table = Table(title="rounds", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("proposed", ratio=3)
    table.add_column("kept", justify="right", no_wrap=True)
    table.add_column("next", ratio=1, min_width=12)
    table.add_column("stop", no_wrap=True)
    table.add_column("H bits", justify="right", no_wrap=True)
    table.add_column("ms d/v", justify="right", no_wrap=True)
    for r in result.rounds[:max_rows]:
        proposed = Text()
        for i, t in enumerate(r.proposed):
            if i:
                proposed.append(" ")
            proposed.append(_tok(tokenizer, t), style=STYLES["accepted"] if r.accepted_mask[i] else
                            ("strike dim" if r.tested_mask[i] else "dim"))
        nxt = Text("-") if r.next_token is None else Text(
            f"{NEXT_KIND_SHORT.get(r.next_kind, r.next_kind)} {_tok(tokenizer, r.next_token)}",
            style=STYLES[r.next_kind])
        h = (sum(r.draft_entropies) / len(r.draft_entropies)) if r.draft_entropies else float("nan")
        table.add_row(str(r.round), proposed, f"{r.n_accepted}/{len(r.proposed)}", nxt, r.stop_reason,
                      "-" if math.isnan(h) else f"{h:.2f}",
                      f"{r.draft_time_s * 1e3:.1f}/{r.verify_time_s * 1e3:.1f}")
    caption = ("proposed: green kept, struck rejected, dim untested; next: corr = correction, bonus = bonus "
               "token; H bits: mean draft entropy; ms d/v: draft / verify milliseconds")
    if len(result.rounds) > max_rows:
        caption += f"; {len(result.rounds) - max_rows} more rounds in rounds.csv"
    table.caption = caption
    table.caption_justify = "left"
    return table


def acceptance_summary(result: SpeculativeResult) -> dict[str, Any]:
    """The acceptance figures shown in the panel and written to summary.md / report.json."""
    fit = geometric_fit(result.accepted_length_histogram, result.alpha)
    expected = (expected_tokens_per_round(result.alpha, result.gamma)
                if not math.isnan(result.alpha) else float("nan"))
    return {
        "alpha": result.alpha, "tau": result.tau, "n_rounds": len(result.rounds), "n_drafted": result.n_drafted,
        "n_drafted_tested": result.n_drafted_tested, "n_accepted": result.n_accepted,
        "expected_tokens_per_round_at_alpha": expected,
        "accepted_length_histogram": result.accepted_length_histogram,
        "all_rounds_histogram": result.all_rounds_histogram,
        "geometric_expected": fit["expected"], "geometric_chi2": fit["chi2"], "geometric_p_value": fit["p_value"],
        "tokens": len(result.tokens), "tokens_per_s": result.tokens_per_s,
        "prefill_time_s": result.prefill_time_s, "draft_time_s": result.draft_time_s,
        "verify_time_s": result.verify_time_s, "overhead_time_s": result.overhead_time_s,
        "total_time_s": result.total_time_s, "stopped_by": result.stopped_by,
    }


def _fmt(x: Any, spec: str = ".3f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return format(x, spec)


def acceptance_panel(result: SpeculativeResult) -> Panel:
    s = acceptance_summary(result)
    lines = [
        f"alpha (accepted / tested)   {_fmt(s['alpha'])}   ({s['n_accepted']} / {s['n_drafted_tested']}; "
        f"{s['n_drafted']} drafted)",
        f"tau (tokens per round)      {_fmt(s['tau'], '.2f')}   (i.i.d. law at this alpha: "
        f"{_fmt(s['expected_tokens_per_round_at_alpha'], '.2f')})",
        f"accepted-length histogram   {s['accepted_length_histogram']}   (full-gamma rounds)",
        f"truncated geometric         [{', '.join(_fmt(e, '.1f') for e in s['geometric_expected'])}]   "
        f"chi-square p = {_fmt(s['geometric_p_value'], '.3g')}",
        f"time (s)                    prefill {s['prefill_time_s']:.3f}  draft {s['draft_time_s']:.3f}  "
        f"verify {s['verify_time_s']:.3f}",
        f"                            overhead {s['overhead_time_s']:.3f}  ({_fmt(s['tokens_per_s'], '.1f')} tokens/s)",
    ]
    return Panel("\n".join(lines), title=f"acceptance: {result.draft_name}, gamma={result.gamma}"
                 + (f", adaptive {result.adaptive}" if result.adaptive else ""), expand=False)


def render_speculation(result: SpeculativeResult, tokenizer: Any, console: Console) -> None:
    console.print(legend())
    console.print(Panel(replay_text(result, tokenizer), title="replay", expand=True))
    console.print(round_table(result, tokenizer))
    console.print(acceptance_panel(result))


def round_rows(result: SpeculativeResult, tokenizer: Any = None) -> list[dict[str, Any]]:
    """One CSV row per round."""
    rows = []
    for r in result.rounds:
        rows.append({
            "round": r.round, "n_proposed": len(r.proposed), "n_accepted": r.n_accepted,
            "n_tested": sum(r.tested_mask), "next_kind": r.next_kind, "next_token": r.next_token,
            "stop_reason": r.stop_reason, "proposed_ids": " ".join(map(str, r.proposed)),
            "proposed_text": "".join(_tok(tokenizer, t) for t in r.proposed) if tokenizer else "",
            "draft_entropies_bits": " ".join(f"{h:.4f}" for h in r.draft_entropies),
            "draft_time_s": r.draft_time_s, "verify_time_s": r.verify_time_s,
        })
    return rows


def plot_histogram(result: SpeculativeResult, path: str | Path) -> None:
    """Observed accepted-length counts vs the truncated geometric law at the measured alpha (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hist = result.accepted_length_histogram
    fit = geometric_fit(hist, result.alpha)
    ks = list(range(len(hist)))
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.bar([k - 0.2 for k in ks], hist, width=0.4, label="observed rounds")
    ax.bar([k + 0.2 for k in ks], fit["expected"], width=0.4, label=f"truncated geometric, alpha={_fmt(result.alpha)}")
    ax.set_xlabel("draft tokens accepted per round")
    ax.set_ylabel("rounds")
    ax.set_xticks(ks)
    ax.set_title(f"{result.draft_name}, gamma={result.gamma} (p = {_fmt(fit['p_value'], '.3g')})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary_markdown(result: SpeculativeResult, tokenizer: Any, *, prompt: str, model_info: dict[str, Any],
                     seed: int | None) -> str:
    s = acceptance_summary(result)
    text = answer_text(tokenizer, result.tokens)
    lines = [
        f"# lab speculate: {visible(prompt)[:80]}",
        "",
        f"- model: {model_info.get('model')} ({model_info.get('device')}, {model_info.get('dtype')})",
        f"- draft: {result.draft_name}; gamma = {result.gamma}; adaptive = {result.adaptive or 'off'}",
        f"- sampling: temperature {result.sampling.temperature}, top-p {result.sampling.top_p}, "
        f"top-k {result.sampling.top_k}; seed {seed}",
        f"- tokens: {s['tokens']} in {s['n_rounds']} rounds; stopped by {s['stopped_by']}",
        "",
        "## Acceptance",
        "",
        f"- alpha = {_fmt(s['alpha'])} ({s['n_accepted']} accepted of {s['n_drafted_tested']} tested; "
        f"{s['n_drafted']} drafted, untested ones after a rejection are not counted)",
        f"- tau = {_fmt(s['tau'], '.2f')} tokens per round; the i.i.d. law at this alpha predicts "
        f"{_fmt(s['expected_tokens_per_round_at_alpha'], '.2f')} (Leviathan et al. 2023, Eq. 1)",
        f"- accepted-length histogram (rounds that drafted all gamma tokens): {s['accepted_length_histogram']}; "
        f"truncated geometric expectation [{', '.join(_fmt(e, '.1f') for e in s['geometric_expected'])}], "
        f"chi-square p = {_fmt(s['geometric_p_value'], '.3g')} (small p: acceptances are not i.i.d.)",
        "",
        "`accepted_length.png` shows the observed histogram beside that law.",
        "",
        "## Time",
        "",
        f"- prefill {s['prefill_time_s']:.3f} s, draft forwards {s['draft_time_s']:.3f} s, verify forwards "
        f"{s['verify_time_s']:.3f} s, orchestration overhead {s['overhead_time_s']:.3f} s; total "
        f"{s['total_time_s']:.3f} s ({_fmt(s['tokens_per_s'], '.1f')} tokens/s). For speedups run `lab bench`.",
        "",
        "## Output",
        "",
        "```text",
        text.replace("```", "'''"),
        "```",
        "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- bench


def method_label(name: str) -> str:
    """Short method name for 80-column tables (:data:`METHOD_LEGEND` explains them)."""
    if name == "target-only (lab loop)":
        return "target lab"
    if name == "target-only (transformers generate)":
        return "target hf"
    if name.startswith("transformers assisted gamma="):
        return "hf assist g" + name.split("=", 1)[1]
    if name.startswith("speculative gamma="):
        rest = name[len("speculative gamma="):]
        gamma, _, adaptive = rest.partition(" adaptive=")
        return f"spec g{gamma}" + (f" {adaptive}" if adaptive else "")
    return name


METHOD_LEGEND = ("target lab / target hf: target-only decoding, the lab's KV-cache loop / transformers generate; "
                 "spec gN: the lab's speculative decoding at gamma=N (with its adaptive rule, if named); "
                 "hf assist gN: transformers' assisted generation at gamma=N")


def _bench_tables(bench: dict[str, Any]) -> tuple[Table, Table | None]:
    """Throughput of every method, and the speculative figures, each fitting 80 columns."""
    speed = Table(title=f"lab bench: draft {bench['draft']}", title_justify="left", box=box.SIMPLE_HEAD,
                  caption="tok/s: decode tokens/s, median and min-max over repeats; speedup: over target lab; "
                          "same: same tokens as target lab", caption_justify="left")
    speed.add_column("method", no_wrap=True)
    for col in ("tok/s", "min", "max", "speedup", "same"):
        speed.add_column(col, justify="right", no_wrap=True)
    spec = Table(title="speculative methods", title_justify="left", box=box.SIMPLE_HEAD,
                 caption="predicted: speedup from the measured alpha and step times; efficiency = speedup / "
                         "predicted; overhead: share of decode time outside forward passes", caption_justify="left")
    spec.add_column("method", no_wrap=True)
    for col in ("alpha", "tau", "predicted", "efficiency", "overhead"):
        spec.add_column(col, justify="right", no_wrap=True)
    for name, m in bench["methods"].items():
        t = m["tokens_per_s"]
        speed.add_row(method_label(name), _fmt(t["median"], ".1f"), _fmt(t["min"], ".1f"), _fmt(t["max"], ".1f"),
                      _fmt(m.get("measured_speedup"), ".2f"), "yes" if m["same_tokens_as_lab_target_loop"] else "NO")
        if "alpha" in m:
            spec.add_row(method_label(name), _fmt(m.get("alpha")), _fmt(m.get("tau"), ".2f"),
                         _fmt(m.get("speedup_predicted_from_measured_times"), ".2f"),
                         _fmt(m.get("efficiency"), ".2f"), _fmt(m.get("overhead_fraction"), ".1%"))
    return speed, (spec if spec.row_count else None)


def bench_table(bench: dict[str, Any]) -> Table:
    """The throughput table (see :func:`render_bench` for the full view)."""
    return _bench_tables(bench)[0]


def comparisons_panel(bench: dict[str, Any]) -> Panel:
    """The comparisons stated as measured (no pass/fail against internal targets)."""
    lines = [c["text"] for c in bench.get("comparisons", [])]
    for name, err in bench["assisted_errors"].items():
        lines.append(f"transformers refused {name}: {err}")
    return Panel("\n".join(lines) or "nothing to compare", title="comparisons", title_align="left")


def render_bench(bench: dict[str, Any], console: Console) -> None:
    from lab.machine import busy_warning

    speed, spec = _bench_tables(bench)
    console.print(speed)
    if spec is not None:
        console.print(spec)
    console.print(Text(METHOD_LEGEND, style="dim"))
    console.print(comparisons_panel(bench))
    warning = busy_warning(bench.get("machine_load") or {})
    if warning:
        console.print(Text(warning, style="bold yellow"))


def plot_bench(bench: dict[str, Any], path: str | Path) -> None:
    """Left: tokens/s per method (median, min-max bars). Right: speedup vs gamma, measured and predicted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = bench["methods"]
    names = list(methods)
    med = [methods[n]["tokens_per_s"]["median"] for n in names]
    lo = [m - methods[n]["tokens_per_s"]["min"] for n, m in zip(names, med)]
    hi = [methods[n]["tokens_per_s"]["max"] - m for n, m in zip(names, med)]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.8))
    a1.barh(range(len(names)), med, xerr=[lo, hi], color=["tab:gray" if "target-only" in n else
                                                          "tab:orange" if "assisted" in n else "tab:blue" for n in names])
    a1.set_yticks(range(len(names)))
    a1.set_yticklabels(names, fontsize=8)
    a1.invert_yaxis()
    a1.set_xlabel("tokens/s (median; bars: min-max over repeats)")
    fixed = [(m["gamma"], m) for n, m in methods.items() if "gamma" in m and not m.get("adaptive")]
    fixed.sort(key=lambda x: x[0])
    if fixed:
        gs = [g for g, _ in fixed]
        for key, label in (("measured_speedup", "measured"),
                           ("speedup_predicted_from_measured_times", "predicted: measured alpha, draft and verify times"),
                           ("speedup_theory_time_ratio", "Leviathan Thm 3.8, c from time"),
                           ("speedup_theory_flops", "Leviathan Thm 3.8, c from FLOPs")):
            a2.plot(gs, [m.get(key) if m.get(key) is not None else float("nan") for _, m in fixed], marker="o",
                    label=label)
        a2.axhline(1.0, color="black", lw=0.8, ls="--")
        a2.set_xlabel("gamma")
        a2.set_ylabel("speedup over target-only (lab loop)")
        a2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def bench_summary_markdown(bench: dict[str, Any], model_info: dict[str, Any]) -> str:
    from lab.machine import busy_warning

    cfg = bench["config"]
    load = bench.get("machine_load") or {}
    warning = busy_warning(load)
    lines = [
        "# lab bench: speculative decoding on this machine",
        "",
        *([f"> **{warning}**", ""] if warning else []),
        f"- model: {model_info.get('model')} ({model_info.get('device')}, {model_info.get('dtype')}); draft "
        f"{bench['draft']}; greedy; max_new_tokens {cfg['max_new_tokens']}; repeats {cfg['repeats']}; "
        f"mean prompt {bench['mean_prompt_tokens']:.0f} tokens",
        f"- one target decode step: {bench['target_step_s'] * 1e3:.2f} ms (lab loop)",
        *([f"- machine: {load['threads']} torch thread(s), {load['cpu_count']} CPUs; 1-minute load average up to "
           f"{_fmt(load['max_load_1m'], '.2f')} ({load['rule']}; per-method samples in report.json)"]
          if load else []),
        "",
        "| method | tok/s median (min-max) | speedup | alpha | tau | c (time) | c (FLOPs) | verify / step | "
        "predicted | Thm 3.8 (time c) | Thm 3.8 (FLOP c) | efficiency | overhead | breakeven alpha | same tokens |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in bench["methods"].items():
        t = m["tokens_per_s"]
        lines.append(
            f"| {name} | {_fmt(t['median'], '.1f')} ({_fmt(t['min'], '.1f')}-{_fmt(t['max'], '.1f')}) | "
            f"{_fmt(m.get('measured_speedup'), '.2f')} | {_fmt(m.get('alpha'))} | {_fmt(m.get('tau'), '.2f')} | "
            f"{_fmt(m.get('cost_ratio_time'))} | {_fmt(m.get('cost_ratio_flops'))} | "
            f"{_fmt(m.get('verify_over_target_step'), '.2f')} | "
            f"{_fmt(m.get('speedup_predicted_from_measured_times'), '.2f')} | "
            f"{_fmt(m.get('speedup_theory_time_ratio'), '.2f')} | {_fmt(m.get('speedup_theory_flops'), '.2f')} | "
            f"{_fmt(m.get('efficiency'), '.2f')} | {_fmt(m.get('overhead_fraction'), '.1%')} | "
            f"{_fmt(m.get('breakeven_alpha_time_ratio'))} | {'yes' if m['same_tokens_as_lab_target_loop'] else 'NO'} |")
    lines += ["", "## Comparisons", ""]
    lines += [f"- {c['text']}" for c in bench.get("comparisons", [])]
    for name, err in bench["assisted_errors"].items():
        lines.append(f"- transformers refused {name}: {err}")
    lines += [
        "",
        "## How to read this",
        "",
        "- *speedup*: decode tokens/s (prefill excluded) over the lab's own target-only loop.",
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
