"""The entropy tracker on a tiny random Llama: its records against an independent recomputation.

The reference for every check is one separate full forward pass (no KV cache) over
prompt + generated tokens, with entropies computed here in float64 from
``log_softmax``, not through :mod:`lab.entropy`.
"""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from hypothesis import given

from lab.entropy import entropy, varentropy
from lab.models.chat import build_messages, encode_chat
from lab.tracker.results import DecodeSettings, build_warpers
from lab.tracker.loop import _token_pieces, run_decode, track_generate
from lab.tracker.stats import row_statistics
from tests import support
from tests.strategies import logit_vectors, masked_logit_vectors

# KV-cached decode and a full forward differ only by float32 summation order in
# attention and matmuls (~1e-6 relative on a 2-layer model); 1e-4 bits / probability
# leaves room for that and still catches any wrong row (neighbouring steps differ by
# far more on a random model).
RECORD_ATOL = 1e-4
# Varentropy squares surprisals (~7 bits here), so its rounding scales up by ~10.
VARENTROPY_ATOL = 1e-3


@pytest.fixture(scope="module")
def tok():
    return support.chatml_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    """Read-only tiny Llama whose vocabulary matches the ChatML tokenizer."""
    return support.tiny_llama(vocab_size=len(tok))


@pytest.fixture(scope="module")
def prompt_ids(tok):
    return encode_chat(tok, build_messages("what is the capital of france ?"))


def _full_forward_log_probs(model, prompt_ids, new_ids) -> torch.Tensor:
    """float64 log-probs ``[n, V]`` that predicted each generated token, from one pass."""
    full = torch.cat([prompt_ids, torch.tensor([new_ids])], dim=1)  # [1, S + n]
    with torch.no_grad():
        logits = model(input_ids=full).logits[0]  # [S + n, V]
    s = prompt_ids.shape[1]
    return torch.log_softmax(logits[s - 1: s - 1 + len(new_ids)].double(), dim=-1)  # [n, V]


def _entropy_bits(log_p: torch.Tensor) -> torch.Tensor:
    p = log_p.exp()
    return -(p * torch.where(p > 0, log_p, torch.zeros_like(log_p))).sum(-1) / math.log(2)


# --------------------------------------------------------------------------- greedy


@pytest.fixture(scope="module")
def greedy(model, tok, prompt_ids):
    return track_generate(model, tok, prompt_ids, max_new_tokens=12, top_alternatives=4)


def test_track_generate_greedy_records_match_full_forward(greedy, model, prompt_ids):
    """Every raw statistic equals the one recomputed from a full forward pass."""
    log_p = _full_forward_log_probs(model, prompt_ids, greedy.new_token_ids)
    p = log_p.exp()
    h = _entropy_bits(log_p)
    surprisal = -log_p / math.log(2)
    varent = (p * (surprisal - h[:, None]) ** 2).sum(-1)
    v = log_p.shape[-1]
    assert len(greedy.steps) == len(greedy.new_token_ids) == 12
    for i, step in enumerate(greedy.steps):
        assert step.position == prompt_ids.shape[1] + i
        assert step.token_id == greedy.new_token_ids[i]
        assert step.entropy_bits == pytest.approx(h[i].item(), abs=RECORD_ATOL)
        assert step.normalized_entropy == pytest.approx(h[i].item() / math.log2(v), abs=RECORD_ATOL)
        assert step.varentropy_bits2 == pytest.approx(varent[i].item(), abs=VARENTROPY_ATOL)
        assert step.chosen_prob == pytest.approx(p[i, step.token_id].item(), abs=RECORD_ATOL)
        top_p, top_ids = p[i].topk(4)
        assert [a[0] for a in step.alternatives] == top_ids.tolist()
        assert [a[2] for a in step.alternatives] == pytest.approx(top_p.tolist(), abs=RECORD_ATOL)


