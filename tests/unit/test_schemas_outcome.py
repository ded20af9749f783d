"""The study work directory's files read back through their schemas: outcome files, settings.json,
runner.json and prompts.json, each fed hostile variants (wrong types, missing keys, empty containers,
out-of-range values, binary, not JSON, numbers that disagree with the file's own counts).

Fault classes guarded: an outcome file trusted as read (alpha NaN, or an alpha that is not its own
n_accepted / n_drafted_tested, went into the report), and a work directory's own file whose wrong
type or missing key ended on the unforeseen-error path instead of one line naming the file. The
positive controls keep the NaN the pipeline writes for a value that is undefined (no drafted token
tested, no round run, no content position) accepted.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any, Callable

import pytest

from lab.prompts import load_prompts
from lab.schemas import FileSchemaError
from lab.study import outcome_schema
from lab.study.outcome import PER_PROMPT_COLUMNS
from lab.study.work import (config_from_work_dir, plan_from_work_dir, plan_study, read_finished, read_runner_info,
                            read_settings, save_finished, work_file)
from tests.study_fakes import FakeRunner, FakeRunnerWithDecode, fake_config

pytestmark = pytest.mark.unit

NAN, INF = float("nan"), float("inf")


def _valid_outcome() -> dict[str, Any]:
    """An outcome file's value as save_finished writes it (the fake with a tracked decode): 8 drafted
    tokens, all tested, 4 rounds."""
    prompt = load_prompts()[0]
    outcome = FakeRunnerWithDecode()(prompt)
    return {"key": "0123456789abcdef", "prompt": prompt.to_json(), "row": outcome.row.as_columns(),
            "tokens": [{k: getattr(t, k) for k in outcome_schema.TOKEN_KEYS} for t in outcome.tokens],
            "decode": outcome.decode.as_columns()}


def _write(tmp_path: Path, data: Any, name: str = "outcome.json") -> Path:
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(json.dumps(data, allow_nan=True), encoding="utf-8")
    return path


def _edit(change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    data = copy.deepcopy(_valid_outcome())
    change(data)
    return data


def _set(where: str, key: Any, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        target = data if where == "top" else data[where] if where != "token0" else data["tokens"][0]
        target[key] = value
    return change


def _drop(where: str, key: str) -> Callable[[dict[str, Any]], None]:
    return lambda data: (data if where == "top" else data[where]).pop(key)


def _flip_first_accepted(data: dict[str, Any]) -> None:
    data["tokens"][0]["accepted"] = not data["tokens"][0]["accepted"]


def _wrong_alpha(data: dict[str, Any]) -> None:
    row = data["row"]
    row["alpha"] = 1.0 if row["n_accepted"] != row["n_drafted_tested"] else 0.0  # in range, not the counts' quotient


def _accepted_untested(data: dict[str, Any]) -> None:
    """An accepted token marked untested, the row's counts and alpha kept in step with the tokens."""
    token = next(t for t in data["tokens"] if t["accepted"])
    token["tested"] = False
    row = data["row"]
    row["n_drafted_tested"] -= 1
    row["alpha"] = row["n_accepted"] / row["n_drafted_tested"]


