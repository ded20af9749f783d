"""The lab's one sampling filter against transformers' warpers (temperature -> top-k -> top-p).

Property: on any logits row, ties and top-p boundaries included, the filter keeps
exactly the token set transformers' ``TemperatureLogitsWarper`` ->
``TopKLogitsWarper`` -> ``TopPLogitsWarper`` keep (the order ``generate`` applies
them), with the same probabilities. A negative control shows that a nucleus
written the other common way (descending sort, "mass before the token < top_p")
keeps a different set on a float boundary, so the comparison can fail.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, strategies as st

from lab.sampling import SamplingConfig, filter_logits, sampling_probs
from lab.tracker.results import DecodeSettings, build_warpers
from tests.strategies import finite_floats


def _warped(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """transformers' warpers on ``[1, V]`` logits (the reference)."""
    warpers = build_warpers(DecodeSettings(temperature=config.temperature, top_k=config.top_k, top_p=config.top_p))
    return warpers(torch.zeros(1, 1, dtype=torch.long), logits.float())


def _assert_same_as_warpers(logits: torch.Tensor, config: SamplingConfig) -> None:
    ours = filter_logits(logits, config)
    ref = _warped(logits, config)
    assert torch.equal(torch.isfinite(ours), torch.isfinite(ref)), (
        f"kept sets differ for {config}: ours {torch.isfinite(ours).nonzero().flatten().tolist()}, "
        f"transformers {torch.isfinite(ref).nonzero().flatten().tolist()}, logits {logits.tolist()}")
    assert torch.equal(ours.softmax(-1), ref.softmax(-1)), f"probabilities differ for {config}"
    assert torch.equal(sampling_probs(logits, config), ref.softmax(-1))


@st.composite
def tied_logit_rows(draw) -> torch.Tensor:
    """A float32 ``[1, V]`` logits row whose values come from a few levels, so ties are common."""
    levels = draw(st.lists(finite_floats(10.0), min_size=1, max_size=4))
    v = draw(st.integers(1, 24))
    return torch.tensor([[draw(st.sampled_from(levels)) for _ in range(v)]], dtype=torch.float32)


@st.composite
def logit_rows(draw) -> torch.Tensor:
    """A float32 ``[1, V]`` logits row of independent finite values."""
    values = draw(st.lists(finite_floats(20.0), min_size=1, max_size=48))
    return torch.tensor([values], dtype=torch.float32)


sampling_configs = st.builds(
    SamplingConfig,
    temperature=st.sampled_from([0.3, 0.7, 1.0, 1.5]),
    top_k=st.one_of(st.none(), st.integers(1, 30)),
    top_p=st.one_of(st.just(1.0), st.sampled_from([0.1, 0.5, 0.8, 0.9, 0.95]),
                    st.floats(0.01, 1.0, exclude_min=False, allow_nan=False)),
)


@given(st.one_of(logit_rows(), tied_logit_rows()), sampling_configs)
def test_filter_logits_any_row_keeps_transformers_set_and_probabilities(logits, config):
    """For every row and setting: same kept token set and same probabilities as transformers' warpers."""
    _assert_same_as_warpers(logits, config)


@pytest.mark.parametrize("probs, config", [
    ([0.5, 0.3, 0.2], SamplingConfig(1.0, top_p=0.8)),  # mass before the last token is exactly top_p
    ([0.5, 0.25, 0.25], SamplingConfig(1.0, top_p=0.5)),  # the low tail sums to exactly 1 - top_p
    ([0.25, 0.25, 0.25, 0.25], SamplingConfig(1.0, top_p=0.5)),  # all tied at the boundary
    ([0.4, 0.2, 0.2, 0.2], SamplingConfig(1.0, top_k=2)),  # ties at the k-th logit: all kept
    ([0.4, 0.2, 0.2, 0.2], SamplingConfig(1.0, top_k=2, top_p=0.5)),
    ([0.9, 0.1], SamplingConfig(2.0, top_k=5)),  # k > V
    ([1.0], SamplingConfig(0.5, top_k=1, top_p=0.01)),  # V = 1
    ([0.6, 0.4], SamplingConfig(1.0, top_p=0.01)),  # the top token alone
])
def test_filter_logits_boundary_cases_match_warpers(probs, config):
    """Ties and exact top-p / top-k boundaries: the same set and probabilities as transformers."""
    _assert_same_as_warpers(torch.tensor([probs]).log(), config)


def _descending_nucleus(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """Negative control: top-p as "keep while the mass before the token < top_p" (descending sort),
    the lab's filter before the decode core unified the two."""
    x = logits.float() / config.temperature
    sorted_x, order = x.sort(dim=-1, descending=True)
    before = sorted_x.softmax(-1).cumsum(-1) - sorted_x.softmax(-1)
    drop_sorted = before >= config.top_p
    return x.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))


def test_filter_comparison_control_descending_nucleus_differs_on_tie():
    """The same comparison rejects the other nucleus convention (fault class: two filters that differ
    on the top-p boundary token). At p = (0.4, 0.3, 0.3), top_p = 0.5, one of the two tied tokens
    goes: transformers (ascending sort) keeps token 2, a descending sort keeps token 1."""
    logits = torch.tensor([[0.4, 0.3, 0.3]]).log()
    config = SamplingConfig(1.0, top_p=0.5)
    ref = _warped(logits, config)
    assert not torch.equal(torch.isfinite(_descending_nucleus(logits, config)), torch.isfinite(ref))
    _assert_same_as_warpers(logits, config)


def test_filter_logits_greedy_raises_and_input_unchanged():
    x = torch.tensor([[1.0, 2.0, 3.0]])
    before = x.clone()
    filter_logits(x, SamplingConfig(0.7, top_k=1, top_p=0.5))
    assert torch.equal(x, before)
    with pytest.raises(ValueError, match="^filter_logits needs temperature > 0"):
        filter_logits(x, SamplingConfig(0.0))


def test_filter_logits_top_p_one_leaves_every_logit_finite_even_if_its_probability_underflows():
    """top_p = 1 keeps all tokens: the result is exactly logits / temperature, no -inf, even for a token
    whose float32 softmax is 0 (a cumulative-mass cut at 1 - top_p = 0 would drop it)."""
    x = torch.tensor([[0.0, -200.0, 3.0, -150.0]])
    config = SamplingConfig(0.5, top_p=1.0)
    assert float(torch.softmax(x / config.temperature, dim=-1)[0, 1]) == 0.0  # the case is the intended one
    assert torch.equal(filter_logits(x, config), x / config.temperature)
