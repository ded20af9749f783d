"""The masked one-pass NLL equals token-by-token scoring with an evicting KV cache.

The reference streams the text one token at a time; before each token it builds a
fresh cache holding only the keys/values the policy lets that query see (and, on a
model's own sliding-window layers, only those inside its window), each computed
when its token was fed. That is eviction as a streaming server does it; the lab's
one-pass mask must give the same numbers for every policy.
"""

from __future__ import annotations

import pytest
import torch

from lab.attention_mask import model_attention_mask, sliding_visibility
from lab.stream.perplexity import masked_nll, recompute_nll
from lab.stream.policies import parse_policy, policy_visibility
from tests import support
from tests.support import NLL_ATOL, streaming_nll

POLICIES = ("dense", "window:3", "sinks:1+3", "sinks:2+4", "detected:2+3")
DETECTED = (0, 5, 2, 7)  # a made-up detector ranking; kept positions are its first K


def _models():
    return {
        "llama-sdpa": lambda: support.tiny_llama_untied(vocab_size=64),
        "llama-eager": lambda: _eager(support.tiny_llama_untied(vocab_size=64)),
        "qwen2-sdpa": lambda: support.tiny_qwen2(vocab_size=64),  # the Qwen pair's architecture
        "gemma3-sdpa": lambda: support.tiny_gemma3(**support.INTERLEAVED_GEMMA3),
        "gemma3-eager": lambda: support.tiny_gemma3(**support.INTERLEAVED_GEMMA3, attn_implementation="eager"),
    }


def _eager(model):
    model.config._attn_implementation = "eager"
    return model


def _ids(n: int, vocab: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (1, n), generator=g)


@pytest.mark.slow
@pytest.mark.parametrize("model_name", list(_models()))
@pytest.mark.parametrize("spec", POLICIES)
def test_masked_nll_equals_token_by_token_eviction(model_name, spec):
    """For every policy and model, one masked pass == streaming with evicted cache entries."""
    model = _models()[model_name]()
    ids = _ids(14, model.config.vocab_size)
    policy = parse_policy(spec)
    got = masked_nll(model, ids, policy, DETECTED)
    want = streaming_nll(model, ids, policy, DETECTED)
    torch.testing.assert_close(got, want, atol=NLL_ATOL, rtol=0)


def test_masked_nll_dense_equals_plain_forward():
    """The dense policy reproduces the model's own causal forward."""
    model = support.tiny_llama_untied(vocab_size=64)
    ids = _ids(20, 64)
    logits = model(input_ids=ids).logits[0, :-1].float()
    want = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none")
    torch.testing.assert_close(masked_nll(model, ids, parse_policy("dense")), want, atol=NLL_ATOL, rtol=0)


def test_model_attention_mask_inverted_mask_is_caught():
    """Negative control: an inverted keep-mask (the float/bool convention flipped) gives other numbers."""
    model = support.tiny_llama_untied(vocab_size=64)
    ids = _ids(14, 64)
    policy = parse_policy("window:3")
    pos = torch.arange(14)
    keep = policy_visibility(policy, pos, pos)
    wrong = ~keep
    wrong[torch.arange(14), torch.arange(14)] = True  # keep each row non-empty
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=model_attention_mask(model, wrong, pos, pos)).logits[0, :-1]
    bad = torch.nn.functional.cross_entropy(logits.float(), ids[0, 1:], reduction="none")
    want = streaming_nll(model, ids, policy)
    assert (bad - want).abs().max() > 100 * NLL_ATOL


def test_model_attention_mask_gemma3_intersects_its_sliding_layers():
    """Gemma 3's local layers get policy AND sliding window; its global layers get the policy."""
    model = support.tiny_gemma3(**support.INTERLEAVED_GEMMA3)
    pos = torch.arange(12)
    keep = policy_visibility(parse_policy("sinks:1+8"), pos, pos)
    mask = model_attention_mask(model, keep, pos, pos)
    assert torch.equal(mask["full_attention"][0, 0], keep)
    assert torch.equal(mask["sliding_attention"][0, 0], keep & sliding_visibility(pos, pos, 5))
    assert not mask["sliding_attention"][0, 0, 11, 0]  # the sink is outside the model's own window


def test_model_attention_mask_unknown_implementation_raises():
    model = support.tiny_llama_untied(vocab_size=64)
    model.config._attn_implementation = "flash_attention_2"
    pos = torch.arange(4)
    with pytest.raises(ValueError, match="flash_attention_2"):
        model_attention_mask(model, policy_visibility(parse_policy("dense"), pos, pos), pos, pos)
    model.config._attn_implementation = "sdpa"


@pytest.mark.parametrize("model_name", ["llama-sdpa", "gemma3-sdpa"])
def test_recompute_nll_equals_one_forward_per_window(model_name):
    """Batched recompute == a separate forward over each target's last W tokens at their own positions."""
    model = _models()[model_name]()
    ids = _ids(16, model.config.vocab_size)
    targets = torch.tensor([1, 3, 4, 9, 15])
    got = recompute_nll(model, ids, 4, targets, batch_size=2)
    want = []
    with torch.no_grad():
        for t in targets.tolist():
            start = max(0, t - 4)
            logits = model(input_ids=ids[:, start:t], position_ids=torch.arange(start, t)[None]).logits[0, -1]
            want.append(-torch.log_softmax(logits.float(), -1)[ids[0, t]])
    torch.testing.assert_close(got, torch.stack(want), atol=NLL_ATOL, rtol=0)


def test_masked_nll_text_longer_than_context_raises():
    model = support.tiny_llama_untied(vocab_size=64)
    ids = _ids(513, 64)
    with pytest.raises(ValueError, match="context of 512"):
        masked_nll(model, ids, parse_policy("dense"))
