"""The ``lab bench`` report page and comparison (lab.views.kinds.bench) from hand-written report directories.

Fault classes guarded: a headline that names the wrong method as fastest or the wrong speed-up, a
table figure that differs from the report's, two benches' rows matched by position instead of by
set-up (or a wrong ratio), markup injected through a method name, and an older report (no
``by_group``) that no longer draws.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from lab.bench import results
from lab.kinds.bench import KIND as BENCH
from lab.views.publish import report_folder
from lab.views.compare import compare_html
from lab.views.core import fmt
from lab.views.files import read_report
from lab.views.kinds.bench import BASELINE, compare, headline, page
from lab.views.page import PAGE
from tests.provenance import environment_json, machine_load_json, model_json

pytestmark = pytest.mark.unit

EVIL = "<script>alert(1)</script>"
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d4944415478da63f8cfc0f01f0005000201a5b3d1c50000000049454e44ae426082")


def _spread(x: float) -> dict:
    return {"min": x * 0.9, "median": x, "max": x * 1.1}


def _method(e2e: float, dec: float, base_e2e: float, base_dec: float, gamma: int | None = None) -> tuple[dict, dict]:
    """A method's ``methods`` entry and its ``by_group["all"]`` entry."""
    m = {"tokens_per_s": _spread(e2e), "n_runs": 3, "n_tokens": 48, "same_tokens_as_lab_target_loop": True,
         "per_repeat": {"e2e_tokens_per_s": _spread(e2e), "decode_tokens_per_s": _spread(dec),
                        "e2e_speedup": _spread(e2e / base_e2e), "decode_speedup": _spread(dec / base_dec)}}
    if gamma is not None:
        m.update({"gamma": gamma, "adaptive": None, "gamma_policy": None, "alpha": 0.75, "tau": 2.5,
                  "n_drafted_tested": 40, "n_accepted": 30, "n_rounds": 19, "accepted_length_histogram": [4, 5, 10],
                  "draft_step_s": 0.002, "verify_s": 0.012, "target_step_s": 0.01, "verify_over_target_step": 1.2,
                  "cost_ratio_time": 0.2, "cost_ratio_flops": 0.1, "decode_tokens_per_s": dec,
                  "measured_speedup": 1.2, "speedup_theory_flops": 1.75, "speedup_theory_time_ratio": 1.5,
                  "speedup_predicted_from_measured_times": 1.25, "expected_tokens_per_round": 2.5,
                  "efficiency": 0.96, "overhead_fraction": 0.1, "breakeven_alpha_time_ratio": 0.2,
                  "breakeven_alpha_flops": 0.1})
    g = {"e2e_tokens_per_s": e2e, "decode_tokens_per_s": dec, "e2e_speedup": e2e / base_e2e,
         "decode_speedup": dec / base_dec, "prefill_phase_s": 0.1, "n_runs": 3}
    return m, g


def _bench(spec_e2e: float = 30.0, spec_dec: float = 36.0, names=("speculative gamma=2", "speculative gamma=4")) -> dict:
    figures = {BASELINE: _method(20.0, 24.0, 20.0, 24.0), "target-only (transformers generate)": _method(18.0, 22.0, 20.0, 24.0)}
    for i, name in enumerate(names):
        figures[name] = _method(spec_e2e - 5 * i, spec_dec - 5 * i, 20.0, 24.0, gamma=2 + 2 * i)
    return {"kind": "bench", "model": model_json(), "draft": "early-exit:24",
            "prompts": ["a", "b"], "prompt_groups": ["short", "short"], "humaneval": "none", "torch_threads": 2,
            "environment": environment_json(), "draft_cost": None,
            "config": {"gammas": [2, 4], "adaptive": [], "max_new_tokens": 16, "repeats": 3, "assisted": False,
                       "warmup_tokens": 8, "dynamic": [], "draft_dtypes": [], "prompt_lookup": False, "methods": [],
                       "sampling": {"temperature": 0.0, "top_k": None, "top_p": 1.0}, "seed": 0,
                       "dtype_sweep": False, "no_cache": False, "lab_default": False},
            "mean_prompt_tokens": 8.0, "flops_context": 40, "target_flops_per_token": 1e6, "target_step_s": 0.01,
            "methods": {n: m for n, (m, _) in figures.items()},
            "comparisons": [{"method": names[0], "against": "x", "kind": "efficiency", "value": 0.96,
                             "text": f"{names[0]}: measured 1.2x is 96% of predicted"}],
            "assisted_errors": {}, "by_group": {"all": {n: g for n, (_, g) in figures.items()}}, "runs": [],
            "machine_load": machine_load_json()}


