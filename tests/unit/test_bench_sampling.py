"""``lab bench`` in sampling mode: every method draws through one filter, seeds recorded per run.

Fault class: methods compared under different sampling filters (the lab's loops at one top-p,
transformers' ``generate`` at the model's own generation-config defaults, as Qwen2.5's top_k 20 /
top_p 0.8 / repetition penalty would silently be), which makes their speeds and acceptance
incomparable. The filter each method is actually built with is recorded where it is used: the
``SamplingConfig`` the lab's loops receive, and the logits processors transformers builds inside
``generate`` (alone, assisted, and the assistant's own drafting).
"""

from __future__ import annotations

import pytest
import torch

from lab.bench import levers, run as bench_run
from lab.speculative.settings import SpeculativeSettings
from lab.bench.results import Spread
from lab.bench.run import BenchConfig, run_bench, run_seed
from lab.sampling import SamplingConfig
from lab.speculative.draft_specs import make_draft
from tests.support import tiny_llama_untied

SAMPLING = SamplingConfig(temperature=0.7, top_k=20, top_p=0.9)


@pytest.fixture(scope="module")
def target(one_torch_thread):
    return tiny_llama_untied(num_layers=4, seed=0)


def _hf_filter(processors) -> tuple:
    """(temperature, top_k, top_p, other processors) of a transformers LogitsProcessorList."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    t, k, p, other = 1.0, None, 1.0, []
    for proc in processors:
        if isinstance(proc, TemperatureLogitsWarper):
            t = float(proc.temperature)
        elif isinstance(proc, TopKLogitsWarper):
            k = int(proc.top_k)
        elif isinstance(proc, TopPLogitsWarper):
            p = float(proc.top_p)
        else:
            other.append(type(proc).__name__)
    return (t, k, p, tuple(other))


# transformers' assistant drafts exactly its N tokens by masking EOS until then (min_new_tokens):
# a constraint on how long it drafts, in the draft only (its q), not a sampling filter; the
# verifier's own processors must carry nothing beyond the three warpers.
ASSISTANT_LENGTH_ONLY = ("MinLengthLogitsProcessor",)


def _without_assistant_length(name: str, filters: set) -> set:
    if not name.startswith("transformers assisted"):
        return filters
    return {(t, k, p, tuple(o for o in other if o not in ASSISTANT_LENGTH_ONLY)) for t, k, p, other in filters}


def _lab_filter(sampling: SamplingConfig) -> tuple:
    return (float(sampling.temperature), sampling.top_k, float(sampling.top_p), ())


def _record_filters(target, monkeypatch, config) -> tuple[dict, dict]:
    """Run the bench; return ({method: set of filters it was built with}, the bench)."""
    from transformers.generation.utils import GenerationMixin

    current = {"method": None}
    seen: dict[str, set] = {}

    def note(f):
        seen.setdefault(current["method"], set()).add(f)

    orig_processors = GenerationMixin._get_logits_processor

    def spy_processors(self, *args, **kwargs):
        out = orig_processors(self, *args, **kwargs)
        note(_hf_filter(out))
        return out

    orig_target, orig_spec = bench_run.target_generate, levers.speculative_generate

    def spy_target(*args, **kwargs):
        note(_lab_filter(kwargs["sampling"]))
        return orig_target(*args, **kwargs)

    def spy_spec(target, draft, ids, settings, **kwargs):
        note(_lab_filter(settings.sampling))
        assert kwargs["generator"] is not None, "a sampling run without its seeded generator"
        return orig_spec(target, draft, ids, settings, **kwargs)

    monkeypatch.setattr(GenerationMixin, "_get_logits_processor", spy_processors)
    monkeypatch.setattr(bench_run, "target_generate", spy_target)
    monkeypatch.setattr(levers, "speculative_generate", spy_spec)

    def progress(msg: str) -> None:
        current["method"] = msg.split(": ", 1)[1]

    prompts = [torch.randint(3, 64, (1, 8), generator=torch.Generator().manual_seed(i)) for i in range(2)]
    bench = run_bench(target, make_draft(target, "early-exit:2"), prompts, config, progress=progress)
    seen.pop(None, None)  # the untimed warm-ups
    return seen, bench


def _config() -> BenchConfig:
    return BenchConfig(gammas=(2,), adaptive=("pmin:0.3",), max_new_tokens=6, repeats=2, warmup_tokens=2,
                       dynamic=("dynamic:2:4",), sampling=SAMPLING, seed=5)


@pytest.mark.slow
def test_bench_sampling_every_method_is_built_with_the_same_filter(target, monkeypatch):
    seen, bench = _record_filters(target, monkeypatch, _config())
    assert set(seen) == set(bench.methods), "every timed method was observed"
    assert any(name.startswith("transformers assisted") for name in seen)
    assert {name: fs for name, fs in seen.items() if _without_assistant_length(name, fs) != {_lab_filter(SAMPLING)}} == {}


@pytest.mark.slow  # about a second or more on a quiet 2-core machine (the quick loop's one-minute aim)
def test_bench_sampling_a_method_with_another_top_p_is_caught(target, monkeypatch):
    """Negative control: transformers given top-p 0.5 while the lab's loops use 0.9 shows up as a mismatch."""
    real = bench_run.hf_sampling_kwargs
    monkeypatch.setattr(bench_run, "hf_sampling_kwargs", lambda s: {**real(s), "top_p": 0.5})
    seen, _ = _record_filters(target, monkeypatch, _config())
    wrong = {name for name, fs in seen.items() if _without_assistant_length(name, fs) != {_lab_filter(SAMPLING)}}
    assert "target-only (transformers generate)" in wrong and "target-only (lab loop)" not in wrong


