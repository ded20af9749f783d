"""H4a / H4b per distractor text and pooled with the distractor as a random effect
(:mod:`lab.analysis.distractors`): the table on a hand-made set, its errors, too few texts, and the
study's hooks (the analysis, report.json, summary.md) with the pre-stated tests left as they were."""

from __future__ import annotations

import json
import math

import pytest
from scipy import stats

from lab.analysis.distractors import distractor_table, h4_distractor_tables
from lab.analysis.intervention import MIN_DISTRACTORS
from lab.analysis.study import analyze
from lab.prompts import load_prompts

pytestmark = pytest.mark.unit

# Three texts: a (1, 3), b (-1, 1), c (4, 4, 7): means 2, 0, 5; SDs sqrt 2, sqrt 2, sqrt 3.
HAND_DIFFS = [1.0, 3.0, -1.0, 1.0, 4.0, 4.0, 7.0]
HAND_LABELS = ["a", "a", "b", "b", "c", "c", "c"]


def _table(diffs=HAND_DIFFS, labels=HAND_LABELS, **kw):
    kw = {"name": "H4b", "measure": "mean_entropy_bits", "predicted_sign": 1, **kw}
    return distractor_table(diffs, labels, **kw)


def test_distractor_table_hand_made_set_rows_and_pooled_t_on_texts():
    """Rows per text; the pooled t is over the three text means (2 df), not the seven pairs."""
    t = _table()
    assert [(r.distractor, r.n_pairs) for r in t.rows] == [("a", 2), ("b", 2), ("c", 3)]
    assert [r.mean_difference for r in t.rows] == pytest.approx([2.0, 0.0, 5.0])
    assert [r.sd_difference for r in t.rows] == pytest.approx([math.sqrt(2), math.sqrt(2), math.sqrt(3)])
    p = t.pooled
    se = math.sqrt(57 / 9) / math.sqrt(3)  # SD of (2, 0, 5) over sqrt(3 texts)
    assert (p.estimate, p.df, p.n_distractors, p.n_pairs) == (pytest.approx(7 / 3), 2, 3, 7)
    assert p.t == pytest.approx(7 / 3 / se)
    assert p.p_value == pytest.approx(2 * stats.t.sf(7 / 3 / se, 2))
    half = stats.t.isf(0.025, 2) * se
    assert (p.ci_low, p.ci_high, p.ci_level) == (pytest.approx(7 / 3 - half), pytest.approx(7 / 3 + half), 0.95)
    assert 0 <= p.icc <= 1 and p.note == ""


def test_distractor_table_one_pair_text_sd_nan_and_unequal_texts_weigh_alike():
    t = _table([1.0, 5.0, 5.0, 5.0, 2.0], ["a", "b", "b", "b", "c"])
    assert math.isnan(t.rows[0].sd_difference) and t.rows[1].sd_difference == 0
    assert t.pooled.estimate == pytest.approx((1 + 5 + 2) / 3)  # not the pairs' mean 3.6


@pytest.mark.parametrize("kw, word", [
    ({"diffs": [1.0, 2.0]}, "equal length"),
    ({"diffs": [1.0, 2.0, math.nan, 1.0, 4.0, 4.0, 7.0]}, "finite"),
    ({"labels": ["a", "a", "", "b", "c", "c", "c"]}, "non-empty strings"),
    ({"labels": ["a", "a", None, "b", "c", "c", "c"]}, "non-empty strings"),
    ({"predicted_sign": 0}, "predicted_sign=0"),
    ({"level": 1.5}, "level=1.5"),
])
def test_distractor_table_bad_input_one_line_value_error(kw, word):
    with pytest.raises(ValueError) as e:
        _table(**kw)
    assert word in str(e.value) and "\n" not in str(e.value)


def test_distractor_table_fewer_than_three_texts_not_tested_with_note():
    t = _table([1.0, 3.0, -1.0, 1.0], ["a", "a", "b", "b"])
    assert MIN_DISTRACTORS == 3 and len(t.rows) == 2
    assert math.isnan(t.pooled.p_value) and math.isnan(t.pooled.estimate)
    assert t.pooled.note == "2 distractor text(s): the random-effect test needs 3"


