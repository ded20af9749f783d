"""lab.kinds.bench's with_kind: a typed report of a bench folder handed to the writer as its own variant.

Fault class: a variant's typed report written under another kind (a ``bench-tune-runtime`` report read back as a
``bench`` one, refused), or a report of another folder's kind written into a bench folder.
"""

from __future__ import annotations

import json

import pytest

from lab.kinds.bench import KIND, RuntimeTuneReport, with_kind
from lab.reports import ReportDir
from tests.provenance import ENVIRONMENT

pytestmark = pytest.mark.unit

RUNTIME = {"model": "qwen", "candidates": {}, "torch_threads": 2, "max_new_tokens": 8, "repeats": 1, "prompts": ["a"],
           "prompt_groups": ["code"], "humaneval": None, "environment": ENVIRONMENT, "result": {"winner": "x"}, "machine": {},
           "tuning_file": None}


def test_with_kind_names_the_variant_and_the_writer_writes_it_key_for_key(tmp_path):
    report = RuntimeTuneReport(**RUNTIME)
    assert with_kind(report) == {"kind": "bench-tune-runtime", **RUNTIME}
    ReportDir(tmp_path, tmp_path, KIND).write_report(with_kind(report))
    text = (tmp_path / "report.json").read_text(encoding="utf-8")
    assert list(json.loads(text)) == ["kind", "format", *RUNTIME]
    assert KIND.read(json.loads(text)) == report


def test_with_kind_refuses_a_report_of_another_kind_naming_it():
    from lab.kinds.bench_sinks import Report as SinksReport

    stranger = SinksReport(model="m", environment={}, torch_threads=1, results=[], comparison=None, machine_load={})
    with pytest.raises(TypeError, match=r"^a Report is no report of a bench folder \(bench, bench-tune, "
                                        r"bench-tune-runtime, bench-seed-tables\)$"):
        with_kind(stranger)
