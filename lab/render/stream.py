"""Rendering for ``lab stream``: Rich tables, summary.md, CSV rows and the rolling-NLL plot.

Consumes :class:`lab.stream.experiment.StreamResult`; computes nothing new except
formatting (rolling means, intervals and tests come from :mod:`lab.stream`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from lab.numbers import MISSING, number_text
from lab.render import pyplot, save_figure
from lab.render.markdown import md_table
from lab.stream.experiment import ROLLING_WIDTH, StreamResult
from lab.verdicts import INCONCLUSIVE, NULL_WORDS, SUPPORTED

# The pre-stated test's verdict (lab.verdicts.null_rejected) as the terminal says it: a rejection shouted.
TERMINAL_WORDS = {SUPPORTED: "REJECTS the null", INCONCLUSIVE: NULL_WORDS[INCONCLUSIVE]}


def _alpha(result: StreamResult, spec: str, mode: str) -> dict | None:
    return next((a for a in result.acceptance if a["policy"] == spec and a["mode"] == mode), None)


def _alpha_counts(a: dict | None) -> str:
    return f"{a['alpha']:.2f} ({a['n_accepted']}/{a['n_tested']})" if a else MISSING


def policy_rows(result: StreamResult) -> list[dict[str, Any]]:
    """One row per policy for ``policies.csv`` (summary plus acceptance counts)."""
    rows = []
    for s in result.summary:
        row = dict(s)
        for mode in ("greedy", "sampled"):
            a = _alpha(result, s["policy"], mode)
            row.update({f"{key}_{mode}": a[key] if a else None for key in ("alpha", "n_accepted", "n_tested")})
        rows.append(row)
    return rows


def token_rows(result: StreamResult, tokenizer: Any) -> list[dict[str, Any]]:
    """One row per target position for ``tokens.csv``: id, text and NLL (nats) per policy."""
    ids = result.input_ids.tolist()
    rows = []
    for t in range(1, len(ids)):
        row: dict[str, Any] = {"position": t, "token_id": ids[t], "token": tokenizer.decode([ids[t]])}
        for r in result.runs:
            v = r.nll[t - 1]
            row[f"nll_{r.policy.spec}"] = None if np.isnan(v) else float(v)
        rows.append(row)
    return rows


def _region(result: StreamResult) -> str:
    """Which targets the chunked PPL covers, in words: whole chunks only, the trailing partial one named."""
    first, last = result.config.eval_start, result.summary[0]["last_target"]
    n_targets = len(result.input_ids) - 1
    words = f"targets {first}..{last}, {last - first + 1} in whole chunks"
    if last < n_targets:
        words += f"; the last {n_targets - last} targets ({last + 1}..{n_targets}, a partial chunk) are left out"
    return words


def _ppl(s: dict) -> str:
    return f"{s['ppl']:.2f} [{s['ppl_low']:.2f}, {s['ppl_high']:.2f}]"


def _ratio(rc: dict) -> str:
    """The recompute check's PPL ratio with its interval."""
    return f"{rc['ratio']:.3f} [{rc['low']:.3f}, {rc['high']:.3f}]"


