"""``lab calibrate-health --validate`` on SmolLM2 with a handful of the validation prompts, end to end.

Ten prompts of ``lab/data/health_validation.jsonl`` (every seventh of the first seventy: about 16 to
630 content tokens) through the command: model load, one ``analyze_prefill`` per prompt,
:func:`lab.health.validation.validation_report`, the table and the report directory. The
measured verdict on the full set is in ``docs/results.md`` ("Context health on independent
text"); ten prompts are too few to judge the bars, so this checks the path and the negative
control (the length-only control must come out with rho -1 and not valid) and records the figures.
"""

from __future__ import annotations

import json
from importlib import resources

import pytest

from lab.health.validation import VALIDATION_PROMPTS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N_PROMPTS = 10
STRIDE = 7  # sources take turns every prompt, so a stride of 7 visits all four


def test_calibrate_health_validate_on_smollm2_writes_the_verdict(tmp_path, lab_log):
    lines = resources.files("lab").joinpath(VALIDATION_PROMPTS).read_text(encoding="utf-8").splitlines()
    subset = tmp_path / "validation.jsonl"
    subset.write_text("\n".join(lines[: N_PROMPTS * STRIDE: STRIDE]) + "\n", encoding="utf-8")
    rc, report = lab_log.cli(["calibrate-health", "--validate", str(subset), "--model", "smollm2", "--device", "cpu"])
    assert rc == 0 and report is not None
    data = json.loads((report / "report.json").read_text(encoding="utf-8"))
    fig = data["figures"]
    lab_log.record(measure=data["measure"], rho=fig["rho"], p=fig["p"], saturated_share=fig["saturated_share"],
                   n_measurable=fig["n_measurable"])
    assert data["kind"] == "calibrate-health-validate" and fig["n"] == N_PROMPTS
    assert fig["n_measurable"] == N_PROMPTS  # every prompt has observed content and the model has a reference
    values = [p[data["measure"]] for p in data["prompts"]]
    assert all(0.0 <= v <= 10.0 for v in values)
    assert len({p["source"] for p in data["prompts"]}) == 4
    control = data["candidates"]["length_only"]
    assert control["rho"] == pytest.approx(-1.0) and control["valid"] is False  # negative control
    assert "Context health on independent text" in (report / "summary.md").read_text(encoding="utf-8")
