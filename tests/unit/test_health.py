"""Graded context health (lab.health.measures) and its calibration rule (lab.health.calibration), no weights."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from lab.health import measures as health
from lab.health.choice import load_chosen
from lab.health.graded import graded_health
from lab.models.source import ModelSource, register_source
from lab.health.measures import (CANDIDATES, PROPERTIES, HealthInputs, check_properties, check_properties_on,
                                 content_entropy, move_to_content_sink, perturb_structural, random_inputs,
                                 relative_entropy, uniform_baseline)
from lab.health.calibration import (MAX_TIE_SHARE, choose, distractor_texts, figures, poisoned_variants)
from lab.prompts import CalibrationPrompt
from lab.prompts import load_prompts

from tests.provenance import ENVIRONMENT, MODEL_SOURCE
from tests.support import report_dirs


@st.composite
def health_inputs(draw, min_content: int = 1):
    """Valid HealthInputs: S positions, a random content block, non-negative received attention."""
    s = draw(st.integers(min_content + 3, 40))
    n = draw(st.integers(min_content, s - 3))
    seed = draw(st.integers(0, 2**31 - 1))
    return random_inputs(torch.Generator().manual_seed(seed), s, n)


@given(health_inputs())
def test_graded_health_bounded_in_0_10(h):
    """0 <= health <= 10 and finite."""
    v = graded_health(h)
    assert math.isfinite(v) and 0.0 <= v <= 10.0


# Float64 rounding of an entropy over <= 40 terms, through 10 Phi(z / 0.4), is ~1e-14: far
# below this slack, which is itself far below any rise worth the name (2.8e-3 in RAW_RICH_RELATIVELY_POOR).
NON_INCREASING_SLACK = 1e-9

# Hypothesis's counterexample to "moving mass from the raw-poorest content position onto the
# raw-richest never raises health" (values to 4 places, which still raise it): content
# positions 1 and 2 receive 0.7161 and 0.6751 against uniform baselines 0.3208 and 0.2611,
# so relative to the baseline position 1 (2.232) holds less than position 2 (2.586).
RAW_RICH_RELATIVELY_POOR = HealthInputs(
    received=torch.tensor([0.6667, 0.7161, 0.6751, 0.0615, 0.1112], dtype=torch.float64),
    content=torch.tensor([False, True, True, False, False]),
    score=torch.tensor([-0.2308, -1.1333, -0.0474, 3.8377, 1.5494], dtype=torch.float64),
    is_sink=torch.tensor([False, False, False, True, False]),
    observed=torch.tensor([True, True, True, True, False]),
    sink_rate=torch.tensor([0.2015, 0.0004, 0.2397, 0.0327, 0.0055], dtype=torch.float64),
    threshold=3.5, length_reference=health.SYNTHETIC_REFERENCES)


def _relative_move(h: HealthInputs, frac: float) -> HealthInputs:
    """move_to_content_sink ranked as the chosen measure reads content: received over the uniform baseline."""
    return move_to_content_sink(h, frac, baseline=uniform_baseline(int(h.received.numel())))


@example(RAW_RICH_RELATIVELY_POOR, 0.125)
@given(health_inputs(min_content=2), st.floats(0.01, 1.0))
def test_graded_health_mass_moving_onto_content_sink_never_raises(h, frac):
    """health(after moving frac of the content position holding the least received attention
    *relative to uniform causal attention* onto the one holding the most) <= health(before)
    + NON_INCREASING_SLACK.

    The chosen measure (relative_entropy read for length, monotone at fixed N) is the entropy of
    w_k = r_k / u_k (u = uniform_baseline); this move raises the w-maximum and lowers the
    w-minimum, which never raises that entropy whatever amounts of w they are. Ranked by raw r
    instead the claim is false (RAW_RICH_RELATIVELY_POOR, the boundary test below)."""
    assert load_chosen().startswith("relative_entropy"), "the ranking of this move is the chosen measure's reading"
    assert graded_health(_relative_move(h, frac)) <= graded_health(h) + NON_INCREASING_SLACK


def test_graded_health_raw_ranked_move_onto_relatively_poorer_position_raises_and_relative_move_lowers():
    """Boundary of the property above: with the giver and receiver ranked by raw received attention
    the old claim fails (health rises 9.98265 -> 9.98543: the move evens w out), ranked relative to
    the uniform baseline the same input's health falls; and the restated property still catches a
    measure that rewards pooling (10 - relative_entropy rises under the relative move)."""
    h = RAW_RICH_RELATIVELY_POOR
    w = (h.received / uniform_baseline(5))[h.content]
    assert h.received[1] > h.received[2] and w[0] < w[1]  # raw-richer, relatively poorer
    before = graded_health(h)
    assert graded_health(move_to_content_sink(h, 0.125)) > before + 1e-3  # the overstated claim fails here
    assert graded_health(_relative_move(h, 0.125)) < before - 1e-3
    assert 10.0 - relative_entropy(_relative_move(h, 0.125)) > 10.0 - relative_entropy(h) + 1e-3  # rewards pooling


@given(health_inputs(), st.integers(0, 2**31 - 1))
def test_graded_health_invariant_to_structural_positions(h, seed):
    """Redrawing every value at structural positions leaves health unchanged."""
    other = perturb_structural(h, torch.Generator().manual_seed(seed))
    assert graded_health(other) == pytest.approx(graded_health(h), abs=1e-12)


@given(health_inputs(min_content=1))
def test_graded_health_one_token_content_defined(h):
    """A prompt whose content is one token gets a finite health in [0, 10]."""
    idx = int(torch.nonzero(h.content)[0])
    one = torch.zeros_like(h.content)
    one[idx] = True
    v = graded_health(dataclasses.replace(h, content=one))
    assert math.isfinite(v) and 0.0 <= v <= 10.0


@given(health_inputs())
def test_graded_health_deterministic(h):
    """The same prompt analysed twice (equal inputs, fresh tensors) gives the same health."""
    copy = HealthInputs(*(x.clone() if isinstance(x, torch.Tensor) else x for x in
                          (h.received, h.content, h.score, h.is_sink, h.observed, h.sink_rate, h.threshold)),
                        length_reference=dict(h.length_reference))
    assert graded_health(copy) == graded_health(h)


def test_content_entropy_uniform_is_10_and_one_sink_is_low():
    content = torch.tensor([False] + [True] * 10 + [False])
    base = dict(score=torch.zeros(12), is_sink=torch.zeros(12, dtype=torch.bool),
                observed=torch.ones(12, dtype=torch.bool), sink_rate=torch.zeros(12), threshold=3.5)
    uniform = HealthInputs(received=torch.tensor([0.9] + [0.1] * 10 + [0.5]), content=content, **base)
    pooled = HealthInputs(received=torch.tensor([0.9, 0.99] + [1e-6] * 9 + [0.5]), content=content, **base)
    assert content_entropy(uniform) == pytest.approx(10.0)
    assert content_entropy(pooled) < 1.0


def test_check_properties_chosen_passes_and_broken_measure_is_caught():
    """Negative control: a measure that rewards pooling (10 - entropy) fails non_increasing."""
    assert all(check_properties(CANDIDATES[load_chosen()], cases=60).values())
    broken = check_properties(lambda h: 10.0 - content_entropy(h), cases=60)
    assert not broken["non_increasing"]
    reads_structure = check_properties(lambda h: 10 * float(h.received[h.content].sum() / h.received.sum()),
                                       cases=60)
    assert not reads_structure["structural_invariant"]


def test_distractors_recovered_from_the_study_twins_and_variants_built_alike():
    prompts = load_prompts()
    d = distractor_texts(prompts)
    assert len(d) == 18 and all(len(t) > 100 for t in d.values())  # one text of the sample per twin
    cal = [CalibrationPrompt("a", "What is 2 + 2?"), CalibrationPrompt("b", "Name a colour.", system="Be brief.")]
    out = poisoned_variants(cal, d)
    assert [p.id for p in out] == ["a-poisoned", "b-poisoned"]
    assert out[0].prompt.endswith("\n\nWhat is 2 + 2?") and out[1].system == "Be brief."
    assert out[0].prompt[: -len("\n\nWhat is 2 + 2?")] in d.values()


PROPS5 = dict.fromkeys(("bounded", "non_increasing", "structural_invariant", "one_token", "deterministic"), True)


def _fig(name, clean, poisoned, neutral=None, lengths=None, props=PROPS5, **kw):
    """figures() with neutral twins equal to clean and no drift with length, unless given."""
    neutral = list(clean) if neutral is None else neutral
    lengths = list(range(len(clean))) * 2 if lengths is None else lengths
    if lengths == list(range(len(clean))) * 2:  # values unrelated to these lengths: rho(value, N) is small
        lengths = [0] * (2 * len(clean))
    return figures(name, clean, poisoned, neutral, lengths, props, **kw)


def test_choose_prefers_admissible_with_largest_iqr_else_most_ordered():
    clean = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 9.5]
    wide = _fig("wide", [2 * c - 9 for c in clean], [2 * c - 10 for c in clean])
    narrow = _fig("narrow", clean, [c - 0.5 for c in clean])
    tied = _fig("tied", [5.0] * 10, [4.0] * 10)
    assert tied.max_tie_share == 1.0 > MAX_TIE_SHARE and not tied.admissible
    assert choose([narrow, wide, tied])[0] == "wide"
    misordered = _fig("mis", [2 * c - 9 for c in clean], [2 * c - 8 for c in clean])
    assert choose([narrow, misordered])[0] == "narrow"
    bad_props = _fig("bad", clean, [c - 1 for c in clean], props={**PROPS5, "non_increasing": False})
    assert choose([bad_props, misordered])[0] == "mis"  # ineligible never wins, even fully ordered
    with pytest.raises(ValueError, match="no candidate"):
        choose([bad_props])


def _length_design(seed: int = 5):
    """Synthetic calibration: 30 short clean prompts (N 5..60), neutral and poisoned variants of
    the same added length (N 200..500, poisoned within 5 % of neutral)."""
    gen = torch.Generator().manual_seed(seed)
    n_clean = [int(x) for x in torch.randint(5, 60, (30,), generator=gen)]
    added = [int(x) for x in torch.randint(200, 450, (30,), generator=gen)]
    n_neutral = [c + a for c, a in zip(n_clean, added)]
    n_poisoned = [n + int(x) for n, x in zip(n_neutral, torch.randint(-8, 9, (30,), generator=gen))]
    return n_clean, n_neutral, n_poisoned, gen


def test_choose_rejects_length_only_control_where_health_is_f_of_N():
    """Fault class: a choice rule that admits a measure of length alone (health = f(N) exactly).

    The length-only control orders every poisoned twin below its shorter clean twin, which the
    old admissibility criterion rewarded; the sixth property (|rho(value, N)| <= 0.2 over clean and
    neutral prompts) makes it ineligible, and a measure that reads the context (lower on poisoned,
    unrelated to N) is chosen."""
    n_clean, n_neutral, n_poisoned, gen = _length_design()
    f = [lambda n: 10 * (1 - math.log(n) / math.log(health.LENGTH_CONTROL_MAX_N))][0]
    control = figures("length_only", [f(n) for n in n_clean], [f(n) for n in n_poisoned], [f(n) for n in n_neutral],
                      n_clean + n_neutral, PROPS5, control=True)
    assert control.n_pairs_below_clean == control.n_pairs  # what a length proxy gets against the shorter clean twin
    assert abs(control.length_rho) > 0.9 and not control.properties["length_neutral"] and not control.eligible
    base = [8.0 + float(x) for x in torch.rand(30, generator=gen)]
    reader = figures("reader", base, [b - 1.0 for b in base], list(base),
                     n_clean + n_neutral, PROPS5)
    assert reader.eligible and reader.admissible
    assert choose([control, reader])[0] == "reader"
    with pytest.raises(ValueError, match="no candidate"):
        choose([control])


def test_choose_refuses_to_pick_a_control_that_passes():
    """Fault class: a control chosen as the lab's health (the rule must reject it, loudly if not)."""
    clean = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 9.5]
    leak = _fig("leak", clean, [c - 0.5 for c in clean], control=True)
    with pytest.raises(ValueError, match="control 'leak'"):
        choose([leak])


