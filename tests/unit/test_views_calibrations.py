"""The calibration and benchmark pages (calibrate-sinks, calibrate-health --validate, bench-sinks).

Fault classes guarded: a headline whose figures differ from the command's own JSON (which
read_report does not parse), a failed validation shown without its warning, a plot shown twice,
a damaged JSON file that breaks the page instead of leaving the headline out.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.views.publish import report_folder
from lab.views.page import PAGE
from tests.page_dom import PNG, Tree
from tests.provenance import environment_json, machine_load_json, model_json

pytestmark = pytest.mark.unit


def _write(root: Path, kind: str, name: str, data, png: str | None = None) -> Tree:
    with report_folder(root, kind, "smollm2") as rd:
        rd.file(name).write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
        rd.write_text("summary.md", "# Title\n\nBody.\n")
        if png:
            rd.file(png).write_bytes(PNG)
    return Tree((rd.final / PAGE).read_text(encoding="utf-8"))


def _headline(tree: Tree) -> str:
    found = tree.root.all("p", "headline")
    return found[0].text_all() if found else ""


def _calibration() -> dict:
    """A whole calibrate-sinks report (lab.kinds.calibrate_sinks.Report)."""
    counts = {"position0_flagged": 11, "n_prompts": 12, "content_flagged": 3, "n_content": 900, "trailing_flagged": 0}
    return {"kind": "calibrate-sinks", "model": model_json(), "environment": environment_json(),
            "criteria": {"position0_min_rate": 0.95, "content_max_rate": 0.01}, "min_observers": 8,
            "statistic": "sink_rate", "statistics": ["sink_rate"],
            "candidates": {"sink_rate": {"feasible": [0.17, 0.69], "feasible_thresholds": [0.17, 0.3, 0.69],
                                         "chosen": 0.43, "counts": {"held_out": counts}, "position0_lowest": 0.2,
                                         "content_highest": 0.1}},
            "chosen_threshold": 0.43, "current_default_threshold": 0.02, "feasible_thresholds": [0.17, 0.3, 0.69],
            "n_prompts": 24, "n_content_tokens": 1800, "position0_score_min": 0.2, "content_score_max": 0.1,
            "sweep": [], "trailing_fraction": 0.1,
            "held_out": {"prompts": "held.jsonl", "threshold": 0.43, "short": counts, "long": None,
                         "long_n_tokens": []},
            "long_prompts": [], "prompts": [], "cross_model": None, "saved_to": None}


def test_calibrate_sinks_page_headline_from_calibration_json(tmp_path):
    """The chosen threshold, its feasible range and the held-out counts are calibration.json's; sweep.png once."""
    data = _calibration()
    tree = _write(tmp_path, "calibrate-sinks", "calibration.json", data, png="sweep.png")  # as before format 1
    assert _headline(tree) == ("threshold 0.43 on sink_rate (feasible 0.17 to 0.69, 24 prompts); held out: "
                               "position 0 flagged on 11/12, content 3/900")
    assert len([i for i in tree.root.all("img") if i.attrs["src"].startswith("data:")]) == 1


def test_calibrate_sinks_page_damaged_json_leaves_headline_out(tmp_path):
    """A calibration.json that does not parse gives the summary's page, not an error."""
    tree = _write(tmp_path, "calibrate-sinks", "calibration.json", "{not json")
    assert "threshold" not in _headline(tree)
    assert [s for s in tree.root.all("section") if s.attrs.get("id") == "summary"]


def test_calibrate_sinks_page_of_a_report_in_another_shape_says_why_in_one_line(tmp_path):
    """A hand-edited report.json (a string where a held-out count goes) is named on the page in one line, the
    field and what was found, and the rest of the page is drawn; no headline made of it."""
    data = _calibration()
    data["held_out"] = {**data["held_out"], "short": {**data["held_out"]["short"], "n_prompts": "twelve"}}
    tree = _write(tmp_path, "calibrate-sinks", "report.json", data, png="sweep.png")
    notes = [n for n in tree.root.all("p", "note") if "was not drawn" in n.text_all()]
    assert len(notes) == 1 and _headline(tree) == ""
    assert ("(report.json: held_out.short.n_prompts: an integer goes here, not a string ('twelve'))"
            in notes[0].text_all())


def _figures(rho, p, share: float, n: int, valid: bool) -> dict:
    return {"name": "relative_entropy_for_length", "n": n, "n_measurable": n, "rho": rho, "p": p,
            "low_share": share, "high_share": 0.0, "low": 0.5, "median": 5.0, "high": 9.5, "control": False,
            "saturated_share": share, "length_neutral": valid, "unsaturated": valid, "valid": valid}


