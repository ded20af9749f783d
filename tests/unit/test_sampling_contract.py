"""The shared sampling filter (lab/sampling.py) against its public contract.

Expected distributions come from a float64 reference written from the definitions in
:class:`SamplingConfig`'s docstring (temperature, then top-k with ties at the k-th value
kept, then top-p keeping the smallest most-likely set whose mass reaches top_p), so these
tests hold for any implementation of that contract (transformers' warpers included).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from lab.sampling import SamplingConfig, apply_processors, sample, sampling_probs
from tests.strategies import logit_vectors

# sampling_probs returns float32 probabilities; against a float64 reference 1e-5 covers
# softmax and renormalization rounding over <= 64 entries.
PROB_ATOL = 1e-5
# Cumulative masses closer than this to top_p are left to the boundary tests below,
# which build exact cases: float32 rounding could put them on either side.
TOP_P_MARGIN = 1e-4


def reference_probs(logits: list[float], temperature: float, top_k: int | None, top_p: float) -> list[float]:
    """The filter by its definition, in float64 Python."""
    x = torch.tensor(logits, dtype=torch.float64) / temperature
    keep = [True] * len(logits)
    if top_k is not None and top_k < len(logits):
        kth = sorted(x.tolist(), reverse=True)[top_k - 1]
        keep = [v >= kth for v in x.tolist()]  # ties at the k-th value kept
    masked = x.masked_fill(~torch.tensor(keep), float("-inf"))
    probs = masked.softmax(-1).tolist()
    if top_p < 1.0:
        order = sorted(range(len(probs)), key=lambda i: -probs[i])
        kept, mass = set(), 0.0
        for i in order:
            kept.add(i)
            mass += probs[i]
            if mass >= top_p:
                break
        probs = [p if i in kept else 0.0 for i, p in enumerate(probs)]
        total = sum(probs)
        probs = [p / total for p in probs]
    return probs


@given(logit_vectors(min_size=2, max_size=12, bound=8.0),
       st.floats(0.2, 3.0), st.one_of(st.none(), st.integers(1, 12)), st.floats(0.05, 1.0))
def test_sampling_probs_any_logits_matches_definition(x, temperature, top_k, top_p):
    """temperature -> top-k (ties kept) -> top-p (smallest set reaching top_p) -> renormalize."""
    xs = x.tolist()
    assume(len(set(xs)) == len(xs))  # ties at the top-p cut are order-dependent; see the boundary tests
    ref = reference_probs(xs, temperature, top_k, top_p)
    if top_p < 1.0:  # keep away from the top-p cut, where float32 rounding decides
        base = reference_probs(xs, temperature, top_k, 1.0)
        # Distinct logits can still give equal probabilities (e.g. -4e-36 and 0 both exp
        # to 1.0); then "the most likely" is a tie and the kept set is order-dependent.
        kept_probs = [p for p in base if p > 0.0]
        assume(len(set(torch.tensor(kept_probs, dtype=torch.float32).tolist())) == len(kept_probs))
        cum = 0.0
        for p in sorted(base, reverse=True):
            cum += p
            assume(abs(cum - top_p) > TOP_P_MARGIN)
    got = sampling_probs(x, SamplingConfig(temperature, top_k=top_k, top_p=top_p))
    assert got.dtype == torch.float32 and got.shape == x.shape
    assert torch.allclose(got.double(), torch.tensor(ref, dtype=torch.float64), atol=PROB_ATOL, rtol=0)


def test_sampling_probs_top_p_one_keeps_every_token_even_below_float32_resolution():
    """top_p = 1.0 means no nucleus filter: a token whose mass is lost in the cumulative
    sum's rounding (cum before it == 1.0 in float32) must still keep its probability."""
    logits = torch.tensor([0.0, -25.0, -30.0])
    got = sampling_probs(logits, SamplingConfig(1.0, top_p=1.0))
    assert torch.equal(got, logits.softmax(-1)) and (got > 0).all()


