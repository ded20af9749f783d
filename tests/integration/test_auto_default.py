"""What `lab speculate --model qwen2.5-coder` runs with no flags: the auto draft on llama.cpp's kernels.

Needs ``make peer`` (``make test`` builds it first). The tiers set ``LAB_RUNTIME=torch`` so that a test runs
what it names; these tests unset it to run the default as a user gets it. Greedy, so the tokens must be the
target's alone, whatever auto chose round by round (up to a near-tie of llama.cpp's multi-row kernels); the grounded task (a rename whose answer copies the
prompt) must make auto draft by prompt lookup, and the new-text prompt must cost it no model rounds (on
this runtime the 0.5B draft never pays: docs/design.md). About 40 s on 2 cores.
"""

from __future__ import annotations

import json

import pytest

from lab.bench.prompt_split import grounded_tasks

pytestmark = pytest.mark.integration

NEW_TEXT = "Write a Python function that merges two sorted lists."
N_NEW = 48
# llama.cpp reduces a pass of several rows in another order than a one-row step, and which passes auto runs
# depends on its timings: greedy tokens may part at a near-tie (docs/results.md, "Correctness on the runtime").
# A parting is accepted only there: both tokens the target's top two, their logits this close.
NEAR_TIE_LOGITS = 0.1


@pytest.fixture(scope="module")
def ggml_target():
    from lab.runtime.ggml import load_ggml_model

    return load_ggml_model("qwen2.5-coder", n_threads=2)


def _target_alone(ggml_target, prompt: str) -> list[int]:
    from lab.models.chat import build_messages, encode_chat, eos_token_ids
    from lab.speculative.loop import target_generate

    model, tok = ggml_target
    ids = encode_chat(tok, build_messages(prompt, None))
    return target_generate(model, ids, max_new_tokens=N_NEW, eos_token_ids=eos_token_ids(model, tok)).tokens


def _parts_only_at_a_near_tie(ggml_target, prompt: str, got: list[int], want: list[int]) -> str | None:
    """None if ``got`` equals ``want``, or first parts from it where the target's top two are those two tokens
    within :data:`NEAR_TIE_LOGITS`; else why not."""
    import torch

    from lab.decode import new_cache
    from lab.models.chat import build_messages, encode_chat

    if got == want:
        return None
    i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    if i == min(len(got), len(want)):
        return f"one output is a prefix of the other ({len(got)} against {len(want)} tokens)"
    model, tok = ggml_target
    ids = torch.cat([encode_chat(tok, build_messages(prompt, None)), torch.tensor([want[:i]], dtype=torch.long)], 1)
    logits = model(ids, new_cache(model)).logits[0, -1]
    top = torch.topk(logits, 2)
    gap = float(top.values[0] - top.values[1])
    if {got[i], want[i]} == set(top.indices.tolist()) and gap <= NEAR_TIE_LOGITS:
        return None
    return f"token {i}: {got[i]} against the target's {want[i]}, top-2 gap {gap:.3f} logits"


@pytest.mark.parametrize("kind", ["new-text", "grounded"])
def test_speculate_without_flags_is_auto_on_llama_cpp_and_the_targets_tokens(monkeypatch, lab_log, ggml_target,
                                                                                kind):
    monkeypatch.delenv("LAB_RUNTIME", raising=False)
    prompt = NEW_TEXT if kind == "new-text" else next(t["prompt"] for t in grounded_tasks("held-back")
                                                      if t["kind"] == "rename-function")
    rc, report = lab_log.cli(["speculate", prompt, "--model", "qwen2.5-coder", "--max-new-tokens", str(N_NEW)])
    assert rc == 0 and report is not None
    data = json.loads((report / "report.json").read_text())
    settings = data["settings"]
    assert settings["draft"] == "auto:qwen2.5-coder-0.5b" and settings["runtime"] == "llama.cpp"
    assert settings["runtime_source"] == "default: llama.cpp, built by make peer"
    sources = [r["draft_source"] for r in data["rounds"]]
    lab_log.record(kind=kind, rounds=len(sources), **{s: sources.count(s) for s in ("none", "prompt-lookup", "model")},
                   alpha=data["acceptance"].get("alpha"))
    why = _parts_only_at_a_near_tie(ggml_target, prompt, data["new_token_ids"], _target_alone(ggml_target, prompt))
    assert why is None, why
    if kind == "grounded":
        assert sources.count("prompt-lookup") >= 2, sources  # the copy is drafted
        assert len(sources) < len(data["new_token_ids"]), "some round must emit more than one token"
    else:
        assert sources.count("model") <= 1, sources
