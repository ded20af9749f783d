"""The tuned draft set-up: chosen from measurements, written for this machine, read back, or ignored.

Fault classes: a set-up tuned on another machine (CPU model, flags, thread count) or another torch
used silently; a corrupt tuning file that crashes ``lab speculate`` with a traceback; a tuned
set-up that runs without the terminal and the report saying so.
"""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from lab import cli
from lab.bench.tune import choose, setup_of, tune_configs
from lab.speculative.setups import DraftSetup
from lab import tuning
from lab.tuning import DRAFT_SETUP, RUNTIME, machine_key
from tests import support

from tests.support import report_dirs

PROFILE, DRAFT = "qwen2.5-coder", "qwen2.5-coder-0.5b"
TUNED = DraftSetup(draft_dtype="per-pass", gamma=3, adaptive="pmin:0.6")


def _method(gamma, e2e, decode=1.0, adaptive=None, policy=None):
    return support.bench_method(gamma, adaptive=adaptive, policy=policy,
                                per_repeat={"e2e_speedup": e2e, "decode_speedup": decode})


def _benches(greedy: dict, sampling: dict) -> dict:
    base = {"target-only (lab loop)": support.bench_method(per_repeat={"e2e_speedup": 1.0})}
    return {"greedy": support.bench_result({**base, **greedy}), "sampling": support.bench_result({**base, **sampling})}


def test_choose_takes_the_best_geometric_mean_over_both_modes():
    greedy = {"speculative gamma=4": _method(4, 1.30), "speculative gamma=5 draft=bfloat16": _method(5, 1.20),
              "speculative dynamic:4:12 draft=per-pass": _method(12, 1.25, policy="dynamic:4:12")}
    sampling = {"speculative gamma=4": _method(4, 0.90), "speculative gamma=5 draft=bfloat16": _method(5, 1.10),
                "speculative dynamic:4:12 draft=per-pass": _method(12, 0.95, policy="dynamic:4:12")}
    setup, measured = choose(_benches(greedy, sampling))
    assert measured["winner"] == "speculative gamma=5 draft=bfloat16", measured["ranking"]  # greedy's best loses
    assert setup == DraftSetup(draft_dtype="bfloat16", gamma=5)
    assert measured["beats_target_alone"] and "target-only (lab loop)" not in measured["candidates"]


def test_setup_of_maps_method_names_to_setups():
    assert setup_of("speculative dynamic:4:12 adaptive=pmin:0.6 draft=per-pass",
                    _method(12, 1, adaptive="pmin:0.6", policy="dynamic:4:12")) == DraftSetup(
        draft_dtype="per-pass", gamma=12, adaptive="pmin:0.6", dynamic="dynamic:4:12")
    assert setup_of("speculative gamma=4 no-cache", _method(4, 1)) is None
    assert setup_of("transformers assisted gamma=4", support.bench_method()) is None


def test_tune_configs_run_the_same_candidates_greedy_and_sampling():
    c = tune_configs(model_draft=True)
    assert c["greedy"].sampling.greedy and not c["sampling"].sampling.greedy
    assert c["greedy"].draft_dtypes == c["sampling"].draft_dtypes == ("bfloat16", "per-pass")
    assert tune_configs(model_draft=False)["greedy"].draft_dtypes == ()


def test_tuned_setup_is_written_and_read_back_on_the_same_machine():
    machine = machine_key(2)
    path = support.write_tuned_setup(PROFILE, DRAFT, TUNED, machine, {"winner": "x"})
    setup, got = support.read_tuned_setup(PROFILE, DRAFT, machine)
    assert setup == TUNED and got.note is None and got.path == path == DRAFT_SETUP.path(PROFILE)