def _validation(valid: bool) -> dict:
    """A whole calibrate-health-validate report (lab.kinds.calibrate_health_validate.Report)."""
    figures = _figures(0.5151, 0.12755, 0.1, 10, valid)
    return {"kind": "calibrate-health-validate", "measure": "relative_entropy_for_length", "valid": valid,
            "bars": {"max_length_rho": 0.2, "max_saturated_share": 0.05, "end_margin": 0.1, "min_measurable": 10},
            "figures": figures, "by_source": {"numpy": figures},
            "candidates": {"relative_entropy_for_length": figures,
                           "content_entropy": {**_figures(0.01, 0.9, 0.0, 10, True), "name": "content_entropy"}},
            "valid_candidates": ["content_entropy"],
            "prompts": [{"id": "p0", "source": "numpy", "relative_entropy_for_length": None, "n_content": 16}],
            "model": model_json(), "environment": environment_json(),
            "prompts_file": "lab/data/health_validation.jsonl",
            "reference_file": None}


def test_calibrate_health_validate_page_failed_shows_warning_with_figures(tmp_path):
    """A failed validation: a warning carrying rho, p, the saturated share and both bars."""
    tree = _write(tmp_path, "calibrate-health-validate", "validation.json", _validation(False))
    warning = [p for p in tree.root.all("p") if "warning" in p.classes()]
    assert len(warning) == 1
    text = warning[0].text_all()
    for figure in ("FAILS", "+0.52", "p 0.13", "|rho| <= 0.2", "10% at an end", "bar 5%", "not a reading"):
        assert figure in text, figure


def test_calibrate_health_validate_page_valid_has_no_warning(tmp_path):
    """A passing validation says it reads the context, with no warning."""
    tree = _write(tmp_path, "calibrate-health-validate", "validation.json", _validation(True))
    assert not [p for p in tree.root.all("p") if "warning" in p.classes()]
    assert _headline(tree).startswith("context health (relative_entropy_for_length) reads the context")


def test_calibrate_health_validate_page_of_a_report_in_another_shape_says_why_in_one_line(tmp_path):
    """A hand-edited report.json (a string where rho goes) is named on the page in one line, the field and what
    was found, and the rest of the page is drawn; no verdict made of it."""
    data = _validation(False)
    data["figures"] = {**data["figures"], "rho": "high"}
    tree = _write(tmp_path, "calibrate-health-validate", "report.json", data)
    notes = [n for n in tree.root.all("p", "note") if "was not drawn" in n.text_all()]
    assert len(notes) == 1 and _headline(tree) == ""
    assert not [p for p in tree.root.all("p") if "warning" in p.classes()]
    assert "(report.json: figures.rho: a number or null goes here, not a string ('high'))" in notes[0].text_all()


def test_bench_sinks_page_headline_from_bench_json(tmp_path):
    """The capture's time ratio and memory are bench.json's comparison."""
    data = {"kind": "bench-sinks", "model": "smollm2", "environment": environment_json(), "torch_threads": 2,
            "results": [],
            "comparison": {"length": 4096, "time_ratio": 1.4017, "capture_extra_bytes": 3 * 2**30,
                           "plain_extra_bytes": 2**29}, "machine_load": machine_load_json()}
    tree = _write(tmp_path, "bench-sinks", "bench.json", data)  # as written before report.json (format 1)
    assert _headline(tree) == ("at 4096 tokens the streaming capture takes 1.40x the plain prefill's time and "
                               "3.00 GiB beyond the model (plain: 0.50 GiB)")


def test_bench_sinks_page_of_a_report_in_another_shape_says_why_in_one_line(tmp_path):
    """A hand-edited report.json (a string where the time ratio goes) is named on the page in one line, the field
    and what was found, and the rest of the page is drawn; no headline made of it."""
    data = {"model": "smollm2", "environment": environment_json(), "torch_threads": 2, "results": [],
            "machine_load": machine_load_json(),
            "comparison": {"length": 4096, "time_ratio": "fast", "capture_extra_bytes": 1, "plain_extra_bytes": 1}}
    tree = _write(tmp_path, "bench-sinks", "report.json", data)
    notes = [n for n in tree.root.all("p", "note") if "was not drawn" in n.text_all()]
    assert len(notes) == 1 and _headline(tree) == ""
    assert "(report.json: comparison.time_ratio: a number goes here, not a string ('fast'))" in notes[0].text_all()
