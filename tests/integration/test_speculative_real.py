"""Speculative decoding on the embedded pair: SmolLM2-135M-Instruct and its early-exit drafts."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from lab.models.chat import build_messages, encode_chat, eos_token_ids
from tests.support import chisq_pvalue
from lab.speculative.self_draft import EarlyExitDraft
from lab.speculative.draft_specs import make_draft
from lab.speculative.loop import speculative_generate, target_generate
from lab.speculative.settings import SpeculativeSettings
from lab.sampling import sampling_probs, SamplingConfig

PROMPTS = ("What is the capital of France?", "Write a haiku about the sea.", "List three prime numbers.")
GAMMAS = (1, 3, 5)
MAX_NEW = 16
P_THRESHOLD = 1e-3  # per-check false-positive rate of the chi-square test
N_SAMPLED = 150  # seeded sampling runs for the first-token test (~0.17 s each on 2 idle cores); at 300 the
# draft control's p-value underflowed to 0, so half as many keep the control far below P_THRESHOLD
FIRST_TOKEN_SAMPLING = SamplingConfig(temperature=1.0, top_k=8)


@pytest.fixture(scope="module")
def pair(smollm2):
    model, tok = smollm2
    return model, tok, EarlyExitDraft(model, 12)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_speculative_real_greedy_equals_target_greedy(pair, prompt, lab_log):
    model, tok, draft = pair
    ids = encode_chat(tok, build_messages(prompt))
    eos = eos_token_ids(model, tok)
    ref = target_generate(model, ids, max_new_tokens=MAX_NEW, eos_token_ids=eos).tokens
    for gamma in GAMMAS:
        res = speculative_generate(model, draft, ids,
                                   SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=gamma, eos_token_ids=eos))
        assert res.tokens == ref, f"prompt={prompt!r} gamma={gamma}: {res.tokens} != {ref}"
        lab_log.record(**{f"alpha_gamma{gamma}": res.alpha})
    lab_log.record(n_tokens=len(ref), identical=True)


@pytest.mark.parametrize("gamma", [1, 4])
def test_no_cache_loop_real_greedy_equals_the_cached_loop(pair, gamma):
    """Fault class: a caching comparison whose no-cache loop decodes something else (the seed's
    Part 3 table, lab.speculative.no_cache). Greedy: both loops emit the target's own tokens."""
    from lab.speculative.no_cache import no_cache_generate

    model, tok, draft = pair
    for prompt in PROMPTS[:2]:
        ids = encode_chat(tok, build_messages(prompt))
        eos = eos_token_ids(model, tok)
        cached = speculative_generate(model, draft, ids,
                                      SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=gamma, eos_token_ids=eos))
        plain = no_cache_generate(model, draft, ids, gamma=gamma, max_new_tokens=MAX_NEW, eos_token_ids=eos)
        assert plain.tokens == cached.tokens, f"prompt={prompt!r} gamma={gamma}"
        assert [r.n_accepted for r in plain.rounds] == [r.n_accepted for r in cached.rounds]


def test_speculative_real_prompt_lookup_greedy_equals_target(pair):
    model, tok, _ = pair
    ids = encode_chat(tok, build_messages("Repeat after me: the quick brown fox jumps over the lazy dog."))
    ref = target_generate(model, ids, max_new_tokens=MAX_NEW).tokens
    res = speculative_generate(model, make_draft(model, "prompt-lookup"), ids,
                               SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=4))
    assert res.tokens == ref


def _pooled_pvalue(counts: Counter, probs: torch.Tensor) -> float:
    """Pooled chi-square p-value of counts against a ``[V]`` probability vector."""
    return chisq_pvalue(counts, {t: float(probs[t]) for t in probs.nonzero().flatten().tolist()})


def test_speculative_real_sampling_first_token_matches_target(pair, lab_log):
    """Seeded sampling runs: the first emitted token follows the target's filtered distribution.

    Control (same counts, same test): the draft's own distribution q is rejected, so
    the test has the power to tell the two apart.
    """
    model, tok, _ = pair
    draft = EarlyExitDraft(model, 24)  # accepts often enough that both paths are exercised
    ids = tok("The best thing about the ocean is", return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        p = sampling_probs(model(ids).logits[0, -1], FIRST_TOKEN_SAMPLING)
        q = sampling_probs(draft.model(ids).logits[0, -1], FIRST_TOKEN_SAMPLING)
    g = torch.Generator().manual_seed(11)
    counts: Counter = Counter()
    accepted = 0
    for _ in range(N_SAMPLED):
        res = speculative_generate(model, draft, ids,
                                   SpeculativeSettings(max_new_tokens=2, gamma=2, sampling=FIRST_TOKEN_SAMPLING),
                                   generator=g)
        counts[res.tokens[0]] += 1
        accepted += res.rounds[0].n_accepted > 0
    pv = _pooled_pvalue(counts, p)
    lab_log.record(n=N_SAMPLED, p_value_vs_target=pv, p_value_vs_draft_control=_pooled_pvalue(counts, q),
                   accepted_first=accepted)
    assert 0 < accepted < N_SAMPLED, "both the accept and the reject path must occur"
    assert pv >= P_THRESHOLD, f"T=1 top_k=8 n={N_SAMPLED}: p-value {pv:.2e}, counts {dict(counts)}"
    assert _pooled_pvalue(counts, q) < P_THRESHOLD, "control: counts must reject the draft's distribution"


def test_lab_speculate_writes_complete_report(lab_log, capsys):
    rc, report = lab_log.cli(["speculate", "What is the capital of France?", "--max-new-tokens", "8", "--gamma", "3",
                              "--temperature", "0.7", "--seed", "3", "--device", "cpu"])
    assert rc == 0 and report is not None
    assert report.name.endswith("-speculate-what-is-the-capital-of-france")
    assert {p.name for p in report.iterdir()} == {"report.json", "rounds.csv", "summary.md", "accepted_length.png", "index.html"}
    data = json.loads((report / "report.json").read_text())
    lab_log.record(alpha=data["acceptance"].get("alpha"), n_tokens=len(data["new_token_ids"]))
    assert len(data["new_token_ids"]) <= 8 and data["settings"]["seed"] == 3
    rows = (report / "rounds.csv").read_text().strip().splitlines()
    assert len(rows) - 1 == len(data["rounds"]) == data["acceptance"]["n_rounds"]
    assert (report / "accepted_length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "alpha" in (report / "summary.md").read_text()
    assert "report:" in capsys.readouterr().out