def test_length_only_control_reads_only_content_length():
    """length_only = 10 (1 - log N / log N_max) for any attention; it has the five random-input properties."""
    gen = torch.Generator().manual_seed(1)
    for n in (1, 7, 30):
        h = random_inputs(gen, n + 6, n)
        assert health.length_only(h) == pytest.approx(10 * (1 - math.log(n) / math.log(health.LENGTH_CONTROL_MAX_N)))
    assert all(check_properties(health.length_only, cases=40).values())


def test_relative_entropy_uniform_attention_is_10_at_every_length():
    """Under uniform causal attention (received = the uniform baseline) relative_entropy is 10 whatever S,
    while content_entropy falls with S: the position-driven drift it removes."""
    for s in (12, 60, 400):
        received = health.uniform_baseline(s)
        content = torch.zeros(s, dtype=torch.bool)
        content[2:-2] = True
        h = HealthInputs(received, content, torch.zeros(s), torch.zeros(s, dtype=torch.bool),
                         torch.ones(s, dtype=torch.bool), torch.zeros(s), 3.5)
        assert health.relative_entropy(h) == pytest.approx(10.0)
        assert content_entropy(h) < 10.0 - 1e-6


def test_uniform_baseline_is_what_uniform_attention_gives():
    """uniform_baseline(S) equals lab.sinks.scores.attention_received of a uniform causal attention matrix."""
    from lab.sinks.scores import attention_received

    s = 9
    attn = torch.tril(torch.ones(s, s, dtype=torch.float64)) / torch.arange(1, s + 1, dtype=torch.float64)[:, None]
    assert torch.allclose(attention_received(attn), health.uniform_baseline(s))


