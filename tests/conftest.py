"""Shared fixtures: tiny in-memory models (unit tier) and the embedded model (integration)."""

from __future__ import annotations

import os

import pytest
import torch

from tests import support


@pytest.fixture(scope="session")
def tiny_model():
    """Session-scoped random tiny Llama; read-only: tests must not modify it."""
    return support.tiny_llama()


@pytest.fixture(scope="session", autouse=True)
def _torch_threads_per_xdist_worker():
    """Under ``pytest -n N`` each worker gets its share of the cores for torch's threads (one each for
    the quick loop's two workers on 2 cores): two threads per worker there oversubscribe the cores and
    the tiny models' many small ops ran about 15 % slower. An explicit ``OMP_NUM_THREADS`` wins; a
    serial run is left alone."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
    yield


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """Torch's thread count as it was before each test: a command run in-process with ``--threads 1`` (the
    runtime tuning, the Ray intervention's serial run) set it for the whole process, and every later test of
    the integration tier then ran its real models on one thread of two (the tier took minutes longer)."""
    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


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


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the session's page tests (:mod:`tests.browser`); skipped, with the
    reason and the command that installs it, where Debian's chromium or chromedriver is missing."""
    from tests.browser import Browser, missing

    reason = missing()
    if reason:
        pytest.skip(reason)
    with Browser() as b:
        yield b
