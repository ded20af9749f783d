"""Quantized weights on the real models: the GGUF files' own 4-bit codes through torch's CPU kernel.

``load_model(..., weights="q4")`` checks every converted layer bit for bit against the float32
dequantization before using it, so loading is itself the exactness test of the codes. Here:

* the q4 pair (Qwen2.5-Coder-1.5B verified by its 0.5B sibling, both q4): greedy speculative
  decoding emits exactly the q4 target's own greedy tokens (lossless relative to the target as
  loaded), and the q4 target's next-token distributions stay close to float32's on held-out
  prompts (top-1 agreement, mean KL, entropy shift recorded in the integration log);
* ``lab entropy``, ``lab sinks`` and ``lab speculate`` run end to end on SmolLM2 with ``--weights q4``
  and record the representation in their reports.

Sizing: converting the pair from the float32 cache (~1 min on 2 cores), 2 prompts x 24 greedy tokens
target alone and speculative (~1 min on a q4 target), 3 short forward passes for the numerics,
three SmolLM2 commands (~30 s): about 3-4 minutes on 2 idle cores.
"""

from __future__ import annotations

import json

import pytest
import torch

from lab.models.chat import build_messages, encode_chat, eos_token_ids
from lab.models.qlinear import Int4Linear, Int8Linear
from lab.models.source import model_source
from lab.speculative.drafts import model_draft
from lab.speculative.loop import speculative_generate, target_generate
from lab.speculative.settings import SpeculativeSettings

GREEDY_PROMPTS = (
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain the difference between a list and a tuple in Python.",
)
NEW_TOKENS = 24
GAMMA = 4
# Held-out text for the numerics (not a calibration or study prompt).
NUMERICS_TEXTS = (
    "def quicksort(items):\n    \"\"\"Sort a list with quicksort.\"\"\"\n",
    "The Python standard library's collections module provides specialized container datatypes.",
)
# q4 keeps the file's codes; what moves the distribution is the bfloat16 rounding of activations
# and of the int4 scales. A top-1 disagreement is a near-tie flipped: more than 1 in 10 positions
# would mean a wrong layer, not rounding (a wrong layer gives ~0 agreement).
MIN_TOP1_AGREEMENT = 0.9


@pytest.fixture(scope="module")
def q4_pair():
    from lab.models.loading import load_model

    target, tok = load_model("qwen2.5-coder", device="cpu", weights="q4")
    draft_model, dtok = load_model("qwen2.5-coder-0.5b", device="cpu", weights="q4")
    return target, tok, draft_model, dtok


def test_q4_pair_layers_are_int4_where_the_file_has_4_bit_codes(q4_pair, lab_log):
    target, _, draft_model, _ = q4_pair
    for model in (target, draft_model):
        kinds = {type(m).__name__ for m in model.modules() if isinstance(m, (Int4Linear, Int8Linear))}
        assert "Int4Linear" in kinds, kinds
        assert model_source(model).weights == "q4"
        assert not any(type(m) is torch.nn.Linear for m in model.modules())
    lab_log.record(target_layers=model_source(target).weights_layers, draft_layers=model_source(draft_model).weights_layers)


@pytest.mark.parametrize("prompt", GREEDY_PROMPTS)
def test_q4_pair_greedy_speculative_equals_q4_target_alone(q4_pair, prompt, lab_log):
    target, tok, draft_model, dtok = q4_pair
    draft = model_draft(target, draft_model, target_tokenizer=tok, draft_tokenizer=dtok, name="qwen2.5-coder-0.5b")
    ids = encode_chat(tok, build_messages(prompt))
    eos = eos_token_ids(target, tok)
    ref = target_generate(target, ids, max_new_tokens=NEW_TOKENS, eos_token_ids=eos)
    res = speculative_generate(target, draft, ids,
                               SpeculativeSettings(max_new_tokens=NEW_TOKENS, gamma=GAMMA, eos_token_ids=eos))
    lab_log.record(prompt_tokens=ids.shape[1], n_tokens=len(res.tokens), alpha=res.alpha,
                   target_s=ref.total_time_s, speculative_s=res.total_time_s)
    assert len(ref.tokens) == NEW_TOKENS, tok.decode(ref.tokens)
    assert res.tokens == ref.tokens, f"{tok.decode(res.tokens)!r} != {tok.decode(ref.tokens)!r}"