def test_chosen_is_a_candidate():
    """The packaged choice (lab/health/chosen.json) names an existing candidate, the one graded_health applies."""
    assert load_chosen() in CANDIDATES
    from lab.health.graded import chosen_measure

    assert chosen_measure() is CANDIDATES[load_chosen()]


def test_packaged_chosen_unchanged():
    """Regression (a calibrated value lost in moving it from code to data): the shipped choice."""
    assert load_chosen() == "relative_entropy_for_length"


def test_load_chosen_bad_file_raises_naming_it(tmp_path, monkeypatch):
    from lab.health import choice

    monkeypatch.setattr(choice, "packaged_path", lambda: tmp_path / "chosen.json")
    with pytest.raises(ValueError, match="chosen.json"):
        load_chosen()
    choice.write_chosen("content_share", decided_by="step", model="m", chosen_at="t")
    assert load_chosen() == "content_share" and choice.chosen_path() == choice.user_path()
    choice.user_path().write_text('{"measure": ""}')
    with pytest.raises(ValueError, match="chosen.json"):
        load_chosen()


def test_study_set_figures_counts_ties_and_twins():
    from lab.health.calibration import study_set_figures
    from lab.prompts import StudyPrompt

    msgs = ({"role": "user", "content": "q"},)
    prompts = [StudyPrompt(f"c{i}", "math", msgs) for i in range(10)]
    prompts += [StudyPrompt("c0-p", "math", msgs, "poisoned", "c0"), StudyPrompt("c1-p", "math", msgs, "poisoned", "c1")]
    values = {f"c{i}": 9.0 + i / 10 for i in range(10)} | {"c0-p": 9.0, "c1-p": 8.0, "c2": 9.0}
    f = study_set_figures(values, prompts)
    assert f["max_tie_share"] == pytest.approx(0.2)  # c0 and c2 share 9.00
    assert (f["n_twins"], f["n_twins_tied"], f["n_twins_below"]) == (2, 1, 1)


