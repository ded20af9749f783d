"""analyze_prefill, calibration sweep, rendering and CLI validation on tiny models (no weights)."""

from __future__ import annotations

import dataclasses
import io
import json
import math

import pytest
import torch
from rich.console import Console

from lab import cli
from lab.models import source as model_sources
from lab.models.source import ModelSource
from lab.sinks.calibration import PromptScores, SweepRow, choose_threshold, load_prompts, sweep
from lab.sinks.prefill import MIN_OBSERVING_QUERIES, analyze_prefill, score_positions
from lab.health.choice import load_chosen
from lab.sinks.profiles import load_calibration, load_choice
from lab.render.sinks import position_rows, render_analysis, report_data, summary_markdown
from lab.sinks.structure import ROLE_CONTENT, ROLE_TEMPLATE
from tests import support


# SmolLM2's calibrated threshold for the z candidate gm_prose, from the same sweep as its shipped
# calibration (lab/sinks/calibrations/smollm2.json).
Z_THRESHOLD = load_calibration("smollm2", statistic="gm_prose").threshold


@pytest.fixture(scope="module")
def tiny_chatml():
    tok = support.chatml_tokenizer()
    return support.tiny_llama(vocab_size=len(tok), num_layers=2), tok


@pytest.fixture(scope="module")
def analysis(tiny_chatml):
    model, tok = tiny_chatml
    msgs = [{"role": "user", "content": "what is the capital of france ? [bold] <|im_start|> the capital is paris ."}]
    return analyze_prefill(model, tok, msgs)


def test_analyze_prefill_shapes_and_consistency(analysis):
    s = len(analysis.tokens)
    assert analysis.per_head.shape == (2, 4, s)
    for name in ("received", "score", "is_sink", "observed", "sink_rate"):
        assert getattr(analysis, name).shape == (s,), name
    torch.testing.assert_close(analysis.received, analysis.per_head.mean(dim=(0, 1)))
    assert analysis.position0_share == pytest.approx(float(analysis.received[0]), abs=1e-6)
    assert set(analysis.structural) == {i for i, r in enumerate(analysis.roles) if r != ROLE_CONTENT}
    flagged = set(torch.nonzero(analysis.is_sink).flatten().tolist())
    assert flagged == set(analysis.content_sinks) | set(analysis.structural_sinks)
    assert set(analysis.content_sinks) <= set(analysis.content_positions)
    chosen = analysis.health_candidates[load_chosen()]  # the lab's health is the chosen candidate's value
    assert analysis.context_health == chosen or (math.isnan(chosen) and math.isnan(analysis.context_health))


def test_analyze_prefill_health_reads_the_models_length_reference(tiny_chatml, tmp_path, monkeypatch):
    """A model with a length reference (the user's file for its profile) gets a finite health, read
    against that reference; without one a *_for_length health is NaN (not a silent unreferenced value)."""
    from lab.health.measures import FOR_LENGTH, REFERENCED_BASES, LengthReference, for_length
    from lab.health.references import reference_record, write_references

    model, tok = tiny_chatml
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path))
    msgs = [{"role": "user", "content": "what is the capital of france ?"}]
    monkeypatch.setitem(model_sources._SOURCES, model, ModelSource(model="tiny", profile="tiny-profile", device="cpu", dtype="float32"))
    bare = analyze_prefill(model, tok, msgs)
    assert all(math.isnan(bare.health_candidates[b + FOR_LENGTH]) for b in REFERENCED_BASES)
    assert bare.health_reference is None and bare.health_measure == load_chosen()
    refs = {b: LengthReference(b, 9.0, -0.2, 0.3) for b in REFERENCED_BASES}
    path = write_references(reference_record("tiny-profile", "tiny", refs, prompts_file="x", n_content=[2, 50],
                                             fitted_at=None))
    a = analyze_prefill(model, tok, msgs)
    assert a.health_reference == str(path)  # the analysis names the reference file it read
    n = sum(r == ROLE_CONTENT for r in a.roles)
    for b in REFERENCED_BASES:
        assert a.health_candidates[b + FOR_LENGTH] == pytest.approx(for_length(a.health_candidates[b], n, refs[b]))


def test_analyze_prefill_tail_never_flagged(analysis):
    """Positions seen by fewer than MIN_OBSERVING_QUERIES queries are not flagged."""
    s = len(analysis.tokens)
    tail = list(range(s - MIN_OBSERVING_QUERIES + 1, s))
    assert not bool(analysis.observed[tail].any())
    assert not bool(analysis.is_sink[tail].any())


