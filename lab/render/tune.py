"""Rendering ``lab bench-tune``: the candidates ranked, the winner and where it was written.

Consumes a :class:`lab.kinds.bench.TuneReport`; computes nothing new.
"""

from __future__ import annotations

from lab.kinds.bench import TuneReport
from lab.numbers import number_text
from lab.render.markdown import busy_lines, md_table


def tune_summary_markdown(report: TuneReport) -> str:
    """``summary.md`` of a tuning run."""
    measured, machine = report.measured, report.machine
    lines = ["# lab bench-tune: the draft set-up for this machine", ""]
    for mode, bench in (("greedy", report.greedy), ("sampling", report.sampling)):
        lines += busy_lines(bench.machine_load, f"{mode}: ")
    cfg = report.configs["greedy"]
    lines += [
        f"- model {report.model.model}, draft {report.draft}; tuning prompts only: a code prompt and "
        f"HumanEval {report.humaneval} (never the held-back split); {cfg.max_new_tokens} new tokens, "
        f"{cfg.repeats} repeats per mode",
        f"- machine: {machine['cpu_model']}, {len(machine['cpu_flags'])} CPU flags, torch {machine['torch']}, "
        f"{machine['threads']} thread(s)",
        f"- rule: {measured['rule']}",
        f"- **winner: {measured['winner']}** (score {number_text(measured['score'], '.2f', keep_inf=True)}x"
        + ("" if measured["beats_target_alone"] else "; no candidate beat the target alone here") + ")",
        f"- written to `{report.tuning_file}`; `lab speculate` with this model and draft uses it on this machine",
        "",
        *md_table("rank | candidate | greedy e2e | sampling e2e | greedy decode-only | sampling decode-only | score",
                  [(i, name, *(number_text(measured["candidates"][name][key], ".2f", keep_inf=True) for key in (
                      "greedy_e2e_speedup", "sampling_e2e_speedup", "greedy_decode_speedup", "sampling_decode_speedup",
                      "score"))) for i, name in enumerate(measured["ranking"], 1)]),
    ]
    lines += ["", "Speedups: median over repeats, over the lab's target-only loop in the same repeat and mode.", ""]
    return "\n".join(lines)
