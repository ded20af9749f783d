"""The per-pass draft (lab.speculative.per_pass) on tiny random models: no weights.

The per-pass draft runs its prefill in float32 and its one-token steps and short
catch-ups in bfloat16, casting its KV cache between them. Its greedy proposals must
equal the float32 draft's except where the two dtypes' argmax may honestly differ
(a near-tie of the float32 logits), and a cache cast that loses a position must be
caught by the same comparison (negative control).
"""

from __future__ import annotations

import pytest
import torch

from lab.sampling import SamplingConfig
from lab.speculative.drafts import ModelDraft
from lab.speculative.loop import speculative_generate, target_generate
from lab.speculative.settings import SpeculativeSettings
from lab.speculative.per_pass import (LONG_PASS_TOKENS, PerPassDraft, cache_dtype, cast_cache, parse_draft_dtype,
                                      pass_shapes, per_pass_draft)
from tests.support import tiny_llama_untied

GREEDY = SamplingConfig(temperature=0.0)
# A proposal that differs from the float32 draft's is a dtype near-tie when the float32
# logit gap between the two tokens is within this share of the row's largest |logit|.
# bfloat16 keeps 8 mantissa bits (relative step 2**-8 = 0.4 %); on this tiny model a full
# bfloat16 forward moves a logit by up to ~7 % of max |logit|, and the per-pass draft's
# differing proposals (6 of 264 compared) had gaps of 0.2-2.3 %. The negative control's
# differing proposals had gaps of 0.9-106 %, 39 of 65 of them above 5 %.
TIE_SHARE = 0.05
PROMPT_LEN = 24  # > LONG_PASS_TOKENS: the prefill runs in float32
N_ROUNDS = 30
GAMMA = 3


@pytest.fixture(scope="module")
def draft_model(one_torch_thread):
    return tiny_llama_untied(num_layers=4, seed=3)


def _full_logits(model, seq: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([seq])).logits[0, -1].float()  # [V], no cache: the reference


def _compare(reference: ModelDraft, candidate: ModelDraft, model32, prompt: list[int]) -> dict[str, int]:
    """Drive both drafters through the same rounds (commits mirror the speculative loop's)
    and count the candidate's proposals that differ from the reference's."""
    reference.reset()
    candidate.reset()
    seq = list(prompt)
    counts = {"compared": 0, "same": 0, "near_tie": 0, "unexplained": 0}
    with torch.inference_mode():
        for _ in range(N_ROUNDS):
            ids = torch.tensor(seq)
            p_ref = reference.propose(ids, GAMMA, sampling=GREEDY).tokens.tolist()
            p_cand = candidate.propose(ids, GAMMA, sampling=GREEDY).tokens.tolist()
            agree = 0
            for j in range(GAMMA):
                counts["compared"] += 1
                if p_cand[j] == p_ref[j]:
                    counts["same"] += 1
                    agree += 1
                    continue
                row = _full_logits(model32, seq + p_ref[:j])
                gap = float(row[p_ref[j]] - row[p_cand[j]])
                counts["near_tie" if gap <= TIE_SHARE * float(row.abs().max()) else "unexplained"] += 1
                break  # after a difference the candidate drafts from its own token: not comparable
            reference.commit(agree)
            candidate.commit(agree)
            bonus = p_ref[agree] if agree < GAMMA else int(_full_logits(model32, seq + p_ref).argmax())
            seq += p_ref[:agree] + [bonus]
    return counts


def _prompt(seed: int) -> list[int]:
    return torch.randint(3, 64, (PROMPT_LEN,), generator=torch.Generator().manual_seed(seed)).tolist()


class _DroppingCast(PerPassDraft):
    """Negative control: a cast that loses the most recent cached position."""

    def _cast(self, dtype: torch.dtype) -> None:
        cast_cache(self.cache, dtype)
        self.cache.crop(-1)


@pytest.mark.slow
def test_per_pass_proposals_equal_float32_draft_except_counted_near_ties(draft_model):
    d32 = ModelDraft(draft_model, 64, "tiny")
    per_pass = per_pass_draft(d32, "float32:bfloat16")
    assert isinstance(per_pass, PerPassDraft)
    totals = {"compared": 0, "same": 0, "near_tie": 0, "unexplained": 0}
    for seed in range(3):
        for k, v in _compare(d32, per_pass, draft_model, _prompt(seed)).items():
            totals[k] += v
    assert totals["unexplained"] == 0, f"proposals differ beyond a dtype near-tie: {totals}"
    assert totals["same"] >= 0.8 * totals["compared"], f"too few equal proposals to mean anything: {totals}"
    shapes = pass_shapes(per_pass.passes)
    assert shapes["prefill"]["dtypes"] == ["float32"] and shapes["step"]["dtypes"] == ["bfloat16"], shapes
    assert shapes["catch-up"]["dtypes"] == ["bfloat16"], shapes  # 2-token catch-ups after fully kept drafts