def test_analyze_prefill_threshold_below_all_flags_every_observed_position(tiny_chatml):
    model, tok = tiny_chatml
    a = analyze_prefill(model, tok, [{"role": "user", "content": "the capital of france is paris , you know ."}],
                        threshold=-1e9)
    torch.testing.assert_close(a.is_sink, a.observed)
    assert a.content_sinks and a.content_sink_health == 0.0


@pytest.mark.parametrize("kwargs, match", [({"threshold": float("nan")}, "threshold"),
                                           ({"epsilon": 1.5}, "epsilon")])
def test_analyze_prefill_bad_settings_raise(tiny_chatml, kwargs, match):
    model, tok = tiny_chatml
    with pytest.raises(ValueError, match=match):
        analyze_prefill(model, tok, [{"role": "user", "content": "hello"}], **kwargs)


def test_analyze_prefill_empty_messages_raise(tiny_chatml):
    model, tok = tiny_chatml
    with pytest.raises(ValueError, match="messages"):
        analyze_prefill(model, tok, [])


def test_analyze_prefill_prompt_longer_than_context_raises(tiny_chatml):
    model, tok = tiny_chatml
    with pytest.raises(ValueError, match="context"):
        analyze_prefill(model, tok, [{"role": "user", "content": "the " * 600}])


def test_score_positions_template_markers_excluded_from_baseline():
    """Changing a template marker's score changes only its own z (it is not in the baseline)."""
    roles = [ROLE_TEMPLATE] + [ROLE_CONTENT] * 20
    g = torch.Generator().manual_seed(1)
    per_head = torch.rand(2, 3, 21, generator=g) * 0.05 + 0.01
    other = per_head.clone()
    other[:, :, 0] = 0.9
    a, b = score_positions(per_head, roles), score_positions(other, roles)
    torch.testing.assert_close(a.score[1:], b.score[1:])
    assert float(b.score[0]) > float(a.score[0])


def test_score_positions_shape_mismatch_raises():
    with pytest.raises(ValueError, match="roles"):
        score_positions(torch.rand(1, 1, 5), ["content"] * 4)


# --------------------------------------------------------------------------- calibration


def _scores(pos0_z, content_z):
    z = torch.tensor([pos0_z, *content_z], dtype=torch.float32)
    content = torch.tensor([False] + [True] * len(content_z))
    return PromptScores(id="p", scores={load_choice().statistic: z}, observed=torch.ones(len(z), dtype=torch.bool),
                        content=content)


def test_calibration_sweep_counts_and_middle_of_feasible_range():
    scores = [_scores(6.0, [0.0] * 99 + [2.0]), _scores(7.0, [0.5] * 100)]
    rows = sweep(scores, thresholds=[1.0, 1.5, 2.0, 3.0, 5.0, 6.5, 8.0])
    assert [(r.position0_flagged, r.content_flagged) for r in rows] == [
        (2, 1), (2, 1), (2, 0), (2, 0), (2, 0), (1, 0), (0, 0)]
    assert [r.feasible for r in rows] == [True, True, True, True, True, False, False]
    assert choose_threshold(rows) == 3.0  # middle of 1.0 .. 5.0


def test_calibration_sweep_long_prompts_must_meet_the_criteria_too():
    """A threshold that passes the short set but flags >= 1 % of a long prompt's content is infeasible."""
    short = [_scores(6.0, [0.0] * 100)]
    long = [_scores(9.0, [0.0] * 90 + [2.5] * 10)]  # 10 % of the long prompt's content at z = 2.5
    rows = sweep(short, thresholds=[1.0, 2.0, 3.0], long_scores=long)
    assert [(r.long_position0_flagged, r.long_content_flagged, r.long_n_content) for r in rows] == [
        (1, 10, 100), (1, 10, 100), (1, 0, 100)]
    assert [r.feasible for r in rows] == [False, False, True]
    assert [r.feasible for r in sweep(short, thresholds=[1.0, 2.0, 3.0])] == [True, True, True]  # control


def test_calibration_trailing_flagged_counts_only_the_last_positions():
    z = torch.zeros(100)
    z[95], z[50] = 9.0, 9.0
    ps = PromptScores(id="p", scores={load_choice().statistic: z}, observed=torch.ones(100, dtype=torch.bool),
                      content=torch.ones(100, dtype=torch.bool))
    assert ps.trailing_flagged(3.0) == 1 and ps.trailing_flagged(10.0) == 0


def test_calibration_long_prompts_reach_the_length(chatml_tokenizer):
    from lab.sinks.calibration import long_prompts

    (p,) = long_prompts(chatml_tokenizer, [300])
    assert p.id == "long-300" and len(chatml_tokenizer(p.prompt, add_special_tokens=False)["input_ids"]) >= 290
    with pytest.raises(ValueError, match="64"):
        long_prompts(chatml_tokenizer, [10])


