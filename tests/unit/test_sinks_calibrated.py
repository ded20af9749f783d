"""The candidate sink statistics, the rule choosing among them, the packaged calibrations and their loader (no weights)."""

from __future__ import annotations

import dataclasses
import json
import math
import warnings

import pytest
import torch

from lab.models.source import ModelSource, register_source
from lab.sinks import profiles as sink_profiles
from lab.sinks.calibration import GRIDS, PromptScores, choose_statistic, sweep_candidates
from lab.health.measures import SYNTHETIC_REFERENCES, HealthInputs
from lab.health.graded import graded_health
from lab.sinks.candidates import STATISTICS
from lab.sinks.prefill import baseline_mask, candidate_scores, score_positions
from lab.sinks.structure import ROLE_CONTENT, ROLE_SYSTEM_DEFAULT, ROLE_TEMPLATE
from tests import support
from tests.provenance import ENVIRONMENT, MODEL_SOURCE

CHOICE = sink_profiles.load_choice()  # the packaged detector choice
STATISTIC, DEFAULT_THRESHOLD = CHOICE.statistic, CHOICE.default_threshold

# A ChatML-like prompt: position 0 marker, 20 injected system-prompt tokens, 3 markers,
# 12 content tokens, 5 markers of the generation prompt.
ROLES = ([ROLE_TEMPLATE] + [ROLE_SYSTEM_DEFAULT] * 20 + [ROLE_TEMPLATE] * 3 + [ROLE_CONTENT] * 12
         + [ROLE_TEMPLATE] * 5)
S = len(ROLES)


def _per_head(system_level: float, seed: int = 0) -> torch.Tensor:
    """``[L=2, H=3, S]`` received attention: a position-0 sink, content ~1e-2, system prompt at ``system_level``."""
    g = torch.Generator().manual_seed(seed)
    x = 1e-2 * torch.exp(0.3 * torch.randn(2, 3, S, generator=g))
    x[:, :, 0] = 0.4
    x[:, :, 1:21] = system_level * torch.exp(1.0 * torch.randn(2, 3, 20, generator=g))
    return x


def test_baseline_mask_content_only_then_prose_then_observed():
    observed = torch.ones(S, dtype=torch.bool)
    content = torch.tensor([r == ROLE_CONTENT for r in ROLES])
    assert torch.equal(baseline_mask(ROLES, observed, "content"), content)
    prose = torch.tensor([r != ROLE_TEMPLATE for r in ROLES])
    assert torch.equal(baseline_mask(ROLES, observed, "prose"), prose)
    none_content = observed & ~content  # content all in the tail: the system prompt is the baseline
    assert torch.equal(baseline_mask(ROLES, none_content, "content"), prose & ~content)
    only_template = [ROLE_TEMPLATE] * 4
    assert torch.equal(baseline_mask(only_template, torch.ones(4, dtype=torch.bool), "content"),
                       torch.ones(4, dtype=torch.bool))


def test_candidate_gm_content_blind_to_system_prompt_gm_prose_not():
    """A heavy, spread-out injected system prompt lowers position 0's gm_prose z (the Qwen failure); gm_content holds."""
    quiet, loud = candidate_scores(_per_head(1e-2), ROLES), candidate_scores(_per_head(0.1), ROLES)
    assert float(loud["gm_content"][0]) == pytest.approx(float(quiet["gm_content"][0]), rel=1e-5)
    assert float(loud["gm_prose"][0]) < float(quiet["gm_prose"][0]) - 1.0  # negative control: prose moves
    assert float(loud["gm_content"][0]) > DEFAULT_THRESHOLD


def test_candidate_scores_shapes_and_sink_rate_is_gu_fraction():
    ph = _per_head(1e-2)
    c = candidate_scores(ph, ROLES)
    assert set(STATISTICS) <= set(c) and c["layer_z"].shape == (2, S)
    assert all(c[k].shape == (S,) for k in STATISTICS)
    assert float(c["sink_rate"][0]) == 1.0 and float(c["sink_rate"][30]) == 0.0
    torch.testing.assert_close(c["layer_median"], c["layer_z"].quantile(0.5, dim=0))


