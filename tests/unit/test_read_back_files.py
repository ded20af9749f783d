"""Files the lab reads back, as a hostile user leaves them.

Regressions guarded here:

* a number past what a float holds (a 400-digit integer) in a calibration or length-reference file
  ended in an unforeseen ``OverflowError``; every number a kind reads back is bounded by its schema
  (the lab's ``finite`` keyword takes a magnitude);
* a folder, a FIFO or a symbolic link to nothing where a user calibration file goes was skipped and
  the packaged file read with no note: it is refused by name;
* a JSON Lines file with a raw U+2028 or U+0085 inside a string (valid JSON Lines) was refused as
  malformed, its readers splitting lines with ``str.splitlines()``: they split at ``"\\n"`` only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import edit_at
from lab.health import choice as health_choice
from lab.health import references as health_references
from lab.prompts import jsonl_lines, load_prompts
from lab.schemas import FileSchemaError, calibration as calibration_schema, health as health_schema, validate
from lab.sinks import profiles

PROFILE = "smollm2"
PACKAGE = Path(profiles.calibration_dir()).parent.parent  # lab/
HUGE = 10**400


def _packaged(relative: str) -> dict:
    return json.loads((PACKAGE / relative).read_text(encoding="utf-8"))


def _write_json(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _one_line(load, path: Path) -> str:
    with pytest.raises(ValueError) as exc:
        load()
    message = str(exc.value)
    assert str(path) in message and "\n" not in message and len(message) < 600, message
    return message


# --- numbers bounded by their schema ---------------------------------------------------------------------------

HUGE_SINK_EDITS = {
    "threshold 400 digits": ("thresholds/gm_content", HUGE),
    "threshold -400 digits": ("thresholds/gm_content", -HUGE),
    "threshold 1e300": ("thresholds/gm_content", 1e300),
    "feasible threshold 400 digits": ("candidates/sink_rate/feasible_thresholds", [HUGE]),
}


@pytest.mark.parametrize("where, value", HUGE_SINK_EDITS.values(), ids=HUGE_SINK_EDITS.keys())
def test_load_calibration_huge_number_refused_in_one_line_naming_file_and_field(where, value):
    path = _write_json(profiles.user_dir() / f"{PROFILE}.json",
                       edit_at(where, value)(_packaged(f"sinks/calibrations/{PROFILE}.json")))
    message = _one_line(lambda: profiles.load_calibration(PROFILE), path)
    assert where.split("/")[0] in message, message


def test_load_choice_huge_default_threshold_refused_naming_the_field():
    path = _write_json(profiles.user_dir() / profiles.CHOICE_FILE,
                       edit_at("default_threshold", HUGE)(_packaged("sinks/calibrations/choice.json")))
    assert "default_threshold" in _one_line(profiles.load_choice, path)


HUGE_REFERENCE_EDITS = {
    "intercept 400 digits": ("references/content_entropy/intercept", HUGE),
    "slope -400 digits": ("references/content_entropy/slope", -HUGE),
    "slope 1e300": ("references/content_entropy/slope", 1e300),
    "scale 400 digits": ("references/content_entropy/scale", HUGE),
    "n_prompts 400 digits": ("n_prompts", HUGE),
    "n_content_range 400 digits": ("n_content_range", [1, HUGE]),
}


@pytest.mark.parametrize("where, value", HUGE_REFERENCE_EDITS.values(), ids=HUGE_REFERENCE_EDITS.keys())
def test_load_references_huge_number_refused_in_one_line_naming_file_and_field(where, value):
    path = _write_json(health_references.user_path(PROFILE),
                       edit_at(where, value)(_packaged(f"health/length/{PROFILE}.json")))
    message = _one_line(lambda: health_references.load_references(PROFILE), path)
    assert where.split("/")[-1] in message and ("digit" in message or "1e+300" in message), message


def test_finite_keyword_magnitude_bounds_ints_and_floats():
    """``"finite": M`` bounds |x| by M; ``"finite": true`` by what a float holds (never an OverflowError)."""
    schema = {"type": "number", "finite": 10.0}
    for good in (0, -10, 10.0, 3.5):
        validate(good, schema, path="f.json", kind="k")
    for bad in (11, -10.5, HUGE, float("nan")):
        with pytest.raises(FileSchemaError):
            validate(bad, schema, path="f.json", kind="k")
    validate(2**1000, {"type": "number", "finite": True}, path="f.json", kind="k")
    with pytest.raises(FileSchemaError, match=r"top level: a 401-digit integer") as exc:
        validate(HUGE, {"type": "number", "finite": True}, path="f.json", kind="k")
    assert "\n" not in str(exc.value) and len(str(exc.value)) < 200


def _numbers(schema, where=""):
    """Every (where, number schema) inside ``schema``."""
    if isinstance(schema, dict):
        kinds = schema.get("type")
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if "number" in kinds or "integer" in kinds:
            yield where, schema
        for key, sub in schema.items():
            yield from _numbers(sub, f"{where}/{key}")
    elif isinstance(schema, list):
        for i, sub in enumerate(schema):
            yield from _numbers(sub, f"{where}/{i}")


def _bounded(schema: dict) -> bool:
    magnitude = schema.get("finite")
    low = "minimum" in schema or "exclusiveMinimum" in schema
    high = "maximum" in schema or "exclusiveMaximum" in schema
    return (low and high) or (magnitude is not None and magnitude is not True)


def _schemas() -> dict[str, dict]:
    from lab.intervene.record import RECORD_SCHEMA
    from lab.study import outcome_schema, work_schema

    return {"sink calibration": calibration_schema.SCHEMA, "sink choice": calibration_schema.CHOICE_SCHEMA,
            "length reference": health_schema.REFERENCE_SCHEMA, "validity record": health_schema.VALIDITY_SCHEMA,
            "intervention record": RECORD_SCHEMA, "study outcome": outcome_schema.SCHEMA,
            "study settings": work_schema.SETTINGS_SCHEMA, "study runner": work_schema.RUNNER_SCHEMA}


@pytest.mark.parametrize("name", list(_schemas()))
def test_read_back_schemas_every_number_bounded(name):
    """Every number these kinds read back has a range or a magnitude: none reaches float overflow."""
    schema = _schemas()[name]
    loose = [where for where, s in _numbers(schema) if not _bounded(s)]
    assert not loose, loose


# --- user files that are not regular files ---------------------------------------------------------------------

def _occupy(path: Path, how: str, tmp_path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if how == "folder":
        path.mkdir()
    elif how == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(tmp_path / "nothing-here.json")


def _user_files():
    return {
        "sinks/<model>.json": (lambda: profiles.user_dir() / f"{PROFILE}.json",
                               lambda: profiles.load_calibration(PROFILE)),
        "sinks/choice.json": (lambda: profiles.user_dir() / profiles.CHOICE_FILE, profiles.load_choice),
        "health/chosen.json": (health_choice.user_path, health_choice.load_chosen),
        "health/length/<model>.json": (lambda: health_references.user_path(PROFILE),
                                       lambda: health_references.load_references(PROFILE)),
    }


@pytest.mark.parametrize("how", ["folder", "fifo", "dangling symlink"])
@pytest.mark.parametrize("name", list(_user_files()))
def test_user_calibration_not_a_regular_file_refused_by_name(tmp_path, name, how):
    """Regression: a folder, FIFO or link to nothing in a user file's place was skipped for the packaged file."""
    where, load = _user_files()[name]
    path = where()
    _occupy(path, how, tmp_path)
    try:
        message = _one_line(load, path)  # a FIFO is never opened: the call returns
    finally:
        path.unlink() if not path.is_dir() or path.is_symlink() else path.rmdir()
    assert "not a regular file" in message and "delete it" in message, message


