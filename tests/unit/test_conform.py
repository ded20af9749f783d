"""The conformance core's contracts: the chains.

Properties (hypothesis): every chain's law sums to 1, keeps a maximal token and never a
token outside top-k; the transformers order equals the lab's own filter
(:mod:`lab.sampling`) and transformers' warpers with min-p, away from float boundaries;
the llama.cpp and transformers orders differ on a crafted example and agree at
temperature 1. Errors are one line naming the argument.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import assume, given, strategies as st

from lab.conform import chains
from lab.conform.chains import LLAMA_CPP, TRANSFORMERS, Chain, Settings, chain_logits, chain_probs
from tests.strategies import conform_settings, logit_vectors, masked_logit_vectors

# Float64 reference against float32 filters: the kept sets agree unless a cumulative sum or a logit gap
# lies within float32 rounding (~1e-7 relative) of the boundary; these margins keep such draws out.
BOUNDARY_MARGIN = 1e-5
PROB_ATOL = 1e-5  # float32 softmax against float64: ~1e-7 per entry, well inside this


# --------------------------------------------------------------------------- chains


@pytest.mark.parametrize("kwargs, field", [
    ({"temperature": -0.1}, "temperature"), ({"temperature": math.inf}, "temperature"),
    ({"temperature": True}, "temperature"), ({"top_k": 0}, "top_k"), ({"top_k": 2.0}, "top_k"),
    ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"min_p": -0.1}, "min_p"), ({"min_p": 1.1}, "min_p"),
])
def test_settings_out_of_range_raises_naming_field(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}="):
        Settings(**kwargs)


def test_chain_order_not_a_permutation_raises():
    with pytest.raises(ValueError, match="^order="):
        Chain("x", ("temperature", "top_k", "top_p"))
    with pytest.raises(ValueError, match="^order="):
        Chain("x", ("temperature", "top_k", "top_p", "top_p"))


@pytest.mark.parametrize("logits", [[], [[1.0, 2.0]], [1.0, math.nan], [1.0, math.inf], [-math.inf, -math.inf]])
def test_chain_probs_bad_logits_raise(logits):
    with pytest.raises(ValueError, match="^logits must"):
        chain_probs(logits, LLAMA_CPP, Settings())


def test_chain_logits_greedy_raises_and_chain_probs_greedy_is_one_hot_at_first_max():
    with pytest.raises(ValueError, match="^chain_logits needs temperature > 0"):
        chain_logits([1.0, 2.0], TRANSFORMERS, Settings(temperature=0.0))
    assert chain_probs([1.0, 3.0, 3.0], TRANSFORMERS, Settings(temperature=0.0, top_k=1)).tolist() == [0, 1, 0]


@given(st.one_of(logit_vectors(min_size=1), masked_logit_vectors()), conform_settings(),
       st.sampled_from([TRANSFORMERS, LLAMA_CPP]))
def test_chain_probs_any_logits_sum_to_one_keep_argmax_and_stay_in_top_k(logits, settings, chain):
    """sum(probs) = 1; a token of the largest logit is kept (which one, among ties, is top-p's choice); every kept
    token is among the top-k (ties included) and finite."""
    x = logits.double().numpy()
    before = x.copy()
    probs = chain_probs(logits, chain, settings)
    assert probs.dtype == np.float64 and probs.shape == x.shape
    assert abs(probs.sum() - 1.0) < 1e-12
    assert (probs[x == x.max()] > 0).any()
    kept = probs > 0
    assert np.isfinite(x[kept]).all()
    if settings.top_k is not None and settings.top_k < x.size:
        kth = np.sort(x)[::-1][settings.top_k - 1]
        assert (x[kept] >= kth).all()
    assert np.array_equal(x, before)


def _near_boundary(x: np.ndarray, settings: Settings) -> bool:
    """Whether a float32 filter could keep another set than the float64 one (top-k gap, top-p sum, min-p cut)."""
    z = x / settings.temperature
    if settings.top_k is not None and settings.top_k < z.size:
        desc = np.sort(z)[::-1]
        a, b = desc[settings.top_k - 1], desc[settings.top_k]
        if a != b and a - b < BOUNDARY_MARGIN * max(1.0, abs(a)):
            return True
    z = chains._top_k(z, settings.top_k)
    if settings.top_p < 1:
        cum = np.cumsum(chains._softmax(z)[np.argsort(z, kind="stable")])[:-1]
        if np.abs(cum - (1.0 - settings.top_p)).min(initial=1.0) < BOUNDARY_MARGIN:
            return True
        z = chains._top_p(z, settings.top_p)
    if settings.min_p > 0:
        gaps = (z - z.max())[np.isfinite(z)] - math.log(settings.min_p)
        return bool(np.abs(gaps).min() < BOUNDARY_MARGIN)
    return False


@given(logit_vectors(min_size=1, bound=20.0), conform_settings(max_k=48))
def test_transformers_chain_equals_lab_sampling_filter(logits, settings):
    """Without min-p, the transformers order is the lab's own filter: the same kept set and probabilities."""
    from lab.sampling import SamplingConfig, filter_logits, sampling_probs

    settings = dataclasses.replace(settings, min_p=0.0)
    assume(not _near_boundary(logits.double().numpy(), settings))
    config = SamplingConfig(settings.temperature, settings.top_k, settings.top_p)
    kept = torch.isfinite(filter_logits(logits, config)).numpy()  # a float32 probability may underflow to 0
    assert np.array_equal(np.isfinite(chain_logits(logits, TRANSFORMERS, settings)), kept), f"sets differ: {settings}"
    np.testing.assert_allclose(chain_probs(logits, TRANSFORMERS, settings), sampling_probs(logits, config).numpy(),
                               atol=PROB_ATOL)


@given(logit_vectors(min_size=1, bound=20.0), conform_settings(max_k=48))
def test_transformers_chain_equals_transformers_warpers_with_min_p(logits, settings):
    """transformers' Temperature -> TopK -> TopP -> MinP warpers (generate's order) keep the same set."""
    from transformers import (LogitsProcessorList, MinPLogitsWarper, TemperatureLogitsWarper, TopKLogitsWarper,
                              TopPLogitsWarper)

    assume(not _near_boundary(logits.double().numpy(), settings))
    warpers = LogitsProcessorList([TemperatureLogitsWarper(settings.temperature)])
    if settings.top_k is not None:
        warpers.append(TopKLogitsWarper(settings.top_k))
    if settings.top_p < 1:
        warpers.append(TopPLogitsWarper(settings.top_p))
    if settings.min_p > 0:
        warpers.append(MinPLogitsWarper(settings.min_p))
    ref = warpers(torch.zeros(1, 1, dtype=torch.long), logits.unsqueeze(0))[0]
    assert np.array_equal(np.isfinite(chain_logits(logits, TRANSFORMERS, settings)), torch.isfinite(ref).numpy()), (
        f"kept sets differ for {settings}")
    np.testing.assert_allclose(chain_probs(logits, TRANSFORMERS, settings), ref.softmax(-1).numpy(), atol=PROB_ATOL)


def test_llama_cpp_and_transformers_orders_differ_on_crafted_example():
    """At T = 2, top-p 0.7 over (0.5, 0.3, 0.15, 0.05): llama.cpp's raw nucleus keeps 2 tokens, the
    scaled one 3; min-p 0.5 at T = 2 keeps 2 tokens on the raw law (0.15 / 0.5 < 0.5), 3 on the scaled
    one (sqrt(0.3) >= 0.5 > sqrt(0.1))."""
    x = np.log([0.5, 0.3, 0.15, 0.05])
    top_p = Settings(temperature=2.0, top_p=0.7)
    assert (chain_probs(x, LLAMA_CPP, top_p) > 0).sum() == 2
    assert (chain_probs(x, TRANSFORMERS, top_p) > 0).sum() == 3
    min_p = Settings(temperature=2.0, min_p=0.5)
    assert (chain_probs(x, LLAMA_CPP, min_p) > 0).sum() == 2
    assert (chain_probs(x, TRANSFORMERS, min_p) > 0).sum() == 3


@given(st.one_of(logit_vectors(min_size=1), masked_logit_vectors()), conform_settings())
def test_chain_orders_agree_at_temperature_one_or_without_top_p_and_min_p(logits, settings):
    """At temperature 1 the two orders apply the same steps in the same order; temperature commutes with top-k."""
    at_one = dataclasses.replace(settings, temperature=1.0)
    assert np.array_equal(chain_probs(logits, LLAMA_CPP, at_one), chain_probs(logits, TRANSFORMERS, at_one))
    only_k = dataclasses.replace(settings, top_p=1.0, min_p=0.0)
    np.testing.assert_allclose(chain_probs(logits, LLAMA_CPP, only_k), chain_probs(logits, TRANSFORMERS, only_k),
                               atol=1e-12)


def test_top_p_tie_at_boundary_keeps_higher_token_id_as_transformers():
    """(0.4, 0.3, 0.3), top-p 0.5: transformers' ascending sort keeps token 2 of the tied pair."""
    assert (chain_probs(np.log([0.4, 0.3, 0.3]), TRANSFORMERS, Settings(top_p=0.5)) > 0).tolist() == [True, False, True]


def test_describe_names_engine_and_active_steps_in_order():
    settings = Settings(temperature=0.7, top_k=20, min_p=0.05)
    assert TRANSFORMERS.describe(settings) == "transformers: temperature=0.7 -> top_k=20 -> min_p=0.05"
    assert LLAMA_CPP.describe(settings) == "llama.cpp: top_k=20 -> min_p=0.05 -> temperature=0.7"


def test_conform_imports_no_torch_and_no_scipy():
    """``lab.conform`` stays light at import: torch and scipy are imported inside the functions that need them."""
    code = ("import sys, lab.conform, lab.conform.chains; "
            "print(sorted(m for m in ('torch', 'scipy', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
