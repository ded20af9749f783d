"""The page of a ``lab entropy`` report: the answer's tokens coloured by uncertainty, entropy and varentropy per step.

Drawn from the typed report (:class:`lab.kinds.entropy.Report`): its ``steps`` (per generated token
``token_id``, ``token_text``, ``entropy_bits``, ``normalized_entropy`` = H / log2 V, ``varentropy_bits2``,
``chosen_prob``, ``alternatives``, raw distribution at T = 1) and its ``summary``. A report with no steps
falls back to ``tokens.csv`` (``alt<i>_id/_text/_prob`` columns); one with neither still draws a page,
saying what it lacks. Nothing is recomputed but what ``tokens.csv`` leaves out: ``entropy_bits / log2 V``
where its ``normalized_entropy`` is missing. Entropy is in bits, varentropy (the variance of the
surprisal) in bits².

``compare(a, b)`` aligns two runs' tokens (the rule is in :func:`align`) and colours the entropy
difference B - A on a diverging, colour-blind-safe scale (:data:`DIVERGING_MAP`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from lab.kinds import ShapeError
from lab.kinds.entropy import KIND as ENTROPY
from lab.kinds.entropy import Report, Summary
from lab.numbers import number_or_none
from lab.ranges import COUNT, ENTROPY_BITS, NONNEGATIVE, NORMALIZED_ENTROPY, PROBABILITY, SECONDS, VARENTROPY_BITS2, Range
from lab.views.core import (KindPage, Section, colour, figure_in, figure_problem, fmt, legend, render, table, text_colour, token_cell, token_inline)
from lab.views.files import ReportFiles
from lab.views.page import not_drawn

# A difference (B - A, either sign) needs a diverging scale: ColorBrewer's PuOr is colour-blind-safe
# and light in the middle, so "no difference" reads as no colour. (Kept here, not in lab.views.core,
# until a second kind needs it; core.colour takes any matplotlib map name.)
DIVERGING_MAP = "PuOr"
# Below this |B - A| (bits) the diverging scale is not stretched further: two runs that agree to a
# hundredth of a bit everywhere are shown as agreeing, not as maximal differences.
MIN_DIFF_SCALE_BITS = 0.01

# Chart geometry, in SVG user units (the SVG scales to the page's width).
CHART_WIDTH = 860
PANEL_HEIGHT = 130
CHART_LEFT = 64  # room for the y tick labels and the axis title
CHART_RIGHT = 12
CHART_TOP = 12
PANEL_GAP = 34  # between the entropy and the varentropy panel
CHART_BOTTOM = 40  # room for the x ticks and the axis title
MAX_X_TICKS = 12
Y_TICKS = 4  # about this many ticks per panel
MIN_AXIS_TOP = 0.1  # bits (bits²): a run certain at every step still gets a readable axis, not 0 to 1e-9
MAX_POINTS = 400  # a dot per step up to here; past it the dots hide the line and weigh on the page
ALTS_SHOWN = 10  # alternatives in a tooltip (reports keep 5 by default)

SUMMARY_FIELDS = (  # the summary's fields in the order the comparison lists them
    ("n_steps", "generated tokens"), ("stop_reason", "stopped on"), ("mean_entropy_bits", "mean entropy (bits)"),
    ("max_entropy_bits", "max entropy (bits)"), ("var_entropy_bits", "variance of entropy over steps (bits²)"),
    ("mean_varentropy_bits2", "mean varentropy (bits²)"),
    ("mean_sampled_entropy_bits", "mean sampled-from entropy (bits)"), ("elapsed_s", "decode time (s)"),
    ("tokens_per_s", "tokens per second"),
)
# Each figure the page prints, with its physical range (lab.ranges) and its name in an out-of-range note; an
# entropy is also held to the report's log2 V (entropy_top).
FIGURE_RANGES: dict[str, tuple[Range, str]] = {
    "n_steps": (COUNT, "a token count"), "mean_entropy_bits": (ENTROPY_BITS, "entropy"),
    "max_entropy_bits": (ENTROPY_BITS, "entropy"), "var_entropy_bits": (VARENTROPY_BITS2, "a variance"),
    "mean_varentropy_bits2": (VARENTROPY_BITS2, "varentropy"), "mean_sampled_entropy_bits": (ENTROPY_BITS, "entropy"),
    "elapsed_s": (SECONDS, "a time"), "tokens_per_s": (NONNEGATIVE, "a speed"), "temperature": (NONNEGATIVE, "a temperature"),
    "seed": (COUNT, "a seed"), "vocab_size": (COUNT, "a vocabulary size"),
    "entropy_bits": (ENTROPY_BITS, "entropy"), "sampled_entropy_bits": (ENTROPY_BITS, "entropy"),
    "normalized_entropy": (NORMALIZED_ENTROPY, "H / log2 V"), "varentropy_bits2": (VARENTROPY_BITS2, "varentropy"),
    "chosen_prob": (PROBABILITY, "a probability"), "prob": (PROBABILITY, "a probability"),
}


@dataclass(frozen=True)
class Step:
    """One generated token as the report holds it (a missing figure is None).

    Attributes:
        step: 0-based decode step.
        token_id: The chosen token's id (None when the report has none).
        text: Its text as decoded (special tokens kept).
        entropy_bits: Entropy of the raw next-token distribution, bits.
        normalized: ``entropy_bits / log2 V`` in [0, 1].
        varentropy_bits2: Variance of the surprisal, bits².
        sampled_entropy_bits: Entropy of the distribution sampled from (after T, top-k, top-p), bits.
        chosen_prob: The chosen token's raw probability.
        alternatives: ``(token_id, text, prob)`` of the raw top-k, most likely first.
    """

    step: int
    token_id: int | None
    text: str
    entropy_bits: float | None
    normalized: float | None
    varentropy_bits2: float | None
    sampled_entropy_bits: float | None
    chosen_prob: float | None
    alternatives: tuple[tuple[int | None, str, float | None], ...] = ()


def _int(x: Any) -> int | None:
    v = number_or_none(x)
    return int(v) if v is not None else None


def entropy_top(report: Report) -> tuple[float, str] | None:
    """The most an entropy can be in this report, log2 V, with its words (``"log2 V = 15.9 bits"``); None when
    the report's vocabulary size V is not > 1."""
    vocab = number_or_none(report.vocab_size)
    if vocab is None or vocab <= 1:
        return None
    top = math.log2(vocab)
    return top, f"log2 V = {fmt(top)} bits"


