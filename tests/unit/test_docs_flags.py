"""docs/commands.md lists every flag of the commands with a flag table, with --help's own text (so each
numeric flag's range, which its help states, is in the docs too).

Fault class: a flag added (or its default or range changed) without updating the command reference.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from lab.cli import build_parser

DOCS = Path(__file__).parents[2] / "docs" / "commands.md"
# command -> (its section's heading, the next heading). lab study's table has its own layout (flag | default |
# what); calibrate-health's is kept by hand.
ORDER = ("entropy", "bench-tracker", "sinks", "calibrate-sinks", "bench-sinks", "bench-weights", "speculate", "bench",
         "bench-seed-tables", "bench-tune", "bench-tune-runtime", "study")
SECTIONS = {cmd: (f"## `lab {cmd}`", f"## `lab {nxt}`") for cmd, nxt in zip(ORDER, ORDER[1:])}
SECTIONS["stream"] = ("## `lab stream`", "## `lab intervene`")
SECTIONS["validate-context"] = ("## `lab validate-context`", "## `lab stream`")
SECTIONS["intervene"] = ("## `lab intervene`", "## `lab view`")
SECTIONS["view"] = ("## `lab view`", None)


@pytest.mark.parametrize("command", sorted(SECTIONS))
def test_commands_md_lists_every_flag_with_its_help(command):
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    text = DOCS.read_text(encoding="utf-8")
    start, end = SECTIONS[command]
    section = text[text.index(start):text.index(end) if end else None]
    rows = {line.split("|")[1].strip().strip("`").split()[0]: line for line in section.splitlines()
            if line.startswith("| `--")}
    missing, stale = [], []
    for action in sub._actions:
        flags = [s for s in action.option_strings if s.startswith("--") and s != "--help"]
        if not flags or action.help == argparse.SUPPRESS:
            continue
        row = rows.get(flags[-1])
        if row is None:
            missing.append(flags[-1])
        elif " ".join(action.help.replace("`", "").split()) not in row.replace("`", ""):
            stale.append(flags[-1])
    assert missing == [] and stale == [], f"docs/commands.md, lab {command}: missing {missing}, help text differs {stale}"
