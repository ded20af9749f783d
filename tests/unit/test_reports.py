"""lab.reports: atomic report directories, JSON without NaN, CSV, slugs, environment."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from lab.reports import (
    environment,
    read_json,
    report_dir,
    rows_from_csv,
    slugify,
    timestamp,
    to_jsonable,
)
from tests.provenance import environment_json


class _Boom(RuntimeError):
    pass


def test_report_dir_success_renames_into_place_with_files(tmp_path):
    """The folder holds what the block wrote and nothing else: the page and the log are the views' (lab.views.publish)."""
    with report_dir(tmp_path, "entropy", "What is 2+2?") as rd:
        rd.write_json("report.json", {"a": 1})
        rd.write_text("summary.md", "# hi\n")
        rd.file("x.bin").write_bytes(b"\x00")
        staging = rd.path
    assert not staging.exists()
    assert rd.path == rd.final and rd.final.parent == tmp_path
    assert re.fullmatch(r"\d{8}-\d{6}-entropy-what-is-2-2", rd.final.name)
    assert sorted(p.name for p in rd.final.iterdir()) == ["report.json", "summary.md", "x.bin"]
    assert read_json(rd.final / "report.json") == {"a": 1}


@pytest.mark.parametrize("exc", [_Boom("failed mid-run"), KeyboardInterrupt()])
def test_report_dir_exception_removes_everything(tmp_path, exc):
    """Regression (fault class: half-written report): an exception (interrupt included)
    after some files were written leaves the reports root empty and propagates."""
    with pytest.raises(type(exc)):
        with report_dir(tmp_path, "entropy", "x") as rd:
            rd.write_json("report.json", {"partial": True})
            raise exc
    assert list(tmp_path.iterdir()) == []


def test_report_dir_existing_final_goes_to_next_free_name_and_leaves_no_staging(tmp_path):
    (tmp_path / "fixed").mkdir()
    (tmp_path / "fixed" / "keep.txt").write_text("old")
    with report_dir(tmp_path, "entropy", name="fixed") as rd:
        rd.write_text("new.txt", "new")
    assert rd.final == tmp_path / "fixed-2" and rd.path == rd.final
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fixed", "fixed-2"]
    assert [p.name for p in (tmp_path / "fixed").iterdir()] == ["keep.txt"]


_RACER = """
import pathlib, sys, time
import lab.reports as reports
reports.timestamp = lambda: "20260101-000000"  # every racer gets the same name
go = pathlib.Path(sys.argv[1])
while not go.exists():
    time.sleep(0.005)
with reports.report_dir(sys.argv[2], "entropy", "race test") as rd:
    rd.write_text("report.json", sys.argv[3])
    time.sleep(0.05)
print(rd.final)
"""


