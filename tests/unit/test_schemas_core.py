"""The validator every file kind is read through (:mod:`lab.schemas`): one line naming the file, whatever the bytes.

Fault class: a file the lab reads back that reaches the unforeseen-error path (a traceback's type and
message instead of the file's name), a NaN that JSON Schema's ``"number"`` lets through, and a schema
package that imports the parts it validates for (a circle: every part reads files through it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import lab.schemas as schemas
from lab.schemas import MAX_PROBLEM_CHARS, FileSchemaError, load, validate

pytestmark = pytest.mark.unit

SCHEMA = {"type": "object", "required": ["gamma"],
          "properties": {"gamma": {"type": "integer", "minimum": 1, "maximum": 64},
                         "x": {"type": "number", "finite": True}}}


@pytest.mark.parametrize("data, where", [
    ({"gamma": 100000}, "gamma"), ({}, "top level"), ([1], "top level"),
    ({"gamma": 3, "x": float("nan")}, "x"), ({"gamma": 3, "x": float("inf")}, "x"), ({"gamma": "3"}, "gamma"),
])
def test_validate_bad_value_names_file_and_place(data, where):
    with pytest.raises(FileSchemaError) as info:
        validate(data, SCHEMA, path="t.json", kind="tuning file")
    line = str(info.value)
    assert line.startswith("t.json is not a valid tuning file: ") and where in line and "\n" not in line


def test_validate_good_value_returned_unchanged():
    data = {"gamma": 3, "x": 0.5}
    assert validate(data, SCHEMA, path="t.json", kind="k") is data


@pytest.mark.parametrize("content, says", [
    (b"\xff\xfe\x00binary", "not UTF-8"), (b"{not json", "not JSON"), (b"", "not JSON"),
    (b'{"format": ' + b"9" * 50_000 + b"}", "digit"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"), (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "nested too deeply"),
])
def test_load_unreadable_bytes_named_in_one_line(tmp_path, content, says):
    path = tmp_path / "f.json"
    path.write_bytes(content)
    with pytest.raises(FileSchemaError, match=says):
        load(path, SCHEMA, "k")


def test_load_missing_file_and_folder_named(tmp_path):
    for path, says in ((tmp_path / "absent.json", "no such file"), (tmp_path, r"not a regular file \(a directory\)")):
        with pytest.raises(FileSchemaError, match=says):
            load(path, SCHEMA, "k")


def test_validate_huge_echo_cut_to_one_short_line():
    with pytest.raises(FileSchemaError) as info:
        validate(list(range(10_000)), SCHEMA, path="t.json", kind="k")
    assert len(info.value.problem) <= MAX_PROBLEM_CHARS


def test_schemas_package_imports_no_part_of_lab():
    """Below every part: a schema module importing a part would close a circle (the part reads through it).
    The ground floor (lab.files, the reader, and lab.numbers, the number formatter: each imports nothing of
    the lab, tests/unit/test_layout.py) is no part."""
    folder = Path(schemas.__file__).parent
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lab"):
                assert node.module in ("lab.schemas", "lab.files", "lab.numbers") or node.module == "lab" and all(
                    a.name == "schemas" for a in node.names), f"{path.name} imports {node.module}"


def test_load_fifo_and_device_refused_without_blocking(tmp_path):
    """Fault class: a FIFO or /dev/zero in a file's place blocks or never ends."""
    import os

    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(FileSchemaError, match="not a regular file"):
            load(path, SCHEMA, "k")


def test_load_file_over_the_cap_refused_before_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(schemas, "MAX_FILE_BYTES", 10)
    path = tmp_path / "f.json"
    path.write_text('{"gamma": 3, "x": 0.25}')
    with pytest.raises(FileSchemaError, match="larger than 10 bytes"):
        load(path, SCHEMA, "k")
