"""Draft-length policies (lab.speculative.policies): pure rules, and the loop using one."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.speculative.policies import DynamicGamma, FixedGamma


@given(gamma=st.integers(1, 12), data=st.data())
def test_dynamic_gamma_stays_within_bounds(gamma, data):
    """min_gamma <= next_gamma <= max_gamma for any counts of a round."""
    policy = DynamicGamma(initial=1, min_gamma=1, max_gamma=12)
    proposed = data.draw(st.integers(0, gamma))
    accepted = data.draw(st.integers(0, proposed))
    assert policy.min_gamma <= policy.step(gamma, proposed, accepted) <= policy.max_gamma


def test_dynamic_gamma_grows_on_full_acceptance_and_shrinks_on_rejection():
    policy = DynamicGamma(initial=4, max_gamma=7)
    assert policy.step(4, 4, 4) == 6  # all kept: +2
    assert policy.step(6, 6, 6) == 7  # capped
    assert policy.step(4, 4, 3) == 3  # a rejection: -1
    assert policy.step(1, 1, 0) == 1  # floored
    assert policy.step(4, 2, 2) == 6, "a round cut short but fully kept still grows"
    assert policy.step(5, 0, 0) == 5, "nothing proposed: unchanged"


def test_dynamic_gamma_schedule_over_rounds():
    """Replaying a round history gives the additive schedule step by step."""
    policy, g, seen = DynamicGamma(initial=2, max_gamma=9), 2, []
    for proposed, accepted in [(2, 2), (4, 4), (6, 1), (5, 5), (7, 0), (6, 6)]:
        g = policy.step(g, proposed, accepted)
        seen.append(g)
    assert seen == [4, 6, 5, 7, 6, 8]


@pytest.mark.parametrize("kwargs,needle", [
    ({"min_gamma": 0}, "min_gamma=0"), ({"max_gamma": 0}, "max_gamma=0"), ({"initial": 13}, "initial=13"),
    ({"grow": -1}, "grow=-1"), ({"initial": True}, "initial=True"),
])
def test_dynamic_gamma_bad_settings_raise_naming_them(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        DynamicGamma(**kwargs)


def test_dynamic_gamma_bad_counts_raise():
    with pytest.raises(ValueError, match="n_accepted=3"):
        DynamicGamma().step(4, 2, 3)


@pytest.mark.parametrize("spec,expected", [("dynamic", DynamicGamma()), ("dynamic:3", DynamicGamma(initial=3)),
                                           ("dynamic:2:6", DynamicGamma(initial=2, max_gamma=6))])
def test_dynamic_gamma_parse(spec, expected):
    assert DynamicGamma.parse(spec) == expected
    assert DynamicGamma.parse(expected.describe()) == expected


@pytest.mark.parametrize("spec", ["dyn", "dynamic:x", "dynamic:5:2", "dynamic:1:2:3"])
def test_dynamic_gamma_parse_bad_spec_echoes_it(spec):
    with pytest.raises(ValueError, match="policy="):
        DynamicGamma.parse(spec)


def test_fixed_gamma_never_changes():
    policy = FixedGamma(3)
    assert policy.initial == policy.max_gamma == 3
    assert {policy.step(3, p, a) for p in range(4) for a in range(p + 1)} == {3}
    with pytest.raises(ValueError, match="gamma=0"):
        FixedGamma(0)


def test_speculative_generate_with_dynamic_policy_is_lossless_and_varies_gamma():
    """Greedy output with the policy equals the target alone; the rounds' draft
    lengths follow the policy (checked round by round against next_gamma)."""
    from lab.speculative.self_draft import EarlyExitDraft
    from lab.speculative.loop import speculative_generate, target_generate
    from lab.speculative.settings import SpeculativeSettings
    from tests.support import tiny_llama_untied

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        target = tiny_llama_untied(num_layers=4, seed=0)
        ids = torch.randint(3, 64, (1, 10), generator=torch.Generator().manual_seed(0))
        policy = DynamicGamma(initial=2, max_gamma=6)
        ref = target_generate(target, ids, max_new_tokens=30).tokens
        res = speculative_generate(target, EarlyExitDraft(target, 3), ids,
                                   SpeculativeSettings(max_new_tokens=30, gamma=6, gamma_policy=policy))
    finally:
        torch.set_num_threads(before)
    assert res.tokens == ref
    assert res.gamma_policy == policy.describe()
    g, emitted = policy.initial, 0
    for r in res.rounds:
        expected = min(g, 30 - emitted - 1)  # the budget caps a round, the policy's gamma carries on
        assert len(r.proposed) == expected, f"round {r.round}: drafted {len(r.proposed)}, expected {expected}"
        g = policy.step(g, len(r.proposed), r.n_accepted)
        emitted += len(r.emitted)
    assert len({len(r.proposed) for r in res.rounds}) > 1, "the draft length must actually vary"
