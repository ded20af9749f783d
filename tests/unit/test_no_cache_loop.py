"""The speculative loop without KV caches (:mod:`lab.speculative.no_cache`) against the cached one.

Fault class: a caching comparison whose two loops decode different things (a no-cache loop that
reads a truncated or shifted context would be "faster" or "slower" for the wrong reason). In
greedy mode both must emit the target's own tokens.
"""

from __future__ import annotations

import pytest
import torch

from lab.speculative.draft_specs import make_draft
from lab.speculative.drafts import model_draft
from lab.speculative.loop import speculative_generate, target_generate
from lab.speculative.settings import SpeculativeSettings
from lab.speculative.no_cache import no_cache_generate
from lab.sampling import SamplingConfig
from tests.support import tiny_llama_untied

N_NEW = 16


@pytest.fixture(scope="module")
def target(one_torch_thread):
    return tiny_llama_untied(num_layers=4, seed=0)


def _prompt(i: int = 0) -> torch.Tensor:
    return torch.randint(3, 64, (1, 10), generator=torch.Generator().manual_seed(i))


@pytest.mark.slow
@pytest.mark.parametrize("draft_kind", ["separate model", "early-exit:2"])
@pytest.mark.parametrize("gamma", [1, 3])
def test_no_cache_loop_greedy_emits_the_cached_loops_tokens(target, draft_kind, gamma):
    if draft_kind == "separate model":
        draft = model_draft(target, tiny_llama_untied(num_layers=1, seed=3))
    else:
        draft = make_draft(target, draft_kind)
    for i in range(2):
        cached = speculative_generate(target, draft, _prompt(i),
                                      SpeculativeSettings(max_new_tokens=N_NEW, gamma=gamma))
        plain = no_cache_generate(target, draft, _prompt(i), gamma=gamma, max_new_tokens=N_NEW)
        assert plain.tokens == cached.tokens == target_generate(target, _prompt(i), max_new_tokens=N_NEW).tokens
        assert [r.n_accepted for r in plain.rounds] == [r.n_accepted for r in cached.rounds]
        assert plain.prefill_time_s == 0.0 and plain.verify_time_s > 0


class _DropsFirstToken(torch.nn.Module):
    """A target whose no-cache forward loses the sequence's first token (a context bug)."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config

    def forward(self, input_ids, **kwargs):
        return self.inner(input_ids=input_ids[:, 1:], **kwargs)


def test_no_cache_loop_with_a_truncated_context_is_caught(target):
    """Negative control: the comparison above fails for a loop that reads the wrong context."""
    draft = model_draft(target, tiny_llama_untied(num_layers=1, seed=3))
    cached = speculative_generate(target, draft, _prompt(0), SpeculativeSettings(max_new_tokens=N_NEW, gamma=3))
    broken = no_cache_generate(_DropsFirstToken(target), draft, _prompt(0), gamma=3, max_new_tokens=N_NEW)
    assert broken.tokens != cached.tokens


def test_no_cache_loop_sampling_is_reproducible_from_its_seed(target):
    draft = make_draft(target, "early-exit:2")
    s = SamplingConfig(temperature=0.8, top_p=0.9)
    a, b = (no_cache_generate(target, draft, _prompt(1), gamma=2, max_new_tokens=N_NEW, sampling=s,
                              generator=torch.Generator().manual_seed(7)) for _ in range(2))
    assert a.tokens == b.tokens and len(a.tokens) == N_NEW


def test_no_cache_loop_refuses_a_draft_without_a_model(target):
    with pytest.raises(ValueError, match="needs a model draft"):
        no_cache_generate(target, make_draft(target, "prompt-lookup"), _prompt(0), max_new_tokens=4)
