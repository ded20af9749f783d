"""``--context`` of ``lab sinks`` and ``lab entropy``: the decode's reading of a context placed before the prompt,
with the model's fitted context measure and its validity record in the terminal, report.json and summary.md.

Runs in-process on a tiny Llama routed in as ``smollm2`` (whose packaged measure failed the validation set, so
every place that shows the value must say so); bad input is refused in one line before any model loads.
"""

from __future__ import annotations

import json

import pytest

import lab.models.loading
from lab import cli
from lab.health.context_validity import HeadReference
from tests import support
from tests.support import report_dirs

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CONTEXT = "alpha beta gamma delta epsilon zeta eta theta"


@pytest.fixture
def tiny_smollm2(monkeypatch, tmp_path):
    """``smollm2`` loads a tiny Llama; its packaged context measure is read, its heads mapped into the tiny model."""
    import lab.health.context_validity as cv

    tok = support.chatml_tokenizer()
    model = support.tiny_llama(vocab_size=len(tok), max_positions=512)
    monkeypatch.setattr(lab.models.loading, "load_model", lambda name, **kw: (model, tok))
    monkeypatch.setattr(lab.models.loading, "check_model_available", lambda name: None)
    monkeypatch.setattr(lab.models.loading, "known_config", lambda name: None)
    monkeypatch.setattr(lab.models.loading, "resolve_source", lambda name: (name, None))
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path / "cal"))
    real = cv.load_context_measure

    def tiny_heads(profile):
        found = real(profile)
        from dataclasses import replace
        return replace(found, reference=HeadReference(heads=((0, 1), (1, 2)), intercept=0.2, slope=0.01,
                                                      n_pairs=60, loo_auroc=0.8))
    monkeypatch.setattr(cv, "load_context_measure", tiny_heads)
    return model


@pytest.mark.parametrize("command", [["sinks", "what is it"], ["entropy", "what is it", "--max-new-tokens", "4"]],
                         ids=["sinks", "entropy"])  # entropy: --context alone makes the untyped runtime torch
