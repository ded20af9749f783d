"""The page of a ``lab sinks`` report: attention received per position, per layer, and the context measure.

Drawn from ``report.json`` read as :class:`lab.kinds.sinks.Report`: its ``analysis``'s per-position
arrays (``tokens``, ``roles``, ``received``, ``is_sink``, ``observed``), ``layer_levels``,
``layer_sinks``, ``per_head`` ``[L, H, S]`` (None for long prompts) and the context health with
its validity record ``context_health_invalid``; with ``--context``, its ``context_measure``. Arrays
of different lengths (a damaged report) fall back to ``positions.csv``. Nothing is recomputed beyond a
mean over heads for the per-layer table (the same mean ``heatmap.png`` draws,
:meth:`lab.sinks.prefill.PrefillAnalysis.received_per_layer`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lab.kinds.sinks import Analysis, Report
from lab.ranges import COUNT, HEALTH, PROBABILITY
from lab.views.core import KindPage, Section, colour, figure, figure_problem, legend, render, text_colour
from lab.views.files import ReportFiles

ROLE_CONTENT = "content"  # lab.sinks.structure.ROLE_CONTENT; every other role is fixed by the template

# Bar chart geometry, in CSS pixels: one bar per position; a long prompt scrolls sideways.
BAR_STEP = 16
BAR_WIDTH = 12
PLOT_HEIGHT = 180
PLOT_LEFT = 56  # room for the axis labels
PLOT_TOP = 16  # room for the sink markers
LABEL_HEIGHT = 96  # room for the rotated token labels
LABEL_CHARS = 14  # a token label longer than this is cut (the tooltip has it whole)
# Attention received spans orders of magnitude (a sink takes ~0.5, a content token ~0.01), so the
# bars are on a log axis, as heatmap.png's colour scale is; values below the floor sit on it.
MIN_FLOOR = 1e-6
MAX_LEVEL_ROWS = 40  # positions in the per-layer table, those a sink in the most layers first


@dataclass(frozen=True)
class Position:
    """One prompt position as the report holds it."""

    index: int
    token: str
    role: str
    received: float
    is_sink: bool
    observed: bool

    @property
    def template(self) -> bool:
        """Whether the chat template fixes this position (any role but content)."""
        return self.role != ROLE_CONTENT


def visible(token: str) -> str:
    """Token text with newlines and tabs shown as escapes (as ``positions.csv`` writes it)."""
    return token.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


def _float(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _bool(x: Any) -> bool:
    return x is True or str(x).strip().lower() in ("true", "1", "yes")


def positions(files: ReportFiles, a: Analysis) -> list[Position]:
    """Every prompt position: from the analysis' arrays, else (arrays of different lengths: a damaged report) from
    ``positions.csv``; ``[]`` when neither holds one."""
    arrays = (a.tokens, a.roles, a.received, a.is_sink, a.observed)
    if len({len(x) for x in arrays}) == 1:
        return [Position(i, t, r, float(v), s, o) for i, (t, r, v, s, o) in enumerate(zip(*arrays))]
    rows = files.csvs.get("positions.csv") or []
    return [Position(int(_float(r.get("position", i))) if math.isfinite(_float(r.get("position", i))) else i,
                     r.get("token", ""), r.get("role", ""), _float(r.get("received")), _bool(r.get("is_sink")),
                     _bool(r.get("observed"))) for i, r in enumerate(rows)]


def _floor(values: list[float]) -> float:
    """The log axis' floor: the decade at or below the smallest positive value (at least :data:`MIN_FLOOR`)."""
    positive = [v for v in values if math.isfinite(v) and v > 0]
    if not positive:
        return 1e-3
    return max(MIN_FLOOR, 10.0 ** math.floor(math.log10(min(positive))))


def _share(value: float) -> float:
    """Attention received (a share of the queries' attention, in [0, 1]) where it can be one, else NaN: a chart
    draws no impossible bar (its tooltip says what the report holds)."""
    return math.nan if figure_problem(value, PROBABILITY, "attention received") else value


def chart(ps: list[Position]) -> dict[str, Any]:
    """Geometry of the bar chart: one bar per position on a log axis from the floor to 1."""
    floor = _floor([_share(p.received) for p in ps])
    decades = max(1, round(-math.log10(floor)))

    def y(v: float) -> float:
        v = min(1.0, max(floor, v)) if math.isfinite(v) else floor
        return PLOT_TOP + PLOT_HEIGHT * (-math.log10(v)) / decades

    base = PLOT_TOP + PLOT_HEIGHT
    bars = []
    for k, p in enumerate(ps):
        x = PLOT_LEFT + k * BAR_STEP + (BAR_STEP - BAR_WIDTH) / 2
        top = y(_share(p.received))
        shown = visible(p.token)
        bars.append({"p": p, "x": round(x, 1), "cx": round(x + BAR_WIDTH / 2, 1), "y": round(top, 1),
                     "h": round(max(1.0, base - top), 1), "label": shown if len(shown) <= LABEL_CHARS
                     else shown[:LABEL_CHARS - 1] + "…", "shown": shown or "∅",
                     "value": figure(p.received, PROBABILITY, "attention received", 4)})
    ticks = [{"y": round(y(10.0 ** -d), 1), "label": f"{10.0 ** -d:g}"} for d in range(decades + 1)]
    return {"bars": bars, "ticks": ticks, "base": base, "width": PLOT_LEFT + len(ps) * BAR_STEP + 8,
            "height": base + LABEL_HEIGHT, "left": PLOT_LEFT, "top": PLOT_TOP, "bar_width": BAR_WIDTH,
            "fill": colour(0.2), "floor": f"{floor:g}"}


