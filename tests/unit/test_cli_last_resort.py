"""How a run ends on an error the lab did not foresee, and on exhausted memory.

Fault class: only a few exception types became a one-line error; anything else (a missing
cluster, a dead peer binary, ``MemoryError``) ended in a Python traceback. The last-resort
handler is not a blanket catch: it prints the exception's type and message on one line, keeps
the full traceback in a file named there, exits 1, and leaves no half-written report.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lab import cli
from lab.reports import report_dir


@pytest.fixture
def log_dir(tmp_path, monkeypatch):
    path = tmp_path / "logs"
    monkeypatch.setenv("LAB_LOG_DIR", str(path))
    return path


def _fail_mid_report(args):
    with report_dir(args.out, "entropy", "x") as rd:
        rd.write_text("summary.md", "half of a report")
        raise RuntimeError("the plotting library broke\nits second line")


def test_cli_unforeseen_error_one_line_traceback_file_exit_1_no_report(tmp_path, capsys, monkeypatch, log_dir):
    """An unforeseen exception mid-report: one line (type, message, file), exit 1, no report directory."""
    from lab.commands import entropy

    monkeypatch.setattr(entropy, "run", _fail_mid_report)
    rc = cli.main(["entropy", "hi", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 1, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "RuntimeError: the plotting library broke / its second line" in lines[0]
    path = Path(re.search(r"full traceback in (\S+?)\)", lines[0]).group(1))
    assert path.parent == log_dir and path.is_file()
    text = path.read_text(encoding="utf-8")
    assert "Traceback (most recent call last)" in text and "_fail_mid_report" in text
    assert list((tmp_path / "out").iterdir()) == []  # the staging directory went with the error


def test_cli_unforeseen_error_verbose_prints_the_traceback(tmp_path, capsys, monkeypatch, log_dir):
    from lab.commands import entropy

    monkeypatch.setattr(entropy, "run", _fail_mid_report)
    rc = cli.main(["-v", "entropy", "hi", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 1 and "_fail_mid_report" in err and "RuntimeError" in err


def test_cli_unforeseen_error_unwritable_log_dir_falls_back_to_tempdir(tmp_path, capsys, monkeypatch):
    from lab.commands import entropy

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("LAB_LOG_DIR", str(blocker / "logs"))  # under a file: cannot be created
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    monkeypatch.setattr(entropy, "run", _fail_mid_report)
    rc = cli.main(["entropy", "hi", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 1 and str(tmp_path / "tmp" / "lab-logs") in err, err


def test_cli_interrupt_is_not_swallowed_by_the_last_resort(tmp_path, capsys, monkeypatch, log_dir):
    """Ctrl-C keeps its own exit (130) and words; the last resort handles exceptions only."""
    from lab.commands import entropy

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(entropy, "run", interrupted)
    rc = cli.main(["entropy", "hi", "--out", str(tmp_path / "out")])
    assert rc == 130 and "interrupted" in capsys.readouterr().err
    assert not log_dir.exists()


def test_cli_memory_error_loading_names_memory_model_and_what_to_try(tmp_path, capsys, monkeypatch):
    """Fault class (out of memory ending in a traceback): ``ulimit -v 1500000; lab entropy Hi`` ended in a
    MemoryError traceback."""
    import transformers

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "model.safetensors").write_bytes(b"\0" * 2048)

    def no_memory(*args, **kwargs):
        raise MemoryError("Cannot allocate memory (os error 12)")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: object())
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_memory)
    rc = cli.main(["entropy", "Hi", "--model", str(model_dir), "--device", "cpu", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 1, err
    assert len(lines) == 1 and "Traceback" not in err, err
    line = lines[0]
    assert "out of memory" in line and str(model_dir) in line and "os error 12" in line
    assert "GiB" in line and "--dtype bfloat16" in line  # what the machine has, what to try
    assert not (tmp_path / "out").exists()
