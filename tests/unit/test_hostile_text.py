"""Hostile text in prompts and files: escapes in reports, reordering and invisible characters on the
terminal, and files that are not UTF-8.

Fault classes (poor cases): raw ESC bytes were kept in ``summary.md`` and the CSVs (``cat summary.md``
could clear a screen); right-to-left overrides and zero-width characters went raw to the terminal
(shown text not what the text says); bad UTF-8 in a ``lab bench --prompts @FILE`` or a
``lab calibrate-sinks --prompts`` file was reported without naming the file.
"""

from __future__ import annotations

import csv
import json

import pytest

from lab import cli
from lab.views.publish import report_folder
from lab.safe_text import printable

HOSTILE = "a\x1b[2Jb\u202eevil\u200bc\ufeff\x9b"


def test_printable_escapes_bidi_controls_and_invisible_characters():
    assert printable("abc\u202edef") == "abc\\u202edef"
    assert printable("\u2066x\u2069\u200f") == "\\u2066x\\u2069\\u200f"
    assert printable("zero\u200bwidth\u2060\ufeff") == "zero\\u200bwidth\\u2060\\ufeff"
    assert printable("\x1b[2J\x9b\r") == "\\x1b[2J\\x9b\\x0d"


def test_printable_negative_control_keeps_text_and_joiners():
    """Newline, tab, accents, CJK, emoji and the joiners U+200C / U+200D (emoji, Indic, Persian) stay."""
    text = "é\n\tok ✓ 漢字 👩\u200d💻 می\u200cخواهم"
    assert printable(text) == text


def test_console_shows_a_right_to_left_override_escaped():
    import io

    from lab.render.console import SafeConsole

    buf = io.StringIO()
    SafeConsole(file=buf, force_terminal=True, width=80).print("user \u202etxt.exe")
    assert "\u202e" not in buf.getvalue() and "\\u202e" in buf.getvalue()


def test_report_files_escape_control_bidi_and_invisible_characters(tmp_path):
    with report_folder(tmp_path, "entropy", "x") as rd:
        rd.write_text("summary.md", f"# prompt\n\n{HOSTILE}\n")
        rd.write_csv("tokens.csv", [{"token": HOSTILE, "n": 1}])
        rd.write_json("report.json", {"prompt": HOSTILE})
    summary = (rd.final / "summary.md").read_text(encoding="utf-8")
    assert "\x1b" not in summary and "\u202e" not in summary and "\u200b" not in summary and "\x9b" not in summary
    assert "\\x1b[2J" in summary and "\\u202e" in summary and summary.startswith("# prompt\n\n")
    with (rd.final / "tokens.csv").open(newline="", encoding="utf-8") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["token"] == printable(HOSTILE) and row["n"] == "1"
    assert json.loads((rd.final / "report.json").read_text(encoding="utf-8"))["prompt"] == HOSTILE  # exact text


def _bad_utf8(path):
    path.write_bytes(b"first prompt\nsecond \xff\xfe prompt\n")
    return path


def test_cli_bench_prompts_file_not_utf8_names_file_and_line(tmp_path, capsys, monkeypatch):
    import lab.models.loading

    monkeypatch.setattr(lab.models.loading, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    bad = _bad_utf8(tmp_path / "prompts.txt")
    rc = cli.main(["bench", "--prompts", f"@{bad}", "--device", "cpu", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and f"{bad}'" in err and ":2: not valid UTF-8" in err, err
    assert len(err.strip().splitlines()) == 1


def test_cli_calibrate_sinks_prompts_not_utf8_names_file_and_line(tmp_path, capsys, monkeypatch):
    import lab.models.loading

    monkeypatch.setattr(lab.models.loading, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    bad = _bad_utf8(tmp_path / "cal.jsonl")
    rc = cli.main(["calibrate-sinks", "--prompts", str(bad), "--device", "cpu", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and str(bad) in err and ":2: not valid UTF-8" in err, err