def test_report_dir_concurrent_runs_with_one_name_keep_every_report(tmp_path):
    """Fault class (concurrent runs overwriting each other's report): overlapping runs with the same report
    name lost all but one
    report (``os.replace`` onto a finished report: Errno 39, or FileExistsError)."""
    import os
    import subprocess
    import sys

    go, root = tmp_path / "go", tmp_path / "reports"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    racers = [subprocess.Popen([sys.executable, "-c", _RACER, str(go), str(root), str(i)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    go.touch()
    results = [r.communicate(timeout=60) + (r.returncode,) for r in racers]
    assert [rc for _, _, rc in results] == [0] * 4, [err for _, err, _ in results]
    finals = [out.strip() for out, _, _ in results]
    assert len(set(finals)) == 4
    assert sorted(Path(f, "report.json").read_text() for f in finals) == ["0", "1", "2", "3"]
    assert not [p for p in root.iterdir() if ".partial-" in p.name]


def test_report_dir_creates_missing_root(tmp_path):
    root = tmp_path / "a" / "b"
    with report_dir(root, "k") as rd:
        rd.write_text("f.txt", "x")
    assert (rd.final / "f.txt").read_text() == "x"


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, np.float32("nan"), torch.tensor(float("nan"))])
def test_to_jsonable_non_finite_becomes_null(value):
    assert to_jsonable({"x": value}) == {"x": None}


def test_write_json_nan_is_null_and_file_parses_strictly(tmp_path):
    """NaN never reaches the file: it is written as null, and a strict parser accepts it."""
    with report_dir(tmp_path, "k") as rd:
        rd.write_json("r.json", {"h": [1.0, math.nan], "t": torch.tensor([0.5, float("inf")])})
    text = (rd.final / "r.json").read_text()
    assert "NaN" not in text and "Infinity" not in text

    def reject(token):
        raise AssertionError(f"non-standard JSON constant {token}")

    assert json.loads(text, parse_constant=reject) == {"h": [1.0, None], "t": [0.5, None]}


def test_to_jsonable_converts_dataclasses_tensors_numpy_dtypes():
    @dataclasses.dataclass
    class D:
        a: torch.Tensor
        b: np.ndarray
        c: torch.dtype

    out = to_jsonable(D(torch.tensor([1, 2]), np.array([0.5]), torch.float16))
    assert out == {"a": [1, 2], "b": [0.5], "c": "torch.float16"}
    json.dumps(out)


def test_write_csv_round_trips_rows_with_nan_as_empty(tmp_path):
    rows = [{"step": 0, "h": 1.5, "tok": "a,b"}, {"step": 1, "h": math.nan, "tok": '"q"'}]
    with report_dir(tmp_path, "k") as rd:
        rd.write_csv("t.csv", rows)
    back = rows_from_csv(rd.final / "t.csv")
    assert back == [{"step": "0", "h": "1.5", "tok": "a,b"}, {"step": "1", "h": "", "tok": '"q"'}]


@pytest.mark.parametrize("text, expected", [
    ("What is the capital of France?", "what-is-the-capital-of-france"),
    ("[bold]x[/bold]", "bold-x-bold"),
    ("???", "run"),
    ("é", "run"),
])
def test_slugify_is_filesystem_safe(text, expected):
    assert slugify(text) == expected


def test_slugify_long_text_truncated_without_trailing_dash():
    slug = slugify("word " * 40, max_len=12)
    assert len(slug) <= 12 and not slug.endswith("-")


def test_timestamp_sortable_format():
    assert re.fullmatch(r"\d{8}-\d{6}", timestamp())


def test_environment_includes_versions_and_model_source(tiny_model):
    env = environment(tiny_model)
    assert env["libraries"]["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert env["model"]["model"] == "tiny-llama"
    json.dumps(to_jsonable(env))


def test_check_reports_root_file_in_the_way_raises(tmp_path):
    """Regression (bad input): --out naming a file failed only after the run, with a bare errno."""
    from lab.reports import check_reports_root

    f = tmp_path / "README.md"
    f.write_text("x")
    with pytest.raises(ValueError, match="--out=.*not a directory"):
        check_reports_root(f)


def test_check_reports_root_missing_nested_dir_is_accepted_and_not_created(tmp_path):
    """Fault class (a refused run leaving folders behind): a run refused for a bad argument must not leave
    the --out tree behind; report_dir
    creates the folder when it writes."""
    from lab.reports import check_reports_root

    assert check_reports_root(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert not (tmp_path / "a").exists()
    with report_dir(tmp_path / "a" / "b", "k") as rd:
        rd.write_text("f.txt", "x")
    assert rd.final.parent == tmp_path / "a" / "b"


def test_check_reports_root_uncreatable_raises(tmp_path):
    from lab.reports import check_reports_root

    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="--out=.*cannot be created"):
        check_reports_root(tmp_path / "f" / "sub")


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_report_dir_has_the_users_normal_permissions(tmp_path, umask):
    """Regression (fault class: tempfile.mkdtemp's fixed 0700): the report
    folder gets 0777 & ~umask like any folder the user creates, and so do its files."""
    import os
    import stat

    old = os.umask(umask)
    try:
        with report_dir(tmp_path, "kind", "slug") as rd:
            rd.write_text("a.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(rd.final.stat().st_mode) == 0o777 & ~umask
    assert stat.S_IMODE((rd.final / "a.txt").stat().st_mode) == 0o666 & ~umask


def test_report_dir_removes_stale_staging_left_by_a_killed_run_and_keeps_fresh_ones(tmp_path):
    """Poor case (staging folders of killed runs left forever): .partial-* directories of killed runs were
    never cleaned up."""
    import os
    import time

    from lab.reports import STALE_STAGING_S

    stale, fresh = tmp_path / ".old-entropy-x.partial-0000", tmp_path / ".now-entropy-x.partial-1111"
    for d in (stale, fresh):
        d.mkdir()
        (d / "report.json").write_text("{}")
    old = time.time() - STALE_STAGING_S - 60
    os.utime(stale, (old, old))
    with report_dir(tmp_path, "entropy", "x") as rd:
        rd.write_text("f.txt", "x")
    assert not stale.exists() and fresh.exists() and rd.final.is_dir()


def test_environment_peak_rss_grows_with_an_allocation_and_is_in_bytes():
    """Peak RSS in bytes (Linux's KiB converted): at least the bytes just touched, never below an earlier reading."""
    import sys

    import numpy as np

    from lab.reports import environment, peak_rss_bytes

    if sys.platform == "win32":
        pytest.skip("no getrusage")
    before = peak_rss_bytes()
    block = np.ones(64 * 2**20 // 8)  # 64 MiB, written
    after = environment()["peak_rss_bytes"]
    assert after >= before and after >= block.nbytes  # a KiB figure left unconverted would be ~1000x too small
    del block


def test_report_dir_write_report_puts_kind_and_format_first_then_the_fields_in_order(tmp_path):
    """report.json, the one report file every kind writes: its kind and format first, the figures as given (a kind
    with no typed report: any figures; a typed kind, entropy: its whole report, read through its type)."""
    from lab.kinds import REPORT_FORMAT, Kind
    from lab.kinds.entropy import KIND as ENTROPY
    from tests.support import entropy_report, entropy_step

    with report_dir(tmp_path, Kind("untyped", listed=0), "x") as rd:
        rd.write_report({"prompt": "p", "kind": "untyped", "steps": [1.5, None]})
    text = (rd.final / "report.json").read_text(encoding="utf-8")
    assert list(json.loads(text)) == ["kind", "format", "prompt", "steps"]
    assert json.loads(text) == {"kind": "untyped", "format": REPORT_FORMAT, "prompt": "p", "steps": [1.5, None]}
    given = entropy_report([entropy_step()], context="c",
                           context_measure={"value": None, "n_context": 1, "measure": "lookback_heads", "file": None,
                                            "verdicts": {}, "unmeasurable": "no fitted measure"})
    with report_dir(tmp_path, ENTROPY, "x") as rd:
        rd.write_report({**given, "kind": "entropy"})
    text = (rd.final / "report.json").read_text(encoding="utf-8")
    assert json.dumps(json.loads(text)) == json.dumps({"kind": "entropy", "format": REPORT_FORMAT,
                                                       **{k: v for k, v in given.items() if k != "kind"}})


def test_report_dir_write_report_keeps_a_declared_variant_and_refuses_another_kind(tmp_path):
    """Fault class: a report.json whose kind contradicts its folder (a page drawn as the wrong kind)."""
    from lab.kinds.bench import KIND as BENCH

    runtime = {"kind": "bench-tune-runtime", "model": "m", "candidates": {}, "torch_threads": 1, "max_new_tokens": 8,
               "repeats": 1, "prompts": [], "prompt_groups": [], "humaneval": None, "environment": environment_json(),
               "result": {},
               "machine": {}, "tuning_file": None}  # a whole report: a typed kind's writer reads it through its type
    with report_dir(tmp_path, BENCH, "x") as rd:
        rd.write_report(runtime)
    assert read_json(rd.final / "report.json")["kind"] == "bench-tune-runtime"
    for data, match in (({"kind": "entropy"}, r"report.json of a 'bench' report says kind='entropy'"),
                        ({"kind": "bench-tune", "model": "m"}, r"not in its declared shape: model: an object goes"),
                        ({"format": 2}, r"holds a field 'format', which the writer sets"),
                        ([1, 2], r"must be a mapping, not list")):
        with pytest.raises(ValueError, match=match):
            with report_dir(tmp_path / "refused", BENCH, "x") as rd:
                rd.write_report(data)
    assert not (tmp_path / "refused").exists() or not any((tmp_path / "refused").iterdir())
