"""verify / verify_greedy at their public boundary: bad input is a ValueError that names the
argument and the offending value, and the default random source is exactly the caller's
``torch.Generator`` (reproducible whatever torch's global generator does)."""

from __future__ import annotations

import re

import pytest
import torch

from lab.speculative.verify import TorchRandom, verify, verify_greedy

V = 5


def rows(ids: list[int], vocab: int = V) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(ids), vocab).float()


# --------------------------------------------------------------------------- the default random source


def test_torch_random_draws_float64_uniforms_in_unit_interval_from_its_generator():
    """``uniforms`` is float64 (2^-53 granularity, so P(u < r) = r to float64 precision) and
    comes from the given generator only: reseeding torch's global RNG changes nothing."""
    torch.manual_seed(123)
    a = TorchRandom(torch.Generator().manual_seed(5)).uniforms(1000, torch.device("cpu"))
    torch.manual_seed(456)
    b = TorchRandom(torch.Generator().manual_seed(5)).uniforms(1000, torch.device("cpu"))
    assert a.dtype == torch.float64 and a.shape == (1000,) and a.device.type == "cpu"
    assert torch.equal(a, b) and bool(((a >= 0) & (a < 1)).all())
    # float32 uniforms are multiples of 2^-24; float64 ones almost never are
    assert int((a * 2 ** 24 != (a * 2 ** 24).round()).sum()) > 990


def test_torch_random_categorical_uses_its_generator_and_the_row():
    probs = torch.tensor([0.0, 0.3, 0.0, 0.7])
    draws = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        src = TorchRandom(torch.Generator().manual_seed(9))
        draws.append([src.categorical(probs) for _ in range(200)])
    assert draws[0] == draws[1]
    assert set(draws[0]) == {1, 3}


def test_verify_same_generator_seed_same_result_whatever_the_global_rng():
    """``generator=`` is honoured for both the uniforms and the final draw."""
    q = torch.full((3, V), 1.0 / V)
    p = torch.softmax(torch.arange(4 * V, dtype=torch.float32).reshape(4, V) / 5, dim=-1)
    drafts = torch.tensor([4, 1, 0])
    results = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        results.append([verify(drafts, q, p, generator=torch.Generator().manual_seed(s)) for s in range(40)])
    assert results[0] == results[1]
    assert len(set(results[0])) > 3  # the outcomes do depend on the seed


# --------------------------------------------------------------------------- bad input


def test_verify_token_with_zero_q_names_its_index_and_id():
    """The message names the first draft position whose own q gives it probability 0."""
    dp = torch.tensor([[0.5, 0.5, 0, 0, 0], [0.5, 0.5, 0, 0, 0], [0, 0, 0, 0.5, 0.5]])
    with pytest.raises(ValueError, match=re.escape("draft_tokens[1]=3 probability 0")):
        verify(torch.tensor([0, 3, 3]), dp, torch.full((4, V), 1.0 / V))


@pytest.mark.parametrize("drafts,dp,tp,match", [
    (torch.tensor([1, V]), rows([1, 2]), rows([1, 2, 3]), rf"outside \[0, {V}\)"),  # id == V
    (torch.tensor([-1, 2]), rows([1, 2]), rows([1, 2, 3]), rf"outside \[0, {V}\)"),
    (torch.tensor([[1], [2]]), rows([1, 2]), rows([1, 2, 3]), "1-D integer"),  # [gamma, 1]
    (torch.tensor([1.0, 2.0]), rows([1, 2]), rows([1, 2, 3]), "1-D integer"),  # float ids
    (torch.tensor([1, 2]), rows([1, 2]), rows([1, 2]), re.escape("gamma + 1 = 3, got 2")),
    (torch.tensor([1, 2]), rows([1, 2]), rows([1, 2, 3, 4]), re.escape("gamma + 1 = 3, got 4")),
    (torch.tensor([1, 2]), rows([1]), rows([1, 2, 3]), "draft_probs rows must be gamma = 2, got 1"),
    (torch.tensor([1]), rows([1]), torch.full((V,), 1.0 / V), re.escape(f"target_probs ({V},)")),  # 1-D p
    (torch.tensor([1]), torch.full((V,), 1.0 / V), rows([1, 2]), re.escape(f"draft_probs ({V},)")),  # 1-D q
    (torch.tensor([1]), rows([1], V + 1), rows([1, 2]), "must be"),  # vocabularies differ
])
def test_verify_bad_input_raises_value_error_naming_it(drafts, dp, tp, match):
    with pytest.raises(ValueError, match=match):
        verify(drafts, dp, tp, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("drafts,logits,match", [
    (torch.tensor(1), torch.zeros(2, V), "1-D integer"),  # 0-D tokens
    (torch.tensor([[1, 2]]), torch.zeros(3, V), "1-D integer"),
    (torch.tensor([1, 2]), torch.zeros(2, V), re.escape("gamma + 1 = 3, got 2")),
    (torch.tensor([1, V]), torch.zeros(3, V), "outside"),
    (torch.tensor([1]), torch.zeros(V), re.escape(f"target_logits must be [gamma + 1, V], got ({V},)")),
])
def test_verify_greedy_bad_input_raises_value_error_naming_it(drafts, logits, match):
    with pytest.raises(ValueError, match=match):
        verify_greedy(drafts, logits)


def test_verify_greedy_gamma_zero_returns_argmax_of_only_row():
    logits = torch.tensor([[0.0, 2.0, 1.0, 5.0, -1.0]])
    assert verify_greedy(torch.zeros(0, dtype=torch.long), logits) == (0, 3)


def test_verify_greedy_int32_drafts_accepted_like_int64():
    logits = torch.log(rows([1, 2, 3]) + 1e-3)
    assert verify_greedy(torch.tensor([1, 2], dtype=torch.int32), logits) == \
        verify_greedy(torch.tensor([1, 2]), logits) == (2, 3)
