"""`lab study --weights/--draft-weights`: a setting of the study, kept by resume, absent for float32 (no torch, no model)."""

from __future__ import annotations

import pytest

from lab.study.config import StudyConfig
from lab.runs.files import write_json_atomic
from lab.study.work import config_from_work_dir, plan_study

pytestmark = pytest.mark.unit


def test_weights_are_a_setting_only_when_not_float32(tmp_path):
    """Fault class: a quantized study resumed in float32 (or merged with a float32 one) would mix two
    representations in one report; and a float32 work directory written before the option must keep
    its key (an added default-valued setting would orphan every one)."""
    plain = plan_study(StudyConfig(limit=2, device="cpu", out=str(tmp_path)))
    assert "weights" not in plain.settings and "draft_weights" not in plain.settings
    q4 = plan_study(StudyConfig(limit=2, device="cpu", out=str(tmp_path), weights="q4"))
    assert q4.settings["weights"] == "q4" and q4.key != plain.key
    q4.work_dir.mkdir(parents=True)
    write_json_atomic(q4.work_dir / "settings.json", q4.settings)
    assert config_from_work_dir(q4.work_dir).weights == "q4"


def test_bad_weights_refused_naming_the_field():
    with pytest.raises(ValueError, match="draft_weights='q3'"):
        StudyConfig(draft_weights="q3")
