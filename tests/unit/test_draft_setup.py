"""The draft set-up ``lab speculate`` runs (draft dtype, gamma, stops) and where each part came from.

Fault classes: a ``--draft-dtype`` that does not reach the draft's construction; a set-up chosen
silently (the terminal and the report must say which ran and why).
"""

from __future__ import annotations

import json

import pytest

from lab import cli
from lab.speculative.setups import DEFAULT_SETUPS, DraftSetup, default_setup, resolve_setup
from tests import support


def _report(out):
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return json.loads((run / "report.json").read_text(encoding="utf-8"))


def test_speculate_draft_dtype_flag_reaches_the_draft_and_the_report(tmp_path, capsys, monkeypatch):
    asked = support.patch_tiny_loader_recording_drafts(monkeypatch)
    rc = cli.main(["speculate", "hi", "--model", "qwen2.5-coder", "--draft-dtype", "float32", "--gamma", "3",
                   "--max-new-tokens", "4", "--device", "cpu", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert asked == [("auto:qwen2.5-coder-0.5b", "float32")]  # the default draft: auto with the profile's model
    setup = _report(tmp_path)["settings"]["draft_setup"]
    assert setup["draft_dtype"] == "float32" and setup["gamma"] == 3
    assert setup["sources"]["draft_dtype"] == "--draft-dtype" and setup["sources"]["gamma"] == "--gamma"
    assert "draft set-up: draft float32, gamma 3" in err and "from --draft-dtype" in err


def test_speculate_without_setup_flags_runs_the_documented_default_and_says_why(tmp_path, capsys, monkeypatch):
    """Negative control of the flag test: without --draft-dtype the documented default runs, named as such."""
    asked = support.patch_tiny_loader_recording_drafts(monkeypatch)
    rc = cli.main(["speculate", "hi", "--model", "qwen2.5-coder", "--draft", "qwen2.5-coder-0.5b", "--max-new-tokens",
                   "4", "--device", "cpu", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 0, err
    expected = DEFAULT_SETUPS["qwen2.5-coder"][0]
    assert asked == [("qwen2.5-coder-0.5b", expected.draft_dtype)]
    settings = _report(tmp_path / "o")["settings"]
    assert settings["gamma"] == expected.gamma
    assert settings["draft_setup"]["sources"]["draft_dtype"].startswith("default: ")
    assert "draft set-up:" in err and "from default: " in err


def test_speculate_untyped_draft_is_auto_with_the_profiles_model_in_its_documented_dtype(tmp_path, capsys, monkeypatch):
    """No --draft: auto with the profile's draft model (its documented dtype), gamma the most auto drafts a round."""
    from lab.speculative.auto import AUTO_MAX_GAMMA

    asked = support.patch_tiny_loader_recording_drafts(monkeypatch)
    rc = cli.main(["speculate", "hi", "--model", "qwen2.5-coder", "--max-new-tokens", "4", "--device", "cpu",
                   "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert asked == [("auto:qwen2.5-coder-0.5b", DEFAULT_SETUPS["qwen2.5-coder"][0].draft_dtype)]
    settings = _report(tmp_path / "o")["settings"]
    assert settings["draft"] == "auto:qwen2.5-coder-0.5b" and settings["gamma"] == AUTO_MAX_GAMMA
    assert settings["draft_setup"]["sources"]["gamma"].startswith("default: auto drafts 0 to")
    assert settings["adaptive"] is None and settings["dynamic"] is None


def test_speculate_draft_dtype_for_an_early_exit_draft_exits_2(tmp_path, capsys):
    rc = cli.main(["speculate", "hi", "--draft", "early-exit:2", "--draft-dtype", "bfloat16", "--out", str(tmp_path)])
    assert rc == 2 and "--draft-dtype bfloat16" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_speculate_bad_draft_dtype_choice_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["speculate", "hi", "--draft-dtype", "int3", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "--draft-dtype" in capsys.readouterr().err


def test_resolve_setup_typed_gamma_replaces_a_base_dynamic_policy():
    base = DraftSetup(draft_dtype="bfloat16", gamma=12, dynamic="dynamic:4:12")
    got = resolve_setup({"gamma": 3}, base=base, base_source="tuned: x.json", has_weights=True)
    assert got.setup == DraftSetup(draft_dtype="bfloat16", gamma=3)
    assert got.sources["draft_dtype"] == "tuned: x.json" and got.sources["gamma"] == "--gamma"


def test_default_setup_drops_the_dtype_for_a_draft_without_weights():
    setup, why = default_setup("qwen2.5-coder", has_weights=False)
    assert setup.draft_dtype is None and why.startswith("default: ")
    assert default_setup("no-such-profile", has_weights=True)[0] == DraftSetup()