def test_score_positions_uses_the_chosen_statistic_and_rejects_unknown():
    ph = _per_head(1e-2)
    sc = score_positions(ph, ROLES)
    assert sc.statistic == STATISTIC
    torch.testing.assert_close(sc.score, candidate_scores(ph, ROLES)[STATISTIC])
    with pytest.raises(ValueError, match="statistic"):
        score_positions(ph, ROLES, statistic="mean")


def _prompt(p0: dict[str, float], content: dict[str, float]) -> PromptScores:
    scores = {k: torch.tensor([p0[k]] + [content[k]] * 99, dtype=torch.float32) for k in STATISTICS}
    return PromptScores("p", scores, torch.ones(100, dtype=torch.bool), torch.tensor([False] + [True] * 99))


def test_sweep_candidates_each_on_its_own_grid():
    p = _prompt(dict.fromkeys(STATISTICS, 5.0) | {"sink_rate": 0.5}, dict.fromkeys(STATISTICS, 0.0) | {"sink_rate": 0.1})
    res = sweep_candidates([p])
    assert res["gm_content"]["feasible"] == [t for t in GRIDS["gm_content"] if t < 5.0]
    assert res["sink_rate"]["feasible"] == [t for t in GRIDS["sink_rate"] if 0.1 <= t < 0.5]
    assert res["gm_content"]["chosen"] == 3.0  # middle of 1.0 .. 4.75, on the 0.25 grid
    assert res["sink_rate"]["chosen"] == pytest.approx(0.295, abs=0.0051)  # middle of 0.10 .. 0.49, 0.01 grid


def test_choose_statistic_first_feasible_on_every_model_in_order():
    feasible = {"a": {"gm_prose": [3.0], "gm_content": [3.0, 3.25, 3.5], "layer_median": [2.0]},
                "b": {"gm_prose": [], "gm_content": [3.5, 3.75], "layer_median": [1.0, 2.0]}}
    assert choose_statistic(feasible) == ("gm_content", 3.5)  # gm_prose fails on b; only 3.5 is common


def test_choose_statistic_no_common_threshold_defaults_to_the_smallest_model_threshold():
    feasible = {"a": {"gm_prose": [2.0, 2.25, 2.5]}, "b": {"gm_prose": [4.0]}}
    assert choose_statistic(feasible) == ("gm_prose", 2.25)


def test_choose_statistic_order_decides_negative_control():
    """Both feasible everywhere: the earlier in STATISTICS wins, whatever the ranges' widths."""
    feasible = {"a": {"gm_content": [3.0], "layer_median": [1.0, 2.0, 3.0, 4.0]}}
    assert choose_statistic(feasible)[0] == "gm_content"
    with pytest.raises(ValueError, match="no candidate"):
        choose_statistic({"a": {"gm_content": []}, "b": {"gm_content": [3.0]}})
    with pytest.raises(ValueError, match="at least one"):
        choose_statistic({})


@pytest.fixture
def calibration_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(sink_profiles, "calibration_path", lambda profile: tmp_path / f"{profile}.json")
    return tmp_path


class _Model:
    def __init__(self, profile):
        register_source(self, ModelSource(model=profile or "some/hub-id", profile=profile, device="cpu", dtype="float32"))


