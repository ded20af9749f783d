"""Hostile inputs to ``lab study``'s work directory, reports root and merge (fake runner, no weights, no Ray).

Fault classes guarded here: prompt ids used as file names as they were (an id
``settings`` overwrote the directory's ``settings.json``; a 300-character id ended
in ``OSError: File name too long``), an unwritable ``--out`` that ended in a
``PermissionError`` traceback instead of the reports-root fallback, a merge that
reported shards still running as an INCOMPLETE study with exit 0, and a prompt too
long for the target refused without naming it. The test that runs a study in a
subprocess is marked ``slow``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lab.prompts import default_prompts_path
from lab.study.config import WORK_FORMAT
from lab.study.run import run_study
from lab.runs.files import work_file_name
from lab.study.work import OUTCOMES_DIR, plan_study, work_file
from tests.study_fakes import CLI_RESAMPLES, FAST_RESAMPLES, FakeRunner, InterruptAfter, start_blocked, use_runner

LONG_ID = "x" * 300  # past NAME_MAX (255 bytes) as a file name
# Ids a careless or hostile prompt file may hold: the work directory's own file names, a
# long one, dots, spaces, shell and path characters, non-ASCII, and two that differ only
# in characters a file name cannot keep.
HOSTILE_IDS = ("settings", "prompts", "runner", LONG_ID, "..", ".hidden", "a b", "a?b", "a*b", "$(rm -rf ~)",
               "ünïcødé-π", "日本語", "CON", "x" * 47 + "é", "x" * 47 + "è")
SAFE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*\.json$")


def _prompt_file(path: Path, ids: list[str]) -> Path:
    """Clean prompts of the embedded set (no twins), renamed to ``ids``."""
    records = [json.loads(line) for line in default_prompts_path().read_text(encoding="utf-8").splitlines()]
    clean = [r for r in records if r.get("variant", "clean") == "clean"][:len(ids)]
    for r, pid in zip(clean, ids):
        r["id"] = pid
    path.write_text("".join(json.dumps(r) + "\n" for r in clean), encoding="utf-8")
    return path


def test_work_file_name_any_id_safe_bounded_and_distinct():
    """Every id maps to a plain ASCII file name of at most 70 characters, and distinct ids to distinct names."""
    names = [work_file_name(i) for i in HOSTILE_IDS]
    assert all(SAFE_NAME.match(n) and len(n) <= 70 for n in names), names
    assert len(set(names)) == len(HOSTILE_IDS)
    assert not {n.removesuffix(".json") for n in names} & {"settings", "prompts", "runner"}
    assert work_file_name("math-03").startswith("math-03-")  # readable where the id allows


@pytest.mark.slow
def test_run_study_ids_named_like_its_own_files_keep_the_directory_resumable(tmp_path, monkeypatch, capsys):
    """Data loss: prompts ``settings`` and ``prompts`` overwrote settings.json and prompts.json, and --resume
    then failed (settings.json is unreadable)."""
    from lab import cli

    monkeypatch.chdir(tmp_path)
    _prompt_file(tmp_path / "p.jsonl", ["settings", "prompts", "runner", "math-x", "code-x", "fact-x"])
    argv = ["study", "--prompts", "p.jsonl", "--device", "cpu", "--out", str(tmp_path / "out"), *CLI_RESAMPLES]
    first = FakeRunner(fail_after=4)
    use_runner(monkeypatch, first)
    assert cli.main(argv) == 1  # an error the lab did not foresee: one line, exit 1, the work kept
    (work,) = (tmp_path / "out").glob(".study-work-*")
    assert json.loads((work / "settings.json").read_text())["format"] == WORK_FORMAT
    second = FakeRunner()
    use_runner(monkeypatch, second)
    assert cli.main(["study", "--resume", str(work), *CLI_RESAMPLES]) == 0, capsys.readouterr().err
    assert sorted(first.calls + second.calls) == sorted(["settings", "prompts", "runner", "math-x", "code-x", "fact-x"])
    assert len(second.calls) == 2


def test_run_study_300_character_prompt_id_runs_and_resumes(tmp_path):
    """OSError: File name too long, with a work directory left behind, for a 300-character id."""
    cfg_kw = dict(device="cpu", out=str(tmp_path / "out"), n_resamples=FAST_RESAMPLES,
                  prompts=str(_prompt_file(tmp_path / "p.jsonl", [LONG_ID, "b", "c", "d"])))
    from lab.study.config import StudyConfig

    cfg = StudyConfig(**cfg_kw)
    with pytest.raises(InterruptAfter):
        run_study(cfg, runner=FakeRunner(fail_after=1))  # LONG_ID is the first prompt: it is stored
    plan = plan_study(cfg)
    assert work_file(plan, plan.prompts[0]).is_file() and plan.prompts[0].id == LONG_ID
    rerun = FakeRunner()
    result = run_study(cfg, runner=rerun)
    assert rerun.calls == ["b", "c", "d"] and result.missing == []
    assert [r.id for r in result.per_prompt] == [LONG_ID, "b", "c", "d"]


def test_resume_work_dir_of_an_older_format_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """A work directory of an older layout (prompt files beside settings.json) is refused, naming the format."""
    from lab import cli

    from lab.study.config import StudyConfig

    cfg = StudyConfig(device="cpu", out=str(tmp_path), n_resamples=FAST_RESAMPLES, limit=4)
    with pytest.raises(InterruptAfter):
        run_study(cfg, runner=FakeRunner(fail_after=2))
    plan = plan_study(cfg)
    settings = json.loads((plan.work_dir / "settings.json").read_text())
    (plan.work_dir / "settings.json").write_text(json.dumps({**settings, "format": 3}))
    runner = FakeRunner()
    use_runner(monkeypatch, runner)
    for argv in (["--resume", str(plan.work_dir)], ["--merge", str(plan.work_dir)]):
        assert cli.main(["study", *argv, *CLI_RESAMPLES]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "work format 3" in err and f"format {WORK_FORMAT}" in err, err
    assert runner.calls == []


def test_outcomes_live_apart_from_the_directory_files(tmp_path):
    from lab.study.config import StudyConfig

    cfg = StudyConfig(device="cpu", out=str(tmp_path), n_resamples=FAST_RESAMPLES, limit=4)
    with pytest.raises(InterruptAfter):
        run_study(cfg, runner=FakeRunner(fail_after=2))
    plan = plan_study(cfg)
    assert sorted(p.name for p in plan.work_dir.iterdir()) == sorted(["settings.json", "prompts.json",
                                                                      "runner.json", OUTCOMES_DIR])
    assert len(list((plan.work_dir / OUTCOMES_DIR).iterdir())) == 2


def _refusing_mkdir(monkeypatch, root: Path) -> None:
    """``os.mkdir`` refuses (EPERM) every new folder directly inside ``root``, as /sys/kernel does for root."""
    import errno
    import os

    real = os.mkdir

    def mkdir(path, *args, **kw):
        if Path(path).parent == root:
            raise PermissionError(errno.EPERM, "Operation not permitted", str(path))
        return real(path, *args, **kw)

    monkeypatch.setattr(os, "mkdir", mkdir)


@pytest.mark.slow
def test_study_out_that_refuses_folders_falls_back_like_other_commands(tmp_path, monkeypatch, capsys):
    """PermissionError traceback (the lock folder) for an --out that passes the access check and refuses mkdir."""
    import lab.reports
    from lab import cli

    refusing, fallback = tmp_path / "refusing", tmp_path / "fallback"
    refusing.mkdir()
    monkeypatch.setattr(lab.reports, "fallback_root", lambda: fallback)
    _refusing_mkdir(monkeypatch, refusing)
    use_runner(monkeypatch, FakeRunner())
    assert cli.main(["study", "--limit", "4", "--device", "cpu", "--out", str(refusing), *CLI_RESAMPLES]) == 0
    assert "instead" in capsys.readouterr().err
    assert list(refusing.iterdir()) == [] and len(list(fallback.glob("*-study"))) == 1


@pytest.mark.slow
def test_study_out_sys_kernel_as_root_falls_back(tmp_path, monkeypatch, capsys):
    """`--out /sys/kernel` as root, where it can be tried: a /sys/kernel that refuses folders falls back."""
    import os

    import lab.reports
    from lab import cli

    if not (hasattr(os, "geteuid") and os.geteuid() == 0 and Path("/sys/kernel").is_dir()):
        pytest.skip("needs root and /sys/kernel (as another user, --out /sys/kernel is refused as not writable)")
    monkeypatch.setattr(lab.reports, "fallback_root", lambda: tmp_path / "fallback")
    use_runner(monkeypatch, FakeRunner())
    assert cli.main(["study", "--limit", "4", "--device", "cpu", "--out", "/sys/kernel", *CLI_RESAMPLES]) == 0
    assert len(list((tmp_path / "fallback").glob("*-study"))) == 1


@pytest.mark.slow
def test_merge_while_a_shard_runs_refused_naming_it(tmp_path, monkeypatch, capsys):
    """--merge while shards still ran exited 0 with a report marked INCOMPLETE (their prompts left out)."""
    from lab import cli

    out = tmp_path / "out"
    shard, release = start_blocked(tmp_path, ["study", "--limit", "8", "--shard", "1/2", "--out", str(out),
                                               "--device", "cpu", *CLI_RESAMPLES])
    try:
        (work,) = out.glob(".study-work-*")
        rc = cli.main(["study", "--merge", str(work), "--out", str(tmp_path / "reports"), *CLI_RESAMPLES])
    finally:
        release.touch()
    shard.communicate(timeout=120)
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "shard 1/2 still running" in err and str(work) in err, err
    assert not (tmp_path / "reports").exists() or not list((tmp_path / "reports").iterdir())
    assert shard.returncode == 0  # the shard, untouched, finished


def test_prompt_too_long_for_the_context_refused_naming_its_id(tmp_path, monkeypatch):
    """A prompt longer than the context (or 1 MB) was refused without naming which prompt of the set."""
    import types

    import torch

    import lab.models.chat
    from lab.commands.study import checked_runner_factory
    from lab.study.config import StudyConfig

    big = "word " * 200_000  # 1 MB
    ids = ["a-1", "huge-one", "c-3"]
    path = _prompt_file(tmp_path / "p.jsonl", ids)
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    records[1]["messages"][-1]["content"] = big
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    # a stand-in tokenizer: one token per word; a target with a 2,048-position context
    monkeypatch.setattr(lab.models.chat, "encode_chat",
                        lambda tok, messages: torch.zeros(1, sum(len(m["content"].split()) for m in messages)))
    fake = types.SimpleNamespace(target=types.SimpleNamespace(config=types.SimpleNamespace(max_position_embeddings=2048)),
                                 tokenizer=None, info={})
    use_runner(monkeypatch, fake)
    plan = plan_study(StudyConfig(device="cpu", out=str(tmp_path), prompts=str(path)))
    with pytest.raises(ValueError, match=r"^prompt 'huge-one': --max-new-tokens=") as err:
        checked_runner_factory(plan)(plan.config)
    assert "\n" not in str(err.value)


# Hand edits of settings.json that ended on the unforeseen-error path (AttributeError, TypeError) or
# were blamed on a flag the user never typed.
HOSTILE_SETTINGS = {"model a number": {"model": 5}, "device a list": {"device": []}, "draft null": {"draft": None},
                    "temperature a string": {"temperature": "hot"}, "limit an object": {"limit": {}},
                    "gamma 0": {"gamma": 0}, "prompts_sha256 a number": {"prompts_sha256": 7}}


@pytest.mark.parametrize("name", list(HOSTILE_SETTINGS))
def test_resume_and_merge_with_hostile_settings_json_refused_in_one_line_naming_it(tmp_path, monkeypatch, capsys,
                                                                                   name):
    """Fault class (a work directory's own file read as trusted): a settings.json of wrong types or out of
    range ended on the unforeseen-error path, or named a flag nobody typed; now exit 2, one line, the file."""
    from lab import cli
    from lab.study.config import StudyConfig

    cfg = StudyConfig(device="cpu", out=str(tmp_path), n_resamples=FAST_RESAMPLES, limit=4)
    with pytest.raises(InterruptAfter):
        run_study(cfg, runner=FakeRunner(fail_after=2))
    settings_file = plan_study(cfg).work_dir / "settings.json"
    settings_file.write_text(json.dumps({**json.loads(settings_file.read_text()), **HOSTILE_SETTINGS[name]}))
    runner = FakeRunner()
    use_runner(monkeypatch, runner)
    for argv in (["--resume", str(settings_file.parent)], ["--merge", str(settings_file.parent)]):
        assert cli.main(["study", *argv, *CLI_RESAMPLES]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(settings_file) in err and "did not foresee" not in err, err
        assert "--gamma" not in err and "--temperature" not in err
    assert runner.calls == []


@pytest.mark.slow
@pytest.mark.parametrize("content", [b"\x00\xff", b"{", b"[]", b'{"model": 5}'])
def test_resume_of_finished_dir_with_damaged_runner_json_reports_and_names_it(tmp_path, monkeypatch, capsys, content):
    """Fault class (a work directory's own file read as trusted): a damaged runner.json (the models'
    description) ended a finished study's resume on the unforeseen-error path; it is ignored, named."""
    from lab import cli
    from lab.study.config import StudyConfig

    cfg = StudyConfig(device="cpu", out=str(tmp_path), n_resamples=FAST_RESAMPLES, limit=4)
    run_study(cfg, runner=FakeRunner())
    work = plan_study(cfg).work_dir
    (work / "runner.json").write_bytes(content)
    use_runner(monkeypatch, FakeRunner())
    assert cli.main(["study", "--resume", str(work), *CLI_RESAMPLES]) == 0
    assert len(list(tmp_path.glob("*-study"))) == 1
    err = re.sub(r"\s+", "", capsys.readouterr().err)  # Rich wraps log lines at the terminal width
    assert "runner.jsonisnotavalidstudyrunnerdescription" in err and "lackthemodels'description" in err, err
