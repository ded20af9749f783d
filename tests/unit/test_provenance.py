"""lab.provenance: a report's model record, environment and machine load, typed once and read as attributes.

Fault classes guarded: a page header or log row dug out of a report dict by string keys (a key renamed in the
writer and the page shows nothing, silently); a record written by one declaration and read by another; an older
report's record (fewer keys) refused or read with values it never said; the ground floor growing an import that
`lab --help` or a kind's declaration would pay for.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from lab.kinds import ShapeError
from lab.provenance import Environment, MachineLoad, ModelSource, StudyEnvironment
from lab.typed import from_json, to_json
from lab.views.files import model_record, read_report
from lab.views.page import page_html
from tests.provenance import ENVIRONMENT, MACHINE_LOAD, MODEL_SOURCE, environment_json, model_json
from tests.support import entropy_report

pytestmark = pytest.mark.unit

# The record load_model wrote from the first commit on, before `weights` and `runtime` existed.
FIRST_RECORD = {"model": "smollm2", "source": "HuggingFaceTB/SmolLM2-135M-Instruct", "profile": "smollm2",
                "device": "cpu", "dtype": "float32", "attn_implementation": "sdpa"}


def test_provenance_imports_only_the_standard_library_and_lab_typed():
    """A kind's declaration names these records, and `lab --help` imports every kind: the module stays ground
    floor."""
    import lab.provenance

    tree = ast.parse(Path(lab.provenance.__file__).read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert {n for n in names if n.split(".")[0] not in sys.stdlib_module_names} == {"lab.typed"}


def test_model_source_as_dict_is_the_typed_record_written_and_read_back():
    """as_dict is to_json of the record: the four sometimes-set keys only when set, in the declared order."""
    plain = ModelSource(model="m", device="cpu", dtype="float32")
    full = ModelSource(model="m", device="cpu", dtype="float32", weights="q4", weights_layers={"Q4_K": {"q4": 2}},
                       draft="early-exit:2", few_row_layers=3, parameters=7)
    assert list(plain.as_dict()) == ["model", "source", "profile", "device", "dtype", "attn_implementation",
                                     "weights", "runtime"]
    assert list(full.as_dict())[-4:] == ["weights_layers", "draft", "few_row_layers", "parameters"]
    for record in (plain, full):
        assert from_json(ModelSource, json.loads(json.dumps(record.as_dict()))) == record


def test_model_record_written_before_weights_and_runtime_reads_as_float32_on_torch():
    """A record from before the lab had other weights or runtimes says neither: it ran float32 on torch."""
    record = from_json(ModelSource, FIRST_RECORD)
    assert (record.weights, record.runtime, record.weights_layers) == ("float32", "torch", None)


def test_model_record_without_device_or_an_unknown_key_is_refused_naming_it():
    """No record the lab wrote lacks the device or holds a key the record does not declare (its git history
    holds none): such a record is another file's, and its reading says where in one line."""
    with pytest.raises(ShapeError, match=r"^model\.device: missing \(ModelSource needs it\)$"):
        from_json(ModelSource, {"model": "m", "dtype": "float32"}, "model")
    with pytest.raises(ShapeError, match=r"^model: no field 'revision' in ModelSource$"):
        from_json(ModelSource, {**FIRST_RECORD, "revision": "main"}, "model")


def test_environment_written_before_peak_rss_reads_none_and_a_studys_keeps_its_runners_keys():
    old = {k: v for k, v in environment_json().items() if k != "peak_rss_bytes"}
    assert from_json(Environment, old).peak_rss_bytes is None
    study = {**environment_json(model=model_json()), "draft": "early-exit:24",
             "workers": {"processes": 2, "torch_threads_per_worker": 1}, "target_dtype": "float32"}
    typed = from_json(StudyEnvironment, study)
    assert typed.model == MODEL_SOURCE and typed.workers["processes"] == 2 and to_json(typed) == study


def test_machine_load_summary_is_its_typed_record_key_for_key():
    """LoadLog.summary() writes MachineLoad through to_json: read back, it is the record, and written again the
    same keys in the same order."""
    from lab.machine import LoadLog, LoadSample

    log = LoadLog(threads=1, samples=[LoadSample("before a", 0.5, 0.1, 0.1, torch_threads=1, cpu_count=2, wall_s=1.0),
                                      LoadSample("after a", 2.5, 0.1, 0.1, torch_threads=1, cpu_count=2, wall_s=2.0)],
                  methods={"a": [(0, 1)]})
    summary = log.summary()
    assert from_json(MachineLoad, summary) == log.record()
    assert json.dumps(to_json(from_json(MachineLoad, summary))) == json.dumps(summary)
    assert log.record().busy and log.record().per_method["a"].load_1m_after == [2.5]


def _folder(root: Path, name: str, data: dict) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps(data), encoding="utf-8")
    return folder


def test_report_files_model_is_the_typed_reports_own_record_else_its_environments(tmp_path):
    """The header's record is the typed report's: its `model`; for a kind whose `model` is a profile's name
    (bench-sinks), its environment's."""
    data = entropy_report(model=model_json(weights="q4"))
    entropy = read_report(_folder(tmp_path, "20261205-010101-entropy-x", data))
    assert entropy.model == ModelSource(**{**FIRST_RECORD, "weights": "q4"}) == model_record(entropy.typed())
    sinks = {"kind": "bench-sinks", "model": "smollm2", "environment": environment_json(model=model_json()),
             "torch_threads": 2, "results": [], "machine_load": to_json(MACHINE_LOAD),
             "comparison": {"length": 8, "time_ratio": 1.0, "capture_extra_bytes": 1, "plain_extra_bytes": 1}}
    bench_sinks = read_report(_folder(tmp_path, "20261205-010102-bench-sinks-x", sinks))
    assert bench_sinks.model == MODEL_SOURCE
    page = page_html(bench_sinks)
    assert '<meta name="lab-model" content="smollm2">' in page and '<meta name="lab-runtime" content="torch">' in page


def test_report_files_model_of_a_report_in_another_shape_is_none_and_its_page_says_why(tmp_path):
    """A damaged report names no model in its header (nothing is dug out of it by key); its page says why."""
    files = read_report(_folder(tmp_path, "20261205-010101-entropy-x", entropy_report(environment=[None])))
    assert files.model is None
    with pytest.raises(ShapeError, match=r"^environment: an object goes here, not an array of 1$"):
        files.typed()
    page = page_html(files)
    assert '<meta name="lab-model" content="">' in page and "environment: an object goes here" in page


def test_model_record_of_lab_intervene_without_a_recorded_model_is_its_settings():
    """lab intervene names its model in its settings too (and runs on torch): a report whose environment recorded
    no model (one built in memory) still says which."""
    from lab.kinds.intervene import Report, Settings

    settings = Settings(model="smollm2", draft="early-exit:24", weights="q4", draft_weights="q4", dtype="float32",
                        device="cpu", triples_file="t.jsonl", triples_sha256="0" * 64, pilot_file=None,
                        pilot_sha256=None, limit=None, pilot_limit=0, new_tokens=8, seed=0, dense_rows=None, design=1)
    report = Report(settings=settings, decides=True, analysis=None, controls={}, pilot=None, power=[], seconds=1.0,
                    environment=ENVIRONMENT, work_dir="w", triples=[])
    assert model_record(report) == ModelSource(model="smollm2", weights="q4", device="cpu", dtype="float32")
