"""The study pipeline without weights: resume, work files, report, CLI, and the qwen2.5 wiring.

A fake per-prompt runner stands in for the models (the runner is injectable), so
these tests check the bookkeeping: an interrupted study resumes without redoing
finished prompts, an unusable work file is redone, the report is complete and
self-consistent, and bad input fails before any model work.
"""

from __future__ import annotations

import json
import math

import pytest

from lab.models.source import ModelSource, register_source
from lab.prompts import load_prompts
from lab.study.config import StudyConfig
from lab.study.outcome import PIPELINE_COLUMNS, REQUIRED_COLUMNS
from lab.runs.files import work_file_name
from lab.study.work import OUTCOMES_DIR, config_from_work_dir, discard_work, plan_study, work_file
from lab.study.run import run_study
from tests import support
from tests.study_fakes import FAST_RESAMPLES, FakeRunner, InterruptAfter, fake_config, untimed


def test_run_study_interrupted_after_k_rerun_runs_only_the_rest(tmp_path):
    cfg = fake_config(tmp_path)
    first = FakeRunner(fail_after=5)
    with pytest.raises(InterruptAfter):
        run_study(cfg, runner=first)
    plan = plan_study(cfg)
    finished = sorted(p.name for p in (plan.work_dir / OUTCOMES_DIR).glob("*.json"))
    assert finished == sorted(work_file_name(pid) for pid in first.calls)
    second = FakeRunner()
    result = run_study(cfg, runner=second)
    all_ids = [p.id for p in plan.prompts]
    assert sorted(second.calls) == sorted(set(all_ids) - set(first.calls))
    assert result.n_resumed == 5
    assert [r.id for r in result.per_prompt] == all_ids


