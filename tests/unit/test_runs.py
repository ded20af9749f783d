"""The mechanisms every run shares (lab.runs): round-robin shards, the work directory's lock, atomic files."""

from __future__ import annotations

import json
import os

import pytest

from lab.runs.files import write_json_atomic, write_text_atomic
from lab.runs.locks import WorkDirBusyError, hold, lock_path, running_shards
from lab.runs.shards import deal


@pytest.mark.parametrize("n", [1, 2, 3, 7, 12])
def test_deal_shards_are_disjoint_cover_the_units_and_keep_their_order(n):
    units = [f"u{i}" for i in range(12)]
    shards = [deal(units, (k, n)) for k in range(1, n + 1)]
    assert sorted(u for s in shards for u in s) == sorted(units)
    assert all(s == [u for u in units if u in s] for s in shards)
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_deal_without_a_shard_is_every_unit_and_the_jth_unit_goes_to_shard_j_mod_n():
    units = list(range(10))
    assert deal(units, None) == units
    assert deal(units, (2, 3)) == [1, 4, 7]


@pytest.mark.parametrize("shard", [(0, 2), (3, 2), (-1, 1)])
def test_deal_shard_outside_one_to_n_is_refused_naming_it(shard):
    with pytest.raises(ValueError, match=f"shard={shard[0]}/{shard[1]}"):
        deal([1, 2, 3], shard)


def test_hold_second_whole_run_is_refused_naming_the_directory(tmp_path):
    work = tmp_path / ".x-work-1"
    with hold(work, None, "intervention"):
        with pytest.raises(WorkDirBusyError, match="another whole run of this intervention is already running") as exc:
            with hold(work, None, "intervention"):
                pass
    assert str(work) in str(exc.value)
    with hold(work, None, "intervention"):  # released: the next run takes it
        pass
    assert not (tmp_path / ".locks").exists()  # the last holder leaves no lock folder behind


def test_hold_shards_share_the_directory_but_not_a_shard_or_a_whole_run(tmp_path):
    work = tmp_path / ".x-work-1"
    with hold(work, (1, 2), "study"), hold(work, (2, 2), "study"):
        assert sorted(running_shards(work)) == ["1/2", "2/2"]
        with pytest.raises(WorkDirBusyError, match="shard 1/2 of this study is already running"):
            with hold(work, (1, 2), "study"):
                pass
        with pytest.raises(WorkDirBusyError, match="shards 1/2, 2/2 of this study are already running"):
            with hold(work, None, "study"):
                pass
    assert running_shards(work) == []


def test_hold_a_folder_where_the_lock_goes_is_refused_as_bad_input_naming_it(tmp_path):
    work = tmp_path / ".x-work-1"
    lock_path(work).mkdir(parents=True)
    with pytest.raises(ValueError, match="cannot lock the study's work directory") as exc:
        with hold(work, None, "study"):
            pass
    assert not isinstance(exc.value, WorkDirBusyError) and str(lock_path(work)) in str(exc.value)


def test_write_json_atomic_failure_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    """Fault class: a failed write leaving a half-written file, or a temporary file beside it."""
    path = tmp_path / "a.json"
    write_json_atomic(path, {"x": 1})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"x": object()})
    assert json.loads(path.read_text()) == {"x": 1} and os.listdir(tmp_path) == ["a.json"]


def test_write_text_atomic_creates_the_folder_and_gives_the_umask_permissions(tmp_path):
    path = write_text_atomic(tmp_path / "sub" / "b.txt", "hi\n")
    mask = os.umask(0)
    os.umask(mask)
    assert path.read_text() == "hi\n" and (path.stat().st_mode & 0o777) == (0o666 & ~mask)


def test_waiting_lock_second_holder_waits_for_the_first(tmp_path):
    """The build's lock waits its turn instead of failing (:func:`lab.runs.locks.waiting_lock`)."""
    import threading
    import time

    from lab.runs.locks import waiting_lock

    order = []

    def second():
        with waiting_lock(tmp_path / ".lock"):
            order.append("second")

    with waiting_lock(tmp_path / ".lock"):
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.2)
        order.append("first")
    thread.join(5)
    assert order == ["first", "second"]


def test_workdir_saved_unit_resumes_others_redone_shard_dealt_and_held(tmp_path):
    """One WorkDir for every experiment: settings, a record per unit, resume through the experiment's reader,
    the shard's slice and the lock naming the run's kind."""
    from types import SimpleNamespace

    from lab.runs.files import work_file_name
    from lab.runs.workdir import WorkDir, differing_keys

    units = [SimpleNamespace(id=f"u{i}") for i in range(5)]
    work = WorkDir(tmp_path / "w", "study", "outcomes", (2, 2))
    assert [u.id for u in work.mine(units)] == ["u1", "u3"]
    work.write_settings({"a": 1})
    assert work.read_settings("settings") == {"a": 1} and work.settings_file == tmp_path / "w" / "settings.json"
    path = work.save("u1", {"x": 1})
    assert path == tmp_path / "w" / "outcomes" / work_file_name("u1") and json.loads(path.read_text()) == {"x": 1}
    read = work.resume(units, lambda p, u: json.loads(p.read_text()) if p.is_file() else None)
    assert read == {"u0": None, "u1": {"x": 1}, "u2": None, "u3": None, "u4": None}
    with work.hold():
        with pytest.raises(WorkDirBusyError, match="shard 2/2 of this study is already running"):
            with WorkDir(work.path, "study", "outcomes", (2, 2)).hold():
                pass
    assert differing_keys({"a": 1, "b": 2}, {"a": 1, "c": 3}) == ["b", "c"]
    work.discard()
    assert not work.path.exists()
