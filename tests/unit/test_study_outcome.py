"""The study's per-prompt records: one type per record, its columns on disk unchanged, old work files read.

Fault classes guarded: a column renamed or reordered in ``per_prompt.csv`` / a work file's ``row``
by a change to the record type (reports and resumable work directories written before would no
longer match), and a work file written before the records were types that no longer resumes.
"""

from __future__ import annotations

import json
import math
from dataclasses import FrozenInstanceError, fields

import pytest

from lab.analysis.claims import DESIGN_TEMPERATURES, H6_COLUMNS, temperature_column
from lab.prompts import load_prompts
from lab.study.outcome import (OPTIONAL_COLUMNS, PER_PROMPT_COLUMNS, PER_TOKEN_FIELDS, REQUIRED_COLUMNS, TOKEN_KEYS,
                               DraftedToken, PromptOutcome, PromptRow, TrackedDecode, temperature_field)
from lab.study.work import load_finished, plan_study, save_finished, work_file
from tests.study_fakes import FakeRunner, FakeRunnerWithDecode, fake_config

# The columns of per_prompt.csv and of a work file's row as reports and work directories hold them
# (written out, not derived: this is the on-disk layout the record type must keep).
ON_DISK_PER_PROMPT = (
    "id", "category", "variant", "twin_of", "n_prompt_tokens", "context_health", "sink_rate_pos0",
    "sink_rate_content_mean", "position0_share", "n_content_sinks", "mean_entropy_bits", "max_entropy_bits",
    "var_entropy_bits", "mean_varentropy_bits2", "n_new_tokens", "alpha", "tau", "n_drafted", "n_drafted_tested",
    "n_accepted", "n_rounds", "prefill_s", "speculative_s", "wall_s", "content_sink_health", "initial_entropy_bits",
    "continuation_entropy_bits", "n_multi_token_words", "alpha_t0.3", "alpha_t0.7", "alpha_t1", "temperature_s",
    "decode_s", "n_content_tokens", "health_soft_penalty", "health_content_share", "health_content_entropy",
    "health_content_sink_rate", "health_relative_entropy", "health_local_entropy",
    "health_content_entropy_for_length", "health_relative_entropy_for_length", "health_local_entropy_for_length",
    "lookback_heads", "n_context_tokens", "text",
)
ON_DISK_PER_TOKEN = ("prompt_id", "category", "variant", "round", "index", "draft_entropy_bits",
                     "draft_normalized_entropy", "accepted", "tested")


def _row(**kw) -> PromptRow:
    base = dict(n_prompt_tokens=20, context_health=5.0, sink_rate_pos0=0.8, sink_rate_content_mean=0.01,
                position0_share=0.5, n_content_sinks=0, mean_entropy_bits=2.0, max_entropy_bits=6.0,
                var_entropy_bits=1.0, mean_varentropy_bits2=2.0, n_new_tokens=8, alpha=0.5, tau=1.5, n_drafted=4,
                n_drafted_tested=4, n_accepted=2, n_rounds=2, prefill_s=0.1, speculative_s=0.2, text="answer")
    return PromptRow(**{**base, **kw})


def test_prompt_row_columns_are_the_on_disk_layout_in_order():
    assert PER_PROMPT_COLUMNS == ON_DISK_PER_PROMPT
    assert PER_TOKEN_FIELDS == ON_DISK_PER_TOKEN and TOKEN_KEYS == ON_DISK_PER_TOKEN[3:]
    assert list(_row().as_columns()) == list(ON_DISK_PER_PROMPT)
    assert set(REQUIRED_COLUMNS) | set(OPTIONAL_COLUMNS) == set(PER_PROMPT_COLUMNS)


def test_prompt_row_has_one_field_per_design_temperature_under_its_column():
    names = {f.name for f in fields(PromptRow)}
    for t in DESIGN_TEMPERATURES:
        assert temperature_field(t) in names
        row = _row(**{temperature_field(t): 0.25})
        assert row.as_columns()[temperature_column(t)] == 0.25
    assert set(H6_COLUMNS) <= set(OPTIONAL_COLUMNS)


def test_prompt_row_every_field_documented():
    """Each field carries a docstring in the class body (units where it has any)."""
    import ast
    import inspect

    import lab.study.outcome as outcome

    body = next(n for n in ast.parse(inspect.getsource(outcome)).body
                if isinstance(n, ast.ClassDef) and n.name == "PromptRow").body
    documented = {a.target.id for a, d in zip(body, body[1:])
                  if isinstance(a, ast.AnnAssign) and isinstance(d, ast.Expr) and isinstance(d.value, ast.Constant)}
    assert documented == {f.name for f in fields(PromptRow)}


