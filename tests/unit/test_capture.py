"""Streaming attention capture (lab/attention_capture.py) against the naive eager computation, tiny models."""

from __future__ import annotations

import pytest
import torch

from lab.sinks import capture as attention_capture
from lab.sinks.capture import (CAPTURE_IMPLEMENTATION, CaptureError, capture_received, eager_received)
from tests import support

# Both paths are float32; the capture sums chunk column sums in a different order
# than eager's full matrix, so differences are rounding only (~1e-7 observed).
PARITY_ATOL = 1e-5
# The model's logits through SDPA inside the capture vs a plain SDPA forward:
# the same kernel on the same inputs, so equal up to float32 noise.
LOGITS_ATOL = 1e-5


def _ids(s: int, vocab: int = 256, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, vocab, (1, s), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("heads, kv_heads, chunk", [
    (4, 2, 5),     # GQA, chunks smaller than S (chunking exercised, last chunk partial)
    (4, 4, 64),    # MHA, one chunk covers S
    (4, 1, 1),     # MQA, one query row per chunk
])
def test_capture_equals_naive_eager_output_attentions(heads, kv_heads, chunk):
    model = support.tiny_llama(num_layers=3, heads=heads, kv_heads=kv_heads)
    ids = _ids(37)
    captured = capture_received(model, ids, chunk_size=chunk).per_head
    naive = eager_received(model, ids)
    assert captured.shape == (3, heads, 37)
    torch.testing.assert_close(captured, naive, atol=PARITY_ATOL, rtol=0)


def test_capture_default_chunking_equals_naive_on_qwen2():
    model = support.tiny_qwen2(num_layers=2)
    ids = _ids(29)
    torch.testing.assert_close(capture_received(model, ids).per_head, eager_received(model, ids),
                               atol=PARITY_ATOL, rtol=0)


def test_capture_small_byte_budget_forces_chunks_and_matches():
    model = support.tiny_llama(num_layers=2)
    ids = _ids(40)
    small = capture_received(model, ids, max_chunk_bytes=4 * 40 * 4 * 3)  # 3 query rows per chunk
    assert small.chunk_size == 3
    torch.testing.assert_close(small.per_head, capture_received(model, ids).per_head, atol=PARITY_ATOL, rtol=0)


def test_capture_logits_equal_plain_sdpa_forward():
    model = support.tiny_llama(num_layers=2)
    ids = _ids(21)
    with torch.no_grad():
        plain = model(ids).logits[0, -1]
    torch.testing.assert_close(capture_received(model, ids).last_logits, plain, atol=LOGITS_ATOL, rtol=0)


def test_capture_restores_attention_implementation_after_success_and_error():
    model = support.tiny_llama(num_layers=2)
    capture_received(model, _ids(9))
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(ValueError):
        capture_received(model, _ids(600))  # longer than max_positions=512
    assert model.config._attn_implementation == "sdpa"


def test_capture_restores_eager_implementation():
    model = support.tiny_llama(num_layers=2, attn_implementation="eager")
    capture_received(model, _ids(9))
    assert model.config._attn_implementation == "eager"


def test_capture_rows_of_received_mass_conserved():
    """Per layer and head, sum_k received[k] * (S - k) = S: every query row holds mass 1."""
    model = support.tiny_llama(num_layers=2)
    per_head = capture_received(model, _ids(17), chunk_size=4).per_head
    observers = torch.arange(17, 0, -1, dtype=torch.float32)
    torch.testing.assert_close((per_head * observers).sum(-1), torch.full((2, 4), 17.0), atol=1e-4, rtol=0)


@pytest.mark.parametrize("ids, match", [
    (torch.zeros(1, 0, dtype=torch.long), "empty"),
    (torch.zeros(2, 5, dtype=torch.long), r"\[1, S\]"),
    (torch.zeros(1, 513, dtype=torch.long), "context of 512"),
])
def test_capture_bad_input_ids_raise(ids, match):
    with pytest.raises(ValueError, match=match):
        capture_received(support.tiny_llama(num_layers=1), ids)


def test_capture_bad_chunk_size_raises():
    with pytest.raises(ValueError, match="chunk_size"):
        capture_received(support.tiny_llama(num_layers=1), _ids(4), chunk_size=0)


class _NoInterfaceModel(torch.nn.Module):
    """A model whose attention does not go through AttentionInterface."""

    def __init__(self):
        super().__init__()
        self.config = type("C", (), {"max_position_embeddings": 64, "num_hidden_layers": 1,
                                     "_attn_implementation": "eager"})()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def _can_set_attn_implementation(self):
        return False


def test_capture_model_without_attention_interface_raises_capture_error():
    with pytest.raises(CaptureError, match="cannot be captured"):
        capture_received(_NoInterfaceModel(), _ids(4))


def test_capture_layer_bypassing_interface_raises(monkeypatch):
    """A layer that never calls the capture (silently skipped) is an error, not a missing row."""
    model = support.tiny_llama(num_layers=2)
    def fake_capture(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kw):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        if module.layer_idx == 1:  # behaves like a layer with its own attention code
            return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kw)
        return attention_capture._capture_attention(module, query, key, value, attention_mask, dropout,
                                                    scaling, is_causal, **kw)

    from transformers.modeling_utils import AttentionInterface
    attention_capture._ensure_registered()
    monkeypatch.setitem(AttentionInterface._global_mapping, CAPTURE_IMPLEMENTATION, fake_capture)
    with pytest.raises(CaptureError, match="layers"):
        capture_received(model, _ids(8))
    assert model.config._attn_implementation == "sdpa"


