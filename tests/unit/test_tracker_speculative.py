"""The tracker's statistics read off a speculative run equal the tracker's own.

Fault classes guarded: a committed position's statistics taken from the wrong verify
row (off by one, a rejected draft's row, the draft's distribution), positions
recorded twice or dropped at a round's edge (bonus, correction, accepted EOS), and a
decode that goes on from the attention capture's KV cache but sees another prefix.
"""

from __future__ import annotations

import math

import pytest
import torch

from lab.decode import enable_rollback, new_cache
from lab.models.chat import encode_chat
from lab.sampling import SamplingConfig
from lab.sinks.prefill import analyze_prefill
from lab.speculative.draft_specs import make_draft
from lab.speculative.loop import speculative_generate
from lab.speculative.settings import SpeculativeSettings
from lab.speculative.drafts import model_draft
from lab.tracker.loop import track_generate
from lab.tracker.speculative import track_speculative
from lab.tracker.results import DecodeSettings
from lab.tracker.speculative import GREEDY_ENTROPY_ATOL_BITS
from tests import support

MAX_NEW = 24


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tok(chatml_tokenizer):
    return chatml_tokenizer


@pytest.fixture(scope="module")
def llama(tok):
    """Read-only random Llama whose greedy output varies (drafts get rejected)."""
    return support.tiny_llama_untied(vocab_size=len(tok), num_layers=4, seed=0)


MESSAGES = [{"role": "user", "content": "what is the capital of france ? tell me how you know , in a few words ."}]


def _drafts(target, tok):
    other = support.tiny_llama_untied(vocab_size=len(tok), num_layers=2, seed=1)
    return {"early-exit:2": make_draft(target, "early-exit:2"), "early-exit:1": make_draft(target, "early-exit:1"),
            "model": model_draft(target, other, name="tiny-other")}


@pytest.mark.slow
@pytest.mark.parametrize("draft_name", ["early-exit:2", "early-exit:1", "model"])
@pytest.mark.parametrize("gamma", [1, 3])
def test_track_speculative_greedy_steps_equal_the_trackers(llama, tok, draft_name, gamma):
    """Greedy: every committed position's statistics equal the tracked target-only decode's."""
    ids = encode_chat(tok, MESSAGES)
    ref = track_generate(llama, tok, ids, max_new_tokens=MAX_NEW)
    got, spec = track_speculative(llama, _drafts(llama, tok)[draft_name], tok, ids,
                                  DecodeSettings(max_new_tokens=MAX_NEW), gamma=gamma)
    support.assert_same_track_steps(ref, got)
    assert spec.tokens == got.new_token_ids
    assert any(r.n_accepted < len(r.proposed) for r in spec.rounds), "no rejection: the test lost its teeth"


def test_track_speculative_from_the_capture_cache_equals_the_tracker(llama, tok):
    """The study's path: the decode goes on from the attention capture's prefill (one target prefill)."""
    ids = encode_chat(tok, MESSAGES)
    ref = track_generate(llama, tok, ids, max_new_tokens=MAX_NEW)
    cache = new_cache(llama)
    enable_rollback(cache)
    pre = analyze_prefill(llama, tok, MESSAGES, cache=cache)
    assert torch.equal(pre.input_ids, ids[0]) and cache.get_seq_length() == ids.shape[1]
    got, spec = track_speculative(llama, make_draft(llama, "early-exit:2"), tok, ids,
                                  DecodeSettings(max_new_tokens=MAX_NEW), gamma=2, target_cache=cache)
    support.assert_same_track_steps(ref, got)
    assert spec.prefill_time_s == 0.0  # no prefill of its own


