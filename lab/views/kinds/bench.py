"""The ``lab bench`` report page: the results table first, then the plots; two benches side by side.

A bench alternates the target alone and each speculative set-up over repeats
(:mod:`lab.bench.run`); its ``report.json`` (:class:`lab.bench.results.BenchReport`) holds, per
method, the pooled end-to-end and decode-only figures of every prompt group (``by_group``, speed-ups
over :data:`lab.bench.results.BASELINE` in the same runs), the spread over repeats, and for a
speculative method alpha, tau and Leviathan et al. 2023's predicted speed-ups. The page shows those
figures as the report holds them; the only arithmetic it does is the ratio of two benches' figures
in :func:`compare`.
"""

from __future__ import annotations

from typing import Any

from lab.numbers import number_or_none
from lab.ranges import COUNT, GAMMA, NONNEGATIVE, PROBABILITY, TEMPERATURE, TOP_K, TOP_P, Range
from lab.views.core import KindPage, Section, figure_in, render
from lab.views.files import ReportFiles

# The method every speed-up divides by, as the report names it: lab.bench.results.BASELINE (a unit test checks
# they agree). Not imported: lab.bench imports lab.reports, which draws pages, so that would be an import circle.
BASELINE = "target-only (lab loop)"

COLUMNS = ("method", "gamma", "e2e tok/s", "e2e speed-up", "decode-only tok/s", "decode-only speed-up",
           "tok/s median", "tok/s min", "tok/s max", "alpha", "tau", "measured speed-up (loop)",
           "predicted (measured times)", "Thm 3.8 (time c)", "Thm 3.8 (FLOP c)", "same tokens")
_SPEED, _SPEEDUP = (NONNEGATIVE, "a speed"), (NONNEGATIVE, "a speed-up")
# Each figure the page prints (a results column, a set-up field), with its physical range (lab.ranges) and its name
# in an out-of-range note; the ratio B / A of two benches has none.
FIGURE_RANGES: dict[str, tuple[Range, str]] = {
    "gamma": (GAMMA, "gamma"), "e2e tok/s": _SPEED, "e2e speed-up": _SPEEDUP, "decode-only tok/s": _SPEED,
    "decode-only speed-up": _SPEEDUP, "tok/s median": _SPEED, "tok/s min": _SPEED, "tok/s max": _SPEED,
    "alpha": (PROBABILITY, "alpha"), "tau": (NONNEGATIVE, "tokens per round"), "measured speed-up (loop)": _SPEEDUP,
    "predicted (measured times)": _SPEEDUP, "Thm 3.8 (time c)": _SPEEDUP, "Thm 3.8 (FLOP c)": _SPEEDUP,
    "max new tokens": (COUNT, "a token count"), "repeats": (COUNT, "a count"), "torch threads": (COUNT, "a count"),
    "load": (NONNEGATIVE, "a load average"), "temperature": (TEMPERATURE, "temperature"), "top-k": (TOP_K, "top-k"),
    "top-p": (TOP_P, "top-p"),
}


def shown(key: str, value: Any) -> str:
    """A figure of :data:`FIGURE_RANGES` as the page prints it (:func:`lab.views.core.figure_in`); a key with no
    range as :func:`lab.views.core.fmt` does."""
    return figure_in(FIGURE_RANGES, key, value)


def _spread(method: dict[str, Any], figure: str) -> dict[str, Any]:
    spread = (method.get("per_repeat") or {}).get(figure)
    return spread if isinstance(spread, dict) else {}


