"""A study's page (``lab study``): the verdicts first, then the plots with every point a link to its
prompt's row, then the per-prompt table; and two studies side by side (``lab view A B``).

Drawn from ``report.json`` (``study.json`` in a report written before format 1; read as the report's
exact figures by :func:`lab.views.files.read_report`, then as its typed report, :class:`lab.kinds.study.Report`,
by :func:`lab.views.page.kind_page` and by :func:`compare`), ``per_prompt.csv`` and the figures
:mod:`lab.render.study` writes: each PNG, and for the plots whose points are prompts an SVG beside it
whose points link to ``#prompt-<id>`` (:func:`prompt_anchor`).
A report written before the SVGs existed shows its PNGs; nothing here computes a statistic.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any, Sequence

from lab.kinds import ShapeError
from lab.kinds.study import KIND as STUDY
from lab.kinds.study import Report, StudyTest
from lab.ranges import CORRELATION, COUNT, ENTROPY_BITS, HEALTH, PROBABILITY, Range
from lab.verdicts import DECIDED, INCONCLUSIVE, UNTESTABLE_NOTE, settled, untestable_reason
from lab.views.core import KindPage, Section, figure, fmt, render, row_anchor, table
from lab.views.files import ReportFiles
from lab.views.page import not_drawn

# Columns of per_prompt.csv the page's table shows (the file holds every column); ``text`` clipped.
PROMPT_COLUMNS = ("id", "category", "variant", "twin_of", "n_prompt_tokens", "context_health", "mean_entropy_bits",
                  "alpha", "n_accepted", "n_drafted_tested", "text")
TEXT_COLUMNS = frozenset({"id", "category", "variant", "twin_of", "text"})  # shown as written, never as numbers
TEXT_CHARS = 80  # of a prompt's generated text in the table; the CSV holds it whole
# Physical ranges of the figures the page prints (lab.ranges), with their names in an out-of-range note: the
# per-prompt columns, and the effects that are correlations (lab.analysis.hypotheses' effect names); an effect
# with no range of its own (a variance gap, eta squared H) is printed as it is.
COLUMN_RANGES: dict[str, tuple[Range, str]] = {
    "n_prompt_tokens": (COUNT, "a token count"), "context_health": (HEALTH, "context health"),
    "mean_entropy_bits": (ENTROPY_BITS, "entropy"), "alpha": (PROBABILITY, "alpha"),
    "n_accepted": (COUNT, "a count"), "n_drafted_tested": (COUNT, "a count")}
CORRELATIONS = frozenset({"spearman_rho", "partial_spearman_rho", "point_biserial_r", "rank_biserial_r"})


def prompt_anchor(prompt_id: str) -> str:
    """The id of a prompt's row on a study's page, ``prompt-<id>`` (:func:`lab.views.core.row_anchor`).

    >>> prompt_anchor("factual-01-poisoned")
    'prompt-factual-01-poisoned'
    """
    return row_anchor("prompt-", prompt_id)


def _cell(text: str) -> Any:
    """A CSV cell as the table shows it: an int or float when it reads as one (so fmt rounds it), else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _shown(column: str, value: Any) -> Any:
    """A per-prompt cell checked against its column's physical range (:data:`COLUMN_RANGES`); text as it is."""
    return figure(value, *COLUMN_RANGES[column]) if column in COLUMN_RANGES and not isinstance(value, str) else value


def _tests(report: Report) -> list[StudyTest]:
    """The report's tests, each with its verdict settled (:func:`lab.verdicts.settled`): a test whose precondition
    failed is ``untestable`` with its reason, in a study written before ``study.json`` said so too (its verdict
    ``inconclusive``, the reason only in its note)."""
    tests = []
    for t in report.tests:
        if t.name:
            # a test without the field (None: a report written before it) gives its reason in its note only
            reason = untestable_reason({"note": t.note}) if t.untestable is None else t.untestable
            tests.append(replace(t, untestable=reason, verdict=settled(t.verdict, reason)) if reason else t)
    return tests


def headline(tests: Sequence[StudyTest]) -> str:
    """``H2 supported (point_biserial_r -0.342), H5 supported (...); 4 inconclusive, 2 untestable``: every decided
    test with its effect, the undecided counted under their own verdict.

    >>> from types import SimpleNamespace as T  # a test's name, verdict and effect: what the headline reads
    >>> headline([T(name="H2", verdict="supported", effect_name="r", effect=-0.3421),
    ...           T(name="H1", verdict="untestable"), T(name="H3", verdict="inconclusive")])
    'H2 supported (r -0.342); 1 untestable, 1 inconclusive'
    """
    decided = [f"{t.name} {t.verdict} ({t.effect_name} {_effect(t, t.effect)})" for t in tests if t.verdict in DECIDED]
    rest = Counter(str(t.verdict or INCONCLUSIVE) for t in tests if t.verdict not in DECIDED)
    return ", ".join(decided) + ("; " if decided and rest else "") + ", ".join(f"{n} {v}" for v, n in rest.items())


def _effect(t: StudyTest, value: Any) -> str:
    """An effect of test ``t`` (or an end of its interval) as the page prints it: a correlation checked against
    [-1, 1] (:func:`lab.views.core.figure`), another effect as :func:`lab.views.core.fmt` prints it."""
    return figure(value, CORRELATION, t.effect_name) if t.effect_name in CORRELATIONS else fmt(value)


