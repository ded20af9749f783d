"""The clean length reference and the ``*_for_length`` candidates (lab.health.references, lab.health.measures)."""

from __future__ import annotations

import json
import dataclasses
import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from lab.health import measures as health
from lab.health.calibration import fit_length_references, figures
from lab.health.measures import (CANDIDATES, FOR_LENGTH, REFERENCED_BASES, LengthReference, check_properties,
                                 for_length, random_inputs)
from lab.health.references import fit_reference, load_references, reference_record, write_references
from lab.models.source import ModelSource, register_source

pytestmark = pytest.mark.unit

PROPS5 = dict.fromkeys(health.PROPERTIES, True)


def _drifting(n_prompts: int, seed: int, slope: float = -0.4, noise: float = 0.15):
    """A base that falls with ln N on clean prompts (what content_entropy does on a real model), plus noise."""
    rng = np.random.default_rng(seed)
    n = np.exp(rng.uniform(math.log(5), math.log(500), n_prompts)).astype(int)
    return list(9.5 + slope * np.log(n) + rng.normal(0, noise, n_prompts)), list(n)


def test_fit_reference_recovers_a_planted_line_and_noise():
    values, n = _drifting(120, seed=1)
    ref = fit_reference("content_entropy", values, n)
    assert ref.slope == pytest.approx(-0.4, abs=0.05) and ref.intercept == pytest.approx(9.5, abs=0.2)
    assert ref.scale == pytest.approx(0.15, rel=0.25)


def test_for_length_removes_a_drift_on_prompts_the_reference_never_saw():
    """Fault class: a health that falls with content length on clean prompts (reads length, not context).

    The base drifts (|rho with N| well above the tolerance 0.2) on fresh clean prompts; read
    against a reference fitted on other prompts of the same model it lies within the tolerance.
    Negative control: the same base read against another model's reference (a different slope)
    still drifts, so the check can fail. With 300 fresh prompts the residual rho's SD is about
    0.06, so a correct reference exceeds 0.2 by chance with probability under 1e-3 (fixed seeds)."""
    ref = fit_reference("content_entropy", *_drifting(120, seed=1))
    values, n = _drifting(300, seed=2)
    assert abs(stats.spearmanr(values, n).statistic) > 0.6
    read = [for_length(v, k, ref) for v, k in zip(values, n)]
    assert abs(stats.spearmanr(read, n).statistic) <= 0.2
    foreign = LengthReference("content_entropy", intercept=9.5, slope=-0.1, scale=ref.scale)
    wrong = [for_length(v, k, foreign) for v, k in zip(values, n)]
    assert abs(stats.spearmanr(wrong, n).statistic) > 0.2


@given(st.floats(0, 10), st.floats(0, 10), st.integers(1, 5000), st.floats(-1, 1), st.floats(0.01, 3))
def test_for_length_is_bounded_and_keeps_order_at_equal_length(a, b, n, slope, scale):
    """At equal N (a poisoned twin and its neutral twin) the reading keeps the base's order; 0..10."""
    ref = LengthReference("content_entropy", intercept=9.0, slope=slope, scale=scale)
    fa, fb = for_length(a, n, ref), for_length(b, n, ref)
    assert 0.0 <= fa <= 10.0 and 0.0 <= fb <= 10.0
    assert fa <= fb if a <= b else fa >= fb


def test_for_length_candidates_have_the_five_properties_and_need_a_reference():
    gen = torch.Generator().manual_seed(0)
    h = random_inputs(gen, 30, 12)
    for base in REFERENCED_BASES:
        fn = CANDIDATES[base + FOR_LENGTH]
        assert all(check_properties(fn, cases=40).values())
        ref = h.length_reference[base]
        assert fn(h) == pytest.approx(for_length(CANDIDATES[base](h), 12, ref))
        assert math.isnan(fn(dataclasses.replace(h, length_reference=None)))