def test_calibration_packaged_held_out_set_is_disjoint_from_calibration_set():
    from lab.sinks.calibration import HELD_OUT_SET, evaluate

    held, cal = load_prompts(packaged=HELD_OUT_SET), load_prompts()
    assert len(held) >= 20 and not {p.prompt for p in held} & {p.prompt for p in cal}
    counts = evaluate([_scores(6.0, [4.0] + [0.0] * 99), _scores(2.0, [0.0] * 99 + [4.0])], 3.0)
    assert counts == {"position0_flagged": 1, "n_prompts": 2, "content_flagged": 2, "n_content": 200,
                      "trailing_flagged": 1}


def test_sweep_row_rates_are_counts_over_totals_and_zero_with_nothing_observed():
    """The shares the sweep table and plot print are the row's own: flagged / observed, short and long
    prompts apart, 0 (not a division error) where nothing was observed."""
    row = SweepRow(threshold=1.0, position0_flagged=9, n_prompts=10, content_flagged=3, n_content=100,
                   long_position0_flagged=2, long_n_prompts=4, long_content_flagged=5, long_n_content=50)
    assert (row.position0_rate, row.content_rate, row.long_position0_rate, row.long_content_rate) == (
        0.9, 0.03, 0.5, 0.1)
    empty = SweepRow(threshold=1.0, position0_flagged=1, n_prompts=1, content_flagged=0, n_content=0)
    assert (empty.content_rate, empty.long_position0_rate, empty.long_content_rate) == (0.0, 0.0, 0.0)


def test_calibration_no_feasible_threshold_raises():
    rows = [SweepRow(threshold=1.0, position0_flagged=1, n_prompts=10, content_flagged=0, n_content=100)]
    with pytest.raises(ValueError, match="no threshold"):
        choose_threshold(rows)


def test_calibration_packaged_prompt_set_has_at_least_30_unique_prompts():
    prompts = load_prompts()
    assert len(prompts) >= 30 and len({p.id for p in prompts}) == len(prompts)


def test_calibration_bad_prompt_file_raises(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n')
    with pytest.raises(ValueError, match="repeats id"):
        load_prompts(bad)


# --------------------------------------------------------------------------- rendering


def test_render_analysis_shows_markup_literally(analysis):
    """Token text that looks like Rich markup is printed as typed, never interpreted."""
    tokens = list(analysis.tokens)
    tokens[14] = "[bold red]x[/]"
    buf = io.StringIO()
    render_analysis(dataclasses.replace(analysis, tokens=tuple(tokens)),
                    Console(file=buf, width=120, color_system=None), model_name="[tiny]")
    text = buf.getvalue()
    assert "[bold red]x[/]" in text and "context health" in text and "structural positions" in text


def test_render_names_the_measure_the_analysis_recorded_not_the_current_choice(analysis):
    """Fault class: a renderer that reads the choice file when it draws, so a report names what the file
    says then, not the measure the analysis used; the renderers draw ``health_measure`` as given."""
    from lab.health.measures import CANDIDATES
    from lab.render.sinks import health_panel

    other = next(name for name in CANDIDATES if name != analysis.health_measure)
    drawn = dataclasses.replace(analysis, health_measure=other)
    assert report_data(drawn)["context_health_measure"] == other
    buf = io.StringIO()
    Console(file=buf, width=400, color_system=None).print(health_panel(drawn))
    assert f"({other}:" in buf.getvalue() and f"({analysis.health_measure}:" not in buf.getvalue()


def test_report_data_and_rows_are_json_ready(analysis):
    from lab.reports import to_jsonable

    json.dumps(to_jsonable(report_data(analysis)), allow_nan=False)
    rows = position_rows(analysis)
    assert len(rows) == len(analysis.tokens) and rows[0]["observers"] == len(analysis.tokens)
    assert "| pos |" in summary_markdown(analysis, prompt="p", system=None, model_info={})


# --------------------------------------------------------------------------- CLI validation (before loading)


@pytest.mark.parametrize("argv, match", [
    (["sinks"], "exactly one of PROMPT or --prompt-file"),
    (["sinks", "hi", "--prompt-file", "x.txt"], "exactly one"),
    (["sinks", "   "], "empty"),
    (["sinks", "--prompt-file", "/nonexistent/prompt.txt"], "--prompt-file /nonexistent/prompt.txt: no such file"),
    (["sinks", "hi", "--threshold", "nan"], "threshold"),
    (["sinks", "hi", "--device", "tpu"], "device"),
    (["bench-sinks", "--lengths", "abc"], "lengths"),
    (["calibrate-sinks", "--prompts", "/nonexistent.jsonl"], "--prompts='/nonexistent.jsonl': no such file"),
])
def test_cli_sinks_bad_input_exits_2_without_report(argv, match, tmp_path, capsys):
    code = cli.main([*argv, "--out", str(tmp_path / "reports")])
    assert code == 2
    assert match in capsys.readouterr().err
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir())