@pytest.mark.parametrize("top_p,n_kept", [(0.25, 1), (0.5, 2), (0.75, 3), (0.7, 3), (0.8, 4)])
def test_sampling_probs_top_p_exact_boundary_keeps_smallest_set_reaching_it(top_p, n_kept):
    """Four tied logits: masses are exactly 0.25 each, so the cumulative mass hits 0.25, 0.5,
    0.75 exactly. The set reaching top_p stops at the token that reaches it (``>=``); a
    ``>`` fault class keeps one token too many at an exact boundary."""
    got = sampling_probs(torch.zeros(4), SamplingConfig(1.0, top_p=top_p))
    assert int((got > 0).sum()) == n_kept
    assert torch.allclose(got[got > 0], torch.full((n_kept,), 1.0 / n_kept))


def test_sampling_probs_top_k_ties_at_kth_value_all_kept():
    """Ties at the k-th value are kept: top_k = 2 over [3, 1, 1, 1, 0] keeps four tokens."""
    logits = torch.tensor([3.0, 1.0, 1.0, 1.0, 0.0])
    got = sampling_probs(logits, SamplingConfig(1.0, top_k=2))
    ref = torch.tensor(reference_probs(logits.tolist(), 1.0, 2, 1.0))
    assert int((got > 0).sum()) == 4 and torch.allclose(got, ref.float(), atol=PROB_ATOL)


@pytest.mark.parametrize("k", [1, 3, 5, 6])
def test_sampling_probs_top_k_distinct_logits_keeps_exactly_k(k):
    """Distinct logits: exactly the k largest survive (k = V keeps all)."""
    logits = torch.tensor([0.5, 2.0, -1.0, 3.0, 1.0, 0.0])
    got = sampling_probs(logits, SamplingConfig(1.0, top_k=k))
    kept = set(torch.nonzero(got).flatten().tolist())
    assert kept == set(logits.argsort(descending=True)[:k].tolist())


