"""The study end to end on the embedded model (SmolLM2-135M-Instruct, early-exit:24 draft).

A reduced study (:data:`LIMIT` prompts with twin pairs, :data:`MAX_NEW_TOKENS`
tokens) runs the real pipeline once per session and writes a real report; the
tests check that every file is there, the PNGs open, report.json agrees with the
CSVs, and summary.md states the verdicts of report.json.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from lab.models.profiles import PROFILES
from lab.models.source import model_source

LIMIT = 14  # 6 twin pairs + 2 singles: every category, enough pairs for H4 to be tested
MAX_NEW_TOKENS = 16  # keeps the study within a minute on 2 cores; some answer still splits a word (H5 is tested)
RESAMPLES = 499  # CI precision is not under test; keeps the analysis quick
ALPHA_TOL = 1e-12  # alpha is a ratio of two counts; only float rounding may differ


@pytest.fixture(scope="module")
def study_report(smollm2, lab_log_dir):
    from lab.render.study import write_report
    from lab.speculative.draft_specs import make_draft
    from lab.study.runner import ModelRunner, context_measure_inputs
    from lab.study.config import StudyConfig
    from lab.study.work import discard_work, plan_study
    from lab.study.run import run_study

    model, tok = smollm2
    out = lab_log_dir
    config = StudyConfig(model="smollm2", device="cpu", limit=LIMIT, max_new_tokens=MAX_NEW_TOKENS,
                         out=str(out), n_resamples=RESAMPLES)
    plan = plan_study(config)
    runner = ModelRunner(model, tok, make_draft(model, config.draft_spec()), config,
                         {"model": model_source(model).as_dict(), "draft": config.draft_spec()},
                         *context_measure_inputs(config))  # as ModelRunner.load: H1's measure and the spans
    result = run_study(plan, runner=runner)
    path = write_report(result)
    discard_work(plan)
    return result, path


def test_study_report_has_every_file_and_pngs_open(study_report, lab_log):
    import matplotlib.image as mpimg

    from lab.render.study_summary import FIGURES

    result, path = study_report
    lab_log.add_report(path)
    lab_log.record(n_prompts=LIMIT, max_new_tokens=MAX_NEW_TOKENS)
    for name in ("report.json", "per_prompt.csv", "per_token.csv", "summary.md", *FIGURES):
        assert (path / name).is_file(), name
    for name in FIGURES:
        assert (path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        img = mpimg.imread(path / name)
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    assert not any(p.name.startswith(".") for p in path.parent.iterdir())  # no staging or work dir left


def test_study_json_matches_csvs(study_report):
    from lab.reports import read_json, rows_from_csv

    result, path = study_report
    study = read_json(path / "report.json")
    prompts = rows_from_csv(path / "per_prompt.csv")
    tokens = rows_from_csv(path / "per_token.csv")
    assert len(prompts) == study["prompts"]["n_prompts"] == LIMIT
    assert Counter(r["category"] for r in prompts) == Counter(study["prompts"]["by_category"])
    assert sum(r["variant"] == "poisoned" for r in prompts) == study["prompts"]["n_poisoned"] == len(study["pairs"])
    per_prompt_tokens = Counter(t["prompt_id"] for t in tokens)
    for r in prompts:
        mine = [t for t in tokens if t["prompt_id"] == r["id"]]
        assert per_prompt_tokens[r["id"]] == int(r["n_drafted"])
        assert sum(t["tested"] == "True" for t in mine) == int(r["n_drafted_tested"])
        assert sum(t["accepted"] == "True" for t in mine) == int(r["n_accepted"])
        assert all(t["tested"] == "True" for t in mine if t["accepted"] == "True")
        if int(r["n_drafted_tested"]):
            assert float(r["alpha"]) == pytest.approx(int(r["n_accepted"]) / int(r["n_drafted_tested"]), abs=ALPHA_TOL)
        else:
            assert r["alpha"] == ""  # no drafted token tested: alpha undefined (NaN, an empty cell)
        assert 0.0 <= float(r["context_health"]) <= 10.0
        assert 0.0 <= float(r["content_sink_health"]) <= 10.0
        # a word split over several tokens takes at least two of the generated tokens
        assert 0 <= int(r["n_multi_token_words"]) <= int(r["n_new_tokens"]) // 2
        assert 0.0 <= float(r["position0_share"]) <= 1.0
        assert float(r["mean_entropy_bits"]) >= 0.0
    assert any(int(r["n_drafted_tested"]) for r in prompts)  # the alpha check above ran
    h2 = next(t for t in study["tests"] if t["name"] == "H2")
    assert h2["n"] == sum(t["tested"] == "True" for t in tokens)
    # H5 reads the decode's word labels (the work files' decode), the rows count the same words in the
    # runner: a prompt enters H5 exactly when some generated word was split (it then has both an
    # initial and a continuation sub-token), and H5 counts questions (a twin triple's prompts are
    # averaged). Control: 14 answers of English text split some word.
    h5 = next(t for t in study["tests"] if t["name"] == "H5")
    split_questions = {r["twin_of"] or r["id"] for r in prompts if int(r["n_multi_token_words"]) > 0}
    assert h5["n"] == len(split_questions) and split_questions
    # H1 reads lookback_heads: a twin's added text has it (a finite number), a clean prompt none (empty cell)
    twins = [r for r in prompts if r["variant"] != "clean"]
    assert twins and all(r["lookback_heads"] == "" and r["n_context_tokens"] == "" for r in prompts
                         if r["variant"] == "clean")
    assert all(math.isfinite(float(r["lookback_heads"])) and int(r["n_context_tokens"]) > 0 for r in twins)
    h1 = next(t for t in study["tests"] if t["name"] == "H1")
    assert h1["n"] == len(twins)
    assert study["context_measure"]["measure"] == "lookback_heads" and study["context_measure"]["verdicts"]


def test_study_summary_states_the_json_verdicts(study_report):
    from lab.analysis.hypotheses import VERDICTS
    from lab.reports import read_json

    _, path = study_report
    study = read_json(path / "report.json")
    summary = (path / "summary.md").read_text(encoding="utf-8")
    assert set(study["verdicts"]) == {"H1", "H1c", "H2", "H3", "H4a", "H4b", "H5", "H6", "H6c"}
    for name, verdict in study["verdicts"].items():
        assert verdict in VERDICTS
        assert f"**{name}: {verdict}**" in summary
    tested = [test for test in study["tests"] if test["p_holm"] is not None]
    assert tested  # H2 at least: every prompt drafts tokens, and the target tests them
    for test in tested:
        assert test["p_holm"] >= test["p_value"]


def test_study_environment_records_model_draft_seed_and_time(study_report):
    from lab.reports import read_json

    _, path = study_report
    study = read_json(path / "report.json")
    env, settings = study["environment"], study["settings"]
    assert env["model"]["profile"] == "smollm2"
    assert env["draft"] == settings["draft"] == PROFILES["smollm2"].draft
    assert settings["device"] == "cpu" and settings["dtype"] == "float32"
    assert settings["seed"] == 0 and settings["temperature"] == 1.0
    assert env["libraries"]["torch"] and env["libraries"]["transformers"]
    assert study["timing"]["wall_s_total"] > 0 and math.isfinite(study["timing"]["compute_s_prompts"])


def test_study_h6_runs_the_subset_at_every_design_temperature(study_report):
    result, _ = study_report
    subset = result.plan.temperature_ids
    assert subset and all(r.variant == "clean" for r in result.per_prompt if r.id in subset)
    for r in result.per_prompt:
        if r.id in subset:
            assert all(0.0 <= a <= 1.0 for a in (r.alpha_t0_3, r.alpha_t0_7, r.alpha_t1))
            assert r.alpha_t1 == r.alpha
        else:
            assert (r.alpha_t0_3, r.alpha_t0_7, r.alpha_t1) == (None, None, None)  # H6 runs the subset only
    assert result.analysis.test("H6").n == len(subset)


def test_word_positions_from_the_real_tokenizer(smollm2):
    """Word boundaries come from the tokenizer's decoding: a long rare word splits into an initial
    sub-token and continuations; common one-token words get no label."""
    from lab.analysis.claims import word_positions

    _, tok = smollm2
    ids = tok(" the incomprehensibilities of the cat", add_special_tokens=False)["input_ids"]
    labels = word_positions([tok.decode([i]) for i in ids])
    assert labels[0] == "" and labels[-1] == ""  # " the" ... " cat": one-token words
    assert labels.count("initial") == 1 and labels.count("continuation") >= 1
