"""Rendering ``lab bench-seed-tables``: the seed's Part 3 figures beside the measured ones, row by row.

Consumes a :class:`lab.bench.seed_tables.SeedTablesReport` (with :func:`lab.bench.seed_tables.compare`'s
rows); computes nothing new. A figure that is not finite prints as "n/a" or "-" (as ``report.json``
holds it: None).
"""

from __future__ import annotations

import math
from typing import Any

from lab.bench.results import Spread
from lab.bench.seed_tables import SeedTablesReport
from lab.numbers import number_text
from lab.render.bench import spread_cell
from lab.render.markdown import busy_lines, md_table


def _range(pair: Any, fmt: str = ".1f", scale: float = 1.0) -> str:
    if not pair:
        return "-"
    return f"{number_text(pair[0] * scale, fmt, keep_inf=True)}-{number_text(pair[1] * scale, fmt, keep_inf=True)}"


def _pct(stats: Spread | None) -> str:
    if stats is None or not math.isfinite(stats.median):
        return "-"
    return (f"{number_text(stats.median * 100, '.1f')} % ({number_text(stats.min * 100, '.1f')}-"
            f"{number_text(stats.max * 100, '.1f')})")


def seed_tables_markdown(report: SeedTablesReport) -> str:
    """``summary.md`` of a ``lab bench-seed-tables`` run: both tables, the findings, the set-up and the passage's source."""
    cmp, cfg = report.comparison(), report.configs
    sweep_cfg, caching_cfg = cfg["gamma_sweep"], cfg["caching"]
    s = sweep_cfg.sampling
    lines = ["# lab bench-seed-tables: the seed's Part 3, rerun", ""]
    for part in ("gamma_sweep", "caching"):
        lines += busy_lines(report.benches[part].machine_load, f"{part}: ")
    lines += [
        f"- model {report.model.get('model')}, draft {report.draft}; sampling: temperature "
        f"{s.temperature:g}, top-p {s.top_p:g} (the seed's), seed {sweep_cfg.seed}, one per repeat and "
        "prompt, the same for every method",
        f"- passage: {report.passage['source']}, sha256 {report.passage['sha256'][:12]}…; the prompt asks for "
        f"a detailed summary of it ({report.prompt_tokens} prompt tokens with the chat template)",
        f"- torch threads {report.torch_threads}",
        "",
        f"## Gamma sweep: {sweep_cfg.max_new_tokens} new tokens, {sweep_cfg.repeats} repeats",
        "",
        "Lab figures: median (min-max) over repeats; speedup over the lab's target-only loop in the same repeat, "
        "end to end. The seed's: its min-max (mean).",
        "",
        *md_table("row | seed tok/s | lab tok/s | seed acceptance | lab alpha | seed speedup | lab speedup | "
                  "lab speedup decode-only"),
    ]
    for r in cmp["gamma_sweep"]:
        seed, lab = r["seed"], r["lab"]
        seed_acc = (f"{_range(seed.get('acceptance'), '.1f', 100)} % (mean {seed['acceptance_mean'] * 100:.1f} %)"
                    if seed.get("acceptance") else "-")
        seed_sp = f"{_range(seed.get('speedup'), '.2f')}x (mean {seed['speedup_mean']:.2f}x)" if seed.get("speedup") else "-"
        lines.append(f"| {r['row']} | {_range(seed.get('tokens_per_s'))} | {spread_cell(lab['tokens_per_s'], '.1f')} | "
                     f"{seed_acc} | {_pct(lab['acceptance']) if r['row'] != 'verifier-only' else '-'} | {seed_sp} | "
                     f"{spread_cell(lab['speedup'])} | {spread_cell(lab['decode_speedup'])} |")
    lines += [
        "",
        f"## Caching: {caching_cfg.max_new_tokens} new tokens, gamma {caching_cfg.gammas[0]}, "
        f"{caching_cfg.repeats} repeats",
        "",
        *md_table("row | seed | lab (median per run) | lab tok/s median (min-max) | lab rounds per run | lab alpha"),
    ]
    for r in cmp["caching"]:
        seed, lab = r["seed"], r["lab"]
        lines.append(f"| {r['row']} | {seed['tokens']} tokens in {seed['time_s']} s ({seed['tokens_per_s']} tok/s), "
                     f"{seed['rounds']} rounds | {number_text(lab['tokens_median'], '.0f')} tokens in "
                     f"{number_text(lab['time_s_median'], '.1f')} s | {spread_cell(lab['tokens_per_s'], '.1f')} | "
                     f"{number_text(lab['rounds_per_run'], '.1f')} | {number_text(lab['alpha'])} |")
    sp = cmp["speedup_from_caching"]
    lines += ["", f"Speedup from caching: seed {sp['seed']:.2f}x; lab {number_text(sp['lab_median_ratio'], '.2f')}x "
                  "(median tokens/s, cached over no-cache).", "", "## The seed's findings on this run", ""]
    for f in cmp["findings"]:
        lines.append(f"- {f['finding']}: **{'holds' if f['holds'] else 'does not hold'}** ({f['rule']}; measured "
                     f"{_measured(f['measured'])})")
    lines += ["", "A busy machine inflates and scatters times: read the findings of a run flagged busy as noise.", ""]
    return "\n".join(lines)


def _measured(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {number_text(v, '.2f')}x" for k, v in value.items())
    return f"{number_text(value, '.2f')}x"