@pytest.mark.slow
def test_cli_calibrate_health_tiny_model_writes_report_with_rule_and_study_set(tmp_path, monkeypatch, capsys):
    import json

    import lab.models.loading
    from lab import cli
    from tests import support

    tok = support.chatml_tokenizer()
    model = support.tiny_llama(vocab_size=len(tok))
    register_source(model, ModelSource(model="tiny", device="cpu", dtype="float32"))
    monkeypatch.setattr(lab.models.loading, "load_model", lambda name, **k: (model, tok))
    cal = tmp_path / "cal.jsonl"
    cal.write_text("".join(json.dumps({"id": f"p{i}", "prompt": q}) + "\n" for i, q in
                           enumerate(["what is the capital", "write a poem", "the cat and the dog", "hello there"])))
    study = tmp_path / "study.jsonl"
    study.write_text(json.dumps({"id": "m1", "category": "math", "messages": [{"role": "user", "content": "two plus two"}]})
                     + "\n" + json.dumps({"id": "m1-p", "category": "math", "twin_of": "m1", "distractor": "filler",
                                          "messages": [{"role": "user", "content": "the the the the the the\n\ntwo plus two"}]})
                     + "\n")
    neutral = tmp_path / "neutral.jsonl"
    neutral.write_text("".join(json.dumps({"twin_of": f"p{i}", "added": "a list is a sequence " * 2}) + "\n"
                               for i in range(4)))
    ref = tmp_path / "reference.jsonl"  # clean prompts of graded length, none shared with cal
    ref.write_text("".join(json.dumps({"id": f"r{i}", "prompt": "a list is a sequence " * i + "what is a set"}) + "\n"
                           for i in range(12)))
    assert cli.main(["calibrate-health", "--prompts", str(cal), "--distractors", str(study), "--study-set",
                     "--neutral", str(neutral), "--reference-prompts", str(ref), "--device", "cpu",
                     "--out", str(tmp_path / "out")]) == 0
    (report,) = report_dirs(tmp_path / "out")
    data = json.loads((report / "report.json").read_text())
    assert data["chosen"] in CANDIDATES and "rule" in data and len(data["prompts"]) == 12
    assert data["controls_rejected"] == {"length_only": True}
    assert set(data["study_set"]) == {*CANDIDATES, *health.CONTROLS} and data["study_set"][load_chosen()]["n_twins"] == 1
    assert "Rule (stated before" in (report / "summary.md").read_text()
    assert data["length_reference"]["n_prompts"] == 12 and "Clean length reference" in (report / "summary.md").read_text()


