"""The ``lab sinks`` page (lab.views.kinds.sinks) drawn from hand-written report directories.

Fault classes guarded: a page whose figures differ from the report's (a bar per position lost, a
value rounded into another, a per-layer cell from the wrong layer or head), sinks or template
positions marked other than the report says, a context measure that failed validation shown
as if it read the context, token text injected as markup.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from lab.views.publish import report_folder
from lab.views.kinds import sinks
from lab.views.page import PAGE
from tests.page_dom import PNG, Node, Tree
from tests.support import sinks_report

pytestmark = pytest.mark.unit

EVIL = "<script>alert(1)</script>"
INVALID = ("context health (relative_entropy_for_length) does not read the context on smollm2: on 72 clean prompts "
           "of independent text (lab/data/health_validation.jsonl) it drifts with content length "
           "(Spearman rho +0.27, p 0.021; bar |rho| <= 0.2)")


def analysis(tokens, roles, received, is_sink, *, invalid=INVALID, per_head=None, layer_sinks=None,
             layer_levels=None, health=4.25):
    n = len(tokens)
    return sinks_report(tokens, roles, received, is_sink, context_health=health, context_health_invalid=invalid,
                        layer_levels=layer_levels or [], layer_sinks=layer_sinks or [[] for _ in range(2)],
                        observed=[i < n - 1 for i in range(n)], per_head=per_head)["analysis"]


def write(root: Path, data: dict, csv_rows=None, png=False) -> Path:
    """A sinks report folder whose report.json holds the analysis ``data``."""
    with report_folder(root, "sinks", "fox") as rd:
        rd.write_json("report.json", {**sinks_report(["x"], ["content"], [1.0], [False]), "analysis": data})
        if csv_rows:
            rd.write_csv("positions.csv", csv_rows)
        if png:
            rd.file("heatmap.png").write_bytes(PNG)
    return rd.final


TOKENS = ["<|im_start|>", "user", "\n", "The", " fox", EVIL, "<|im_end|>"]
ROLES = ["template", "template", "template", "content", "content", "content", "template"]
RECEIVED = [0.58931, 0.0123456, 0.04, 0.0071, 0.25, 0.00005, 0.03]
IS_SINK = [True, False, False, False, True, False, False]


@pytest.fixture()
def page_tree(tmp_path) -> Tree:
    per_head = [[[0.5, 0.1, 0.0, 0.0, 0.2, 0.0, 0.0], [0.7, 0.3, 0.0, 0.0, 0.4, 0.0, 0.0]],  # layer 0, heads 0-1
                [[0.9, 0.0, 0.0, 0.0, 0.1, 0.0, 0.0], [0.1, 0.0, 0.0, 0.0, 0.3, 0.0, 0.0]]]  # layer 1
    levels = [{"position": 0, "first_layer": 0, "last_layer": 1, "n_layers": 2, "token": TOKENS[0],
               "role": "template", "sink_overall": True},
              {"position": 4, "first_layer": 0, "last_layer": 0, "n_layers": 1, "token": TOKENS[4],
               "role": "content", "sink_overall": True}]
    data = analysis(TOKENS, ROLES, RECEIVED, IS_SINK, per_head=per_head, layer_sinks=[[0, 4], [0]],
                    layer_levels=levels)
    report = write(tmp_path, data, png=True)
    return Tree((report / PAGE).read_text(encoding="utf-8"))


def bars(tree: Tree) -> list[Node]:
    return tree.root.all("g", "bar")


def test_sinks_page_every_position_has_bar_and_token_label(page_tree):
    """One bar per position, in order, each with its token (as positions.csv shows it) and a tooltip."""
    found = bars(page_tree)
    assert [int(b.attrs["data-position"]) for b in found] == list(range(len(TOKENS)))
    for b, token in zip(found, TOKENS):
        label = b.all("text", "tok-label")[0].text
        shown = sinks.visible(token)
        assert label == (shown if len(shown) <= sinks.LABEL_CHARS else shown[:sinks.LABEL_CHARS - 1] + "…")
        assert b.attrs["tabindex"] == "0"
        title = b.all("title")[0].text
        assert f"position {b.attrs['data-position']}: {sinks.visible(token)}" in title


def test_sinks_page_bar_values_equal_report(page_tree):
    """Each bar's value is the report's received attention (4 significant figures), heights ordered like it."""
    found = bars(page_tree)
    for b, v in zip(found, RECEIVED):
        assert float(b.attrs["data-received"]) == pytest.approx(v, rel=5e-4)
        assert f"received {float(b.attrs['data-received']):.4g}" in b.all("title")[0].text
    heights = [float([r for r in b.all("rect") if "hit" not in r.classes()][0].attrs["height"]) for b in found]
    order = sorted(range(len(RECEIVED)), key=lambda i: RECEIVED[i])
    assert [heights[i] for i in order] == sorted(heights)


def test_sinks_page_marks_sinks_and_template_positions_as_report_says(page_tree):
    """Sinks carry the class, the outline and the marker; template positions the hatch; nothing else does."""
    found = bars(page_tree)
    assert [("sink" in b.classes()) for b in found] == IS_SINK
    assert [("template" in b.classes()) for b in found] == [r != "content" for r in ROLES]
    for b, sink, role in zip(found, IS_SINK, ROLES):
        rect = [r for r in b.all("rect") if "hit" not in r.classes()][0]
        assert ("sink" in rect.classes()) == sink
        assert bool(b.all("text", "sink-mark")) == sink
        assert (rect.attrs["fill"] == "url(#sinks-hatch)") == (role != "content")


def test_sinks_page_per_layer_cells_equal_mean_over_heads(page_tree):
    """A per-layer cell is the position's attention in that layer averaged over heads; sinks per layer marked."""
    rows = page_tree.root.all("tr")
    row0 = [r for r in rows if r.attrs.get("id") == "level-0"][0]
    cells = row0.all("td", "cell")
    assert "layer 0, position 0: 0.6" in cells[0].attrs["title"]  # (0.5 + 0.7) / 2
    assert "layer 1, position 0: 0.5" in cells[1].attrs["title"]  # (0.9 + 0.1) / 2
    row4 = [r for r in rows if r.attrs.get("id") == "level-4"][0]
    assert ["sink" in c.classes() for c in row4.all("td", "cell")] == [True, False]
    assert "layer 1, position 4: 0.2" in row4.all("td", "cell")[1].attrs["title"]


