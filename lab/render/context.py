"""Rendering of ``lab validate-context``: the figures table and summary.md of a
:class:`lab.health.context_validity.ContextValidation`, drawn as given."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from lab.health.context_validity import BAR, CHOSEN, CHOSEN_RULE, ContextValidation
from lab.kinds.validate_context import Figures
from lab.render.markdown import md_table
from lab.views.core import fmt

_COLS = ("measure", "dir", "AUROC", "95% interval", "length-only", "placebo", "rho(length)", "at ends", "passes")


def _cells(f: Figures) -> tuple[str, ...]:
    return (f.measure, "+" if f.direction > 0 else "-", f"{f.auroc:.2f}", f"{f.ci_low:.2f}-{f.ci_high:.2f}",
            f"{f.length_auroc:.2f}", f"{f.placebo_auroc:.2f}", f"{f.length_rho:+.2f}", f"{f.end_share:.0%}",
            "yes" if f.passes else "no")


def figures_table(v: ContextValidation) -> Table:
    """The chosen measure's figures first, then the raw candidates, today's health and the length-only control."""
    table = Table(title=f"Context measures on {v.chosen.n_pairs} {v.set_name} pairs ({v.profile})",
                  caption=f"bar: {BAR}" + ("; the chosen measure was fitted on these pairs (in-sample)"
                                           if v.fitted_here else ""))
    for col in _COLS:
        table.add_column(col, no_wrap=col == "measure")
    for f in (v.chosen, *v.others):
        table.add_row(*_cells(f))
    return table


def summary_markdown(v: ContextValidation) -> str:
    """summary.md of ``lab validate-context``."""
    ref = v.reference
    lines = [f"# Context measures on {v.set_name} pairs: {v.profile}", "",
             f"Pairs: {v.chosen.n_pairs} from `{v.items_file}`: one question per documented function, asked after "
             "its own docstring (relevant) and after another function's docstring within 5 % of its length "
             "(irrelevant); the labels come from the documentation's structure.", "",
             f"**Verdict: {v.verdict()}.**", "",
             f"The chosen measure (`{CHOSEN}`): {CHOSEN_RULE}. Heads (layer, head): "
             f"{', '.join(f'({a}, {b})' for a, b in ref.heads)}; length line {ref.intercept:+.4f} "
             f"{ref.slope:+.4f} ln(tokens); fitted on {ref.n_pairs} pairs ({v.reference_from}), leave-one-out "
             f"AUROC {ref.loo_auroc:.2f}.", "",
             f"The bar: {BAR}.", "",
             *md_table(_COLS, map(_cells, (v.chosen, *v.others))),
             "", "AUROC: the share of pairs whose relevant prompt scores above the irrelevant one (oriented by "
             "dir), with a bootstrap interval over pairs; length-only: the same for the context's token count; "
             "placebo: the measure with each pair's labels swapped by a seeded coin. `pairs.csv` holds every "
             "prompt's measures.", ""]
    return "\n".join(lines)


def reading_line(reading: Any) -> str:
    """One line: the reading (:func:`lab.views.core.fmt`, as ``summary.md`` and the page show it) and whether the
    measure passed validation on this model (with the record)."""
    r = reading.record
    head = (f"context measure {r['measure']}: {fmt(reading.value)} on {reading.n_context} context tokens "
            "(read on its own 24-token greedy continuation; higher = the context read more, for its length)"
            if reading.value is not None else
            f"context measure {r['measure']}: not measured on this model")
    why = r.get("unmeasurable")
    if why:
        return f"{head}; NOT VALIDATED here: {why}"
    return f"{head}; validated: {r['verdicts'].get('validation', '')}"


def print_context_reading(console: Any, reading: Any) -> None:
    """The ``--context`` line of ``lab sinks`` / ``lab entropy`` (:class:`lab.health.context_items.ContextReading`):
    in bold yellow where the measure is not validated on the model; nothing when no context was given."""
    if reading is not None:
        style = "bold yellow" if reading.record.get("unmeasurable") else None
        console.print(reading_line(reading), style=style, markup=False, highlight=False, soft_wrap=True)


def context_markdown(reading: Any) -> str:
    """``summary.md``'s section on the ``--context`` reading, with the measure's validity record ("" without)."""
    if reading is None:
        return ""
    r = reading.record
    value = fmt(reading.value) if reading.value is not None else "not measured (no fitted measure)"
    lines = ["", "## Context measure", "",
             f"- `{r['measure']}` of the context ({reading.n_context} tokens, placed before the prompt with a blank "
             f"line): **{value}**, read on the model's own 24-token greedy continuation teacher-forced (not this run's "
             "decode); higher = the context read more, for its length (`lab.health.context_validity`).",
             f"- Fitted measure: `{r.get('file')}`."]
    lines += [f"- Validity record ({name}): {line}." for name, line in r.get("verdicts", {}).items()]
    lines.append(f"- **Not validated on this model**: {r['unmeasurable']}. Read the value as a number, not as "
                 "how well the context is read." if r.get("unmeasurable") else
                 "- It passed the bar on the validation set (AUROC >= 0.75 against length-matched irrelevant "
                 "documentation).")
    return "\n".join(lines) + "\n"
