"""summary.md hygiene: relative file names, counts labelled as clean
prompts, missing data said in words, printed signs next to the predicted sign, power per test."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from lab.analysis.hypotheses import correlation_test, judge
from lab.render.study import write_report
from lab.render import study_summary
from lab.study.work import prompts_display
from lab.study.run import run_study
from tests.study_fakes import FakeRunnerWithDecode, fake_config


@pytest.mark.slow
def test_summary_names_files_relative_labels_clean_counts_and_reports_power(tmp_path):
    result = run_study(fake_config(tmp_path, limit=12), runner=FakeRunnerWithDecode())
    summary = (write_report(result) / "summary.md").read_text()
    assert "file `lab/data/prompts.jsonl`" in summary and str(tmp_path) not in summary.split("## Files")[0]
    assert "/lab/data/" not in summary  # no absolute path to the embedded set
    assert "## Per category (counts are clean prompts)" in summary and "| category | clean prompts |" in summary
    assert "## What the study could detect" in summary
    for t in result.analysis.tests:
        assert f"| {t.name} |" in summary
    assert "n/a to n/a" not in summary and "0 categories with" not in summary
    assert "- H1 placebo control" in summary and "- H1c placebo control" in summary  # beside H1, every study
    assert "99.4% CI" in summary and "at 99.44% (1 - 0.05 / the family's size" in summary


def test_prompts_display_relative_inside_cwd_else_as_given(tmp_path, monkeypatch):
    assert prompts_display(None) == "lab/data/prompts.jsonl"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    assert prompts_display(str(tmp_path / "sub" / "p.jsonl")) == "sub/p.jsonl"
    assert prompts_display("/elsewhere/p.jsonl") == "/elsewhere/p.jsonl"


def test_test_line_prints_raw_sign_with_predicted_sign_and_words_for_missing_ci():
    t = judge([correlation_test([1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1.5], n_resamples=99)])[0]
    line = study_summary.test_line(t)
    assert "spearman_rho = -1.000 (predicted < 0;" in line
    t = replace(t, ci_low=math.nan, ci_high=math.nan)
    assert "no CI (" in study_summary.test_line(t) and "n/a to n/a" not in study_summary.test_line(t)


def test_category_test_too_little_data_says_what_is_missing_in_words():
    from lab.analysis.hypotheses import category_test

    r = category_test([0.1, 0.2, 0.3], ["math", "code", "summary"])
    assert r.note.startswith("no category has 2 or more clean prompts") and "needs at least 2 such categories" in r.note
    r = category_test([0.1, 0.2, 0.3], ["math", "math", "code"])
    assert r.note.startswith("only 1 category (math) has")


def test_readme_lists_every_study_flag():
    """Fault class: a flag added to `lab study` without documenting it."""
    from pathlib import Path

    from lab.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["study"]
    flags = [s for a in sub._actions for s in a.option_strings if s.startswith("--") and s != "--help"]
    readme = (Path(__file__).parents[2] / "docs" / "commands.md").read_text(encoding="utf-8")
    section = readme[readme.index("Flags of `lab study`"):readme.index("## `lab calibrate-health`")]
    assert len(flags) >= 14
    assert [f for f in flags if f"`{f}" not in section] == []


def test_placebo_line_says_passed_failed_or_not_run():
    base = {"rho": 0.31, "p_value": 0.004, "n": 40, "tolerance": 0.05}
    assert "FAILED: the verdict is inconclusive" in study_summary.placebo_line({**base, "passes": False})
    assert "p >= 0.05: passed" in study_summary.placebo_line({**base, "p_value": 0.4, "passes": True})
    assert "not run" in study_summary.placebo_line({**base, "passes": None})