def test_sinks_page_failed_validation_shows_warning_with_figures(page_tree):
    """A measure that failed validation on this model says so, above its value, with the record's figures."""
    warning = page_tree.root.all("div", "context-invalid")
    assert len(warning) == 1
    text = warning[0].text_all()
    for figure in ("NOT a reading of the context", "rho +0.27", "p 0.021", "bar |rho| <= 0.2"):
        assert figure in text, figure
    headline = page_tree.root.all("p", "headline")[0].text_all()
    assert "2 sinks of 7 positions" in headline and "failed validation" in headline and "4.2 / 10" in headline


def test_sinks_page_valid_measure_shows_no_warning(tmp_path):
    """Without a failed validation the page shows the value and no warning (the warning is not always on)."""
    report = write(tmp_path, analysis(TOKENS[:3], ROLES[:3], RECEIVED[:3], IS_SINK[:3], invalid=None))
    tree = Tree((report / PAGE).read_text(encoding="utf-8"))
    assert not tree.root.all("div", "context-invalid")
    assert tree.root.all("dd", "value")[0].text == "4.2 / 10"


def test_sinks_page_escapes_token_text(page_tree, tmp_path):
    """A token holding markup is text in the label, the tooltip and the aria-label, never an element."""
    assert not page_tree.root.all("script") or all("alert" not in s.text for s in page_tree.root.all("script"))
    b = bars(page_tree)[5]
    assert EVIL in b.all("title")[0].text and EVIL in b.attrs["aria-label"]
    html = next(tmp_path.glob("*-sinks-fox")).joinpath(PAGE).read_text(encoding="utf-8")
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html


def test_sinks_page_heatmap_shown_once(page_tree):
    """heatmap.png is in the per-layer section and not again among the files."""
    imgs = [i for i in page_tree.root.all("img") if i.attrs["src"].startswith("data:image/png")]
    assert len(imgs) == 1
    assert not [s for s in page_tree.root.all("section") if s.attrs.get("id") == "file-heatmap-png"]


