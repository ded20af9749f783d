"""The ``lab bench`` report page: the results table first, then the plots; two benches side by side.

A bench alternates the target alone and each speculative set-up over repeats
(:mod:`lab.bench.run`); its ``report.json`` (:class:`lab.kinds.bench.Report`) holds, per
method, the pooled end-to-end and decode-only figures of every prompt group (``by_group``, speed-ups
over :data:`lab.bench.results.BASELINE` in the same runs), the spread over repeats, and for a
speculative method alpha, tau and Leviathan et al. 2023's predicted speed-ups. The page shows those
figures as the report holds them; the only arithmetic it does is the ratio of two benches' figures
in :func:`compare`. A bench folder's other reports (``bench-tune``, ``bench-tune-runtime``,
``bench-seed-tables``) have no results table here: their page is the summary and the files.
"""

from __future__ import annotations

from typing import Any

from lab.kinds.bench import ALL_GROUP, KIND, Bench, Config, Method, Report, SpeculativeMethod, Spread
from lab.numbers import number_or_none
from lab.provenance import ModelSource
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


def _median(method: Method, figure: str) -> float | None:
    """The median over repeats of ``figure`` (a ``per_repeat`` key); None without it."""
    spread = method.per_repeat.get(figure)
    return spread.median if spread is not None else None


def result_rows(bench: Any) -> list[dict[str, Any]]:
    """One row per method of a bench (a :class:`lab.kinds.bench.Report` or one of its ``sides``), in the report's
    order; none for another report of a bench folder (a tuning run's, the seed tables').

    The end-to-end and decode-only columns are the ``"all"`` group's pooled figures (``by_group``);
    a report without them falls back to the medians over repeats (``per_repeat``).
    """
    if not isinstance(bench, (Report, Bench)):
        return []
    pooled = (bench.by_group or {}).get(ALL_GROUP) or {}
    rows = []
    for name, m in bench.methods.items():
        g = pooled.get(name)

        def figure(key: str) -> Any:
            return getattr(g, key) if g is not None else _median(m, key)

        spec = m if isinstance(m, SpeculativeMethod) else None

        def speculative(field: str) -> Any:
            return getattr(spec, field) if spec is not None else None

        tps: Spread = m.tokens_per_s
        rows.append({"method": name, "gamma": speculative("gamma"),
                     "e2e tok/s": figure("e2e_tokens_per_s"), "e2e speed-up": figure("e2e_speedup"),
                     "decode-only tok/s": figure("decode_tokens_per_s"),
                     "decode-only speed-up": figure("decode_speedup"),
                     "tok/s median": tps.median, "tok/s min": tps.min, "tok/s max": tps.max,
                     "alpha": speculative("alpha"), "tau": speculative("tau"),
                     "measured speed-up (loop)": speculative("measured_speedup"),
                     "predicted (measured times)": speculative("speedup_predicted_from_measured_times"),
                     "Thm 3.8 (time c)": speculative("speedup_theory_time_ratio"),
                     "Thm 3.8 (FLOP c)": speculative("speedup_theory_flops"),
                     "same tokens": m.same_tokens_as_lab_target_loop})
    return rows


def _row_id(prefix: str, name: str) -> str:
    return prefix + "".join(c if c.isalnum() else "-" for c in name)


def headline(bench: Report | Bench) -> str:
    """The fastest method end to end against the baseline, in a line; ``""`` without figures."""
    rows = [r for r in result_rows(bench) if number_or_none(r["e2e tok/s"], text=False) is not None]
    if not rows:
        return ""
    best = max(rows, key=lambda r: r["e2e tok/s"])
    base = next((r for r in rows if r["method"] == BASELINE), None)
    busy = " (machine busy: figures noisy)" if bench.machine_load is not None and bench.machine_load.busy else ""
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


def _results_html(bench: Report | Bench, prefix: str) -> Any:
    rows = result_rows(bench)
    load = bench.machine_load
    return render("bench_results.html.j2", rows=rows, columns=COLUMNS, baseline=BASELINE, shown=shown,
                  row_ids=[_row_id(prefix, r["method"]) for r in rows], busy=load is not None and load.busy,
                  max_load=load.max_load_1m if load is not None else None,
                  threads=load.threads if load is not None else None,
                  comparisons=bench.comparisons, errors=bench.assisted_errors)


