"""Unit tests for drafters and the decode loop on tiny random models (no weights)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from lab.speculative.drafts import AdaptiveDraftLength, DraftFacts, PromptLookupDraft, Proposal, model_draft
from lab.speculative.self_draft import EarlyExitDraft, early_exit_model
from lab.speculative.draft_specs import make_draft
from lab.speculative.loop import speculative_generate, target_generate
from lab.speculative.settings import SpeculativeSettings
from lab.speculative.drafts import empty_proposal
from lab.sampling import SamplingConfig
from tests.support import CACHE_PARITY_ATOL, tiny_llama_untied

GAMMAS = (1, 3, 5)
MAX_NEW = 24


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def target(one_torch_thread):
    return tiny_llama_untied(num_layers=4, seed=0)


@pytest.fixture(scope="module")
def prompt():
    return torch.randint(3, 64, (1, 10), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def greedy_reference(target, prompt):
    return target_generate(target, prompt, max_new_tokens=MAX_NEW).tokens


class ScriptedDraft:
    """Test double: proposes a fixed continuation (one-hot q), optionally with planted errors."""

    name = "scripted"

    def __init__(self, continuation: list[int], vocab_size: int, wrong_at: int | None = None, extra: int = 0):
        self.cont, self.vocab_size, self.wrong_at, self.extra = continuation, vocab_size, wrong_at, extra
        self.start = None

    def reset(self):
        self.start = None

    def commit(self, n_kept):
        pass

    def use_target_cache(self, cache):
        pass  # a script needs no cache

    def facts(self):
        return DraftFacts()  # no model, no cache of the target's: the loop may fuse the prefill

    def propose(self, prefix_ids, gamma, *, sampling, generator=None, adaptive=None, eos_token_ids=frozenset()):
        if self.start is None:
            self.start = prefix_ids.shape[0]
        pos = prefix_ids.shape[0] - self.start
        toks = (self.cont[pos: pos + gamma + self.extra] + [0] * (gamma + self.extra))[: gamma + self.extra]
        if self.wrong_at is not None and self.wrong_at < len(toks):
            toks[self.wrong_at] = (toks[self.wrong_at] + 1) % self.vocab_size
        t = torch.tensor(toks)
        z = torch.zeros(len(toks))
        return Proposal(t, torch.nn.functional.one_hot(t, self.vocab_size).float(), z, z.clone(), "gamma")


# --------------------------------------------------------------------------- deterministic paths


def test_speculative_scripted_exact_draft_accepts_all_with_bonus(target, prompt, greedy_reference):
    res = speculative_generate(target, ScriptedDraft(greedy_reference, 64), prompt,
                               SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=3))
    assert res.tokens == greedy_reference
    assert all(r.next_kind == "bonus" and r.n_accepted == len(r.proposed) for r in res.rounds)
    assert res.alpha == 1.0 and res.accepted_length_histogram[3] == sum(res.accepted_length_histogram)


def test_speculative_scripted_wrong_token_rejects_and_corrects(target, prompt, greedy_reference):
    res = speculative_generate(target, ScriptedDraft(greedy_reference, 64, wrong_at=1), prompt,
                               SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=3))
    assert res.tokens == greedy_reference
    full = [r for r in res.rounds if len(r.proposed) == 3]
    assert full and all(r.n_accepted == 1 and r.next_kind == "correction" for r in full)
    assert all(r.tested_mask == [True, True, False] for r in full)
    assert res.n_drafted_tested == sum(min(len(r.proposed), r.n_accepted + 1) for r in res.rounds)


def test_speculative_eos_accepted_mid_round_ends_without_bonus_or_tail(target, prompt, greedy_reference):
    eos = greedy_reference[4]
    stop = greedy_reference.index(eos)
    res = speculative_generate(target, ScriptedDraft(greedy_reference, 64, extra=0), prompt,
                               SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=6, eos_token_ids=[eos]))
    assert res.tokens == greedy_reference[: stop + 1] and res.stopped_by == "eos"
    last = res.rounds[-1]
    assert last.next_kind == "none" and last.proposed[-1] == eos
    assert res.n_drafted == res.n_drafted_tested == res.n_accepted == stop + 1


def test_speculative_budget_smaller_than_gamma_plus_one_never_exceeds(target, prompt, greedy_reference):
    for budget in (1, 2, 3):
        res = speculative_generate(target, ScriptedDraft(greedy_reference, 64), prompt,
                                   SpeculativeSettings(max_new_tokens=budget, gamma=5))
        assert res.tokens == greedy_reference[:budget]
        assert all(len(r.proposed) <= budget - 1 for r in res.rounds)


def test_speculative_scripted_draft_past_eos_is_truncated(target, prompt, greedy_reference):
    """Fault class: tokens drafted after an EOS being tested, counted or emitted."""
    eos = greedy_reference[1]
    res = speculative_generate(target, ScriptedDraft(greedy_reference, 64, extra=0), prompt,
                               SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=5, eos_token_ids={eos}))
    assert res.tokens == greedy_reference[: greedy_reference.index(eos) + 1]
    assert res.rounds[0].stop_reason == "eos"


# --------------------------------------------------------------------------- greedy equivalence


@pytest.mark.slow
@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("spec", ["early-exit:2", "early-exit:1", "prompt-lookup", "model"])
def test_speculative_greedy_equals_target_greedy_for_every_draft_kind(target, prompt, greedy_reference, spec, gamma):
    draft = (model_draft(target, tiny_llama_untied(num_layers=1, seed=7)) if spec == "model"
             else make_draft(target, spec))
    res = speculative_generate(target, draft, prompt, SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=gamma))
    assert res.tokens == greedy_reference, f"draft={spec} gamma={gamma}"
    assert sum(res.all_rounds_histogram) == len(res.rounds)


def test_speculative_greedy_with_repetition_penalty_equals_target(target, prompt):
    from transformers import LogitsProcessorList, RepetitionPenaltyLogitsProcessor

    procs = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.8)])
    ref = target_generate(target, prompt, max_new_tokens=MAX_NEW, logits_processor=procs).tokens
    res = speculative_generate(target, make_draft(target, "early-exit:2"), prompt,
                               SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=4, logits_processor=procs))
    assert res.tokens == ref


def test_speculative_adaptive_greedy_equals_target_and_stops_early(target, prompt, greedy_reference):
    res = speculative_generate(target, make_draft(target, "early-exit:2"), prompt,
                               SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=5, adaptive="pmin:0.9"))
    assert res.tokens == greedy_reference
    assert any(r.stop_reason == "pmin" for r in res.rounds)


# --------------------------------------------------------------------------- KV cache rollback


def _check_cache_against_recompute(model, committed, cache):
    probe = copy.deepcopy(cache)
    assert probe.get_seq_length() == committed.shape[0] - 1, "cache must hold the committed prefix minus its last token"
    with torch.inference_mode():
        cached = model(input_ids=committed[-1:].unsqueeze(0), cache=probe, use_cache=True).logits[0, -1]
        full = model(input_ids=committed.unsqueeze(0)).logits[0, -1]
    torch.testing.assert_close(cached, full, atol=CACHE_PARITY_ATOL, rtol=0)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_speculative_target_cache_after_rejections_equals_full_recompute(target, prompt, temperature):
    """Fault class: a rejected draft token left in the target's KV cache (an earlier public version did this)."""
    draft = model_draft(target, tiny_llama_untied(num_layers=1, seed=7))
    seen = []

    def on_round(record, committed, cache):
        _check_cache_against_recompute(target, committed.clone(), cache)
        seen.append(record.n_accepted < len(record.proposed))

    speculative_generate(target, draft, prompt,
                         SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=4,
                                             sampling=SamplingConfig(temperature=temperature)),
                         generator=torch.Generator().manual_seed(3), on_round=on_round)
    assert sum(seen) >= 2, "the test needs rounds with rejections"


