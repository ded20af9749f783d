"""The real two-model pair: Qwen2.5-Coder-1.5B-Instruct verified with its 0.5B sibling as the draft.

The pair loads once per session (``qwen_pair``, about 9 GB of RAM in float32); the
commands run end to end on it through the same loaded models (``load_model`` is
pointed at them), so the tier never holds two copies.

Sizing (the Qwen part kept under ~5 minutes on 2 idle cores), from
per-step timings on this machine: a 1.5B decode step ~0.37 s and a 0.5B step
~0.15 s on 2 idle threads (re-measured per step while the machine was busy, see
docs/testing.md, "Integration log"). Greedy equality: 3 prompts x 32
tokens x (target alone + speculative) ~ 90 s; the sampling test: N_SAMPLED runs of
one verify pass and one draft step on llama.cpp's kernels ~ 15 s; the three commands ~ 30 s; loading
~ 10 s: about 2.5 minutes in all.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from lab.models.chat import build_messages, encode_chat, eos_token_ids
from lab.sampling import SamplingConfig, sampling_probs
from lab.speculative.drafts import model_draft
from lab.speculative.loop import speculative_generate, target_generate
from lab.speculative.settings import SpeculativeSettings
from tests.support import chisq_pvalue

GREEDY_PROMPTS = (
    "Write a Python function that merges two sorted lists.",
    "Explain what a Python generator is, with a short example.",
    "Write a bash one-liner that counts lines in all .py files, and explain it.",
)
GREEDY_NEW_TOKENS = 24  # six or more verify rounds at GREEDY_GAMMA; every prompt here answers at length (asserted)
GREEDY_GAMMA = 4
P_THRESHOLD = 1e-3  # false-positive rate of the chi-square check: 1 in 1,000 runs of a correct loop
N_SAMPLED = 150  # seeded runs for the first-token test: about 0.1 s each on llama.cpp, 2 idle cores
# Top-k on both sides, as the loop does. With this prompt the target's top-6 masses are
# ~0.50, 0.23 and four of ~0.06-0.07: every expected count >= 5 at N_SAMPLED.
FIRST_TOKEN_SAMPLING = SamplingConfig(temperature=1.0, top_k=6)
# A one-token raw prompt: no prefill, so a run costs one verify pass and one draft step.
# Measured: TV(p, q) = 0.69 under this filter (the 0.5B prefers other continuations of a
# comment), so a loop that emitted the draft's token unchecked is rejected with
# overwhelming power, and acceptance (~0.3) exercises both paths. Asserted below.
SAMPLING_PROMPT = "#"
MIN_TV_FOR_POWER = 0.3


@pytest.fixture(scope="module")
def pair(qwen_pair):
    target, tok, draft_model, dtok = qwen_pair
    return target, tok, model_draft(target, draft_model, target_tokenizer=tok, draft_tokenizer=dtok,
                                    name="qwen2.5-coder-0.5b")


@pytest.fixture
def shared_loads(qwen_pair, monkeypatch):
    """Commands get the session's loaded pair instead of loading a second copy."""
    from lab.models import loading as models

    target, tok, draft_model, dtok = qwen_pair
    loaded = {"qwen2.5-coder": (target, tok), "qwen2.5-coder-0.5b": (draft_model, dtok)}
    real = models.load_model

    def load(name, **kwargs):
        return loaded[name] if name in loaded else real(name, **kwargs)

    monkeypatch.setattr(models, "load_model", load)


def test_qwen_pair_admitted_with_cost_below_one(pair):
    target, tok, draft = pair
    assert target.config.num_hidden_layers == 28 and draft.model.config.num_hidden_layers == 24
    assert draft.vocab_size == target.config.vocab_size == 151936
    assert draft.cost is not None and draft.cost.ratio < 1.0 and draft.cost.note is None
    assert {151645, 151643} <= eos_token_ids(target, tok)


@pytest.mark.parametrize("prompt", GREEDY_PROMPTS)
def test_qwen_pair_greedy_speculative_equals_target_alone(pair, prompt, lab_log):
    target, tok, draft = pair
    ids = encode_chat(tok, build_messages(prompt))
    eos = eos_token_ids(target, tok)
    ref = target_generate(target, ids, max_new_tokens=GREEDY_NEW_TOKENS, eos_token_ids=eos)
    assert len(ref.tokens) == GREEDY_NEW_TOKENS, f"the prompt must yield {GREEDY_NEW_TOKENS}+ tokens for the comparison to mean much"
    res = speculative_generate(target, draft, ids,
                               SpeculativeSettings(max_new_tokens=GREEDY_NEW_TOKENS, gamma=GREEDY_GAMMA,
                                                   eos_token_ids=eos))
    lab_log.record(prompt_tokens=ids.shape[1], n_tokens=len(res.tokens), gamma=GREEDY_GAMMA, alpha=res.alpha,
                   tau=res.tau, target_step_s=ref.decode_step_time_s,
                   draft_step_s=res.draft_time_s / max(1, sum(r.n_draft_forwards for r in res.rounds)),
                   verify_s=res.verify_time_s / max(1, len(res.rounds)),
                   target_tok_s=ref.tokens_per_s, speculative_tok_s=res.tokens_per_s)
    assert res.tokens == ref.tokens, f"prompt={prompt!r}: {tok.decode(res.tokens)!r} != {tok.decode(ref.tokens)!r}"


@pytest.fixture(scope="module")
def ggml_pair():
    """The same pair's GGUF files on llama.cpp's kernels (the runtime `lab speculate` runs by default), 2 threads."""
    from lab.runtime.ggml import load_ggml_model
    from lab.speculative.draft_specs import make_draft

    target, tok = load_ggml_model("qwen2.5-coder", n_threads=2)
    return target, tok, make_draft(target, "qwen2.5-coder-0.5b", target_tokenizer=tok)