def test_q4_target_distributions_close_to_float32(q4_pair, qwen_pair, lab_log):
    """Top-1 agreement with the float32 target >= MIN_TOP1_AGREEMENT over every position; KL recorded."""
    q4_target, tok = q4_pair[0], q4_pair[1]
    f32_target = qwen_pair[0]
    agree = total = 0
    kls, dhs = [], []
    with torch.no_grad():
        for text in NUMERICS_TEXTS:
            ids = tok(text, return_tensors="pt").input_ids
            ref = torch.log_softmax(f32_target(ids).logits[0].float(), dim=-1)
            out = torch.log_softmax(q4_target(ids).logits[0].float(), dim=-1)
            agree += int((ref.argmax(-1) == out.argmax(-1)).sum())
            total += ref.shape[0]
            kls.append((ref.exp() * (ref - out)).sum(-1))
            entropy_bits = lambda lp: -(lp.exp() * lp).sum(-1) / torch.log(torch.tensor(2.0))  # noqa: E731
            dhs.append(entropy_bits(out) - entropy_bits(ref))
    kl, dh = torch.cat(kls), torch.cat(dhs)
    lab_log.record(positions=total, top1_agreement=agree / total, mean_kl_nats=float(kl.mean()),
                   max_kl_nats=float(kl.max()), mean_abs_entropy_shift_bits=float(dh.abs().mean()),
                   max_abs_entropy_shift_bits=float(dh.abs().max()))
    assert agree >= MIN_TOP1_AGREEMENT * total, f"{agree}/{total} positions agree on the top token"


@pytest.mark.parametrize("command", [["entropy", "What is a hash table?", "--max-new-tokens", "8"],
                                     ["sinks", "Explain list comprehensions in Python."],
                                     ["speculate", "Explain hash tables.", "--max-new-tokens", "12",
                                      "--draft", "early-exit:24", "--gamma", "3"]])
def test_commands_run_with_q4_weights_and_record_them(command, lab_log):
    rc, report = lab_log.cli([*command, "--model", "smollm2", "--weights", "q4"])
    assert rc == 0 and report is not None
    data = json.loads((report / "report.json").read_text())
    text = json.dumps(data)
    assert '"weights": "q4"' in text, f"{report}/report.json does not record the weights"


def test_study_runs_on_q4_weights_and_records_them(lab_log):
    """`lab study --weights q4` (SmolLM2's own 4-bit codes, early-exit draft) runs end to end; the
    representation is a setting of the work directory and named in the summary."""
    rc, report = lab_log.cli(["study", "--model", "smollm2", "--weights", "q4", "--limit", "2",
                              "--max-new-tokens", "6", "--resamples", "99", "--device", "cpu"])
    assert rc == 0 and report is not None
    study = json.loads((report / "report.json").read_text())
    assert study["settings"]["weights"] == "q4"
    assert "q4 weights" in (report / "summary.md").read_text()


def test_bench_weights_on_smollm2_times_every_layer_and_profiles_a_step(lab_log):
    """`lab bench-weights` on SmolLM2: the kernel table covers every linear layer of each GGUF type in each
    representation (q4 only where the file has 4-bit codes), and each representation's decode step is
    profiled with its kernel time in the family its layers belong to (q4: int4 for the Q4_1 layers,
    int8 for the Q8_0 LM head; float32: dense only)."""
    rc, report = lab_log.cli(["bench-weights", "--model", "smollm2", "--problems", "1", "--repeats", "1",
                              "--steps", "2"])
    assert rc == 0 and report is not None
    data = json.loads((report / "report.json").read_text())
    from lab.models.loading import load_model

    model, _ = load_model("smollm2", device="cpu")
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    for rep in ("float32", "bfloat16", "int8"):
        assert sum(r["layers"] for r in data["kernels"] if r["representation"] == rep) == n_linear
    assert {r["gguf_type"] for r in data["kernels"] if r["representation"] == "q4"} == {"Q4_1"}
    profiles = {p["weights"]: p for p in data["step_profiles"]}
    assert set(profiles) == {"float32", "bfloat16", "int8", "q4"}
    assert profiles["q4"]["family_ms"]["int4"] > 0 and profiles["q4"]["family_ms"]["int8"] > 0
    assert profiles["float32"]["family_ms"]["dense"] > 0 and profiles["float32"]["family_ms"]["int4"] == 0
    assert sum(data["file_linear_bytes"].values()) < sum(profiles["float32"]["family_bytes"].values())
    assert "by kernel family" in (report / "summary.md").read_text()