def test_model_draft_cache_after_commit_holds_only_committed_tokens(target, prompt):
    draft = EarlyExitDraft(target, 2)
    prop = draft.propose(prompt[0], 4, sampling=SamplingConfig())
    assert draft.cache.get_seq_length() == prompt.shape[1] + 3  # last draft token not fed
    draft.commit(1)
    assert draft.cache.get_seq_length() == prompt.shape[1] + 1
    assert prop.tokens.shape == (4,) and prop.probs.shape == (4, 64)


# --------------------------------------------------------------------------- drafts


def test_early_exit_model_shares_target_weights(target):
    shell = early_exit_model(target, 2)
    assert shell.model.layers[0].self_attn.q_proj.weight.data_ptr() == target.model.layers[0].self_attn.q_proj.weight.data_ptr()
    assert shell.lm_head.weight.data_ptr() == target.lm_head.weight.data_ptr()
    assert len(shell.model.layers) == 2 and shell.config.num_hidden_layers == 2
    assert target.config.num_hidden_layers == 4


def test_drafters_declare_their_capabilities(target):
    """What a draft is, is read off the Drafter protocol's facts(), never off its type or model."""
    early, lookup = make_draft(target, "early-exit:2"), make_draft(target, "prompt-lookup")
    model = model_draft(target, tiny_llama_untied(num_layers=1, seed=7))
    e, k, m = early.facts(), lookup.facts(), model.facts()
    assert (e.weight_dtype, k.weight_dtype, m.weight_dtype) == (None, None, "float32")
    assert e.model is early.model and k.model is None and m.model is model.model
    assert e.assistant_model is early.model and k.assistant_model is None and m.assistant_model is model.model
    assert e.cost is None and k.cost is None and m.cost is not None and m.cost.ratio < 1.0
    assert (e.drafts_on_target_cache, k.drafts_on_target_cache, m.drafts_on_target_cache) == (True, False, False)
    assert k.flops_per_token(64) == 0.0 < m.flops_per_token(64) < e.flops_per_token(64)
    lent = object()
    for d in (early, lookup, model):  # every drafter is offered the loop's cache; only the early exit takes it
        d.reset()
        d.use_target_cache(lent)
    assert early.lent_cache is lent and model.cache is not lent
    early.reset()
    assert early.lent_cache is None, "a lent cache is given back at reset"


