"""Every command that generates refuses prompt + --max-new-tokens past the model's context before any work.

Regression (fault class: silent decode past the context window):
``lab entropy`` decoded 8,234 positions on a model with a context of 8,192 and
wrote a normal-looking report. Each command here runs in-process on a tiny model
whose context is 64 positions; the check must exit 2 with one line naming
``--max-new-tokens``, write nothing, and run no decode.
"""

from __future__ import annotations

import pytest

import lab.models.loading
from lab import cli
from tests import support

from tests.support import report_dirs

CONTEXT = 64


@pytest.fixture
def short_context_backend(monkeypatch):
    """Model loading routed to a tiny Llama with a 64-position context; any forward fails the test."""
    tok = support.chatml_tokenizer()
    model = support.tiny_llama(vocab_size=len(tok), num_layers=2, max_positions=CONTEXT)

    def fake_load(name, *, device=None, dtype=None, attn_implementation=None, weights="float32"):
        return model, tok

    def no_forward(module, args, kwargs):
        raise AssertionError("a forward ran before the context check")

    monkeypatch.setattr(lab.models.loading, "load_model", fake_load)
    monkeypatch.setattr(lab.models.loading, "resolve_source", lambda name: (name, None))
    handle = model.register_forward_pre_hook(no_forward, with_kwargs=True)
    yield model, tok, handle
    handle.remove()


LONG_PROMPT = " ".join(["the capital of france is paris ."] * 4)  # 50 tokens with the ChatML template


@pytest.mark.parametrize("argv", [
    ["entropy", LONG_PROMPT, "--max-new-tokens", "20"],
    ["entropy", "hi", "--max-new-tokens", "100000"],
    ["speculate", "hi", "--draft", "early-exit:1", "--max-new-tokens", "100000"],
    ["speculate", LONG_PROMPT, "--draft", "prompt-lookup", "--max-new-tokens", "20"],
    ["bench", "--draft", "early-exit:1", "--prompts", "hi", "--max-new-tokens", "100000"],
    ["bench-tracker", "--max-new-tokens", "100000"],
    ["study", "--draft", "early-exit:1", "--limit", "8", "--max-new-tokens", "100000"],
], ids=["entropy-long-prompt", "entropy-huge", "speculate-huge", "speculate-long-prompt", "bench-huge",
        "bench-tracker-huge", "study-huge"])
def test_cli_prompt_plus_budget_past_context_exits_2_naming_flag(tmp_path, capsys, short_context_backend, argv):
    rc = cli.main([*argv, "--device", "cpu", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2, err
    errors = [line for line in err.splitlines() if "error:" in line]  # progress logging may precede it
    assert len(errors) == 1, err
    (line,) = errors
    assert "--max-new-tokens=" in line and f"the model's context of {CONTEXT}" in line
    assert list(tmp_path.iterdir()) == [], "a report or work directory was left behind"


def test_cli_entropy_prompt_plus_budget_within_context_runs(tmp_path, capsys, short_context_backend, monkeypatch):
    """Control: the same long prompt with a budget that fits decodes and writes its report."""
    model, tok, handle = short_context_backend
    handle.remove()  # this one decodes
    from lab.models.chat import build_messages, encode_chat

    n = encode_chat(tok, build_messages(LONG_PROMPT)).shape[1]
    assert n < CONTEXT
    rc = cli.main(["entropy", LONG_PROMPT, "--max-new-tokens", str(CONTEXT - n), "--device", "cpu",
                   "--out", str(tmp_path)])
    assert rc == 0, capsys.readouterr().err
    assert len(report_dirs(tmp_path)) == 1


def test_cli_bench_with_a_prompt_lookup_draft_writes_its_report(tmp_path, capsys, short_context_backend):
    """A draft without a model has no FLOP cost: the bench reads it from the drafter's facts (it crashed reading an
    attribute only model drafts have)."""
    model, tok, handle = short_context_backend
    handle.remove()  # this one decodes
    rc = cli.main(["bench", "--draft", "prompt-lookup", "--prompts", "hi", "--max-new-tokens", "3", "--repeats", "1",
                   "--gammas", "2", "--no-assisted", "--device", "cpu", "--out", str(tmp_path)])
    assert rc == 0, capsys.readouterr().err
    (report,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert (report / "report.json").exists()
