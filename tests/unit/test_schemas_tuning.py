"""The tuning file's schema (``lab.speculative.tuning_schema``): a hand-edited or damaged file is named in one line and ignored.

Fault classes: a tuning file validated by type but not by range (``"gamma": 100000`` printed a
100,001-bin histogram and hung ``lab speculate``); a bad ``adaptive`` or ``dynamic`` value in the
file refusing the run and blaming ``--adaptive``, a flag the user never typed; ``cpu_flags: [1,
"avx"]`` ending in an unforeseen ``TypeError``; a file written by ``lab bench-tune --threads 1``
refused by ``lab speculate`` (which has no ``--threads``) as "measured on another machine" on the
same machine.
"""

from __future__ import annotations

import json
import math

import pytest

from tests.support import edit_at, report_dirs
from lab import cli
from lab.ranges import GAMMA
from lab.schemas import FileSchemaError
from lab.speculative import tuning_schema
from lab.speculative.setups import DraftSetup
from lab.tuning import DRAFT_SETUP, choose_setup, machine_key
from tests import support

PROFILE, DRAFT = "qwen2.5-coder", "qwen2.5-coder-0.5b"
TUNED = DraftSetup(draft_dtype="bfloat16", gamma=3, adaptive="pmin:0.6", dynamic="dynamic:4:12")


def _valid() -> dict:
    support.write_tuned_setup(PROFILE, DRAFT, TUNED, machine_key(2), {"winner": "x"})
    return json.loads(DRAFT_SETUP.path(PROFILE).read_text(encoding="utf-8"))


