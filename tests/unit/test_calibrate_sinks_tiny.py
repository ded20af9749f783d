"""``lab calibrate-sinks`` end to end on a tiny model: where its files go (the command's whole run, so
it sits with the integration tier to keep ``pytest -m unit`` fast; no real weights)."""

from __future__ import annotations

import json

import pytest

from lab.models.source import ModelSource, register_source
from lab.sinks import profiles as sink_profiles
from tests import support

from tests.support import report_dirs


@pytest.mark.slow  # a whole calibrate-sinks run on a tiny model
@pytest.mark.parametrize("rule_gives", [None, ("sink_rate", 0.05)])
def test_cli_calibrate_sinks_save_writes_the_profile_file_and_the_rules_choice(tmp_path, monkeypatch, capsys,
                                                                               rule_gives):
    """calibrate-sinks on a named profile writes its file, then choice.json by the rule over every file's
    recorded figures (``rule_gives`` None: the real rule, which finds nothing feasible on every file once the
    tiny random model's figures are in, so the packaged choice stays); every file names the chosen statistic.

    Fault class (calibration written into the installed package): the files went into the installed
    package, non-atomically, before the report.
    Now they go to the user's calibration folder, after the report, and the package is left untouched."""
    import lab.commands.common
    import lab.models.loading
    import lab.sinks.calibration_report
    from lab import cli

    packaged = {p.name: p.read_bytes() for p in sink_profiles.calibration_dir().glob("*.json")}
    before = sink_profiles.load_choice()  # the packaged one: the user's folder starts empty (root conftest)
    if rule_gives is not None:
        monkeypatch.setattr(lab.sinks.calibration_report, "choose_statistic", lambda feasible: rule_gives)
    tok = support.chatml_tokenizer()
    model = support.tiny_llama(vocab_size=len(tok))
    register_source(model, ModelSource(model="smollm2", profile="smollm2", device="cpu", dtype="float32"))
    monkeypatch.setattr(lab.models.loading, "load_model", lambda name, **k: (model, tok))
    monkeypatch.setattr(lab.models.loading, "check_model_available", lambda name: None)
    assert cli.main(["calibrate-sinks", "--model", "smollm2", "--long-lengths", "none", "--held-out", "none",
                     "--device", "cpu", "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in sink_profiles.calibration_dir().glob("*.json")} == packaged
    user = sink_profiles.user_dir()
    written = json.loads((user / "smollm2.json").read_text())
    assert written["profile"] == "smollm2" and written["long_lengths"] == []
    assert sink_profiles.calibration_path("smollm2") == user / "smollm2.json"  # the loader now reads it
    assert not list(user.glob(".*.tmp"))  # atomic writes leave no temporary file
    choice = sink_profiles.load_choice()
    expected = rule_gives or (before.statistic, before.default_threshold)
    assert (choice.statistic, choice.default_threshold) == expected
    assert ("detector choice written" in err) == (rule_gives is not None), err
    for path in support.packaged_sink_profile_files():
        assert json.loads(sink_profiles.calibration_path(path.stem).read_text())["statistic"] == choice.statistic
    report = report_dirs(tmp_path / "out")[0]
    assert json.loads((report / "report.json").read_text())["saved_to"] == str(user)
