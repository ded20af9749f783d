"""The bench's levers (lab.bench.levers) on tiny random models: no weights."""

from __future__ import annotations

import pytest
import torch

from lab.speculative.draft_specs import make_draft
from lab.bench.run import BenchConfig, run_bench
from lab.bench.levers import assistant_settings
from lab.speculative.per_pass import per_pass_draft
from tests.support import tiny_llama_untied


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def target(one_torch_thread):
    return tiny_llama_untied(num_layers=4, seed=0)


def _spy_candidates(monkeypatch):
    from transformers.generation import candidate_generator as cg

    seen = []
    orig = cg.AssistedCandidateGenerator.get_candidates

    def spy(self, input_ids, *args, **kwargs):
        seen.append((int(self.num_assistant_tokens), self.assistant_generation_config.assistant_confidence_threshold))
        return orig(self, input_ids, *args, **kwargs)

    monkeypatch.setattr(cg.AssistedCandidateGenerator, "get_candidates", spy)
    return seen


def test_bench_assisted_gamma_is_the_gamma_transformers_drafts(target, monkeypatch):
    """Fault class: settings passed to generate() that transformers 5.24 ignores (it reads
    num_assistant_tokens from the assistant's own generation config), so "assisted
    gamma=G" silently ran the library's default of 20 tokens."""
    seen = _spy_candidates(monkeypatch)
    prompts = [torch.randint(3, 64, (1, 8), generator=torch.Generator().manual_seed(0))]
    before = target.generation_config.to_dict()
    run_bench(target, make_draft(target, "early-exit:2"), prompts,
              BenchConfig(gammas=(3,), adaptive=(), max_new_tokens=8, repeats=1, warmup_tokens=2))
    ours = [n for n, threshold in seen if threshold == 0.0]  # "assisted gamma=3": constant, no confidence stop
    assert ours and set(ours) == {3}, f"assisted gamma=3 ran with (tokens, threshold) {sorted(set(seen))}"
    assert (20, 0.4) in seen, "the 'its defaults' method runs transformers' own defaults"
    assert target.generation_config.to_dict() == before


def test_assistant_settings_restores_the_assistant_config(target):
    assistant = tiny_llama_untied(num_layers=1, seed=2)
    before = assistant.generation_config.to_dict()
    with assistant_settings(assistant, num_assistant_tokens=2, num_assistant_tokens_schedule="heuristic"):
        assert assistant.generation_config.num_assistant_tokens == 2
        assistant.generation_config.num_assistant_tokens = 9  # what a heuristic schedule writes back
    assert assistant.generation_config.to_dict() == before


def test_bench_assisted_rows_with_prompt_lookup_run_transformers_own_lookup(target):
    """Fault class: with a draft that runs no model (prompt lookup), "transformers assisted gamma=G" failed at
    its warm-up (the assistant's generation config read off None) and was reported as refused."""
    prompts = [torch.tensor([[5, 6, 7, 8, 5, 6, 7, 8, 5, 6]])]
    bench = run_bench(target, make_draft(target, "prompt-lookup"), prompts,
                      BenchConfig(gammas=(2,), adaptive=(), max_new_tokens=8, repeats=1, warmup_tokens=2))
    m = bench.methods
    assert "transformers assisted gamma=2" in m and m["transformers assisted gamma=2"].same_tokens_as_lab_target_loop
    assert not bench.assisted_errors, bench.assisted_errors


@pytest.mark.slow  # about a second or more on a quiet 2-core machine (the quick loop's one-minute aim)
def test_bench_levers_run_in_the_alternating_schedule_and_stay_lossless(target):
    prompts = [torch.randint(3, 64, (1, 8), generator=torch.Generator().manual_seed(i)) for i in range(2)]
    config = BenchConfig(gammas=(2,), adaptive=(), max_new_tokens=10, repeats=1, warmup_tokens=2,
                         dynamic=("dynamic:2:6",), draft_dtypes=("bfloat16",), prompt_lookup=True)
    bench = run_bench(target, make_draft(target, "early-exit:2"), prompts, config)
    m = bench.methods
    expected = {"speculative dynamic:2:6", "speculative gamma=2 draft=bfloat16", "speculative dynamic:2:6 draft=bfloat16",
                "prompt-lookup gamma=2", "prompt-lookup dynamic:2:6", "transformers assisted (its defaults)"}
    assert expected <= set(m)
    assert all(v.same_tokens_as_lab_target_loop for v in m.values()), \
        {k: v.same_tokens_as_lab_target_loop for k, v in m.items()}
    assert m["speculative dynamic:2:6"].speculative.gamma_policy == "dynamic:2:6"
    assert m["speculative dynamic:2:6"].speculative.speedup_theory_flops is None, "Thm 3.8 assumes a fixed gamma"
    assert m["prompt-lookup gamma=2"].speculative.cost_ratio_flops == 0.0


def test_per_pass_draft_bfloat16_keeps_float32_probabilities(target):
    draft = make_draft(target, "early-exit:2")
    cast = per_pass_draft(draft, "bfloat16")
    assert next(cast.model.parameters()).dtype == torch.bfloat16
    assert next(draft.model.parameters()).dtype == torch.float32, "the original draft is not modified"
    with pytest.raises(ValueError, match="dtype='int3'"):
        per_pass_draft(draft, "int3")


@pytest.mark.parametrize("kwargs,needle", [({"dynamic": ("dyn:1",)}, "policy="),
                                           ({"draft_dtypes": ("int8",)}, "--draft-dtype='int8'")])
def test_bench_config_bad_lever_raises(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        BenchConfig(**kwargs)
