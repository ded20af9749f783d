"""Where calibrations are written and read, and the thresholds they may hold.

Fault class (calibration written into the installed package): ``lab calibrate-sinks`` wrote into the
installed package whatever ``--out``
said, not atomically, before the report; an unwritable package ended the run in a traceback with
no report, and the loader could not be pointed at another file. Now the files go to the user's
calibration folder (``$LAB_CALIBRATION_DIR``; the root conftest points it at a tmp folder), each
atomically, after the report; the loader reads a user file before the package's and says which.

Fault class (poor case): a calibration threshold of -5, or ``lab sinks --threshold -1``, was
accepted and then flagged every position.
"""

from __future__ import annotations

import json
import logging
import warnings

import pytest

from lab import cli
from lab.health import choice as health_choice
from lab.health import references as health_references
from lab.models.source import ModelSource, register_source
from lab.sinks import profiles

from tests.support import report_dirs

STATISTIC = profiles.load_choice().statistic  # the packaged choice: sink_rate


class _Model:
    def __init__(self, profile):
        register_source(self, ModelSource(model=profile, profile=profile, device="cpu", dtype="float32"))


def _tiny(monkeypatch, profile="smollm2"):
    import lab.models.loading
    from tests import support

    tok = support.chatml_tokenizer()
    model = support.tiny_llama(vocab_size=len(tok))
    register_source(model, ModelSource(model=profile or "tiny", profile=profile, device="cpu", dtype="float32"))
    monkeypatch.setattr(lab.models.loading, "load_model", lambda name, **k: (model, tok))
    monkeypatch.setattr(lab.models.loading, "check_model_available", lambda name: None)
    return model


def _no_model(monkeypatch):
    import lab.models.loading

    monkeypatch.setattr(lab.models.loading, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))


def test_user_calibration_is_read_before_the_packaged_one_and_named(caplog):
    packaged = profiles.load_calibration("smollm2")
    assert profiles.is_packaged(packaged.path)
    user = profiles.user_dir() / "smollm2.json"
    user.parent.mkdir(parents=True)
    user.write_text(json.dumps({"profile": "smollm2", "thresholds": {STATISTIC: 0.5}}))
    with caplog.at_level(logging.INFO, logger="lab.sinks.profiles"):
        t, profile, source, path = profiles.resolve_threshold(_Model("smollm2"), None)
    assert (t, profile, source, path) == (0.5, "smollm2", "calibrated", str(user))
    assert any(str(user) in r.getMessage() and r.levelno == logging.INFO for r in caplog.records)


def test_given_calibration_file_overrides_the_profile_and_names_its_own_profile(tmp_path):
    given = tmp_path / "mine.json"
    given.write_text(json.dumps({"profile": "gemma3-270m", "thresholds": {STATISTIC: 0.4}}))
    assert profiles.resolve_threshold(_Model("smollm2"), None, given) == (0.4, "gemma3-270m", "calibrated",
                                                                            str(given))
    with pytest.raises(ValueError, match="--calibration"):
        profiles.load_calibration("smollm2", tmp_path / "missing.json")


@pytest.mark.parametrize("value", [-5, 0, 1, 3.25])
def test_calibration_file_threshold_out_of_range_is_refused_naming_file_and_value(tmp_path, value):
    given = tmp_path / "bad.json"
    given.write_text(json.dumps({"profile": "smollm2", "thresholds": {STATISTIC: value}}))
    with pytest.raises(ValueError, match=r"bad\.json.*(0, 1)") as exc:
        profiles.load_calibration("smollm2", given)
    assert repr(value) in str(exc.value)


def test_choice_file_default_out_of_range_is_refused():
    path = profiles.user_dir() / profiles.CHOICE_FILE
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"statistic": "sink_rate", "default_threshold": -5}))
    with pytest.raises(ValueError, match="default_threshold=-5"):
        profiles.load_choice()


def test_check_threshold_negative_control_in_range_values_pass():
    assert profiles.check_threshold("sink_rate", 0.02, "x") == 0.02
    assert profiles.check_threshold("gm_content", 3.5, "x") == 3.5
    with pytest.raises(ValueError, match="above 0"):
        profiles.check_threshold("gm_content", -1.0, "x")


