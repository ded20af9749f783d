"""The entropy report's page and comparison (lab.views.kinds.entropy), from hand-written reports: no model, no browser.

Fault classes guarded: a tooltip or headline that shows other numbers than the report holds, a
token's text injected as markup, an older report (no ``steps``) that breaks the page, a comparison
that pairs tokens without saying how or drops what it could not pair, a page that grows past its bound.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from lab.views.publish import report_folder
from lab.views.compare import compare_html, read_pair
from lab.views.core import colour, fmt, token_cell
from lab.views.kinds import entropy as ent
from lab.views.page import PAGE
from tests.provenance import model_json
from tests.support import entropy_report

pytestmark = pytest.mark.unit

LOG2_V = math.log2(49152)
# The task's bound on a 64-token page; the kind's own part of such a page measures ~80 kB (the
# summary's PNG, ~100 kB more on a real report, is not in these fakes).
MAX_PAGE_BYTES = 1_000_000


def _step(i: int, text: str, h: float, v: float, alts: list[tuple[int, str, float]], tid: int | None = None) -> dict:
    tid = alts[0][0] if tid is None else tid
    chosen = next((p for t, _, p in alts if t == tid), 0.01)
    return {"position": 30 + i, "token_id": tid, "token_text": text, "entropy_bits": h,
            "normalized_entropy": h / LOG2_V, "varentropy_bits2": v, "sampled_entropy_bits": 0.0,
            "sampled_normalized_entropy": 0.0, "chosen_prob": chosen, "bucket": "confident",
            "alternatives": [{"token_id": t, "token_text": x, "prob": p} for t, x, p in alts]}


STEPS = [
    _step(0, "The", 5.17494351791924, 8.657557747869475,
          [(504, "The", 0.15217892724635185), (60, "L", 0.14018363647915824), (15319, "La", 0.10376058432990524)]),
    _step(1, " capital", 0.22877626667892037, 2.379490823359866,
          [(3575, " capital", 0.9805279724146255), (14937, " Capital", 0.009266679111286138)]),
    _step(2, "<b>", 1.5, 3.25, [(9, "<script>", 0.6), (7, "<b>", 0.3)], tid=7),
    _step(3, "\n", 0.5, 1.0, [(198, "\n", 0.9), (5, " x", 0.05)]),
]
SUMMARY = {"n_steps": 4, "stop_reason": "eos", "mean_entropy_bits": 1.205353061389363,
           "max_entropy_bits": 5.17494351791924, "mean_varentropy_bits2": 4.198858536293444}


def _report(root: Path, slug: str, data: dict, csv_rows: list[dict] | None = None) -> Path:
    with report_folder(root, "entropy", slug) as rd:
        rd.write_json("report.json", data)
        rd.write_text("summary.md", "# Entropy run\n")
        if csv_rows is not None:
            rd.write_csv("tokens.csv", csv_rows)
    return rd.final


def _data(steps=STEPS, summary=SUMMARY, **extra) -> dict:
    """A whole report.json holding ``steps``; ``summary``'s figures given, its others None."""
    return entropy_report(steps, summary, **{"prompt": "What is the capital of France?", "vocab_size": 49152,
                                             "model": model_json(), **extra})


def _tokens(html: str, prefix: str = "tok", suffix: str = "") -> dict[int, str]:
    """Each token span's HTML (text and tooltip) by step, cut at the next token span."""
    out = {}
    for m in re.finditer(rf'<span class="tok[^"]*" tabindex="0" id="{prefix}-(\d+){suffix}"', html):
        end = html.find('<span class="tok', m.end())
        out[int(m.group(1))] = html[m.start():end if end >= 0 else len(html)]
    return out