def test_track_generate_greedy_chooses_argmax_and_sampled_entropy_zero(greedy, model, prompt_ids):
    """Greedy picks the argmax of the model's distribution; it samples from a point mass (H = 0)."""
    log_p = _full_forward_log_probs(model, prompt_ids, greedy.new_token_ids)
    assert greedy.new_token_ids == log_p.argmax(-1).tolist()
    assert all(s.sampled_entropy_bits == 0.0 and s.sampled_normalized_entropy == 0.0 for s in greedy.steps)
    assert greedy.seed is None and not greedy.settings.do_sample


def test_track_generate_greedy_texts_rebuild_output(greedy, tok):
    """Token pieces concatenate to the decoded output; alternatives carry their own text."""
    assert "".join(s.token_text for s in greedy.steps) == tok.decode(greedy.new_token_ids, skip_special_tokens=False)
    assert greedy.text == tok.decode(greedy.new_token_ids, skip_special_tokens=True)
    for s in greedy.steps:
        for tid, text, _ in s.alternatives:
            assert text == tok.decode([tid])


def test_track_result_summary_stats_match_statistics(greedy):
    """Summary properties equal mean / max / population variance over the step records."""
    h = [s.entropy_bits for s in greedy.steps]
    assert greedy.mean_entropy_bits == pytest.approx(statistics.fmean(h))
    assert greedy.max_entropy_bits == max(h)
    assert greedy.var_entropy_bits == pytest.approx(statistics.pvariance(h))
    assert greedy.mean_varentropy_bits2 == pytest.approx(statistics.fmean(s.varentropy_bits2 for s in greedy.steps))
    assert greedy.most_uncertain(3)[0].entropy_bits == max(h)
    assert greedy.summary()["n_steps"] == 12


def test_track_generate_max_new_tokens_stops_there(greedy):
    assert greedy.stop_reason == "max_new_tokens"
    assert greedy.vocab_size > 0 and greedy.elapsed_s > 0


def test_track_generate_eos_token_stops_and_is_kept(tok, prompt_ids):
    """Generation stops on an EOS id (here: the token greedy emits first), which is recorded."""
    m = support.tiny_llama(vocab_size=len(tok))
    first = track_generate(m, tok, prompt_ids, max_new_tokens=1).new_token_ids[0]
    m.generation_config.eos_token_id = first
    r = track_generate(m, tok, prompt_ids, max_new_tokens=10)
    assert r.stop_reason == "eos"
    assert r.new_token_ids == [first] and len(r.steps) == 1


def test_track_generate_one_dim_prompt_same_as_batched(model, tok, prompt_ids, greedy):
    """A [S] prompt is treated as [1, S]; the caller's tensor is not modified."""
    before = prompt_ids.clone()
    r = track_generate(model, tok, prompt_ids[0], max_new_tokens=12)
    assert r.new_token_ids == greedy.new_token_ids
    assert torch.equal(prompt_ids, before)


# --------------------------------------------------------------------------- sampling


@pytest.mark.parametrize("temperature, top_k, top_p", [
    (0.7, 5, 1.0),      # top-k only
    (0.3, None, 0.6),   # top-p only, peaky enough that the nucleus is small
    (1.0, 8, 0.9),      # both
    (1.3, None, 1.0),   # temperature only
])
def test_track_generate_sampled_entropy_equals_renormalized_filtered(model, tok, prompt_ids, temperature, top_k, top_p):
    """Sampled entropy = entropy of the temperature-scaled, filtered, renormalized distribution;
    every sampled token lies in its support."""
    r = track_generate(model, tok, prompt_ids, max_new_tokens=10, temperature=temperature,
                       top_k=top_k, top_p=top_p, seed=7)
    log_p = _full_forward_log_probs(model, prompt_ids, r.new_token_ids)
    v = log_p.shape[-1]
    for i, step in enumerate(r.steps):
        q = support.warped_reference_probs(log_p[i], temperature, top_k, top_p)
        h_q = -(q[q > 0] * q[q > 0].log()).sum().item() / math.log(2)
        assert step.sampled_entropy_bits == pytest.approx(h_q, abs=RECORD_ATOL)
        assert step.sampled_normalized_entropy == pytest.approx(h_q / math.log2(v), abs=RECORD_ATOL)
        assert q[step.token_id] > 0, f"step {i} sampled token {step.token_id} outside the filtered support"
        if top_k is not None:
            assert step.sampled_entropy_bits <= math.log2(top_k) + RECORD_ATOL
        # The raw statistics do not depend on the sampling settings.
        assert step.entropy_bits == pytest.approx(_entropy_bits(log_p[i]).item(), abs=RECORD_ATOL)
        assert step.chosen_prob == pytest.approx(log_p[i, step.token_id].exp().item(), abs=RECORD_ATOL)