def test_bench_sampling_records_seeds_per_run_and_spreads_over_repeats(target):
    config = BenchConfig(gammas=(2,), adaptive=(), max_new_tokens=6, repeats=2, warmup_tokens=2, assisted=False,
                         sampling=SAMPLING, seed=5)
    prompts = [torch.randint(3, 64, (1, 8), generator=torch.Generator().manual_seed(i)) for i in range(2)]
    bench = run_bench(target, make_draft(target, "early-exit:2"), prompts, config)
    for r in bench.runs:
        assert r.seed == run_seed(5, r.repeat, r.prompt)
    assert len({r.seed for r in bench.runs}) == 4, "one seed per (repeat, prompt)"
    spec = bench.methods["speculative gamma=2"]
    assert spec.same_tokens_as_lab_target_loop is None, "sampling mode: tokens are not compared"
    spread = spec.per_repeat
    for figure in ("e2e_tokens_per_s", "decode_tokens_per_s", "e2e_speedup", "decode_speedup", "alpha"):
        s = spread[figure]
        assert s.min <= s.median <= s.max, (figure, s)
    base = bench.methods["target-only (lab loop)"].per_repeat["e2e_speedup"]
    assert base == Spread(min=1.0, median=1.0, max=1.0)


def test_bench_sampling_same_seed_gives_the_same_tokens(target):
    """The seeds are real: a speculative run repeated from the same seed emits the same tokens."""
    config = BenchConfig(gammas=(2,), adaptive=(), max_new_tokens=8, repeats=1, warmup_tokens=2, assisted=False,
                         sampling=SAMPLING, seed=3, methods=("speculative gamma=2",))
    prompts = [torch.randint(3, 64, (1, 8), generator=torch.Generator().manual_seed(0))]
    draft = make_draft(target, "early-exit:2")
    seeds = bench_run.RunSeeds(config)
    seeds.set(0, 0)
    a = levers.timed_speculative("x", target, draft, prompts[0], bench_run.Run,
                                 SpeculativeSettings(max_new_tokens=8, gamma=2, sampling=SAMPLING),
                                 generator=seeds.generator())
    b = levers.timed_speculative("x", target, draft, prompts[0], bench_run.Run,
                                 SpeculativeSettings(max_new_tokens=8, gamma=2, sampling=SAMPLING),
                                 generator=seeds.generator())
    seeds.set(0, 1)
    c = levers.timed_speculative("x", target, draft, prompts[0], bench_run.Run,
                                 SpeculativeSettings(max_new_tokens=8, gamma=2, sampling=SAMPLING),
                                 generator=seeds.generator())
    assert a.tokens == b.tokens
    assert a.tokens != c.tokens, "another seed should draw another sequence (negative control)"
