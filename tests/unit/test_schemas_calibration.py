"""The calibration and reference files' schemas (``lab.schemas.calibration``, ``lab.schemas.health``).

Four kinds the lab reads back, each from the user's calibration folder before the package's own:
a profile's sink calibration, the sink detector choice, the context-health choice and a profile's
length reference. A bad file, the user's or one given with ``--calibration``, is refused in one
line naming it (the command exits 2), never read past into an unforeseen error.

Fault classes: a hand-edited file ending in an unforeseen ``AttributeError`` / ``TypeError`` (a list
where an object was expected, a number where a list was); a chosen measure that is no candidate, or
a binary file, refused without naming the file; ``LAB_CALIBRATION_DIR`` pointing at a file noticed
only when a calibration saved, after minutes of work.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.support import edit_at
from lab import cli
from lab.health import choice as health_choice
from lab.health import references as health_references
from lab.schemas import calibration as calibration_schema
from lab.schemas import health as health_schema
from lab.sinks.candidates import STATISTICS
from lab.schemas import validate
from lab.sinks import profiles
from lab.user_dirs import check_calibration_dir

PROFILE = "smollm2"
PACKAGE = Path(profiles.calibration_dir()).parent.parent  # lab/


def _packaged(relative: str) -> dict:
    return json.loads((PACKAGE / relative).read_text(encoding="utf-8"))




def _write(path: Path, content) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


NOT_JSON = {"binary": b"\x00\xff\xfe\x80", "truncated": '{"profile": "smollm2", "thresh', "empty": "",
            "a list": "[]", "null": "null", "a number": "7"}


def _refused_in_one_line(load, path: Path) -> str:
    with pytest.raises(ValueError) as exc:
        load()
    message = str(exc.value)
    assert str(path) in message and "\n" not in message, message
    return message


# --- a profile's sink calibration (lab/sinks/calibrations/<profile>.json) ---------------------------------

SINK_EDITS = {
    "thresholds a list": edit_at("thresholds", [0.3]),
    "thresholds empty": edit_at("thresholds", {}),
    "thresholds missing": edit_at("thresholds", ...),
    "threshold a string": edit_at("thresholds/sink_rate", "0.3"),
    "threshold NaN": edit_at("thresholds/sink_rate", math.nan),
    "threshold infinite": edit_at("thresholds/gm_content", math.inf),
    "sink rate above 1": edit_at("thresholds/sink_rate", 3.25),
    "sink rate 0": edit_at("thresholds/sink_rate", 0),
    "z below 0 (another statistic)": edit_at("thresholds/gm_content", -2.0),
    "unknown statistic": edit_at("thresholds/sink-rate", 0.3),
    "profile missing": edit_at("profile", ...),
    "profile a number": edit_at("profile", 5),
    "statistic unknown": edit_at("statistic", "mean"),
    "candidates a list": edit_at("candidates", []),
    "candidate a number": edit_at("candidates/sink_rate", 5),
    "feasible thresholds a number": edit_at("candidates/sink_rate/feasible_thresholds", 0.3),
    "feasible threshold out of range": edit_at("candidates/sink_rate/feasible_thresholds", [0.3, 7.0]),
    "migrated an object": edit_at("migrated", {"field": "statistic"}),
}


@pytest.mark.parametrize("edit", SINK_EDITS.values(), ids=SINK_EDITS.keys())
def test_load_calibration_hostile_user_file_refused_in_one_line_naming_it(edit):
    path = _write(profiles.user_dir() / f"{PROFILE}.json", edit(_packaged(f"sinks/calibrations/{PROFILE}.json")))
    message = _refused_in_one_line(lambda: profiles.load_calibration(PROFILE), path)
    assert "delete it" in message


@pytest.mark.parametrize("content", NOT_JSON.values(), ids=NOT_JSON.keys())
def test_load_calibration_unreadable_user_file_refused_in_one_line_naming_it(content):
    path = _write(profiles.user_dir() / f"{PROFILE}.json", content)
    _refused_in_one_line(lambda: profiles.load_calibration(PROFILE), path)


@pytest.mark.parametrize("edit", [edit_at("thresholds", [0.3]), edit_at("thresholds/sink_rate", "0.3")],
                         ids=["thresholds a list", "threshold a string"])
def test_load_calibration_given_file_refused_in_one_line(tmp_path, edit):
    """Regression (unforeseen AttributeError): ``"thresholds": [0.3]`` in a ``--calibration`` file."""
    path = _write(tmp_path / "mine.json", edit({"profile": PROFILE, "thresholds": {"sink_rate": 0.3}}))
    message = _refused_in_one_line(lambda: profiles.load_calibration(None, path), path)
    assert "--calibration" in message


def test_recorded_feasible_hostile_candidate_refused_in_one_line():
    """Regression (unforeseen AttributeError): a candidate record that is a number, read by calibrate-sinks."""
    path = _write(profiles.user_dir() / f"{PROFILE}.json",
                  edit_at("candidates/sink_rate", 5)(_packaged(f"sinks/calibrations/{PROFILE}.json")))
    _refused_in_one_line(lambda: profiles.recorded_feasible([PROFILE]), path)


def test_migrate_statistic_hostile_file_refused_in_one_line():
    path = _write(profiles.user_dir() / f"{PROFILE}.json", {"profile": PROFILE, "thresholds": [0.3]})
    _refused_in_one_line(lambda: profiles.migrate_statistic(PROFILE, "sink_rate", reason="r", at="t"), path)


def test_load_calibration_negative_control_minimal_hand_made_file_is_read(tmp_path):
    """What ``--calibration`` documents a file needs, a profile and its thresholds, is enough."""
    path = _write(tmp_path / "mine.json", {"profile": "gemma3-270m", "thresholds": {"sink_rate": 0.4,
                                                                                  "gm_content": None}})
    cal = profiles.load_calibration(None, path)
    assert (cal.profile, cal.threshold, cal.path) == ("gemma3-270m", 0.4, str(path))


# --- the sink detector choice (choice.json) -----------------------------------------------------------------

CHOICE_EDITS = {
    "profiles a number": edit_at("profiles", 5),
    "profiles with a number": edit_at("profiles", ["smollm2", 3]),
    "statistic unknown": edit_at("statistic", "mean"),
    "statistic missing": edit_at("statistic", ...),
    "default missing": edit_at("default_threshold", ...),
    "default a string": edit_at("default_threshold", "0.02"),
    "default NaN": edit_at("default_threshold", math.nan),
    "default out of range": edit_at("default_threshold", 1.5),
    "default true": edit_at("default_threshold", True),
}


@pytest.mark.parametrize("edit", CHOICE_EDITS.values(), ids=CHOICE_EDITS.keys())
def test_load_choice_hostile_user_file_refused_in_one_line_naming_it(edit):
    path = _write(profiles.user_dir() / profiles.CHOICE_FILE, edit(_packaged("sinks/calibrations/choice.json")))
    _refused_in_one_line(profiles.load_choice, path)


@pytest.mark.parametrize("content", NOT_JSON.values(), ids=NOT_JSON.keys())
def test_load_choice_unreadable_user_file_refused_in_one_line_naming_it(content):
    path = _write(profiles.user_dir() / profiles.CHOICE_FILE, content)
    _refused_in_one_line(profiles.load_choice, path)


def test_load_choice_profiles_a_number_refused_naming_the_file():
    """Regression (unforeseen TypeError): ``"profiles": 5`` could not be made a tuple."""
    path = _write(profiles.user_dir() / profiles.CHOICE_FILE,
                  edit_at("profiles", 5)(_packaged("sinks/calibrations/choice.json")))
    assert "profiles" in _refused_in_one_line(profiles.load_choice, path)


# --- the context-health choice (health/chosen.json) ---------------------------------------------------------

CHOSEN_EDITS = {
    "measure no candidate": edit_at("measure", "no_such_measure"),
    "measure empty": edit_at("measure", ""),
    "measure a number": edit_at("measure", 3),
    "measure missing": edit_at("measure", ...),
    "chosen_at a number": edit_at("chosen_at", 5),
}


@pytest.mark.parametrize("edit", CHOSEN_EDITS.values(), ids=CHOSEN_EDITS.keys())
def test_load_chosen_hostile_user_file_refused_in_one_line_naming_it(edit):
    path = _write(health_choice.user_path(), edit(_packaged(health_choice.CHOSEN_FILE)))
    message = _refused_in_one_line(health_choice.load_chosen, path)
    assert "delete it" in message


@pytest.mark.parametrize("content", NOT_JSON.values(), ids=NOT_JSON.keys())
def test_load_chosen_unreadable_user_file_refused_in_one_line_naming_it(content):
    """Regression (a binary file refused by a bare UnicodeDecodeError that did not name it)."""
    path = _write(health_choice.user_path(), content)
    _refused_in_one_line(health_choice.load_chosen, path)


def test_load_chosen_measure_no_candidate_refused_naming_the_file():
    """Regression (a choice that is no candidate read as if it were, failing later without the file's name)."""
    path = _write(health_choice.user_path(), {"measure": "no_such_measure"})
    assert "measure" in _refused_in_one_line(health_choice.load_chosen, path)


# --- a length reference (health/length/<profile>.json) -------------------------------------------------------

REFERENCE_EDITS = {
    "references empty": edit_at("references", {}),
    "references a list": edit_at("references", []),
    "references missing": edit_at("references", ...),
    "base unknown": edit_at("references/no_such_base", {"intercept": 9.0, "slope": -0.1, "scale": 0.1}),
    "reference a list": edit_at("references/content_entropy", [9.0, -0.1, 0.1]),
    "scale 0": edit_at("references/content_entropy/scale", 0.0),
    "scale NaN": edit_at("references/content_entropy/scale", math.nan),
    "slope missing": edit_at("references/content_entropy/slope", ...),
    "intercept infinite": edit_at("references/content_entropy/intercept", math.inf),
    "profile missing": edit_at("profile", ...),
    "n_content_range one number": edit_at("n_content_range", 4),
}


@pytest.mark.parametrize("edit", REFERENCE_EDITS.values(), ids=REFERENCE_EDITS.keys())
def test_load_references_hostile_user_file_refused_in_one_line_naming_it(edit):
    path = _write(health_references.user_path(PROFILE), edit(_packaged(f"health/length/{PROFILE}.json")))
    _refused_in_one_line(lambda: health_references.load_references(PROFILE), path)


@pytest.mark.parametrize("content", NOT_JSON.values(), ids=NOT_JSON.keys())
def test_load_references_unreadable_user_file_refused_in_one_line_naming_it(content):
    path = _write(health_references.user_path(PROFILE), content)
    _refused_in_one_line(lambda: health_references.load_references(PROFILE), path)


def test_load_references_unknown_base_refused_naming_the_file():
    """Regression (a reference for no base any measure reads, accepted as read)."""
    path = _write(health_references.user_path(PROFILE), edit_at("references/no_such_base", {
        "intercept": 9.0, "slope": -0.1, "scale": 0.1})(_packaged(f"health/length/{PROFILE}.json")))
    _refused_in_one_line(lambda: health_references.load_references(PROFILE), path)


# --- the shipped files ------------------------------------------------------------------------------------------

def _shipped() -> list[tuple[Path, dict, str]]:
    sinks = sorted((PACKAGE / "sinks" / "calibrations").glob("*.json"))
    return ([(p, calibration_schema.CHOICE_SCHEMA if p.name == profiles.CHOICE_FILE else calibration_schema.SCHEMA,
              p.name) for p in sinks]
            + [(PACKAGE / health_choice.CHOSEN_FILE, health_schema.CHOSEN_SCHEMA, "chosen.json")]
            + [(p, health_schema.REFERENCE_SCHEMA, p.name) for p in sorted((PACKAGE / "health" / "length").glob("*.json"))])


def test_shipped_calibration_and_reference_files_pass_their_schemas():
    """One source of truth: what the package ships is what its readers accept, checks included."""
    shipped = _shipped()
    assert len(shipped) >= 1 + 4 + 1 + 3, shipped  # choice.json, four profiles, chosen.json, three references
    for path, schema, _ in shipped:
        validate(json.loads(path.read_text(encoding="utf-8")), schema, path=path, kind=path.name)
    for path in (PACKAGE / "sinks" / "calibrations").glob("*.json"):
        load = (calibration_schema.load_choice_file if path.name == profiles.CHOICE_FILE
                else calibration_schema.load_calibration_file)
        load(path, STATISTICS)
    assert profiles.load_choice().path == str(PACKAGE / "sinks" / "calibrations" / profiles.CHOICE_FILE)
    assert health_choice.load_chosen() and health_references.load_references(PROFILE)


# --- the user's calibration folder ---------------------------------------------------------------------------

@pytest.mark.parametrize("under", [False, True], ids=["a file", "under a file"])
def test_check_calibration_dir_a_file_refused_naming_the_variable(tmp_path, monkeypatch, under):
    blocker = _write(tmp_path / "a-file", "")
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(blocker / "cal" if under else blocker))
    with pytest.raises(ValueError, match="LAB_CALIBRATION_DIR=") as exc:
        check_calibration_dir()
    assert "not a folder" in str(exc.value) and "\n" not in str(exc.value)