def _real_like(n: int, seed: int = 3) -> list[HealthInputs]:
    gen = torch.Generator().manual_seed(seed)
    return [random_inputs(gen, int(torch.randint(8, 30, (1,), generator=gen)), 4) for _ in range(n)]


def test_check_properties_on_inputs_chosen_measure_holds_and_counts_them():
    got = check_properties_on(CANDIDATES[load_chosen()], _real_like(12))
    assert got["n_checked"] == 12 and got["n_not_measurable"] == 0
    assert all(got[k] for k in PROPERTIES), got


def test_check_properties_on_inputs_counts_unobserved_content_as_not_measurable():
    h = _real_like(1)[0]
    blind = HealthInputs(h.received, h.content, h.score, h.is_sink, torch.zeros_like(h.observed), h.sink_rate, h.threshold)
    got = check_properties_on(graded_health, [blind, h])
    assert got["n_checked"] == 1 and got["n_not_measurable"] == 1


def test_check_properties_on_inputs_negative_control_structural_reader_fails():
    """Control: a measure that reads a structural position (position 0's share) fails structural_invariant."""
    def reads_structure(h: HealthInputs) -> float:
        r = h.received.double().clamp_min(0.0)
        return 10.0 * (1.0 - float(r[0] / r.sum()))

    got = check_properties_on(reads_structure, _real_like(12))
    assert not got["structural_invariant"] and got["bounded"], got


@pytest.mark.slow
def test_calibrate_with_inputs_reports_properties_on_the_prompts():
    from lab.health.calibration import N_CONTENT, calibrate

    clean = [CalibrationPrompt(id=f"c{i}", prompt=f"q{i}") for i in range(4)]
    poisoned = [CalibrationPrompt(id=f"p{i}", prompt=f"x q{i}") for i in range(4)]
    neutral = [CalibrationPrompt(id=f"n{i}", prompt=f"y q{i}") for i in range(4)]
    inputs = dict(zip([p.id for p in clean + poisoned + neutral], _real_like(12)))
    values = {k: {**{name: fn(h) for name, fn in {**CANDIDATES, **health.CONTROLS}.items()},
                  N_CONTENT: int(h.content.sum())} for k, h in inputs.items()}
    cal = calibrate(values, clean, poisoned, neutral, inputs)
    assert set(cal.properties_on_prompts) == set(CANDIDATES)
    assert cal.chosen_holds_on_prompts is all(cal.properties_on_prompts[cal.chosen][k] for k in PROPERTIES)
    assert "properties_on_prompts" in cal.to_json()
    assert "properties_on_prompts" not in calibrate(values, clean, poisoned, neutral).to_json()


