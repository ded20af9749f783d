"""The decode core (lab.decode): one loop for tracker and baseline, shared checks, and KV-cache rollback.

Equalities (one decode loop for every caller): with the same settings, the entropy tracker, the target-only
baseline of ``lab bench`` and speculative decoding with every draft kind emit the
same tokens greedily; sampling, the tracker and the baseline emit the same tokens
from the same generator state.

Rollback (fault class: KV-cache rollback on sliding-window layers): on a tiny random Gemma 3 with a
sliding window of 8,
cached logits after rollbacks equal a full recomputation past the window, and
greedy speculative decoding equals the target alone for a prompt longer than the
window and for a generation that crosses it; without past recording the same run
crashes (the negative control).
"""

from __future__ import annotations

import copy

import pytest
import torch

import lab.decode
from lab.decode import (check_context, check_rollback_supported, enable_rollback, forward, generate, new_cache,
                        prefill, rollback_cache)
from lab.sampling import SamplingConfig
from lab.speculative.draft_specs import make_draft
from lab.speculative.loop import speculative_generate, target_generate
from lab.speculative.settings import SpeculativeSettings
from lab.speculative.drafts import model_draft
from lab.tracker.loop import track_generate
from tests import support
from tests.support import CACHE_PARITY_ATOL

MAX_NEW = 20
WINDOW = 8


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def tok():
    return support.chatml_tokenizer()


@pytest.fixture(scope="module")
def llama(tok, one_torch_thread):
    """Read-only random Llama whose greedy output varies, vocabulary of the ChatML tokenizer."""
    return support.tiny_llama_untied(vocab_size=len(tok), num_layers=4, seed=0)


@pytest.fixture(scope="module")
def prompt(tok):
    return torch.randint(3, len(tok), (1, 12), generator=torch.Generator().manual_seed(0))


# --------------------------------------------------------------------------- equalities


def _all_drafts(target):
    return {"early-exit:1": make_draft(target, "early-exit:1"), "early-exit:3": make_draft(target, "early-exit:3"),
            "prompt-lookup": make_draft(target, "prompt-lookup"),
            "model": model_draft(target, support.tiny_llama_untied(vocab_size=target.config.vocab_size,
                                                                   num_layers=1, seed=7))}


@pytest.mark.slow
def test_greedy_tracker_baseline_and_speculative_every_draft_emit_same_tokens(llama, tok, prompt):
    """Greedy: the tracker, the baseline and speculative decoding with every draft kind agree token for token."""
    tracked = track_generate(llama, tok, prompt, max_new_tokens=MAX_NEW).new_token_ids
    baseline = target_generate(llama, prompt, max_new_tokens=MAX_NEW).tokens
    assert tracked == baseline and len(baseline) == MAX_NEW
    for name, draft in _all_drafts(llama).items():
        for gamma in (1, 4):
            res = speculative_generate(llama, draft, prompt, SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=gamma))
            assert res.tokens == baseline, f"draft={name} gamma={gamma}"


@pytest.mark.slow
@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, None, 1.0), (0.8, 10, 0.9), (1.3, None, 0.7)])
@pytest.mark.parametrize("seed", [0, 1])
def test_sampling_tracker_and_baseline_same_generator_state_same_tokens(llama, tok, prompt, temperature, top_k,
                                                                        top_p, seed):
    """Sampling: the tracker with seed s and the baseline with a generator seeded s emit the same tokens."""
    tracked = track_generate(llama, tok, prompt, max_new_tokens=MAX_NEW, temperature=temperature, top_k=top_k,
                             top_p=top_p, seed=seed).new_token_ids
    sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
    baseline = target_generate(llama, prompt, max_new_tokens=MAX_NEW, sampling=sampling,
                               generator=torch.Generator().manual_seed(seed)).tokens
    assert tracked == baseline
    other = target_generate(llama, prompt, max_new_tokens=MAX_NEW, sampling=sampling,
                            generator=torch.Generator().manual_seed(seed + 100)).tokens
    assert other != baseline, "the generator state must matter, or the equality above proves nothing"


def test_generate_on_step_sees_raw_and_filtered_rows(llama, prompt):
    """The hook gets the raw logits, the filtered logits the token was drawn from, and the token."""
    seen = []
    out = generate(llama, prompt, max_new_tokens=5, sampling=SamplingConfig(1.0, top_k=3),
                   generator=torch.Generator().manual_seed(0),
                   on_step=lambda raw, filtered, token: seen.append((raw.clone(), filtered.clone(), int(token))))
    assert [t for *_, t in seen] == out.tokens and out.stop_reason == "max_new_tokens"
    for raw, filtered, token in seen:
        assert int(torch.isfinite(filtered).sum()) == 3 and torch.isfinite(filtered[0, token])
        torch.testing.assert_close(filtered[torch.isfinite(filtered)].sort().values,
                                   raw[0].topk(3).values.sort().values)
    assert out.prefill_time_s > 0 and out.forward_time_s >= out.prefill_time_s and out.total_time_s > 0


# --------------------------------------------------------------------------- context