def test_check_calibration_dir_negative_control_a_folder_to_be_made_passes(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path / "not" / "yet"))
    assert check_calibration_dir() == tmp_path / "not" / "yet"


@pytest.mark.slow  # imports the calibration's model code
def test_cli_calibrate_health_calibration_dir_a_file_exits_2_before_loading(tmp_path, capsys, monkeypatch,
                                                                            no_model_loading):
    """Regression (noticed only when saving, after minutes of prefills): refused before the model loads."""
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(_write(tmp_path / "a-file", "")))
    rc = cli.main(["calibrate-health", "--device", "cpu", "--save", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "LAB_CALIBRATION_DIR=" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # imports the calibration's model code
def test_cli_calibrate_sinks_calibration_dir_a_file_exits_2_before_scoring(tmp_path, capsys, monkeypatch):
    """Regression (noticed only when saving, after minutes of prefills): refused before any prompt is scored."""
    import lab.models.loading
    import lab.sinks.calibration_report

    monkeypatch.setattr(lab.models.loading, "load_model", lambda name, **k: (object(), object()))
    monkeypatch.setattr(lab.models.loading, "check_model_available", lambda name: None)
    monkeypatch.setattr(lab.sinks.calibration_report, "score_prompts",
                        lambda *a, **k: pytest.fail("a prompt was scored"))
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(_write(tmp_path / "a-file", "")))
    rc = cli.main(["calibrate-sinks", "--model", PROFILE, "--long-lengths", "none", "--held-out", "none",
                   "--device", "cpu", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "LAB_CALIBRATION_DIR=" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("content", [{"profile": PROFILE, "thresholds": [0.3]}, b"\x00\xff binary",
                                     {"profile": PROFILE, "thresholds": {"sink_rate": "0.3"}}],
                         ids=["thresholds a list", "binary", "threshold a string"])
def test_cli_sinks_hostile_calibration_file_exits_2_in_one_line(tmp_path, capsys, no_model_loading, content):
    path = _write(tmp_path / "bad.json", content)
    rc = cli.main(["sinks", "hello", "--calibration", str(path), "--device", "cpu", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and str(path) in err and len(err.strip().splitlines()) == 1, err
    assert "did not foresee" not in err


@pytest.mark.parametrize("edit, says", [({"scale": 1e308}, "maximum"), ("range", "runs backwards")])
def test_length_reference_implausible_values_refused(tmp_path, edit, says):
    """Fault class: a hand-edited reference the schema took (a huge scale pins every health reading at 5)."""
    src = json.loads((PACKAGE / "health" / "length" / f"{PROFILE}.json").read_text(encoding="utf-8"))
    if edit == "range":
        src["n_content_range"] = [500, 4]
    else:
        for ref in src["references"].values():
            ref.update(edit)
    path = tmp_path / "ref.json"
    path.write_text(json.dumps(src))
    from lab.health.measures import REFERENCED_BASES

    with pytest.raises(health_schema.schemas.FileSchemaError, match=says):
        health_schema.load_reference_file(path, REFERENCED_BASES)