@pytest.mark.slow
def test_calibrate_reports_no_choice_when_no_candidate_is_length_neutral():
    """Fault class: a calibration that crashes (no report) when the rule chooses nothing on a model;
    the figures are the result then, with ``chosen`` None and the reason in ``decided_by``."""
    from lab.health.calibration import N_CONTENT, calibrate

    clean = [CalibrationPrompt(id=f"c{i}", prompt=f"q{i}") for i in range(6)]
    poisoned = [CalibrationPrompt(id=f"p{i}", prompt=f"x q{i}") for i in range(6)]
    neutral = [CalibrationPrompt(id=f"n{i}", prompt=f"y q{i}") for i in range(6)]
    names = [*CANDIDATES, *health.CONTROLS]
    values = {}
    for i in range(6):  # every measure falls with N exactly: none is length-neutral
        for pid, n in ((f"c{i}", 5 + i), (f"p{i}", 300 + i), (f"n{i}", 301 + i)):
            values[pid] = {**{name: 10 - n / 100 for name in names}, N_CONTENT: n}
    cal = calibrate(values, clean, poisoned, neutral)
    assert cal.chosen is None and "six properties" in cal.decided_by
    assert all(not c.properties["length_neutral"] for c in cal.candidates)
    assert cal.to_json()["chosen"] is None  # the report is still written, with no choice


@pytest.mark.parametrize("case", ["chosen, study set", "none chosen", "properties not checked"])
def test_health_report_json_is_its_kinds_typed_report_text_for_text(case):
    """The report the command writes (the kind's typed report, lab.kinds.calibrate_health.Report, built by the
    calibration with NaN where the file holds null) read back and written again is the same text, key for key in
    its order: ReportDir.write_report writes it through that type. The keys only sometimes there
    (properties_on_prompts, study_set with study_set_file) stay as they were, and a null chosen_holds_on_prompts
    stays null.

    Fault class: a typed report whose fields differ from the writer's keys (order, a key only sometimes there, a
    null where the type wants a number) changes report.json's bytes or refuses a run's report."""
    import json

    from lab.health.calibration import RULE, HealthCalibration
    from lab.kinds.calibrate_health import KIND, Calibration, Candidate, Report
    from lab.reports import to_jsonable
    from lab.typed import to_json

    chosen = None if case == "none chosen" else "relative_entropy"
    cands = tuple(Candidate(name=name, properties={"bounded": True, "length_neutral": name != "length_only"},
                            iqr=math.nan if name == "soft_penalty" else 0.5, std=0.4, n_distinct=3,
                            max_tie_share=0.1, n_pairs_below=2, n_pairs_tied=0, n_pairs_below_clean=3,
                            n_pairs=3, length_rho=0.1, control=name == "length_only", eligible=name != "length_only",
                            admissible=False, median=1.5, min=1.0, max=math.nan)
                  for name in ("soft_penalty", "relative_entropy", "length_only"))
    checked = case != "properties not checked"
    cal = HealthCalibration(rule=RULE, chosen=chosen, decided_by="largest IQR", length_rho_tolerance=0.2,
                            controls_rejected={"length_only": True}, candidates=cands,
                            prompts=({"id": "c0", "variant": "clean", "relative_entropy": math.nan, "n_content": 5},),
                            properties_on_prompts={"relative_entropy": {"bounded": True, "n_checked": 9}} if checked
                            else None, chosen_holds_on_prompts=True if checked and chosen else None)
    study = {"relative_entropy": {"n_clean": 1, "max_tie_share": None, "min": 1.0}} if case == "chosen, study set" \
        else None
    report = Report(
        **{f.name: getattr(cal, f.name) for f in dataclasses.fields(Calibration)},
        length_reference={"profile": "tiny", "fitted_at": None, "n": 3},
        model=dataclasses.replace(MODEL_SOURCE, model="tiny"), environment=ENVIRONMENT,
        prompts_file="cal.jsonl", distractors_file="study.jsonl", n_clean=3,
        current_chosen="relative_entropy_for_length", current_chosen_file="chosen.json", saved_to=None,
        study_set=study, study_set_file="study.jsonl" if study else None)
    body = to_json(KIND.read(to_jsonable(report)))  # what ReportDir.write_report writes after "kind" and "format"
    again = to_json(KIND.read(json.loads(json.dumps(body))))
    assert json.dumps(again) == json.dumps(body)
    assert ("properties_on_prompts" in body) == checked and ("study_set" in body) == (study is not None)
    assert body["candidates"][0]["iqr"] is None and body["prompts"][0]["relative_entropy"] is None
    if not checked:  # a report of calibrate() without prefills (the command always checks): written with a null
        assert body["chosen_holds_on_prompts"] is None
    if checked and chosen is None:
        assert body["chosen_holds_on_prompts"] is None