HOSTILE_OUTCOMES = {
    "binary": b"\x00\xff\xfe garbage",
    "empty file": b"",
    "not JSON": b'{"key": "half',
    "a list": [],
    "an empty object": {},
    "a number": 7,
    "missing row": _edit(_drop("top", "row")),
    "missing tokens": _edit(_drop("top", "tokens")),
    "missing decode": _edit(_drop("top", "decode")),
    "key not hex": _edit(_set("top", "key", "zz")),
    "key a number": _edit(_set("top", "key", 12)),
    "prompt a string": _edit(_set("top", "prompt", "math-01")),
    "row a list": _edit(_set("top", "row", [])),
    "row empty": _edit(_set("top", "row", {})),
    "tokens an object": _edit(_set("top", "tokens", {})),
    "decode a list": _edit(_set("top", "decode", [])),
    "alpha missing": _edit(_drop("row", "alpha")),
    "alpha a string": _edit(_set("row", "alpha", "0.5")),
    "alpha a boolean": _edit(_set("row", "alpha", True)),
    "alpha null": _edit(_set("row", "alpha", None)),
    "alpha 7": _edit(_set("row", "alpha", 7)),
    "alpha negative": _edit(_set("row", "alpha", -0.1)),
    "alpha infinite": _edit(_set("row", "alpha", INF)),
    "alpha NaN with tokens tested": _edit(_set("row", "alpha", NAN)),
    "alpha not its counts' quotient": _edit(_wrong_alpha),
    "n_accepted negative": _edit(_set("row", "n_accepted", -1)),
    "n_accepted a float": _edit(lambda d: d["row"].update(n_accepted=float(d["row"]["n_accepted"]))),
    "n_accepted above n_drafted_tested": _edit(lambda d: d["row"].update(n_accepted=d["row"]["n_drafted_tested"] + 1,
                                                                        alpha=1.0)),
    "n_drafted_tested above n_drafted": _edit(lambda d: d["row"].update(n_drafted_tested=d["row"]["n_drafted"] + 1)),
    "n_rounds a string": _edit(_set("row", "n_rounds", "4")),
    "n_prompt_tokens past any context": _edit(_set("row", "n_prompt_tokens", 10**30)),
    "a token's index past any context": _edit(_set("token0", "index", 2**64)),
    "tau above n_new_tokens": _edit(_set("row", "tau", 1e30)),
    "var_entropy_bits above its bound": _edit(_set("row", "var_entropy_bits", 1e30)),
    "tau NaN with rounds run": _edit(_set("row", "tau", NAN)),
    "tau infinite": _edit(_set("row", "tau", INF)),
    "var_entropy_bits infinite": _edit(_set("row", "var_entropy_bits", INF)),
    "mean_entropy_bits above log2 V": _edit(_set("row", "mean_entropy_bits", 1e300)),
    "mean_entropy_bits negative": _edit(_set("row", "mean_entropy_bits", -1.0)),
    "mean above max entropy": _edit(_set("row", "mean_entropy_bits", 6.5)),
    "context_health 11": _edit(_set("row", "context_health", 11.0)),
    "sink_rate_pos0 1.5": _edit(_set("row", "sink_rate_pos0", 1.5)),
    "alpha_t0.3 above 1": _edit(_set("row", "alpha_t0.3", 2.0)),
    "wall_s NaN": _edit(_set("row", "wall_s", NAN)),
    "prefill_s negative": _edit(_set("row", "prefill_s", -1.0)),
    "prefill_s infinite": _edit(_set("row", "prefill_s", INF)),
    "content tokens above prompt tokens": _edit(_set("row", "n_content_tokens", 10**6)),
    "text a number": _edit(_set("row", "text", 5)),
    "twin_of a list": _edit(_set("row", "twin_of", [])),
    "a token not an object": _edit(lambda d: d["tokens"].__setitem__(0, 1)),
    "a token without accepted": _edit(lambda d: d["tokens"][0].pop("accepted")),
    "a token's accepted a number": _edit(_set("token0", "accepted", 1)),
    "a token's normalized entropy 3": _edit(_set("token0", "draft_normalized_entropy", 3.0)),
    "a token's entropy NaN": _edit(_set("token0", "draft_entropy_bits", NAN)),
    "a token's round negative": _edit(_set("token0", "round", -1)),
    "a token in a round that never ran": _edit(_set("token0", "round", 99)),
    "tokens not adding up to n_accepted": _edit(_flip_first_accepted),
    "one token missing": _edit(lambda d: d["tokens"].pop()),
    "accepted but not tested": _edit(_accepted_untested),
    "decode of unequal lengths": _edit(lambda d: d["decode"]["word"].pop()),
    "decode without words": _edit(lambda d: d["decode"].pop("word")),
    "decode with a bad word position": _edit(lambda d: d["decode"]["word"].__setitem__(0, "middle")),
    "decode entropy infinite": _edit(lambda d: d["decode"]["entropy_bits"].__setitem__(0, INF)),
    "decode entropy above the row's max": _edit(lambda d: d["decode"]["entropy_bits"].__setitem__(0, 7.0)),
    "n_multi_token_words not the decode's": _edit(_set("row", "n_multi_token_words", 9)),
}