@pytest.mark.parametrize("name", list(_user_files()))
def test_sinks_user_calibration_not_a_regular_file_exits_2_before_the_model_loads(tmp_path, capsys, no_model_loading,
                                                                                   name):
    """``lab sinks`` reads every calibration file it will use before the model loads: a FIFO there is one line."""
    from lab.cli import main

    path = _user_files()[name][0]()
    _occupy(path, "fifo", tmp_path)
    try:
        rc = main(["sinks", "--model", PROFILE, "--out", str(tmp_path / "out"), "hello there"])
    finally:
        path.unlink()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and str(path) in lines[0] and "not a regular file" in lines[0], lines


def test_user_calibration_absent_packaged_file_read_negative_control():
    """Nothing at the user's path: the packaged file is read, as before."""
    assert not os.path.lexists(health_choice.user_path())
    assert health_choice.chosen_path() == health_choice.packaged_path()
    assert health_references.reference_path(PROFILE) == health_references.packaged_path(PROFILE)


# --- JSON Lines split at "\n" only ------------------------------------------------------------------------------

@pytest.mark.parametrize("char", ["\u2028", "\u0085", "\u2029"], ids=["U+2028", "U+0085", "U+2029"])
def test_load_prompts_raw_line_separator_inside_a_string_read(tmp_path, char):
    """Regression: valid JSON Lines with a raw Unicode line separator in a string was refused as malformed."""
    rows = [{"id": "a", "category": "code", "messages": [{"role": "user", "content": f"one{char}two"}]},
            {"id": "b", "category": "code", "messages": [{"role": "user", "content": "three"}]}]
    path = tmp_path / "p.jsonl"
    path.write_text("\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    prompts = load_prompts(path)
    assert [p.id for p in prompts] == ["a", "b"]
    assert prompts[0].messages[0]["content"] == f"one{char}two"
    assert char in path.read_text(encoding="utf-8")  # written raw, not escaped


def test_jsonl_lines_splits_at_newline_only():
    assert jsonl_lines("a\u2028b\u0085c\r\nd\n") == ["a\u2028b\u0085c", "d", ""]


def test_bench_prompts_file_one_prompt_a_line_split_at_newline_only(tmp_path):
    """``lab bench --prompts @FILE``: one prompt a line; a U+2028 inside a prompt stays in it."""
    from lab.commands.bench import _prompts

    path = tmp_path / "prompts.txt"
    path.write_text("first\u2028still first\r\nsecond\n\n", encoding="utf-8")
    assert _prompts([f"@{path}"]) == ["first\u2028still first", "second"]


def test_jsonl_readers_use_one_splitter():
    """No reader of JSON Lines in the lab splits with str.splitlines() (which cuts at U+2028, U+0085 ...)."""
    readers = ["prompts.py", "sinks/calibration.py", "health/calibration.py", "health/validation.py"]
    for name in readers:
        text = (PACKAGE / name).read_text(encoding="utf-8")
        assert "splitlines(" not in text and "jsonl_lines" in text, name