def _write(root: Path, data: dict, slug: str = "early-exit-24", png: bool = True) -> Path:
    with report_folder(root, "bench", slug) as rd:
        rd.write_json("report.json", data)
        rd.write_text("summary.md", "# lab bench\n")
        if png:
            rd.file("bench.png").write_bytes(PNG)
    return rd.final


def _row(html: str, method: str) -> dict[str, str]:
    """A results row's cells by column, as text."""
    row = html.split(f'data-method="{method}"', 1)[1].split("</tr>", 1)[0]
    return dict(re.findall(r'<td data-col="([^"]+)">([^<]*)</td>', row))


def test_bench_headline_names_fastest_against_baseline():
    """The headline is the fastest method end to end, with its speed-ups over the baseline from by_group."""
    data = _bench()
    best = data["by_group"]["all"]["speculative gamma=2"]
    line = headline(BENCH.read(data))
    assert line.startswith("fastest: speculative gamma=2, 30 tokens/s")
    assert f"{fmt(best['e2e_speedup'])}x {BASELINE}" in line and f"decode-only {fmt(best['decode_speedup'])}x" in line


def test_bench_headline_baseline_fastest_says_so():
    """When nothing beats the target alone, the headline says so and names the best other method."""
    line = headline(BENCH.read(_bench(spec_e2e=19.0, spec_dec=20.0)))
    assert line.startswith(f"fastest: {BASELINE} itself") and "best other: speculative gamma=2" in line


def test_bench_page_results_table_first_with_report_figures(tmp_path):
    """Results come first, plots inline after; each row's cells are the report's figures."""
    data = _bench()
    files = read_report(_write(tmp_path, data))
    made = page(files, BENCH.read(files.report))
    assert [s.title for s in made.sections] == ["Results", "Plots"] and "bench.png" in made.covers
    html = (files.path / PAGE).read_text()
    assert html.index('id="bench-results"') < html.index("data:image/png;base64,")
    for name, g in data["by_group"]["all"].items():
        cells = _row(html, name)
        assert cells["e2e tok/s"] == fmt(g["e2e_tokens_per_s"]) and cells["decode-only tok/s"] == fmt(g["decode_tokens_per_s"])
        assert cells["e2e speed-up"] == fmt(g["e2e_speedup"]) and cells["decode-only speed-up"] == fmt(g["decode_speedup"])
    spec = _row(html, "speculative gamma=4")
    assert spec["alpha"] == fmt(0.75) and spec["Thm 3.8 (FLOP c)"] == fmt(1.75) and spec["gamma"] == "4"


def test_bench_page_older_report_without_by_group_uses_repeat_medians(tmp_path):
    """A report without by_group still fills the end-to-end and decode-only columns (medians over repeats)."""
    data = _bench()
    del data["by_group"]
    html = (_write(tmp_path, data, png=False) / PAGE).read_text()
    cells = _row(html, "speculative gamma=2")
    assert cells["e2e tok/s"] == fmt(30.0) and cells["decode-only tok/s"] == fmt(36.0)


