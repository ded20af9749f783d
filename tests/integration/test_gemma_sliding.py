"""Speculative decoding on the real Gemma-3-270M past its 512-token sliding window.

Regression (fault class: KV-cache rollback on sliding-window layers):
speculative decoding on ``gemma3-270m`` raised "crop was called, but the current
layer does not track past states" at the first rollback once the window was
reached. Greedy output must equal the target alone for a ~600-token prompt, with an
early-exit and a prompt-lookup draft, and every rollback must leave a cache whose
next logits equal a full recomputation.
"""

from __future__ import annotations

import copy

import pytest
import torch

from lab.models.chat import eos_token_ids
from lab.models.loading import load_model
from lab.speculative.draft_specs import make_draft
from lab.speculative.loop import speculative_generate, target_generate
from lab.speculative.settings import SpeculativeSettings
from tests.support import CACHE_PARITY_ATOL_WIDE

MAX_NEW = 16
TEXT = ("The lighthouse keeper climbed the stairs every evening to light the lamp, counting the steps as his "
        "father had taught him, and every evening the sea below was a different colour. ")


@pytest.fixture(scope="module")
def gemma():
    model, tok = load_model("gemma3-270m", device="cpu")
    window = model.config.get_text_config(decoder=True).sliding_window
    assert window == 512 and "sliding_attention" in model.config.layer_types
    return model, tok


QUESTION = ("\nQuestion: on the last evening of the story, what colour was the sea, and why did the keeper "
            "keep counting the steps? Answer in one sentence:")


@pytest.fixture(scope="module")
def long_prompt(gemma):
    """~600 tokens: repetitive text (prompt lookup finds matches) ending in a question (so it guesses wrong)."""
    _, tok = gemma
    body = tok(TEXT * 20, return_tensors="pt").input_ids[:, :570]
    question = tok(QUESTION, return_tensors="pt", add_special_tokens=False).input_ids
    ids = torch.cat([body, question], dim=1)  # [1, ~600]: past the 512 window
    assert 590 <= ids.shape[1] <= 620
    return ids


@pytest.fixture(scope="module")
def reference(gemma, long_prompt):
    model, tok = gemma
    return target_generate(model, long_prompt, max_new_tokens=MAX_NEW, eos_token_ids=eos_token_ids(model, tok)).tokens


@pytest.mark.parametrize("spec", ["early-exit:12", "prompt-lookup"])
def test_gemma_real_speculative_past_window_greedy_equals_target(gemma, long_prompt, reference, spec):
    model, tok = gemma
    eos = eos_token_ids(model, tok)
    rollbacks = []

    def on_round(record, committed, cache):
        if record.n_accepted < len(record.proposed) and not rollbacks:  # check the first rollback
            probe = copy.deepcopy(cache)
            with torch.inference_mode():
                cached = model(input_ids=committed[-1:].unsqueeze(0), cache=probe, use_cache=True).logits[0, -1]
                full = model(input_ids=committed.unsqueeze(0)).logits[0, -1]
            torch.testing.assert_close(cached, full, atol=CACHE_PARITY_ATOL_WIDE, rtol=0)
            rollbacks.append(record.round)

    res = speculative_generate(model, make_draft(model, spec), long_prompt,
                               SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=4, eos_token_ids=eos),
                               on_round=on_round)
    assert res.tokens == reference, f"draft={spec}"
    assert rollbacks, "no draft token was rejected: the rollback past the window went untested"
