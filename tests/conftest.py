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


@pytest.fixture(scope="session")
def chatml_tokenizer():
    return support.chatml_tokenizer()


@pytest.fixture(scope="session")
def smollm2():
    """The embedded default (SmolLM2-135M-Instruct), float32 on CPU: ``(model, tokenizer)``."""
    from lab.models.loading import load_model

    torch.set_num_threads(max(1, torch.get_num_threads()))
    return load_model("smollm2", device="cpu")