def verdict_rows(tests: Sequence[StudyTest]) -> list[dict[str, Any]]:
    """One row per test for the verdict table, its figures as the page prints them (checked against their
    physical ranges; an absent interval end or smallest effect None)."""
    rows = []
    for t in tests:
        power = t.power
        rows.append({"name": t.name, "hypothesis": t.hypothesis, "statistic": t.effect_name,
                     "predicted": "< 0" if t.predicted_sign < 0 else "> 0", "effect": _effect(t, t.effect),
                     "ci_low": None if t.ci_low is None else _effect(t, t.ci_low),
                     "ci_high": None if t.ci_high is None else _effect(t, t.ci_high),
                     "ci_level": t.ci_level, "p": figure(t.p_value, PROBABILITY, "a p-value"),
                     "p_holm": figure(t.p_holm, PROBABILITY, "a p-value"), "n": figure(t.n, COUNT, "a count"),
                     "detectable": _effect(t, power.min_detectable if power else None),
                     "smallest": None if t.smallest_effect is None else _effect(t, t.smallest_effect),
                     "underpowered": power.underpowered if power else None, "verdict": t.verdict,
                     "untestable": t.untestable or "", "note": t.note})
    return rows


def figures(files: ReportFiles, report: Report) -> list[dict[str, Any]]:
    """The study's plots in the report's order, each its SVG when the report holds one (points linked to
    rows), else its PNG; with the caption its report.json gives it."""
    captions = report.figures
    names = list(captions) + [n for n in files.images if n not in captions]
    out = []
    for png in names:
        svg = png[:-4] + ".svg" if png.endswith(".png") else ""
        if svg in files.svgs:
            out.append({"name": svg, "png": png, "svg": files.svgs[svg], "caption": captions.get(png, "")})
        elif png in files.images:
            out.append({"name": png, "png": png, "uri": files.images[png], "caption": captions.get(png, "")})
    return out


def prompt_rows(files: ReportFiles) -> tuple[list[dict[str, Any]], list[str]]:
    """per_prompt.csv's rows (numbers as numbers, ``text`` clipped to :data:`TEXT_CHARS`) and their row ids."""
    csv_rows = files.csvs.get("per_prompt.csv", [])
    rows = []
    for r in csv_rows:
        text = r.get("text") or ""
        rows.append({**{k: v if k in TEXT_COLUMNS else _shown(k, _cell(v)) for k, v in r.items()},
                     "text": text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS] + "..."})
    return rows, [prompt_anchor(r.get("id", "")) for r in csv_rows]


def health_invalid(tests: Sequence[StudyTest]) -> str:
    """Why context health is no reading of the context on the study's model (H1's note when the study found
    it untestable for that reason), ``""`` when it is not known to be invalid."""
    note = next((t.note for t in tests if t.name == "H1"), "")
    return note.removeprefix(UNTESTABLE_NOTE) if "does not read the context" in note else ""


def page(files: ReportFiles, report: Report) -> KindPage:
    """The study's own sections: verdicts, plots (points linked to prompts), per-prompt rows; wherever context
    health is drawn or listed on a model where it failed validation, a warning with the record says so."""
    tests = _tests(report)
    invalid = health_invalid(tests)
    sections = []
    if tests:
        sections.append(Section("Verdicts", render("study_verdicts.html.j2", rows=verdict_rows(tests)), "verdicts"))
    figs = figures(files, report)
    if figs:
        sections.append(Section("Plots", render("study_plots.html.j2", figures=figs, invalid=invalid), "plots"))
    rows, ids = prompt_rows(files)
    if rows:
        columns = [c for c in PROMPT_COLUMNS if c in rows[0]]
        sections.append(Section("Prompts", render("study_prompts.html.j2", n=len(rows), invalid=invalid,
                                                  table=table(rows, columns, limit=len(rows), row_ids=ids)),
                                "prompts"))
    covers = {f["name"] for f in figs} | {f["png"] for f in figs} | ({"per_prompt.csv"} if rows else set())
    return KindPage(headline(tests), tuple(sections), frozenset(covers))


def compare(a: ReportFiles, b: ReportFiles) -> tuple[Section, ...]:
    """Both studies' verdicts and effects side by side, each effect with its interval; a report of another shape
    (hand-edited, damaged) named in one line instead (:func:`lab.views.page.not_drawn`), a folder without its
    report.json compared by its summary only."""
    both = []
    for label, files in (("A", a), ("B", b)):
        try:
            both.append(_tests(STUDY.read(files.report)) if files.report else [])
        except ShapeError as exc:
            return (not_drawn(STUDY.name, f"{label}'s {files.exact}: ", str(exc)),)
    ta, tb = ({t.name: t for t in tests} for tests in both)
    names = list(ta) + [n for n in tb if n not in ta]
    if not names:
        return ()
    rows = [{"name": n, "a": verdict_rows([ta[n]])[0] if n in ta else None,
             "b": verdict_rows([tb[n]])[0] if n in tb else None} for n in names]
    return (Section("Verdicts, A and B", render("study_compare.html.j2", rows=rows), "verdicts"),)
