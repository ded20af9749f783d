"""The ``lab stream`` and ``lab validate-context`` pages drawn from hand-written report directories.

Fault classes guarded: a verdict or figure on the page that differs from the report's, a failed
validation shown as a pass, a table or plot shown twice (once by the kind's section, once among
the files), report text injected as markup.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.views.publish import report_folder
from lab.views.kinds._summary import prose
from lab.views.page import PAGE
from tests.page_dom import PNG, Tree
from tests.provenance import environment_json, model_json
from tests.support import stream_policy_row, stream_report, stream_test

pytestmark = pytest.mark.unit

EVIL = "<script>alert(1)</script>"


def _write(root: Path, kind: str, data: dict, summary: str, csvs: dict, png: str | None = None) -> Tree:
    with report_folder(root, kind, "x") as rd:
        rd.write_json("report.json", data)
        rd.write_text("summary.md", summary)
        for name, rows in csvs.items():
            rd.write_csv(name, rows)
        if png:
            rd.file(png).write_bytes(PNG)
    return Tree((rd.final / PAGE).read_text(encoding="utf-8"))


def _sections(tree: Tree) -> list[str]:
    return [s.attrs.get("id", "") for s in tree.root.all("section")]


POLICIES = [
    {"policy": "dense", "kind": "dense", "budget": None, "ppl": 17.848225, "ppl_low": 15.2269, "ppl_high": 20.9208,
     "ratio_to_dense": 1.0, "ratio_low": 1.0, "ratio_high": 1.0, "ppl_all_targets": 17.5395, "wall_s": 2.62,
     "peak_rss_mb": 205.3, "alpha_greedy": None, "n_accepted_greedy": None, "n_tested_greedy": None},
    {"policy": "window:252", "kind": "window", "budget": 252, "ppl": 42.352743, "ppl_low": 27.70, "ppl_high": 64.75,
     "ratio_to_dense": 2.3729386, "ratio_low": 1.8193, "ratio_high": 3.0950, "ppl_all_targets": 27.24, "wall_s": 3.84,
     "peak_rss_mb": 207.3, "alpha_greedy": 0.625, "n_accepted_greedy": 5, "n_tested_greedy": 8},
]
TESTS = [stream_test("H1: window:252 has higher NLL than sinks:4+252", n_pairs=2, n_a_higher=2, median_diff=0.7913,
                     statistic=3.0, p_value=0.00412, alpha=0.01, reject=True),
         stream_test(f"negative control {EVIL}", b="window:252 (chunks shuffled)", n_pairs=2, n_a_higher=1,
                     median_diff=0.0, statistic=1.5, p_value=0.75, alpha=0.01, reject=False)]
# The policies as report.json holds them (lab.kinds.stream.PolicyToDense): policies.csv's figures without its
# acceptance columns, which report.json keeps under "acceptance".
REPORT_POLICIES = [stream_policy_row(**{k: v for k, v in p.items() if not k.startswith(("alpha_", "n_accepted_",
                                                                                         "n_tested_"))})
                   for p in POLICIES]
STREAM_SUMMARY = ("# lab stream\n\nModel prose.\n\n| policy | PPL |\n|---|---|\n| dense | 17.85 |\n\n"
                  "- H1: p = 0.00412: **rejects the null**.\n\n## Side by side\n\nStreamingLLM words.\n")


@pytest.fixture()
def stream_tree(tmp_path) -> Tree:
    data = stream_report(policies=REPORT_POLICIES, tests=TESTS, recompute_check={
        "recompute": "recompute:256", "sinks": "sinks:4+252", "ratio": 0.97883, "low": 0.95487, "high": 1.00339,
        "tolerance": 0.05, "within": True, "n_targets": 16})
    return _write(tmp_path, "stream", data, STREAM_SUMMARY, {"policies.csv": POLICIES, "tokens.csv": [{"position": 1}]},
                  png="rolling_nll.png")


def test_stream_page_verdict_first_with_report_figures(stream_tree):
    """The tests' verdicts and p-values, and the recompute check, are the report's, before the policy table."""
    ids = _sections(stream_tree)
    assert ids.index("verdict") < ids.index("policies") < ids.index("rolling")
    rows = [r for r in stream_tree.root.all("tr") if r.attrs.get("class") in ("reject", "keep")]
    assert [r.attrs["class"] for r in rows] == ["reject", "keep"]
    assert "0.00412" in rows[0].text_all() and "rejects the null" in rows[0].text_all()
    check = [p for p in stream_tree.root.all("p") if p.attrs.get("id") == "recompute-check"][0].text_all()
    assert "0.979 [0.955, 1.003]" in check and "within" in check and "5%" in check
    headline = stream_tree.root.all("p", "headline")[0].text_all()
    assert "rejects the null (p 0.00412)" in headline and "window:252 2.37" in headline


def test_stream_page_policy_table_equals_policies_csv(stream_tree):
    """Each policy's PPL, interval, ratio and acceptance counts are policies.csv's."""
    section = [s for s in stream_tree.root.all("section") if s.attrs.get("id") == "policies"][0]
    cells = [[td.text_all() for td in tr.all("td")] for tr in section.all("tr")[1:]]
    assert cells[0][:4] == ["dense", "all", "17.85 [15.23, 20.92]", "1.000 [1.000, 1.000]"]
    assert cells[1][:6] == ["window:252", "252", "42.35 [27.70, 64.75]", "2.373 [1.819, 3.095]", "27.24",
                            "0.62 (5/8)"]


def test_stream_page_shows_nothing_twice(stream_tree):
    """policies.csv, the plot and the summary's table and verdicts appear once; tokens.csv stays among the files."""
    ids = _sections(stream_tree)
    assert "file-policies-csv" not in ids and "file-rolling-nll-png" not in ids and "summary" not in ids
    assert "file-tokens-csv" in ids
    assert len([i for i in stream_tree.root.all("img") if i.attrs["src"].startswith("data:")]) == 1
    method = [s for s in stream_tree.root.all("section") if s.attrs.get("id") == "method"][0].text_all()
    assert "StreamingLLM words" in method and "17.85" not in method and "rejects" not in method


