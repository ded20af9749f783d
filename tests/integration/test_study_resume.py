"""The study pipeline without weights: resume, work files, report, CLI, and the qwen2.5 wiring.

A fake per-prompt runner stands in for the models (the runner is injectable), so
these tests check the bookkeeping: an interrupted study resumes without redoing
finished prompts, an unusable work file is redone, the report is complete and
self-consistent, and bad input fails before any model work.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lab.prompts import load_prompts
from lab.study.config import PER_PROMPT_FIELDS, PromptOutcome, StudyConfig, prompt_seed
from lab.study.work import OUTCOMES_DIR, config_from_work_dir, discard_work, plan_study, work_file, work_file_name
from lab.study.run import run_study
from tests import support

FAST_RESAMPLES = 99  # the bookkeeping is under test here, not the CI's precision
LIMIT = 12


class InterruptAfter(Exception):
    """Raised by the fake runner to simulate Ctrl-C after k prompts."""


class FakeRunner:
    """Deterministic per-prompt numbers derived from the prompt's seed; records calls."""

    def __init__(self, fail_after: int | None = None):
        self.calls: list[str] = []
        self.fail_after = fail_after
        self.info = {"model": {"model": "fake"}, "draft": "fake-draft"}

    def __call__(self, prompt):
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise InterruptAfter(prompt.id)
        self.calls.append(prompt.id)
        u = (prompt_seed(0, prompt.id) % 1000) / 1000.0
        health = 10 * u - (3 if prompt.variant == "poisoned" else 0)
        tokens = [{"round": i // 4, "index": i % 4, "draft_entropy_bits": (i * 0.37 + u) % 5,
                   "draft_normalized_entropy": ((i * 0.37 + u) % 5) / 15.6, "accepted": (i + int(10 * u)) % 3 == 0,
                   "tested": True} for i in range(12)]
        row = {"n_prompt_tokens": 20, "context_health": health, "sink_rate_pos0": 0.8,
               "sink_rate_content_mean": 0.01, "position0_share": 0.5, "n_content_sinks": 0,
               "mean_entropy_bits": 3 - 0.2 * health + u, "max_entropy_bits": 6.0, "var_entropy_bits": 1.0,
               "mean_varentropy_bits2": 2.0, "n_new_tokens": 8, "alpha": u, "tau": 1.5, "n_drafted": 12,
               "n_drafted_tested": 12, "n_accepted": 4, "n_rounds": 3, "prefill_s": 0.0, "decode_s": 0.0,
               "speculative_s": 0.0, "text": "fake"}
        return PromptOutcome(row=row, tokens=tokens)


def _config(tmp_path: Path, **kw) -> StudyConfig:
    kw.setdefault("n_resamples", FAST_RESAMPLES)
    return StudyConfig(device="cpu", out=str(tmp_path), limit=LIMIT, **kw)


def test_run_study_interrupted_after_k_rerun_runs_only_the_rest(tmp_path):
    cfg = _config(tmp_path)
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
    assert [r["id"] for r in result.per_prompt] == all_ids


def test_run_study_resumed_equals_uninterrupted(tmp_path):
    a = run_study(_config(tmp_path / "a"), runner=FakeRunner())
    cfg_b = _config(tmp_path / "b")
    with pytest.raises(InterruptAfter):
        run_study(cfg_b, runner=FakeRunner(fail_after=7))
    b = run_study(cfg_b, runner=FakeRunner())
    strip = lambda rows: [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]  # noqa: E731
    assert strip(a.per_prompt) == strip(b.per_prompt)
    assert a.per_token == b.per_token
    assert a.analysis.verdicts() == b.analysis.verdicts()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "other-settings", "missing-field"])
