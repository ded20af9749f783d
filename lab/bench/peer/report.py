"""``summary.md`` section for ``lab bench --peer llama.cpp`` (from the report's ``peer`` dict)."""

from __future__ import annotations

import math
from typing import Any


def _f(value: Any, fmt: str = ".2f", suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:{fmt}}{suffix}"


def peer_summary_markdown(peer: dict[str, Any]) -> str:
    """The llama.cpp section: version, binaries, per-method figures, the side-by-side
    decomposition and the exact command lines."""
    v = peer["version"]
    cal = peer["calibration"]
    lines = [
        "", "## llama.cpp on the same GGUF pair", "",
        f"llama.cpp {v['version']} (build {v['build_number']}, commit {v['commit']}), binaries in `{peer['binaries']}` "
        f"(from {peer['binaries_from']}); {peer['threads']} threads, greedy; target `{peer['target_gguf']}`, "
        f"draft `{peer['draft_gguf']}`. Prompt tokens: lab {peer['lab_prompt_tokens']}, llama.cpp "
        f"{sorted({n for m in peer['methods'].values() for n in m['prompt_tokens']})}. "
        f"llama.cpp's target-only text equals the lab's target-only tokens decoded: "
        f"{_f(peer['same_text_as_lab_target'], '')}.", "",
        "| method | tok/s end to end | decode tok/s | prompt tok/s | alpha | drafted | accepted | "
        "unaccounted (median) | speedup e2e | speedup decode | same text as its target-only |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, m in peer["methods"].items():
        lines.append(f"| {name} | {_f(m['tokens_per_s'])} | {_f(m['decode_tokens_per_s'])} | "
                     f"{_f(m['prompt_tokens_per_s'], '.1f')} | {_f(m.get('alpha'))} | {m.get('n_drafted', '-')} | "
                     f"{m.get('n_accepted', '-')} | {_f(m['unaccounted_pct_median'], '.1f', ' %')} | "
                     f"{_f(m.get('speedup_end_to_end'), suffix='x')} | {_f(m.get('speedup_decode'), suffix='x')} | "
                     f"{m.get('same_text_as_own_target_only', '-')} |")
    lines += [
        "", f"llama-bench, each model alone: target {_f(cal['target_generation_tokens_per_s'], '.1f')} tok/s, "
        f"draft {_f(cal['draft_generation_tokens_per_s'], '.1f')} tok/s, c = {_f(cal['cost_ratio_time'], '.3f')}.", "",
        "Each runtime against its own target alone (decode only; the lab's overhead is time outside forward "
        "passes, llama.cpp's 'unaccounted' is the target context's time outside its own passes, the draft's "
        "passes included):", "",
        "| gamma | runtime | alpha | speedup e2e | speedup decode | c | verify (target steps) | "
        "overhead / unaccounted | predicted (decode) | efficiency |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    shown: set[int] = set()
    for row in peer["side_by_side"]:
        lab, cpp = row["lab"], row["llama.cpp"]
        label = f"lab, {lab['method'].removeprefix('speculative ')}" if lab.get("method") else "lab (not run)"
        lines.append(f"| {row['gamma']} | {label} | {_f(lab['alpha'])} | {_f(lab.get('speedup_end_to_end'), suffix='x')} | "
                     f"{_f(lab['measured_speedup'], suffix='x')} | "
                     f"{_f(lab['cost_ratio_time'], '.3f')} | {_f(lab['verify_over_target_step'])} | "
                     f"{_f(lab['overhead_fraction'] and lab['overhead_fraction'] * 100, '.1f', ' %')} | "
                     f"{_f(lab['speedup_predicted_from_measured_times'], suffix='x')} | {_f(lab['efficiency'])} |")
        if row["gamma"] in shown:  # llama.cpp's row once per gamma
            continue
        shown.add(row["gamma"])
        lines.append(f"| {row['gamma']} | llama.cpp | {_f(cpp['alpha'])} | {_f(cpp['speedup_end_to_end'], suffix='x')} | "
                     f"{_f(cpp['speedup_decode'], suffix='x')} | "
                     f"{_f(cpp['cost_ratio_time'], '.3f')} | {_f(cpp['verify_over_target_step'])} | "
                     f"{_f(cpp['unaccounted_pct_median'], '.1f', ' %')} | "
                     f"{_f(cpp['speedup_predicted_from_measured_times'], suffix='x')} | {_f(cpp['efficiency'])} |")
    lines += ["", "Command lines (`PROMPT_FILE`: the prompt's chat-templated text, in `report.json`):", ""]
    lines += [f"- {name}: `{cmd}`" for name, cmd in peer["commands"].items()]
    return "\n".join(lines) + "\n"
