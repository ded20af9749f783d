"""``lab --help`` and ``lab <command> --help`` answer without importing torch or transformers.

Fault class: a command module (or a module its ``register`` reads a default from) importing torch at
top level, so that every ``--help`` waits seconds for it. Each check runs in a fresh interpreter, since
this test session has torch imported already.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a fresh interpreter per check: seconds each on a busy machine

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers")
# A fresh interpreter importing the parser takes well under a second; this bounds a hung child.
CHILD_TIMEOUT_S = 120

PROBE = """
import sys
from lab import cli
try:
    cli.main({argv!r})
except SystemExit:
    pass
print("HEAVY:" + ",".join(m for m in {heavy!r} if m in sys.modules))
"""


def heavy_modules_after(argv: list[str]) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv, heavy=HEAVY)], cwd=ROOT,
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("HEAVY:"), done.stdout
    return [m for m in line.removeprefix("HEAVY:").split(",") if m]


@pytest.mark.parametrize("argv", [["--help"], ["study", "--help"], ["bench", "--help"]],
                         ids=lambda argv: " ".join(argv))
def test_help_fresh_interpreter_imports_no_torch(argv):
    assert heavy_modules_after(argv) == [], f"lab {' '.join(argv)} imported {HEAVY}"


def test_help_probe_negative_control_sees_torch():
    """The probe reports what was imported: a command that imports torch shows it."""
    done = subprocess.run([sys.executable, "-c", "import torch\n" + PROBE.format(argv=["--help"], heavy=HEAVY)],
                          cwd=ROOT, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    assert done.stdout.strip().splitlines()[-1] == "HEAVY:torch"