def render_stream(result: StreamResult, console: Console) -> None:
    """Policy table, the pre-stated test with its control, the recompute check and the benchmark."""
    cfg = result.config
    table = Table(title=f"Perplexity under KV-cache eviction ({_region(result)}; 95% bootstrap CI over "
                        f"{result.summary[0]['n_chunks']} chunks of {cfg.chunk_tokens})")
    for col in ("policy", "keys/query", "PPL [95% CI]", "x dense", "alpha greedy", "alpha sampled", "wall s",
                "peak MB"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for s in result.summary:
        ag, asa = _alpha(result, s["policy"], "greedy"), _alpha(result, s["policy"], "sampled")
        table.add_row(s["policy"], str(s["budget"] or "all"), _ppl(s), number_text(s.get("ratio_to_dense"), ".2f"),
                      number_text(ag["alpha"] if ag else None, ".2f"), number_text(asa["alpha"] if asa else None, ".2f"),
                      number_text(s["wall_s"], ".1f"), number_text(s["peak_rss_mb"], ".0f"))
    console.print(table)
    det = result.detection
    if det is not None:
        console.print(f"sink detector on the first {det.n_tokens} tokens: flagged {list(det.ranked)} (highest z "
                      "first); detected:K+W keeps up to K of them and gives spare slots to the window", markup=False)
    for t in result.tests:
        console.print(f"{t.name}: Wilcoxon one-sided p = {number_text(t.p_value, '.2g')} (alpha {t.alpha}), "
                      f"{TERMINAL_WORDS[t.verdict]}; "
                      f"{t.a} higher on {t.n_a_higher}/{t.n_pairs} chunks", markup=False)
    rc = result.recompute_check
    if rc:
        console.print(f"{rc['recompute']} / {rc['sinks']} PPL ratio {_ratio(rc)} on {rc['n_targets']} sampled targets: "
                      f"{'within' if rc['within'] else 'NOT within'} {rc['tolerance']:.0%}", markup=False)
    b = result.bench
    style = "yellow" if b["busy"] else "green"
    console.print(Panel(_bench_line(result), title="benchmark", border_style=style))


def _bench_line(result: StreamResult) -> str:
    b = result.bench
    n = len(result.input_ids)
    load = b["before"]["load_average"]
    line = (f"{len(result.runs)} policies over {n} tokens: {b['scoring_wall_s']:.1f} s scoring (sink detector "
            f"{b['detect_wall_s']:.1f} s, acceptance runs {b['acceptance_wall_s']:.1f} s); peak memory beyond "
            f"the model {b['peak_rss_beyond_model_mb']:.0f} MB; torch threads {b['before']['torch_threads']}, "
            f"load average {load[0]:.2f} (before) / {b['after']['load_average'][0]:.2f} (after) on "
            f"{b['before']['cpu_count']} cores.")
    if b["busy"]:
        line += " WARNING: the machine was busy; timings are not valid figures, re-take them on an idle machine."
    return line


def streamingllm_words(result: StreamResult) -> list[str]:
    """The lab's figures next to the shape of StreamingLLM's Table 1, in words."""
    by_kind: dict[str, dict] = {}
    for s in result.summary:
        key = s["kind"] if s["kind"] != "sinks" else f"sinks{s['policy'].split(':')[1].split('+')[0]}"
        by_kind.setdefault(key, s)
    out = ["StreamingLLM (Xiao et al. 2023, Table 1, Llama-2 on PG19 with a cache of ~1k tokens): window "
           "attention (0+W) reaches perplexities in the thousands; keeping 1 initial token mostly recovers; "
           "keeping 4 matches sliding-window re-computation."]
    w, s1, s4, rec = (by_kind.get(k) for k in ("window", "sinks1", "sinks4", "recompute"))
    h1 = next((t for t in result.tests if t.name.startswith("H1")), None)
    if w:
        ratio = w.get("ratio_to_dense") or float("nan")
        if ratio > 10:
            shape = "explodes, as in the paper"
        elif ratio > 1.1 and h1 is not None and h1.reject:
            shape = ("degrades clearly (same direction as the paper, by the pre-stated test), but by a factor "
                     "of a few, not the paper's thousands")
        elif ratio > 1.1 and h1 is None:
            shape = "degrades (the pre-stated test was not run: no sinks:4+W policy with the same W)"
        else:
            shape = "does not degrade clearly; the paper's shape is not reproduced on this text"
        out.append(f"Here, window ({w['policy']}): PPL {w['ppl']:.2f}, {ratio:.2f}x dense: it {shape}.")
    for s, n in ((s1, 1), (s4, 4)):
        if s:
            rec_share = s.get("window_excess_recovered")
            share = f"; it wins back {rec_share:.0%} of the window's excess log-perplexity" if rec_share is not None else ""
            out.append(f"{n} kept token{'s' if n > 1 else ''} ({s['policy']}): PPL {s['ppl']:.2f}, "
                       f"{number_text(s.get('ratio_to_dense'), '.2f')}x dense{share}.")
    rc = result.recompute_check
    if rec and rc:
        out.append(f"Recompute ({rec['policy']}) vs {rc['sinks']} on the oracle's {rc['n_targets']} targets: ratio "
                   f"{_ratio(rc)}, "
                   + ("within" if rc["within"] else "not within") + f" the stated {rc['tolerance']:.0%}.")
    return out


def summary_markdown(result: StreamResult, *, model_info: dict, text_source: str) -> str:
    """The human-readable report."""
    cfg = result.config
    n = len(result.input_ids)
    lines = ["# lab stream: KV-cache eviction and attention sinks", "",
             f"Model `{model_info.get('model')}` ({model_info.get('source')}), {model_info.get('dtype')} on "
             f"{model_info.get('device')}, attention `{model_info.get('attn_implementation')}`.",
             f"Text: {text_source}; first {n} tokens. Positions are the text's own (valid: the text fits the context).",
             "", "## Perplexity per policy", "",
             f"Evaluation region: {_region(result)} (from the largest budget on, every evicting "
             f"policy's cache is full); 95% BCa bootstrap CI over {result.summary[0]['n_chunks']} chunks of "
             f"{cfg.chunk_tokens} targets; 'PPL all targets' covers every scored target. `recompute` scores "
             f"one target in {cfg.recompute_every} (an exact fresh "
             "forward over its last W tokens each); its ratio to dense is on the same targets.", "",
             *md_table("policy | keys/query | PPL [95% CI] | x dense | PPL all targets | alpha greedy | "
                       "alpha sampled | wall s | peak MB",
                       [(f"`{s['policy']}`", s["budget"] or "all", _ppl(s), number_text(s.get("ratio_to_dense"), ".2f"),
                         number_text(s["ppl_all_targets"], ".2f"),
                         *(_alpha_counts(_alpha(result, s["policy"], mode)) for mode in ("greedy", "sampled")),
                         number_text(s["wall_s"], ".1f"), number_text(s["peak_rss_mb"], ".0f")) for s in result.summary],
                       "lrrrrrrrr")]
    det = result.detection
    if det is not None:
        lines += ["", f"Sink detector (lab.sinks.prefill's rule, z > {det.threshold}) on the first {det.n_tokens} tokens: "
                  f"flagged {list(det.ranked) or 'none'} (highest z first). `detected:K+W` keeps up to K of them "
                  "plus the most recent keys; slots the detector leaves unused go to the window, so the budget "
                  "equals `sinks:K+W`'s."]
    lines += ["", "## Pre-stated test", "",
              "Stated before the run: H1, `window:W` has higher NLL than `sinks:4+W` on the same chunks; one-sided "
              "Wilcoxon signed-rank over chunk means, false-positive rate "
              f"{result.tests[0].alpha if result.tests else 0.01} (reject when p < it). Negative control: the same "
              "test on `window:W` against itself with chunks paired at random (seeded); its null holds by "
              "construction, so it must not reject.", ""]
    for t in result.tests:
        lines.append(f"- {t.name}: p = {number_text(t.p_value, '.3g')}, W = {number_text(t.statistic, '.1f')}, "
                     f"{t.a} higher on {t.n_a_higher}/{t.n_pairs} chunks, median difference {t.median_diff:.3f} nats: "
                     f"**{NULL_WORDS[t.verdict]}**.")
    if not result.tests:
        lines.append("- not run: the policies do not include `window:W` and `sinks:4+W` with the same W.")
    rc = result.recompute_check
    if rc:
        lines += ["", f"Recompute check (stated in advance: within {rc['tolerance']:.0%}): `{rc['recompute']}` / "
                  f"`{rc['sinks']}` PPL ratio {_ratio(rc)} on "
                  f"{rc['n_targets']} targets: **{'within' if rc['within'] else 'not within'}**."]
    lines += ["", "## Side by side with StreamingLLM", ""] + [f"- {w}" for w in streamingllm_words(result)]
    if result.acceptance:
        a0 = result.acceptance[0]
        lines += ["", "## Acceptance under eviction", "",
                  f"Draft `{cfg.draft}`"
                  + (f" ({cfg.draft_weights} weights)" if cfg.draft_weights != "float32" else "")
                  + " sees only the policy's visible positions (its KV cache pruned after each "
                  f"commit); the target sees all. Prompt: the text's first {cfg.prompt_tokens} tokens; "
                  f"{cfg.max_new_tokens} new tokens, gamma {cfg.gamma}; greedy, and sampled at temperature "
                  f"{cfg.temperature} with seed {cfg.seed}. alpha = accepted / tested draft tokens (counts in the "
                  f"table). Greedy output is the target's own under every policy (lossless); `recompute` has no "
                  f"cache and is not run. Draft cache at the end: "
                  + ", ".join(f"{a['policy']} {a['draft_cache_size']}" for a in result.acceptance
                              if a["mode"] == "greedy") + f" entries (first run {a0['wall_s']:.1f} s)."]
        lines += acceptance_detail_lines(result)
    lines += ["", "## Benchmark", "", _bench_line(result),
              "Peak memory is the kernel's resident high-water mark during each policy, minus the RSS before it.",
              "", f"Files: `report.json`, `policies.csv`, `tokens.csv`, `rolling_nll.png` (trailing mean of "
              f"{ROLLING_WIDTH} targets, log scale).", ""]
    return "\n".join(lines)


def plot_rolling(result: StreamResult, path: str | Path) -> None:
    """Rolling NLL against position, one line per policy, log y scale (PNG)."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(9, 4.5))
    styles = ["-", "--", ":", "-."]  # policies that coincide (sinks:1 and sinks:4) stay visible
    for i, (spec, roll) in enumerate(result.rolling.items()):
        x = np.flatnonzero(~np.isnan(roll)) + 1
        style = "o-" if spec.startswith("recompute") else styles[i % len(styles)]
        ax.plot(x, roll[x - 1], style, label=spec, markersize=2, linewidth=1)
    ax.axvline(result.config.eval_start, color="grey", linestyle=":", linewidth=1)
    ax.set_yscale("log")
    ax.set_xlabel("target position (tokens)")
    ax.set_ylabel(f"NLL, nats (trailing mean of {ROLLING_WIDTH}; recompute: of its last 16 points)")
    ax.set_title("Rolling NLL under KV-cache eviction (dotted: start of the evaluation region)")
    ax.legend(fontsize=8)
    save_figure(fig, path, dpi=120)


def acceptance_detail_lines(result: StreamResult) -> list[str]:
    """Markdown: how greedy drafts' proposals differ from dense's, the large-sample top-1, what equal alphas mean."""
    acceptance = result.acceptance
    greedy = [a for a in acceptance if a["mode"] == "greedy"]
    if not greedy or "top1_n" not in greedy[0]:
        return []
    dense = next((a for a in greedy if a["policy"] == "dense"), None)
    lines = ["", f"Large-sample check (alpha above rests on {greedy[0]['n_tested']} tested tokens): one masked pass "
             f"of the draft over the prompt, at the {greedy[0]['top1_n']} positions where every cache is full. "
             "top-1 = target: the draft's argmax is the target's (a greedy draft token the target accepts); "
             "overlap: mean sum_x min(p, q), the expected acceptance of one sampled token.", "",
             *md_table("policy | greedy alpha | rounds with other proposals than dense | ... among tested tokens | "
                       "... with another accepted count | top-1 = target | top-1 = dense draft | overlap")]
    for a in greedy:
        cmp = (f"{a['rounds_proposals_differ']}/{a['rounds_compared']} | {a['rounds_tested_differ']} | "
               f"{a['rounds_accepted_differ']}") if "rounds_compared" in a else " | ".join([MISSING] * 3)
        same = MISSING if a["top1_agree_dense_draft"] is None else f"{a['top1_agree_dense_draft']}/{a['top1_n']}"
        lines.append(f"| `{a['policy']}` | {a['n_accepted']}/{a['n_tested']} | {cmp} | "
                     f"{a['top1_agree_target']}/{a['top1_n']} | {same} | {a['mean_overlap']:.3f} |")
    counts = {(a["n_accepted"], a["n_tested"]) for a in greedy}
    if len(greedy) > 1 and len(counts) == 1:
        n_acc, n_tested = next(iter(counts))
        evicting = [a for a in greedy if a["budget"] is not None]
        words = (f"Greedy alpha is the same ({n_acc}/{n_tested}) under every policy. The evicting drafts did evict "
                 "(cache sizes above)")
        changed = [a for a in evicting if a.get("rounds_proposals_differ")]
        if dense is not None and changed:
            words += (" and did propose other tokens ("
                      + ", ".join(f"`{a['policy']}` in {a['rounds_proposals_differ']} of {a['rounds_compared']} rounds"
                                  for a in changed) + ")")
            if all(a["rounds_accepted_differ"] == 0 for a in changed):
                words += (", but in no compared round did the accepted count change: each changed token was either "
                          "past the first rejection or a rejection under the dense draft too")
        lo, hi = result.greedy_top1_agree_range
        words += (f". The equal alphas are {n_tested} tested tokens too few to show a difference, not evidence of "
                  f"none: over {greedy[0]['top1_n']} prompt positions the drafts' top-1 matches the target's at "
                  f"{lo} to {hi} of them. Read the large-sample columns, not greedy alpha, for the effect of eviction.")
        lines += ["", words]
    sampled = [a for a in acceptance if a["mode"] == "sampled"]
    if sampled:
        lines += ["", f"Sampled alpha also rests on about {sampled[0]['n_tested']} tested tokens, along a path that "
                  "differs per policy once one draw differs; its large-sample expectation per token is the overlap "
                  "column: " + ", ".join(f"`{a['policy']}` sampled alpha {a['n_accepted']}/{a['n_tested']} vs overlap "
                                         f"{a['mean_overlap']:.3f}" for a in sampled) + "."]
    return lines