def test_run_study_resumed_equals_uninterrupted(tmp_path):
    a = run_study(fake_config(tmp_path / "a"), runner=FakeRunner())
    cfg_b = fake_config(tmp_path / "b")
    with pytest.raises(InterruptAfter):
        run_study(cfg_b, runner=FakeRunner(fail_after=7))
    b = run_study(cfg_b, runner=FakeRunner())
    assert untimed(a.per_prompt, drop=["wall_s"]) == untimed(b.per_prompt, drop=["wall_s"])
    assert a.per_token == b.per_token
    assert a.analysis.verdicts() == b.analysis.verdicts()


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "garbage", "other-settings", "missing-field"])
def test_run_study_unusable_work_file_is_redone(tmp_path, damage):
    cfg = fake_config(tmp_path)
    with pytest.raises(InterruptAfter):
        run_study(cfg, runner=FakeRunner(fail_after=4))
    plan = plan_study(cfg)
    victim = plan.prompts[1]
    path = work_file(plan, victim)
    text = path.read_text()
    if damage == "truncated":
        path.write_text(text[: len(text) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00\xff not json")
    elif damage == "other-settings":
        data = json.loads(text)
        data["key"] = "0" * 16
        path.write_text(json.dumps(data))
    else:
        data = json.loads(text)
        del data["row"]["alpha"]
        path.write_text(json.dumps(data))
    rerun = FakeRunner()
    run_study(cfg, runner=rerun)
    assert victim.id in rerun.calls
    assert not set(rerun.calls) & {p.id for p in plan.prompts[:4] if p.id != victim.id}


def test_run_study_leftover_temp_file_is_ignored(tmp_path):
    cfg = fake_config(tmp_path)
    plan = plan_study(cfg)
    plan.work_dir.mkdir(parents=True)
    (plan.work_dir / OUTCOMES_DIR).mkdir()
    (plan.work_dir / OUTCOMES_DIR / f".{work_file_name(plan.prompts[0].id)}.abc.tmp").write_text('{"key": "half')
    runner = FakeRunner()
    result = run_study(cfg, runner=runner)
    assert plan.prompts[0].id in runner.calls
    assert result.n_resumed == 0


def test_run_study_all_finished_builds_no_runner(tmp_path):
    cfg = fake_config(tmp_path)
    run_study(cfg, runner=FakeRunner())

    def factory(_cfg):
        raise AssertionError("a finished study must not load a model")

    result = run_study(cfg, runner_factory=factory)
    assert result.n_resumed == len(result.plan.prompts)
    assert result.info["draft"] == "fake-draft"


def test_settings_key_changes_with_any_result_setting(tmp_path):
    base = plan_study(fake_config(tmp_path)).key
    for change in ({"seed": 1}, {"gamma": 3}, {"max_new_tokens": 7}, {"temperature": 0.7}, {"draft": "early-exit:6"}):
        assert plan_study(fake_config(tmp_path, **change)).key != base, change
    assert plan_study(fake_config(tmp_path, n_resamples=FAST_RESAMPLES + 2)).key == base


def test_config_from_work_dir_roundtrip_continues_same_study(tmp_path):
    cfg = fake_config(tmp_path, seed=3, gamma=2)
    with pytest.raises(InterruptAfter):
        run_study(cfg, runner=FakeRunner(fail_after=3))
    work = plan_study(cfg).work_dir
    resumed = config_from_work_dir(work, n_resamples=FAST_RESAMPLES)
    assert plan_study(resumed).key == plan_study(cfg).key
    assert run_study(resumed, runner=FakeRunner()).n_resumed == 3


def test_config_from_work_dir_not_a_work_dir_raises(tmp_path):
    with pytest.raises(ValueError, match="resume="):
        config_from_work_dir(tmp_path)


@pytest.mark.parametrize("field,value", [("max_new_tokens", 0), ("gamma", -1), ("seed", -2), ("limit", 0),
                                         ("temperature", 0.0), ("temperature", float("nan"))])
def test_study_config_bad_value_raises_naming_it(field, value):
    with pytest.raises(ValueError, match=field):
        StudyConfig(**{field: value})


def test_study_config_model_without_draft_raises():
    with pytest.raises(ValueError, match="--draft"):
        StudyConfig(model="some/model").draft_spec()


@pytest.mark.slow
def test_write_report_files_and_consistency(tmp_path):
    from lab.render.study_summary import FIGURES
    from lab.render.study import write_report
    from lab.reports import read_json, rows_from_csv

    cfg = fake_config(tmp_path)
    result = run_study(cfg, runner=FakeRunner())
    path = write_report(result)
    discard_work(result.plan)
    assert not result.plan.work_dir.exists()
    for name in ("report.json", "per_prompt.csv", "per_token.csv", "summary.md", *FIGURES):
        assert (path / name).is_file(), name
    for name in FIGURES:
        assert (path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    study = read_json(path / "report.json")
    rows = rows_from_csv(path / "per_prompt.csv")
    assert [r["id"] for r in rows] == [r.id for r in result.per_prompt]
    assert len(rows_from_csv(path / "per_token.csv")) == len(result.per_token)
    summary = (path / "summary.md").read_text()
    for name, verdict in study["verdicts"].items():
        assert f"**{name}: {verdict}**" in summary
    assert study["timing"]["wall_s_total"] > 0


def test_cli_study_bad_prompt_file_exits_2_before_model_work(tmp_path, capsys, monkeypatch):
    from lab import cli
    from lab.models import loading as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("model loaded despite bad input"))
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"id": "a", "category": "math", "messages": [{"role": "user", "content": "1+1?"}]}\n{oops\n')
    code = cli.main(["study", "--prompts", str(bad), "--out", str(tmp_path), "--device", "cpu"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{bad}:2" in err
    assert not any(tmp_path.glob("*-study"))


@pytest.mark.slow
def test_cli_study_fake_runner_writes_report(tmp_path, capsys, monkeypatch):
    from lab import cli
    from lab.study import runner as study_mod

    monkeypatch.setattr(study_mod.ModelRunner, "load", classmethod(lambda cls, cfg: FakeRunner()))
    code = cli.main(["study", "--limit", "8", "--out", str(tmp_path), "--device", "cpu", "--resamples", "99"])
    assert code == 0
    reports = list(tmp_path.glob("*-study"))
    assert len(reports) == 1
    assert not list(tmp_path.glob(".study-work-*"))
    assert "report:" in capsys.readouterr().out


def test_model_runner_qwen25_profile_with_tiny_models(monkeypatch):
    """Wiring of the qwen2.5 profile (3B target, 0.5B draft from the hub) without downloads:
    the loader is replaced by tiny random Qwen2 models sharing a ChatML tokenizer."""
    from lab.models import loading as models
    from lab.study.runner import ModelRunner

    tok = support.chatml_tokenizer()
    loaded = []

    def fake_load(name, **kwargs):
        loaded.append(name)
        model = support.tiny_qwen2(vocab_size=len(tok), seed=len(loaded))
        register_source(model, ModelSource(model=name, device="cpu", dtype="float32"))
        return model, tok

    monkeypatch.setattr(models, "load_model", fake_load)
    cfg = StudyConfig(model="qwen2.5", device="cpu", max_new_tokens=6, gamma=3)
    runner = ModelRunner.load(cfg)
    assert loaded == ["qwen2.5", models.PROFILES["qwen2.5"].draft]
    prompt = next(p for p in load_prompts() if p.id == "factual-06")
    outcome = runner(prompt)
    columns = outcome.row.as_columns()
    assert all(columns[k] is not None for k in REQUIRED_COLUMNS if k not in PIPELINE_COLUMNS)
    # no profile in the fake's model source, so no length reference: a measure read for its length gives
    # NaN, never a silent unreferenced value; the candidates that need no reference are measured
    from lab.health.choice import load_chosen
    from lab.health.measures import FOR_LENGTH

    if load_chosen().endswith(FOR_LENGTH):
        assert math.isnan(outcome.row.context_health)
    else:  # a chosen measure without a length reference (a user's own `lab calibrate-health --save`)
        assert 0.0 <= outcome.row.context_health <= 10.0
    assert 0.0 <= outcome.row.health_local_entropy <= 10.0 and outcome.row.n_content_tokens >= 1
    assert outcome.row.n_drafted == len(outcome.tokens)
    assert all(math.isfinite(t.draft_entropy_bits) for t in outcome.tokens)


@pytest.mark.slow
def test_cli_study_interrupted_then_resume_dir_runs_only_the_rest(tmp_path, capsys, monkeypatch):
    from lab import cli
    from lab.study import runner as study_mod

    first = FakeRunner(fail_after=3, interrupt=KeyboardInterrupt)
    monkeypatch.setattr(study_mod.ModelRunner, "load", classmethod(lambda cls, cfg: first))
    args = ["study", "--limit", "8", "--out", str(tmp_path), "--device", "cpu", "--resamples", "99"]
    assert cli.main(args) == 130
    (work,) = tmp_path.glob(".study-work-*")
    assert not list(tmp_path.glob("*-study"))
    second = FakeRunner()
    monkeypatch.setattr(study_mod.ModelRunner, "load", classmethod(lambda cls, cfg: second))
    assert cli.main(["study", "--resume", str(work), "--resamples", "99"]) == 0
    assert len(second.calls) == 8 - 3 and not set(second.calls) & set(first.calls)
    assert len(list(tmp_path.glob("*-study"))) == 1


def test_run_study_runner_that_fails_to_load_leaves_no_work_dir(tmp_path):
    """Regression (bad input): a draft rejected at load time left a .study-work-* directory."""
    plan = plan_study(fake_config(tmp_path))

    def failing_factory(config):
        raise ValueError("draft='early-exit:99': N must be in [1, 29]")

    with pytest.raises(ValueError, match="early-exit:99"):
        run_study(plan, runner_factory=failing_factory)
    assert not plan.work_dir.exists()
