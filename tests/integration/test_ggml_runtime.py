"""The llama.cpp runtime (``lab.runtime.ggml``) on the embedded SmolLM2 GGUF: KV rollback, the lab's loops
on it, and its numerics against the torch float32 model dequantized from the same file.

Needs ``make peer`` (``make test`` builds it first); the runtime runs one thread here so its
sums are reduced in one order (results do not depend on the machine's load).
"""

from __future__ import annotations

import pytest
import torch

from lab.decode import generate, new_cache

pytestmark = pytest.mark.integration

PROMPT = "Write a Python function that returns the sum of the squares of a list of numbers."


@pytest.fixture(scope="module")
def prompt_ids(ggml_smollm2):
    from lab.models.chat import build_messages, encode_chat

    return encode_chat(ggml_smollm2[1], build_messages(PROMPT, None))


def test_ggml_rollback_then_refeed_equals_a_cache_that_never_held_the_rejected_tokens(ggml_smollm2, prompt_ids):
    """crop(-n) removes the last n positions from llama.cpp's KV memory: feeding the same tokens again
    gives bit-identical logits to a cache that never saw the n rejected ones (same pass shapes)."""
    model, _ = ggml_smollm2
    ids = prompt_ids
    s = ids.shape[1]
    cache = new_cache(model)
    model(ids[:, : s - 4], cache)
    clean = model(ids[:, s - 4 :], cache, logits_to_keep=4).logits
    cache = new_cache(model)
    model(ids[:, : s - 4], cache)
    model(torch.tensor([[17, 23, 99, 4]]), cache, logits_to_keep=4)  # four "rejected draft tokens"
    cache.crop(-4)
    assert cache.get_seq_length() == s - 4
    again = model(ids[:, s - 4 :], cache, logits_to_keep=4).logits
    assert torch.equal(clean, again)
    # control: without the crop the rejected tokens stay in the attention and the logits move
    cache = new_cache(model)
    model(ids[:, : s - 4], cache)
    model(torch.tensor([[17, 23, 99, 4]]), cache, logits_to_keep=4)
    cache.length -= 4  # positions reused, memory not cleared: llama.cpp refuses or attends to stale keys
    try:
        stale = model(ids[:, s - 4 :], cache, logits_to_keep=4).logits
    except RuntimeError:
        return
    assert not torch.equal(clean, stale)


def test_ggml_logits_rows_are_the_last_positions_of_the_pass(ggml_smollm2, prompt_ids):
    """logits_to_keep=k returns the last k positions in order: row j of a k-row pass equals the row of a
    pass that stopped at that position (tolerance: llama.cpp's batch shapes change the reduction order)."""
    model, _ = ggml_smollm2
    s = prompt_ids.shape[1]
    cache = new_cache(model)
    rows = model(prompt_ids, cache, logits_to_keep=3).logits[0]  # [3, V]
    for j, end in enumerate((s - 2, s - 1, s)):
        cache = new_cache(model)
        one = model(prompt_ids[:, :end], cache, logits_to_keep=1).logits[0, 0]
        assert one.argmax() == rows[j].argmax()
        assert torch.allclose(one, rows[j], atol=0.05, rtol=0), f"row {j}: max diff {(one - rows[j]).abs().max():.3g}"


def test_ggml_numerics_against_torch_float32_top1_and_kl(ggml_smollm2, smollm2, prompt_ids):
    """The same GGUF file on both runtimes, teacher-forced over the prompt: llama.cpp multiplies the
    quantized codes with 8-bit activations, torch the dequantized float32 weights. Top-1 agreement
    >= 0.9 and mean KL(torch || ggml) <= 0.05 nats; a one-position shift of the rows (control)
    breaks both."""
    model, _ = ggml_smollm2
    torch_model, _ = smollm2
    with torch.inference_mode():
        ref = torch_model(prompt_ids).logits[0].float()  # [S, V]
    got = model(prompt_ids, new_cache(model), logits_to_keep=0).logits[0]  # [S, V]
    assert got.shape == ref.shape

    def agreement(a, b):
        top1 = (a.argmax(-1) == b.argmax(-1)).float().mean().item()
        kl = torch.nn.functional.kl_div(b.log_softmax(-1), a.log_softmax(-1), log_target=True,
                                        reduction="none").sum(-1).mean().item()
        return top1, kl

    top1, kl = agreement(ref, got)
    assert top1 >= 0.9 and kl <= 0.05, f"top-1 {top1:.3f}, KL {kl:.4f}"
    shifted_top1, shifted_kl = agreement(ref[1:], got[:-1])
    assert shifted_top1 < 0.5 and shifted_kl > 0.5, f"control: top-1 {shifted_top1:.3f}, KL {shifted_kl:.4f}"


