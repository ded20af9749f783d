"""The one resolver of "the user's file, else the packaged one" (:mod:`lab.user_dirs`).

Fault class: a loader that skips a broken user file for the packaged one (the run's numbers change
without a word), or one that reads a regular file only where the user's folder must win; and a
copy placed under another root than its siblings.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lab.user_dirs import CALIBRATION_ENV, found_first, packaged_file, read_first, user_file

pytestmark = pytest.mark.unit


def test_read_first_folder_at_user_path_is_the_users(tmp_path):
    user, packaged = tmp_path / "user.json", tmp_path / "packaged.json"
    packaged.write_text("{}")
    user.mkdir()
    assert read_first(user, packaged) == user and found_first(user, packaged) == user


def test_read_first_regular_file_rule_skips_a_folder(tmp_path):
    user, packaged = tmp_path / "user.json", tmp_path / "packaged.json"
    packaged.write_text("{}")
    user.mkdir()
    assert read_first(user, packaged, counts=Path.is_file) == packaged
    assert found_first(user, packaged, counts=Path.is_file) == packaged


def test_found_first_neither_there_is_none(tmp_path):
    user, packaged = tmp_path / "user.json", tmp_path / "packaged.json"
    assert read_first(user, packaged) == packaged  # which need not exist
    assert found_first(user, packaged) is None and found_first(user, packaged, counts=Path.is_file) is None


def test_found_first_dangling_link_is_the_users(tmp_path):
    user, packaged = tmp_path / "user.json", tmp_path / "packaged.json"
    packaged.write_text("{}")
    os.symlink(tmp_path / "nothing", user)
    assert found_first(user, packaged) == user
    assert found_first(user, packaged, counts=Path.is_file) == packaged


def test_user_file_and_packaged_file_roots(tmp_path, monkeypatch):
    monkeypatch.setenv(CALIBRATION_ENV, str(tmp_path))
    assert user_file("health/chosen.json") == tmp_path / "health" / "chosen.json"
    import lab
    assert packaged_file("health/chosen.json") == Path(lab.__file__).parent / "health" / "chosen.json"