# Files as lab bench-tune and bench-tune-runtime write them (each kind's format 1), byte for byte: the files on users'
# machines, which every later lab reads as they are.
MACHINE = {"cpu_model": "CPU X", "cpu_flags": ["avx2", "amx_bf16"], "torch": "2.5.0", "threads": 2}
DRAFT_SETUP_FILE = """{
  "format": 1,
  "profile": "qwen2.5-coder",
  "draft": "qwen2.5-coder-0.5b",
  "setup": {
    "draft_dtype": "bfloat16",
    "gamma": 5,
    "adaptive": "pmin:0.6",
    "dynamic": null
  },
  "machine": {
    "cpu_model": "CPU X",
    "cpu_flags": [
      "avx2",
      "amx_bf16"
    ],
    "torch": "2.5.0",
    "threads": 2
  },
  "measured": {
    "winner": "w",
    "score": 1.25
  },
  "written": "2026-12-04T20:04:00+00:00"
}
"""
RUNTIME_FILE = """{
  "format": 1,
  "profile": "qwen2.5-coder",
  "runtime": "llama.cpp",
  "weights": "gguf",
  "machine": {
    "cpu_model": "CPU X",
    "cpu_flags": [
      "avx2",
      "amx_bf16"
    ],
    "torch": "2.5.0",
    "threads": 2,
    "llama_cpp": "0.3.2"
  },
  "measured": {
    "busy": false
  },
  "report": "reports/r",
  "written": "2026-12-04T20:04:00+00:00"
}
"""


def test_tuned_files_are_written_byte_for_byte_as_before(monkeypatch):
    """Regression (a file format changed by a refactor of its writer): both kinds keep their fields' order and bytes."""
    class _Clock:
        @staticmethod
        def now(tz):
            return datetime(2026, 12, 4, 20, 4, tzinfo=tz)

    monkeypatch.setattr(tuning, "datetime", _Clock)
    setup = DraftSetup(draft_dtype="bfloat16", gamma=5, adaptive="pmin:0.6")
    path = support.write_tuned_setup(PROFILE, DRAFT, setup, MACHINE, {"winner": "w", "score": 1.25})
    assert path.read_text(encoding="utf-8") == DRAFT_SETUP_FILE
    path = tuning.write_tuned(RUNTIME, PROFILE, {"runtime": "llama.cpp", "weights": "gguf", "report": "reports/r"},
                              {**MACHINE, "llama_cpp": "0.3.2"}, {"busy": False})
    assert path.read_text(encoding="utf-8") == RUNTIME_FILE


def test_tuned_files_in_todays_format_are_read_as_written():
    """Negative control beside the byte test: the same texts, placed by hand, are read and used."""
    DRAFT_SETUP.path(PROFILE).parent.mkdir(parents=True, exist_ok=True)
    DRAFT_SETUP.path(PROFILE).write_text(DRAFT_SETUP_FILE, encoding="utf-8")
    RUNTIME.path(PROFILE).write_text(RUNTIME_FILE, encoding="utf-8")
    setup, got = support.read_tuned_setup(PROFILE, DRAFT, MACHINE)
    assert setup == DraftSetup(draft_dtype="bfloat16", gamma=5, adaptive="pmin:0.6") and got.note is None
    got = tuning.read_tuned(RUNTIME, PROFILE, {**MACHINE, "llama_cpp": "0.3.2"})
    assert (got.data["runtime"], got.data["weights"], got.note) == ("llama.cpp", "gguf", None)
    got = tuning.read_tuned(RUNTIME, PROFILE, {**MACHINE, "llama_cpp": "0.3.3"})
    assert got.data is None and got.note.endswith("stale, measured with llama.cpp build 0.3.2, this is 0.3.3; re-run "
                                                  "lab bench-tune-runtime")


def test_read_tuned_without_the_kinds_match_raises_naming_match():
    """A draft set-up file is matched on its draft: a reader that does not say which is refused, not guessed."""
    with pytest.raises(ValueError, match=r"match=None must name .*\['draft'\]"):
        tuning.read_tuned(DRAFT_SETUP, PROFILE, machine_key(2))
    with pytest.raises(ValueError, match="match="):
        tuning.read_tuned(RUNTIME, PROFILE, machine_key(2), match={"draft": DRAFT})


@pytest.mark.parametrize("change, needle", [
    ({"cpu_model": "Some Other CPU"}, "another machine (CPU 'Some Other CPU'"),
    ({"cpu_flags": ["amx_bf16"]}, "other CPU flags"),
    ({"threads": 7}, "7 torch threads, this run has 2"),
    ({"torch": "1.0.0"}, "stale, measured with torch 1.0.0"),
])
def test_foreign_or_stale_tuning_file_is_ignored_naming_why(change, needle):
    machine = machine_key(2)
    support.write_tuned_setup(PROFILE, DRAFT, TUNED, {**machine, **change}, {})
    setup, got = support.read_tuned_setup(PROFILE, DRAFT, machine)
    assert setup is None and needle in got.note and "\n" not in got.note