def test_run_study_unusable_work_file_is_redone(tmp_path, damage):
    cfg = _config(tmp_path)
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
    cfg = _config(tmp_path)
    plan = plan_study(cfg)
    plan.work_dir.mkdir(parents=True)
    (plan.work_dir / OUTCOMES_DIR).mkdir()
    (plan.work_dir / OUTCOMES_DIR / f".{work_file_name(plan.prompts[0].id)}.abc.tmp").write_text('{"key": "half')
    runner = FakeRunner()
    result = run_study(cfg, runner=runner)
    assert plan.prompts[0].id in runner.calls
    assert result.n_resumed == 0


def test_run_study_all_finished_builds_no_runner(tmp_path):
    cfg = _config(tmp_path)
    run_study(cfg, runner=FakeRunner())

    def factory(_cfg):
        raise AssertionError("a finished study must not load a model")

    result = run_study(cfg, runner_factory=factory)
    assert result.n_resumed == len(result.plan.prompts)
    assert result.info["draft"] == "fake-draft"


def test_settings_key_changes_with_any_result_setting(tmp_path):
    base = plan_study(_config(tmp_path)).key
    for change in ({"seed": 1}, {"gamma": 3}, {"max_new_tokens": 7}, {"temperature": 0.7}, {"draft": "early-exit:6"}):
        assert plan_study(_config(tmp_path, **change)).key != base, change
    assert plan_study(_config(tmp_path, n_resamples=FAST_RESAMPLES + 2)).key == base


def test_config_from_work_dir_roundtrip_continues_same_study(tmp_path):
    cfg = _config(tmp_path, seed=3, gamma=2)
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


def test_write_report_files_and_consistency(tmp_path):
    from lab.render.study_summary import FIGURES
    from lab.render.study import write_report
    from lab.reports import read_json, rows_from_csv

    cfg = _config(tmp_path)
    result = run_study(cfg, runner=FakeRunner())
    path = write_report(result)
    discard_work(result.plan)
    assert not result.plan.work_dir.exists()
    for name in ("study.json", "per_prompt.csv", "per_token.csv", "summary.md", *FIGURES):
        assert (path / name).is_file(), name
    for name in FIGURES:
        assert (path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    study = read_json(path / "study.json")
    rows = rows_from_csv(path / "per_prompt.csv")
    assert [r["id"] for r in rows] == [r["id"] for r in result.per_prompt]
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
        model.lab_source = {"model": name, "device": "cpu", "dtype": "float32"}
        return model, tok

    monkeypatch.setattr(models, "load_model", fake_load)
    cfg = StudyConfig(model="qwen2.5", device="cpu", max_new_tokens=6, gamma=3)
    runner = ModelRunner.load(cfg)
    assert loaded == ["qwen2.5", models.PROFILES["qwen2.5"].draft]
    prompt = next(p for p in load_prompts() if p.id == "factual-06")
    outcome = runner(prompt)
    assert set(PER_PROMPT_FIELDS) - {"id", "category", "variant", "twin_of", "wall_s"} <= set(outcome.row)
    # no profile in the fake's lab_source, so no length reference: the health reads NaN, never a silent
    # unreferenced value; the candidates that need no reference are measured
    assert math.isnan(outcome.row["context_health"]) or 0.0 <= outcome.row["context_health"] <= 10.0
    assert 0.0 <= outcome.row["health_local_entropy"] <= 10.0 and outcome.row["n_content_tokens"] >= 1
    assert outcome.row["n_drafted"] == len(outcome.tokens)
    assert all(math.isfinite(t["draft_entropy_bits"]) for t in outcome.tokens)


def test_cli_study_interrupted_then_resume_dir_runs_only_the_rest(tmp_path, capsys, monkeypatch):
    from lab import cli
    from lab.study import runner as study_mod

    class CtrlC(FakeRunner):
        def __call__(self, prompt):
            if len(self.calls) >= 3:
                raise KeyboardInterrupt
            return super().__call__(prompt)

    first = CtrlC()
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
    plan = plan_study(_config(tmp_path))

    def failing_factory(config):
        raise ValueError("draft='early-exit:99': N must be in [1, 29]")

    with pytest.raises(ValueError, match="early-exit:99"):
        run_study(plan, runner_factory=failing_factory)
    assert not plan.work_dir.exists()
