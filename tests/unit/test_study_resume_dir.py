"""``lab study --resume DIR`` resumes DIR itself, and overlapping studies lose nothing (fake runner, no weights).

Fault classes guarded here: a resume that rebuilt its settings and work-directory
name instead of reading the directory it was given, and two runs in one work
directory where the first deleted it under the second. The tests that run a study in
a subprocess are marked ``slow``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from lab.prompts import default_prompts_path
from lab.reports import rows_from_csv
from lab.study.config import StudyConfig
from lab.study.work import plan_study, work_file
from lab.study.run import run_study
from tests.study_fakes import (CLI_RESAMPLES, FAST_RESAMPLES, ROOT, FakeRunner, InterruptAfter, fake_config,
                               start_blocked, subprocess_env, use_runner)


def _interrupted(tmp_path, after=3, **kw):
    cfg = (StudyConfig(device="cpu", out=str(tmp_path), n_resamples=FAST_RESAMPLES, **kw) if "prompts" in kw
           else fake_config(tmp_path))
    first = FakeRunner(fail_after=after)
    with pytest.raises(InterruptAfter):
        run_study(cfg, runner=first)
    return plan_study(cfg), first


def _prompt_file(path: Path, lines: slice, edit: str = "") -> Path:
    """Some lines of the embedded prompt file; ``edit`` is appended to the first prompt's last message."""
    records = [json.loads(line) for line in default_prompts_path().read_text(encoding="utf-8").splitlines()[lines]]
    records[0]["messages"][-1]["content"] += edit
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.slow
def test_resume_renamed_work_dir_continues_it_and_creates_no_other(tmp_path, monkeypatch):
    """Fault class (a resume that ignores DIR): a copied or renamed work directory was ignored and every
    prompt rerun elsewhere."""
    from lab import cli

    plan, first = _interrupted(tmp_path / "out")
    mywork = tmp_path / "mywork"
    shutil.move(str(plan.work_dir), mywork)
    second = FakeRunner()
    use_runner(monkeypatch, second)
    assert cli.main(["study", "--resume", str(mywork), *CLI_RESAMPLES]) == 0
    assert sorted(second.calls) == sorted(set(p.id for p in plan.prompts) - set(first.calls))
    assert not list((tmp_path / "out").glob(".study-work-*"))
    assert not list(tmp_path.glob(".study-work-*"))
    assert len(list(tmp_path.glob("*-study"))) == 1  # the report goes beside DIR


@pytest.mark.slow
def test_resume_from_another_cwd_runs_the_prompts_dir_was_started_with(tmp_path, monkeypatch):
    """Fault class (a resume that ignores DIR): a relative --prompts was re-read from the new working
    directory (another prompt set)."""
    from lab import cli

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    _prompt_file(a / "p.jsonl", slice(0, 6))
    _prompt_file(b / "p.jsonl", slice(6, 12))  # same name, other prompts
    monkeypatch.chdir(a)
    plan, first = _interrupted(a, after=2, prompts="p.jsonl")
    monkeypatch.chdir(b)
    second = FakeRunner()
    use_runner(monkeypatch, second)
    assert cli.main(["study", "--resume", str(plan.work_dir), *CLI_RESAMPLES]) == 0
    (report,) = a.glob("*-study")
    ids = [r["id"] for r in rows_from_csv(report / "per_prompt.csv")]
    assert ids == [p.id for p in plan.prompts]
    assert sorted(second.calls + first.calls) == sorted(ids)