def _health_value(a: Analysis) -> str:
    if a.context_health is None:
        return "not measurable"
    return f"{figure(a.context_health, HEALTH, 'context health', spec='.1f')} / 10"


def headline(a: Analysis, ps: list[Position]) -> str:
    """One line: the flagged sinks (each with its sink rate) of the positions, and the context measure."""
    rates = a.sink_rate
    sinks = [p for p in ps if p.is_sink]
    named = ", ".join(f"{p.index} {visible(p.token)!r}" + (f" (sink rate {figure(rates[p.index], PROBABILITY, 'a sink rate', spec='.2f')})"
                                                          if 0 <= p.index < len(rates) else "") for p in sinks[:3])
    more = f" and {len(sinks) - 3} more" if len(sinks) > 3 else ""
    line = f"{len(sinks)} sink{'s' if len(sinks) != 1 else ''} of {len(ps)} positions" + (
        f": {named}{more}" if sinks else "")
    health = f"context health {_health_value(a)}"
    if a.context_health_invalid:
        health += " (failed validation on this model: not a reading of the context)"
    return f"{line}; {health}"


def unobserved(min_observers: Any) -> str:
    """The chart's note on the last positions too few queries observe to flag (a position needs
    ``min_observers`` observing queries): ``""`` for none, a count that is no count said out of range.

    >>> unobserved(3), unobserved(None), unobserved(-7777.5)
    ('the last 2 positions have too few observers to flag', '', 'min_observers -7.78e+03 (out of range: a count must be an integer >= 0)')
    """
    if not min_observers:
        return ""
    if isinstance(min_observers, int) and not isinstance(min_observers, bool) and min_observers > 0:
        k = min_observers - 1
        return f"the last {k} position{'' if k == 1 else 's'} {'has' if k == 1 else 'have'} too few observers to flag"
    return f"min_observers {figure(min_observers, COUNT, 'a count')}"


def levels(a: Analysis, ps: list[Position]) -> dict[str, Any]:
    """The per-layer table: rows = positions a sink in some layer, cells = mean over heads per layer."""
    per_head = a.per_head
    n_layers = len(a.layer_sinks) or (len(per_head) if per_head else 0)
    flagged = [set(row) for row in a.layer_sinks]
    by_index = {p.index: p for p in ps}
    rows = []
    for lv in a.layer_levels[:MAX_LEVEL_ROWS]:
        pos = lv.position
        p = by_index.get(pos)
        cells = []
        for layer in range(n_layers):
            value = None
            if per_head and layer < len(per_head):
                heads = [h[pos] for h in per_head[layer] if 0 <= pos < len(h)]
                value = sum(heads) / len(heads) if heads else None
            bg = colour(None if figure_problem(value, PROBABILITY, "attention received") else value)
            cells.append({"layer": layer, "value": figure(value, PROBABILITY, "attention received"), "bg": bg, "fg": text_colour(bg),
                          "sink": layer < len(flagged) and pos in flagged[layer]})
        rows.append({"level": lv, "token": visible(p.token) if p else lv.token, "role": p.role if p else lv.role,
                     "cells": cells})
    return {"rows": rows, "n_layers": n_layers, "more": max(0, len(a.layer_levels) - MAX_LEVEL_ROWS),
            "has_values": per_head is not None, "legend": legend("0", "1")}


def page(files: ReportFiles, report: Report) -> KindPage:
    """The sinks page: received attention per position, sinks per layer, the context measure."""
    a = report.analysis
    ps = positions(files, a)
    sections = []
    covers = set()
    if ps:
        sections.append(Section("Attention received per position",
                                render("sinks_positions.html.j2", chart=chart(ps), a=a,
                                       unobserved=unobserved(a.min_observers),
                                       n_template=sum(p.template for p in ps),
                                       n_sinks=sum(p.is_sink for p in ps)), "positions"))
    lv = levels(a, ps)
    if lv["rows"] or "heatmap.png" in files.images:
        sections.append(Section("Per layer", render("sinks_layers.html.j2", lv=lv, a=a,
                                                    heatmap=files.images.get("heatmap.png")), "layers"))
        covers.add("heatmap.png")
    sections.append(Section("Context measure", render("sinks_context.html.j2", a=a, value=_health_value(a)),
                            "context"))
    if report.context_measure is not None:  # --context: the decode's reading of it, with the measure's validity record
        # The template draws lab entropy's record too, a report dict while that kind is not typed: the reading as JSON.
        sections.append(Section("Context reading", render("context_reading.html.j2", cm=report.context_measure,
                                                          context=report.context or ""),
                                "context-reading"))
    return KindPage(headline=headline(a, ps) if ps else "", sections=tuple(sections), covers=frozenset(covers))