# --------------------------------------------------------------------------- recency artifact


def _recency_attention(s: int, seed: int, n_layers: int = 2, n_heads: int = 2) -> torch.Tensor:
    """Causal attention ``[L, H, S, S]`` of queries that attend mostly to their recent past, plus a sink at 0.

    Logit of query i for key k: ``-(i - k) / tau`` (tau drawn per head in [2, 20] tokens)
    plus log-normal noise, plus a bonus ``beta`` on key 0 (the sink). Uniform text: no
    content position is special, so any content position flagged is a false positive.
    """
    g = torch.Generator().manual_seed(seed)
    i = torch.arange(s, dtype=torch.float64)
    dist = (i[:, None] - i[None, :])  # [S, S], query minus key
    tau = 2.0 + 18.0 * torch.rand(n_layers, n_heads, 1, 1, generator=g, dtype=torch.float64)
    logits = -dist / tau + 0.5 * torch.randn(n_layers, n_heads, s, s, generator=g, dtype=torch.float64)
    logits[..., 0] += 6.0  # beta: key 0 draws attention from every query
    logits = logits.masked_fill(dist < 0, float("-inf"))
    return logits.softmax(dim=-1)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_score_positions_recency_trend_no_trailing_sink_position0_flagged(seed):
    """Regression (fault class: baseline blind to how many queries see a position).

    On uniform text read by local-attention heads, the last positions get a high mean
    received attention only because the few queries that see them are near. None of
    them may be flagged; position 0 must be; content false positives stay under 1 %.
    The z candidate (``gm_content``) at SmolLM2's gm_prose threshold (:data:`Z_THRESHOLD`):
    the observer-matched baseline is what is tested."""
    from lab.sinks.scores import attention_received

    s = 1200
    per_head = attention_received(_recency_attention(s, seed)).float()  # [L, H, S]
    roles = [ROLE_TEMPLATE] + [ROLE_CONTENT] * (s - 1)
    scores = score_positions(per_head, roles, statistic="gm_content")
    flagged = scores.observed & (scores.score > Z_THRESHOLD)
    assert bool(flagged[0]), f"position 0 z = {float(scores.score[0]):.2f}"
    assert not bool(flagged[-200:].any()), f"trailing flagged: {torch.nonzero(flagged[-200:]).flatten().tolist()}"
    n_content_flagged = int(flagged[1:].sum())
    assert n_content_flagged < 0.01 * (s - 1), n_content_flagged


def test_score_positions_recency_trend_global_baseline_flags_tail_negative_control():
    """Control: the same data scored against one global median (robust_z, the pre-fix baseline)
    flags trailing positions, so the test above can fail."""
    from lab.sinks.scores import attention_received, robust_z

    s = 1200
    per_head = attention_received(_recency_attention(s, 0)).float()
    scores = score_positions(per_head, [ROLE_TEMPLATE] + [ROLE_CONTENT] * (s - 1), statistic="gm_content")
    z_global = robust_z(scores.typical, exclude=[0, *range(s - MIN_OBSERVING_QUERIES + 1, s)])
    assert int((z_global[-200:-MIN_OBSERVING_QUERIES] > Z_THRESHOLD).sum()) > 0


def test_context_health_that_failed_validation_on_this_model_says_so_wherever_it_is_shown(tiny_chatml, monkeypatch):
    """A model whose profile has a failed validation stored for the chosen measure (the packaged smollm2 verdict)
    carries the reason into the analysis, and the panel, summary.md and report.json show it beside the score;
    a model with no stored verdict shows nothing of the kind."""
    import io

    from rich.console import Console

    from lab.render.sinks import health_panel

    model, tok = tiny_chatml
    msgs = [{"role": "user", "content": "what is the capital of france ?"}]
    monkeypatch.setitem(model_sources._SOURCES, model, ModelSource(model="tiny", profile="smollm2", device="cpu",
                                                                   dtype="float32"))
    a = analyze_prefill(model, tok, msgs)
    assert a.health_invalid and "does not read the context on smollm2" in a.health_invalid
    out = io.StringIO()
    Console(file=out, width=200).print(health_panel(a))
    assert "NOT a reading of the context on this model" in out.getvalue()
    assert "not a reading of the context" in summary_markdown(a, prompt="q", system=None, model_info={"model": "tiny"})
    assert report_data(a)["context_health_invalid"] == a.health_invalid
    monkeypatch.setitem(model_sources._SOURCES, model, ModelSource(model="tiny", profile=None, device="cpu",
                                                                   dtype="float32"))
    assert analyze_prefill(model, tok, msgs).health_invalid is None