def test_page_tooltips_show_each_alternative_and_probability_of_the_report(tmp_path):
    """Every token's tooltip lists each of its alternatives with the report's probability (3 figures), the
    chosen one marked, and the step's entropy and varentropy."""
    html = (_report(tmp_path, "x", _data()) / PAGE).read_text()
    toks = _tokens(html)
    assert sorted(toks) == [0, 1, 2, 3]
    for i, s in enumerate(STEPS):
        tip = toks[i]
        assert f"entropy {fmt(s['entropy_bits'])} bits" in tip
        assert f"varentropy {fmt(s['varentropy_bits2'])} bits²" in tip
        for a in s["alternatives"]:
            shown = token_cell(a["token_text"]).replace("<", "&lt;").replace(">", "&gt;")
            row = re.search(rf"<tr( class=\"chosen\")?><td>(▶?)</td><td>{re.escape(shown)}</td>"
                            r"<td>([^<]*)</td></tr>", tip)
            assert row, f"step {i}: alternative {a['token_text']!r} missing from its tooltip"
            assert row.group(3) == fmt(a["prob"]), f"step {i}: {a['token_text']!r} shows {row.group(3)}"
            assert (row.group(2) == "▶") == (a["token_id"] == s["token_id"]), f"step {i}: chosen mark wrong"
    assert ">0.152<" in toks[0]


def test_page_headline_is_the_report_summary(tmp_path):
    html = (_report(tmp_path, "x", _data()) / PAGE).read_text()
    line = "4 tokens, mean entropy 1.21 bits (max 5.17), mean varentropy 4.20 bits²"
    assert f'<meta name="lab-headline" content="{line}">' in html
    assert f'<p class="headline">{line}</p>' in html


def test_headline_without_summary_is_computed_from_steps_and_without_either_is_empty():
    """The headline is the report's summary, never recomputed from the steps (the typed report always holds a
    summary): a mean it gives as None (a run with no steps) is left out, a figure it gives is shown."""
    from lab.kinds.entropy import KIND as ENTROPY

    def line(**summary):
        return ent.headline(ENTROPY.read(_data(STEPS[:2], summary)).summary)

    assert line() == "2 tokens"
    assert line(mean_entropy_bits=2.0) == "2 tokens, mean entropy 2.00 bits"
    assert line(mean_entropy_bits=2.0, max_entropy_bits=5.17494351791924) == "2 tokens, mean entropy 2.00 bits (max 5.17)"


def test_page_token_markup_is_shown_as_text(tmp_path):
    """A token ``<b>`` and an alternative ``<script>`` are escaped, in the answer, the chart and the table."""
    html = (_report(tmp_path, "x", _data()) / PAGE).read_text()
    assert "<b>" not in html and "<script>alert" not in html
    assert '"><script>' not in html
    tok = _tokens(html)[2]
    assert tok.split("<span class=\"alts\"")[0].endswith("&lt;b&gt;") and "&lt;script&gt;" in tok
    assert "step 2: &lt;b&gt;" in html  # the chart's <title>


def test_page_newline_token_shows_return_mark_and_breaks_the_line(tmp_path):
    html = (_report(tmp_path, "x", _data()) / PAGE).read_text()
    assert re.search(r'id="tok-3"[^>]*>⏎\n<span class="alts"', html)


def test_page_chart_has_a_title_per_step_axis_units_and_the_steps_data(tmp_path):
    html = (_report(tmp_path, "x", _data()) / PAGE).read_text()
    svg = html[html.index('<svg id="entropy-chart"'):html.index("</svg>", html.index('<svg id="entropy-chart"'))]
    titles = re.findall(r"<title>(step \d+:[^<]*)</title>", svg)
    assert len(titles) == len(STEPS)
    assert titles[1] == (f"step 1: ·capital, entropy {fmt(STEPS[1]['entropy_bits'])} bits, varentropy "
                         f"{fmt(STEPS[1]['varentropy_bits2'])} bits², p(chosen) {fmt(STEPS[1]['chosen_prob'])}")
    assert "entropy (bits)" in svg and "varentropy (bits²)" in svg and "decode step" in svg
    data = json.loads(re.search(r'<script type="application/json" id="entropy-chart-data">(.*?)</script>', html, re.S)
                      .group(1))
    assert [d["h"] for d in data] == [fmt(s["entropy_bits"]) for s in STEPS]
    assert all(f'href="#step-{i}"' in svg and f'<tr id="step-{i}">' in html for i in range(len(STEPS)))


