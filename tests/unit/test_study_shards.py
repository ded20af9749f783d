"""Shards and merge of the study (fake runner, no weights): disjoint balanced slices, and the merged
report equals an unsharded run with the same seed."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace

import pytest

from lab.prompts import CATEGORIES, load_prompts
from lab.study.config import TEMPERATURE_SUBSET_PER_CATEGORY
from lab.study.run import merge_study, run_study
from lab.study.work import plan_study, shard_prompts, temperature_subset
from lab.analysis.claims import DESIGN_TEMPERATURES
from tests.study_fakes import FAST_RESAMPLES, FakeRunnerWithDecode, fake_config, untimed


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_shard_prompts_disjoint_cover_balanced_twins_together(n):
    prompts = load_prompts()
    shards = [shard_prompts(prompts, k, n) for k in range(1, n + 1)]
    ids = [p.id for s in shards for p in s]
    assert sorted(ids) == sorted(p.id for p in prompts) and len(ids) == len(set(ids))
    for s in shards:
        mine = {p.id for p in s}
        assert all(p.twin_of in mine for p in s if p.twin_of)
        counts = Counter(p.category for p in s if p.variant == "clean")
        for cat in {p.category for p in prompts}:  # each category's clean prompts split within one unit
            total = sum(p.category == cat and p.variant == "clean" for p in prompts)
            assert abs(counts[cat] - total / n) <= 1
    with pytest.raises(ValueError, match="1 <= K <= N"):
        shard_prompts(prompts, 3, 2)


def test_temperature_subset_balanced_clean_the_same_number_per_category():
    subset = temperature_subset(load_prompts())
    prompts = {p.id: p for p in load_prompts()}
    per = TEMPERATURE_SUBSET_PER_CATEGORY
    assert len(subset) == len(CATEGORIES) * per and all(prompts[i].variant == "clean" for i in subset)
    assert set(Counter(prompts[i].category for i in subset).values()) == {per}


@pytest.mark.slow
def test_merged_shards_equal_unsharded_run(tmp_path):
    base = fake_config(tmp_path / "whole", limit=24)
    whole = run_study(base, runner=FakeRunnerWithDecode())
    dirs = []
    for k in (1, 2, 3):
        cfg = replace(fake_config(tmp_path / f"s{k}", limit=24), shard=(k, 3))
        runner = FakeRunnerWithDecode()
        run_study(cfg, runner=runner)
        assert len(runner.calls) < 24
        dirs.append(plan_study(cfg).work_dir)
    merged = merge_study(dirs, n_resamples=FAST_RESAMPLES, out=str(tmp_path / "whole"))
    assert merged.missing == [] and len(merged.per_prompt) == 24
    assert untimed(merged.per_prompt) == untimed(whole.per_prompt)
    assert merged.per_token == whole.per_token
    assert merged.analysis.verdicts() == whole.analysis.verdicts()
    for a, b in zip(merged.analysis.tests, whole.analysis.tests):
        assert (a.name, a.n) == (b.name, b.n)
        for x, y in ((a.effect, b.effect), (a.ci_low, b.ci_low), (a.ci_high, b.ci_high), (a.p_holm, b.p_holm)):
            assert x == y or (math.isnan(x) and math.isnan(y))
    h6 = merged.analysis.test("H6")
    assert math.isfinite(h6.p_value) and h6.n == len(plan_study(base).temperature_ids)


@pytest.mark.slow
def test_temperature_runs_only_for_subset_and_reuse_main_alpha(tmp_path):
    runner = FakeRunnerWithDecode()
    result = run_study(fake_config(tmp_path, limit=24), runner=runner)
    subset = plan_study(fake_config(tmp_path, limit=24)).temperature_ids
    assert {pid for pid, _ in runner.temperature_calls} == set(subset)
    assert sorted({t for _, t in runner.temperature_calls}) == [t for t in DESIGN_TEMPERATURES if t != 1.0]
    for r in result.per_prompt:
        assert (r.alpha_t1 == r.alpha) if r.id in subset else r.alpha_t1 is None


@pytest.mark.slow
def test_merge_refuses_shards_with_other_settings(tmp_path):
    a = replace(fake_config(tmp_path / "a", limit=12), shard=(1, 2))
    b = replace(fake_config(tmp_path / "b", limit=12, seed=1), shard=(2, 2))
    run_study(a, runner=FakeRunnerWithDecode())
    run_study(b, runner=FakeRunnerWithDecode())
    with pytest.raises(ValueError, match="other settings.*seed"):
        merge_study([plan_study(a).work_dir, plan_study(b).work_dir], n_resamples=FAST_RESAMPLES)
    with pytest.raises(ValueError, match="merge=.*not a study work directory"):
        merge_study([tmp_path], n_resamples=FAST_RESAMPLES)


@pytest.mark.slow
def test_merge_of_one_shard_reports_missing_prompts(tmp_path):
    cfg = replace(fake_config(tmp_path, limit=12), shard=(1, 2))
    run_study(cfg, runner=FakeRunnerWithDecode())
    merged = merge_study([plan_study(cfg).work_dir], n_resamples=FAST_RESAMPLES)
    assert 0 < len(merged.missing) < 12 and len(merged.per_prompt) + len(merged.missing) == 12


@pytest.mark.slow
def test_cli_study_shards_then_merge_writes_one_report(tmp_path, capsys, monkeypatch):
    from lab import cli
    from lab.study import runner as study_mod

    monkeypatch.setattr(study_mod.ModelRunner, "load", classmethod(lambda cls, cfg: FakeRunnerWithDecode()))
    common = ["study", "--limit", "12", "--device", "cpu", "--resamples", "99", "--out", str(tmp_path)]
    for k in (1, 2):
        assert cli.main([*common, "--shard", f"{k}/2"]) == 0
    assert not [p for p in tmp_path.iterdir() if p.name.endswith("-study")]  # shards write no report
    work = [p for p in tmp_path.iterdir() if p.name.startswith(".study-work-")]
    assert len(work) == 1  # both shards share one work directory (same settings, same key)
    assert cli.main(["study", "--merge", str(work[0]), "--resamples", "99", "--out", str(tmp_path)]) == 0
    reports = [p for p in tmp_path.iterdir() if p.name.endswith("-study")]
    assert len(reports) == 1
    study = json.loads((reports[0] / "report.json").read_text())
    assert study["missing_prompts"] == [] and len(study["merged_from"]) == 1
    assert cli.main([*common, "--shard", "3/2"]) == 2
    assert "--shard '3/2'" in capsys.readouterr().err


def _one_shard_damaged(tmp_path, damage):
    """A whole study's work directory (the fake with a decode, 12 prompts) with one outcome file changed by
    ``damage(data)``; returns (work dir, the damaged prompt's id)."""
    from lab.study.work import work_file

    cfg = replace(fake_config(tmp_path, limit=12), shard=(1, 1))
    run_study(cfg, runner=FakeRunnerWithDecode())
    plan = plan_study(cfg)
    victim = plan.prompts[2]
    path = work_file(plan, victim)
    data = json.loads(path.read_text())
    damage(data)
    path.write_text(json.dumps(data))
    return plan.work_dir, victim.id


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [float("nan"), "other"])
def test_merge_outcome_alpha_not_its_counts_left_out_and_report_incomplete(tmp_path, alpha):
    """Poor case (outcomes trusted as read): an outcome file with alpha NaN (tokens tested), or an alpha that
    is not its own n_accepted / n_drafted_tested, merged into a report not marked incomplete."""
    def damage(data):
        row = data["row"]
        row["alpha"] = alpha if alpha != "other" else (0.5 if row["n_accepted"] / row["n_drafted_tested"] != 0.5
                                                       else 0.25)

    work, victim = _one_shard_damaged(tmp_path, damage)
    merged = merge_study([work], n_resamples=FAST_RESAMPLES)
    assert merged.missing == [victim] and victim not in {r.id for r in merged.per_prompt}
    assert all(r.alpha == r.n_accepted / r.n_drafted_tested for r in merged.per_prompt)


@pytest.mark.slow
def test_merge_damaged_outcome_message_says_what_merge_does(tmp_path, caplog):
    """Poor case (a message that promises what the command never does): merge warned that a damaged
    outcome "will be redone"; merge redoes nothing, it leaves the prompt out and marks the report."""
    work, victim = _one_shard_damaged(tmp_path, lambda data: data["row"].update(n_accepted=-1))
    with caplog.at_level("WARNING"):
        merged = merge_study([work], n_resamples=FAST_RESAMPLES)
    assert merged.missing == [victim]
    (line,) = [r.getMessage() for r in caplog.records if "outcomes" in r.getMessage()]
    assert "will be redone" not in line and "left out of the merged report" in line and "INCOMPLETE" in line
    assert f"--resume {work}" in line and victim in line and "\n" not in line