def test_save_health_choice_writes_the_reference_record_the_reports_length_reference_holds():
    """The report holds the length reference as its file's record with the fit's figures added; --save writes
    that record, the figures left out, stamped with the report's time, and the rule's choice beside it.

    Fault class: the saved reference carrying the fit's figures (or missing a key of the record) once the report
    no longer keeps the record apart."""
    import json

    from lab.health.calibration import FIT_FIGURES, RULE
    from lab.health.calibration_report import save_health_choice
    from lab.health.choice import user_path
    from lab.health.measures import LengthReference
    from lab.health.references import reference_record
    from lab.kinds.calibrate_health import Report

    refs = {"content_entropy": LengthReference("content_entropy", 9.8, -0.12, 0.1)}
    record = reference_record("tinyprofile", "tiny", refs, prompts_file="x.jsonl", n_content=[3, 90], fitted_at=None)
    figures = {"n_prompts": 2, "n_content_range": [3, 90], FIT_FIGURES: {"content_entropy": {"rho_base_n": 0.1}}}
    created = "2026-01-01T00:00:00+00:00"
    report = Report(rule=RULE, chosen="relative_entropy", decided_by="largest IQR", length_rho_tolerance=0.2,
                    controls_rejected={}, candidates=(), prompts=(), length_reference={**record, **figures},
                    model=dataclasses.replace(MODEL_SOURCE, model="tiny"),
                    environment=dataclasses.replace(ENVIRONMENT, created=created), prompts_file="cal.jsonl",
                    distractors_file="study.jsonl", n_clean=0, current_chosen="relative_entropy",
                    current_chosen_file="chosen.json", saved_to=str(user_path()))
    ref_path, choice_path = save_health_choice(report)
    assert ref_path.read_text() == json.dumps({**record, "fitted_at": created}, indent=1) + "\n"
    assert json.loads(choice_path.read_text())["measure"] == "relative_entropy"


def test_study_records_every_candidate_under_its_own_column():
    """The study's optional columns name each candidate once (spelt out there so its settings import no torch)."""
    from lab.study.outcome import HEALTH_CANDIDATE_COLUMNS

    assert HEALTH_CANDIDATE_COLUMNS == tuple(f"health_{name}" for name in CANDIDATES)


def test_candidate_values_are_each_candidate_and_nan_when_not_measurable():
    from lab.health.graded import candidate_values

    gen = torch.Generator().manual_seed(3)
    h = random_inputs(gen, 24, 12)
    values = candidate_values(h)
    assert values == {name: float(m(h)) for name, m in CANDIDATES.items()}
    blind = HealthInputs(received=h.received, content=h.content, score=h.score, is_sink=h.is_sink,
                         observed=torch.zeros_like(h.observed), sink_rate=h.sink_rate, threshold=h.threshold)
    assert all(math.isnan(v) for v in candidate_values(blind).values())
