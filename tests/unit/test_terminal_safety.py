"""User and model text cannot drive the terminal.

Fault class: an ANSI escape sequence in a prompt reached the terminal raw (it could
clear the screen or rewrite earlier lines), and Rich markup in echoed text was
interpreted. Every console of the lab shows control characters as ``\\xNN`` and
parses no markup in strings, while its own colours still come through.
"""

from __future__ import annotations

import io

import pytest
from rich.table import Table
from rich.text import Text

from lab.render.console import SafeConsole, stdout_console
from lab.safe_text import printable

HOSTILE = "a\x1b[2Jb\x1b]0;owned\x07c\x9bd[bold]e[/bold]"


def _render(obj) -> str:
    """What the lab's stdout console writes to a colour terminal."""
    console = SafeConsole(file=io.StringIO(), force_terminal=True, color_system="standard", width=100)
    console.print(obj)
    return console.file.getvalue()


def test_lab_consoles_are_safe_consoles():
    from lab.render.console import stderr_console

    assert isinstance(stdout_console(), SafeConsole) and isinstance(stderr_console(), SafeConsole)


@pytest.mark.parametrize("obj", [HOSTILE, Text(HOSTILE, style="red")], ids=["str", "Text"])
def test_console_user_text_shows_control_characters_escaped_and_markup_as_itself(obj):
    out = _render(obj)
    assert "\x1b[2J" not in out and "\x1b]0;" not in out and "\x9b" not in out and "\x07" not in out
    assert "\\x1b[2J" in out and "[bold]e[/bold]" in out


def test_console_own_styles_still_reach_the_terminal():
    """Control: the lab's own colours are escape sequences too, and must survive."""
    table = Table()
    table.add_column("x")
    table.add_row(Text(HOSTILE, style="bold red"))
    out = _render(table)
    assert "\x1b[1;31m" in out and "\\x1b[2J" in out


def test_printable_keeps_newlines_tabs_and_unicode():
    assert printable("é\n\tok ✓ \u200d") == "é\n\tok ✓ \u200d"
    assert printable("\x00\x7f") == "\\x00\\x7f"


def test_cli_error_line_escapes_control_characters(tmp_path, capsys):
    from lab import cli

    bad = tmp_path / "p\x1b[2J.jsonl"
    rc = cli.main(["study", "--prompts", str(bad), "--out", str(tmp_path / "out"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and "\x1b" not in err
