"""docs/commands.md lists every flag of ``lab speculate`` and ``lab bench``, with --help's own text.

Fault class: a flag added (or its default changed) without updating the command reference.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.cli import build_parser

DOCS = Path(__file__).parents[2] / "docs" / "commands.md"
SECTIONS = {"speculate": ("## `lab speculate`", "## `lab bench`"), "bench": ("## `lab bench`", "## `lab study`")}


@pytest.mark.parametrize("command", sorted(SECTIONS))
def test_commands_md_lists_every_flag_with_its_help(command):
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    text = DOCS.read_text(encoding="utf-8")
    start, end = SECTIONS[command]
    section = text[text.index(start):text.index(end)]
    rows = {line.split("|")[1].strip().strip("`").split()[0]: line for line in section.splitlines()
            if line.startswith("| `--")}
    missing, stale = [], []
    for action in sub._actions:
        flags = [s for s in action.option_strings if s.startswith("--") and s != "--help"]
        if not flags:
            continue
        row = rows.get(flags[-1])
        if row is None:
            missing.append(flags[-1])
        elif " ".join(action.help.replace("`", "").split()) not in row.replace("`", ""):
            stale.append(flags[-1])
    assert missing == [] and stale == [], f"docs/commands.md, lab {command}: missing {missing}, help text differs {stale}"