def test_sinks_page_without_arrays_reads_positions_csv(tmp_path):
    """A report whose report.json's per-position arrays disagree in length (a damaged report: one array cut short)
    is drawn from positions.csv, values and marks alike."""
    rows = [{"position": i, "token": sinks.visible(t), "role": r, "received": v, "observed": True, "is_sink": s}
            for i, (t, r, v, s) in enumerate(zip(TOKENS, ROLES, RECEIVED, IS_SINK))]
    cut = analysis(TOKENS, ROLES, RECEIVED, IS_SINK)
    cut["received"] = cut["received"][:-1]
    report = write(tmp_path, cut, csv_rows=rows)
    found = bars(Tree((report / PAGE).read_text(encoding="utf-8")))
    assert len(found) == len(TOKENS)
    assert [("sink" in b.classes()) for b in found] == IS_SINK
    assert [float(b.attrs["data-received"]) for b in found] == pytest.approx(RECEIVED, rel=5e-4)


def test_sinks_page_of_a_report_in_another_shape_says_why_in_one_line(tmp_path):
    """A hand-edited report.json (a string where the context health goes) is named on the page in one line, the
    field and what was found; the rest of the page is drawn, no headline made of it."""
    data = analysis(TOKENS, ROLES, RECEIVED, IS_SINK)
    data["context_health"] = "good"
    tree = Tree((write(tmp_path, data) / PAGE).read_text(encoding="utf-8"))
    notes = [n for n in tree.root.all("p", "note") if "was not drawn" in n.text_all()]
    assert len(notes) == 1 and not bars(tree)
    assert ("(report.json: analysis.context_health: a number or null goes here, not a string ('good'))"
            in notes[0].text_all())


def test_sinks_page_position_outside_the_prompt_is_drawn_without_a_value(tmp_path):
    """Fault class: a position read as an index from the end: a hand-edited layer level at position -99 (of the
    typed report's shape, so no broad catch stands between it and the page) raised IndexError on the per-head
    scores; its cells are drawn without a value, the rest of the page as usual."""
    per_head = [[[0.5] * len(TOKENS)], [[0.25] * len(TOKENS)]]
    levels = [{"position": -99, "first_layer": 0, "last_layer": 1, "n_layers": 2, "token": "x", "role": "template",
               "sink_overall": False}]
    data = analysis(TOKENS, ROLES, RECEIVED, IS_SINK, per_head=per_head, layer_sinks=[[-99], [-99]],
                    layer_levels=levels)
    tree = Tree((write(tmp_path, data) / PAGE).read_text(encoding="utf-8"))
    row = [r for r in tree.root.all("tr") if r.attrs.get("id") == "level--99"][0]
    assert [c.attrs["title"] for c in row.all("td", "cell")] == ["layer 0, position -99: - (sink in this layer)",
                                                                 "layer 1, position -99: - (sink in this layer)"]
    assert len(bars(tree)) == len(TOKENS)


def test_sinks_page_long_prompt_scrolls_instead_of_squeezing(tmp_path):
    """500 positions keep their bar width: the chart grows wide inside a scrolling box."""
    n = 500
    data = analysis(["x"] * n, ["content"] * n, [1.0 / n] * n, [False] * n, invalid=None)
    tree = Tree((write(tmp_path, data) / PAGE).read_text(encoding="utf-8"))
    svg = [s for s in tree.root.all("svg") if s.attrs.get("id") == "sinks-bars"][0]
    assert svg.parent.tag == "div" and "sinkchart" in svg.parent.classes()
    assert float(svg.attrs["width"]) >= n * sinks.BAR_STEP
    assert len(bars(tree)) == n


def test_sinks_chart_floor_is_decade_below_smallest_value():
    """The log axis starts at the decade at or below the smallest positive value, never below MIN_FLOOR."""
    assert sinks._floor([0.5, 0.0071, 0.0]) == pytest.approx(0.001)
    assert sinks._floor([1e-12]) == sinks.MIN_FLOOR
    assert math.isfinite(sinks._floor([]))
