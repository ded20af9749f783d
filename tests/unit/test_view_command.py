"""``lab view``: one line for every bad input (exit 2), a page or a log printed for a good one.

Fault classes guarded: a traceback or a half-written comparison for a wrong path, two kinds
compared as if they were one, a browser started from a test or a pipe.
"""

from __future__ import annotations

import pytest

from lab import cli
from lab.views.publish import report_folder
from lab.views.page import PAGE
from tests.support import report_dirs

pytestmark = pytest.mark.unit


def _report(root, kind, summary="**Verdict: x.**\n"):
    with report_folder(root, kind, "p") as rd:
        rd.write_json("report.json", {"kind": kind})
        rd.write_text("summary.md", summary)
    return rd.final


@pytest.mark.parametrize("argv, message", [
    (["view", "{tmp}/missing"], "does not exist"),
    (["view", "{tmp}/file.txt"], "is not a folder"),
    (["view", "{a}", "{b}", "{a}"], "3 paths given"),
    (["view", "{a}", "{study}"], "of one kind"),
    (["view", "{a}", "{tmp}/missing"], "not a report directory"),
    (["view", "--rebuild", "{a}", "{b}"], "--rebuild takes one"),
    (["view", "--rebuild", "{tmp}/missing"], "not a reports folder"),
])
def test_view_bad_input_exits_2_with_one_line(tmp_path, capsys, argv, message):
    root = tmp_path / "r"
    a, b, study = _report(root, "entropy"), _report(root, "entropy"), _report(root, "study")
    (tmp_path / "file.txt").write_text("x")
    before = sorted(p.name for p in report_dirs(root))
    args = [x.format(tmp=tmp_path, a=a, b=b, study=study) for x in argv]
    assert cli.main([*args, "--out", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in report_dirs(root)) == before, "a refused view wrote a report"


def test_view_report_prints_its_page_and_the_log_is_rebuilt(tmp_path, capsys):
    root = tmp_path / "r"
    a = _report(root, "entropy")
    (a / PAGE).unlink()
    (root / PAGE).unlink()
    assert cli.main(["view", str(a), "--no-open"]) == 0
    assert f"page: {(a / PAGE).resolve().as_uri()}" in capsys.readouterr().out
    assert (a / PAGE).is_file() and (root / PAGE).is_file()


def test_view_two_reports_writes_a_comparison_report_listed_in_the_log(tmp_path, capsys):
    root = tmp_path / "r"
    a, b = _report(root, "entropy", "**Verdict: A.**\n"), _report(root, "entropy", "**Verdict: B.**\n")
    assert cli.main(["view", str(a), str(b), "--out", str(root), "--no-open"]) == 0
    (compare,) = [p for p in report_dirs(root) if "-compare-" in p.name]
    html = (compare / PAGE).read_text()
    assert "Verdict: A." in html and "Verdict: B." in html
    assert compare.name in (root / PAGE).read_text()


def test_view_rebuild_draws_every_page_and_the_log(tmp_path, capsys):
    root = tmp_path / "r"
    reports = [_report(root, "entropy"), _report(root, "study")]
    for r in reports:
        (r / PAGE).unlink()
    assert cli.main(["view", "--rebuild", str(root), "--no-open"]) == 0
    assert "2 pages drawn again" in capsys.readouterr().out
    assert all((r / PAGE).is_file() for r in reports)


def test_view_rebuild_of_one_report_is_refused_and_its_page_kept(tmp_path, capsys):
    """Fault class: --rebuild given a report took it for a reports folder and wrote an empty log over its page."""
    report = _report(tmp_path / "r", "entropy")
    before = (report / PAGE).read_bytes()
    assert cli.main(["view", "--rebuild", str(report), "--no-open"]) == 2
    err = capsys.readouterr().err
    assert "is one report" in err and len(err.strip().splitlines()) == 1
    assert (report / PAGE).read_bytes() == before


def test_view_never_opens_a_browser_without_a_terminal(tmp_path, monkeypatch):
    import webbrowser

    from lab.views.open import open_page

    monkeypatch.setattr(webbrowser, "open", lambda *a, **k: pytest.fail("a browser was started"))
    assert open_page(tmp_path / "x.html") is False  # pytest captures stdout: no terminal


def test_view_rebuild_keeps_a_comparison_page_drawn_from_its_two_reports(tmp_path, capsys):
    """Fault class: --rebuild (or lab view on a comparison folder) drew a comparison as an empty generic page,
    losing it; it is drawn again from A and B, and kept as it is when they are gone."""
    import shutil

    root = tmp_path / "r"
    a, b = _report(root, "entropy", "**Verdict: A.**\n"), _report(root, "entropy", "**Verdict: B.**\n")
    assert cli.main(["view", str(a), str(b), "--out", str(root), "--no-open"]) == 0
    (compare,) = [p for p in report_dirs(root) if "-compare-" in p.name]
    before = (compare / PAGE).read_text()
    assert cli.main(["view", "--rebuild", str(root), "--no-open"]) == 0
    assert (compare / PAGE).read_text() == before
    shutil.rmtree(b)
    assert cli.main(["view", str(compare), "--no-open"]) == 0
    assert (compare / PAGE).read_text() == before, "a comparison whose B is gone is kept, not redrawn empty"


def test_view_comparison_report_json_is_its_typed_report_and_one_of_another_shape_is_kept_as_drawn(tmp_path, capsys):
    """report.json of a comparison holds its kind, format, the compared kind and the two folders, in that order
    (lab.kinds.compare.Report); a hand-edited one (a number where a folder goes) names no two reports, so its page is
    kept as drawn, not redrawn from nothing."""
    import json

    root = tmp_path / "r"
    a, b = _report(root, "entropy", "**Verdict: A.**\n"), _report(root, "entropy", "**Verdict: B.**\n")
    assert cli.main(["view", str(a), str(b), "--out", str(root), "--no-open"]) == 0
    (compare,) = [p for p in report_dirs(root) if "-compare-" in p.name]
    data = json.loads((compare / "report.json").read_text())
    assert list(data.items()) == [("kind", "compare"), ("format", 1), ("compared_kind", "entropy"),
                                  ("a", str(a.resolve())), ("b", str(b.resolve()))]
    before = (compare / PAGE).read_text()
    (compare / "report.json").write_text(json.dumps({**data, "b": 5}))
    (b / "summary.md").write_text("**Verdict: B again.**\n")
    assert cli.main(["view", "--rebuild", str(root), "--no-open"]) == 0
    assert (compare / PAGE).read_text() == before
    (compare / "report.json").write_text(json.dumps(data))  # negative control: the report as written is redrawn
    assert cli.main(["view", "--rebuild", str(root), "--no-open"]) == 0
    assert "Verdict: B again." in (compare / PAGE).read_text()


def test_view_rebuild_of_a_comparison_of_a_folder_named_with_an_invisible_character_redraws_it(tmp_path, capsys):
    """Fault class: a path used as shown: --rebuild read a comparison's A and B paths with their text escaped for a
    page (U+200B as ``\\u200b``), found no such folder and kept the comparison's page unredrawn."""
    root = tmp_path / "r"
    a, b = _report(root, "entropy", "**Verdict: A.**\n"), _report(root, "entropy", "**Verdict: B.**\n")
    b = b.rename(b.with_name(b.name + "\u200b"))
    assert cli.main(["view", str(a), str(b), "--out", str(root), "--no-open"]) == 0
    (compare,) = [p for p in report_dirs(root) if "-compare-" in p.name]
    (b / "summary.md").write_text("**Verdict: B again.**\n")
    assert cli.main(["view", "--rebuild", str(root), "--no-open"]) == 0
    assert "Verdict: B again." in (compare / PAGE).read_text()
