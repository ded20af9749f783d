"""lab.models without weights: devices, dtypes, prompts, sources, offline loading."""

from __future__ import annotations

import pytest
import torch

from lab.models import (
    DEFAULT_PROFILE,
    PROFILES,
    ModelUnavailableError,
    build_messages,
    cache_dir,
    default_dtype,
    encode_chat,
    eos_token_ids,
    load_model,
    parse_dtype,
    resolve_device,
    resolve_source,
)
from tests import support

# --------------------------------------------------------------------------- devices


@pytest.mark.parametrize("device", [None, "auto"])
def test_resolve_device_auto_returns_available_device(device):
    dev = resolve_device(device)
    assert dev.type in ("cpu", "cuda", "mps")
    if dev.type == "cpu":
        assert not torch.cuda.is_available() and not torch.backends.mps.is_available()


def test_resolve_device_cpu_returns_cpu():
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("device", ["banana", "tpu", "cuda:x"])
def test_resolve_device_invalid_string_raises_naming_it(device):
    with pytest.raises(ValueError, match=f"device={device!r}"):
        resolve_device(device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_resolve_device_cuda_unavailable_raises(device):
    with pytest.raises(ValueError, match=f"device={device!r}.*not available"):
        resolve_device(device)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_resolve_device_cuda_index_too_large_raises():
    with pytest.raises(ValueError, match="cuda:99"):
        resolve_device("cuda:99")


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="MPS is available here")
def test_resolve_device_mps_unavailable_raises():
    with pytest.raises(ValueError, match="device='mps'.*not available"):
        resolve_device("mps")


def test_resolve_device_unsupported_type_raises():
    with pytest.raises(ValueError, match="device='meta' is not supported"):
        resolve_device("meta")


# --------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("name, expected", [
    ("float32", torch.float32), ("fp32", torch.float32), ("float16", torch.float16),
    ("fp16", torch.float16), ("bfloat16", torch.bfloat16), ("bf16", torch.bfloat16),
    (torch.float16, torch.float16),
])
def test_parse_dtype_known_names_map_to_torch_dtype(name, expected):
    assert parse_dtype(name, torch.device("cpu")) is expected


@pytest.mark.parametrize("name", [None, "auto"])
def test_parse_dtype_none_uses_device_policy(name):
    cpu = torch.device("cpu")
    assert parse_dtype(name, cpu) is default_dtype(cpu) is torch.float32


@pytest.mark.parametrize("name", ["int8", "float64", "", torch.float64])
def test_parse_dtype_unknown_raises_naming_it(name):
    with pytest.raises(ValueError, match="dtype="):
        parse_dtype(name, torch.device("cpu"))


# --------------------------------------------------------------------------- prompts


def test_build_messages_prompt_only_one_user_message():
    assert build_messages("hi") == [{"role": "user", "content": "hi"}]


def test_build_messages_with_system_puts_it_first():
    assert build_messages("hi", system="be brief") == [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


@pytest.mark.parametrize("prompt", ["", "   ", "\n\t", None])
def test_build_messages_empty_prompt_raises_naming_it(prompt):
    with pytest.raises(ValueError, match="prompt="):
        build_messages(prompt)


def test_build_messages_empty_system_raises_naming_it():
    with pytest.raises(ValueError, match="system=' '"):
        build_messages("hi", system=" ")


@pytest.mark.parametrize("make_tokenizer", [support.chatml_tokenizer, support.gemma_tokenizer, support.base_tokenizer])
def test_encode_chat_each_template_starts_with_exactly_one_bos(make_tokenizer):
    """Regression (fault class: double BOS from rendering the template then tokenizing with
    special tokens): the ids start with one BOS, not two, for ChatML, Gemma and base tokenizers."""
    tok = make_tokenizer()
    ids = encode_chat(tok, build_messages("hello world"))
    assert ids.dtype == torch.int64 and ids.dim() == 2 and ids.shape[0] == 1
    assert ids[0, 0].item() == tok.bos_token_id
    assert ids[0, 1].item() != tok.bos_token_id
    if make_tokenizer is not support.chatml_tokenizer:  # ChatML reuses its BOS as the turn marker
        assert (ids[0] == tok.bos_token_id).sum().item() == 1


def test_encode_chat_bos_adding_tokenizer_with_bos_template_still_one_bos():
    """A tokenizer that prepends BOS *and* a template that writes it: still one BOS."""
    tok = support._word_tokenizer(["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>",
                                  support.GEMMA_TEMPLATE, add_bos=True)
    ids = encode_chat(tok, build_messages("hello"))
    assert (ids[0] == tok.bos_token_id).sum().item() == 1


def test_encode_chat_template_writing_two_bos_raises():
    """The double-BOS guard fires when the ids really do start with two BOS tokens."""
    tok = support.gemma_tokenizer()
    tok.chat_template = "{{ bos_token }}" + support.GEMMA_TEMPLATE
    with pytest.raises(ValueError, match="two BOS"):
        encode_chat(tok, build_messages("hello"))


def test_encode_chat_default_system_prompt_injected_by_chatml_template():
    tok = support.chatml_tokenizer()
    text = tok.decode(encode_chat(tok, build_messages("hello"))[0])
    assert "helpful model" in text and text.rstrip().endswith("assistant")


@pytest.mark.parametrize("messages, match", [([], "empty"), ([{"content": "x"}], "role")])
def test_encode_chat_bad_messages_raise(messages, match):
    with pytest.raises(ValueError, match=match):
        encode_chat(support.chatml_tokenizer(), messages)


def test_eos_token_ids_include_end_of_turn_marker(tiny_model):
    tok = support.chatml_tokenizer()
    ids = eos_token_ids(tiny_model, tok)
    assert tok.convert_tokens_to_ids("<|im_end|>") in ids and tiny_model.config.eos_token_id in ids


# --------------------------------------------------------------------------- sources and loading


@pytest.mark.parametrize("name", ["not-a-model", "a/b/c", "owner/"])
def test_resolve_source_unknown_name_raises_naming_it_and_profiles(name):
    with pytest.raises(ValueError, match=f"model={name!r}.*smollm2"):
        resolve_source(name)


@pytest.mark.parametrize("name", ["", "  ", None])
def test_resolve_source_empty_raises(name):
    with pytest.raises(ValueError, match="empty"):
        resolve_source(name)


def test_resolve_source_hub_id_and_local_path_pass_through(tmp_path):
    assert resolve_source("owner/name") == ("owner/name", None)
    assert resolve_source(str(tmp_path)) == (str(tmp_path), None)


def test_resolve_source_hub_profile_returns_repo():
    assert resolve_source("qwen2.5") == (PROFILES["qwen2.5"].repo, PROFILES["qwen2.5"])


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path


def test_load_model_unknown_hub_id_offline_raises_unavailable_naming_default(monkeypatch):
    """Offline (HF_HUB_OFFLINE=1, set by conftest), an uncached hub id fails with a message
    naming the model and the embedded default; nothing is downloaded."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    name = "lab-tests-nonexistent/no-such-model"
    with pytest.raises(ModelUnavailableError) as info:
        load_model(name, device="cpu")
    assert name in str(info.value) and DEFAULT_PROFILE in str(info.value)


def test_load_model_bad_device_raises_before_loading():
    with pytest.raises(ValueError, match="device='banana'"):
        load_model("lab-tests-nonexistent/no-such-model", device="banana")
