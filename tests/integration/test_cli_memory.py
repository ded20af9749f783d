"""Exhausted memory on the real embedded model: ``ulimit -v 1500000; lab entropy Hi``.

Fault class (out of memory ending in a traceback): a process short of memory ended in a ``MemoryError``
traceback. Now it ends
in one line naming memory as the cause, what was loading, what the process may have and what to
try, with exit 1 and no report. The limit is an address-space limit (``RLIMIT_AS``), so the
failure does not depend on how busy or how full the machine is: SmolLM2's load needs more than
1.5 GB of address space here, while the interpreter, torch and transformers fit below it.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ADDRESS_SPACE_KIB = 1_500_000  # the `ulimit -v` of the report
ROOT = Path(__file__).resolve().parents[2]


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_KIB * 1024, ADDRESS_SPACE_KIB * 1024))


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_AS"), reason="no address-space limit on this platform")
def test_cli_entropy_under_ulimit_v_ends_in_one_line_naming_memory(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAB_LOG_DIR": str(tmp_path / "logs")}
    proc = subprocess.run([sys.executable, "-m", "lab.cli", "entropy", "Hi", "--device", "cpu",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, env=env,
                          preexec_fn=_limit, timeout=600)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    line = lines[0]
    assert "out of memory" in line and "smollm2" in line and "ulimit -v" in line, line
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "logs").exists()  # a foreseen failure: no traceback file