def test_distractor_table_equal_text_means_and_no_pairs_not_tested_with_note():
    assert "every distractor mean is equal" in _table([1.0, 1.0, 1.0], ["a", "b", "c"]).pooled.note
    empty = _table([], [])
    assert empty.rows == () and empty.pooled.note == "no pair names its distractor text"


def _pair(pid, h_p, h_n, e_p, e_n):
    return {"poisoned": pid, "context_health_poisoned": h_p, "context_health_neutral": h_n,
            "mean_entropy_bits_poisoned": e_p, "mean_entropy_bits_neutral": e_n}


def test_h4_distractor_tables_differences_poisoned_minus_neutral_unlabelled_counted():
    pairs = [_pair("p1", 4.0, 5.0, 3.0, 2.0), _pair("p2", 6.0, 5.0, 2.5, 2.0), _pair("p3", 3.0, 5.0, math.nan, 2.0),
             _pair("p4", 1.0, 2.0, 1.0, 1.0), {**_pair("p5", 1.0, 1.0, 1.0, 1.0), "context_health_neutral": None}]
    tables = h4_distractor_tables(pairs, {"p1": "x", "p2": "x", "p3": "y", "p5": "z"})
    h4a, h4b = tables["H4a"], tables["H4b"]
    assert (h4a.measure, h4a.predicted_sign, h4b.measure, h4b.predicted_sign) == (
        "context_health", -1, "mean_entropy_bits", 1)
    assert [(r.distractor, r.n_pairs, r.mean_difference) for r in h4a.rows] == [("x", 2, 0.0), ("y", 1, -2.0)]
    assert [(r.distractor, r.n_pairs, r.mean_difference) for r in h4b.rows] == [("x", 2, 0.75), ("z", 1, 0.0)]
    assert h4a.n_unlabelled == 1 and h4b.n_unlabelled == 1  # p4: both values, no label


def test_h4_distractor_tables_bad_label_names_the_prompt():
    with pytest.raises(ValueError, match="distractor of prompt 'p1' must be a non-empty string, got 3"):
        h4_distractor_tables([], {"p1": 3})


def test_analyze_distractors_reported_beside_h4_verdicts_left_unchanged():
    """Fault class: a secondary test that moves the pre-stated family (its p-values, Holm, verdicts)."""
    from tests.simulated_study import simulate_study

    rows, tokens, _ = simulate_study(3, decodes=False)
    labels = {p.id: p.distractor for p in load_prompts() if p.distractor}
    plain = analyze(rows, tokens, n_resamples=0)
    with_texts = analyze(rows, tokens, n_resamples=0, distractors=labels)
    assert [repr((t.name, t.p_value, t.p_holm, t.verdict)) for t in with_texts.tests] == [
        repr((t.name, t.p_value, t.p_holm, t.verdict)) for t in plain.tests]  # repr: NaN == NaN
    for name in ("H4a", "H4b"):
        table = with_texts.distractor_tables[name]
        assert len(table.rows) == 18 and table.pooled.n_pairs == 18 and table.pooled.df == 17  # one text a twin
        assert math.isfinite(table.pooled.p_value)
        assert plain.distractor_tables[name].pooled.note == "no pair names its distractor text"


@pytest.mark.slow
def test_study_report_has_distractor_tables_in_json_and_summary(tmp_path):
    from lab.render.study import write_report
    from lab.study.run import run_study
    from tests.study_fakes import FakeRunner, fake_config

    result = run_study(fake_config(tmp_path, limit=12), runner=FakeRunner())
    folder = write_report(result)
    doc = json.loads((folder / "report.json").read_text())
    labels = {p.distractor for p in load_prompts() if p.distractor}
    for name in ("H4a", "H4b"):
        table = doc["distractor_tables"][name]
        assert {r["distractor"] for r in table["rows"]} <= labels and len(table["rows"]) >= MIN_DISTRACTORS
        assert table["pooled"]["df"] == len(table["rows"]) - 1
    summary = (folder / "summary.md").read_text()
    section = summary.split("### H4a and H4b per distractor text (secondary)")[1].split("## What the study")[0]
    assert "outside the Holm family" in section and section.count("| pooled, distractor random |") == 2
    assert doc["verdicts"] == result.analysis.verdicts()
