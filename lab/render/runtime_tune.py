"""Rendering ``lab bench-tune-runtime``: each runtime's figures, the winner and where it was written.

Consumes a :class:`lab.kinds.bench.RuntimeTuneReport` and its
:class:`lab.bench.runtime_tune.RuntimeTuneResult`; computes nothing new.
"""

from __future__ import annotations

from lab.bench.runtime_tune import RuntimeTuneResult
from lab.kinds.bench import RuntimeTuneReport
from lab.numbers import number_text
from lab.render.markdown import busy_lines, md_table


def runtime_tune_markdown(report: RuntimeTuneReport, result: RuntimeTuneResult) -> str:
    """``summary.md`` of a runtime tuning run: ``report``'s set-up, and ``result`` (what its ``result`` holds, as
    measured: typed, figures that are not finite as they are)."""
    machine = report.machine
    lines = [
        "# lab bench-tune-runtime: the runtime for this machine", "", *busy_lines(result.load),
        f"- model {report.model}, the target alone on the lab's loop, greedy; tuning prompts only: a code prompt "
        f"and HumanEval {report.humaneval} (never the held-back split); {report.max_new_tokens} new tokens, "
        f"{report.repeats} repeats, candidates alternating (order rotated each repeat)",
        f"- machine: {machine['cpu_model']}, {len(machine['cpu_flags'])} CPU flags, torch {machine['torch']}, "
        f"llama.cpp {machine['llama_cpp']}, {report.torch_threads} thread(s), max 1-minute load "
        f"{number_text(result.load.max_load_1m, '.2f', keep_inf=True)}",
        f"- rule: {result.rule}",
        f"- **winner: {result.winner}**",
        f"- written to `{report.tuning_file}`; lab entropy, speculate and bench run it on this machine when --runtime "
        "is not typed",
        "",
        *md_table("candidate | end to end tok/s (median) | decode tok/s (median) | prefill s per repeat (median) | "
                  "end to end per repeat",
                  [(label, *(number_text(x, ".2f", keep_inf=True) for x in (f.median_end_to_end, f.median_decode, f.median_prefill_s)),
                    ", ".join(number_text(v, ".2f", keep_inf=True) for v in f.end_to_end_tok_s))
                   for label, f in ((c, result.figures[c]) for c in result.candidates)], "lrrrl"),
    ]
    return "\n".join(lines) + "\n"
