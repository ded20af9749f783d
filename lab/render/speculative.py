"""Rendering for speculative decoding: Rich replay, round table, acceptance panel, plots, summaries.

Consumes :class:`lab.speculative.results.SpeculativeResult` and the dict from
:func:`lab.bench.run.run_bench`; computes nothing new except formatting.
"""

from __future__ import annotations

import math
import unicodedata
from functools import partial
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from lab.numbers import number_text
from lab.render import pyplot, save_figure
from lab.speculative.results import SpeculativeResult

# This report's figures as text: an infinity (a rate over no measured time) written as ``inf``, as it always was.
_figure = partial(number_text, keep_inf=True)
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


def _tok(tokenizer: Any, token_id: int) -> str:
    if tokenizer is None:
        return f"[{token_id}]"
    return visible(tokenizer.decode([token_id]))


def token_texts(tokenizer: Any, result: SpeculativeResult) -> dict[int, str]:
    """Each token id the result emitted or proposed, with its text decoded alone (as the tokenizer gives it,
    whitespace kept), for the report page's token view; ``{}`` without a tokenizer."""
    if tokenizer is None:
        return {}
    ids = set(result.tokens).union(*(r.proposed for r in result.rounds))
    return {t: tokenizer.decode([t]) for t in sorted(ids)}


def answer_text(tokenizer: Any, token_ids: list[int]) -> str:
    """The generated text as a user reads it: special tokens (``<|im_end|>``) kept in the ids, not shown."""
    if tokenizer is None:
        return " ".join(map(str, token_ids))
    return tokenizer.decode(token_ids, skip_special_tokens=True)


def replay_text(result: SpeculativeResult, tokenizer: Any) -> Text:
    """The generated text, each token styled by how it was produced; special tokens are not shown."""
    text = Text()
    special = frozenset(getattr(tokenizer, "all_special_ids", None) or ())
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
    return Text.assemble("legend: ", ("accepted draft", STYLES["accepted"]), "  ", ("correction", STYLES["correction"]),
                         "  ", ("bonus", STYLES["bonus"]), "  ", ("¦ adaptive early stop", STYLES["early-stop"]))


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
        h = r.mean_draft_entropy
        table.add_row(str(r.round), proposed, f"{r.n_accepted}/{len(r.proposed)}", nxt, r.stop_reason,
                      "-" if math.isnan(h) else f"{h:.2f}",
                      f"{r.draft_time_s * 1e3:.1f}/{r.verify_time_s * 1e3:.1f}" + ("*" if r.prefill_positions else ""))
    caption = ("proposed: green kept, struck rejected, dim untested; next: corr = correction, bonus = bonus "
               "token; H bits: mean draft entropy; ms d/v: draft / verify milliseconds"
               + ("; * the verify pass that also prefilled the prompt" if any(r.prefill_positions for r in result.rounds)
                  else ""))
    if len(result.rounds) > max_rows:
        caption += f"; {len(result.rounds) - max_rows} more rounds in rounds.csv"
    table.caption = caption
    table.caption_justify = "left"
    return table


def acceptance_panel(result: SpeculativeResult) -> Panel:
    s = result.acceptance_summary()
    lines = [
        f"alpha (accepted / tested)   {_figure(s['alpha'])}   ({s['n_accepted']} / {s['n_drafted_tested']}; "
        f"{s['n_drafted']} drafted)",
        f"tau (tokens per round)      {_figure(s['tau'], '.2f')}   (i.i.d. law at this alpha: "
        f"{_figure(s['expected_tokens_per_round_at_alpha'], '.2f')})",
        f"accepted-length histogram   {s['accepted_length_histogram']}   (full-gamma rounds)",
        f"truncated geometric         [{', '.join(_figure(e, '.1f') for e in s['geometric_expected'])}]   "
        f"chi-square p = {_figure(s['geometric_p_value'], '.3g')}",
        f"time (s)                    prefill {s['prefill_time_s']:.3f}  draft {s['draft_time_s']:.3f}  "
        f"verify {s['verify_time_s']:.3f}",
        f"                            overhead {s['overhead_time_s']:.3f}  ({_figure(s['tokens_per_s'], '.1f')} tokens/s)",
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
    return [{
        "round": r.round, "n_proposed": len(r.proposed), "n_accepted": r.n_accepted,
        "n_tested": sum(r.tested_mask), "next_kind": r.next_kind, "next_token": r.next_token,
        "stop_reason": r.stop_reason, "proposed_ids": " ".join(map(str, r.proposed)),
        "proposed_text": "".join(_tok(tokenizer, t) for t in r.proposed) if tokenizer else "",
        "draft_entropies_bits": " ".join(f"{h:.4f}" for h in r.draft_entropies),
        "target_probs": " ".join(f"{p:.4g}" for p in r.target_probs),
        "draft_probs": " ".join(f"{q:.4g}" for q in r.draft_probs),
        "draft_time_s": r.draft_time_s, "verify_time_s": r.verify_time_s,
        "prefill_positions": r.prefill_positions, "draft_source": r.draft_source,
    } for r in result.rounds]


def plot_histogram(result: SpeculativeResult, path: str | Path) -> None:
    """Observed accepted-length counts vs the truncated geometric law at the measured alpha (PNG)."""
    plt = pyplot()

    hist = result.accepted_length_histogram
    fit = result.geometric_fit()
    ks = list(range(len(hist)))
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.bar([k - 0.2 for k in ks], hist, width=0.4, label="observed rounds")
    ax.bar([k + 0.2 for k in ks], fit["expected"], width=0.4, label=f"truncated geometric, alpha={_figure(result.alpha)}")
    ax.set_xlabel("draft tokens accepted per round")
    ax.set_ylabel("rounds")
    ax.set_xticks(ks)
    ax.set_title(f"{result.draft_name}, gamma={result.gamma} (p = {_figure(fit['p_value'], '.3g')})")
    ax.legend()
    save_figure(fig, path)


def summary_markdown(result: SpeculativeResult, tokenizer: Any, *, prompt: str, model_info: dict[str, Any],
                     seed: int | None) -> str:
    s = result.acceptance_summary()
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
        f"- alpha = {_figure(s['alpha'])} ({s['n_accepted']} accepted of {s['n_drafted_tested']} tested; "
        f"{s['n_drafted']} drafted, untested ones after a rejection are not counted)",
        f"- tau = {_figure(s['tau'], '.2f')} tokens per round; the i.i.d. law at this alpha predicts "
        f"{_figure(s['expected_tokens_per_round_at_alpha'], '.2f')} (Leviathan et al. 2023, Eq. 1)",
        f"- accepted-length histogram (rounds that drafted all gamma tokens): {s['accepted_length_histogram']}; "
        f"truncated geometric expectation [{', '.join(_figure(e, '.1f') for e in s['geometric_expected'])}], "
        f"chi-square p = {_figure(s['geometric_p_value'], '.3g')} (small p: acceptances are not i.i.d.)",
        "",
        "`accepted_length.png` shows the observed histogram beside that law.",
        "",
        "## Time",
        "",
        f"- prefill {s['prefill_time_s']:.3f} s, draft forwards {s['draft_time_s']:.3f} s, verify forwards "
        f"{s['verify_time_s']:.3f} s, orchestration overhead {s['overhead_time_s']:.3f} s; total "
        f"{s['total_time_s']:.3f} s ({_figure(s['tokens_per_s'], '.1f')} tokens/s). For speedups run `lab bench`.",
        "",
        "## Output",
        "",
        "```text",
        text.replace("```", "'''"),
        "```",
        "",
    ]
    return "\n".join(lines)
