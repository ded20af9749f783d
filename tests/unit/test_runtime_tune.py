"""lab.bench.runtime_tune and the runtime tuning file: the figures, the rule that chooses, the schedule, the file.

Fault class: a rule that picks by the wrong figure (decode-only instead of end to end, the best repeat instead
of the median), a schedule that always runs one candidate first (so drift in load favours it), figures that
mix repeats or count the prefill's token as decode, and a tuning file read on a machine or build it was not
measured on.
"""

from __future__ import annotations

import json

import pytest

from lab.bench import runtime_tune as rt
from lab.machine import LoadLog
from lab.schemas import FileSchemaError
from lab.speculative import tuning_schema
from lab.tuning import RUNTIME, read_tuned, runtime_machine_key, write_tuned

from tests.support import report_dirs

pytestmark = pytest.mark.unit


def _run(label, rep, prompt, n_new, total, prefill):
    return rt.RuntimeRun(label, rep, prompt, 10, n_new, total, prefill, list(range(n_new)))


def test_candidate_figures_sum_over_the_prompts_of_a_repeat_then_take_the_median():
    runs = [_run("a", 0, 0, 10, 2.0, 1.0), _run("a", 0, 1, 10, 2.0, 1.0),   # repeat 0: 20 tokens / 4 s
            _run("a", 1, 0, 10, 1.0, 0.5), _run("a", 1, 1, 10, 1.0, 0.5),   # repeat 1: 20 / 2 s
            _run("a", 2, 0, 10, 4.0, 1.0), _run("a", 2, 1, 10, 4.0, 1.0)]   # repeat 2: 20 / 8 s
    f = rt.candidate_figures(runs)["a"]
    assert f.end_to_end_tok_s == [5.0, 10.0, 2.5] and f.median_end_to_end == 5.0
    # decode: the first token of each prompt is the prefill's: (10 - 1) * 2 over the decode seconds
    assert f.decode_tok_s == [18 / 2.0, 18 / 1.0, 18 / 6.0] and f.median_decode == 9.0
    assert f.prefill_s == [2.0, 1.0, 2.0]


def test_candidate_figures_refuse_no_runs_and_an_untimed_repeat():
    with pytest.raises(ValueError, match="empty"):
        rt.candidate_figures([])
    with pytest.raises(ValueError, match="nothing was timed"):
        rt.candidate_figures([_run("a", 0, 0, 5, 0.0, 0.0)])


def _figures(e2e, decode):
    return rt.CandidateFigures("x", [e2e], [decode], [0.0], e2e, decode)


def test_choose_runtime_rejects_the_planted_decode_only_winner():
    """A runtime with twice the decode speed and a slow prompt pass loses to the faster end to end."""
    figures = {"fast decode, slow prompt": _figures(e2e=8.0, decode=40.0), "faster end to end": _figures(9.0, 20.0)}
    assert rt.choose_runtime(figures) == "faster end to end"


def test_choose_runtime_reads_the_median_not_the_best_repeat():
    lucky = rt.CandidateFigures("lucky", [30.0, 5.0, 5.0], [1.0] * 3, [0.0] * 3, 5.0, 1.0)
    steady = rt.CandidateFigures("steady", [8.0, 8.0, 8.0], [1.0] * 3, [0.0] * 3, 8.0, 1.0)
    assert rt.choose_runtime({"lucky": lucky, "steady": steady}) == "steady"


def test_choose_runtime_tie_goes_to_the_first_listed_and_none_is_refused():
    assert rt.choose_runtime({"reference": _figures(5.0, 1.0), "other": _figures(5.0, 9.0)}) == "reference"
    with pytest.raises(ValueError, match="no candidates"):
        rt.choose_runtime({})