def test_rule_prefers_the_reading_for_length_over_its_drifting_base():
    """The base orders poisoned below neutral as well as its reading does, but drifts with N:
    only the reading is eligible (length-neutral), so the rule chooses it."""
    ref = fit_reference("content_entropy", *_drifting(120, seed=1))
    clean, n_clean = _drifting(150, seed=3)  # 300 clean and neutral: rho's SD about 0.06 (see above)
    neutral, n_neutral = _drifting(150, seed=4)
    poisoned = [v - 0.3 for v in neutral]  # the distractor lowers evenness at the neutral twin's length
    base = figures("content_entropy", clean, poisoned, neutral, n_clean + n_neutral, PROPS5)
    read = figures("content_entropy_for_length", *[[for_length(v, k, ref) for v, k in zip(vals, ns)]
                                                   for vals, ns in ((clean, n_clean), (poisoned, n_neutral),
                                                                    (neutral, n_neutral))],
                   n_clean + n_neutral, PROPS5)
    assert not base.eligible and read.eligible and read.n_pairs_below == base.n_pairs_below == 150
    from lab.health.calibration import choose
    assert choose([base, read])[0] == "content_entropy_for_length"


def test_fit_length_references_fits_every_referenced_base():
    values, n = _drifting(40, seed=5)
    rows = {f"p{i}": {**{b: v for b in REFERENCED_BASES}, "n_content": k} for i, (v, k) in enumerate(zip(values, n))}
    refs, figs = fit_length_references(rows)
    assert set(refs) == set(REFERENCED_BASES) == set(figs["bases"])
    assert figs["n_prompts"] == 40 and figs["bases"]["content_entropy"]["rho_base_n"] < -0.6


@pytest.mark.parametrize("values, n, match", [
    ([5.0] * 5, [10, 20, 30, 40, 50], "needs >= 10"),
    ([5.0] * 12, [10] * 12, "no slope"),
    ([5.0] * 12, [10] * 11, "do not align"),
])
def test_fit_reference_refuses_too_little_to_fit(values, n, match):
    with pytest.raises(ValueError, match=match):
        fit_reference("content_entropy", values, n)


def test_references_round_trip_through_the_user_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path))
    refs = {"content_entropy": LengthReference("content_entropy", 9.8, -0.12, 0.1)}
    path = write_references(reference_record("tinyprofile", "tiny", refs, prompts_file="x.jsonl", n_content=[3, 90],
                                             fitted_at=None))
    assert path.is_relative_to(tmp_path)
    assert load_references("tinyprofile") == refs
    assert load_references("no-such-profile") is None and load_references(None) is None


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.update(profile="other"), "not a reference of profile"),
    (lambda d: d["references"]["content_entropy"].update(scale=0.0), "scale: 0.0 is less than or equal to the minimum of 0"),
    (lambda d: d["references"]["content_entropy"].update(slope="x"), "slope: 'x' is not of type 'number'"),
])
def test_bad_reference_file_raises_naming_it(tmp_path, monkeypatch, edit, match):
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path))
    refs = {"content_entropy": LengthReference("content_entropy", 9.8, -0.12, 0.1)}
    path = write_references(reference_record("p", "tiny", refs, prompts_file="x", n_content=[3, 9], fitted_at=None))
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=match) as exc:
        load_references("p")
    assert str(path) in str(exc.value)


def test_missing_reference_warns_once_naming_the_model_and_the_fix(tmp_path, monkeypatch):
    """Fault class: a chosen *_for_length health silently NaN (or silently unreferenced) for a model without a reference."""
    from lab.health import graded

    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path))
    monkeypatch.setattr(graded, "load_chosen", lambda: "content_entropy_for_length")
    graded._warn_no_reference.cache_clear()

    class Model:
        def __init__(self):
            register_source(self, ModelSource(model="tiny", profile="no-reference-profile", device="cpu", dtype="float32"))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert graded.model_length_reference(Model()) == graded.ModelLengthReference(references=None, path=None)
        graded.model_length_reference(Model())
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 1 and "no-reference-profile" in msgs[0] and "calibrate-health" in msgs[0]