@pytest.mark.parametrize("name", list(HOSTILE_OUTCOMES))
def test_outcome_schema_hostile_variant_refused_in_one_line_naming_the_file(tmp_path, name):
    """Fault class (outcomes trusted as read): each variant is refused as a FileSchemaError (a ValueError),
    in one line that names the file."""
    path = _write(tmp_path, HOSTILE_OUTCOMES[name])
    with pytest.raises(FileSchemaError) as err:
        outcome_schema.load(path)
    message = str(err.value)
    assert isinstance(err.value, ValueError) and "\n" not in message and message.startswith(str(path)), message
    assert "study outcome file" in message


def _no_drafted_token(d: dict[str, Any]) -> None:
    """A prompt whose draft proposed nothing (a prompt-lookup draft without a match): alpha NaN, tau defined."""
    d["row"].update(n_drafted=0, n_drafted_tested=0, n_accepted=0, alpha=NAN, **{"alpha_t0.3": NAN})
    d["tokens"] = []


def _no_round(d: dict[str, Any]) -> None:
    """A decode that ran no round and no step: every statistic of it NaN, no decode kept."""
    d["row"].update(n_drafted=0, n_drafted_tested=0, n_accepted=0, n_rounds=0, alpha=NAN, tau=NAN,
                    mean_entropy_bits=NAN, max_entropy_bits=NAN, var_entropy_bits=NAN, mean_varentropy_bits2=NAN,
                    initial_entropy_bits=NAN, continuation_entropy_bits=NAN, n_multi_token_words=None)
    d["tokens"], d["decode"] = [], {}


ACCEPTED_OUTCOMES = {
    "as written": _valid_outcome(),
    "no drafted token tested": _edit(_no_drafted_token),
    "no round run": _edit(_no_round),
    "no content position": _edit(lambda d: d["row"].update(sink_rate_content_mean=NAN, context_health=NAN,
                                                           sink_rate_pos0=NAN, health_content_share=NAN)),
    "optional columns absent": _edit(lambda d: [d["row"].pop(c) for c in ("alpha_t0.3", "decode_s",
                                                                          "health_soft_penalty", "n_content_tokens")]),
    "tokens not stored": _edit(_set("top", "tokens", [])),
    "no decode reported": _edit(lambda d: d.update(decode={}) or d["row"].update(n_multi_token_words=None)),
    "a normalized entropy rounded past 1": _edit(_set("token0", "draft_normalized_entropy", 1 + 1e-7)),
    "a column of no field": _edit(_set("row", "from_a_newer_lab", "kept out")),
    "a decode key of no field": _edit(lambda d: d.update(decode={"from_a_newer_lab": 1})
                                      or d["row"].update(n_multi_token_words=None)),
}


@pytest.mark.parametrize("name", list(ACCEPTED_OUTCOMES))
def test_outcome_schema_legitimate_nan_and_absent_values_accepted(tmp_path, name):
    """NaN where the pipeline writes it for an undefined value, and None where a runner leaves a field out,
    pass: such an outcome is not redone on every resume."""
    path = _write(tmp_path, ACCEPTED_OUTCOMES[name])
    assert outcome_schema.load(path)["row"]["n_rounds"] >= 0
    plan = plan_study(fake_config(tmp_path, limit=4))
    prompt = next(p for p in load_prompts() if p.to_json() == ACCEPTED_OUTCOMES[name]["prompt"])
    target = work_file(plan, prompt)
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps({**ACCEPTED_OUTCOMES[name], "key": plan.key}, allow_nan=True))
    assert read_finished(plan, prompt) is not None


def test_outcome_schema_every_per_prompt_column_has_a_range():
    """Fault class (a field added to PromptRow and never checked): every column has a schema."""
    assert set(outcome_schema.ROW_SCHEMA["properties"]) == set(PER_PROMPT_COLUMNS)