def test_resolve_threshold_reads_the_profile_calibration(calibration_dir):
    path = calibration_dir / "qwen.json"
    path.write_text(json.dumps({"profile": "qwen", "thresholds": {STATISTIC: 0.25}}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sink_profiles.resolve_threshold(_Model("qwen"), None) == (0.25, "qwen", "calibrated", str(path))
    assert sink_profiles.resolve_threshold(_Model("qwen"), 0.5) == (0.5, None, "given", None)


def test_resolve_threshold_uncalibrated_model_gets_default_and_a_warning(calibration_dir):
    with pytest.warns(UserWarning, match="not calibrated for model 'some/hub-id'"):
        t, cal, source, _ = sink_profiles.resolve_threshold(_Model(None), None)
    assert (t, cal) == (DEFAULT_THRESHOLD, None) and "not calibrated" in source


@pytest.mark.parametrize("content", ["{not json", json.dumps({"profile": "qwen", "thresholds": {"other": 1.0}}),
                                     json.dumps({"profile": "gemma", "thresholds": {STATISTIC: 3.0}}),
                                     json.dumps({"profile": "qwen", "thresholds": {STATISTIC: None}})])
def test_load_calibration_bad_file_raises_naming_it(calibration_dir, content):
    (calibration_dir / "qwen.json").write_text(content)
    with pytest.raises(ValueError, match="qwen.json"):
        sink_profiles.load_calibration("qwen")


def test_packaged_calibrations_are_for_the_detector_statistic():
    """Every shipped lab/sinks/calibrations/<profile>.json loads, for a profile the lab knows, on the detector's
    statistic with a finite threshold; exactly the profiles with a shipped file load one."""
    from lab.models.profiles import PROFILES

    shipped = {p.stem for p in support.packaged_sink_profile_files()}
    assert shipped and shipped <= set(PROFILES), shipped
    loaded = {name: sink_profiles.load_calibration(name) for name in PROFILES}
    assert {name for name, cal in loaded.items() if cal is not None} == shipped
    for name in shipped:
        assert loaded[name].statistic == STATISTIC and math.isfinite(loaded[name].threshold), name


def test_every_packaged_calibration_file_agrees_with_the_loader_and_the_detector():
    """Each shipped <profile>.json: a known profile, loaded by the loader, for the statistic the detector scores.

    Guards data that records a choice the code no longer makes (a file naming another
    statistic than the one the detector reads it for).
    """
    from lab.models.profiles import PROFILES

    files = support.packaged_sink_profile_files()
    assert files, "no packaged sink calibration"
    detector = score_positions(_per_head(1e-2), ROLES).statistic
    assert detector == CHOICE.statistic
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        assert path.stem in PROFILES and data["profile"] == path.stem, path.name
        cal = sink_profiles.load_calibration(path.stem)
        assert cal is not None and cal.statistic == detector, path.name
        assert data["statistic"] == detector, f"{path.name} names {data['statistic']!r}, the detector uses {detector!r}"
        assert cal.threshold == data["thresholds"][detector] == data["candidates"][detector]["chosen"], path.name
        for m in data.get("migrated", []):
            assert m["field"] == "statistic" and m["reason"] and m["to"] == detector, path.name


def test_packaged_choice_is_the_rule_on_the_files_recorded_figures():
    """choice.json holds what choose_statistic gives on the profile files' own feasible thresholds."""
    from lab.models.profiles import PROFILES

    feasible = sink_profiles.recorded_feasible(PROFILES)
    assert set(CHOICE.profiles) == set(feasible) == {p.stem for p in support.packaged_sink_profile_files()}
    assert choose_statistic(feasible) == (CHOICE.statistic, CHOICE.default_threshold)


def test_packaged_thresholds_and_default_unchanged():
    """Regression (a calibrated value lost in moving it between code and data): the shipped thresholds."""
    got = {p.stem: sink_profiles.load_calibration(p.stem).threshold for p in support.packaged_sink_profile_files()}
    assert got == {"gemma3-270m": 0.08, "qwen2.5-coder": 0.03, "qwen2.5-coder-0.5b": 0.02, "smollm2": 0.35}
    assert (CHOICE.statistic, CHOICE.default_threshold, CHOICE.label) == ("sink_rate", 0.02, "sink rate")


def test_resolve_threshold_warning_names_the_packaged_default(calibration_dir):
    with pytest.warns(UserWarning, match=r"using the default sink rate > 0.02 \(run `lab calibrate-sinks`"):
        sink_profiles.resolve_threshold(_Model(None), None)


@pytest.fixture
def packaged_dir(tmp_path, monkeypatch):
    """The loader's packaged folder redirected to an empty tmp folder."""
    monkeypatch.setattr(sink_profiles, "calibration_dir", lambda: tmp_path)
    return tmp_path


def test_write_choice_then_load_choice_round_trips(packaged_dir):
    sink_profiles.write_choice("gm_content", 3.5, ["b", "a"], chosen_at="t")
    choice = sink_profiles.load_choice()
    assert (choice.statistic, choice.default_threshold, choice.profiles) == ("gm_content", 3.5, ("a", "b"))
    with pytest.raises(ValueError, match="statistic"):
        sink_profiles.write_choice("mean", 3.5, ["a"], chosen_at="t")


@pytest.mark.parametrize("content", ["{not json", json.dumps({"statistic": "mean", "default_threshold": 0.1}),
                                     json.dumps({"statistic": "sink_rate", "default_threshold": None})])
def test_load_choice_bad_file_raises_naming_it(packaged_dir, content):
    (packaged_dir / sink_profiles.CHOICE_FILE).write_text(content)
    with pytest.raises(ValueError, match="choice.json"):
        sink_profiles.load_choice()


def test_migrate_statistic_rewrites_the_field_and_records_why(packaged_dir):
    path = packaged_dir / "qwen.json"
    path.write_text(json.dumps({"profile": "qwen", "statistic": "gm_content",
                                "thresholds": {"gm_content": 3.5, "sink_rate": 0.03}}))
    before = path.read_text()
    assert sink_profiles.migrate_statistic("qwen", "sink_rate", reason="why", at="t")
    assert path.read_text() == before  # the packaged file is read, never written
    data = json.loads((sink_profiles.user_dir() / "qwen.json").read_text())
    assert data["statistic"] == "sink_rate" and data["thresholds"] == {"gm_content": 3.5, "sink_rate": 0.03}
    assert data["migrated"] == [{"field": "statistic", "from": "gm_content", "to": "sink_rate", "reason": "why",
                                 "at": "t"}]
    assert not sink_profiles.migrate_statistic("qwen", "sink_rate", reason="again", at="t")  # nothing to do
    with pytest.raises(ValueError, match="no finite threshold"):
        sink_profiles.migrate_statistic("qwen", "layer_median", reason="why", at="t")


def test_loader_sits_below_the_prefill_analysis():
    """Regression (an import circle hidden in function-local imports): the loader imports no analysis module."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(sink_profiles))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    below = {"lab.sinks.candidates", "lab.user_dirs", "lab.runs.files", "lab.models.source", "lab.schemas",
             "lab.schemas.calibration"}
    assert not {m for m in imported if m and m.startswith("lab.")} - below


def test_graded_health_not_measurable_without_observed_content():
    """No observed content token: NaN ("not measurable"), never a perfect 10."""
    s = 6
    content = torch.tensor([False, False, False, True, True, False])
    base = dict(received=torch.full((s,), 0.1), content=content, score=torch.zeros(s), is_sink=torch.zeros(s, dtype=bool),
                sink_rate=torch.zeros(s), threshold=3.0)
    assert math.isnan(graded_health(HealthInputs(observed=torch.tensor([True] * 3 + [False] * 3), **base)))
    measurable = graded_health(HealthInputs(observed=torch.ones(s, dtype=torch.bool), **base,
                                            length_reference=SYNTHETIC_REFERENCES))
    assert math.isfinite(measurable) and measurable >= 9.5  # even attention: at or near the top of the scale


@pytest.mark.parametrize("cross", ["moves", "stays", "refused", "none"])
def test_calibration_report_json_is_its_kinds_typed_report_text_for_text(cross):
    """A calibration report with every part the command can write (a held-out check with long prompts, long
    calibration prompts, the rule's choice moving, staying or refused), built as the kind's typed report
    (lab.kinds.calibrate_sinks.Report, which lab.sinks.calibration_report builds), read back and written again is
    the same text, key for key in its order: ReportDir.write_report writes it through that type.

    Fault class: a typed report whose fields differ from the writer's keys (order, a key only sometimes there,
    a null where the type wants a number) changes report.json's bytes or refuses a run's report."""
    from lab.kinds.calibrate_sinks import (KIND, Candidate, Counts, Criteria, CrossModelChosen, CrossModelRefused,
                                          HeldOut, LongPrompt, MovesFrom, Report, SweepRecord)
    from lab.reports import to_jsonable
    from lab.sinks.candidates import STATISTICS
    from lab.typed import to_json

    counts = Counts(position0_flagged=11, n_prompts=12, content_flagged=3, n_content=900, trailing_flagged=1)
    was = MovesFrom(statistic="gm_prose", default_threshold=3.5, path="choice.json")
    cross_model = {"moves": CrossModelChosen(("a", "b"), "sink_rate", 0.05, moves_from=was),
                   "stays": CrossModelChosen(("a",), "gm_prose", 3.5, moves_from=None),
                   "refused": CrossModelRefused(("a", "b"), None, None),
                   "none": None}[cross]
    report = Report(
        model=MODEL_SOURCE, environment=dataclasses.replace(ENVIRONMENT, created="now"),
        criteria=Criteria(position0_min_rate=0.9, content_max_rate=0.01), min_observers=4, statistic="sink_rate",
        statistics=tuple(STATISTICS),
        candidates={"sink_rate": Candidate((0.17, 0.3), (0.17, 0.3), 0.2, {"calibration": counts, "held_out": counts},
                                           0.25, 0.1),
                    "gm_prose": Candidate(None, (), None, {}, 1.5, None)},
        chosen_threshold=0.2, current_default_threshold=0.02, feasible_thresholds=(0.17, 0.3), n_prompts=24,
        n_content_tokens=1800, position0_score_min=0.25, content_score_max=0.1,
        sweep=(SweepRecord(0.17, 24, 24, 3, 1800, 2, 2, 0, 4000, True),
               SweepRecord(0.5, 1, 24, 0, 1800, 0, 0, 0, 0, False)),
        trailing_fraction=0.25, held_out=HeldOut("held.jsonl", 0.2, counts, counts, (2048, 2048)),
        long_prompts=(LongPrompt("long-0", 2048, 0.9, 0.1, 2000, 0, 0),),
        prompts=({"id": "p0", "n_tokens": 25, **{f"position0_{k}": 0.5 for k in STATISTICS},
                  "max_content_score": None, "n_content": 0},),
        cross_model=cross_model, saved_to=None)
    body = {"kind": KIND.name, **to_jsonable(report)}  # as ReportDir.write_report reads it
    again = {"kind": body["kind"], **to_json(KIND.read(body))}
    assert json.dumps(again) == json.dumps(body)
    assert ("moves_from" in json.dumps(body)) == (cross in ("moves", "stays"))


def test_cross_model_choice_is_the_kinds_type_and_keeps_why_the_rule_refused(monkeypatch):
    """The rule's result is written as it is read (lab.kinds.calibrate_sinks' CrossModelChosen or
    CrossModelRefused); why it refused, which the file does not hold, comes back beside it for the command's
    line, and ``moves_from`` names the current choice only when the rule's differs from it."""
    import lab.sinks.calibration_report as scr
    from lab.kinds.calibrate_sinks import CrossModelChosen, CrossModelRefused, MovesFrom
    from lab.sinks.profiles import DetectorChoice

    current = DetectorChoice(statistic="sink_rate", default_threshold=0.02, profiles=("a",), path="choice.json")
    feasible = {"b": {"sink_rate": [0.1]}, "a": {"sink_rate": [0.2]}}
    assert scr.cross_model_choice({}, current) == (None, None)
    monkeypatch.setattr(scr, "choose_statistic", lambda f: ("sink_rate", 0.02))
    assert scr.cross_model_choice(feasible, current) == (CrossModelChosen(("a", "b"), "sink_rate", 0.02, None), None)
    monkeypatch.setattr(scr, "choose_statistic", lambda f: ("gm_prose", 3.5))
    moved, _ = scr.cross_model_choice(feasible, current)
    assert moved.moves_from == MovesFrom(statistic="sink_rate", default_threshold=0.02, path="choice.json")

    def refuse(f):
        raise ValueError("no candidate statistic is feasible on every model")

    monkeypatch.setattr(scr, "choose_statistic", refuse)
    assert scr.cross_model_choice(feasible, current) == (CrossModelRefused(("a", "b"), None, None),
                                                         "no candidate statistic is feasible on every model")