@pytest.fixture(scope="module")
def short_context_model(tok):
    """A Llama whose context is 32 positions."""
    return support.tiny_llama(vocab_size=len(tok), max_positions=32)


def _calls(model, tok, ids, budget):
    draft = make_draft(model, "early-exit:1")
    return {
        "track_generate": lambda: track_generate(model, tok, ids, max_new_tokens=budget),
        "target_generate": lambda: target_generate(model, ids, max_new_tokens=budget),
        "speculative_generate": lambda: speculative_generate(model, draft, ids,
                                                             SpeculativeSettings(max_new_tokens=budget, gamma=2)),
        "generate": lambda: generate(model, ids, max_new_tokens=budget),
    }


@pytest.mark.parametrize("budget", [13, 100_000_000])
def test_every_generate_function_refuses_past_context_with_one_wording(short_context_model, tok, budget):
    """Regression (fault class: silent decode past the context): prompt 20 + budget > 32
    is refused by every public generate function before any forward, with the same message."""
    ids = torch.randint(3, 50, (1, 20), generator=torch.Generator().manual_seed(0))
    calls = 0

    def count(module, args, kwargs):
        nonlocal calls
        calls += 1

    handle = short_context_model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        messages = set()
        for name, call in _calls(short_context_model, tok, ids, budget).items():
            with pytest.raises(ValueError) as info:
                call()
            messages.add(str(info.value))
    finally:
        handle.remove()
    (message,) = messages
    assert message.startswith(f"max_new_tokens={budget}: the prompt (20 tokens)") and "context of 32" in message
    assert "max_new_tokens <= 12" in message
    assert calls == 0, "a forward ran before the context check"


def test_generate_exactly_fills_context(short_context_model, tok):
    """Prompt 20 + 12 = 32 fits: the boundary is inclusive."""
    ids = torch.randint(3, 50, (1, 20), generator=torch.Generator().manual_seed(0))
    assert len(target_generate(short_context_model, ids, max_new_tokens=12).tokens) == 12


def test_check_context_names_the_flag_as_typed(short_context_model):
    with pytest.raises(ValueError, match=r"^--max-new-tokens=40: the prompt \(5 tokens\).*--max-new-tokens <= 27"):
        check_context(short_context_model, 5, 40, arg="--max-new-tokens")
    with pytest.raises(ValueError, match="the prompt alone fills it"):
        check_context(short_context_model, 32, 1)


# --------------------------------------------------------------------------- rollback on sliding-window layers


@pytest.fixture(scope="module")
def gemma(one_torch_thread):
    return support.tiny_gemma3(sliding_window=WINDOW)


def _full_logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=ids.unsqueeze(0)).logits[0]  # [L, V], no cache


def test_gemma_cache_is_sliding_window_kind(gemma):
    """The test model really gets transformers' sliding-window cache layers (else the tests below prove nothing)."""
    kinds = {type(layer).__name__ for layer in new_cache(gemma).layers}
    assert kinds == {"DynamicSlidingWindowLayer", "DynamicLayer"}


def test_rollback_past_window_cached_logits_equal_full_recompute(gemma):
    """Prefill past the window, feed 5 tokens, roll back 3, feed 2 others: logits equal an uncached forward."""
    ids = torch.randint(3, 64, (1, 3 * WINDOW), generator=torch.Generator().manual_seed(1))[0]
    cache = new_cache(gemma)
    with torch.inference_mode():
        prefill(gemma, ids[:20].unsqueeze(0), cache)
        enable_rollback(cache)
        forward(gemma, ids[20:25].unsqueeze(0), cache, logits_to_keep=0)
        rollback_cache(cache, 22)
        assert cache.get_seq_length() == 22
        other = torch.tensor([7, 9])
        cached, _ = forward(gemma, other.unsqueeze(0), cache, logits_to_keep=0)
    full = _full_logits(gemma, torch.cat([ids[:22], other]))[-2:]
    torch.testing.assert_close(cached, full, atol=CACHE_PARITY_ATOL, rtol=0)


def _check_cache_against_recompute(model, committed, cache):
    probe = copy.deepcopy(cache)
    assert probe.get_seq_length() == committed.shape[0] - 1, "cache must hold the committed prefix minus its last token"
    with torch.inference_mode():
        cached = model(input_ids=committed[-1:].unsqueeze(0), cache=probe, use_cache=True).logits[0, -1]
    torch.testing.assert_close(cached, _full_logits(model, committed)[-1], atol=CACHE_PARITY_ATOL, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("prompt_len", [3 * WINDOW, WINDOW - 3], ids=["prompt-past-window", "generation-crosses"])
@pytest.mark.parametrize("spec", ["early-exit:2", "prompt-lookup"])
def test_gemma_speculative_greedy_equals_target_and_cache_equals_recompute(gemma, spec, prompt_len):
    """Regression (fault class: KV-cache rollback on sliding-window layers; it raised
    "crop was called, but the current layer does not track past states"): greedy speculative decoding
    equals the target alone, and after every round the cache equals a full recomputation."""
    ids = torch.randint(3, 64, (1, prompt_len), generator=torch.Generator().manual_seed(2))
    reference = target_generate(gemma, ids, max_new_tokens=MAX_NEW).tokens
    assert reference == _full_logits(gemma, torch.cat([ids[0], torch.tensor(reference)]))[
        prompt_len - 1: -1].argmax(-1).tolist(), "the target-only loop itself must equal an uncached forward"
    rejected = []

    def on_round(record, committed, cache):
        _check_cache_against_recompute(gemma, committed.clone(), cache)
        rejected.append(record.next_kind == "correction" and len(record.proposed) > 0)

    res = speculative_generate(gemma, make_draft(gemma, spec), ids,
                               SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=4), on_round=on_round)
    assert res.tokens == reference
    assert any(rejected), "the test needs a rollback of a rejected draft token"
    assert prompt_len + MAX_NEW > WINDOW + 4