def test_per_pass_with_one_dtype_per_side_is_exactly_the_float32_draft(draft_model):
    """Identity control: float32 on both sides, through the same cast path, changes nothing."""
    d32 = ModelDraft(draft_model, 64, "tiny")
    same = PerPassDraft(draft_model, tiny_llama_untied(num_layers=4, seed=3), 64, "tiny (float32:float32)")
    counts = _compare(d32, same, draft_model, _prompt(0))
    assert counts["same"] == counts["compared"], counts


@pytest.mark.slow
def test_per_pass_comparison_catches_a_cast_that_drops_a_position(draft_model):
    """Negative control: the comparison above must reject a cache cast that loses a position."""
    d32 = ModelDraft(draft_model, 64, "tiny")
    step = per_pass_draft(d32, "bfloat16").model
    broken = _DroppingCast(draft_model, step, 64, "broken")
    unexplained = sum(_compare(d32, broken, draft_model, _prompt(seed))["unexplained"] for seed in range(3))
    assert unexplained > 0, "a cache cast that drops a position went unnoticed"


@pytest.mark.parametrize("gamma", [2, 5])
def test_per_pass_cache_switch_keeps_speculative_output_equal_to_target_greedy(draft_model, gamma):
    target = tiny_llama_untied(num_layers=4, seed=0)
    prompt = torch.tensor([_prompt(7)])
    expected = target_generate(target, prompt, max_new_tokens=24).tokens
    per_pass = per_pass_draft(ModelDraft(draft_model, 64, "tiny"), "per-pass")
    got = speculative_generate(target, per_pass, prompt, SpeculativeSettings(max_new_tokens=24, gamma=gamma))
    assert got.tokens == expected
    assert per_pass.n_casts >= 1 and cache_dtype(per_pass.cache) == torch.bfloat16
    assert got.n_accepted < got.n_drafted_tested, "the draft must be rejected sometimes for the test to mean much"


def test_parse_draft_dtype_forms_and_errors():
    assert parse_draft_dtype("bfloat16") == ("bfloat16", "bfloat16")
    assert parse_draft_dtype("per-pass") == ("float32", "bfloat16")
    assert parse_draft_dtype("float32:float16") == ("float32", "float16")
    for bad in ("int4", "float32:", "float32:bfloat16:float16", ""):
        with pytest.raises(ValueError, match="--draft-dtype"):
            parse_draft_dtype(bad)


def test_per_pass_draft_validates_its_arguments(draft_model):
    with pytest.raises(ValueError, match="long_pass_tokens"):
        PerPassDraft(draft_model, draft_model, 64, long_pass_tokens=1)
    with pytest.raises(ValueError, match="configs differ"):
        PerPassDraft(draft_model, tiny_llama_untied(num_layers=2), 64)
    assert LONG_PASS_TOKENS < PROMPT_LEN


def test_pass_shapes_groups_by_shape():
    shapes = pass_shapes([(30, "float32", 2.0), (1, "bfloat16", 0.5), (2, "bfloat16", 0.75), (1, "bfloat16", 0.25),
                          (20, "float32", 1.0)])
    assert shapes["prefill"] == {"dtypes": ["float32"], "n": 1, "tokens": 30, "time_s": 2.0, "mean_s": 2.0}
    assert shapes["step"]["n"] == 2 and shapes["step"]["mean_s"] == pytest.approx(0.375)
    assert shapes["catch-up"]["tokens"] == 2 and shapes["long catch-up"]["dtypes"] == ["float32"]


def test_study_report_names_both_dtypes_of_a_per_pass_draft(draft_model):
    """The study's report (lab.study.runner.model_dtypes) spells a per-pass draft PREFILL:STEP,
    a single-dtype cast by its one dtype, and an early-exit-like draft by the target's."""
    from lab.study.runner import model_dtypes

    target = tiny_llama_untied(num_layers=2, seed=1)
    base = ModelDraft(draft_model, None, "tiny")
    assert model_dtypes(target, per_pass_draft(base, "float32:bfloat16"), "test")["draft_dtype"] == "float32:bfloat16"
    assert model_dtypes(target, per_pass_draft(base, "bfloat16"), "test")["draft_dtype"] == "bfloat16"
    assert model_dtypes(target, base, "test")["draft_dtype"] == "float32"
    assert model_dtypes(target, ModelDraft(target, None, "self"), "test")["draft_dtype"] == "float32"