def test_context_reading_is_shown_with_the_failed_validation_everywhere(command, tiny_smollm2, tmp_path, capsys):
    assert cli.main([*command, "--context", CONTEXT, "--model", "smollm2", "--device", "cpu",
                     "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "context measure lookback_heads" in out and "NOT VALIDATED here" in out and "AUROC 0.73 < 0.75" in out
    (report,) = report_dirs(tmp_path / "r")
    data = json.loads((report / "report.json").read_text())
    cm = data["context_measure"]
    assert data["context"] == CONTEXT and isinstance(cm["value"], float) and cm["n_context"] >= 8
    assert "AUROC 0.73 < 0.75" in cm["unmeasurable"] and set(cm["verdicts"]) == {"validation", "heldback"}
    assert data["messages"][-1]["content"] == f"{CONTEXT}\n\nwhat is it"  # the prompt read is the one scored
    summary = (report / "summary.md").read_text()
    assert "## Context measure" in summary and "Not validated on this model" in summary


@pytest.mark.parametrize("command", [["sinks"], ["entropy", "--max-new-tokens", "2"]], ids=["sinks", "entropy"])
def test_context_prompt_with_leading_blank_lines_recorded_as_the_model_was_given_it(command, tiny_smollm2, tmp_path,
                                                                                   capsys):
    """Fault class: a record that disagrees with the run (--context drops the prompt's leading blank lines before
    the model, and report.json and summary.md kept them)."""
    assert cli.main([command[0], "\n\n  what is it", *command[1:], "--context", CONTEXT, "--model", "smollm2",
                     "--device", "cpu", "--out", str(tmp_path / "r")]) == 0
    (report,) = report_dirs(tmp_path / "r")
    data = json.loads((report / "report.json").read_text())
    assert data["messages"][-1]["content"] == f"{CONTEXT}\n\nwhat is it"
    assert data["prompt"] == "what is it"
    assert "\n\n  what is it" not in (report / "summary.md").read_text()


@pytest.mark.parametrize("command", [["sinks", "what is it"], ["entropy", "what is it", "--max-new-tokens", "4"]],
                         ids=["sinks", "entropy"])
def test_context_reading_near_zero_shows_one_way_in_terminal_summary_and_page_never_minus_zero(
        command, tiny_smollm2, tmp_path, capsys, monkeypatch):
    """Fault class: one figure shown two ways. A reading of -1.64e-05 printed "-0.000" in the terminal and
    summary.md (a zero with a minus sign) and -1.64e-05 on the page; all three show it as lab.views.core.fmt does."""
    import lab.health.context_items as items

    monkeypatch.setattr(items, "twin_lookback", lambda *a, **k: (-1.64e-05, 8))
    assert cli.main([*command, "--context", CONTEXT, "--model", "smollm2", "--device", "cpu",
                     "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    (report,) = report_dirs(tmp_path / "r")
    summary = (report / "summary.md").read_text()
    page = (report / "index.html").read_text()
    shown = "-1.64e-05"  # fmt's three significant figures
    assert f"context measure lookback_heads: {shown} on 8 context tokens" in out
    assert f"**{shown}**" in summary and f'<dd class="value">{shown}</dd>' in page
    assert not any("-0.000" in text for text in (out, summary, page))



def test_fmt_negative_zero_shows_no_minus_sign():
    """Fault class: one figure shown two ways: a zero shown as "-0" where it is 0 (a reading of exactly -0.0)."""
    from lab.views.core import fmt

    assert fmt(-0.0) == fmt(0.0) == "0" and fmt(-1.64e-05) == "-1.64e-05"


@pytest.mark.parametrize("argv, match", [
    (["sinks", "q", "--context", "  "], "--context='  ' holds no text"),
    (["sinks", "q", "--context-file", "/nonexistent/ctx.txt"], "--context-file /nonexistent/ctx.txt: no such file"),
    (["entropy", "q", "--context", "c", "--runtime", "llama.cpp"], "--context applies to --runtime torch only"),
], ids=["blank", "missing-file", "llama-cpp-runtime"])
def test_bad_context_is_refused_in_one_line_before_any_model_loads(argv, match, no_model_loading, tmp_path, capsys):
    assert cli.main([*argv, "--model", "smollm2", "--device", "cpu", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r").exists()


def test_context_and_context_file_together_are_refused(no_model_loading, tmp_path, capsys):
    assert support.cli_exit(["sinks", "q", "--context", "c", "--context-file", str(tmp_path / "c.txt")]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_context_that_leaves_no_room_for_the_reading_is_refused_before_the_prefill(tiny_smollm2, tmp_path,
                                                                                      capsys):
    """Fault class: a context that fits the prefill but not the reading's 24 tokens, refused only after the
    prefill ran, with advice naming a flag the command does not have."""
    def no_forward(module, args, kwargs):
        raise AssertionError("a forward ran before the room check")

    handle = tiny_smollm2.register_forward_pre_hook(no_forward, with_kwargs=True)
    try:
        long = " ".join(["alpha beta gamma delta"] * 120)  # about 480 words on a 512-position model
        assert cli.main(["sinks", "q", "--context", long, "--model", "smollm2", "--device", "cpu",
                         "--out", str(tmp_path / "r")]) == 2
    finally:
        handle.remove()
    err = capsys.readouterr().err
    assert "--context: the prompt with it is" in err and "needs 24 more" in err and "max_new_tokens" not in err
    assert not (tmp_path / "r").exists()


def test_a_prompt_that_starts_with_blank_lines_is_read_with_a_context(tiny_smollm2, tmp_path, capsys):
    """Fault class: the question's leading blank lines merged with the context's own into one token, so the
    question's tokens differed with and without the context and the reading failed with an internal span error."""
    assert cli.main(["sinks", "\n\nwhat is it", "--context", CONTEXT, "--model", "smollm2", "--device", "cpu",
                     "--out", str(tmp_path / "r")]) == 0
    (report,) = report_dirs(tmp_path / "r")
    data = json.loads((report / "report.json").read_text())
    assert data["messages"][-1]["content"] == f"{CONTEXT}\n\nwhat is it"
    assert isinstance(data["context_measure"]["value"], float)