def test_prompt_lookup_proposes_continuation_of_latest_match():
    d = PromptLookupDraft(vocab_size=20)
    from lab.sampling import SamplingConfig
    prop = d.propose(torch.tensor([5, 6, 7, 8, 9, 1, 5, 6, 7, 3, 4, 5, 6]), 3, sampling=SamplingConfig())
    assert prop.tokens.tolist() == [7, 3, 4]  # latest earlier "5 6" is followed by 7 3 4
    assert torch.equal(prop.probs, torch.nn.functional.one_hot(prop.tokens, 20).float())
    none = d.propose(torch.tensor([1, 2, 3]), 3, sampling=SamplingConfig())
    assert none.tokens.numel() == 0 and none.stop_reason == "no-match"


def test_adaptive_parse_and_bad_specs():
    assert AdaptiveDraftLength.parse("entropy:0.4").entropy_threshold == 0.4
    assert AdaptiveDraftLength.parse("pmin:0.3").pmin == 0.3
    for bad in ("entropy", "pmin:x", "foo:0.3", "pmin:1.5", "entropy:0"):
        with pytest.raises(ValueError):
            AdaptiveDraftLength.parse(bad)


# --------------------------------------------------------------------------- bad input


def test_speculative_gamma_below_one_raises(target, prompt):
    with pytest.raises(ValueError, match="gamma"):
        speculative_generate(target, make_draft(target, "early-exit:1"), prompt,
                             SpeculativeSettings(max_new_tokens=4, gamma=0))


def test_speculative_batch_of_two_raises(target):
    with pytest.raises(ValueError, match="batch size 2"):
        speculative_generate(target, make_draft(target, "early-exit:1"), torch.ones(2, 4, dtype=torch.long),
                             SpeculativeSettings(max_new_tokens=4))


def test_model_draft_vocab_mismatch_raises_naming_both(target):
    with pytest.raises(ValueError, match="vocab_size=128.*vocab_size=64"):
        model_draft(target, tiny_llama_untied(vocab_size=128, num_layers=1))