@pytest.mark.parametrize("runner", [FakeRunner, FakeRunnerWithDecode])
def test_read_finished_fakes_outcomes_pass_their_own_checks(tmp_path, runner):
    """The fakes the study's tests run on write outcomes that agree with their counts (else every resume
    test would redo every prompt)."""
    plan = plan_study(fake_config(tmp_path, limit=12))
    plan.work_dir.mkdir(parents=True)
    make = runner()
    for p in plan.prompts:
        save_finished(plan, p, make(p))
        assert read_finished(plan, p) is not None, p.id


@pytest.mark.slow
@pytest.mark.parametrize("draft,max_new_tokens", [("early-exit:1", 6), ("prompt-lookup", 6), ("early-exit:1", 1)])
def test_read_finished_real_runner_outcome_passes(tmp_path, monkeypatch, draft, max_new_tokens):
    """Positive control on the real pipeline (tiny random models): what ModelRunner writes reads back as
    written, NaN included (a budget of one token drafts nothing: alpha NaN)."""
    from tests import support
    from lab.models import loading as models
    from lab.models.source import ModelSource, register_source
    from lab.study.runner import ModelRunner

    tok = support.chatml_tokenizer()

    def fake_load(name, **kwargs):
        model = support.tiny_qwen2(vocab_size=len(tok), seed=1)
        register_source(model, ModelSource(model=name, device="cpu", dtype="float32"))
        return model, tok

    monkeypatch.setattr(models, "load_model", fake_load)
    plan = plan_study(fake_config(tmp_path, limit=2, draft=draft, max_new_tokens=max_new_tokens, gamma=3))
    plan.work_dir.mkdir(parents=True)
    runner = ModelRunner.load(plan.config)
    for p in plan.prompts:
        outcome = runner(p)
        save_finished(plan, p, outcome)
        back = read_finished(plan, p)
        assert back is not None and back.tokens == outcome.tokens
        assert back.row.n_accepted == outcome.row.n_accepted and back.row.n_drafted == outcome.row.n_drafted
        assert math.isnan(back.row.alpha) == (max_new_tokens == 1)


def test_read_finished_other_key_or_prompt_refused_naming_the_file(tmp_path):
    plan = plan_study(fake_config(tmp_path, limit=4))
    plan.work_dir.mkdir(parents=True)
    p = plan.prompts[0]
    path = save_finished(plan, p, FakeRunner()(p))
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "key": "0" * 16}))
    with pytest.raises(FileSchemaError, match="other settings"):
        read_finished(plan, p)
    path.write_text(json.dumps({**data, "prompt": plan.prompts[1].to_json()}))
    with pytest.raises(FileSchemaError, match="another prompt"):
        read_finished(plan, p)
    assert work_file(plan, p) == path


# ---- settings.json


def _settings_dir(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    plan = plan_study(fake_config(tmp_path, limit=4))
    plan.work_dir.mkdir(parents=True)
    return plan.work_dir, dict(plan.settings)


HOSTILE_SETTINGS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "binary": lambda s: b"\x00\x01\xff",
    "empty file": lambda s: b"",
    "not JSON": lambda s: b"{model: smollm2}",
    "a list": lambda s: [s],
    "an empty object": lambda s: {},
    "format a string": lambda s: {**s, "format": str(s["format"])},
    "model missing": lambda s: {k: v for k, v in s.items() if k != "model"},
    "model a number": lambda s: {**s, "model": 5},
    "model empty": lambda s: {**s, "model": ""},
    "draft null": lambda s: {**s, "draft": None},
    "device a list": lambda s: {**s, "device": []},
    "dtype an object": lambda s: {**s, "dtype": {}},
    "gamma a string": lambda s: {**s, "gamma": "2"},
    "gamma 0": lambda s: {**s, "gamma": 0},
    "gamma a float": lambda s: {**s, "gamma": 2.5},
    "gamma a boolean": lambda s: {**s, "gamma": True},
    "max_new_tokens negative": lambda s: {**s, "max_new_tokens": -5},
    "seed negative": lambda s: {**s, "seed": -1},
    "limit 0": lambda s: {**s, "limit": 0},
    "temperature 0": lambda s: {**s, "temperature": 0},
    "temperature NaN": lambda s: {**s, "temperature": NAN},
    "temperature infinite": lambda s: {**s, "temperature": INF},
    "weights unknown": lambda s: {**s, "weights": "q3"},
    "draft_dtype_flag unknown": lambda s: {**s, "draft_dtype_flag": "float64"},
    "prompts_sha256 short": lambda s: {**s, "prompts_sha256": "abc"},
    "prompts_file a number": lambda s: {**s, "prompts_file": 3},
    "design_temperatures a string": lambda s: {**s, "design_temperatures": "0.3"},
    "temperature_subset of numbers": lambda s: {**s, "temperature_subset": [1, 2]},
}