def shown(key: str, value: Any, top: tuple[float, str] | None = None, digits: int = 3, spec: str = "") -> str:
    """A figure of :data:`FIGURE_RANGES` as the page prints it (:func:`lab.views.core.figure_in`); an entropy is held
    to ``top`` (:func:`entropy_top`) too. A key with no range is printed as :func:`lab.views.core.fmt` does."""
    return figure_in(FIGURE_RANGES, key, value, digits, spec, top)


def plotted(key: str, value: float | None, top: tuple[float, str] | None = None) -> float | None:
    """``value`` where it can be the figure ``key``, else None: a chart draws no impossible point (its table says
    what it was)."""
    rng, what = FIGURE_RANGES[key]
    return None if figure_problem(value, rng, what, top if rng is ENTROPY_BITS else None) else value


def read_steps(files: ReportFiles, report: Report) -> tuple[list[Step], str]:
    """The run's steps and where they came from (``"report.json"``, ``"tokens.csv"`` when the report has no steps,
    or ``""`` for none)."""
    if report.steps:  # float(): a figure written as an integer (0) is drawn as the float it is, as the CSV's are
        return [Step(step=i, token_id=s.token_id, text=s.token_text, entropy_bits=float(s.entropy_bits),
                     normalized=float(s.normalized_entropy), varentropy_bits2=float(s.varentropy_bits2),
                     sampled_entropy_bits=float(s.sampled_entropy_bits), chosen_prob=float(s.chosen_prob),
                     alternatives=tuple((a.token_id, a.token_text, float(a.prob)) for a in s.alternatives))
                for i, s in enumerate(report.steps)], "report.json"
    rows = files.csvs.get("tokens.csv") or []
    top = entropy_top(report)
    out = []
    for i, r in enumerate(rows):  # a CSV row's cells, read by column name
        alts, k = [], 1
        while f"alt{k}_text" in r:
            if r.get(f"alt{k}_prob") not in (None, ""):
                alts.append((r.get(f"alt{k}_id"), r.get(f"alt{k}_text"), r.get(f"alt{k}_prob")))
            k += 1
        h = number_or_none(r.get("entropy_bits"))
        norm = number_or_none(r.get("normalized_entropy"))
        if norm is None and h is not None and top is not None and plotted("entropy_bits", h, top) is not None:
            norm = h / top[0]
        step = _int(r.get("step"))
        out.append(Step(step=step if step is not None else i, token_id=_int(r.get("token_id")),
                        text=str(r.get("token_text") or ""), entropy_bits=h, normalized=norm,
                        varentropy_bits2=number_or_none(r.get("varentropy_bits2")),
                        sampled_entropy_bits=number_or_none(r.get("sampled_entropy_bits")),
                        chosen_prob=number_or_none(r.get("chosen_prob")),
                        alternatives=tuple((_int(t), str(x if x is not None else ""), number_or_none(p))
                                           for t, x, p in alts)))
    return out, "tokens.csv" if out else ""