def test_resume_old_dir_without_stored_prompts_and_other_file_refuses_naming_it(tmp_path, monkeypatch, capsys):
    """Fault class (a resume that ignores DIR): without the stored prompt set, a prompt file whose content
    differs is refused, naming it."""
    from lab import cli

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    _prompt_file(a / "p.jsonl", slice(0, 6))
    _prompt_file(b / "p.jsonl", slice(0, 6), edit=" Answer briefly.")  # same ids, one prompt changed
    monkeypatch.chdir(a)
    plan, _ = _interrupted(a, after=2, prompts="p.jsonl")
    (plan.work_dir / "prompts.json").unlink()  # a work directory from before the prompt set was stored
    monkeypatch.chdir(b)
    use_runner(monkeypatch, FakeRunner())
    assert cli.main(["study", "--resume", str(plan.work_dir), *CLI_RESAMPLES]) == 2
    err = capsys.readouterr().err
    assert "--resume" in err and "'p.jsonl'" in err and "differ" in err and "--prompts" not in err
    assert not list(a.glob("*-study")) and not list(b.glob("*-study"))
    (b / "p.jsonl").unlink()
    assert cli.main(["study", "--resume", str(plan.work_dir), *CLI_RESAMPLES]) == 2
    err = capsys.readouterr().err
    assert "--resume" in err and "not found" in err and "--prompts=" not in err


@pytest.mark.parametrize("flags,named", [(["--max-new-tokens", "8"], "--max-new-tokens"),
                                         (["--limit", "4"], "--limit"), (["--gamma", "3"], "--gamma"),
                                         (["--seed", "5"], "--seed"), (["--temperature", "0.5"], "--temperature"),
                                         (["--draft", "early-exit:6"], "--draft")])
def test_resume_with_flag_dir_fixes_differently_is_refused_naming_it(tmp_path, monkeypatch, capsys, flags, named):
    """Fault class (a resume that ignores DIR): flags that DIR fixes were silently ignored next to --resume."""
    from lab import cli

    plan, _ = _interrupted(tmp_path)
    runner = FakeRunner()
    use_runner(monkeypatch, runner)
    assert cli.main(["study", "--resume", str(plan.work_dir), *flags, *CLI_RESAMPLES]) == 2
    err = capsys.readouterr().err
    assert named in err and "--resume" in err and err.count("\n") == 1
    assert runner.calls == []


@pytest.mark.slow
def test_resume_with_flag_equal_to_dir_setting_runs(tmp_path, monkeypatch):
    from lab import cli

    plan, first = _interrupted(tmp_path)
    runner = FakeRunner()
    use_runner(monkeypatch, runner)
    argv = ["study", "--resume", str(plan.work_dir), "--limit", str(len(plan.prompts)), "--seed", "0",
            "--gamma", str(plan.settings["gamma"]), *CLI_RESAMPLES]
    assert cli.main(argv) == 0
    assert sorted(runner.calls) == sorted(set(p.id for p in plan.prompts) - set(first.calls))


@pytest.mark.slow
def test_two_identical_studies_at_once_second_refused_in_one_line_first_finishes(tmp_path, monkeypatch, capsys):
    """Fault class (two runs in one work directory): the first study deleted the shared work directory and
    the second died (FileNotFoundError)."""
    from lab import cli

    argv = ["study", "--limit", "8", "--out", str(tmp_path / "out"), "--device", "cpu", *CLI_RESAMPLES]
    first, release = start_blocked(tmp_path, argv)
    second = FakeRunner()
    use_runner(monkeypatch, second)
    try:
        rc = cli.main(argv)
    finally:
        release.touch()
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    line = capsys.readouterr().err
    assert rc == 2 and line.count("\n") == 1 and "already running" in line and ".study-work-" in line, line
    assert second.calls == []
    assert len(list((tmp_path / "out").glob("*-study"))) == 1
    assert not list((tmp_path / "out").glob(".study-work-*"))


