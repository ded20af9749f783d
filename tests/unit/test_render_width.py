"""Every view the lab prints is legible at 80 columns.

Fault class: a Rich table squeezed into a narrow terminal cuts headers and cells
("tok…", "meth…"), folds words in the middle ("correctio / n:") or prints raw
escapes (``\\xa0``). Each command's view is rendered into
``Console(width=80, record=True)`` and the exported text must contain every header
and every token string whole, no ellipsis and no raw escape. (The study's view is
tested with the study.)
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from rich.console import Console

from lab.provenance import MachineLoad, MethodLoad
from lab.speculative.results import RoundRecord, SpeculativeResult
from lab.sampling import SamplingConfig
from tests.provenance import ENVIRONMENT, MACHINE_LOAD, MODEL_SOURCE

WIDTH = 80
ELLIPSIS = "…"


def _render(fn, *args, **kwargs) -> str:
    console = Console(width=WIDTH, record=True, force_terminal=False, color_system=None)
    fn(*args, console, **kwargs)
    return console.export_text()


def assert_legible(text: str, *whole: str) -> None:
    """No line past 80 columns, no ellipsis, no raw escape (``\\xa0``), and each string of ``whole`` uncut.

    (A no-break space *character* in the answer itself is the model's text and stays.)"""
    assert all(len(line) <= WIDTH for line in text.splitlines()), max(text.splitlines(), key=len)
    assert ELLIPSIS not in text, text
    assert "\\x" not in text, text
    missing = [w for w in whole if w.strip() and w.strip() not in text]
    assert not missing, f"cut or missing: {missing}\n{text}"


# --------------------------------------------------------------------------- speculate


class FakeTokenizer:
    """Decodes ids to the strings a real BPE tokenizer gives, including a no-break space and a special token."""

    VOCAB = {0: "<|im_end|>", 1: " correction", 2: ":", 3: "\xa0", 4: " Paris", 5: " is", 6: " the", 7: " capital",
             8: " of", 9: " France", 10: ".", 11: " hashtable", 12: " collisions", 13: "\n", 14: " entropy"}
    all_special_ids = [0]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(self.VOCAB[i] for i in ids if not (skip_special_tokens and i in self.all_special_ids))


def _round(i: int, proposed: list[int], n_acc: int, nxt: int | None, kind: str, stop: str = "gamma") -> RoundRecord:
    k = len(proposed)
    return RoundRecord(round=i, proposed=proposed, n_accepted=n_acc, next_token=nxt, next_kind=kind,
                       stop_reason=stop, draft_entropies=[1.234] * k, draft_normalized_entropies=[0.1] * k,
                       accepted_mask=[j < n_acc for j in range(k)], tested_mask=[j <= n_acc for j in range(k)],
                       draft_time_s=0.0123, verify_time_s=0.0456, n_draft_forwards=k)


def _spec_result() -> SpeculativeResult:
    rounds = [_round(0, [4, 5, 6, 7], 2, 1, "correction"), _round(1, [2, 3, 8, 9], 4, 10, "bonus"),
              _round(2, [11, 12, 14, 13], 1, 6, "correction", stop="entropy"), _round(3, [0], 1, None, "none", "eos")]
    tokens = [t for r in rounds for t in r.emitted]
    return SpeculativeResult(tokens=tokens, rounds=rounds, gamma=4, prompt_length=12, stopped_by="eos",
                             prefill_time_s=0.1, total_time_s=0.7, draft_name="early-exit:24",
                             sampling=SamplingConfig(), adaptive="entropy:0.3")


def test_speculate_view_legible_at_80_columns():
    from lab.render.speculative import render_speculation

    text = _render(render_speculation, _spec_result(), FakeTokenizer())
    tokens = [s for i, s in FakeTokenizer.VOCAB.items() if i not in (3,)]
    assert_legible(text, "#", "proposed", "kept", "next", "stop", "H bits", "ms d/v", "correction", "corr  correction",
                   "entropy", *tokens)


def test_speculate_answer_hides_special_tokens_keeps_ids():
    """Regression (fault class: special tokens printed as answer text): <|im_end|> is in the ids, not in the
    replay or summary text."""
    from lab.render.speculative import answer_text, replay_text, summary_markdown

    result = _spec_result()
    assert 0 in result.tokens
    assert "<|im_end|>" not in replay_text(result, FakeTokenizer()).plain
    assert "<|im_end|>" not in answer_text(FakeTokenizer(), result.tokens)
    md = summary_markdown(result, FakeTokenizer(), prompt="q", model_info={}, seed=1)
    assert "<|im_end|>" not in md.split("## Output", 1)[1]


def test_speculate_visible_shows_no_break_space_as_space():
    from lab.render.speculative import visible

    assert visible("a\xa0b\u2009c") == "a b c"
    assert visible("a\x00b\nc") == "a\\x00b⏎c"


# --------------------------------------------------------------------------- bench


def _bench_data(busy: bool):
    """A bench result with long method names and a comparison's text."""
    from lab.bench.results import Comparison
    from tests.support import bench_method, bench_result

    spec = dict(alpha=0.812, tau=3.21, speedup_predicted_from_measured_times=1.9, efficiency=0.87,
                overhead_fraction=0.123, measured_speedup=1.234)
    methods = {"target-only (lab loop)": bench_method(), "target-only (transformers generate)": bench_method()}
    for g in (1, 2, 4, 6):
        methods[f"speculative gamma={g}"] = bench_method(4, **spec)
        methods[f"transformers assisted gamma={g}"] = bench_method()
    methods["speculative gamma=6 adaptive=entropy:0.3"] = bench_method(4, **spec)
    comparisons = (Comparison(method="speculative gamma=4", against="transformers assisted gamma=4",
                              kind="tokens_per_s_ratio", value=1.9,
                              text="speculative gamma=4: 1.90x the tokens/s of transformers' assisted generation "
                                   "at gamma=4 (medians)"),)
    load = MachineLoad(busy=busy, busy_methods=["speculative gamma=4"],
                       per_method={m: MethodLoad([], [], []) for m in methods}, max_load_1m=3.71, threads=2,
                       cpu_count=2, samples=[],
                       rule="busy when the 1-minute load average exceeds the bench's 2 torch thread(s) + 0.5")
    return bench_result(methods, comparisons=comparisons,
                        assisted_errors={"transformers assisted gamma=6": "ValueError: refused"}, machine_load=load)


def test_bench_view_legible_at_80_columns_and_states_comparisons():
    from lab.render.bench import method_label, render_bench

    data = _bench_data(busy=True)
    text = _render(render_bench, data)
    assert_legible(text, "method", "tok/s", "min", "max", "speedup", "same", "alpha", "tau", "predicted",
                   "efficiency", "overhead", *(method_label(m) for m in data.methods))
    assert "MISS" not in text and "met " not in text and "targets" not in text
    assert "1.90x the tokens/s of transformers'" in " ".join(text.split())
    assert "WARNING: the machine was busy" in text


def test_bench_view_quiet_machine_has_no_warning():
    from lab.render.bench import render_bench

    assert "WARNING" not in _render(render_bench, _bench_data(busy=False))


def test_bench_tracker_view_legible_at_80_columns():
    from lab.bench.tracker import ArmTimes, tracker_report
    from lab.render.entropy import bench_rows, render_bench
    from lab.tracker.results import DecodeSettings

    report = tracker_report(
        prompt="hi", settings=DecodeSettings(max_new_tokens=64, temperature=0.0, top_k=None, top_p=1.0, seed=0),
        repeats=3, prompt_tokens=9, vocab_size=49152, model=MODEL_SOURCE,
        environment=ENVIRONMENT, arms=ArmTimes(off=[1.0, 1.1, 1.3], on=[1.01, 1.12, 1.35], identical=True),
        statistics_s=123.4e-6, torch_threads=1,
        machine_load=dataclasses.replace(MACHINE_LOAD, busy=True, max_load_1m=2.5, rule="r"))
    text = _render(render_bench, report)
    assert_legible(text, "measure", "value", *(name for name, _ in bench_rows(report)))
    assert "goal" not in text and "WARNING" in text


# --------------------------------------------------------------------------- sinks, calibration, bench-sinks


@pytest.fixture(scope="module")
def all_flagged_analysis():
    from lab.sinks.prefill import analyze_prefill
    from tests import support

    tok = support.chatml_tokenizer()
    model = support.tiny_llama(vocab_size=len(tok), num_layers=2)
    msgs = [{"role": "user", "content": "what is the capital of france ? [bold] <|im_start|> the capital is paris ."}]
    return analyze_prefill(model, tok, msgs, threshold=-1e9)  # every observed position in a table


def test_sinks_view_legible_at_80_columns(all_flagged_analysis):
    from lab.render.sinks import ROLE_LABEL, render_analysis

    a = all_flagged_analysis
    text = _render(render_analysis, a, model_name="tiny")
    shown = [repr(a.tokens[i]) for i in (*a.structural, *a.content_sinks)]  # the two tables' rows
    assert_legible(text, "pos", "token", "role", "attn", "z", "rate", "sink", *shown,
                   *(ROLE_LABEL.get(r, r) for r in a.roles))


def test_sinks_token_repr_shows_no_break_space_as_space():
    from lab.render.sinks import token_repr

    assert token_repr("\xa0Paris") == "' Paris'" and token_repr("a\nb") == "'a\\nb'"


def test_calibration_and_bench_sinks_tables_legible_at_80_columns():
    from lab.bench.sinks import SinksBenchReport
    from lab.kinds.bench_sinks import Comparison
    from lab.render.sinks import bench_table
    from lab.render.sink_calibration import sweep_table
    from lab.sinks.calibration import SweepRow

    sweep = [SweepRow(threshold=t / 4, position0_flagged=36, n_prompts=36, content_flagged=3 if t % 2 == 0 else 9,
                      n_content=765, long_position0_flagged=1, long_n_prompts=1, long_content_flagged=12,
                      long_n_content=2019) for t in range(4, 30)]
    text = _render(lambda d, c: c.print(sweep_table("gm_prose", d, n_prompts=36, n_content_tokens=765, chosen=3.75)),
                   sweep)
    assert_legible(text, "z", "position 0", "content flagged", "long: pos 0", "long: content", "feasible", "36/36",
                   "3/765 (0.39%)", "12/2019")
    bench = SinksBenchReport(model="smollm2", environment=ENVIRONMENT, torch_threads=1, machine_load=MACHINE_LOAD,
                             results=[
        {"mode": "sdpa", "length": 8192, "seconds": 12.3, "extra_bytes": 3e8},
        {"mode": "capture", "length": 8192, "seconds": 25.6, "extra_bytes": 6e8},
        {"mode": "eager", "length": 2048, "error": "MemoryError: out of memory"}],
        comparison=Comparison(length=8192, time_ratio=2.08, capture_extra_bytes=600_000_000, plain_extra_bytes=300_000_000))
    text = _render(lambda d, c: c.print(bench_table(d)), bench)
    assert_legible(text, "method", "tokens", "seconds", "peak beyond model", "plain SDPA prefill",
                   "streaming capture", "eager output_attentions")
    assert "MISSED" not in text and "target" not in text


# --------------------------------------------------------------------------- entropy


def _track_result():
    from lab.tracker.results import DecodeSettings, StepRecord, TrackResult

    texts = [(" The", 5), (" capital", 6), (" of", 7), (" France", 8), (" is", 9), ("\xa0Paris", 10), (".", 11),
             ("<|im_end|>", 2)]
    steps = [StepRecord(position=10 + i, token_id=tid, token_text=t, entropy_bits=1.0 + i, normalized_entropy=0.05 * i,
                        varentropy_bits2=0.5, sampled_entropy_bits=0.0, sampled_normalized_entropy=0.0,
                        chosen_prob=0.9 - 0.1 * i, alternatives=[(tid, t, 0.5), (99, " Lyon", 0.2),
                                                                 (98, " Marseille", 0.1)])
             for i, (t, tid) in enumerate(texts)]
    return TrackResult(steps=steps, prompt_ids=torch.zeros(1, 10, dtype=torch.long),
                       new_token_ids=[s.token_id for s in steps], text="The capital of France is Paris.",
                       settings=DecodeSettings(max_new_tokens=8), stop_reason="eos", elapsed_s=0.5, seed=None,
                       vocab_size=49152)


def test_entropy_view_legible_at_80_columns_without_special_tokens_in_answer():
    """Regression (fault classes: tables cut at 80 columns, special tokens printed as answer text): table
    legible at 80 columns; <|im_end|> not in the answer."""
    from lab.render.entropy import coloured_text, render_result, visible

    result = _track_result()
    text = _render(render_result, result, prompt="What is the capital of France?", model_name="tiny",
                   special_ids=[2])
    assert_legible(text, "step", "token", "H bits", "H/log2V", "p(chosen)", "alternatives (p)",
                   *(visible(s.token_text) for s in result.steps[:-1]), "·Lyon", "·Marseille")
    assert "<|im_end|>" not in coloured_text(result, {2}).plain
    assert "<|im_end|>" in coloured_text(result).plain  # without the special ids it shows: the ids are kept
    assert math.isclose(result.steps[-1].chosen_prob, 0.2)