def _layer_inputs(s=6, h=2, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, h, s, d, generator=g) for _ in range(3))
    module = type("M", (), {"num_key_value_groups": 1, "is_causal": True, "layer_idx": 0})()
    acc = attention_capture._Accumulator(max_chunk_bytes=2**20, chunk_size=2)
    return module, q, k, v, acc


def test_capture_non_causal_model_mask_is_rejected():
    """Negative control for the validation: a mask that lets queries see later keys raises."""
    module, q, k, v, acc = _layer_inputs()
    full = torch.ones(1, 1, 6, 6, dtype=torch.bool)  # no causal mask: the fault transformers once shipped
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=full).transpose(1, 2)
    with pytest.raises(CaptureError, match="later keys"):
        attention_capture._received_one_layer(module, q, k, v, full, None, out, acc)


def test_capture_output_mismatch_with_sdpa_is_rejected():
    """Negative control: if SDPA ran without the causal mask, the captured P @ V disagrees and raises."""
    module, q, k, v, acc = _layer_inputs()
    non_causal_out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=False).transpose(1, 2)
    with pytest.raises(CaptureError, match="SDPA output"):
        attention_capture._received_one_layer(module, q, k, v, None, None, non_causal_out, acc)


def test_capture_causal_bool_mask_accepted_and_equal_to_no_mask():
    module, q, k, v, acc = _layer_inputs()
    causal = torch.ones(6, 6, dtype=torch.bool).tril()[None, None]
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
    with_mask = attention_capture._received_one_layer(module, q, k, v, causal, None, out, acc)
    without = attention_capture._received_one_layer(module, q, k, v, None, None, out, acc)
    torch.testing.assert_close(with_mask, without)


def test_capture_sliding_window_mask_equals_naive_on_gemma3():
    """Gemma3-style local layers pass a boolean sliding-window mask; the capture must honour it."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    cfg = Gemma3TextConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                           num_attention_heads=4, num_key_value_heads=1, head_dim=16, sliding_window=5,
                           max_position_embeddings=256,
                           layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(cfg).eval()
    ids = _ids(23, vocab=128)
    torch.testing.assert_close(capture_received(model, ids, chunk_size=4).per_head, eager_received(model, ids),
                               atol=PARITY_ATOL, rtol=0)


@pytest.mark.parametrize("scale", [1.0, 300.0])
def test_capture_output_check_scales_with_value_magnitude(scale):
    """Large value vectors (Qwen2.5-Coder-1.5B's) pass the P @ V check at any scale, and
    the non-causal fault is still rejected at that scale (fault class: a fixed absolute
    tolerance refusing a correct model whose float32 rounding grows with |V|)."""
    module, q, k, v, acc = _layer_inputs()
    v = v * scale
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
    out = out + 2e-7 * scale * torch.randn(out.shape, generator=torch.Generator().manual_seed(0))  # rounding-size noise
    attention_capture._received_one_layer(module, q, k, v, None, None, out, acc)
    non_causal_out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=False).transpose(1, 2)
    with pytest.raises(CaptureError, match="SDPA output"):
        attention_capture._received_one_layer(module, q, k, v, None, None, non_causal_out, acc)


def test_check_output_allows_logit_rounding_but_not_a_wrong_result():
    """Regression (fault class: a fixed tolerance refusing a real model): Qwen2.5-Coder-1.5B's first
    layer has logits of 1.3e4, whose float32 rounding moved P @ V by 4.5e-4; that passes, an O(|V|) error does not."""
    from lab.sinks.capture import CaptureError, check_output

    g = torch.Generator().manual_seed(0)
    probs = torch.randn(2, 4, 4, generator=g).tril().masked_fill(torch.ones(4, 4).triu(1).bool(), float("-inf"))
    probs = probs.softmax(dim=-1)  # [H, c, S]
    v = 2.3 * torch.rand(2, 4, 8, generator=g)  # [H, S, Dv], max |V| ~ 2.3 as in that layer
    exact = torch.matmul(probs, v).transpose(0, 1)  # [c, H, Dv]
    rounded = exact + 4.5e-4
    with pytest.raises(CaptureError, match="does not reproduce"):
        check_output(probs, v, rounded, torch.float32)  # control: without the logit term it is refused
    check_output(probs, v, rounded, torch.float32, max_logit=1.3e4)
    with pytest.raises(CaptureError, match="does not reproduce"):
        check_output(probs, v, exact + 0.5, torch.float32, max_logit=1.3e4)