@pytest.mark.parametrize("value", ["-1", "1.5", "0"])
def test_cli_sinks_threshold_out_of_range_exits_2_before_loading(tmp_path, capsys, monkeypatch, value):
    _no_model(monkeypatch)
    rc = cli.main(["sinks", "hello", "--threshold", value, "--device", "cpu", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "--threshold" in err and "(0, 1)" in err, err
    assert len(err.strip().splitlines()) == 1


def test_cli_sinks_bad_calibration_file_exits_2_before_loading(tmp_path, capsys, monkeypatch):
    _no_model(monkeypatch)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"profile": "smollm2", "thresholds": {STATISTIC: -5}}))
    rc = cli.main(["sinks", "hello", "--calibration", str(bad), "--device", "cpu", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "bad.json" in err and "-5" in err, err


@pytest.mark.slow
def test_cli_sinks_calibration_file_is_used_and_named_in_the_report(tmp_path, capsys, monkeypatch):
    _tiny(monkeypatch)
    given = tmp_path / "mine.json"
    given.write_text(json.dumps({"profile": "smollm2", "thresholds": {STATISTIC: 0.45}}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = cli.main(["sinks", "hello there", "--model", "smollm2", "--calibration", str(given), "--device", "cpu",
                       "--out", str(tmp_path / "out")])
    assert rc == 0, capsys.readouterr().err
    (report,) = report_dirs(tmp_path / "out")
    analysis = json.loads((report / "report.json").read_text())["analysis"]
    assert analysis["threshold"] == 0.45 and analysis["calibration_file"] == str(given)
    assert str(given) in (report / "summary.md").read_text()


@pytest.mark.slow  # a whole calibrate-sinks run on a tiny model
def test_cli_calibrate_sinks_unwritable_user_dir_keeps_report_and_package_exits_1(tmp_path, capsys, monkeypatch):
    """The save comes after the report: a folder that refuses it leaves the report whole and the package
    untouched, and the run ends in one line naming both (exit 1), not a traceback with no report."""
    _tiny(monkeypatch)
    packaged = {p.name: p.read_bytes() for p in profiles.calibration_dir().glob("*.json")}
    def refuse(path, text):  # a folder the user cannot write (tests run as root, where chmod does not refuse)
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(profiles, "write_text_atomic", refuse)
    rc = cli.main(["calibrate-sinks", "--model", "smollm2", "--long-lengths", "none", "--held-out", "none",
                   "--device", "cpu", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error" in line]
    assert rc == 1 and len(lines) == 1 and "report is complete" in lines[0] and "LAB_CALIBRATION_DIR" in lines[0], err
    assert "Traceback" not in err
    (report,) = report_dirs(tmp_path / "out")
    assert {"report.json", "summary.md", "sweep.csv", "prompts.csv", "sweep.png"} <= {p.name for p in report.iterdir()}
    assert {p.name: p.read_bytes() for p in profiles.calibration_dir().glob("*.json")} == packaged


@pytest.mark.slow  # a whole calibrate-health run on a tiny model
def test_cli_calibrate_health_save_writes_the_user_choice_not_the_package(tmp_path, monkeypatch, capsys):
    _tiny(monkeypatch, profile=None)
    before = health_choice.packaged_path().read_bytes()
    cal = tmp_path / "cal.jsonl"
    cal.write_text("".join(json.dumps({"id": f"p{i}", "prompt": q}) + "\n"
                           for i, q in enumerate(["what is the capital", "write a poem", "the cat and the dog"])))
    neutral = tmp_path / "neutral.jsonl"  # the rule scores each prompt's length-matched neutral variant too
    neutral.write_text("".join(json.dumps({"twin_of": f"p{i}", "added": "a list is a sequence " * 2}) + "\n"
                               for i in range(3)))
    ref = tmp_path / "reference.jsonl"  # the clean length reference, graded lengths
    ref.write_text("".join(json.dumps({"id": f"r{i}", "prompt": "a list is a sequence " * i + "what is a set"}) + "\n"
                           for i in range(12)))
    packaged_refs = {p.name: p.read_bytes() for p in health_references.packaged_path("x").parent.glob("*.json")}
    # Where the choice is written is under test, not what the rule makes of a tiny random model (it may
    # choose nothing, and --save then exits 2): the rule is fixed to a real candidate.
    import lab.health.calibration

    monkeypatch.setattr(lab.health.calibration, "choose", lambda cands: ("local_entropy", "fixed by the test"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = cli.main(["calibrate-health", "--prompts", str(cal), "--neutral", str(neutral), "--save",
                       "--reference-prompts", str(ref), "--device", "cpu", "--out", str(tmp_path / "out")])
    assert rc == 0, capsys.readouterr().err
    assert health_choice.packaged_path().read_bytes() == before
    assert health_choice.chosen_path() == health_choice.user_path()
    written = json.loads(health_choice.user_path().read_text())
    (report,) = report_dirs(tmp_path / "out")
    data = json.loads((report / "report.json").read_text())
    assert written["measure"] == data["chosen"] and data["saved_to"] == str(health_choice.user_path())
    profile = data["length_reference"]["profile"]  # and the model's length reference, beside it, read back
    assert health_references.reference_path(profile) == health_references.user_path(profile)
    assert set(health_references.load_references(profile)) == set(data["length_reference"]["references"])
    assert {p.name: p.read_bytes() for p in health_references.packaged_path("x").parent.glob("*.json")} == packaged_refs


def test_cli_stream_bad_calibration_file_exits_2_before_loading(tmp_path, capsys, monkeypatch):
    _no_model(monkeypatch)
    rc = cli.main(["stream", "--calibration", str(tmp_path / "missing.json"), "--device", "cpu",
                   "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "--calibration" in err and "missing.json" in err, err
