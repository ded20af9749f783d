"""The study's per-prompt pipeline on tiny models: one target prefill, one target decode, and the
draft's dtype with where it came from."""

from __future__ import annotations

import pytest
import torch

from lab.models import loading as models
from lab.models.source import ModelSource, register_source
from lab.prompts import load_prompts
from lab.speculative.draft_specs import make_draft
from lab.study.runner import ModelRunner
from lab.study.config import StudyConfig
from lab.study import config as study_config
from tests import support


@pytest.fixture(scope="module")
def tok():
    return support.chatml_tokenizer()


@pytest.fixture
def tiny_pair(tok, monkeypatch):
    """``load_model`` returns tiny random Qwen2 models (target, then draft) and records the dtypes asked."""
    asked = []

    def fake_load(name, **kwargs):
        asked.append((name, kwargs.get("dtype")))
        model = support.tiny_qwen2(vocab_size=len(tok), seed=len(asked))
        dtype = kwargs.get("dtype")
        if dtype is not None:
            model = model.to(models.parse_dtype(dtype, torch.device("cpu")))
        register_source(model, ModelSource(model=name, device="cpu", dtype=str(next(model.parameters()).dtype)))
        return model, tok

    monkeypatch.setattr(models, "load_model", fake_load)
    return asked


def test_model_runner_one_target_prefill_and_no_tracked_decode(tiny_pair, monkeypatch):
    """Regression (fault class: the target decodes a prompt twice): per prompt the target sees the
    whole prompt in one forward (the capture's), never a tracked target-only decode."""
    import lab.decode
    import lab.tracker.loop

    def refuse(*a, **k):
        raise AssertionError("the study ran a target-only decode")

    monkeypatch.setattr(lab.tracker.loop, "track_generate", refuse)
    monkeypatch.setattr(lab.decode, "generate", refuse)
    runner = ModelRunner.load(StudyConfig(model="qwen2.5", device="cpu", max_new_tokens=6, gamma=2))
    prompt = next(p for p in load_prompts() if p.id == "factual-06")
    widths = []
    hook = runner.target.register_forward_pre_hook(
        lambda m, a, kw: widths.append((kw["input_ids"] if "input_ids" in kw else a[0]).shape[1]), with_kwargs=True)
    try:
        outcome = runner(prompt)
    finally:
        hook.remove()
    n_prompt = outcome.row.n_prompt_tokens
    assert widths.count(n_prompt) == 1 and max(widths) == n_prompt, widths  # one prefill over the prompt
    assert len(widths) == 1 + outcome.row.n_rounds, widths  # then one verify pass per round, nothing else
    assert outcome.row.n_new_tokens == len(outcome.decode.entropy_bits) == len(outcome.decode.word)
    assert outcome.row.decode_s is None  # no separate tracked decode to time


def test_model_runner_h6_runs_decode_from_the_prompt_prefill(tiny_pair):
    """Regression (fault class: the H6 runs prefill the prompt again): after the prompt's run, alpha
    at another temperature runs the target only over verify passes (at most gamma + 1 positions),
    twice with the same alpha (the kept prefill is copied, never consumed), and equals a run that
    prefills for itself to the last draw (the same cache up to float rounding)."""
    runner = ModelRunner.load(StudyConfig(model="qwen2.5", device="cpu", max_new_tokens=6, gamma=2))
    prompt = next(p for p in load_prompts() if p.id == "factual-06")
    runner(prompt)
    widths = []
    hook = runner.target.register_forward_pre_hook(
        lambda m, a, kw: widths.append((kw["input_ids"] if "input_ids" in kw else a[0]).shape[1]), with_kwargs=True)
    try:
        first, second = runner.alpha_at(prompt, 0.7), runner.alpha_at(prompt, 0.7)
    finally:
        hook.remove()
    assert widths and max(widths) <= 3, widths  # verify passes only: no prefill over the prompt
    assert first == second
    runner._prefilled = (None, None)  # forget it: the run prefills for itself
    assert runner.alpha_at(prompt, 0.7) == first


def test_model_runner_records_each_models_dtype_and_the_source(tiny_pair, monkeypatch):
    monkeypatch.setitem(study_config.STUDY_DRAFT_DTYPES, "qwen2.5", ("bfloat16", "measured in a test"))
    runner = ModelRunner.load(StudyConfig(model="qwen2.5", device="cpu", max_new_tokens=4))
    assert tiny_pair[1] == (models.PROFILES["qwen2.5"].draft, "bfloat16")
    assert runner.info["target_dtype"] == "float32" and runner.info["draft_dtype"] == "bfloat16"
    assert "measured in a test" in runner.info["draft_dtype_source"]
    assert "one target decode" in runner.info["pipeline"]


def test_study_config_draft_dtype_choice_flag_then_table_then_target():
    table = {"qwen2.5-coder": ("bfloat16", "why")}
    assert StudyConfig(model="qwen2.5-coder", draft_dtype="float32").draft_dtype_choice() == ("float32",
                                                                                            "--draft-dtype")
    original = dict(study_config.STUDY_DRAFT_DTYPES)
    study_config.STUDY_DRAFT_DTYPES.update(table)
    try:
        dtype, source = StudyConfig(model="qwen2.5-coder").draft_dtype_choice()
        assert dtype == "bfloat16" and "why" in source
        # an explicit --draft other than the profile's is not what was measured: the target's dtype
        assert StudyConfig(model="qwen2.5-coder", draft="qwen2.5-coder-0.5b").draft_dtype_choice()[0] is None
        # the table chose among float32-weight representations: quantized draft weights set their own
        dtype, source = StudyConfig(model="qwen2.5-coder", draft_weights="q4").draft_dtype_choice()
        assert dtype is None and "q4" in source
    finally:
        study_config.STUDY_DRAFT_DTYPES.clear()
        study_config.STUDY_DRAFT_DTYPES.update(original)
    assert StudyConfig(model="smollm2").draft_dtype_choice()[0] is None


def test_study_config_bad_draft_dtype_raises_naming_it():
    with pytest.raises(ValueError, match="draft_dtype='float8'"):
        StudyConfig(draft_dtype="float8")


def test_make_draft_dtype_for_a_shared_weight_draft_raises():
    model = support.tiny_llama(num_layers=2)
    with pytest.raises(ValueError, match="no weights of its own"):
        make_draft(model, "early-exit:1", dtype="bfloat16")
    assert make_draft(model, "early-exit:1", dtype="float32") is not None  # the target's own dtype is fine


def test_plan_study_settings_key_changes_with_the_draft_dtype(tmp_path):
    from lab.study.work import plan_study

    a = plan_study(StudyConfig(out=str(tmp_path), limit=2))
    b = plan_study(StudyConfig(out=str(tmp_path), limit=2, draft_dtype="bfloat16"))
    assert a.settings["draft_dtype"] is None and b.settings["draft_dtype"] == "bfloat16"
    assert a.key != b.key
