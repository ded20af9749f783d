"""The page of a ``lab stream`` report: the pre-stated test's verdict, the policy table, the rolling NLL.

Drawn from ``report.json`` read as :class:`lab.kinds.stream.Report` (``tests``, ``recompute_check``, ``policies``)
and ``policies.csv`` (one row per retention policy: perplexity with its interval, the ratio to dense, acceptance
counts).
The summary's prose follows without its tables and verdict lines, which the sections show.
"""

from __future__ import annotations

from typing import Any

from lab.kinds.stream import PairedTest, PolicyScore, PolicyToDense, RecomputeCheck, Report
from lab.numbers import MISSING, PAGE_MISSING, number_or_none
from lab.ranges import COUNT, NONNEGATIVE, PERPLEXITY, PROBABILITY, SECONDS, Range
from lab.verdicts import NULL_WORDS, null_rejected
from lab.views.core import MAX_FIGURES, KindPage, Section, figure, markdown, render, table
from lab.views.files import ReportFiles
from lab.views.kinds._summary import prose

PLOT = "rolling_nll.png"
MAX_HEADLINE_POLICIES = 4  # policies named in the headline's ratio list; the table has them all


def _f(x: Any, rng: Range, what: str, spec: str) -> str:
    """A figure of the report or of a CSV cell (text) as the page prints it, checked against its physical range
    (:func:`lab.views.core.figure`; an infinity shown out of range); ``-`` where there is none."""
    return figure(number_or_none(x, finite=False), rng, what, MAX_FIGURES, spec=spec)


def _interval(value: Any, low: Any, high: Any, rng: Range, what: str, spec: str) -> str:
    if number_or_none(value, finite=False) is None:
        return PAGE_MISSING
    return f"{_f(value, rng, what, spec)} [{_f(low, rng, what, spec)}, {_f(high, rng, what, spec)}]"


def _alpha(row: dict[str, str], mode: str) -> str:
    if number_or_none(row.get(f"alpha_{mode}"), finite=False) is None:
        return MISSING
    return (f"{_f(row[f'alpha_{mode}'], PROBABILITY, 'alpha', '.2f')} "
            f"({_count(row.get(f'n_accepted_{mode}'))}/{_count(row.get(f'n_tested_{mode}'))})")


def _count(x: Any) -> str:
    """A count as the report or a CSV cell holds it, checked (:data:`lab.ranges.COUNT`); as written when no number."""
    v = number_or_none(x)
    return figure(int(v) if v.is_integer() else v, COUNT, "a count") if v is not None else str(x)


def policy_rows(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """``policies.csv``'s rows as the table shows them (the same columns as summary.md's table)."""
    return [{"policy": r.get("policy", ""), "keys/query": r.get("budget") or "all",
             "PPL [95% CI]": _interval(r.get("ppl"), r.get("ppl_low"), r.get("ppl_high"), PERPLEXITY, "a perplexity",
                                       ".2f"),
             "x dense [95% CI]": _interval(r.get("ratio_to_dense"), r.get("ratio_low"), r.get("ratio_high"),
                                           NONNEGATIVE, "a perplexity ratio", ".3f"),
             "PPL all targets": _f(r.get("ppl_all_targets"), PERPLEXITY, "a perplexity", ".2f"),
             "alpha greedy": _alpha(r, "greedy"), "alpha sampled": _alpha(r, "sampled"),
             "wall s": _f(r.get("wall_s"), SECONDS, "a time", ".1f"),
             "peak MB": _f(r.get("peak_rss_mb"), NONNEGATIVE, "a memory size", ".0f")} for r in rows]


def test_verdict(t: PairedTest) -> str:
    """A test's verdict (:func:`lab.verdicts.null_rejected`) in the words summary.md gives it."""
    return NULL_WORDS[null_rejected(t.reject)]


def recompute_check(rc: RecomputeCheck | None) -> dict[str, str] | None:
    """``report.json``'s recompute check as the page words it (3 decimals, as summary.md), None when not run."""
    if rc is None:
        return None
    return {"tolerance": _f(rc.tolerance, NONNEGATIVE, "a tolerance", ".0%"),
            "recompute": rc.recompute, "sinks": rc.sinks,
            "ratio": _interval(rc.ratio, rc.low, rc.high, NONNEGATIVE, "a perplexity ratio", ".3f"),
            "n_targets": _count(rc.n_targets), "verdict": "within" if rc.within else "not within"}


def _to_dense(p: PolicyScore) -> float | None:
    """A policy's perplexity over dense's; None in a run without a dense policy (its rows carry no ratio)."""
    return p.ratio_to_dense if isinstance(p, PolicyToDense) else None


def headline(report: Report) -> str:
    """The pre-stated test's verdict and each policy's perplexity against dense (``-`` in a run without dense)."""
    parts = []
    if report.tests:
        t = report.tests[0]
        parts.append(f"{t.name}: {test_verdict(t)} (p {_f(t.p_value, PROBABILITY, 'a p-value', '.3g')})")
    ratios = [f"{p.policy} {_f(_to_dense(p), NONNEGATIVE, 'a perplexity ratio', '.2f')}" for p in report.policies
              if p.kind != "dense"]
    if ratios:
        more = len(ratios) - MAX_HEADLINE_POLICIES
        tail = f" and {more} more" if more > 0 else ""
        parts.append("PPL x dense: " + ", ".join(ratios[:MAX_HEADLINE_POLICIES]) + tail)
    return "; ".join(parts)


def page(files: ReportFiles, report: Report) -> KindPage:
    """Verdict and tests, the policy table, the rolling NLL plot, then the summary's prose."""
    verdict = render("stream_verdict.html.j2", tests=report.tests, rc=recompute_check(report.recompute_check),
                     verdict=test_verdict)
    sections = [Section("Verdict", verdict, "verdict")]
    covers = set()
    if files.csvs.get("policies.csv"):
        sections.append(Section("Policies", table(policy_rows(files.csvs["policies.csv"])), "policies"))
        covers.add("policies.csv")
    if PLOT in files.images:
        sections.append(Section("Rolling NLL", render("figure.html.j2", uri=files.images[PLOT], name=PLOT), "rolling"))
        covers.add(PLOT)
    if files.summary:
        text = prose(files.summary)
        if text:
            sections.append(Section("How it was measured", markdown(text, files.images), "method"))
        covers.add("summary.md")
    return KindPage(headline=headline(report), sections=tuple(sections), covers=frozenset(covers))