@pytest.mark.parametrize("name", list(HOSTILE_SETTINGS))
def test_settings_schema_hostile_variant_refused_in_one_line_naming_the_file(tmp_path, name):
    """Fault class (a work directory's own file read as trusted): every variant is a ValueError in one
    line naming settings.json, from read_settings and from config_from_work_dir alike."""
    work, settings = _settings_dir(tmp_path)
    _write(work, HOSTILE_SETTINGS[name](settings), "settings.json")
    for read in (read_settings, config_from_work_dir):
        with pytest.raises(FileSchemaError) as err:
            read(work)
        message = str(err.value)
        assert "\n" not in message and str(work / "settings.json") in message and "study settings file" in message


def test_settings_schema_weights_absent_reads_as_float32(tmp_path):
    """A directory written before the weights were recorded ran float32."""
    work, settings = _settings_dir(tmp_path)
    _write(work, {k: v for k, v in settings.items() if k not in ("weights", "draft_weights")}, "settings.json")
    assert config_from_work_dir(work).weights == "float32"


# ---- runner.json and prompts.json


@pytest.mark.parametrize("content", [b"\x00\xff", b"", b"[1", [], "fake", {"model": 5}, {"draft": ["x"]},
                                     {"load_s": -1.0}, {"load_s": NAN}, {"weights": "q3"}, {"pipeline": 3}])
def test_runner_info_hostile_is_ignored_with_a_warning_naming_it(tmp_path, caplog, content):
    """A damaged runner.json (only the models' description for the report) is ignored, named in one line."""
    _write(tmp_path, content, "runner.json")
    with caplog.at_level("WARNING", logger="lab.study.work"):
        assert read_runner_info(tmp_path) == {}
    (record,) = [r for r in caplog.records if "runner.json" in r.getMessage()]
    assert "\n" not in record.getMessage() and "lack the models' description" in record.getMessage()


def test_runner_info_as_written_is_read(tmp_path):
    info = {**FakeRunner().info, "load_s": 1.5, "target_dtype": "float32", "draft_dtype": None,
            "cluster": {"address": "local"}}
    _write(tmp_path, info, "runner.json")
    assert read_runner_info(tmp_path) == info
    assert read_runner_info(tmp_path / "absent") == {}


@pytest.mark.parametrize("content", [b"\x00\xff", b"", b"[{", {}, [], [1], ["math-01"], [{"id": 5}], [{}]])
def test_stored_prompts_hostile_refused_in_one_line_naming_the_file(tmp_path, content):
    from lab.study.run import run_study

    cfg = fake_config(tmp_path, limit=4)
    run_study(plan_study(cfg), runner=FakeRunner())
    work = plan_study(cfg).work_dir
    _write(work, content, "prompts.json")
    with pytest.raises(FileSchemaError) as err:
        plan_from_work_dir(work)
    message = str(err.value)
    assert "\n" not in message and str(work / "prompts.json") in message and "stored prompt set" in message


def test_alpha_tolerance_is_far_below_one_count():
    """The tolerance admits float rounding of n_accepted / n_drafted_tested, never a count's worth
    (1 / the most tokens a study drafts, 10**6)."""
    assert outcome_schema.ALPHA_TOLERANCE < 1e-6 and math.isfinite(outcome_schema.MAX_ENTROPY_BITS)
