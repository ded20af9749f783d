"""``--runtime``: chosen and refused before any model loads, in one line; the ggml cache's bookkeeping.

No llama.cpp build is needed here: the binding is replaced by fakes (the real runtime is tested in
``tests/integration/test_ggml_runtime.py`` and ``tests/statistical/test_ggml_law.py``).
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

import lab.runtime.ggml as ggml
from lab import cli
from lab.commands import common, runtime_choice
from lab.commands.runtime_choice import RuntimeChoice, RuntimeSource
from lab.runtime.ggml import GgmlCache, RuntimeNotBuiltError, RuntimeUnavailableError
from tests.support import cli_exit

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _default_runtime_chosen_here(monkeypatch):
    """These tests are of the default itself: no ``$LAB_RUNTIME`` (the test tiers set torch)."""
    monkeypatch.delenv("LAB_RUNTIME", raising=False)


def _args(**kw):
    base = dict(model="qwen2.5-coder", runtime=None, weights="float32", dtype=None, device=None,
                draft_weights="float32", draft_dtype=None)
    return argparse.Namespace(**{**base, **kw})


@pytest.fixture
def built(monkeypatch):
    monkeypatch.setattr(ggml, "binding", lambda: object())


@pytest.fixture
def not_built(monkeypatch):
    def refuse():
        raise RuntimeNotBuiltError("the llama.cpp runtime is not built (...); run `make peer`")

    monkeypatch.setattr(ggml, "binding", refuse)


def test_resolve_runtime_typed_llama_cpp_on_a_gguf_profile_is_used(built):
    choice = runtime_choice.resolve_runtime(_args(runtime="llama.cpp"))
    assert choice == RuntimeChoice("llama.cpp", RuntimeSource.TYPED, None, "float32")
    assert choice.said == "--runtime" and choice.line == "runtime: llama.cpp (--runtime)"


def _tune(runtime="llama.cpp", weights="gguf", **machine):
    """A runtime tuning file for qwen2.5-coder measured on this machine (``machine`` overrides its key's fields)."""
    import torch

    from lab.tuning import RUNTIME, runtime_machine_key, write_tuned

    key = {**runtime_machine_key(torch.get_num_threads()), **machine}
    return write_tuned(RUNTIME, "qwen2.5-coder", {"runtime": runtime, "weights": weights, "report": None}, key, {})


def test_resolve_runtime_untyped_without_a_tuning_file_is_llama_cpp_where_built(built):
    choice = runtime_choice.resolve_runtime(_args())
    assert choice == RuntimeChoice("llama.cpp", RuntimeSource.DEFAULT, "default: llama.cpp, built by make peer",
                                   "float32")
    assert choice.line == "runtime: llama.cpp (default: llama.cpp, built by make peer)"


def test_resolve_runtime_untyped_not_built_is_torch_with_one_line_naming_make_peer(not_built):
    """Negative control of the default: without the build, torch, and the line says what building it gives."""
    choice = runtime_choice.resolve_runtime(_args())
    assert choice.runtime == "torch" and choice.source is RuntimeSource.DEFAULT
    assert choice.said == f"default: torch; {runtime_choice.BUILD_HINT}" and "make peer" in choice.line
    assert "\n" not in choice.line


def test_resolve_runtime_untyped_damaged_build_is_torch_saying_why(monkeypatch):
    def damaged():
        raise RuntimeUnavailableError("the llama.cpp runtime in /x does not load (OSError: bad): run `make peer` again")

    monkeypatch.setattr(ggml, "binding", damaged)
    choice = runtime_choice.resolve_runtime(_args())
    assert choice.runtime == "torch" and choice.said.startswith("default: torch, because the llama.cpp runtime in /x")


@pytest.mark.parametrize("kw", [dict(weights="q4"), dict(weights="float32", weights_typed=True),
                                dict(dtype="bfloat16"), dict(context="some text")])
def test_resolve_runtime_untyped_with_a_torch_only_flag_stays_on_torch_saying_so(built, kw):
    choice = runtime_choice.resolve_runtime(_args(**kw))
    assert choice.runtime == "torch" and choice.source is RuntimeSource.DEFAULT
    assert choice.weights == kw.get("weights", "float32")
    assert "applies to torch only" in choice.said and choice.line.startswith("runtime: torch (default: torch, because --")


@pytest.mark.parametrize("value, runtime", [("torch", "torch"), ("llama.cpp", "llama.cpp")])
def test_lab_runtime_env_replaces_the_tuning_file_as_the_default(built, monkeypatch, value, runtime):
    _tune("torch", "q4")
    monkeypatch.setenv("LAB_RUNTIME", value)
    choice = runtime_choice.resolve_runtime(_args())
    assert choice.runtime == runtime and choice.source is RuntimeSource.ENV and choice.said.startswith("$LAB_RUNTIME")
    assert (choice.line is None) == (runtime == "torch")  # torch from the shell's own setting prints nothing
    assert runtime_choice.resolve_runtime(_args(runtime="torch")).source is RuntimeSource.TYPED


def test_lab_runtime_env_of_another_value_is_one_line(monkeypatch):
    monkeypatch.setenv("LAB_RUNTIME", "cuda")
    with pytest.raises(ValueError, match=r"\$LAB_RUNTIME='cuda' must be torch or llama.cpp"):
        runtime_choice.resolve_runtime(_args())


def test_resolve_runtime_untyped_runs_the_tuned_runtime_and_typed_torch_wins(built):
    path = _tune()
    choice = runtime_choice.resolve_runtime(_args())
    assert choice == RuntimeChoice("llama.cpp", RuntimeSource.TUNED, f"tuned: {path}", "float32")
    assert choice.said == f"tuned: {path}" and choice.line == f"runtime: llama.cpp (tuned: {path})"
    assert runtime_choice.resolve_runtime(_args(runtime="torch")) == RuntimeChoice("torch", RuntimeSource.TYPED, None,
                                                                                   "float32")


def test_resolve_runtime_tuned_llama_cpp_falls_back_to_torch_when_not_built_saying_why(not_built):
    _tune()
    choice = runtime_choice.resolve_runtime(_args())
    assert choice.runtime == "torch" and choice.source is RuntimeSource.DEFAULT and "make peer" in choice.said
    assert choice.line == f"runtime: torch ({choice.said})"


@pytest.mark.parametrize("kw", [dict(weights="q4"), dict(weights="float32", weights_typed=True),
                                dict(draft_dtype="bfloat16")])
def test_resolve_runtime_tuned_llama_cpp_with_a_torch_only_flag_is_torch_naming_it(built, kw):
    """A typed torch flag, even ``--weights float32`` (the reference), keeps the run on torch."""
    _tune()
    choice = runtime_choice.resolve_runtime(_args(**kw))
    assert choice.runtime == "torch" and choice.source is RuntimeSource.DEFAULT
    assert "applies to torch only" in choice.said


def test_resolve_runtime_tuning_is_not_read_for_a_model_without_a_gguf_file(built):
    _tune()
    assert runtime_choice.resolve_runtime(_args(model="Qwen/Qwen2.5-3B-Instruct")) == RuntimeChoice(
        "torch", RuntimeSource.DEFAULT, None, "float32")


def test_resolve_runtime_tuning_is_not_read_off_the_cpu(built, monkeypatch):
    import torch

    from lab.models import devices

    _tune()
    monkeypatch.setattr(devices, "resolve_device", lambda device=None: torch.device("cuda"))
    assert runtime_choice.resolve_runtime(_args()) == RuntimeChoice("torch", RuntimeSource.DEFAULT, None, "float32")


@pytest.mark.parametrize("machine, says", [(dict(cpu_model="Some Other CPU"), "another machine"),
                                          (dict(torch="1.0.0"), "stale"),
                                          (dict(llama_cpp="0.0.1"), "stale")])
def test_resolve_runtime_ignores_a_foreign_or_stale_tuning_file_saying_so(built, machine, says):
    path = _tune(**machine)
    choice = runtime_choice.resolve_runtime(_args())
    why = choice.said
    assert choice.runtime == "llama.cpp" and choice.source is RuntimeSource.DEFAULT  # the built default instead
    assert why.startswith("default: llama.cpp, built by make peer; ") and says in why and str(path) in why
    assert "\n" not in why


def test_resolve_runtime_ignores_a_corrupt_tuning_file_saying_so(built):
    path = _tune()
    path.write_text('{"format": 1, "profile": "qwen2.5-coder", "runtime": "llama.cpp", "weights": "q4"}')
    choice = runtime_choice.resolve_runtime(_args())
    assert choice.runtime == "llama.cpp" and "corrupt" in choice.said


def test_resolve_runtime_tuned_torch_weights_apply_unless_weights_are_typed(built):
    """The tuned weights are the choice's, and the parsed flags are left as typed."""
    path = _tune("torch", "q4")
    args = _args()
    assert runtime_choice.resolve_runtime(args) == RuntimeChoice("torch", RuntimeSource.TUNED,
                                                         f"tuned: {path} (torch with q4 weights)", "q4")
    assert args == _args()
    typed = _args(weights="float32", weights_typed=True)
    assert runtime_choice.resolve_runtime(typed) == RuntimeChoice(
        "torch", RuntimeSource.TUNED, f"tuned: {path} (torch, q4 weights measured fastest)", "float32")
    assert typed.weights == "float32"


def test_weights_flag_records_that_it_was_typed():
    import argparse as ap

    p = ap.ArgumentParser()
    common.add_model_args(p)
    assert not getattr(p.parse_args([]), "weights_typed", False)
    got = p.parse_args(["--weights", "float32"])
    assert got.weights == "float32" and got.weights_typed


@pytest.mark.parametrize("kw, names", [
    (dict(model="Qwen/Qwen2.5-3B-Instruct"), "has none"),
    (dict(weights="q4"), "--weights"),
    (dict(dtype="bfloat16"), "--dtype"),
    (dict(draft_dtype="bfloat16"), "--draft-dtype"),
])
def test_resolve_runtime_llama_cpp_refuses_what_it_cannot_run_naming_it(built, kw, names):
    with pytest.raises(ValueError, match=names) as info:
        runtime_choice.resolve_runtime(_args(runtime="llama.cpp", **kw))
    assert "\n" not in str(info.value)


def test_resolve_runtime_llama_cpp_not_built_names_make_peer(not_built):
    with pytest.raises(ValueError, match="make peer"):
        runtime_choice.resolve_runtime(_args(runtime="llama.cpp"))


@pytest.mark.parametrize("argv", [
    ["study", "--runtime", "llama.cpp"],
    ["sinks", "hello", "--runtime", "llama.cpp"],
    ["stream", "--runtime", "llama.cpp"],
])
def test_cli_torch_only_command_with_llama_cpp_exits_2_in_one_line(tmp_path, capsys, no_model_loading, argv):
    rc = cli.main([*argv, "--out", str(tmp_path / "reports")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "attention weights" in err and "--runtime torch" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "reports").exists()


@pytest.mark.parametrize("command", ["bench-seed-tables", "bench-tune"])
def test_cli_bench_schedule_on_llama_cpp_exits_2(tmp_path, capsys, no_model_loading, command):
    """Their schedules cast drafts and re-forward them without a cache: torch only, so no --runtime to take."""
    rc = cli_exit([command, "--runtime", "llama.cpp", "--out", str(tmp_path)])
    assert rc == 2 and "unrecognized arguments: --runtime llama.cpp" in capsys.readouterr().err


def test_cli_speculate_llama_cpp_with_early_exit_draft_exits_2(tmp_path, capsys, no_model_loading, built):
    rc = cli.main(["speculate", "hi", "--model", "qwen2.5-coder", "--runtime", "llama.cpp", "--draft", "early-exit:4",
                   "--out", str(tmp_path)])
    assert rc == 2 and "early-exit draft runs the target's own torch layers" in capsys.readouterr().err


class _FakeModel:
    def __init__(self):
        self.removed = []

    def remove_positions(self, keep):
        self.removed.append(keep)


def test_ggml_cache_crop_negative_drops_the_last_positions_from_the_memory():
    model = _FakeModel()
    cache = GgmlCache(model)
    cache.length = 10
    cache.crop(-3)
    assert cache.get_seq_length() == 7 and model.removed == [7]
    cache.crop(0)  # nothing to drop: the memory is not touched
    assert cache.get_seq_length() == 7 and model.removed == [7]
    cache.crop(5)  # a non-negative n keeps the first n
    assert cache.get_seq_length() == 5 and model.removed == [7, 5]


def test_ggml_cache_crop_past_empty_is_refused():
    cache = GgmlCache(_FakeModel())
    cache.length = 2
    with pytest.raises(ValueError, match="crop"):
        cache.crop(-3)
    assert cache.get_seq_length() == 2


def test_choose_setup_on_llama_cpp_ignores_torch_tuning_and_has_no_draft_dtype(monkeypatch):
    from lab import tuning
    from lab.speculative import setups

    monkeypatch.setattr(tuning, "read_tuned", lambda *a, **k: pytest.fail("a torch tuning file was read"))
    monkeypatch.setitem(setups.DEFAULT_GGML_SETUPS, "qwen2.5-coder", (setups.DraftSetup(gamma=2), "measured"))
    chosen = tuning.choose_setup("qwen2.5-coder", "qwen2.5-coder-0.5b", {"gamma": None, "draft_dtype": None,
                                                                          "adaptive": None},
                                 threads=2, has_weights=False, runtime="llama.cpp")
    assert chosen.setup.gamma == 2 and chosen.setup.draft_dtype is None
    assert "GGUF" in chosen.sources["draft_dtype"] and chosen.sources["gamma"] == "default: measured"


@pytest.mark.parametrize("extra, says", [
    (["--model", "Qwen/Qwen2.5-3B-Instruct"], "has none"),
    (["--model", "qwen2.5-coder", "--gammas", "3"], "unrecognized arguments: --gammas"),
    (["--model", "qwen2.5-coder", "--runtime", "llama.cpp"], "unrecognized arguments: --runtime"),
    (["--model", "qwen2.5-coder", "--weights", "q4"], "unrecognized arguments: --weights"),
    (["--model", "qwen2.5-coder", "--humaneval", "held-back"], "--humaneval 'held-back': tuning runs on the tuning split only"),
])
def test_cli_tune_runtime_refuses_what_it_does_not_time_in_one_line(tmp_path, capsys, no_model_loading, built, extra,
                                                                    says):
    rc = cli_exit(["bench-tune-runtime", *extra, "--out", str(tmp_path / "reports")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and says in err and len(err.splitlines()) == 1
    assert not (tmp_path / "reports").exists()


def test_cli_tune_runtime_without_the_build_names_make_peer(tmp_path, capsys, no_model_loading, not_built):
    rc = cli.main(["bench-tune-runtime", "--model", "qwen2.5-coder", "--out", str(tmp_path)])
    assert rc == 2 and "make peer" in capsys.readouterr().err


def _tune_smollm2():
    """A runtime tuning file choosing llama.cpp for smollm2 (whose own draft is early-exit:24) on this machine."""
    import torch

    from lab.tuning import RUNTIME, runtime_machine_key, write_tuned

    return write_tuned(RUNTIME, "smollm2", {"runtime": "llama.cpp", "weights": "gguf", "report": None},
                       runtime_machine_key(torch.get_num_threads()), {})


def _bench_until_load(monkeypatch, capsys, argv):
    """``lab bench`` stopped where the models would load: ``(rc, stderr, the runtime it would load on or None)``."""
    from lab.commands import bench

    seen = []

    def stop(args, device, draft_spec, err, runtime=None):
        seen.append(runtime)
        raise ValueError("stopped where the models load")

    monkeypatch.setattr(bench, "load_target_and_draft", stop)
    rc = cli.main(["bench", *argv])
    return rc, capsys.readouterr().err, (seen[0] if seen else None)


def test_bench_tuned_llama_cpp_with_the_profiles_early_exit_draft_falls_back_to_torch_saying_why(
        tmp_path, capsys, monkeypatch, no_model_loading, built):
    """Fault class: a runtime tuning file's choice refused, after the model loaded, in terms of flags the user never
    typed (``--draft early-exit:24 ... on --runtime llama.cpp``); lab speculate falls back to torch."""
    path = _tune_smollm2()
    rc, err, runtime = _bench_until_load(monkeypatch, capsys, ["--out", str(tmp_path)])
    assert runtime is not None and runtime.runtime == "torch" and runtime.source is RuntimeSource.DEFAULT
    line = next(x for x in err.splitlines() if x.startswith("runtime:"))
    assert line.startswith("runtime: torch (default: torch, because the draft early-exit:24") and str(path) in line
    assert "--runtime llama.cpp" not in err and "--draft" not in err


def test_speculate_tuned_llama_cpp_with_a_draft_model_without_gguf_falls_back_to_torch():
    """Fault class: a tuned llama.cpp runtime refusing a typed draft model after the target loaded."""
    choice = RuntimeChoice("llama.cpp", RuntimeSource.TUNED, "tuned: /t/runtime-qwen2.5-coder.json", "float32")
    fell = runtime_choice.runtime_for_draft(choice, "Qwen/Qwen2.5-0.5B-Instruct", "model")
    assert fell.runtime == "torch" and "no GGUF file" in fell.said and "/t/runtime-qwen2.5-coder.json" in fell.said
    assert runtime_choice.runtime_for_draft(choice, "qwen2.5-coder-0.5b", "model") is choice
    assert runtime_choice.runtime_for_draft(choice, "prompt-lookup", "prompt-lookup") is choice
    with pytest.raises(ValueError, match="--draft Qwen/Qwen2.5-0.5B-Instruct: on --runtime llama.cpp"):
        runtime_choice.runtime_for_draft(RuntimeChoice("llama.cpp", RuntimeSource.TYPED, None, "float32"),
                                 "Qwen/Qwen2.5-0.5B-Instruct", "model")


def test_bench_tuned_llama_cpp_with_methods_llama_cpp_lacks_falls_back_to_torch(tmp_path, capsys, monkeypatch,
                                                                                no_model_loading, built):
    _tune()
    rc, err, runtime = _bench_until_load(monkeypatch, capsys, ["--model", "qwen2.5-coder", "--methods", "assisted",
                                                               "--out", str(tmp_path)])
    assert runtime is not None and runtime.runtime == "torch" and "--methods assisted" in runtime.said


@pytest.mark.parametrize("argv, says", [
    (["--runtime", "llama.cpp"], "--draft early-exit:24: an early-exit draft runs the target's own torch layers"),
    (["--also-runtime", "torch:bfloat16", "--methods", "assisted"],
     "--also-runtime torch:bfloat16: --methods 'assisted' asks for transformers' assisted generation"),
    (["--model", "qwen2.5-coder", "--runtime", "llama.cpp", "--methods", "assisted"],
     "--methods 'assisted' asks for transformers' assisted generation, which runs on torch only"),
    (["--model", "qwen2.5-coder", "--also-runtime", "llama.cpp", "--methods", "generate"],
     "--also-runtime llama.cpp: --methods 'generate'"),
])
def test_bench_runtime_or_side_that_cannot_run_the_draft_or_methods_is_refused_before_any_model_loads(
        tmp_path, capsys, monkeypatch, no_model_loading, built, argv, says):
    """Fault class: a run refused only after its models loaded (the draft or a --methods name the runtime or a
    side cannot run)."""
    monkeypatch.setattr(ggml, "load_ggml_model", lambda *a, **k: pytest.fail("a model was loaded"))
    rc, err, runtime = _bench_until_load(monkeypatch, capsys, [*argv, "--out", str(tmp_path)])
    assert rc == 2 and runtime is None and says in err and len(err.strip().splitlines()) == 1


class _FakeBinding:
    """The calls :class:`GgmlModel` makes of llama.cpp, answered for a SmolLM2-135M Q4_1 file: llama.cpp's own
    description of it is ``llama 256M Q4_1`` (a size label it picks from the layer count, not the model's size)."""

    LLAMA_FTYPE_MOSTLY_Q4_1 = 3
    N_PARAMS = 134_515_008  # SmolLM2-135M's tensors, tied embeddings counted once

    def __getattr__(self, name):  # the frees, the memory and the batch: nothing to do
        return lambda *a, **k: object()

    def llama_model_default_params(self):
        return SimpleNamespace(n_gpu_layers=-1)

    def llama_context_default_params(self):
        return SimpleNamespace()

    def llama_model_is_recurrent(self, model):
        return False

    llama_model_is_hybrid = llama_model_is_recurrent

    def llama_vocab_n_tokens(self, vocab):
        return 49152

    def llama_model_n_ctx_train(self, model):
        return 8192

    def llama_model_desc(self, model, buf, size):
        buf.value = b"llama 256M Q4_1"
        return len(buf.value)

    def llama_model_ftype(self, model):
        return self.LLAMA_FTYPE_MOSTLY_Q4_1

    def llama_ftype_name(self, ftype):
        return {self.LLAMA_FTYPE_MOSTLY_Q4_1: b"Q4_1"}[ftype]

    def llama_model_n_params(self, model):
        return self.N_PARAMS


def test_ggml_source_names_what_ran_on_llama_cpp_not_a_dequantized_file_or_llama_cpps_size_label(monkeypatch):
    """Fault class: a record that names what did not run. A SmolLM2-135M run on llama.cpp was recorded as
    ``source ... (Q4_1 GGUF, dequantized)`` (torch's way of loading it) and ``weights llama 256M Q4_1`` (llama.cpp's
    size label, not the model's 135M parameters); the record says llama.cpp's kernels ran the file's own Q4_1
    blocks, and the size it gives is the parameters counted from the file's tensors."""
    monkeypatch.setattr(ggml, "binding", lambda: _FakeBinding())
    model = ggml.GgmlModel("smollm2.gguf", SimpleNamespace(), name="smollm2")
    record = ggml.ggml_source("smollm2", model).as_dict()
    assert record["weights"] == record["dtype"] == "Q4_1" and record["runtime"] == "llama.cpp"
    assert record["parameters"] == _FakeBinding.N_PARAMS
    assert record["source"] == "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF, run by llama.cpp's kernels in its " \
                               "own quantization)"
    assert not any("256M" in str(v) or "dequantized" in str(v) for v in record.values()), record


def test_model_source_on_torch_says_the_gguf_was_dequantized_and_counts_no_parameters():
    """Negative control of the record above: torch dequantizes a GGUF profile at load, and says so."""
    from lab.models.profiles import PROFILES

    assert PROFILES["smollm2"].origin("torch") == "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized)"
    assert PROFILES["qwen2.5"].origin("llama.cpp") == "Qwen/Qwen2.5-3B-Instruct"  # a hub model: no GGUF to describe