def summary_of(summary: Summary) -> dict[str, Any]:
    """The summary's figures by name (:data:`SUMMARY_FIELDS`' keys), as the comparison lists them."""
    return {key: getattr(summary, key) for key, _ in SUMMARY_FIELDS}


def headline(summary: Summary, top: tuple[float, str] | None = None) -> str:
    """The run in a line: ``48 tokens, mean entropy 1.21 bits (max 5.17), mean varentropy 4.20 bits²``.

    A mean the summary gives as None (no steps) is left out; ``""`` when it has none. Each is checked against its
    physical range (:data:`FIGURE_RANGES`; an entropy against ``top``, log2 V, too) and an impossible one says so.
    """
    parts = []
    n, h, hmax, v = summary.n_steps, summary.mean_entropy_bits, summary.max_entropy_bits, summary.mean_varentropy_bits2
    if _present(n):
        parts.append(f"{shown('n_steps', n)} tokens")
    if _present(h):
        most = f" (max {shown('max_entropy_bits', hmax, top, spec='.2f')})" if _present(hmax) else ""
        parts.append(f"mean entropy {shown('mean_entropy_bits', h, top, spec='.2f')} bits{most}")
    if _present(v):
        parts.append(f"mean varentropy {shown('mean_varentropy_bits2', v, spec='.2f')} bits²")
    return ", ".join(parts)