def test_prompt_row_columns_round_trip_and_missing_required_raises():
    row = _row(id="a", category="math", variant="clean", wall_s=0.4, alpha_t0_3=0.1, context_health=math.nan)
    back = PromptRow.from_columns(json.loads(json.dumps(row.as_columns())))
    assert back.as_columns().keys() == row.as_columns().keys()
    assert math.isnan(back.context_health) and back.alpha_t0_3 == 0.1 and back.id == "a"
    columns = row.as_columns()
    del columns["alpha"]
    with pytest.raises(KeyError, match="alpha"):
        PromptRow.from_columns(columns)
    with pytest.raises(FrozenInstanceError):
        row.alpha = 0.9  # type: ignore[misc]


def test_prompt_row_optional_columns_absent_read_as_none_unknown_ignored():
    columns = {k: v for k, v in _row(id="a").as_columns().items() if k not in OPTIONAL_COLUMNS}
    columns["a_column_of_no_field"] = 1
    row = PromptRow.from_columns(columns)
    assert all(row.as_columns()[k] is None for k in OPTIONAL_COLUMNS)


def _old_work_file(plan, prompt, decode):
    """A work file as the study wrote it when the row was a dict (the same JSON layout, written by hand)."""
    row = {k: None for k in ON_DISK_PER_PROMPT}
    row.update(id=prompt.id, category=prompt.category, variant=prompt.variant, twin_of=prompt.twin_of,
               n_prompt_tokens=20, context_health=5.5, sink_rate_pos0=0.8, sink_rate_content_mean=0.01,
               position0_share=0.5, n_content_sinks=0, mean_entropy_bits=2.0, max_entropy_bits=6.0,
               var_entropy_bits=1.0, mean_varentropy_bits2=2.0, n_new_tokens=3, alpha=0.5, tau=1.5, n_drafted=2,
               n_drafted_tested=2, n_accepted=1, n_rounds=1, prefill_s=0.0, speculative_s=0.0, wall_s=0.1,
               decode_s=0.0, text="fake")
    tokens = [{"round": 0, "index": i, "draft_entropy_bits": 1.0 + i, "draft_normalized_entropy": 0.1,
               "accepted": i == 0, "tested": True} for i in range(2)]
    path = work_file(plan, prompt)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": plan.key, "prompt": prompt.to_json(), "row": row, "tokens": tokens,
                                "decode": decode}))
    return row, tokens


@pytest.mark.parametrize("decode", [{}, {"entropy_bits": [1.0, 2.0, 0.5], "word": ["initial", "continuation", ""]}])
def test_work_file_written_before_the_types_loads_as_it_was(tmp_path, decode):
    plan = plan_study(fake_config(tmp_path, limit=4))
    prompt = plan.prompts[0]
    row, tokens = _old_work_file(plan, prompt, decode)
    outcome = load_finished(plan, prompt)
    assert outcome is not None
    assert outcome.row.as_columns() == row
    assert [{k: getattr(t, k) for k in TOKEN_KEYS} for t in outcome.tokens] == tokens
    assert (outcome.decode.as_columns() if outcome.decode else {}) == decode


def test_work_file_decode_of_unequal_lengths_is_redone(tmp_path):
    plan = plan_study(fake_config(tmp_path, limit=4))
    _old_work_file(plan, plan.prompts[0], {"entropy_bits": [1.0, 2.0], "word": ["initial"]})
    assert load_finished(plan, plan.prompts[0]) is None


@pytest.mark.parametrize("runner", [FakeRunner, FakeRunnerWithDecode])
def test_save_then_load_finished_gives_the_same_outcome(tmp_path, runner):
    plan = plan_study(fake_config(tmp_path, limit=4))
    prompt = plan.prompts[0]
    outcome = runner()(prompt)
    plan.work_dir.mkdir(parents=True)
    save_finished(plan, prompt, outcome)
    assert load_finished(plan, prompt) == outcome
    on_disk = json.loads(work_file(plan, prompt).read_text())
    assert list(on_disk["row"]) == list(ON_DISK_PER_PROMPT) and set(on_disk) == {"key", "prompt", "row", "tokens",
                                                                                 "decode"}


def test_prompt_outcome_holds_typed_records():
    prompt = load_prompts()[0]
    outcome = FakeRunnerWithDecode()(prompt)
    assert isinstance(outcome, PromptOutcome) and isinstance(outcome.row, PromptRow)
    assert all(isinstance(t, DraftedToken) for t in outcome.tokens) and isinstance(outcome.decode, TrackedDecode)
    assert len(outcome.decode.entropy_bits) == len(outcome.decode.word) == outcome.row.n_new_tokens
