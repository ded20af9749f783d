"""Shared fixtures: tiny in-memory models (unit tier) and the embedded model (integration)."""

from __future__ import annotations

import pytest
import torch

from tests import support


@pytest.fixture(scope="session")
def tiny_model():
    """Session-scoped random tiny Llama; read-only: tests must not modify it."""
    return support.tiny_llama()


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module: tiny models run fastest so, and two threads on a busy 2-core
    machine are far slower. The previous count is restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def no_model_loading(monkeypatch):
    """Fail the test if anything tries to load or prepare a model: for checks that must refuse bad
    arguments before any model loads."""
    import lab.models.loading

    def refuse(*a, **k):
        raise AssertionError("the model was loaded before the arguments were validated")

    monkeypatch.setattr(lab.models.loading, "load_model", refuse)
    monkeypatch.setattr(lab.models.loading, "_materialize_gguf", refuse)


@pytest.fixture(scope="session")
def chatml_tokenizer():
    return support.chatml_tokenizer()


@pytest.fixture(scope="session")
def smollm2():
    """The embedded default (SmolLM2-135M-Instruct), float32 on CPU: ``(model, tokenizer)``."""
    from lab.models.loading import load_model

    torch.set_num_threads(max(1, torch.get_num_threads()))
    return load_model("smollm2", device="cpu")


@pytest.fixture(scope="session")
def ggml_smollm2():
    """The embedded default's GGUF on the llama.cpp runtime, one thread: ``(model, tokenizer)``. Fails (not
    skips) when ``make peer`` has not built the runtime: the tiers that use it run after ``make peer``."""
    from lab.runtime.ggml import RuntimeUnavailableError, binding, load_ggml_model

    try:
        binding()
    except RuntimeUnavailableError as exc:
        pytest.fail(f"the llama.cpp runtime must be built for this tier (make peer): {exc}")
    return load_ggml_model("smollm2", n_threads=1)