def test_track_speculative_sliding_window_capture_cache_past_the_window():
    """Gemma 3 layers keep only their window: a capture-filled cache (past recording on) is cropped to
    S - 1 and decoding past the window still equals the tracker."""
    tok = support.gemma_tokenizer()
    gemma = support.tiny_gemma3(vocab_size=len(tok), sliding_window=8)
    messages = [{"role": "user", "content": "the capital of france is paris , and the capital of it is what ?"}]
    ids = encode_chat(tok, messages)
    assert ids.shape[1] > 2 * 8
    ref = track_generate(gemma, tok, ids, max_new_tokens=MAX_NEW)
    cache = new_cache(gemma)
    enable_rollback(cache)
    analyze_prefill(gemma, tok, messages, cache=cache)
    got, _ = track_speculative(gemma, make_draft(gemma, "early-exit:2"), tok, ids,
                               DecodeSettings(max_new_tokens=MAX_NEW), gamma=3, target_cache=cache)
    support.assert_same_track_steps(ref, got)


def test_on_commit_rows_equal_a_full_recomputation(llama, tok):
    """Each row handed to on_commit is the target's logits for that token given the committed prefix."""
    ids = encode_chat(tok, MESSAGES)
    rows, tokens = [], []
    res = speculative_generate(llama, make_draft(llama, "early-exit:1"), ids,
                               SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=3,
                                                   sampling=SamplingConfig(temperature=1.0)),
                               generator=torch.Generator().manual_seed(3),
                               on_commit=lambda logits, toks: (rows.append(logits.clone()), tokens.append(toks.clone())))
    committed = torch.cat(tokens).tolist()
    assert committed == res.tokens
    full = torch.cat([ids[0], torch.tensor(res.tokens)]).unsqueeze(0)
    with torch.no_grad():
        reference = llama(full).logits[0, ids.shape[1] - 1 : -1]  # row i predicts new token i
    assert torch.allclose(torch.cat(rows), reference, atol=1e-4, rtol=1e-4)


def test_track_speculative_eos_mid_round_counts_each_position_once(llama, tok):
    """With EOS the token every draft proposes first, the run stops there: one step per emitted token."""
    ids = encode_chat(tok, MESSAGES)
    ref = track_generate(llama, tok, ids, max_new_tokens=MAX_NEW)
    eos_after = ref.new_token_ids[3]  # make the 4th greedy token the EOS
    tok_eos = support.chatml_tokenizer()
    tok_eos.eos_token = tok_eos.convert_ids_to_tokens(eos_after)
    a = track_generate(llama, tok_eos, ids, max_new_tokens=MAX_NEW)
    b, spec = track_speculative(llama, make_draft(llama, "early-exit:2"), tok_eos, ids,
                                DecodeSettings(max_new_tokens=MAX_NEW), gamma=3)
    assert a.stop_reason == "eos" and len(a.steps) <= 4
    support.assert_same_track_steps(a, b)
    assert spec.stopped_by == "eos"


@pytest.mark.parametrize("held", [0, 5])
def test_speculative_generate_target_cache_wrong_length_raises(llama, tok, held):
    ids = encode_chat(tok, MESSAGES)
    cache = new_cache(llama)
    if held:
        with torch.no_grad():
            llama(ids[:, :held], cache=cache, use_cache=True)
    with pytest.raises(ValueError, match=f"target_cache holds {held} positions"):
        speculative_generate(llama, make_draft(llama, "early-exit:1"), ids, SpeculativeSettings(max_new_tokens=4),
                             target_cache=cache)


def test_track_speculative_sampling_records_seed_and_filtered_entropy(llama, tok):
    """Sampling: the seed is recorded, the same seed gives the same run, and the filtered entropy
    (top-k 5) is below the raw one at every step."""
    ids = encode_chat(tok, MESSAGES)
    draft = make_draft(llama, "early-exit:2")
    a, _ = track_speculative(llama, draft, tok, ids,
                             DecodeSettings(max_new_tokens=12, temperature=1.0, top_k=5, seed=7), gamma=2)
    b, _ = track_speculative(llama, draft, tok, ids,
                             DecodeSettings(max_new_tokens=12, temperature=1.0, top_k=5, seed=7), gamma=2)
    assert a.seed == 7 and a.new_token_ids == b.new_token_ids
    assert all(s.sampled_entropy_bits <= s.entropy_bits + GREEDY_ENTROPY_ATOL_BITS for s in a.steps)
    assert all(0 < s.sampled_entropy_bits <= math.log2(5) + GREEDY_ENTROPY_ATOL_BITS for s in a.steps)  # 5 tokens kept