def result_rows(bench: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per method of a bench (``report.json`` or one of its ``sides``), in the report's order.

    The end-to-end and decode-only columns are the ``"all"`` group's pooled figures (``by_group``);
    a report without them falls back to the medians over repeats (``per_repeat``).
    """
    methods = bench.get("methods") or {}
    pooled = (bench.get("by_group") or {}).get("all") or {}
    rows = []
    for name, m in methods.items():
        if not isinstance(m, dict):
            continue
        g = pooled.get(name) or {}

        def figure(key: str) -> Any:
            return g[key] if key in g else _spread(m, key).get("median")

        tps = m.get("tokens_per_s") or {}
        rows.append({"method": name, "gamma": m.get("gamma"),
                     "e2e tok/s": figure("e2e_tokens_per_s"), "e2e speed-up": figure("e2e_speedup"),
                     "decode-only tok/s": figure("decode_tokens_per_s"),
                     "decode-only speed-up": figure("decode_speedup"),
                     "tok/s median": tps.get("median"), "tok/s min": tps.get("min"), "tok/s max": tps.get("max"),
                     "alpha": m.get("alpha"), "tau": m.get("tau"), "measured speed-up (loop)": m.get("measured_speedup"),
                     "predicted (measured times)": m.get("speedup_predicted_from_measured_times"),
                     "Thm 3.8 (time c)": m.get("speedup_theory_time_ratio"),
                     "Thm 3.8 (FLOP c)": m.get("speedup_theory_flops"),
                     "same tokens": m.get("same_tokens_as_lab_target_loop")})
    return rows


def _row_id(prefix: str, name: str) -> str:
    return prefix + "".join(c if c.isalnum() else "-" for c in name)


def headline(bench: dict[str, Any]) -> str:
    """The fastest method end to end against the baseline, in a line; ``""`` without figures."""
    rows = [r for r in result_rows(bench) if number_or_none(r["e2e tok/s"], text=False) is not None]
    if not rows:
        return ""
    best = max(rows, key=lambda r: r["e2e tok/s"])
    base = next((r for r in rows if r["method"] == BASELINE), None)
    busy = " (machine busy: figures noisy)" if (bench.get("machine_load") or {}).get("busy") else ""
    if base is None:
        return f"fastest: {best['method']}, {shown('e2e tok/s', best['e2e tok/s'])} tokens/s end to end{busy}"
    if best is base:
        others = [r for r in rows if r is not base]
        if not others:
            return f"{BASELINE}: {shown('e2e tok/s', base['e2e tok/s'])} tokens/s end to end{busy}"
        runner = max(others, key=lambda r: r["e2e tok/s"])
        return (f"fastest: {BASELINE} itself, {shown('e2e tok/s', base['e2e tok/s'])} tokens/s end to end; best "
                f"other: {runner['method']} at {shown('e2e speed-up', runner['e2e speed-up'])}x (decode-only "
                f"{shown('decode-only speed-up', runner['decode-only speed-up'])}x){busy}")
    return (f"fastest: {best['method']}, {shown('e2e tok/s', best['e2e tok/s'])} tokens/s end to end, "
            f"{shown('e2e speed-up', best['e2e speed-up'])}x {BASELINE} (decode-only "
            f"{shown('decode-only speed-up', best['decode-only speed-up'])}x){busy}")


def _results_html(bench: dict[str, Any], prefix: str) -> Any:
    rows = result_rows(bench)
    load = bench.get("machine_load") or {}
    return render("bench_results.html.j2", rows=rows, columns=COLUMNS, baseline=BASELINE, shown=shown,
                  row_ids=[_row_id(prefix, r["method"]) for r in rows],
                  busy=load.get("busy"), max_load=load.get("max_load_1m"), threads=load.get("threads"),
                  comparisons=[c for c in bench.get("comparisons") or [] if isinstance(c, dict)],
                  errors=bench.get("assisted_errors") or {})


def page(files: ReportFiles) -> KindPage:
    """The bench page's own part: the results (and each side's), then the plots."""
    report = files.report
    if not report.get("methods"):
        return KindPage()
    sections = [Section("Results", _results_html(report, "method-"), "results")]
    for label, side in (report.get("sides") or {}).items():
        if isinstance(side, dict):
            sections.append(Section(f"Results: {label}", _results_html(side, _row_id("side-", label) + "-"),
                                    _row_id("side-", label)))
    if files.images or files.svgs:
        sections.append(Section("Plots", render("bench_plots.html.j2", images=files.images, svgs=files.svgs), "plots"))
    return KindPage(headline=headline(report), sections=tuple(sections),
                    covers=frozenset(files.images) | frozenset(files.svgs))


def _sampling(config: dict[str, Any]) -> str | None:
    """A bench's sampling set-up in words: ``greedy``, or its temperature and filters."""
    s = config.get("sampling")
    if not isinstance(s, dict):
        return None if s is None else str(s)
    if not s.get("temperature"):
        return "greedy"
    parts = [f"temperature {shown('temperature', s.get('temperature'))}"]
    parts += [f"{label} {shown(label, s[key])}" for key, label in (("top_k", "top-k"), ("top_p", "top-p"))
              if s.get(key) is not None and not (key == "top_p" and s[key] == 1.0)]
    return ", ".join(parts)


SETUP_FIELDS = (("model", lambda r: (r.get("model") or {}).get("model")),
                ("weights", lambda r: (r.get("model") or {}).get("weights")),
                ("draft", lambda r: r.get("draft")),
                ("max new tokens", lambda r: (r.get("config") or {}).get("max_new_tokens")),
                ("repeats", lambda r: (r.get("config") or {}).get("repeats")),
                ("sampling", lambda r: _sampling(r.get("config") or {})),
                ("prompts", lambda r: len(r.get("prompts") or [])),
                ("torch threads", lambda r: r.get("torch_threads")),
                ("machine busy", lambda r: (r.get("machine_load") or {}).get("busy")))


def _ratio(b: Any, a: Any) -> float | None:
    x, y = number_or_none(b, text=False), number_or_none(a, text=False)
    return x / y if x is not None and y not in (None, 0.0) else None


def compare(a: ReportFiles, b: ReportFiles) -> tuple[Section, ...]:
    """Two benches: their set-ups, then every method matched by name (its set-up: gamma, adaptive rule,
    draft dtype ...) with both runs' end-to-end and decode-only figures and the ratio B / A."""
    rows_a = {r["method"]: r for r in result_rows(a.report)}
    rows_b = {r["method"]: r for r in result_rows(b.report)}
    names = list(rows_a) + [n for n in rows_b if n not in rows_a]
    matched = []
    for name in names:
        ra, rb = rows_a.get(name, {}), rows_b.get(name, {})
        row: dict[str, Any] = {"method": name, "in": "both" if ra and rb else "A only" if ra else "B only"}
        for key in ("e2e tok/s", "decode-only tok/s", "e2e speed-up", "decode-only speed-up", "alpha"):
            row[f"A {key}"], row[f"B {key}"], row[f"B/A {key}"] = ra.get(key), rb.get(key), _ratio(rb.get(key), ra.get(key))
        matched.append(row)
    setup = [{"field": label, "A": get(a.report), "B": get(b.report), "same": get(a.report) == get(b.report)}
             for label, get in SETUP_FIELDS]
    return (Section("Benches side by side", render("bench_compare.html.j2", rows=matched, setup=setup, a=a, b=b, shown=shown,
                                                   keys=("e2e tok/s", "decode-only tok/s", "e2e speed-up",
                                                         "decode-only speed-up", "alpha")), "bench-compare"),)