def test_page_of_report_without_steps_says_so_and_falls_back_to_tokens_csv(tmp_path):
    """A report.json with no steps: with tokens.csv the tokens come from it; with neither the page is still drawn
    and says what it lacks."""
    bare = _report(tmp_path, "old", entropy_report([], text="Paris."))
    html = (bare / PAGE).read_text()
    assert "holds no per-token steps" in html and "Paris." in html and 'class="tok"' not in html
    rows = [{"step": 0, "position": 30, "token_id": 60, "token_text": " Paris", "entropy_bits": 0.75,
             "normalized_entropy": 0.05, "varentropy_bits2": 1.5, "chosen_prob": 0.8,
             "alt1_id": 60, "alt1_text": " Paris", "alt1_prob": 0.8,
             "alt2_id": 61, "alt2_text": " Lyon", "alt2_prob": 0.125}]
    from_csv = _report(tmp_path, "csv", entropy_report([]), rows)
    html = (from_csv / PAGE).read_text()
    tip = _tokens(html)[0]
    assert ">·Lyon</td><td>0.125<" in tip and "entropy 0.75 bits" in tip and "Read from tokens.csv" in html
    assert html.count('id="file-tokens-csv"') == 0  # covered: the kind's table shows it


def test_page_of_64_tokens_stays_under_bound(tmp_path):
    steps = [_step(i, f" tok{i}\n" if i % 9 == 8 else f" word{i}", 0.1 * (i % 40), 0.3 * (i % 17),
                   [(i * 10 + k, f" alt{k}-{i}", 0.5 / (k + 1)) for k in range(5)]) for i in range(64)]
    html = (_report(tmp_path, "big", _data(steps, {**SUMMARY, "n_steps": 64})) / PAGE).read_text()
    assert len(_tokens(html)) == 64
    assert len(html.encode("utf-8")) < MAX_PAGE_BYTES, f"{len(html.encode('utf-8'))} bytes"


# --------------------------------------------------------------------------- comparison


def _pair(tmp_path, a: dict, b: dict) -> str:
    ra, rb = _report(tmp_path, "a", a), _report(tmp_path, "b", b)
    return compare_html(*read_pair(ra, rb))


def test_compare_same_tokenizer_pairs_by_step_and_colours_b_minus_a(tmp_path):
    b_steps = [dict(s, entropy_bits=s["entropy_bits"] + d) for s, d in zip(STEPS, (1.0, -0.5, 0.0, 0.25))]
    html = _pair(tmp_path, _data(), _data(b_steps))
    assert "Aligned by decode step" in html and "same tokens at every paired step" in html
    for i, d in enumerate((1.0, -0.5, 0.0, 0.25)):
        row = re.search(rf'<tr id="pair-{i}">(.*?)</tr>', html).group(1)
        assert re.findall(r"<td>([^<]*)</td>", row)[-1] == fmt(STEPS[i]["entropy_bits"] + d - STEPS[i]["entropy_bits"])
    # B more uncertain by the largest difference: the far (purple) end of the diverging scale.
    assert f"background:{colour(1.0, ent.DIVERGING_MAP)}" in _tokens(html, "pair", "-a")[0]
    assert f"background:{colour(0.5, ent.DIVERGING_MAP)}" in _tokens(html, "pair", "-b")[2]


def test_compare_different_tokenizers_aligns_on_characters_and_sums_split_tokens():
    """B splits " Paris" in two; on character offsets the row holds one A token and two B tokens, their
    entropies summed."""
    a = [ent.Step(0, 1, "The", 1.0, None, 1.0, None, 0.5), ent.Step(1, 2, " Paris", 2.0, None, 1.0, None, 0.5)]
    b = [ent.Step(0, 9, "The", 1.5, None, 1.0, None, 0.5), ent.Step(1, 10, " Par", 0.25, None, 1.0, None, 0.5),
         ent.Step(2, 11, "is", 0.5, None, 1.0, None, 0.5)]
    al = ent.align(a, b, by_step=False)
    assert "character offsets" in al.rule and "the same" in al.note
    assert [(len(p.a), len(p.b), p.diff) for p in al.pairs] == [(1, 1, 0.5), (1, 2, -1.25)]


def test_compare_diverging_texts_are_stated_not_paired_silently():
    """After the first differing character nothing is paired; the note says where and how many are left."""
    a = [ent.Step(0, 1, "The", 1.0, None, 1.0, None, 0.5), ent.Step(1, 2, " Paris", 2.0, None, 1.0, None, 0.5)]
    b = [ent.Step(0, 9, "The", 1.5, None, 1.0, None, 0.5), ent.Step(1, 10, " Lyon", 0.25, None, 1.0, None, 0.5),
         ent.Step(2, 11, ".", 0.5, None, 1.0, None, 0.5)]
    al = ent.align(a, b, by_step=False)
    assert "first differ at character 4 (step 1 of A, step 1 of B): 1 tokens of A and 2 of B" in al.note
    assert [p.diff for p in al.pairs] == [0.5, None, None, None]