@pytest.mark.slow
def test_shards_run_at_once_in_one_work_dir_but_not_beside_a_whole_run(tmp_path, monkeypatch, capsys):
    """Shards share a work directory on purpose: they may overlap; a second copy of a shard, or an unsharded
    run (which would delete the directory when done), is refused while a shard runs."""
    from lab import cli

    common = ["study", "--limit", "12", "--out", str(tmp_path / "out"), "--device", "cpu", *CLI_RESAMPLES]
    first, release = start_blocked(tmp_path, [*common, "--shard", "1/2"])
    use_runner(monkeypatch, FakeRunner())
    try:
        rc_other_shard = cli.main([*common, "--shard", "2/2"])
        rc_same_shard = cli.main([*common, "--shard", "1/2"])
        rc_whole = cli.main(common)
    finally:
        release.touch()
    _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert (rc_other_shard, rc_same_shard, rc_whole) == (0, 2, 2), capsys.readouterr().err
    assert cli.main(["study", "--merge", *map(str, (tmp_path / "out").glob(".study-work-*")), *CLI_RESAMPLES,
                     "--out", str(tmp_path / "out")]) == 0
    assert json.loads(next((tmp_path / "out").glob("*-study/report.json")).read_text())["missing_prompts"] == []


def _block_reports_root(monkeypatch, blocked: Path):
    """Staging a report under ``blocked`` fails as /sys/kernel does for root (EPERM); elsewhere it works."""
    import errno

    from lab import reports

    real = reports.make_staging

    def make_staging(root, dirname):
        if Path(root).resolve() == blocked.resolve():
            raise PermissionError(errno.EPERM, "Operation not permitted", str(root / dirname))
        return real(root, dirname)

    monkeypatch.setattr(reports, "make_staging", make_staging)


@pytest.mark.slow  # about a second or more on a quiet 2-core machine (the quick loop's one-minute aim)
def test_report_root_unwritable_at_report_time_report_goes_to_named_fallback(tmp_path, monkeypatch, capsys):
    """Fault class (an unwritable reports root): a PermissionError while writing the report ended in a
    traceback after all the work."""
    import tempfile

    from lab import cli

    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    _block_reports_root(monkeypatch, out)
    use_runner(monkeypatch, FakeRunner())
    assert cli.main(["study", "--limit", "4", "--out", str(out), "--device", "cpu", *CLI_RESAMPLES]) == 0
    captured = capsys.readouterr()
    (report,) = (tmp / "lab-reports").glob("*-study")
    assert (report / "report.json").is_file()
    assert f"report: {report}" in captured.out.replace("\n", "")
    err = re.sub(r"\s+", "", captured.err)  # Rich wraps log lines at the terminal width
    assert "Operationnotpermitted" in err and f"{out}(" in err and "instead" in err, captured.err
    assert not list(out.glob(".study-work-*"))  # the report exists, so the work directory went as usual


@pytest.mark.slow
def test_report_write_failing_midway_exits_1_naming_path_and_keeps_work_dir(tmp_path, monkeypatch, capsys):
    """Fault class (a report write failing midway): a write error mid-report (disk full) lost the run; now
    the finished prompts stay, with the command to write the report from them."""
    import errno

    from lab import cli
    from lab.reports import ReportDir

    def full(self, name, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path / name))

    monkeypatch.setattr(ReportDir, "write_json", full)
    use_runner(monkeypatch, FakeRunner())
    out = tmp_path / "out"
    assert cli.main(["study", "--limit", "4", "--out", str(out), "--device", "cpu", *CLI_RESAMPLES]) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "No space left on device" in lines[0] and "--resume" in lines[0], err
    (work,) = out.glob(".study-work-*")
    assert str(work) in lines[0]
    assert not [p for p in out.iterdir() if ".partial-" in p.name or p.name.endswith("-study")]


@pytest.mark.parametrize("field,value", [("alpha", 7), ("context_health", -3.0), ("n_accepted", 10**6),
                                         ("mean_entropy_bits", float("inf")), ("sink_rate_pos0", 1.5)])
