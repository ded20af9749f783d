"""The CUDA code paths, on tiny random models (no weights): run where a CUDA device exists.

The lab's users run it on CUDA boxes; the reference machines and CI have no GPU, so
these tests skip there (with a reason) and are run on a lent GPU machine. They check
what differs on a GPU: the device generator in sampling, device synchronisation in
the timed forward, SDPA's CUDA kernels under the lab's masks (the attention capture
and the eviction masks of ``lab stream``), and the bfloat16 default dtype.

Each check compares the CUDA result with the same computation on the CPU (or with a
second path on the GPU), never with a stored number.
"""

from __future__ import annotations

import copy

import pytest
import torch

from lab.sampling import SamplingConfig
from tests import support
from tests.support import CACHE_PARITY_ATOL_WIDE

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

# float32 on both devices; different kernels (cuBLAS vs MKL, CUDA SDPA vs CPU SDPA)
# reduce in different orders, so results agree to ~1e-6 relative on these tiny
# models. TF32 is off by default for float32 matmuls in torch, so no 1e-3 drift.
CROSS_DEVICE_ATOL = 1e-4

N_NEW = 20


def _prompt(vocab: int, n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, vocab, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def cuda_llama():
    return support.tiny_llama_untied(vocab_size=141, num_layers=4, seed=0).to("cuda")


def test_cuda_greedy_tracker_baseline_and_speculative_emit_the_same_tokens(cuda_llama):
    from lab.speculative.draft_specs import make_draft
    from lab.speculative.loop import speculative_generate, target_generate
    from lab.speculative.settings import SpeculativeSettings
    from lab.speculative.drafts import model_draft
    from lab.tracker.results import DecodeSettings
    from lab.tracker.loop import run_decode

    prompt = _prompt(141, 12).to("cuda")
    base = target_generate(cuda_llama, prompt, max_new_tokens=N_NEW).tokens
    cpu = target_generate(support.tiny_llama_untied(vocab_size=141, num_layers=4, seed=0), prompt.cpu(),
                          max_new_tokens=N_NEW).tokens
    assert base == cpu, "CUDA and CPU greedy decodes of the same float32 model differ"
    tracked = run_decode(cuda_llama, prompt, DecodeSettings(max_new_tokens=N_NEW), eos_ids=set(), record=True, seed=None)
    assert tracked.new_token_ids == base
    for spec in ("early-exit:1", "early-exit:3", "prompt-lookup"):
        for gamma in (1, 4):
            got = speculative_generate(cuda_llama, make_draft(cuda_llama, spec), prompt,
                                       SpeculativeSettings(max_new_tokens=N_NEW, gamma=gamma)).tokens
            assert got == base, f"{spec} gamma={gamma}"
    other = support.tiny_llama_untied(vocab_size=141, num_layers=1, seed=7).to("cuda")
    got = speculative_generate(cuda_llama, model_draft(cuda_llama, other), prompt,
                               SpeculativeSettings(max_new_tokens=N_NEW, gamma=3)).tokens
    assert got == base


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cuda_sampled_tracker_and_baseline_agree_from_one_device_generator(cuda_llama, seed):
    from lab.speculative.loop import target_generate
    from lab.tracker.results import DecodeSettings
    from lab.tracker.loop import run_decode

    prompt = _prompt(141, 12).to("cuda")
    settings = DecodeSettings(max_new_tokens=N_NEW, temperature=0.9, top_k=20, top_p=0.9)
    tracked = run_decode(cuda_llama, prompt, settings, eos_ids=set(), record=True, seed=seed).new_token_ids
    base = target_generate(cuda_llama, prompt, max_new_tokens=N_NEW, sampling=settings.sampling,
                           generator=torch.Generator(device="cuda").manual_seed(seed)).tokens
    assert tracked == base


def test_cuda_sampled_speculative_loop_runs_with_a_device_generator(cuda_llama):
    from lab.speculative.draft_specs import make_draft
    from lab.speculative.loop import speculative_generate
    from lab.speculative.settings import SpeculativeSettings

    prompt = _prompt(141, 12).to("cuda")
    result = speculative_generate(cuda_llama, make_draft(cuda_llama, "early-exit:2"), prompt,
                                  SpeculativeSettings(max_new_tokens=N_NEW, gamma=3,
                                                      sampling=SamplingConfig(temperature=1.0)),
                                  generator=torch.Generator(device="cuda").manual_seed(0))
    assert len(result.tokens) == N_NEW and all(0 <= t < 141 for t in result.tokens)


@pytest.mark.parametrize("prompt_len", [24, 5])  # past the window, and a generation that crosses it
@pytest.mark.parametrize("spec", ["early-exit:2", "prompt-lookup"])
def test_cuda_gemma3_sliding_window_speculative_equals_target_and_cache_equals_recompute(prompt_len, spec):
    from lab.speculative.draft_specs import make_draft
    from lab.speculative.loop import speculative_generate, target_generate
    from lab.speculative.settings import SpeculativeSettings

    gemma = support.tiny_gemma3(sliding_window=8).to("cuda")
    ids = _prompt(64, prompt_len, seed=2).to("cuda")
    ref = target_generate(gemma, ids, max_new_tokens=N_NEW).tokens
    worst = []

    def on_round(rec, committed, cache):
        probe = copy.deepcopy(cache)
        with torch.inference_mode():
            cached = gemma(input_ids=committed[-1:].unsqueeze(0), cache=probe, use_cache=True).logits[0, -1]
            full = gemma(input_ids=committed.unsqueeze(0)).logits[0, -1]
        worst.append(float((cached - full).abs().max()))

    got = speculative_generate(gemma, make_draft(gemma, spec), ids,
                               SpeculativeSettings(max_new_tokens=N_NEW, gamma=4), on_round=on_round)
    assert got.tokens == ref
    assert worst and max(worst) < CACHE_PARITY_ATOL_WIDE  # cached after rollbacks vs a full recomputation


def test_cuda_forward_timing_is_synchronised(cuda_llama):
    from lab.decode import generate

    prompt = _prompt(141, 12).to("cuda")
    generate(cuda_llama, prompt, max_new_tokens=4)  # warm-up: kernels and handles
    res = generate(cuda_llama, prompt, max_new_tokens=32)
    assert 0 < res.prefill_time_s <= res.forward_time_s <= res.total_time_s


def test_cuda_attention_capture_equals_cpu_eager():
    from lab.sinks.capture import capture_received, eager_received

    model = support.tiny_llama(num_layers=3, heads=4, kv_heads=2)
    ids = _prompt(256, 37)
    want = eager_received(model, ids)
    got = capture_received(copy.deepcopy(model).to("cuda"), ids.to("cuda"), chunk_size=5).per_head
    torch.testing.assert_close(got.cpu(), want, atol=CROSS_DEVICE_ATOL, rtol=0)


@pytest.mark.parametrize("spec", ["dense", "window:3", "sinks:1+3", "sinks:2+4", "detected:2+3"])
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_cuda_eviction_masked_nll_equals_cpu(spec, arch):
    from lab.stream.perplexity import masked_nll
    from lab.stream.policies import parse_policy

    model = (support.tiny_llama_untied(vocab_size=64) if arch == "llama"
             else support.tiny_gemma3(sliding_window=5))
    ids = _prompt(64, 14, seed=1)
    detected = (0, 5, 2, 7)
    want = masked_nll(model, ids, parse_policy(spec), detected)
    got = masked_nll(copy.deepcopy(model).to("cuda"), ids.to("cuda"), parse_policy(spec), detected)
    torch.testing.assert_close(got.cpu(), want, atol=CROSS_DEVICE_ATOL, rtol=0)


def test_cuda_default_dtype_is_bfloat16_and_runs():
    from lab.models.devices import default_dtype
    from lab.speculative.draft_specs import make_draft
    from lab.speculative.loop import speculative_generate
    from lab.speculative.settings import SpeculativeSettings

    dtype = default_dtype(torch.device("cuda"))
    assert dtype == (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16)
    model = support.tiny_llama_untied(vocab_size=141, num_layers=4, seed=0).to("cuda", dtype)
    prompt = _prompt(141, 12).to("cuda")
    result = speculative_generate(model, make_draft(model, "early-exit:2"), prompt,
                                  SpeculativeSettings(max_new_tokens=N_NEW, gamma=3,
                                                      sampling=SamplingConfig(temperature=1.0)),
                                  generator=torch.Generator(device="cuda").manual_seed(0))
    assert len(result.tokens) == N_NEW