def test_model_draft_deeper_but_cheaper_than_target_is_admitted_without_note(prompt):
    """Admission is by cost, not layer count: a draft with more but
    narrower layers (cheaper per token) runs, with no cost note, and stays lossless."""
    tgt = tiny_llama_untied(num_layers=2, hidden=64, seed=0)
    drf = tiny_llama_untied(num_layers=3, hidden=16, seed=5)
    d = model_draft(tgt, drf)
    assert d.cost.ratio < 1.0 and d.cost.note is None
    ref = target_generate(tgt, prompt, max_new_tokens=12).tokens
    assert speculative_generate(tgt, d, prompt, SpeculativeSettings(max_new_tokens=12, gamma=3)).tokens == ref


def test_model_draft_costlier_than_target_is_admitted_with_a_note(target, prompt, caplog):
    """A draft whose FLOPs per token are not below the target's is run, never refused,
    and its cost is stated (the fault class: refusing legitimate experiments by depth)."""
    drf = tiny_llama_untied(num_layers=6, seed=4)
    with caplog.at_level("WARNING", logger="lab.speculative.admission"):
        d = model_draft(target, drf)
    assert d.cost.ratio == pytest.approx(6 / 4, rel=0.2) and d.cost.ratio >= 1.0
    assert d.cost.note is not None and "c >= 1" in d.cost.note
    assert any("c >= 1" in r.getMessage() for r in caplog.records), "the note is also logged"
    ref = target_generate(target, prompt, max_new_tokens=12).tokens
    assert speculative_generate(target, d, prompt, SpeculativeSettings(max_new_tokens=12, gamma=3)).tokens == ref


def test_make_draft_vocab_mismatch_caught_from_tokenizer_before_weights(monkeypatch):
    """A draft whose vocabulary cannot match is refused from its tokenizer alone; its
    weights are never loaded (fault class: a mismatched draft, e.g. gemma3-270m for smollm2,
    dequantized 1.1 GB before it was refused)."""
    from lab.models import loading as models
    from tests.support import chatml_tokenizer, gemma_tokenizer

    target_tok, draft_tok = chatml_tokenizer(), gemma_tokenizer()
    tgt = tiny_llama_untied(vocab_size=len(target_tok), num_layers=2)
    loaded = []
    monkeypatch.setattr(models, "check_model_name", lambda name: None)
    monkeypatch.setattr(models, "load_tokenizer", lambda name: draft_tok)
    monkeypatch.setattr(models, "load_model", lambda *a, **k: loaded.append(a) or (_ for _ in ()).throw(
        AssertionError("draft weights loaded before the vocabulary check")))
    with pytest.raises(ValueError, match=r"draft='some/draft' has a different vocabulary"):
        make_draft(tgt, "some/draft", target_tokenizer=target_tok)
    assert loaded == []


def test_model_draft_padded_vocab_with_same_tokenizer_is_accepted(prompt):
    from tests.support import chatml_tokenizer

    tok = chatml_tokenizer()
    tgt = tiny_llama_untied(vocab_size=len(tok), num_layers=2)
    drf = tiny_llama_untied(vocab_size=len(tok) + 7, num_layers=1, seed=3)  # padding rows
    d = model_draft(tgt, drf, target_tokenizer=tok, draft_tokenizer=tok)
    ids = prompt.clamp_max(len(tok) - 1)
    ref = target_generate(tgt, ids, max_new_tokens=12).tokens
    assert speculative_generate(tgt, d, ids, SpeculativeSettings(max_new_tokens=12, gamma=3)).tokens == ref


@pytest.mark.parametrize("spec", ["early-exit:4", "early-exit:0", "early-exit:x", "", "nonsense"])
def test_make_draft_bad_spec_raises(target, spec):
    with pytest.raises(ValueError):
        make_draft(target, spec)


def test_empty_proposal_has_matching_shapes():
    p = empty_proposal(10, "budget")
    assert p.tokens.shape == (0,) and p.probs.shape == (0, 10)


