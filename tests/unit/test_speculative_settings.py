"""The loop's one settings object, and a drafter known only through the Drafter protocol.

Fault classes guarded: a decode setting that is not validated where it enters (a bad gamma or
budget found deep in the loop, or silently used); a caller (the loop, the bench) that learns what
a draft is by probing its class or attributes instead of asking ``Drafter.facts()``, so a drafter
that implements only the protocol breaks it.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lab.bench.levers import lever_methods, timed_speculative
from lab.sampling import SamplingConfig
from lab.speculative.drafts import AdaptiveDraftLength, DraftFacts, Proposal, empty_proposal
from lab.speculative.loop import speculative_generate, target_generate
from lab.speculative.policies import DynamicGamma, FixedGamma
from lab.speculative.settings import SpeculativeSettings
from lab.speculative.setups import DraftSetup
from tests.support import tiny_llama_untied

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

MAX_NEW = 12
PROMPT_LEN = 8


@pytest.fixture(scope="module")
def target(one_torch_thread):
    return tiny_llama_untied(num_layers=2, seed=0)


@pytest.fixture(scope="module")
def prompt():
    return torch.randint(3, 64, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(1))


class ProtocolOnlyDraft:
    """A drafter with nothing but the Drafter protocol: it proposes ``token`` gamma times (one-hot q)
    and states ``facts`` as given; it is no subclass of any lab drafter."""

    name = "protocol-only"

    def __init__(self, vocab_size: int, facts: DraftFacts, token: int = 5):
        self.vocab_size, self._facts, self.token = vocab_size, facts, token
        self.lent = "unset"

    def propose(self, prefix_ids, gamma, *, sampling, generator=None, adaptive=None, eos_token_ids=frozenset()):
        if gamma < 1:
            return empty_proposal(self.vocab_size, "budget")
        tokens = torch.full((gamma,), self.token, dtype=torch.long)
        z = torch.zeros(gamma)
        return Proposal(tokens, torch.nn.functional.one_hot(tokens, self.vocab_size).float(), z, z.clone(), "gamma")

    def commit(self, n_kept):
        pass

    def reset(self):
        self.lent = None

    def use_target_cache(self, cache):
        self.lent = cache  # offered by the loop; this draft never touches it

    def facts(self):
        return self._facts


# --------------------------------------------------------------------------- SpeculativeSettings


@pytest.mark.parametrize("field,value", [
    ("max_new_tokens", 0), ("max_new_tokens", True), ("max_new_tokens", 2.0),
    ("gamma", 0), ("gamma", -3), ("gamma", True), ("gamma", 2.0),
    ("sampling", "greedy"), ("adaptive", "foo:1"), ("adaptive", 0.5), ("gamma_policy", object()),
    ("eos_token_ids", ["eos"]), ("fuse_prefill", "yes"),
])
def test_speculative_settings_bad_field_raises_naming_it(field, value):
    kwargs = {"max_new_tokens": 4, field: value}
    with pytest.raises(ValueError, match=f"^{field}="):
        SpeculativeSettings(**kwargs)


def test_speculative_settings_normalizes_adaptive_and_eos():
    """Negative control of the bad-field test: valid values pass, in the forms the loop reads."""
    s = SpeculativeSettings(max_new_tokens=4, gamma=3, adaptive="pmin:0.4", eos_token_ids=7,
                            gamma_policy=FixedGamma(2))
    assert s.adaptive == AdaptiveDraftLength(pmin=0.4) and s.eos_token_ids == frozenset({7})
    assert SpeculativeSettings(max_new_tokens=4, eos_token_ids=[1, 2]).eos_token_ids == frozenset({1, 2})
    assert SpeculativeSettings(max_new_tokens=4).eos_token_ids == frozenset()
    assert SpeculativeSettings(max_new_tokens=4).sampling == SamplingConfig()  # greedy by default


def test_speculative_settings_from_setup_runs_a_dynamic_policy_at_its_maximum():
    dynamic = SpeculativeSettings.from_setup(DraftSetup(gamma=5, dynamic="dynamic:2:9", adaptive="pmin:0.6"),
                                             max_new_tokens=8, eos_token_ids=[3])
    assert dynamic.gamma == 9 and dynamic.gamma_policy == DynamicGamma.parse("dynamic:2:9")
    assert dynamic.adaptive == AdaptiveDraftLength(pmin=0.6) and dynamic.eos_token_ids == frozenset({3})
    fixed = SpeculativeSettings.from_setup(DraftSetup(gamma=5), max_new_tokens=8)
    assert (fixed.gamma, fixed.gamma_policy, fixed.adaptive) == (5, None, None)
    with pytest.raises(ValueError, match="max_new_tokens="):
        SpeculativeSettings.from_setup(DraftSetup(), max_new_tokens=0)


def test_speculative_generate_refuses_loose_settings(target, prompt):
    draft = ProtocolOnlyDraft(int(target.config.vocab_size), DraftFacts())
    with pytest.raises(ValueError, match="^settings="):
        speculative_generate(target, draft, prompt, {"max_new_tokens": 4, "gamma": 2})


# --------------------------------------------------------------------------- a drafter known by its protocol


@pytest.mark.parametrize("on_target_cache", [False, True])
def test_protocol_only_drafter_runs_and_its_facts_decide_the_prefill(target, prompt, on_target_cache):
    """The loop runs a drafter that implements only the protocol (greedy: the target's own tokens),
    and whether it fuses the target's prefill is what the drafter's facts say, nothing else."""
    draft = ProtocolOnlyDraft(int(target.config.vocab_size), DraftFacts(drafts_on_target_cache=on_target_cache))
    res = speculative_generate(target, draft, prompt, SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=3))
    assert res.tokens == target_generate(target, prompt, max_new_tokens=MAX_NEW).tokens
    assert draft.lent is not None, "every drafter is offered the loop's cache"
    fused_positions = res.rounds[0].prefill_positions
    assert fused_positions == (0 if on_target_cache else PROMPT_LEN - 1)


def test_timed_speculative_reads_passes_and_casts_from_the_facts(target, prompt):
    """The bench groups the forwards and cache casts a drafter's facts report, for any drafter."""
    passes = ((PROMPT_LEN, "float32", 0.5), (1, "bfloat16", 0.1), (2, "bfloat16", 0.2))
    facts = DraftFacts(model=object(), passes=passes, n_casts=2, cast_time_s=0.05)
    make_run = lambda name, *a, **kw: SimpleNamespace(name=name, draft_passes=None)  # noqa: E731
    settings = SpeculativeSettings(max_new_tokens=4, gamma=2)
    vocab = int(target.config.vocab_size)
    run = timed_speculative("x", target, ProtocolOnlyDraft(vocab, facts), prompt, make_run, settings)
    assert set(run.draft_passes) == {"prefill", "step", "catch-up", "cache cast"}
    assert run.draft_passes["cache cast"]["n"] == 2 and run.draft_passes["cache cast"]["time_s"] == 0.05
    assert run.draft_passes["step"]["dtypes"] == ["bfloat16"] and run.draft_passes["prefill"]["tokens"] == PROMPT_LEN
    bare = timed_speculative("x", target, ProtocolOnlyDraft(vocab, DraftFacts()), prompt, make_run, settings)
    assert bare.draft_passes is None, "a drafter that logs no forwards gets no pass shapes"


@pytest.mark.parametrize("runs_model", [False, True])
def test_lever_methods_ask_the_facts_whether_a_draft_runs_a_model(runs_model):
    """Prompt lookup is added beside a draft that runs a model, not beside one that runs none; transformers'
    assisted generation only for a draft that names an assistant model."""
    facts = DraftFacts(model=object(), assistant_model=object()) if runs_model else DraftFacts()
    config = SimpleNamespace(gammas=(2,), dynamic=(), draft_dtypes=(), dtype_sweep=False, adaptive=(),
                             prompt_lookup=True, assisted=True, sampling=SamplingConfig())
    methods = lever_methods(SimpleNamespace(config=SimpleNamespace(vocab_size=32)), ProtocolOnlyDraft(32, facts),
                            config, eos=[], hf_kwargs=lambda ids, eos: {}, make_run=None, seeds=None)
    names = [name for name, _ in methods]
    assert any(n.startswith("prompt-lookup") for n in names) == runs_model
    assert ("transformers assisted (its defaults)" in names) == runs_model
