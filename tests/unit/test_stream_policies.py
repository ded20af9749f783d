"""Retention policies: parsing, and visibility properties (hypothesis)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.attention_mask import sliding_visibility
from lab.stream.policies import (kept_positions, parse_policies, parse_policy, policy_visibility, policy_window,
                                 rank_detected, visibility)
from tests.strategies import detector_rankings, retention_policies, sequence_lengths


@pytest.mark.parametrize("spec,kind,window,n_keep,budget", [
    ("dense", "dense", None, 0, None),
    ("window:252", "window", 252, 0, 252),
    ("sinks:4+252", "sinks", 252, 4, 256),
    ("detected:4+252", "detected", 252, 4, 256),
    ("detected:252", "detected", 252, 4, 256),
    ("recompute:256", "recompute", 256, 0, 256),
    (" sinks:1+3 ", "sinks", 3, 1, 4),
])
def test_parse_policy_valid_specs_parse(spec, kind, window, n_keep, budget):
    p = parse_policy(spec)
    assert (p.kind, p.window, p.n_keep, p.budget) == (kind, window, n_keep, budget)
    assert parse_policy(p.spec) == p  # the canonical spec round-trips


@pytest.mark.parametrize("spec", ["", "window", "window:0", "window:-3", "sinks:252", "sinks:0+5", "sinks:4+0",
                                  "recompute:0", "dense:4", "window:4.5", "lru:8", "sinks:4+252,"])
def test_parse_policy_bad_specs_raise_naming_them(spec):
    with pytest.raises(ValueError, match="policy"):
        parse_policy(spec)


def test_parse_policies_duplicate_raises():
    with pytest.raises(ValueError, match="twice"):
        parse_policies("window:4,sinks:1+4,window:4")


@given(policy=retention_policies(), ranking=detector_rankings(), s=sequence_lengths())
@settings(max_examples=200, deadline=None)
def test_visibility_is_causal_within_budget_and_keeps_sinks(policy, ranking, s):
    """For every query q: keys seen are <= q; at most K + W of them; every kept position <= q is seen;
    the window's most recent keys (itself included) are seen; and nothing else is."""
    pos = torch.arange(s)
    vis = policy_visibility(policy, pos, pos, ranking)  # [S, S]
    keep = kept_positions(policy, ranking)
    window = policy_window(policy, ranking)
    assert window + keep.numel() == policy.budget  # spare detected slots go to the window
    assert not vis.triu(1).any()  # causal
    assert bool((vis.sum(1) <= policy.budget).all())  # budget respected
    for q in range(s):
        seen = set(torch.nonzero(vis[q]).flatten().tolist())
        recent = set(range(max(0, q - window + 1), q + 1))
        sinks = {int(k) for k in keep if k <= q}
        assert seen == recent | sinks


@given(s=sequence_lengths())
def test_visibility_dense_is_the_causal_mask(s):
    """dense: query q sees exactly keys 0..q."""
    pos = torch.arange(s)
    assert torch.equal(policy_visibility(parse_policy("dense"), pos, pos), torch.ones(s, s, dtype=torch.bool).tril())


@given(s=sequence_lengths(), w=st.integers(1, 16), k=st.integers(1, 4))
def test_visibility_sinks_equal_window_until_the_window_is_full(s, w, k):
    """Before query position K + W - 1 nothing is evicted: sinks:K+W == dense there; window:W+K the same."""
    pos = torch.arange(s)
    sinks = policy_visibility(parse_policy(f"sinks:{k}+{w}"), pos, pos)
    dense = policy_visibility(parse_policy("dense"), pos, pos)
    n = min(s, k + w)
    assert torch.equal(sinks[:n], dense[:n])


@given(s=sequence_lengths(), w=st.integers(1, 16))
def test_visibility_recompute_sees_what_window_sees(s, w):
    pos = torch.arange(s)
    assert torch.equal(policy_visibility(parse_policy(f"recompute:{w}"), pos, pos),
                       policy_visibility(parse_policy(f"window:{w}"), pos, pos))


@given(policy=retention_policies(), ranking=detector_rankings(), s=st.integers(2, 48), data=st.data())
def test_visibility_on_a_pruned_key_subset_equals_the_full_mask_columns(policy, ranking, s, data):
    """Visibility depends on positions only: any key subset (a pruned cache) gives the full mask's columns."""
    pos = torch.arange(s)
    subset = torch.tensor(sorted(data.draw(st.sets(st.integers(0, s - 1), min_size=1))))
    full = policy_visibility(policy, pos, pos, ranking)
    assert torch.equal(policy_visibility(policy, pos, subset, ranking), full[:, subset])


@given(s=sequence_lengths(), sw=st.integers(1, 16))
def test_sliding_visibility_matches_transformers_overlay(s, sw):
    """Same convention as transformers' sliding_window_overlay: kv > q - sw, and causal."""
    pos = torch.arange(s)
    q, k = pos[:, None], pos[None, :]
    assert torch.equal(sliding_visibility(pos, pos, sw), (k > q - sw) & (k <= q))


def test_visibility_window_one_sees_only_itself():
    pos = torch.arange(5)
    assert torch.equal(visibility(pos, pos, 1), torch.eye(5, dtype=torch.bool))


@pytest.mark.parametrize("flagged,keep,window", [((0, 1), [0, 1], 10), ((), [], 12), ((7, 0, 3, 5, 9), [0, 3, 5, 7], 8)])
def test_detected_fewer_flagged_than_k_gives_spare_slots_to_the_window(flagged, keep, window):
    p = parse_policy("detected:4+8")
    assert kept_positions(p, flagged).tolist() == keep and policy_window(p, flagged) == window


def test_detected_with_only_position_zero_flagged_equals_sinks_one():
    """detected:4+W with the detector flagging only position 0 is sinks:1+(W+3)."""
    pos = torch.arange(40)
    assert torch.equal(policy_visibility(parse_policy("detected:4+8"), pos, pos, (0,)),
                       policy_visibility(parse_policy("sinks:1+11"), pos, pos))


def test_rank_detected_keeps_flagged_only_by_z():
    z = torch.tensor([9.0, 1.0, 5.0, 2.0, 8.0])
    observed = torch.tensor([True, True, True, True, False])
    flagged = torch.tensor([True, False, True, True, True])
    assert rank_detected(z, observed, flagged) == (0, 2, 3)  # 4 is unobserved: never ranked


@pytest.mark.parametrize("spec", ["window:131073", "recompute:" + "9" * 5000, "sinks:4+" + "9" * 5000,
                                  "sinks:" + "9" * 5000 + "+252", "detected:131073"])
def test_policy_sizes_past_the_longest_context_refused_in_one_short_line(spec):
    """Fault class: ``window:<5,000 digits>`` ended in Python's own "Exceeds the limit (4300 digits)" message,
    naming neither flag nor policy, and a window past any context blamed ``--tokens``."""
    with pytest.raises(ValueError, match=r"must be at most 131072") as err:
        parse_policy(spec)
    assert len(str(err.value)) < 250


def test_policy_sizes_at_the_longest_context_taken():
    assert parse_policy("window:131072").window == 131072
    assert parse_policy("sinks:131072+1").n_keep == 131072
