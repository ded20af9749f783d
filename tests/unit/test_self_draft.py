"""The early-exit draft on the target's own KV cache (lab.speculative.self_draft).

Exactness of the lent cache: a proposal leaves every layer of the target's cache
bit-identical to what was lent (llama, and Gemma 3 sliding layers past the window);
the draft's q on the lent cache equals an own-cache early-exit draft's q to float
rounding; greedy speculative decoding with it equals the target alone; a drafter
that does not give the cache back is stopped by the loop (the negative control).
The sampling-mode law is in tests/statistical/test_speculative_stats.py.
"""

from __future__ import annotations

import pytest
import torch

from lab.decode import enable_rollback, new_cache, prefill
from lab.sampling import SamplingConfig
from lab.speculative.draft_specs import make_draft
from lab.speculative.drafts import ModelDraft
from lab.speculative.loop import speculative_generate, target_generate
from lab.speculative.settings import SpeculativeSettings
from lab.speculative.self_draft import EarlyExitDraft, early_exit_model
from tests import support

# q on the lent cache vs on the draft's own cache: the prompt's states come from the
# target's prefill of S - 1 positions instead of the draft's own prefill of S, so the
# float32 sums run in another order; probabilities agree to ~1e-7, 1e-5 is a wide margin.
Q_PARITY_ATOL = 1e-5
WINDOW = 8


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def llama():
    return support.tiny_llama_untied(vocab_size=64, num_layers=4, seed=0)


@pytest.fixture(scope="module")
def gemma():
    return support.tiny_gemma3(vocab_size=64, num_layers=4, sliding_window=WINDOW, seed=0)


def _lent_cache(model, prefix):
    """The loop's cache at a round's start: the committed ``prefix`` [L] minus its last token, croppable."""
    cache = new_cache(model)
    with torch.inference_mode():
        prefill(model, prefix[:-1].unsqueeze(0), cache)
    enable_rollback(cache)
    return cache


def _snapshot(cache):
    return [(layer.keys.clone(), layer.values.clone(), layer.get_seq_length()) for layer in cache.layers]


@pytest.mark.parametrize("name,prompt_len", [("llama", 12), ("gemma", 3 * WINDOW)])
def test_early_exit_draft_propose_leaves_lent_cache_bit_identical(request, name, prompt_len):
    """After propose (sampled, gamma 4) every layer of the lent cache holds the same tensors and length."""
    model = request.getfixturevalue(name)
    prefix = torch.randint(3, 64, (prompt_len,), generator=torch.Generator().manual_seed(1))
    cache = _lent_cache(model, prefix)
    before = _snapshot(cache)
    draft = EarlyExitDraft(model, 2)
    draft.use_target_cache(cache)
    with torch.inference_mode():
        prop = draft.propose(prefix, 4, sampling=SamplingConfig(temperature=1.0),
                             generator=torch.Generator().manual_seed(0))
    assert prop.tokens.shape[0] == 4 and prop.n_forwards == 4
    for i, ((k0, v0, n0), layer) in enumerate(zip(before, cache.layers)):
        assert layer.get_seq_length() == n0, f"layer {i} length changed"
        assert torch.equal(layer.keys, k0) and torch.equal(layer.values, v0), f"layer {i} states changed"


@pytest.mark.parametrize("name,prompt_len", [("llama", 12), ("gemma", 3 * WINDOW)])
def test_early_exit_draft_lent_cache_q_equals_own_cache_q(request, name, prompt_len):
    """The same drafted tokens (greedy) and the same q rows, to float rounding, as the draft on its own cache."""
    model = request.getfixturevalue(name)
    prefix = torch.randint(3, 64, (prompt_len,), generator=torch.Generator().manual_seed(2))
    own = ModelDraft(early_exit_model(model, 2), 64, "own-cache")
    lent = EarlyExitDraft(model, 2)
    lent.use_target_cache(_lent_cache(model, prefix))
    greedy = SamplingConfig(temperature=0.0)
    with torch.inference_mode():
        a = own.propose(prefix, 4, sampling=greedy)
        b = lent.propose(prefix, 4, sampling=greedy)
    assert a.tokens.tolist() == b.tokens.tolist()
    torch.testing.assert_close(b.probs, a.probs, atol=Q_PARITY_ATOL, rtol=0)
    torch.testing.assert_close(b.entropies, a.entropies, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name,prompt_len", [("llama", 12), ("gemma", 3 * WINDOW)])
def test_speculative_greedy_with_lent_cache_equals_target_alone(request, name, prompt_len):
    """Greedy speculative decoding with the early-exit draft (lent the cache) emits the target's tokens."""
    model = request.getfixturevalue(name)
    ids = torch.randint(3, 64, (1, prompt_len), generator=torch.Generator().manual_seed(3))
    draft = make_draft(model, "early-exit:2")
    assert isinstance(draft, EarlyExitDraft)
    res = speculative_generate(model, draft, ids, SpeculativeSettings(max_new_tokens=20, gamma=3))
    assert draft.lent_cache is not None, "the loop must lend its cache to an early-exit draft"
    assert res.tokens == target_generate(model, ids, max_new_tokens=20).tokens
    assert res.n_drafted > res.n_accepted, "the test needs rejected draft tokens"


def test_early_exit_draft_without_lent_cache_is_a_model_draft(llama):
    """Driven directly (no loop to lend a cache) it drafts exactly as an own-cache ModelDraft."""
    prefix = torch.randint(3, 64, (10,), generator=torch.Generator().manual_seed(4))
    own = ModelDraft(early_exit_model(llama, 2), 64, "own-cache")
    alone = EarlyExitDraft(llama, 2)
    sampled = SamplingConfig(temperature=1.0)
    with torch.inference_mode():
        a = own.propose(prefix, 3, sampling=sampled, generator=torch.Generator().manual_seed(5))
        b = alone.propose(prefix, 3, sampling=sampled, generator=torch.Generator().manual_seed(5))
    assert a.tokens.tolist() == b.tokens.tolist() and torch.equal(a.probs, b.probs)


class _KeepsItsPositions(EarlyExitDraft):
    """Broken variant (control): drafts on the lent cache and never crops its positions away."""

    def propose(self, prefix_ids, gamma, **kwargs):
        from lab.speculative.drafts import draft_loop

        held = self.lent_cache.get_seq_length()
        return draft_loop(self._forward_lent, prefix_ids[held:], gamma, self.vocab_size, self.device, **kwargs)


def test_speculative_loop_control_draft_that_keeps_its_positions_is_stopped(llama):
    """Negative control (fault class: a borrowed cache not given back): the loop's check raises at once."""
    ids = torch.randint(3, 64, (1, 12), generator=torch.Generator().manual_seed(3))
    with pytest.raises(AssertionError, match="the drafter left the target's cache"):
        speculative_generate(llama, _KeepsItsPositions(llama, 2), ids,
                             SpeculativeSettings(max_new_tokens=20, gamma=3))