def test_alternating_order_rotates_so_each_candidate_leads_once_in_n_repeats():
    orders = [rt.alternating_order(3, rep) for rep in range(3)]
    assert orders == [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    assert {o[0] for o in orders} == {0, 1, 2}


def test_run_runtime_tune_runs_every_candidate_on_every_prompt_alternating_and_chooses():
    calls = []
    seconds = {"torch": 4.0, "llama.cpp": 2.0}

    def gen(cand):
        def fn(p):
            calls.append((cand.label, p))
            return 12, 8, seconds[cand.runtime], 1.0, [1] * 8
        return fn

    cands = [rt.RuntimeCandidate("torch", "float32"), rt.RuntimeCandidate("llama.cpp", "gguf")]
    result = rt.run_runtime_tune({c: gen(c) for c in cands}, 2, repeats=2, load_log=LoadLog(threads=2))
    assert calls == [("torch (float32)", 0), ("llama.cpp (gguf)", 0), ("torch (float32)", 1), ("llama.cpp (gguf)", 1),
                     ("llama.cpp (gguf)", 0), ("torch (float32)", 0), ("llama.cpp (gguf)", 1), ("torch (float32)", 1)]
    assert result.winner == "llama.cpp (gguf)" and (result.winner_runtime, result.winner_weights) == ("llama.cpp", "gguf")
    assert result.figures["llama.cpp (gguf)"].median_end_to_end == 4.0 and len(result.runs) == 8
    assert set(result.load.per_method) == {"torch (float32)", "llama.cpp (gguf)"}
    json.dumps(result.as_dict())  # the report's part is JSON as it stands


@pytest.mark.parametrize("kw", [dict(n_prompts=0, repeats=1), dict(n_prompts=1, repeats=0)])
def test_run_runtime_tune_refuses_an_empty_schedule(kw):
    cand = rt.RuntimeCandidate("torch", "float32")
    with pytest.raises(ValueError, match=">= 1"):
        rt.run_runtime_tune({cand: lambda p: (1, 1, 1.0, 0.5, [1])}, kw["n_prompts"], repeats=kw["repeats"],
                            load_log=LoadLog(threads=1))


def test_candidates_start_with_the_float32_reference_and_include_llama_cpp():
    assert rt.CANDIDATES[0] == rt.RuntimeCandidate("torch", "float32")
    assert rt.RuntimeCandidate("llama.cpp", "gguf") in rt.CANDIDATES


# ---- the file ----

def _machine():
    return runtime_machine_key(2)


def _write_runtime(runtime, weights, machine, measured, report):
    return write_tuned(RUNTIME, "qwen2.5-coder", {"runtime": runtime, "weights": weights, "report": report}, machine,
                       measured)


def _read_runtime(profile, machine, **kwargs):
    """``(runtime, weights, the read)`` of ``profile``'s runtime file (None, None: no file, or ignored)."""
    got = read_tuned(RUNTIME, profile, machine, **kwargs)
    return (*((got.data["runtime"], got.data["weights"]) if got.data is not None else (None, None)), got)


def test_runtime_tuning_file_round_trips_for_this_machine():
    path = _write_runtime("llama.cpp", "gguf", _machine(), {"x": 1}, "reports/r")
    assert path == RUNTIME.path("qwen2.5-coder") and path.name == "runtime-qwen2.5-coder.json"
    runtime, weights, got = _read_runtime("qwen2.5-coder", _machine())
    assert (runtime, weights, got.note) == ("llama.cpp", "gguf", None)


def test_runtime_tuning_file_of_another_thread_count_is_used_only_with_any_threads():
    _write_runtime("llama.cpp", "gguf", runtime_machine_key(1), {}, None)
    assert _read_runtime("qwen2.5-coder", _machine())[0] is None
    runtime, _, got = _read_runtime("qwen2.5-coder", _machine(), any_threads=True)
    assert runtime == "llama.cpp" and "1 torch thread" in got.note


def test_runtime_tuning_file_of_another_profile_is_ignored():
    path = _write_runtime("llama.cpp", "gguf", _machine(), {}, None)
    path.rename(RUNTIME.path("smollm2"))
    runtime, _, got = _read_runtime("smollm2", _machine())
    assert runtime is None and "not smollm2" in got.note


def test_no_runtime_tuning_file_gives_neither_runtime_nor_note():
    runtime, _, got = _read_runtime("qwen2.5-coder", _machine())
    assert runtime is None and got.note is None


@pytest.mark.parametrize("change, problem", [
    (dict(runtime="llama.cpp", weights="q4"), "weights"),      # llama.cpp runs the file's own weights only
    (dict(runtime="torch", weights="gguf"), "weights"),        # torch weights are a lab representation
    (dict(runtime="vllm"), "runtime"),
    (dict(format=2), "format"),
])
def test_runtime_tuning_schema_refuses_what_no_command_could_run(tmp_path, change, problem):
    data = {"format": 1, "profile": "qwen2.5-coder", "runtime": "llama.cpp", "weights": "gguf", "machine": _machine(),
            **change}
    path = tmp_path / "runtime.json"
    path.write_text(json.dumps(data))
    with pytest.raises(FileSchemaError, match=problem):
        tuning_schema.load(tuning_schema.RUNTIME, path)


def test_runtime_tuning_schema_refuses_fractional_threads(tmp_path):
    data = {"format": 1, "profile": "p", "runtime": "torch", "weights": "q4", "machine": {**_machine(), "threads": 2.0}}
    path = tmp_path / "runtime.json"
    path.write_text(json.dumps(data))
    with pytest.raises(FileSchemaError, match="whole number"):
        tuning_schema.load(tuning_schema.RUNTIME, path)


@pytest.mark.parametrize("runtime", [7, "vllm", None, ["llama.cpp"]])
def test_runtime_tuning_schema_names_a_bad_runtime_not_the_weights(tmp_path, runtime):
    """Fault class: a runtime that is none of the runtimes blamed on ``weights`` (the weights of the other branch)."""
    data = {"format": 1, "profile": "qwen2.5-coder", "runtime": runtime, "weights": "gguf", "machine": _machine()}
    path = tmp_path / "runtime.json"
    path.write_text(json.dumps(data))
    with pytest.raises(FileSchemaError) as info:
        tuning_schema.load(tuning_schema.RUNTIME, path)
    assert info.value.problem.startswith("runtime: ") and "weights" not in info.value.problem


def test_tune_runtime_keeps_the_report_when_the_tuning_file_cannot_be_written(tmp_path, capsys, monkeypatch):
    """Fault class: every candidate timed, then the measurement thrown away (no report, the report's folder blamed)
    because the tuning file could not be written (a folder in its place)."""
    from lab import cli
    from lab.bench.tune import tune_prompts
    from lab.commands import bench_tune

    cands = {c: (lambda p, s=2.0 if c.runtime == "llama.cpp" else 4.0: (12, 8, s, 1.0, [1] * 8)) for c in rt.CANDIDATES}
    monkeypatch.setattr(bench_tune, "_check_tune_runtime", lambda args: (tune_prompts("tuning:1"), 1))
    monkeypatch.setattr(bench_tune, "_warm_runtime_candidates", lambda *a: (cands, {}, None))
    RUNTIME.path("qwen2.5-coder").mkdir(parents=True)  # a folder where the file goes
    rc = cli.main(["bench-tune-runtime", "--model", "qwen2.5-coder", "--repeats", "1", "--out", str(tmp_path)])
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("WARNING")]  # a busy machine
    (run,) = report_dirs(tmp_path)
    report = json.loads((run / "report.json").read_text(encoding="utf-8"))
    assert rc == 1 and len(err) == 1 and f"the tuning file '{RUNTIME.path('qwen2.5-coder')}' could not" in err[0]
    assert str(run) in err[0] and report["result"]["winner"] == "llama.cpp (gguf)"
    assert (run / "summary.md").exists() and RUNTIME.path("qwen2.5-coder").is_dir()