def test_track_generate_same_seed_same_tokens_other_seed_differs(model, tok, prompt_ids):
    """Sampling is reproducible from its seed, and the seed matters (near-uniform random model,
    16 draws: two seeds agreeing everywhere has probability ~ (1/V)^16)."""
    kw = dict(max_new_tokens=16, temperature=1.0)
    a = track_generate(model, tok, prompt_ids, seed=1, **kw)
    b = track_generate(model, tok, prompt_ids, seed=1, **kw)
    c = track_generate(model, tok, prompt_ids, seed=2, **kw)
    assert a.new_token_ids == b.new_token_ids and a.seed == 1
    assert a.new_token_ids != c.new_token_ids


def test_track_generate_no_seed_records_the_seed_used(model, tok, prompt_ids):
    """Without a seed a fresh one is drawn, recorded, and replays the same tokens."""
    a = track_generate(model, tok, prompt_ids, max_new_tokens=8, temperature=1.0)
    assert isinstance(a.seed, int)
    b = track_generate(model, tok, prompt_ids, max_new_tokens=8, temperature=1.0, seed=a.seed)
    assert a.new_token_ids == b.new_token_ids


def test_run_decode_tracking_off_same_tokens(model, prompt_ids):
    """The tracker only observes: the same loop without it yields the same tokens."""
    s = DecodeSettings(max_new_tokens=10, temperature=0.9, top_k=20, seed=3)
    on = run_decode(model, prompt_ids, s, eos_ids=set(), record=True, seed=3)
    off = run_decode(model, prompt_ids, s, eos_ids=set(), record=False, seed=3)
    assert on.new_token_ids == off.new_token_ids and len(on.new_token_ids) == 10
    assert off.stats is None and len(on.stats) == 10


def test_build_warpers_greedy_empty_sampling_ordered():
    """Greedy uses no warpers; sampling applies temperature, top-k, top-p in that order."""
    assert len(build_warpers(DecodeSettings())) == 0
    names = [type(w).__name__ for w in build_warpers(DecodeSettings(temperature=0.5, top_k=3, top_p=0.9))]
    assert names == ["TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper"]


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("kwargs, match", [
    ({"max_new_tokens": 0}, "max_new_tokens=0"),
    ({"max_new_tokens": 2.5}, "max_new_tokens=2.5"),
    ({"temperature": -0.1}, "temperature=-0.1"),
    ({"temperature": float("nan")}, "temperature=nan"),
    ({"top_p": 0.0}, "top_p=0.0"),
    ({"top_p": 1.5}, "top_p=1.5"),
    ({"top_k": 0}, "top_k=0"),
    ({"seed": -1}, "seed=-1"),
    ({"top_alternatives": 0}, "top_alternatives=0"),
])
def test_track_generate_bad_setting_raises_naming_it(model, tok, prompt_ids, kwargs, match):
    with pytest.raises(ValueError, match=match):
        track_generate(model, tok, prompt_ids, **kwargs)


