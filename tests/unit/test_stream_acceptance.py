"""The evicting draft: dropping cache entries equals masking them, and the loop stays lossless."""

from __future__ import annotations

import pytest
import torch

from lab.attention_mask import model_attention_mask
from lab.sampling import SamplingConfig
from lab.speculative.self_draft import EarlyExitDraft
from lab.speculative.loop import speculative_generate, target_generate
from lab.speculative.settings import SpeculativeSettings
from lab.stream.acceptance import EvictingDraft
from lab.stream.policies import parse_policy, policy_visibility
from tests import support
from tests.support import NLL_ATOL

T1 = SamplingConfig(temperature=1.0)


def _masked_probs(model, ids: torch.Tensor, policy, detected=None) -> torch.Tensor:
    """softmax of a one-pass masked forward over ``ids`` ``[S]``: ``[S, V]``."""
    pos = torch.arange(ids.numel())
    mask = model_attention_mask(model, policy_visibility(policy, pos, pos, detected), pos, pos)
    with torch.no_grad():
        logits = model(input_ids=ids[None], attention_mask=mask, position_ids=pos[None]).logits[0]
    return logits.float().softmax(-1)


@pytest.mark.parametrize("make", [lambda: support.tiny_llama_untied(vocab_size=64),
                                  lambda: support.tiny_gemma3(**support.INTERLEAVED_GEMMA3)],
                         ids=["llama", "gemma3"])
@pytest.mark.slow
@pytest.mark.parametrize("spec", ["window:4", "sinks:2+4", "detected:2+4", "dense"])
def test_evicting_draft_pruned_cache_equals_masked_pass(make, spec):
    """Over several rounds with rejections, the draft's q rows equal a masked full forward."""
    target = make()
    policy = parse_policy(spec)
    detected = (0, 3, 1)
    draft = EvictingDraft(EarlyExitDraft(target, 2), policy, detected)
    g = torch.Generator().manual_seed(0)
    seq = torch.randint(3, target.config.vocab_size, (9,), generator=g)
    for n_kept in (0, 2, 1, 3, 0):
        prop = draft.propose(seq, 3, sampling=T1, generator=g)
        full = torch.cat([seq, prop.tokens])
        want = _masked_probs(draft.model, full, policy, detected)[seq.numel() - 1: full.numel() - 1]
        torch.testing.assert_close(prop.probs, want, atol=NLL_ATOL, rtol=0)
        draft.commit(n_kept)
        correction = torch.randint(3, target.config.vocab_size, (1,), generator=g)
        seq = torch.cat([seq, prop.tokens[:n_kept], correction])
        # the invariant: the cache holds exactly the committed positions that the first
        # position the next propose feeds may see (never a rejected token)
        nxt = draft._fed
        assert nxt <= seq.numel() - 1
        visible = policy_visibility(policy, torch.tensor([nxt]), torch.arange(nxt), detected)[0]
        assert draft.positions.tolist() == torch.nonzero(visible).flatten().tolist()
        if policy.budget is not None:
            assert draft.cache_size <= policy.budget


def test_evicting_draft_recompute_policy_raises():
    target = support.tiny_llama_untied(vocab_size=64)
    with pytest.raises(ValueError, match="recompute:4"):
        EvictingDraft(EarlyExitDraft(target, 2), parse_policy("recompute:4"))


def test_evicting_draft_greedy_speculation_equals_target_greedy():
    """The evicting draft changes alpha only: greedy output is the target's own."""
    target = support.tiny_llama_untied(vocab_size=64)
    ids = torch.randint(3, 64, (1, 12), generator=torch.Generator().manual_seed(3))
    draft = EvictingDraft(EarlyExitDraft(target, 2), parse_policy("sinks:1+3"))
    spec = speculative_generate(target, draft, ids, SpeculativeSettings(max_new_tokens=16, gamma=3))
    plain = target_generate(target, ids, max_new_tokens=16)
    assert spec.tokens == plain.tokens


def _greedy_rounds(target, draft, ids, n=16):
    sizes: list[int] = []
    res = speculative_generate(target, draft, ids, SpeculativeSettings(max_new_tokens=n, gamma=3),
                               on_round=lambda rec, committed, cache: sizes.append(draft.cache_size))
    return [r.proposed for r in res.rounds], sizes, res