def test_gemma_speculative_without_past_recording_crashes(gemma, monkeypatch):
    """Negative control: with the old cache handling (no past recording) the same run raises at a rollback."""
    import lab.speculative.drafts as drafts
    import lab.speculative.loop as loop

    monkeypatch.setattr(loop, "enable_rollback", lambda cache: None)
    monkeypatch.setattr(drafts, "enable_rollback", lambda cache: None)
    ids = torch.randint(3, 64, (1, 3 * WINDOW), generator=torch.Generator().manual_seed(2))
    with pytest.raises(RuntimeError, match="does not track past states"):
        speculative_generate(gemma, make_draft(gemma, "early-exit:2"), ids,
                             SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=4))


def test_recurrent_layers_refused_before_any_work():
    """A model whose cache holds a recurrent state (Qwen3-Next linear attention) cannot be rolled back."""
    from types import SimpleNamespace

    from transformers import Qwen3NextConfig

    model = SimpleNamespace(config=Qwen3NextConfig(num_hidden_layers=4))
    with pytest.raises(ValueError, match="linear_attention layers, whose recurrent state cannot be rolled back"):
        check_rollback_supported(model)
    check_rollback_supported(SimpleNamespace(config=support.tiny_gemma3().config))  # sliding is fine


def test_rollback_cache_never_grows_past_committed(gemma):
    cache = new_cache(gemma)
    with torch.inference_mode():
        prefill(gemma, torch.arange(3, 13).unsqueeze(0), cache)
    with pytest.raises(AssertionError, match="fewer than keep_len"):
        rollback_cache(cache, 11)
    assert lab.decode.context_length(gemma) == 256


class _AlternatingGamma:
    """A test policy: gamma 1, then 3, then 1 ... (within [1, max_gamma])."""

    def __init__(self):
        self.calls = []

    def next_gamma(self, rounds, max_gamma):
        self.calls.append(len(rounds))
        return 1 if len(rounds) % 2 == 0 else min(3, max_gamma)

    def describe(self):
        return "alternating:1:3"


def test_gamma_policy_sets_each_rounds_draft_length_output_unchanged(llama, prompt):
    """The round structure asks a policy for each round's gamma from the finished rounds; greedy output
    stays the target's."""
    policy = _AlternatingGamma()
    reference = target_generate(llama, prompt, max_new_tokens=MAX_NEW).tokens
    res = speculative_generate(llama, make_draft(llama, "early-exit:3"), prompt,
                               SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=4, gamma_policy=policy))
    assert res.tokens == reference
    assert policy.calls == list(range(len(res.rounds)))
    assert all(len(r.proposed) <= (1 if r.round % 2 == 0 else 3) for r in res.rounds)
    assert any(len(r.proposed) == 3 for r in res.rounds)


def test_speculative_result_derives_its_statistics(llama, prompt):
    """The result carries the geometric fit and the i.i.d. tokens-per-round law (renderers only display)."""
    from lab.speculative.theory import expected_tokens_per_round, geometric_fit

    res = speculative_generate(llama, make_draft(llama, "early-exit:2"), prompt,
                               SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=3))
    assert res.geometric_fit() == geometric_fit(res.accepted_length_histogram, res.alpha)
    assert res.expected_tokens_per_round == expected_tokens_per_round(res.alpha, 3)
    summary = res.acceptance_summary()
    assert summary["geometric_expected"] == res.geometric_fit()["expected"]
    assert summary["expected_tokens_per_round_at_alpha"] == res.expected_tokens_per_round


def test_gemma_speculative_sampling_past_window_cache_equals_recompute(gemma):
    """Sampling mode past the window (rejections drawn at random): after every round the target's cache
    still equals a full recomputation, and the budget is met."""
    ids = torch.randint(3, 64, (1, 3 * WINDOW), generator=torch.Generator().manual_seed(4))
    rejected = []

    def on_round(record, committed, cache):
        _check_cache_against_recompute(gemma, committed.clone(), cache)
        rejected.append(record.n_accepted < len(record.proposed))

    res = speculative_generate(gemma, make_draft(gemma, "early-exit:2"), ids,
                               SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=4,
                                                   sampling=SamplingConfig(temperature=1.0)),
                               generator=torch.Generator().manual_seed(0), on_round=on_round)
    assert len(res.tokens) == MAX_NEW and any(rejected)