def test_speculative_result_per_token_rows_match_rounds(target, prompt):
    res = speculative_generate(target, make_draft(target, "early-exit:2"), prompt,
                               SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=3,
                                                   sampling=SamplingConfig(temperature=1.0)),
                               generator=torch.Generator().manual_seed(0))
    rows = res.per_token()
    assert len(rows) == res.n_drafted
    assert sum(r["accepted"] for r in rows) == res.n_accepted
    assert sum(r["tested"] for r in rows) == res.n_drafted_tested
    vocab = target.config.vocab_size  # normalized entropy is H / log2 V, V the draft's (here the target's) vocabulary
    assert all(r["draft_normalized_entropy"] == pytest.approx(r["draft_entropy_bits"] / math.log2(vocab), abs=1e-5)
               for r in rows)
    assert any(r["draft_entropy_bits"] > 0 for r in rows)  # sampled at T = 1 from a random model: not all one-hot
    assert len(res.tokens) == MAX_NEW or res.stopped_by == "eos"


# --------------------------------------------------------------------------- the prefill fused into the first verify


def _target_passes(model):
    calls = []
    handle = model.register_forward_pre_hook(lambda module, args: calls.append(1))
    return calls, handle


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_fused_prefill_saves_one_target_pass_and_changes_nothing_else(target, prompt, temperature):
    """The first verify pass carries the prompt: one target pass fewer, the same tokens and rounds (the
    same generator draws in the same order), and the fused pass is accounted as the prefill."""
    runs = {}
    for fuse in (True, False):
        calls, handle = _target_passes(target)
        try:
            draft = model_draft(target, tiny_llama_untied(num_layers=1, seed=7))
            runs[fuse] = (speculative_generate(target, draft, prompt,
                                               SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=3,
                                                                   sampling=SamplingConfig(temperature=temperature),
                                                                   fuse_prefill=fuse),
                                               generator=torch.Generator().manual_seed(5)),
                          len(calls))
        finally:
            handle.remove()
    (fused, n_fused), (plain, n_plain) = runs[True], runs[False]
    assert fused.tokens == plain.tokens
    assert [r.n_accepted for r in fused.rounds] == [r.n_accepted for r in plain.rounds]
    assert n_fused == n_plain - 1 == len(fused.rounds)  # plain: a prefill, then one verify per round
    assert [r.prefill_positions for r in fused.rounds] == [prompt.shape[1] - 1] + [0] * (len(fused.rounds) - 1)
    assert not any(r.prefill_positions for r in plain.rounds)
    assert fused.prefill_time_s == fused.rounds[0].verify_time_s
    assert fused.n_verify_passes == len(fused.rounds) - 1 and plain.n_verify_passes == len(plain.rounds)
    assert fused.verify_time_s == pytest.approx(sum(r.verify_time_s for r in fused.rounds[1:]))


def test_prefill_not_fused_for_a_draft_on_the_target_cache_or_a_cache_given():
    """The early-exit draft drafts on the target's cache, which must hold the prompt first; a caller's
    prefilled cache is used as given. Neither run fuses (control: the same call with a model draft does)."""
    from lab.speculative.loop import prefilled_cache

    target = tiny_llama_untied(num_layers=4, seed=0)
    prompt = torch.randint(3, 64, (1, 10), generator=torch.Generator().manual_seed(0))
    early = speculative_generate(target, EarlyExitDraft(target, 2), prompt,
                                 SpeculativeSettings(max_new_tokens=8, gamma=3))
    assert not any(r.prefill_positions for r in early.rounds) and early.prefill_time_s > 0
    with torch.inference_mode():
        cache, _ = prefilled_cache(target, prompt[0])
    given = speculative_generate(target, model_draft(target, tiny_llama_untied(num_layers=1, seed=7)), prompt,
                                 SpeculativeSettings(max_new_tokens=8, gamma=3), target_cache=cache)
    assert not any(r.prefill_positions for r in given.rounds)
    control = speculative_generate(target, model_draft(target, tiny_llama_untied(num_layers=1, seed=7)), prompt,
                                   SpeculativeSettings(max_new_tokens=8, gamma=3))
    assert control.rounds[0].prefill_positions == prompt.shape[1] - 1
    assert early.tokens == given.tokens == control.tokens
