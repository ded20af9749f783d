"""Rendering of the context-health calibration: the candidates table and summary.md."""

from __future__ import annotations

from typing import Any

from rich.table import Table

_COLS = ("candidate", "props", "IQR", "SD", "distinct", "max tie", "below", "tied")


def _row(c: dict[str, Any], compact: bool = False) -> tuple[str, ...]:
    props = "all" if c["eligible"] else "fails " + ", ".join(k for k, v in c["properties"].items() if not v)
    if compact:
        props = "all" if c["eligible"] else f"{sum(not v for v in c['properties'].values())} fail"
    return (c["name"], props, f"{c['iqr']:.2f}", f"{c['std']:.2f}", f"{c['n_distinct']}/{c['n_pairs']}",
            f"{c['max_tie_share']:.0%}", f"{c['n_pairs_below']}/{c['n_pairs']}", f"{c['n_pairs_tied']}/{c['n_pairs']}")


def candidates_table(data: dict[str, Any]) -> Table:
    """The candidates' figures as a Rich table (clean calibration prompts; twins = poisoned variants)."""
    table = Table(title=f"Context-health candidates (chosen: {data['chosen']})",
                  caption="props: the five properties; below / tied: poisoned variants vs their clean twin")
    for col in _COLS:
        table.add_column(col, no_wrap=col == "candidate", overflow="fold")
    for c in data["candidates"]:
        table.add_row(*_row(c, compact=True))
    return table


def calibration_markdown(data: dict[str, Any]) -> str:
    """summary.md of ``lab calibrate-health``."""
    lines = [
        "# Context-health calibration", "",
        f"Model: {data['model'].get('model', '?')}. Prompts: {data['n_clean']} clean calibration prompts "
        f"({data['prompts_file']}) and one poisoned variant of each, built like the study's twins from the "
        f"distractors of {data['distractors_file']}.", "",
        f"**Rule (stated before the study's entropy was looked at):** {data['rule']}.", "",
        f"**Chosen: `{data['chosen']}`** ({data['decided_by']}).", "",
        "| " + " | ".join(_COLS) + " | median | range |", "|" + "---|" * (len(_COLS) + 2),
    ]
    for c in data["candidates"]:
        lines.append("| " + " | ".join(_row(c)) + f" | {c['median']:.2f} | {c['min']:.2f} to {c['max']:.2f} |")
    lines += ["", "IQR, SD, distinct values, median and range are over the clean calibration prompts (0..10 scale); "
              "'max tie' is the largest share of clean prompts sharing one value to 0.01; 'twins below' counts "
              "poisoned variants strictly below their clean twin.", "",
              "Files: `calibration.json` (rule, figures, per-prompt values), `prompts.csv`."]
    return "\n".join(lines) + "\n"