def test_compare_of_different_vocabularies_uses_characters_and_shorter_run_is_stated(tmp_path):
    html = _pair(tmp_path, _data(), _data(STEPS[:2], vocab_size=151936))
    assert "Aligned on character offsets" in html
    assert ("B&#39;s text ends at character 11 (a prefix of A&#39;s): 2 tokens of A and 0 of B after it are "
            "unpaired") in html
    same = _pair(tmp_path, _data(), _data(STEPS[:2]))
    assert "2 steps of A past the shorter run are unpaired" in same


def test_compare_run_without_steps_says_so(tmp_path):
    html = _pair(tmp_path, _data(), _data([]))
    assert "B holds no per-token steps" in html and "Summaries side by side" in html
    row = re.search(r"<th scope=\"row\">mean entropy \(bits\)</th>(.*?)</tr>", html).group(1)
    assert re.findall(r"<td>([^<]*)</td>", row) == ["1.205", "1.205", "0"]  # B's summary still compared


def test_compare_summaries_table_gives_both_runs_and_difference(tmp_path):
    html = _pair(tmp_path, _data(), _data(summary={**SUMMARY, "mean_entropy_bits": 2.0}))
    row = re.search(r"<th scope=\"row\">mean entropy \(bits\)</th>(.*?)</tr>", html).group(1)
    assert re.findall(r"<td>([^<]*)</td>", row) == ["1.205", "2", fmt(2.0 - SUMMARY["mean_entropy_bits"], 4)]


def test_entropy_view_docstring_examples_pass():
    """The module's examples (_round_step; token_cell and token_inline are lab.views.core's) run, so what its docstrings claim stays true."""
    import doctest

    result = doctest.testmod(ent, report=False)
    assert result.attempted > 0 and result.failed == 0, result


def test_page_chart_of_certain_run_has_finite_readable_axis(tmp_path):
    """A run with zero entropy and varentropy at every step (greedy, fully certain) draws finite coordinates
    and an axis from 0 to MIN_AXIS_TOP, not a division by zero."""
    steps = [_step(i, f" w{i}", 0.0, 0.0, [(i, f" w{i}", 1.0)]) for i in range(3)]
    figures = {"mean_entropy_bits": 0.0, "max_entropy_bits": 0.0, "mean_varentropy_bits2": 0.0}
    html = (_report(tmp_path, "certain", _data(steps, figures)) / PAGE).read_text()
    svg = html[html.index('<svg id="entropy-chart"'):html.index("</svg>", html.index('<svg id="entropy-chart"'))]
    assert "nan" not in svg.lower() and "inf" not in svg.lower()
    assert f">{fmt(ent.MIN_AXIS_TOP)}</text>" in svg
    assert "3 tokens, mean entropy 0.00 bits (max 0.00), mean varentropy 0.00 bits²" in html


def test_page_of_a_report_in_another_shape_says_why_in_one_line(tmp_path):
    """A hand-edited report.json (a string where a step's entropy goes) is named on the page in one line, the field
    and what was found; the rest of the page is drawn, and a comparison with it says the same of that run (both summaries kept)."""
    bad = _data()
    bad["steps"] = [dict(STEPS[0], entropy_bits="high"), *STEPS[1:]]
    html = (_report(tmp_path, "bad", bad) / PAGE).read_text()
    reason = "report.json: steps[0].entropy_bits: a number goes here, not a string (&#39;high&#39;)"
    notes = re.findall(r'<p class="note">The entropy part of this page was not drawn[^\n]*</p>', html)
    assert len(notes) == 1 and f"({reason})" in notes[0]
    assert 'class="tok"' not in html and "<h2>summary.md</h2>" in html
    html = _pair(tmp_path, _data(), bad)
    assert f"(B&#39;s {reason})" in html and "<h2>Summaries</h2>" in html and "Summaries side by side" not in html
