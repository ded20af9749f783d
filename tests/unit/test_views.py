"""The report pages (lab.views) without a browser: what a page embeds, what it refuses to embed, the log.

Fault classes guarded: a page that asks the network or the disk for something (a CDN script, a
plot by file name), markup injected through a prompt or a token, a log that misses a run or
lists a half-written one, a comparison of two kinds of report.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lab.views.publish import report_folder
from lab.views.compare import KindMismatchError, read_pair
from lab.views.core import markdown
from lab.views.files import kind_of, read_report
from lab.views.log import log_rows, rebuild_log
from lab.views.page import PAGE, page_html
from tests.provenance import environment_json, model_json
from tests.study_fakes import study_report
from tests.support import entropy_report

pytestmark = pytest.mark.unit

# A 1x1 PNG: a plot as a report holds it.
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d4944415478da63f8cfc0f01f0005000201a5b3d1c50000000049454e44ae426082")
REMOTE = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:|//)""", re.I)


def _report(root: Path, kind: str, slug: str, data: dict, summary: str = "", csv_rows=None, png=False) -> Path:
    with report_folder(root, kind, slug) as rd:
        rd.write_json("report.json", data)
        if summary:
            rd.write_text("summary.md", summary)
        if csv_rows:
            rd.write_csv("rows.csv", csv_rows)
        if png:
            rd.file("plot.png").write_bytes(PNG)
    return rd.final


def test_report_dir_writes_page_and_log(tmp_path):
    """Every report written through report_folder (report_dir with the views) has its index.html, and the root's log lists it."""
    report = _report(tmp_path, "entropy", "hello", entropy_report(),
                     "# Run\n\n**Verdict: fine.**\n\n![plot](plot.png)\n", [{"a": 1, "b": "x"}], png=True)
    page = (report / PAGE).read_text()
    assert "data:image/png;base64," in page and "plot.png\"" not in page.replace("alt=\"plot.png\"", "")
    assert not REMOTE.search(page), "a page refers to the network"
    log = (tmp_path / PAGE).read_text()
    assert report.name in log and "smollm2" in log


def test_page_escapes_markup_from_prompts_and_cells(tmp_path):
    """A prompt carrying <script> is shown as text, in the summary and in a table cell alike."""
    evil = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    report = _report(tmp_path, "entropy", "evil", {"prompt": evil}, f"# {evil}\n\nprompt: {evil}\n", [{"text": evil}])
    page = (report / PAGE).read_text()
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)" in page


def test_markdown_image_not_in_report_is_dropped_not_fetched():
    """An image the report does not hold becomes its alt text: the page never asks the disk or network."""
    html = markdown("![x](http://example.com/a.png) ![y](missing.png)", {})
    assert "<img" not in html and "[x]" in html and "[y]" in html


def test_kind_of_reads_longest_kind_first():
    assert kind_of("20261205-000000-bench-sinks-smollm2") == "bench-sinks"
    assert kind_of("20261205-000000-calibrate-health-validate-x") == "calibrate-health-validate"
    assert kind_of("20261205-000000-bench-tune-runtime-qwen") == "bench"
    assert kind_of("random-folder") == ""


def test_log_lists_every_run_and_old_formats_skips_staging(tmp_path):
    """The log has one row per visible folder (an older one with what it holds), none for a staging folder."""
    _report(tmp_path, "study", "a", study_report([], environment=environment_json(model=model_json(weights="q4"))),
            "**Verdict: 2 supported.**\n")
    old = tmp_path / "20250101-000000-entropy-old"
    old.mkdir()
    (old / "summary.md").write_text("# old\n")
    (old / "tokens.csv").write_text("a\n1\n")
    (tmp_path / ".20250101-000001-entropy-x.partial-abcd").mkdir()
    rebuild_log(tmp_path)
    rows = {r.name: r for r in log_rows(tmp_path)}
    assert len(rows) == 2
    assert rows[old.name].holds and "summary.md" in rows[old.name].holds
    study = next(r for r in rows.values() if r.kind == "study")
    assert (study.model, study.weights, study.headline) == ("smollm2", "q4", "Verdict: 2 supported.")


def test_log_reads_a_redrawn_page_not_a_stale_row(tmp_path):
    """A report whose page is drawn again (its summary changed) shows its new headline in the log."""
    from lab.views.page import write_page

    report = _report(tmp_path, "study", "a", {}, "**Verdict: one.**\n")
    assert log_rows(tmp_path)[0].headline == "Verdict: one."
    (report / "summary.md").write_text("**Verdict: two.**\n")
    write_page(report)
    assert log_rows(tmp_path)[0].headline == "Verdict: two."


def test_compare_refuses_two_kinds(tmp_path):
    a = _report(tmp_path, "entropy", "a", {"kind": "entropy"}, "x")
    b = _report(tmp_path, "study", "b", {}, "y")
    with pytest.raises(KindMismatchError, match="of one kind"):
        read_pair(a, b)
    with pytest.raises(ValueError, match="not a report directory"):
        read_pair(a, tmp_path / "nope")


def test_page_of_oversized_file_names_it(tmp_path, monkeypatch):
    """A file past the page's bound is named under 'Files not shown', never embedded."""
    monkeypatch.setattr("lab.views.files.MAX_CSV_BYTES", 10)
    report = _report(tmp_path, "entropy", "big", {}, "", [{"a": "x" * 100}])
    html = page_html(read_report(report))
    assert "rows.csv: not read" in html


def test_failed_page_keeps_report_with_warning(tmp_path, monkeypatch, caplog):
    """A page that cannot be drawn costs the page only: the report is in place, a warning says so."""
    def boom(*a, **k):
        raise RuntimeError("template broke")
    monkeypatch.setattr("lab.views.page.page_html", boom)
    report = _report(tmp_path, "entropy", "x", {"a": 1})
    assert (report / "report.json").is_file() and not (report / PAGE).exists()
    assert "index.html) was not written" in caplog.text
    assert json.loads((report / "report.json").read_text()) == {"a": 1}