def test_ggml_target_alone_greedy_equals_the_step_by_step_argmax(ggml_smollm2, prompt_ids):
    """The decode core's loop on the runtime: each emitted token is the argmax of a one-token pass."""
    model, tok = ggml_smollm2
    out = generate(model, prompt_ids, max_new_tokens=12)
    assert len(out.tokens) == 12 and out.prefill_time_s > 0
    cache = new_cache(model)
    logits = model(prompt_ids, cache).logits[0, -1]
    for token in out.tokens:
        assert int(logits.argmax()) == token
        logits = model(torch.tensor([[token]]), cache).logits[0, -1]


def test_ggml_greedy_speculative_with_prompt_lookup_equals_target_alone(ggml_smollm2):
    """The lab's speculative loop on llama.cpp's kernels, greedy, prompt-lookup draft (a repetitive prompt,
    so drafts are proposed and accepted): the same tokens as the runtime's target alone."""
    from lab.models.chat import build_messages, encode_chat
    from lab.speculative.draft_specs import make_draft
    from lab.speculative.loop import speculative_generate, target_generate
    from lab.speculative.settings import SpeculativeSettings

    model, tok = ggml_smollm2
    ids = encode_chat(tok, build_messages("Copy this sentence exactly, word for word: The quick brown fox jumps over "
                                          "the lazy dog near the river bank.", None))
    base = target_generate(model, ids, max_new_tokens=24)
    draft = make_draft(model, "prompt-lookup", target_tokenizer=tok)
    res = speculative_generate(model, draft, ids, SpeculativeSettings(max_new_tokens=24, gamma=4))
    assert res.tokens == base.tokens
    assert sum(r.n_accepted for r in res.rounds) >= 6  # (10 measured) the loop did verify drafts, not only single steps


def test_ggml_early_exit_draft_is_refused_in_one_line(ggml_smollm2):
    from lab.speculative.draft_specs import make_draft

    with pytest.raises(ValueError, match="early-exit draft runs the target's own torch layers") as info:
        make_draft(ggml_smollm2[0], "early-exit:12")
    assert "\n" not in str(info.value)


def test_ggml_pass_past_the_context_is_refused(ggml_smollm2):
    model, _ = ggml_smollm2
    cache = new_cache(model)
    with pytest.raises(ValueError, match="exceed the llama.cpp context"):
        model(torch.zeros(1, model.n_ctx + 1, dtype=torch.long), cache)
    assert cache.get_seq_length() == 0


def test_ggml_stale_cache_is_refused(ggml_smollm2, prompt_ids):
    model, _ = ggml_smollm2
    old = new_cache(model)
    new_cache(model)
    with pytest.raises(ValueError, match="not this model's live cache"):
        model(prompt_ids, old)


def test_tune_runtime_writes_a_choice_the_next_command_runs(ggml_smollm2, lab_log, capsys, monkeypatch):
    """``lab bench-tune-runtime`` on SmolLM2's GGUF times the three candidates and writes the winner; ``lab entropy``
    without ``--runtime`` then runs it and says so. Which one wins is not asserted (that is the measurement); that the
    next command follows the file is."""
    import json

    from lab.tuning import RUNTIME

    monkeypatch.delenv("LAB_RUNTIME", raising=False)  # the default's own test: the tiers' torch would hide the file

    rc, report = lab_log.cli(["bench-tune-runtime", "--model", "smollm2", "--max-new-tokens", "4", "--repeats", "1",
                              "--humaneval", "tuning:1", "--threads", "1"])
    assert rc == 0 and report is not None
    data = json.loads((report / "report.json").read_text())
    assert data["result"]["candidates"] == ["torch (float32)", "torch (q4)", "llama.cpp (gguf)"]
    assert len(data["result"]["runs"]) == 3 * 2  # three candidates, two prompts (a code prompt, one problem)
    tuned = json.loads(RUNTIME.path("smollm2").read_text())
    assert tuned["runtime"] == data["result"]["winner_runtime"] and tuned["report"] == str(report)
    lab_log.record(winner=data["result"]["winner"])
    capsys.readouterr()
    rc, report = lab_log.cli(["entropy", "Say hi.", "--model", "smollm2", "--max-new-tokens", "2"])
    err = capsys.readouterr().err
    assert rc == 0 and f"runtime: {tuned['runtime']} (tuned: {RUNTIME.path('smollm2')}" in err