def test_stream_page_escapes_test_names(stream_tree):
    """A test name holding markup is shown as text."""
    assert not stream_tree.root.all("script") or all("alert" not in s.text for s in stream_tree.root.all("script"))
    assert any(EVIL in td.text_all() for td in stream_tree.root.all("td"))


def test_stream_page_of_a_report_in_another_shape_says_why_in_one_line(tmp_path):
    """A hand-edited report.json (a string where a test's p-value goes) is named on the page in one line, the field
    and what was found; no verdict or headline made of it, policies.csv still drawn among the files."""
    data = stream_report(policies=REPORT_POLICIES, tests=[{**TESTS[0], "p_value": "tiny"}])
    tree = _write(tmp_path, "stream", data, STREAM_SUMMARY, {"policies.csv": POLICIES})
    notes = [n for n in tree.root.all("p", "note") if "was not drawn" in n.text_all()]
    assert len(notes) == 1 and "verdict" not in _sections(tree) and "file-policies-csv" in _sections(tree)
    assert "(report.json: tests[0].p_value: a number or null goes here, not a string ('tiny'))" in notes[0].text_all()
    assert not [h for h in tree.root.all("p", "headline") if "rejects" in h.text_all()]


def _figures(measure, auroc, failed, direction=1):
    return {"measure": measure, "direction": direction, "n_pairs": 160, "auroc": auroc, "ci_low": auroc - 0.07,
            "ci_high": auroc + 0.06, "length_auroc": 0.506, "placebo_auroc": 0.469, "length_rho": -0.00937,
            "end_share": 0.0, "failed": failed}


def _context(tmp_path, reference_from="/tmp/ref.json", chosen_failed=("AUROC 0.73 < 0.75",)) -> Tree:
    return _write(tmp_path, "validate-context", _context_report(reference_from, chosen_failed), CONTEXT_SUMMARY,
                  {"pairs.csv": [{"id": "val-000"}]})


CONTEXT_VERDICT = "lookback_heads fails on smollm2 (160 validation pairs): AUROC 0.73 < 0.75"
CONTEXT_SUMMARY = (f"# Context measures\n\nPairs: 160.\n\n**Verdict: {CONTEXT_VERDICT}.**\n\nThe bar: AUROC >= 0.75."
                   "\n\n| measure | AUROC |\n|---|---|\n| lookback_heads | 0.73 |\n")