def test_tuning_file_of_another_draft_is_ignored():
    support.write_tuned_setup(PROFILE, "some-other-draft", TUNED, machine_key(2), {})
    setup, got = support.read_tuned_setup(PROFILE, DRAFT, machine_key(2))
    assert setup is None and "some-other-draft" in got.note


@pytest.mark.parametrize("text", ["{not json", "[]", '{"format": 1}', json.dumps(
    {"format": 1, "profile": PROFILE, "draft": DRAFT, "setup": {"gamma": 0}, "machine": {}})])
def test_corrupt_tuning_file_gives_one_line(text):
    path = DRAFT_SETUP.path(PROFILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    setup, got = support.read_tuned_setup(PROFILE, DRAFT, machine_key(2))
    assert setup is None and got.note.startswith(f"ignoring the tuning file {path}: corrupt")


def _speculate(tmp_path, capsys, *extra):
    """``lab speculate`` with the profile's draft model named: a tuned set-up is for a fixed draft (the untyped
    default, auto, chooses its gamma per round)."""
    rc = cli.main(["speculate", "hi", "--model", PROFILE, "--draft", DRAFT, "--max-new-tokens", "4", "--device",
                   "cpu", "--out", str(tmp_path / "o"), *extra])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    (run,) = report_dirs((tmp_path / "o"))
    return json.loads((run / "report.json").read_text(encoding="utf-8"))["settings"], captured.err


def test_speculate_runs_the_tuned_setup_and_says_so(tmp_path, capsys, monkeypatch):
    import torch

    asked = support.patch_tiny_loader_recording_drafts(monkeypatch)
    path = support.write_tuned_setup(PROFILE, DRAFT, TUNED, machine_key(torch.get_num_threads()), {})
    settings, err = _speculate(tmp_path, capsys)
    assert asked == [(DRAFT, "per-pass")] and settings["gamma"] == 3 and settings["adaptive"] == "pmin:0.6"
    assert settings["draft_setup"]["sources"]["draft_dtype"] == f"tuned: {path}"
    assert f"from tuned: {path}" in err


def test_speculate_with_a_foreign_tuning_file_runs_the_default_with_one_note(tmp_path, capsys, monkeypatch):
    import torch

    asked = support.patch_tiny_loader_recording_drafts(monkeypatch)
    support.write_tuned_setup(PROFILE, DRAFT, TUNED, {**machine_key(torch.get_num_threads()), "cpu_model": "Elsewhere"},
                              {})
    settings, err = _speculate(tmp_path, capsys)
    assert asked[0][1] != "per-pass" and settings["draft_setup"]["sources"]["gamma"].startswith("default: ")
    assert err.count("ignoring the tuning file") == 1 and "Traceback" not in err
    assert "Elsewhere" in settings["draft_setup"]["notes"][0]


def test_speculate_with_a_corrupt_tuning_file_runs_with_one_clear_line(tmp_path, capsys, monkeypatch):
    support.patch_tiny_loader_recording_drafts(monkeypatch)
    path = DRAFT_SETUP.path(PROFILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{truncated", encoding="utf-8")
    settings, err = _speculate(tmp_path, capsys)
    assert err.count("ignoring the tuning file") == 1 and "corrupt" in err and "Traceback" not in err


@pytest.mark.parametrize("kind, match", [(DRAFT_SETUP, {"draft": DRAFT}), (RUNTIME, None)])
@pytest.mark.parametrize("link", ["dangling", "loop"])
def test_read_tuned_names_a_dangling_or_looping_symlink_in_place_of_the_file(tmp_path, kind, match, link):
    """Fault class: a symbolic link that leads to no file, in place of a tuning file, skipped with no note."""
    path = kind.path(PROFILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(tmp_path / "gone.json" if link == "dangling" else path)
    got = tuning.read_tuned(kind, PROFILE, machine_key(2), match=match)
    assert got.data is None and got.note is not None and "\n" not in got.note
    assert got.note.startswith(f"ignoring the {kind.schema.kind} {path}: a symbolic link")
    assert ("does not exist" if link == "dangling" else "loops") in got.note