def _present(x: Any) -> bool:
    """A figure the report gives: a number (an impossible one too: it is shown as such), not absent or NaN."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and not (isinstance(x, float) and math.isnan(x))


def _prob(p: float | None) -> str:
    return shown("prob", p)


def token_view(steps: list[Step], id_prefix: str = "tok", top: tuple[float, str] | None = None) -> dict[str, Any]:
    """The template context of a token view: one dict per token with its colours and tooltip rows."""
    toks = []
    for s in steps:
        bg = colour(plotted("normalized_entropy", s.normalized))
        alts = [{"text": token_cell(t), "prob": _prob(p), "outside": False,
                 "chosen": tid == s.token_id if tid is not None else t == s.text}
                for tid, t, p in s.alternatives[:ALTS_SHOWN]]
        if not any(a["chosen"] for a in alts):  # sampled outside the shown top-k: still say what it was
            alts.append({"text": token_cell(s.text), "prob": _prob(s.chosen_prob), "chosen": True, "outside": True})
        toks.append({"id": f"{id_prefix}-{s.step}", "step": s.step, "text": token_inline(s.text), "bg": bg,
                     "fg": text_colour(bg), "alts": alts, "h": shown("entropy_bits", s.entropy_bits, top),
                     "norm": shown("normalized_entropy", s.normalized), "v": shown("varentropy_bits2", s.varentropy_bits2),
                     "p": _prob(s.chosen_prob)})
    return {"tokens": toks, "legend": legend("certain (H / log2 V = 0)", "uniform over the vocabulary (1)")}


def _round_step(raw: float) -> float:
    """The smallest round step (1, 2 or 5 x 10^k) at least ``raw`` (> 0).

    >>> _round_step(1.6), _round_step(6), _round_step(0.3)
    (2, 10, 0.5)
    """
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def chart(steps: list[Step], h_top: tuple[float, str] | None = None) -> dict[str, Any]:
    """The template context of the entropy and varentropy chart: two panels sharing the step axis.

    An impossible figure (:func:`plotted`; an entropy above ``h_top``, log2 V) is no point of it; its band's title says what the report holds.

    Returns a dict of SVG geometry (user units): ``panels`` (title, y ticks, line segments, points),
    ``bands`` (one hover band per step with its ``<title>`` text), ``x_ticks``, sizes.
    """
    n = len(steps)
    plot_w = CHART_WIDTH - CHART_LEFT - CHART_RIGHT
    dx = plot_w / max(n, 1)

    def x(i: int) -> float:
        return round(CHART_LEFT + (i + 0.5) * dx, 1)

    hs = [plotted("entropy_bits", s.entropy_bits, h_top) for s in steps]
    sampled_hs = [plotted("sampled_entropy_bits", s.sampled_entropy_bits, h_top) for s in steps]
    sampled = any((h or 0) > 0 for h in sampled_hs)
    series = [("entropy (bits)", [("entropy", hs)] + ([("sampled-from entropy", sampled_hs)] if sampled else [])),
              ("varentropy (bits²)", [("varentropy", [plotted("varentropy_bits2", s.varentropy_bits2) for s in steps])])]
    panels = []
    for k, (title, lines) in enumerate(series):
        top = CHART_TOP + k * (PANEL_HEIGHT + PANEL_GAP)
        values = [v for _, vs in lines for v in vs if v is not None]
        top_value = max(values + [MIN_AXIS_TOP])
        step = _round_step(top_value / Y_TICKS)
        hi = step * max(1, math.ceil(top_value / step - 1e-9))

        def y(v: float, top: int = top, hi: float = hi) -> float:
            return round(top + PANEL_HEIGHT * (1 - v / hi), 1)

        drawn = []
        for name, vs in lines:
            segments, current = [], []
            for i, v in enumerate(vs):
                if v is None:
                    if current:
                        segments.append(current)
                    current = []
                else:
                    current.append(f"{x(i)},{y(v)}")
            if current:
                segments.append(current)
            drawn.append({"name": name, "segments": [" ".join(seg) for seg in segments]})
        points = [{"x": x(i), "y": y(v), "fill": colour(plotted("normalized_entropy", s.normalized))}
                  for i, (s, v) in enumerate(zip(steps, lines[0][1])) if v is not None] if n <= MAX_POINTS else []
        ticks = [{"y": y(t), "label": fmt(round(t, 10))} for t in (j * step for j in range(int(round(hi / step)) + 1))]
        panels.append({"title": title, "top": top, "base": top + PANEL_HEIGHT, "mid": top + PANEL_HEIGHT / 2,
                       "lines": drawn, "points": points, "ticks": ticks})
    bottom = CHART_TOP + 2 * PANEL_HEIGHT + PANEL_GAP
    x_step = 1 if n <= MAX_X_TICKS else int(_round_step(n / MAX_X_TICKS))
    x_ticks = [{"x": x(i), "label": str(i)} for i in range(0, n, x_step)]
    bands = [{"step": s.step, "x": round(CHART_LEFT + i * dx, 1), "w": round(dx, 2),
              "title": f"step {s.step}: {token_cell(s.text)}, entropy {shown('entropy_bits', s.entropy_bits, h_top)} bits, "
                       f"varentropy {shown('varentropy_bits2', s.varentropy_bits2)} bits², p(chosen) {_prob(s.chosen_prob)}"}
             for i, s in enumerate(steps)]
    data = [{"step": s.step, "text": token_cell(s.text), "h": shown("entropy_bits", s.entropy_bits, h_top),
             "v": shown("varentropy_bits2", s.varentropy_bits2), "p": _prob(s.chosen_prob), "x": x(i)}
            for i, s in enumerate(steps)]
    return {"width": CHART_WIDTH, "height": bottom + CHART_BOTTOM, "left": CHART_LEFT,
            "right": CHART_WIDTH - CHART_RIGHT, "top": CHART_TOP, "bottom": bottom, "panels": panels,
            "x_ticks": x_ticks, "bands": bands, "data": data, "sampled": sampled}


def step_table(steps: list[Step], top: tuple[float, str] | None = None) -> Any:
    """The steps as a table, one row ``step-<n>`` per token (the chart's steps link here)."""
    rows = [{"step": s.step, "token": token_cell(s.text), "token_id": s.token_id,
             "entropy_bits": shown("entropy_bits", s.entropy_bits, top),
             "normalized_entropy": shown("normalized_entropy", s.normalized),
             "varentropy_bits2": shown("varentropy_bits2", s.varentropy_bits2),
             "chosen_prob": shown("chosen_prob", s.chosen_prob),
             "alternatives": "  ".join(f"{token_cell(t)} {_prob(p)}" for _, t, p in s.alternatives)} for s in steps]
    return table(rows, row_ids=[f"step-{s.step}" for s in steps])


def page(files: ReportFiles, report: Report) -> KindPage:
    """The entropy page's own part: headline, the answer's tokens, the chart, the per-token table.

    Args:
        files: The report directory as read.
        report: Its ``report.json``, typed.

    Returns:
        A :class:`KindPage`; ``tokens.csv`` and ``entropy.png`` are covered when the steps were read
        (the table and the SVG chart show them), left to the generic part otherwise.
    """
    steps, source = read_steps(files, report)
    top = entropy_top(report)
    if not steps:
        note = render("entropy_missing.html.j2", text=report.text)
        return KindPage(headline(report.summary, top), (Section("Answer", note, "answer"),), frozenset())
    sections = (
        Section("Answer", render("entropy_tokens.html.j2", source=source, prompt=report.prompt,
                                 **token_view(steps, top=top)), "answer"),
        Section("Entropy and varentropy per token", render("entropy_chart.html.j2", **chart(steps, top)), "chart"),
        Section("Per token", step_table(steps, top), "per-token"),
    )
    if report.context_measure is not None:  # --context: the decode's reading of it, with the measure's validity record
        sections += (Section("Context reading", render("context_reading.html.j2", cm=report.context_measure,
                                                       context=report.context or ""),
                             "context-reading"),)
    return KindPage(headline(report.summary, top), sections, frozenset({"tokens.csv", "entropy.png"}))


# --------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class Pair:
    """One row of an alignment: tokens of A and of B covering the same thing, and their entropies.

    ``a_bits`` / ``b_bits`` sum the entropies of the row's tokens (bits); ``diff`` is ``b_bits - a_bits``,
    None where one side has no token (an unaligned tail).
    """

    a: tuple[Step, ...]
    b: tuple[Step, ...]

    @property
    def a_bits(self) -> float | None:
        return _total(self.a)

    @property
    def b_bits(self) -> float | None:
        return _total(self.b)

    @property
    def diff(self) -> float | None:
        a, b = self.a_bits, self.b_bits
        return b - a if a is not None and b is not None else None


def _total(steps: tuple[Step, ...]) -> float | None:
    hs = [s.entropy_bits for s in steps]
    return sum(hs) if steps and all(h is not None for h in hs) else None  # type: ignore[misc]


@dataclass(frozen=True)
class Alignment:
    """How two runs' tokens were paired: ``rule`` in words, the rows, and what was left unpaired."""

    rule: str
    pairs: tuple[Pair, ...]
    note: str = ""


def same_tokenizer(a: Report, b: Report, sa: list[Step], sb: list[Step]) -> bool:
    """Whether the two runs tokenize alike: equal ``vocab_size`` and no token id seen in both (chosen or
    alternative) with two different texts, and at least one id seen in both."""
    if a.vocab_size != b.vocab_size:
        return False
    seen: dict[int, str] = {}
    for s in sa:
        for tid, text in [(s.token_id, s.text)] + [(t, x) for t, x, _ in s.alternatives]:
            if tid is not None:
                seen[tid] = text
    shared = False
    for s in sb:
        for tid, text in [(s.token_id, s.text)] + [(t, x) for t, x, _ in s.alternatives]:
            if tid is not None and tid in seen:
                if seen[tid] != text:
                    return False
                shared = True
    return shared


def align(sa: list[Step], sb: list[Step], by_step: bool) -> Alignment:
    """Pair two runs' tokens.

    The rule:

    * Same tokenizer (``by_step``, see :func:`same_tokenizer`): step i of A with step i of B, for every
      step both have (decode time is comparable even where the chosen tokens differ; the note says
      where they first differ). Steps past the shorter run are listed unpaired.
    * Different tokenizers: on character offsets of the decoded text (the concatenated token texts).
      A row is the shortest span ``[c, c')`` where both runs have a token boundary at ``c`` and at
      ``c'``, holding every token of A and of B that starts inside it; its entropy on each side is
      the sum of its tokens' entropies (bits, the uncertainty met along that span). This runs only
      over the two texts' common prefix: after the first character where they differ, the tokens
      are listed unpaired (no difference computed), and the note says at which character and step.

    Returns:
        An :class:`Alignment`; never raises for runs that cannot be paired: they give an alignment
        whose ``pairs`` are all unpaired, and whose note says why.
    """
    if by_step:
        n = min(len(sa), len(sb))
        pairs = [Pair((sa[i],), (sb[i],)) for i in range(n)]
        pairs += [Pair((s,), ()) for s in sa[n:]] + [Pair((), (s,)) for s in sb[n:]]
        differ = next((i for i in range(n) if sa[i].token_id != sb[i].token_id or sa[i].text != sb[i].text), None)
        notes = ["same tokens at every paired step" if differ is None else
                 f"the chosen tokens first differ at step {differ}; "
                 f"{sum(sa[i].text == sb[i].text for i in range(n))} of {n} paired steps choose the same token"]
        if len(sa) != len(sb):
            notes.append(f"{abs(len(sa) - len(sb))} steps of {'A' if len(sa) > len(sb) else 'B'} past the shorter "
                         "run are unpaired")
        return Alignment("by decode step (the two runs tokenize alike)", tuple(pairs), "; ".join(notes) + ".")

    def offsets(steps: list[Step]) -> list[int]:
        out, c = [], 0
        for s in steps:
            out.append(c)
            c += len(s.text)
        return out + [c]

    oa, ob = offsets(sa), offsets(sb)
    ta, tb = "".join(s.text for s in sa), "".join(s.text for s in sb)
    common = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
    cuts = sorted(c for c in set(oa) & set(ob) if c <= common)
    pairs: list[Pair] = []
    ia = ib = 0
    for lo, hi in zip(cuts, cuts[1:]):
        ga, gb = [], []
        while ia < len(sa) and oa[ia] < hi and oa[ia + 1] <= hi:
            ga.append(sa[ia])
            ia += 1
        while ib < len(sb) and ob[ib] < hi and ob[ib + 1] <= hi:
            gb.append(sb[ib])
            ib += 1
        if ga or gb:
            pairs.append(Pair(tuple(ga), tuple(gb)))
    rest_a, rest_b = sa[ia:], sb[ib:]
    pairs += [Pair((s,), ()) for s in rest_a] + [Pair((), (s,)) for s in rest_b]
    if common == len(ta) == len(tb):
        note = "the two texts are the same; every token is paired."
    else:
        where = (f"the texts first differ at character {common}" if common < min(len(ta), len(tb)) else
                 f"{'A' if len(ta) < len(tb) else 'B'}'s text ends at character {common} (a prefix of "
                 f"{'B' if len(ta) < len(tb) else 'A'}'s)")
        note = (where + (f" (step {rest_a[0].step} of A, step {rest_b[0].step} of B)" if rest_a and rest_b else "")
                + f": {len(rest_a)} tokens of A and {len(rest_b)} of B after it are unpaired.")
    return Alignment("on character offsets of the decoded text (the runs tokenize differently)", tuple(pairs), note)


def compare(a: ReportFiles, b: ReportFiles) -> tuple[Section, ...]:
    """Two entropy runs side by side: the tokens aligned (:func:`align`), B - A coloured, both summaries.

    Args:
        a, b: Two entropy reports as read (two models on one prompt, two temperatures ...).

    Returns:
        Sections "Entropy difference" (a token view coloured by B - A on :data:`DIVERGING_MAP`, the
        alignment rule stated, and a table of the rows) and "Summaries side by side". A run without
        per-token steps gives a section that says so instead of the aligned tokens. A report.json of another
        shape (:class:`lab.kinds.entropy.Report`) gives one note naming which run's field and why; none when a
        run has no report.json (its page's problems say why).
    """
    if not a.report or not b.report:
        return ()
    typed = []
    for label, files in (("A", a), ("B", b)):
        try:
            typed.append(ENTROPY.read(files.report))
        except ShapeError as exc:  # a hand-edited or damaged report: the reason in one line, no comparison
            return (not_drawn(files.kind, f"{label}'s {files.exact}: ", str(exc)),)
    ra, rb = typed
    sa, src_a = read_steps(a, ra)
    sb, src_b = read_steps(b, rb)
    summaries = Section("Summaries side by side", render("entropy_summaries.html.j2",
                                                         rows=summary_rows(a, b, ra, rb), a=a, b=b),
                        "entropy-summaries")
    if not sa or not sb:
        missing = " and ".join(x for x, s in (("A", sa), ("B", sb)) if not s)
        return (Section("Entropy difference", render("entropy_missing.html.j2", text="", compare=missing),
                        "entropy-diff"), summaries)
    al = align(sa, sb, same_tokenizer(ra, rb, sa, sb))
    diffs = [abs(p.diff) for p in al.pairs if p.diff is not None]
    scale = max(diffs + [MIN_DIFF_SCALE_BITS])
    rows = []
    for i, p in enumerate(al.pairs):
        d = p.diff
        bg = colour(0.5 + d / (2 * scale), DIVERGING_MAP) if d is not None else "#999999"
        rows.append({"id": f"pair-{i}", "row": i, "a": token_inline("".join(s.text for s in p.a)) if p.a else "",
                     "b": token_inline("".join(s.text for s in p.b)) if p.b else "",
                     "a_vis": token_cell("".join(s.text for s in p.a)) if p.a else "-",
                     "b_vis": token_cell("".join(s.text for s in p.b)) if p.b else "-",
                     "a_steps": ", ".join(str(s.step) for s in p.a) or "-",
                     "b_steps": ", ".join(str(s.step) for s in p.b) or "-",
                     "a_bits": fmt(p.a_bits), "b_bits": fmt(p.b_bits), "diff": fmt(d), "raw_diff": d,
                     "same": bool(p.a and p.b) and [s.text for s in p.a] == [s.text for s in p.b],
                     "bg": bg, "fg": text_colour(bg)})
    mean_diff = statistics.fmean([p.diff for p in al.pairs if p.diff is not None]) if diffs else None
    diff_legend = legend(f"-{fmt(scale)} bits (B more certain)", f"+{fmt(scale)} bits (B less certain)", DIVERGING_MAP)
    html = render("entropy_compare.html.j2", rule=al.rule, note=al.note, rows=rows, legend=diff_legend,
                  n_paired=len(diffs), mean_diff=fmt(mean_diff), sources=(src_a, src_b))
    return Section("Entropy difference (B - A)", html, "entropy-diff"), summaries


def summary_rows(a: ReportFiles, b: ReportFiles, ra: Report, rb: Report) -> list[dict[str, str]]:
    """Rows ``{label, a, b, diff}`` of the two runs' settings and summaries (``diff`` = B - A for numbers);
    ``a`` and ``b`` are the runs as read, ``ra`` and ``rb`` their reports."""
    sma, smb = summary_of(ra.summary), summary_of(rb.summary)
    rows = [{"label": "model", "a": ra.model.model, "b": rb.model.model},
            {"label": "prompt", "a": ra.prompt, "b": rb.prompt},
            {"label": "temperature", "key": "temperature", "a": ra.settings.temperature, "b": rb.settings.temperature},
            {"label": "seed", "key": "seed", "a": ra.settings.seed, "b": rb.settings.seed},
            {"label": "vocabulary V", "key": "vocab_size", "a": ra.vocab_size, "b": rb.vocab_size}]
    rows += [{"label": label, "key": key, "a": sma[key], "b": smb[key]} for key, label in SUMMARY_FIELDS]
    out = []
    tops = entropy_top(ra), entropy_top(rb)
    for r in rows:
        key = r.get("key", "")
        a_text, b_text = shown(key, r["a"], tops[0], 4), shown(key, r["b"], tops[1], 4)
        x, y = number_or_none(r["a"]), number_or_none(r["b"])
        both_numbers = not isinstance(r["a"], str) and not isinstance(r["b"], str)
        possible = "out of range" not in a_text + b_text  # no difference of an impossible figure
        out.append({"label": r["label"], "a": a_text, "b": b_text,
                    "diff": fmt(y - x, 4) if both_numbers and possible and x is not None and y is not None else ""})
    return out