@pytest.mark.slow
def test_work_file_with_out_of_range_value_is_redone_not_reported(tmp_path, field, value):
    """Poor case (work files trusted as they are): a per-prompt JSON edited to alpha = 7 went into the report."""
    plan, first = _interrupted(tmp_path)
    victim = next(p for p in plan.prompts if p.id == first.calls[0])
    path = work_file(plan, victim)
    data = json.loads(path.read_text())
    data["row"][field] = value
    path.write_text(json.dumps(data))
    rerun = FakeRunner()
    result = run_study(plan, runner=rerun)
    assert victim.id in rerun.calls and not set(rerun.calls) & (set(first.calls) - {victim.id})
    row = next(r for r in result.per_prompt if r.id == victim.id)
    assert row.as_columns()[field] != value


def test_work_file_token_out_of_range_is_redone(tmp_path):
    plan, first = _interrupted(tmp_path)
    path = work_file(plan, next(p for p in plan.prompts if p.id == first.calls[0]))
    data = json.loads(path.read_text())
    data["tokens"][0]["draft_normalized_entropy"] = 3.0
    path.write_text(json.dumps(data))
    rerun = FakeRunner()
    run_study(plan, runner=rerun)
    assert first.calls[0] in rerun.calls


@pytest.mark.slow
def test_merge_of_half_the_prompts_says_incomplete_on_the_report_first_line(tmp_path, monkeypatch):
    """Poor case: a merge missing half the prompts exited 0 with a warning only."""
    from lab import cli

    use_runner(monkeypatch, FakeRunner())
    common = ["study", "--limit", "12", "--device", "cpu", *CLI_RESAMPLES, "--out", str(tmp_path)]
    assert cli.main([*common, "--shard", "1/2"]) == 0
    (work,) = tmp_path.glob(".study-work-*")
    assert cli.main(["study", "--merge", str(work), *CLI_RESAMPLES, "--out", str(tmp_path)]) == 0
    (report,) = tmp_path.glob("*-study")
    first = (report / "summary.md").read_text().splitlines()[0]
    assert "INCOMPLETE" in first and "of 12 prompts" in first, first


_TERMINATED_WHILE_REPORTING = """
import pathlib, sys, time
from lab import cli, reports
from lab.study import runner as study
from tests.study_fakes import FakeRunner

started = pathlib.Path(sys.argv[1])

def slow_json(self, name, data):
    started.touch()
    time.sleep(60)

reports.ReportDir.write_json = slow_json
study.ModelRunner.load = classmethod(lambda cls, cfg: FakeRunner())
sys.exit(cli.main(sys.argv[2:]))
"""


@pytest.mark.slow
def test_sigterm_while_the_report_is_written_leaves_no_partial_dir_and_keeps_the_work(tmp_path):
    """Poor case (interrupts): SIGTERM while a report was written left .partial-* directories."""
    import signal
    import subprocess
    import sys
    import time

    started, out = tmp_path / "started", tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-c", _TERMINATED_WHILE_REPORTING, str(started), "study", "--limit", "4",
                             "--out", str(out), "--device", "cpu", *CLI_RESAMPLES], cwd=ROOT, env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not started.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert not [p for p in out.iterdir() if ".partial-" in p.name or p.name.endswith("-study")]
    (work,) = out.glob(".study-work-*")
    assert f"--resume {work}" in re.sub(r"\s*\n\s*", "", err) and "4 finished prompts" in err, err


def test_ctrl_c_during_a_study_says_what_is_kept_and_how_to_resume(tmp_path, monkeypatch, capsys):
    """Poor case: Ctrl-C said "no report was written" but not that finished prompts are kept."""
    from lab import cli

    use_runner(monkeypatch, FakeRunner(fail_after=3, interrupt=KeyboardInterrupt))
    assert cli.main(["study", "--limit", "8", "--out", str(tmp_path), "--device", "cpu", *CLI_RESAMPLES]) == 130
    (work,) = tmp_path.glob(".study-work-*")
    err = capsys.readouterr().err
    assert "3 finished prompts" in err and f"lab study --resume {work}" in err, err


