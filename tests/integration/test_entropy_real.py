"""The entropy tracker and ``lab entropy`` on the embedded SmolLM2-135M-Instruct.

The tracker decodes with a KV cache; the reference here is one separate forward
pass over prompt + generated tokens (no cache), with entropies computed in float64
from its logits, independently of lab.entropy and lab.tracker.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from lab.models.chat import build_messages, encode_chat, eos_token_ids
from lab.reports import rows_from_csv
from lab.tracker.loop import track_generate
from tests.support import warped_reference_probs

# A KV-cached decode and a full forward pass compute the same attention with a
# different float32 summation order (30 layers, 576 hidden): logits then differ by
# ~1e-5..1e-4 (measured max 3e-5 bits of entropy on these prompts); 2e-3 bits
# leaves margin for other BLAS builds while any off-by-one-position or wrong-row
# error (neighbouring steps differ by bits) still fails.
ENTROPY_ATOL_BITS = 2e-3
PROB_ATOL = 1e-3  # same reason, on probabilities
NEW_TOKENS = 20


def _reference(model, prompt_ids, new_ids):
    """float64 log-probs ``[n, V]`` for each generated position, from one uncached pass."""
    full = torch.cat([prompt_ids, torch.tensor([new_ids])], dim=1)  # [1, S + n]
    with torch.no_grad():
        logits = model(input_ids=full, use_cache=False).logits[0]  # [S + n, V]
    s = prompt_ids.shape[1]
    return torch.log_softmax(logits[s - 1: s - 1 + len(new_ids)].double(), dim=-1)


def _entropy_bits(log_p):
    p = log_p.exp()
    return -(p * log_p.clamp_min(-1e4)).sum(-1) / math.log(2)


@pytest.mark.parametrize("kwargs", [
    {},                                                         # greedy
    {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "seed": 11},  # sampled
], ids=["greedy", "sampled"])
def test_tracker_real_model_entropies_match_full_forward(smollm2, kwargs):
    """Per-step raw entropy, varentropy, chosen-token probability and alternatives equal a
    full forward recomputation; greedy tokens are its argmax."""
    model, tok = smollm2
    prompt_ids = encode_chat(tok, build_messages("Name three rivers in Europe."))
    r = track_generate(model, tok, prompt_ids, max_new_tokens=NEW_TOKENS, **kwargs)
    log_p = _reference(model, prompt_ids, r.new_token_ids)
    h = _entropy_bits(log_p)
    p = log_p.exp()
    surprisal = -log_p.clamp_min(-1e4) / math.log(2)
    varent = (p * (surprisal - h[:, None]) ** 2).sum(-1)
    recorded = torch.tensor([s.entropy_bits for s in r.steps], dtype=torch.float64)
    assert torch.allclose(recorded, h, atol=ENTROPY_ATOL_BITS), (recorded - h).abs().max()
    for i, s in enumerate(r.steps):
        assert s.varentropy_bits2 == pytest.approx(varent[i].item(), abs=10 * ENTROPY_ATOL_BITS)
        assert s.chosen_prob == pytest.approx(p[i, s.token_id].item(), abs=PROB_ATOL)
        assert s.alternatives[0][2] == pytest.approx(p[i].max().item(), abs=PROB_ATOL)
    if not kwargs:
        assert r.new_token_ids == log_p.argmax(-1).tolist()
    else:  # the entropy of the filtered distribution each token was drawn from, recomputed from the reference
        for i, s in enumerate(r.steps):
            q = warped_reference_probs(log_p[i], kwargs["temperature"], kwargs["top_k"], kwargs["top_p"])
            h_q = -(q[q > 0] * q[q > 0].log()).sum().item() / math.log(2)
            assert s.sampled_entropy_bits == pytest.approx(h_q, abs=ENTROPY_ATOL_BITS), i
            assert q[s.token_id] > 0, f"step {i} sampled token {s.token_id} outside the filtered support"
        assert all(0 <= s.sampled_entropy_bits <= math.log2(40) + 1e-4 for s in r.steps)


def _run_cli(lab_log, *extra):
    rc, report = lab_log.cli(["entropy", "Give me a word that rhymes with [cat].", "--max-new-tokens", "12",
                              "--device", "cpu", *extra])
    assert rc == 0 and report is not None
    return report


@pytest.mark.parametrize("extra", [(), ("--temperature", "0.9", "--top-p", "0.95", "--seed", "3")],
                         ids=["greedy", "sampled"])
def test_cli_entropy_real_model_writes_parsable_complete_report(lab_log, capsys, smollm2, extra):
    """`lab entropy` end to end: all four files exist, JSON parses, CSV matches JSON, settings recorded."""
    report = _run_cli(lab_log, *extra)
    assert sorted(p.name for p in report.iterdir()) == ["entropy.png", "index.html", "report.json", "summary.md", "tokens.csv"]
    data = json.loads((report / "report.json").read_text())
    assert data["model"]["model"] == "smollm2" and data["vocab_size"] == 49152
    # The stop reason must agree with the tokens: the whole budget, or an EOS as the last token before it.
    eos = eos_token_ids(*smollm2)
    if data["stop_reason"] == "max_new_tokens":
        assert len(data["steps"]) == 12 and not eos & set(data["new_token_ids"][:-1]), data["new_token_ids"]
    else:
        assert data["stop_reason"] == "eos", data["stop_reason"]
        assert 1 <= len(data["steps"]) <= 12 and data["new_token_ids"][-1] in eos, data["new_token_ids"]
    lab_log.record(n_tokens=len(data["steps"]), stop=data["stop_reason"],
                   mean_entropy_bits=sum(s["entropy_bits"] for s in data["steps"]) / len(data["steps"]))
    rows = rows_from_csv(report / "tokens.csv")
    assert [int(r["token_id"]) for r in rows] == data["new_token_ids"]
    assert [float(r["entropy_bits"]) for r in rows] == pytest.approx([s["entropy_bits"] for s in data["steps"]])
    if extra:
        assert data["settings"]["temperature"] == 0.9 and data["seed"] == 3
        assert any(s["sampled_entropy_bits"] > 0 for s in data["steps"])
    else:
        assert data["seed"] is None and all(s["sampled_entropy_bits"] == 0 for s in data["steps"])
    assert "[cat]" in (report / "summary.md").read_text()
    assert "[cat]" in capsys.readouterr().out  # the prompt's brackets printed, not parsed as markup