def page(files: ReportFiles, report: Any) -> KindPage:
    """The bench page's own part: the results (and each side's), then the plots; none for a bench folder's other
    reports (``bench-tune``, ``bench-tune-runtime``, ``bench-seed-tables``: their summary is their page) or a bench
    without methods."""
    if not isinstance(report, Report) or not report.methods:
        return KindPage()
    sections = [Section("Results", _results_html(report, "method-"), "results")]
    for label, side in (report.sides or {}).items():
        sections.append(Section(f"Results: {label}", _results_html(side, _row_id("side-", label) + "-"),
                                _row_id("side-", label)))
    if files.images or files.svgs:
        sections.append(Section("Plots", render("bench_plots.html.j2", images=files.images, svgs=files.svgs), "plots"))
    return KindPage(headline=headline(report), sections=tuple(sections),
                    covers=frozenset(files.images) | frozenset(files.svgs))


def _sampling(config: Config | None) -> str | None:
    """A bench's sampling set-up in words: ``greedy``, or its temperature and filters; None without a config."""
    if config is None:
        return None
    s = config.sampling
    if not s.temperature:
        return "greedy"
    parts = [f"temperature {shown('temperature', s.temperature)}"]
    parts += [f"{label} {shown(label, value)}" for value, label in ((s.top_k, "top-k"), (s.top_p, "top-p"))
              if value is not None and not (label == "top-p" and value == 1.0)]
    return ", ".join(parts)


def _model(report: Any) -> ModelSource | None:
    """The target's provenance of a bench folder's report; None for a ``bench-tune-runtime`` report (it names its
    profile only)."""
    return report.model if isinstance(report.model, ModelSource) else None


def _config(report: Any) -> Config | None:
    """A bench's schedule; None for a bench folder's other reports (they ran several)."""
    return report.config if isinstance(report, Report) else None


SETUP_FIELDS = (("model", lambda r: m.model if (m := _model(r)) is not None else None),
                ("weights", lambda r: m.weights if (m := _model(r)) is not None else None),
                ("draft", lambda r: getattr(r, "draft", None)),
                ("max new tokens", lambda r: c.max_new_tokens if (c := _config(r)) is not None else None),
                ("repeats", lambda r: c.repeats if (c := _config(r)) is not None else None),
                ("sampling", lambda r: _sampling(_config(r))),
                ("prompts", lambda r: len(getattr(r, "prompts", ()))),  # a seed-tables report has none (its `prompt`)
                ("torch threads", lambda r: r.torch_threads),
                ("machine busy", lambda r: r.machine_load.busy if isinstance(r, Report) and r.machine_load is not None
                 else None))


def _ratio(b: Any, a: Any) -> float | None:
    x, y = number_or_none(b, text=False), number_or_none(a, text=False)
    return x / y if x is not None and y not in (None, 0.0) else None


def compare(a: ReportFiles, b: ReportFiles) -> tuple[Section, ...]:
    """Two benches: their set-ups, then every method matched by name (its set-up: gamma, adaptive rule,
    draft dtype ...) with both runs' end-to-end and decode-only figures and the ratio B / A.

    Raises:
        ShapeError: a report not in its kind's shape (:func:`lab.views.compare.kind_compare` shows it in one line).
    """
    report_a, report_b = KIND.read(a.report), KIND.read(b.report)
    rows_a = {r["method"]: r for r in result_rows(report_a)}
    rows_b = {r["method"]: r for r in result_rows(report_b)}
    names = list(rows_a) + [n for n in rows_b if n not in rows_a]
    matched = []
    for name in names:
        ra, rb = rows_a.get(name, {}), rows_b.get(name, {})
        row: dict[str, Any] = {"method": name, "in": "both" if ra and rb else "A only" if ra else "B only"}
        for key in ("e2e tok/s", "decode-only tok/s", "e2e speed-up", "decode-only speed-up", "alpha"):
            row[f"A {key}"], row[f"B {key}"], row[f"B/A {key}"] = ra.get(key), rb.get(key), _ratio(rb.get(key), ra.get(key))
        matched.append(row)
    setup = [{"field": label, "A": get(report_a), "B": get(report_b), "same": get(report_a) == get(report_b)}
             for label, get in SETUP_FIELDS]
    return (Section("Benches side by side", render("bench_compare.html.j2", rows=matched, setup=setup, a=a, b=b, shown=shown,
                                                   keys=("e2e tok/s", "decode-only tok/s", "e2e speed-up",
                                                         "decode-only speed-up", "alpha")), "bench-compare"),)