@pytest.mark.parametrize("ids, match", [
    (torch.zeros(2, 5, dtype=torch.long), "batch size 2"),
    (torch.zeros(1, 0, dtype=torch.long), "empty"),
    (torch.zeros(0, dtype=torch.long), "empty"),
    (torch.zeros(1, 1, 3, dtype=torch.long), r"shape \[1, S\]"),
    (torch.zeros(1, 3), "integer"),
    ([[1, 2, 3]], "torch.Tensor"),
])
def test_track_generate_bad_input_ids_raise(model, tok, ids, match):
    with pytest.raises(ValueError, match=match):
        track_generate(model, tok, ids)


# --------------------------------------------------------------------------- fused statistics

# row_statistics and lab.entropy use the same float32 formulas in a different order
# (E[(log p + H)^2] vs E[(-log p - H)^2] with a where-mask): rounding only.
FUSED_ATOL = 1e-4


@given(logit_vectors())
def test_row_statistics_any_logits_agree_with_lab_entropy(x):
    """The loop's fused entropy and varentropy equal lab.entropy's, in nats."""
    h, v, log_p = row_statistics(x)
    assert h.item() == pytest.approx(entropy(x, unit="nats").item(), abs=FUSED_ATOL)
    assert v.item() == pytest.approx(varentropy(x, unit="nats").item(), abs=10 * FUSED_ATOL)
    assert torch.allclose(log_p.exp(), torch.softmax(x, -1), atol=1e-6)


@given(masked_logit_vectors())
def test_row_statistics_masked_logits_finite_and_agree(x):
    """-inf entries (top-k / top-p masks) give finite numbers equal to lab.entropy's, never NaN."""
    h, v, _ = row_statistics(x)
    assert torch.isfinite(h) and torch.isfinite(v)
    assert h.item() == pytest.approx(entropy(x, unit="nats").item(), abs=FUSED_ATOL)
    assert v.item() == pytest.approx(varentropy(x, unit="nats").item(), abs=10 * FUSED_ATOL)


def test_row_statistics_half_input_float32_result():
    x = torch.randn(100, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    h, _, log_p = row_statistics(x)
    assert h.dtype == log_p.dtype == torch.float32


def test_track_generate_nan_logits_raise_naming_steps(tok, prompt_ids):
    """Regression (fault class: silent NaN in a report): a model emitting NaN logits raises
    RuntimeError instead of recording NaN entropies."""
    m = support.tiny_llama(vocab_size=len(tok))
    with torch.no_grad():
        m.get_output_embeddings().weight.fill_(float("nan"))
    with pytest.raises(RuntimeError, match=r"NaN or \+inf logits at decode step\(s\) \[0"):
        track_generate(m, tok, prompt_ids, max_new_tokens=3)


class _ByteTokenizer:
    """Each id is one UTF-8 byte; decode replaces incomplete characters with U+FFFD,
    like byte-level BPE tokenizers do."""

    def decode(self, ids, skip_special_tokens=False):
        return bytes(ids).decode("utf-8", errors="replace")



@pytest.mark.parametrize("text", ["héllo 😀 wörld 日本", "abc", "😀"])
def test_token_pieces_multibyte_characters_kept_whole(text):
    """Regression (fault class: per-token decode shows U+FFFD for characters split over
    byte tokens): pieces concatenate to the text and none contains U+FFFD."""
    ids = list(text.encode("utf-8"))
    pieces = _token_pieces(_ByteTokenizer(), ids)
    assert len(pieces) == len(ids)
    assert "".join(pieces) == text and not any("\ufffd" in p for p in pieces)


def test_token_pieces_decode_ending_inside_character_keeps_replacement():
    """A decode cut inside a character still accounts for every decoded character."""
    ids = list("a😀".encode("utf-8"))[:-1]
    assert "".join(_token_pieces(_ByteTokenizer(), ids)) == bytes(ids).decode("utf-8", errors="replace")