def test_bench_page_escapes_method_names(tmp_path):
    """A method name carrying markup is shown as text in the table and the headline's meta tag."""
    html = (_write(tmp_path, _bench(names=(EVIL, "speculative gamma=4"))) / PAGE).read_text()
    assert EVIL not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_bench_compare_matches_rows_by_setup_with_ratio(tmp_path):
    """Rows are matched by method name, whatever their order; B/A is B's figure over A's; unmatched ones say so."""
    a = _bench()
    b = _bench(spec_e2e=45.0, spec_dec=54.0, names=("speculative gamma=4", "speculative gamma=2"))
    b["methods"]["speculative gamma=6"] = copy.deepcopy(b["methods"]["speculative gamma=4"])
    b["by_group"]["all"]["speculative gamma=6"] = copy.deepcopy(b["by_group"]["all"]["speculative gamma=4"])
    fa, fb = read_report(_write(tmp_path, a)), read_report(_write(tmp_path, b))
    (section,) = compare(fa, fb)
    row = section.html.split('data-method="speculative gamma=2"', 1)[1].split("</tr>", 1)[0]
    ea, eb = a["by_group"]["all"]["speculative gamma=2"]["e2e_tokens_per_s"], b["by_group"]["all"]["speculative gamma=2"]["e2e_tokens_per_s"]
    assert (ea, eb) == (30.0, 40.0)
    assert f'<td class="ratio" data-col="B/A e2e tok/s">{fmt(eb / ea)}</td>' in row
    assert "<td>B only</td>" in section.html.split('data-method="speculative gamma=6"', 1)[1].split("</tr>", 1)[0]
    whole = compare_html(fa, fb)
    assert 'id="bench-compare"' in whole and "Summaries" in whole


def test_bench_compare_flags_setups_that_differ(tmp_path):
    """The set-up table marks a field the two benches do not share (here max_new_tokens)."""
    a, b = _bench(), _bench()
    b["config"]["max_new_tokens"] = 64
    (section,) = compare(read_report(_write(tmp_path, a)), read_report(_write(tmp_path, b)))
    differs = re.findall(r'<tr class="differs"><th scope="row">([^<]+)</th>', section.html)
    assert differs == ["max new tokens"]


def test_bench_baseline_name_is_the_benchs():
    """The page's baseline name is lab.bench's (a rename there would otherwise leave every headline without one)."""
    assert BASELINE == results.BASELINE


def test_bench_page_of_a_report_in_another_shape_says_why_in_one_line(tmp_path):
    """A hand-edited report.json (a string where a method's alpha goes) is named on the page in one line, the field
    and what was found; the rest of the page (summary, plots) is drawn, and no results table made of it. Compared
    with a well-formed bench, the comparison says the same in one line instead of raising."""
    data = _bench()
    data["methods"]["speculative gamma=4"]["alpha"] = "high"
    bad = _write(tmp_path, data)
    html = (bad / PAGE).read_text()
    assert 'id="not-drawn"' in html and 'id="bench-results"' not in html and "data:image/png;base64," in html
    assert ("(report.json: methods.speculative gamma=4.alpha: a number or null goes here, "
            "not a string (&#39;high&#39;))") in html
    whole = compare_html(read_report(_write(tmp_path, _bench())), read_report(bad))
    assert 'id="bench-compare"' not in whole
    assert "(B&#39;s report.json: methods.speculative gamma=4.alpha: a number or null goes here" in whole


def test_bench_page_of_a_tuning_report_is_its_summary():
    """A bench folder's other reports (here bench-tune-runtime) are read as their own variant, and the page draws no
    results table for them (their summary is their page); a bench report's keys are refused as that variant's."""
    from lab.kinds import ShapeError

    runtime = {"kind": "bench-tune-runtime", "model": "qwen", "candidates": {}, "torch_threads": 2,
               "max_new_tokens": 8, "repeats": 1, "prompts": ["a"], "prompt_groups": ["code"], "humaneval": None,
               "environment": environment_json(), "result": {}, "machine": {}, "tuning_file": None}
    report = BENCH.read(runtime)
    assert type(report).__name__ == "RuntimeTuneReport" and page(None, report).sections == ()
    with pytest.raises(ShapeError, match=r"^no fields 'candidates', 'max_new_tokens', 'repeats' \.\.\. in Report$"):
        BENCH.read({**runtime, "kind": "bench", "model": {}, "draft": "d"})
