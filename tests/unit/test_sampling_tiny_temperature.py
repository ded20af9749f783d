"""A tiny positive temperature is the greedy limit, not a NaN.

Fault class: ``--temperature 1e-38`` divided finite logits into +-inf, softmax gave
NaN, and ``torch.multinomial`` raised "probability tensor contains either inf, nan or
element < 0" after the model had loaded. The filter now shifts an overflowing row by
its maximum before dividing (same distribution), so as T -> 0+ the result is uniform
over the tied maxima: exactly the limit of softmax(logits / T).
"""

from __future__ import annotations

import torch
from hypothesis import given, strategies as st

from lab.sampling import SamplingConfig, sample, sampling_probs
from tests.strategies import overflowing_temperatures, tied_logit_rows

TINY = 1e-45  # float32's smallest subnormal: every nonzero logit / TINY overflows


def _naive_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The filter as it was: divide, then softmax (the negative control)."""
    return (logits.float() / temperature).softmax(dim=-1)


@given(logits=tied_logit_rows(n_rows=3), temperature=overflowing_temperatures(),
       top_k=st.one_of(st.none(), st.integers(1, 8)))
def test_sampling_probs_tiny_temperature_is_uniform_over_the_tied_maxima(logits, temperature, top_k):
    """For T whose scaled logits overflow, with or without top-k: probs are finite, each row sums to 1
    and equals 1/m on the m tied maxima of the raw logits, 0 elsewhere (the T -> 0+ limit)."""
    probs = sampling_probs(logits, SamplingConfig(temperature=temperature, top_k=top_k))
    assert torch.isfinite(probs).all()
    top = logits == logits.amax(dim=-1, keepdim=True)  # [R, V]
    expected = top.float() / top.sum(dim=-1, keepdim=True)
    assert torch.allclose(probs, expected, atol=1e-6), (logits, temperature, probs)
    assert sample(probs, torch.Generator().manual_seed(0)).shape == (3,)


@given(logits=tied_logit_rows(n_rows=2), temperature=overflowing_temperatures(),
       top_p=st.floats(0.01, 1.0, allow_nan=False))
def test_sampling_probs_tiny_temperature_with_top_p_stays_on_the_maxima(logits, temperature, top_p):
    """With top-p the limit keeps some of the tied maxima: mass only there, uniform over those kept."""
    probs = sampling_probs(logits, SamplingConfig(temperature=temperature, top_p=top_p))
    assert torch.isfinite(probs).all() and torch.allclose(probs.sum(-1), torch.ones(2))
    top = logits == logits.amax(dim=-1, keepdim=True)
    assert (probs[~top] == 0).all()
    for row in probs:
        kept = row[row > 0]
        assert torch.allclose(kept, kept.new_full(kept.shape, 1.0 / len(kept)))


def test_naive_division_at_tiny_temperature_is_rejected_by_the_same_check():
    """Negative control: the old divide-then-softmax gives NaN on such a row, which the property rejects."""
    logits = torch.tensor([[5.0, 10.0, -1.0]])  # 10 / 1e-38 = 1e39 > float32's max
    assert not torch.isfinite(_naive_probs(logits, 1e-38)).all()


def test_tiny_temperature_decodes_equal_greedy_on_a_tiny_model():
    """End to end: the tracker and speculative decoding at a temperature that overflows the tiny model's
    logits (of order 0.1, so 1e-45 here, where a real model's logits of order 10 overflow at 1e-38)
    emit the greedy tokens."""
    from lab.models.chat import build_messages, encode_chat
    from lab.speculative.draft_specs import make_draft
    from lab.speculative.loop import speculative_generate
    from lab.speculative.settings import SpeculativeSettings
    from lab.tracker.loop import track_generate
    from tests import support

    tok = support.chatml_tokenizer()
    model = support.tiny_llama(vocab_size=len(tok), num_layers=2)
    ids = encode_chat(tok, build_messages("what is the capital of france ?"))
    greedy = track_generate(model, tok, ids, max_new_tokens=4, temperature=0.0).new_token_ids
    tiny = track_generate(model, tok, ids, max_new_tokens=4, temperature=TINY, seed=3).new_token_ids
    assert tiny == greedy
    spec = speculative_generate(model, make_draft(model, "early-exit:1"), ids,
                                SpeculativeSettings(max_new_tokens=4, gamma=2,
                                                    sampling=SamplingConfig(temperature=TINY)),
                                generator=torch.Generator().manual_seed(3))
    assert spec.tokens == greedy


def _scale_full_test(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The filter's scaling with its overflow test always run (before the fast paths)."""
    x = logits / temperature
    overflow = (~torch.isfinite(x) & torch.isfinite(logits)).any(dim=-1, keepdim=True)
    if not bool(overflow.any()):
        return x
    top = logits.amax(dim=-1, keepdim=True)
    return torch.where(overflow, ((logits.double() - top.double()) / temperature).float(), x)


@given(logits=tied_logit_rows(n_rows=2),
       temperature=st.one_of(overflowing_temperatures(), st.floats(1e-30, 10.0), st.sampled_from([0.3, 0.7, 1.0])),
       masked=st.booleans())
def test_scale_fast_paths_equal_the_full_overflow_test(logits, temperature, masked):
    """Regression (fault class: a shortcut that skips the overflow test where it matters, e.g. a
    temperature that rounds to 0 in float32): _scale equals the always-tested scaling bit for bit."""
    from lab.sampling import _scale

    if masked:
        logits = logits.clone()
        logits[0, 0] = float("-inf")
    torch.testing.assert_close(_scale(logits, temperature), _scale_full_test(logits, temperature), rtol=0, atol=0,
                               equal_nan=True)


def test_temperature_past_float32_is_the_uniform_limit_not_nan():
    """Fault class: a temperature float32 cannot hold rounded to inf (-inf / inf = NaN probabilities), and an
    int past 2**63 that torch refused to divide by. Both give the limit: uniform over the finite logits."""
    logits = torch.tensor([3.0, 1.0, float("-inf")])
    for t in (1.7976931348623157e308, 1e39, 2**64):
        probs = sampling_probs(logits, SamplingConfig(temperature=t))
        torch.testing.assert_close(probs, torch.tensor([0.5, 0.5, 0.0]))
    # control: a large temperature float32 holds still separates the logits
    assert sampling_probs(logits, SamplingConfig(temperature=1.0))[0] > 0.8