def _write(content) -> str:
    path = DRAFT_SETUP.path(PROFILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return str(path)




HOSTILE_EDITS = {
    "gamma 100000": edit_at("setup/gamma", 100_000),
    "gamma above the CLI bound": edit_at("setup/gamma", GAMMA.limit + 1),
    "gamma 0": edit_at("setup/gamma", 0),
    "gamma NaN": edit_at("setup/gamma", math.nan),
    "gamma 4.0": edit_at("setup/gamma", 4.0),
    "gamma true": edit_at("setup/gamma", True),
    "gamma a string": edit_at("setup/gamma", "4"),
    "adaptive bogus": edit_at("setup/adaptive", "bogus"),
    "adaptive entropy out of (0, 1]": edit_at("setup/adaptive", "entropy:2"),
    "adaptive pmin NaN": edit_at("setup/adaptive", "pmin:nan"),
    "adaptive a number": edit_at("setup/adaptive", 0.6),
    "dynamic bogus": edit_at("setup/dynamic", "bogus"),
    "dynamic START above MAX": edit_at("setup/dynamic", "dynamic:20:12"),
    "dynamic MAX above the CLI bound": edit_at("setup/dynamic", f"dynamic:4:{GAMMA.limit + 1}"),
    "draft dtype unknown": edit_at("setup/draft_dtype", "float8"),
    "setup key unknown": edit_at("setup/speed", 9),
    "setup empty": edit_at("setup", {}),
    "setup missing": edit_at("setup", ...),
    "setup a list": edit_at("setup", []),
    "cpu_flags with a number": edit_at("machine/cpu_flags", [1, "avx"]),
    "cpu_flags a string": edit_at("machine/cpu_flags", "avx avx2"),
    "threads 0": edit_at("machine/threads", 0),
    "threads a string": edit_at("machine/threads", "2"),
    "threads NaN": edit_at("machine/threads", math.nan),
    "machine empty": edit_at("machine", {}),
    "machine missing": edit_at("machine", ...),
    "torch missing": edit_at("machine/torch", ...),
    "format 2": edit_at("format", 2),
    "profile empty": edit_at("profile", ""),
    "profile with a newline": edit_at("profile", "qwen\nnote: all is well"),
    "draft a number": edit_at("draft", 5),
    "measured a list": edit_at("measured", []),
}


@pytest.mark.parametrize("edit", HOSTILE_EDITS.values(), ids=HOSTILE_EDITS.keys())
def test_read_tuned_hostile_field_ignored_with_one_line_naming_the_file(edit):
    """Every field of the file within what the command line accepts, or the file is ignored (one line)."""
    path = _write(edit(_valid()))
    setup, got = support.read_tuned_setup(PROFILE, DRAFT, machine_key(2))
    assert setup is None, got
    assert got.note.startswith(f"ignoring the tuning file {path}: corrupt (") and "\n" not in got.note, got.note
    assert "re-run lab bench-tune or delete it" in got.note


@pytest.mark.parametrize("content", [b"\x00\xff\xfe binary", "{not json", "", "[]", "null", "4", '"text"',
                                     "{}", '{"format": 1}'], ids=repr)
def test_read_tuned_unreadable_or_not_an_object_ignored_with_one_line(content):
    path = _write(content)
    setup, got = support.read_tuned_setup(PROFILE, DRAFT, machine_key(2))
    assert setup is None and got.note.startswith(f"ignoring the tuning file {path}: corrupt (")
    assert "\n" not in got.note


def test_load_tuning_names_the_file_and_the_field_in_one_line():
    path = _write(edit_at("setup/gamma", 100_000)(_valid()))
    with pytest.raises(FileSchemaError) as exc:
        tuning_schema.load(tuning_schema.DRAFT_SETUP, path)
    message = str(exc.value)
    assert message.startswith(f"{path} is not a valid tuning file: setup/gamma: 100000") and "\n" not in message


def test_load_tuning_negative_control_the_writers_file_passes():
    """What ``lab bench-tune`` writes (every field set: dtype, gamma, adaptive, dynamic) passes as written."""
    data = _valid()
    assert tuning_schema.load(tuning_schema.DRAFT_SETUP, DRAFT_SETUP.path(PROFILE)) == data
    assert support.read_tuned_setup(PROFILE, DRAFT, machine_key(2))[0] == TUNED


def test_read_tuned_gamma_100000_is_not_used():
    """Regression (a tuning file validated by type, not by range): gamma 100000 ran and hung."""
    _write(edit_at("setup/gamma", 100_000)(_valid()))
    setup, got = support.read_tuned_setup(PROFILE, DRAFT, machine_key(2))
    assert setup is None and "setup/gamma" in got.note


def test_read_tuned_cpu_flags_with_a_number_does_not_raise():
    """Regression (an unforeseen TypeError): ``cpu_flags: [1, "avx"]`` could not be sorted with this run's flags."""
    _write(edit_at("machine/cpu_flags", [1, "avx"])(_valid()))
    setup, got = support.read_tuned_setup(PROFILE, DRAFT, machine_key(2))
    assert setup is None and "machine/cpu_flags/0" in got.note


def test_read_tuned_bad_adaptive_is_ignored_not_blamed_on_the_flag():
    """Regression (a file's fault blamed on a flag): ``adaptive: "bogus"`` was accepted, then refused the run
    as ``--adaptive 'bogus'``."""
    _write(edit_at("setup/adaptive", "bogus")(_valid()))
    setup, got = support.read_tuned_setup(PROFILE, DRAFT, machine_key(2))
    assert setup is None and "setup/adaptive" in got.note


def test_choose_setup_uses_a_file_measured_with_other_threads_and_says_so():
    """Regression (a file written by ``lab bench-tune --threads 1`` refused by ``lab speculate``, which has
    no ``--threads``, as measured on another machine): it is used, with a note naming the thread counts."""
    support.write_tuned_setup(PROFILE, DRAFT, TUNED, machine_key(1), {})
    chosen = choose_setup(PROFILE, DRAFT, {"draft_dtype": None, "gamma": None, "adaptive": None}, threads=2,
                          has_weights=True)
    assert chosen.setup == TUNED and chosen.sources["gamma"] == f"tuned: {DRAFT_SETUP.path(PROFILE)}"
    (note,) = chosen.notes
    assert "measured with 1 torch thread, this run has 2" in note and "OMP_NUM_THREADS=1" in note
    assert "\n" not in note and "ignoring" not in note


def test_choose_setup_same_threads_no_note_and_foreign_cpu_still_ignored():
    """Negative controls: the same thread count gives no note; another CPU is still foreign."""
    support.write_tuned_setup(PROFILE, DRAFT, TUNED, machine_key(2), {})
    flags = {"draft_dtype": None, "gamma": None, "adaptive": None}
    assert choose_setup(PROFILE, DRAFT, flags, threads=2, has_weights=True).notes == ()
    support.write_tuned_setup(PROFILE, DRAFT, TUNED, {**machine_key(1), "cpu_model": "Elsewhere"}, {})
    chosen = choose_setup(PROFILE, DRAFT, flags, threads=2, has_weights=True)
    assert chosen.setup != TUNED and "another machine" in chosen.notes[0] and "torch thread" not in chosen.notes[0]


def _speculate(tmp_path, capsys):
    """``lab speculate`` with the profile's draft named (a tuned set-up is a fixed draft's; the default, auto,
    chooses its gamma per round)."""
    rc = cli.main(["speculate", "hi", "--model", PROFILE, "--draft", DRAFT, "--max-new-tokens", "4", "--device", "cpu",
                   "--out", str(tmp_path / "o")])
    captured = capsys.readouterr()
    return rc, captured.err, tmp_path / "o"


@pytest.mark.slow  # a tiny speculate run each
@pytest.mark.parametrize("edit", [edit_at("setup/gamma", 100_000), edit_at("setup/adaptive", "bogus"),
                                  edit_at("setup/dynamic", "bogus"), edit_at("machine/cpu_flags", [1, "avx"])],
                         ids=["gamma 100000", "adaptive bogus", "dynamic bogus", "cpu_flags [1, 'avx']"])
def test_cli_speculate_bad_tuning_file_runs_the_default_with_one_note(tmp_path, capsys, monkeypatch, edit):
    """Regression (hang, a flag blamed, unforeseen TypeError): as the docs promise, a bad tuning file is named
    in one note and ignored; the run goes on with the documented set-up."""
    support.patch_tiny_loader_recording_drafts(monkeypatch)
    path = _write(edit(_valid()))
    rc, err, out = _speculate(tmp_path, capsys)
    assert rc == 0, err
    assert err.count(f"ignoring the tuning file {path}: corrupt") == 1 and "--adaptive" not in err
    assert "Traceback" not in err and "did not foresee" not in err
    (run,) = report_dirs(out)
    settings = json.loads((run / "report.json").read_text(encoding="utf-8"))["settings"]
    assert settings["gamma"] <= GAMMA.limit and settings["draft_setup"]["sources"]["gamma"].startswith("default: ")


@pytest.mark.slow  # a tiny speculate run
def test_cli_speculate_runs_a_file_tuned_with_other_threads(tmp_path, capsys, monkeypatch):
    """Regression (``lab bench-tune --threads N`` then ``lab speculate`` on the same machine): the tuned
    set-up runs, and the terminal and the report say with how many threads it was measured."""
    import torch

    asked = support.patch_tiny_loader_recording_drafts(monkeypatch)
    other = torch.get_num_threads() + 1
    path = support.write_tuned_setup(PROFILE, DRAFT, DraftSetup(draft_dtype="per-pass", gamma=3), machine_key(other),
                                     {})
    rc, err, out = _speculate(tmp_path, capsys)
    assert rc == 0, err
    assert asked == [(DRAFT, "per-pass")] and f"from tuned: {path}" in err
    assert f"measured with {other} torch thread" in err and "ignoring" not in err
    (run,) = report_dirs(out)
    notes = json.loads((run / "report.json").read_text(encoding="utf-8"))["settings"]["draft_setup"]["notes"]
    assert len(notes) == 1 and f"OMP_NUM_THREADS={other}" in notes[0]