def _context_report(reference_from="/tmp/ref.json", chosen_failed=("AUROC 0.73 < 0.75",)) -> dict:
    """A whole validate-context report.json, as lab.kinds.validate_context.Report holds it."""
    validation = {
        "profile": "smollm2", "set_name": "validation", "items_file": "v.jsonl",
        "reference": {"heads": [[27, 2]], "intercept": 0.8, "slope": -0.08, "n_pairs": 60, "loo_auroc": 0.82},
        "reference_from": reference_from, "chosen": _figures("lookback_heads", 0.7312, list(chosen_failed)),
        "others": [_figures("lookback", 0.6, ["|rho(length)| 0.61 > 0.2"]), _figures("gain_bits", 0.81, [])],
        "rows": [{"id": "val-000", "relevant_lookback_heads": 0.1, "irrelevant_lookback_heads": None}]}
    return {"kind": "validate-context", "format": 1, "model": model_json(), "environment": environment_json(),
            "validation": validation, "verdict": CONTEXT_VERDICT}


def test_validate_context_page_failed_verdict_first_and_marked(tmp_path):
    """A failed chosen measure: the verdict section comes first and is marked failed; the headline is the verdict."""
    tree = _context(tmp_path)
    assert _sections(tree)[0] == "verdict"
    verdict = [p for p in tree.root.all("p") if "verdict" in p.classes()][0]
    assert "failed" in verdict.classes() and "AUROC 0.73 < 0.75" in verdict.text_all()
    assert tree.root.all("p", "headline")[0].text_all().startswith("lookback_heads fails on smollm2")


def test_validate_context_page_fitted_set_not_marked_failed(tmp_path):
    """On the set it was fitted on the chosen measure's figures are in-sample: no failure mark."""
    tree = _context(tmp_path, reference_from="fitted on this set")
    assert not [p for p in tree.root.all("p") if "failed" in p.classes()]


def test_validate_context_page_measure_table_equals_report(tmp_path):
    """The chosen measure is the first row; every row's AUROC, interval and pass/fail are the report's."""
    tree = _context(tmp_path)
    rows = [[td.text_all() for td in tr.all("td")] for tr in tree.root.all("table")[0].all("tr")[1:]]
    assert [r[0].replace(" (chosen)", "") for r in rows] == ["lookback_heads", "lookback", "gain_bits"]
    assert "(chosen)" in rows[0][0] and "(chosen)" not in rows[1][0]
    assert rows[0][2:4] == ["0.731", "0.66-0.79"] and rows[0][9:] == ["no", "AUROC 0.73 < 0.75"]
    assert rows[2][2] == "0.81" and rows[2][9] == "yes"


def test_validate_context_page_shows_summary_prose_once(tmp_path):
    """The summary's prose is shown without its verdict line and table; the raw summary is not shown again."""
    tree = _context(tmp_path)
    ids = _sections(tree)
    assert "summary" not in ids and "file-pairs-csv" in ids
    method = [s for s in tree.root.all("section") if s.attrs.get("id") == "method"][0].text_all()
    assert "The bar: AUROC >= 0.75." in method and "Verdict" not in method and "0.73 |" not in method


def test_validate_context_page_of_a_report_in_another_shape_says_why_in_one_line(tmp_path):
    """A hand-edited report.json (a string where the chosen measure's AUROC goes) is named on the page in one line,
    the field and what was found; the rest of the page (the summary, pairs.csv) is drawn, no verdict made of it."""
    data = _context_report()
    data["validation"]["chosen"]["auroc"] = "high"
    tree = _write(tmp_path, "validate-context", data, CONTEXT_SUMMARY, {"pairs.csv": [{"id": "val-000"}]})
    notes = [n for n in tree.root.all("p", "note") if "was not drawn" in n.text_all()]
    assert len(notes) == 1 and "verdict" not in _sections(tree) and "file-pairs-csv" in _sections(tree)
    assert ("(report.json: validation.chosen.auroc: a number goes here, not a string ('high'))"
            in notes[0].text_all())


def test_prose_drops_title_tables_and_bold_lines():
    """What a kind's sections show from report.json is dropped from the summary; the prose stays."""
    assert prose("# T\n\n**Verdict: x.**\n\nWhy.\n\n| a |\n|---|\n\n## More\n\n- p: **within**.\n- kept\n") == \
        "Why.\n\n## More\n\n- kept"