def test_qwen_pair_sampling_first_token_follows_target(ggml_pair, lab_log):
    """Seeded sampling runs of the real loop on the pair: the first emitted token follows the
    target's own top-k distribution p (chi-square on counts, false-positive rate P_THRESHOLD).

    On llama.cpp's kernels with the pair's q4 files (the runtime users get by default): a run costs
    about 0.1 s there against 1.4 s for the float32 pair on torch, whose loop's law the statistical
    tier checks on tiny models and ``test_speculative_real`` on SmolLM2.

    Negative control (a broken variant, same runs, same test): the token a loop
    would emit if it skipped the accept/reject step is the draft's first proposal;
    its counts must be rejected against p.
    """
    from lab.decode import new_cache

    target, tok, draft = ggml_pair
    ids = tok(SAMPLING_PROMPT, return_tensors="pt")["input_ids"]
    p = sampling_probs(target(ids, new_cache(target)).logits[0, -1], FIRST_TOKEN_SAMPLING)
    draft_model = draft.facts().model
    q = sampling_probs(draft_model(ids, new_cache(draft_model)).logits[0, -1], FIRST_TOKEN_SAMPLING)
    tv = 0.5 * float((p - q).abs().sum())
    assert tv >= MIN_TV_FOR_POWER, f"precondition: p and q must differ (TV {tv:.3f}) for the control to have power"
    g = torch.Generator().manual_seed(2026)
    emitted: Counter = Counter()
    unchecked: Counter = Counter()  # the broken variant: the draft's token, emitted without the test
    accepted = 0
    for _ in range(N_SAMPLED):
        res = speculative_generate(target, draft, ids,
                                   SpeculativeSettings(max_new_tokens=2, gamma=1, sampling=FIRST_TOKEN_SAMPLING),
                                   generator=g)
        emitted[res.tokens[0]] += 1
        unchecked[res.rounds[0].proposed[0]] += 1
        accepted += res.rounds[0].n_accepted > 0
    support = {t: float(p[t]) for t in p.nonzero().flatten().tolist()}
    pv, pv_broken = chisq_pvalue(emitted, support), chisq_pvalue(unchecked, support)
    lab_log.record(n=N_SAMPLED, top_k=FIRST_TOKEN_SAMPLING.top_k, tv_p_q=tv, accepted_first=accepted,
                   p_value=pv, p_value_broken_variant=pv_broken, runtime="llama.cpp")
    assert 0 < accepted < N_SAMPLED, "both the accept and the reject path must occur"
    assert pv >= P_THRESHOLD, f"T=1 top_k=6 n={N_SAMPLED}: p-value {pv:.2e}, counts {dict(emitted)}"
    assert pv_broken < P_THRESHOLD, f"control: unchecked draft tokens must be rejected (p={pv_broken:.2e})"


def test_qwen_lab_entropy_end_to_end(shared_loads, lab_log):
    rc, report = lab_log.cli(["entropy", "Write a Python function that reverses a string.", "--model", "qwen2.5-coder",
                              "--max-new-tokens", "16", "--device", "cpu"])
    assert rc == 0 and report is not None
    data = json.loads((report / "report.json").read_text())
    assert data["model"]["model"] == "qwen2.5-coder" and len(data["steps"]) >= 1
    assert data["vocab_size"] == 151936
    assert data["runtime"] == "torch" and data["model"]["runtime"] == "torch"
    lab_log.record(n_tokens=len(data["steps"]),
                   mean_entropy_bits=sum(s["entropy_bits"] for s in data["steps"]) / len(data["steps"]))


def test_qwen_lab_sinks_end_to_end(shared_loads, lab_log):
    rc, report = lab_log.cli(["sinks", "Explain list comprehensions in Python.", "--model", "qwen2.5-coder",
                              "--device", "cpu"])
    assert rc == 0 and report is not None
    a = json.loads((report / "report.json").read_text())["analysis"]
    assert a["per_head_shape"][0] == 28 and len(a["z"]) == a["n_tokens"]
    lab_log.record(n_tokens=a["n_tokens"], position0_sink=bool(a["is_sink"][0]), threshold=a["threshold"],
                   calibrated_for=a["calibrated_for"], content_sinks=len(a["content_sinks"]),
                   context_health=a["context_health"])
    # position 0 (<|im_start|>) is the sink on Qwen too, with Qwen's own threshold
    assert a["is_sink"][0] and a["calibrated_for"] == "qwen2.5-coder", a["score"][0]
    assert a["context_health"] is not None and a["context_health"] < 10.0


def test_qwen_lab_speculate_end_to_end(shared_loads, lab_log):
    """`lab speculate --model qwen2.5-coder` on torch, shortened: the default draft is auto over the 0.5B."""
    rc, report = lab_log.cli(["speculate", "Write a Python function that merges two sorted lists.",
                              "--model", "qwen2.5-coder", "--max-new-tokens", "24", "--device", "cpu"])
    assert rc == 0 and report is not None
    data = json.loads((report / "report.json").read_text())
    assert data["settings"]["draft"] == "auto:qwen2.5-coder-0.5b"
    assert data["settings"]["runtime"] == "torch"  # the tiers' LAB_RUNTIME; the default's own test unsets it
    assert {r["draft_source"] for r in data["rounds"]} <= {"none", "prompt-lookup", "model"}
    assert data["draft_cost"]["ratio"] < 1.0
    acc = data["acceptance"]
    lab_log.record(alpha=acc.get("alpha"), tau=acc.get("tau"), n_tokens=len(data["new_token_ids"]))
    assert len(data["new_token_ids"]) <= 24