def test_resume_after_the_health_choice_changed_is_refused_naming_it(tmp_path, monkeypatch, capsys):
    """Fault class: a study resumed after `lab calibrate-health --save` changed the measure mixes two
    context-health measures in one report. The measure is a setting, so the resume is refused naming it."""
    from lab import cli
    from lab.health import choice

    plan, _ = _interrupted(tmp_path)
    assert plan.settings["health_measure"] == choice.load_chosen()
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path / "cal"))
    other = next(n for n in ("local_entropy", "content_entropy") if n != choice.load_chosen())
    choice.write_chosen(other, decided_by="test", model="tiny", chosen_at=None)
    runner = FakeRunner()
    use_runner(monkeypatch, runner)
    assert cli.main(["study", "--resume", str(plan.work_dir), *CLI_RESAMPLES]) == 2
    err = capsys.readouterr().err
    assert "health_measure" in err and "--resume" in err and runner.calls == []


def test_resume_of_a_profile_study_with_its_measured_draft_dtype_is_accepted(tmp_path):
    """Fault class: a qwen2.5-coder study started without --draft takes the study's measured draft
    dtype (bfloat16), but its settings store the draft by name, and a draft given by name takes
    the target's dtype: every resume was refused ("differs in draft_dtype"). Negative control: the
    same draft given by name at the start keeps the target's dtype, and resumes as such."""
    from lab.runs.files import write_json_atomic
    from lab.study.work import plan_from_work_dir, write_prompt_set

    for draft, want in ((None, "bfloat16"), ("qwen2.5-coder-0.5b", None)):
        out = tmp_path / str(draft)
        plan = plan_study(StudyConfig(model="qwen2.5-coder", draft=draft, limit=3, device="cpu", out=str(out)))
        assert plan.settings["draft_dtype"] == want
        plan.work_dir.mkdir(parents=True)
        write_json_atomic(plan.work_dir / "settings.json", plan.settings)
        write_prompt_set(plan)
        resumed = plan_from_work_dir(plan.work_dir)
        assert resumed.settings == plan.settings and resumed.config.draft == draft


@pytest.mark.parametrize("alpha", [float("nan"), "other"])
def test_work_file_alpha_not_its_own_counts_is_redone_not_reported(tmp_path, alpha):
    """Poor case (outcomes trusted as read): a work file whose alpha is NaN although tokens were tested, or
    a value in [0, 1] that is not its own n_accepted / n_drafted_tested, went into the report."""
    plan, first = _interrupted(tmp_path)
    victim = next(p for p in plan.prompts if p.id == first.calls[0])
    path = work_file(plan, victim)
    data = json.loads(path.read_text())
    row = data["row"]
    row["alpha"] = alpha if alpha != "other" else (0.5 if row["n_accepted"] / row["n_drafted_tested"] != 0.5 else 0.25)
    path.write_text(json.dumps(data))
    rerun = FakeRunner()
    result = run_study(plan, runner=rerun)
    assert victim.id in rerun.calls and not set(rerun.calls) & (set(first.calls) - {victim.id})
    row = next(r for r in result.per_prompt if r.id == victim.id)
    assert row.alpha == row.n_accepted / row.n_drafted_tested


def test_resume_refused_for_other_weights_names_float32_not_none(tmp_path, monkeypatch, capsys):
    """Poor case (an error that says what the user cannot read): resuming a float32 work directory (no
    weights recorded) with --weights q4 said "(DIR has None)"."""
    from lab import cli

    plan, _ = _interrupted(tmp_path)
    assert "weights" not in plan.settings
    runner = FakeRunner()
    use_runner(monkeypatch, runner)
    assert cli.main(["study", "--resume", str(plan.work_dir), "--weights", "q4", *CLI_RESAMPLES]) == 2
    err = capsys.readouterr().err
    assert "--weights 'q4' (DIR has 'float32')" in err and "None" not in err and err.count("\n") == 1, err
    assert runner.calls == []