@pytest.mark.slow  # three 16-token speculative runs with a per-round cache prune: several seconds each
@pytest.mark.parametrize("spec", ["window:4", "sinks:2+4"])
def test_evicting_draft_evicts_during_acceptance_and_changes_greedy_proposals(spec):
    """On a prompt longer than the budget the draft really evicts, and its greedy proposals change.

    Guards against an acceptance run whose draft silently sees everything (a prompt
    shorter than the budget, a mask the model ignores, a prune that drops nothing):
    then every policy's greedy alpha would equal dense's by construction.
    Negative control: a window wider than the whole sequence proposes exactly as dense.
    """
    target = support.tiny_llama_untied(vocab_size=64)
    ids = torch.randint(3, 64, (1, 24), generator=torch.Generator().manual_seed(5))
    base = EarlyExitDraft(target, 2)
    policy = parse_policy(spec)
    dense, dense_sizes, dense_res = _greedy_rounds(target, EvictingDraft(base, parse_policy("dense")), ids)
    evict, sizes, res = _greedy_rounds(target, EvictingDraft(base, policy), ids)
    assert res.tokens == dense_res.tokens  # greedy output is the target's either way
    # the cache after every commit holds budget - 1 entries (the next fed token is the last visible key)
    assert sizes == [policy.budget - 1] * len(sizes)
    assert dense_sizes == sorted(dense_sizes) and dense_sizes[0] >= ids.shape[1] - 1  # dense never evicts
    assert evict != dense, "an evicting draft proposed exactly what the dense draft proposed in every round"
    wide, _, _ = _greedy_rounds(target, EvictingDraft(base, parse_policy("window:64")), ids)
    assert wide == dense  # negative control: nothing evicted, nothing changes


def test_draft_top1_full_depth_dense_draft_is_the_target_and_window_differs():
    """draft_top1 on a constructed case: a draft with every layer and no eviction is the target.

    Negative control for the counts: the same draft under window:4 is not.
    """
    from lab.stream.acceptance import draft_top1

    target = support.tiny_llama_untied(vocab_size=64)
    prompt = torch.randint(3, 64, (1, 24), generator=torch.Generator().manual_seed(7))
    full = EarlyExitDraft(target, target.config.num_hidden_layers).model
    policies = [parse_policy("window:4"), parse_policy("dense")]  # dense scored first whatever the order
    got = draft_top1(target, full, prompt, policies, None)
    d, w = got["dense"], got["window:4"]
    assert d["top1_n"] == w["top1_n"] == 24 - 4
    assert d["top1_agree_target"] == d["top1_n"] == d["top1_agree_dense_draft"]
    assert d["mean_overlap"] == pytest.approx(1.0, abs=1e-5)
    assert w["top1_agree_dense_draft"] == w["top1_agree_target"] < w["top1_n"]
    assert w["mean_overlap"] < 1.0 - 1e-3


def test_compare_greedy_rounds_counts_differences_at_the_same_committed_prefix():
    from lab.stream.acceptance import _compare_greedy_rounds

    def row(policy, rounds):
        return {"policy": policy, "mode": "greedy", "rounds": [
            {"start": s, "proposed": p, "n_accepted": a, "n_tested": t} for s, p, a, t in rounds]}

    dense = row("dense", [(10, [1, 2, 3], 0, 1), (11, [4, 5, 6], 3, 3), (15, [7, 8, 9], 1, 2)])
    other = row("window:4", [(10, [1, 9, 9], 0, 1), (11, [5, 5, 6], 0, 1), (12, [7, 7, 7], 2, 3)])
    sampled = {"policy": "window:4", "mode": "sampled", "rounds": []}
    rows = [dense, other, sampled]
    _compare_greedy_rounds(rows)
    assert (other["rounds_compared"], other["rounds_proposals_differ"], other["rounds_tested_differ"],
            other["rounds_accepted_differ"]) == (2, 2, 1, 1)
    assert (dense["rounds_compared"], dense["rounds_proposals_differ"]) == (3, 0)
    assert "rounds_compared" not in sampled