def test_sampling_probs_batched_rows_filtered_independently():
    """Leading dimensions ``[B, T, V]``: each row is filtered as it would be alone."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 7, generator=g) * 3
    for cfg in (SamplingConfig(0.0), SamplingConfig(0.7, top_k=3), SamplingConfig(1.3, top_p=0.6)):
        got = sampling_probs(logits, cfg)
        assert got.shape == logits.shape
        for b in range(2):
            for t in range(3):
                assert torch.equal(got[b, t], sampling_probs(logits[b, t], cfg))


def test_sampling_probs_greedy_one_dim_and_ties_pick_first_maximum():
    """Greedy is the one-hot argmax, also for a single ``[V]`` row; ties go to the first maximum."""
    got = sampling_probs(torch.tensor([1.0, 4.0, 4.0, 0.0]), SamplingConfig(0.0))
    assert torch.equal(got, torch.tensor([0.0, 1.0, 0.0, 0.0]))


def test_sampling_probs_does_not_modify_logits():
    logits = torch.tensor([[0.3, -1.0, 2.0, 0.0]])
    before = logits.clone()
    sampling_probs(logits, SamplingConfig(0.5, top_k=2, top_p=0.9))
    assert torch.equal(logits, before)


@pytest.mark.parametrize("kwargs", [dict(temperature=True), dict(temperature="1"), dict(temperature=float("inf")),
                                    dict(top_k=True), dict(top_k=2.0), dict(top_k=-1), dict(top_p=True),
                                    dict(top_p="0.5"), dict(top_p=-0.1)])
def test_sampling_config_wrong_type_or_range_raises_value_error_naming_it(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        SamplingConfig(**kwargs)


@pytest.mark.parametrize("kwargs", [dict(top_k=1), dict(top_p=1.0), dict(temperature=0), dict(top_p=1)])
def test_sampling_config_boundary_values_are_valid(kwargs):
    cfg = SamplingConfig(**kwargs)
    assert cfg.greedy == (cfg.temperature == 0)


# --------------------------------------------------------------------------- sample


def test_sample_batched_probs_draw_one_supported_id_per_row():
    """int64 ids of shape ``probs.shape[:-1]``; zero-probability ids are never drawn."""
    probs = torch.tensor([[[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]], [[0.0, 0.0, 1.0], [0.2, 0.0, 0.8]]])
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        ids = sample(probs, generator=g)
        assert ids.dtype == torch.int64 and ids.shape == (2, 2)
        assert (probs.gather(-1, ids.unsqueeze(-1)) > 0).all()
    one_hot = torch.nn.functional.one_hot(torch.tensor([3, 0, 2]), 5).float()
    assert sample(one_hot).tolist() == [3, 0, 2]


def test_sample_same_generator_seed_same_draws():
    probs = torch.full((4, 10), 0.1)
    a = sample(probs, generator=torch.Generator().manual_seed(7))
    b = sample(probs, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


# --------------------------------------------------------------------------- apply_processors


class _RecordingProcessor:
    """A logits processor that records the ids it sees and adds their count to every score."""

    def __init__(self):
        self.seen: list[list[int]] = []

    def __call__(self, input_ids, scores):
        self.seen.append(input_ids[0].tolist())
        return scores + input_ids.shape[-1]


def test_apply_processors_row_i_sees_prefix_plus_first_i_drafts():
    """Row i is processed with ``prefix + drafts[:i]``, as plain decoding would have seen it."""
    prefix, drafts = torch.tensor([5, 6, 7]), torch.tensor([1, 2])
    logits = torch.zeros(3, 4)
    proc = _RecordingProcessor()
    out = apply_processors(proc, prefix, drafts, logits)
    assert proc.seen == [[5, 6, 7], [5, 6, 7, 1], [5, 6, 7, 1, 2]]
    assert torch.equal(out, torch.tensor([[3.0] * 4, [4.0] * 4, [5.0] * 4]))
    assert torch.equal(logits, torch.zeros(3, 4))  # input not modified


def test_apply_processors_none_returns_logits_unchanged():
    logits = torch.randn(2, 5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(apply_processors(None, torch.tensor([1]), torch.tensor([2]), logits), logits)


def test_apply_processors_in_place_processor_does_not_touch_input():
    """A processor that edits its scores in place must not reach the caller's logits."""
    def in_place(input_ids, scores):
        scores[..., 0] = -float("inf")
        return scores

    logits = torch.zeros(2, 3)
    out = apply_processors(in_place, torch.tensor([1]), torch.tensor([2]), logits)
    assert torch.equal(logits, torch.zeros(2, 3)) and torch.isinf(out[:, 0]).all()


def test_apply_processors_draft_tokens_moved_to_the_prefix_device():
    """Draft tokens from another device join the prefix on the prefix's device (meta stands in for
    an accelerator: it has shapes but no data, and mixing it with CPU tensors raises)."""
    seen = []

    def record(input_ids, scores):
        seen.append((input_ids.device.type, input_ids.shape[-1]))
        return scores

    prefix = torch.empty(3, dtype=torch.long, device="meta")
    apply_processors(record, prefix, torch.tensor([1, 2]), torch.empty(3, 4, device="meta"))
    assert seen == [("meta", 3), ("meta", 4), ("meta", 5)]


@pytest.mark.slow
def test_sampling_module_ground_floor_decode_core_does_not_import_speculative():
    """Guards an upward import (decode core -> lab.speculative): a fresh interpreter imports
    ``lab.decode``, and neither it nor ``lab.sampling`` may pull in ``lab.speculative``."""
    import subprocess
    import sys

    code = ("import sys, lab.decode, lab.sampling; "
            "print(sorted(m for m in sys.modules if m.startswith('lab.speculative')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"lab.decode imported {out}"
