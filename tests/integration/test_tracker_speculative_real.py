"""The study's one-decode pipeline on the real models.

Greedy: the tracker's statistics read off a speculative run that goes on from the
attention capture's prefill (what ``lab study`` runs per prompt) equal the tracked
target-only decode's, step by step, within the tolerances stated in
:mod:`lab.tracker.speculative`, on SmolLM2 with its early-exit draft and on the
Qwen2.5-Coder pair. Kept short (one or two prompts, 24 tokens); the max differences go
to the integration log.
"""

from __future__ import annotations

import pytest

from lab.decode import enable_rollback, new_cache
from lab.models.chat import build_messages, encode_chat
from lab.sinks.prefill import analyze_prefill
from lab.speculative.draft_specs import make_draft
from lab.speculative.drafts import model_draft
from lab.tracker.loop import track_generate
from lab.tracker.speculative import track_speculative
from lab.tracker.results import DecodeSettings
from tests.support import assert_same_track_steps

NEW_TOKENS = 24
GAMMA = 4
# One prompt per model: the unit tier covers the round structure (rejections, EOS, sliding
# windows); here only the real models' rounding is under test. A factual prompt for SmolLM2
# (alpha ~0.4 with its early-exit draft: many corrections), a code prompt for the pair.
SMOLLM2_PROMPTS = ("What is the boiling point of water at sea level in degrees Celsius?",)
QWEN_PROMPT = "Write a Python function that merges two sorted lists."


def _compare(target, tok, draft, prompt, lab_log):
    messages = build_messages(prompt)
    ids = encode_chat(tok, messages)
    ref = track_generate(target, tok, ids, max_new_tokens=NEW_TOKENS)
    cache = new_cache(target)
    enable_rollback(cache)
    analyze_prefill(target, tok, messages, cache=cache)  # the study's one target prefill
    got, spec = track_speculative(target, draft, tok, ids, DecodeSettings(max_new_tokens=NEW_TOKENS), gamma=GAMMA,
                                  target_cache=cache)
    worst = assert_same_track_steps(ref, got)
    lab_log.record(prompt=prompt, n_tokens=len(got.steps), alpha=spec.alpha,
                   **{f"max_abs_diff_{k}": v for k, v in worst.items()},
                   tracked_decode_s=ref.elapsed_s, speculative_s=got.elapsed_s)
    assert len(got.steps) >= 8, "too short a decode for the comparison to mean much"


@pytest.mark.parametrize("prompt", SMOLLM2_PROMPTS)
def test_smollm2_track_speculative_greedy_equals_tracker(smollm2, prompt, lab_log):
    model, tok = smollm2
    _compare(model, tok, make_draft(model, "early-exit:24"), prompt, lab_log)


def test_qwen_pair_track_speculative_greedy_equals_tracker(qwen_pair, lab_log):
    target, tok, draft_model, dtok = qwen_pair
    draft = model_draft(target, draft_model, target_tokenizer=tok, draft_tokenizer=dtok, name="qwen2.5-coder-0.5b")
    _compare(target, tok, draft, QWEN_PROMPT, lab_log)
