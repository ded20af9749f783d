"""The calibrated context-health measure as packaged data: ``lab/health/chosen.json``, one loader.

``lab calibrate-health --save`` applies the rule of :mod:`lab.health.measures`
(:func:`lab.health.calibration.choose`) and writes the file; :func:`load_chosen`
reads it and :func:`lab.health.graded.graded_health` applies the measure it
names. Layout (one JSON object):

* ``measure``: the chosen candidate, a key of :data:`lab.health.measures.CANDIDATES`;
* ``rule``: the function that chose it;
* ``decided_by``: which step of the rule decided;
* ``model``: the model whose calibration prompts the rule ran on;
* ``chosen_at``: when.

Stdlib only, so the pure measures can import it without importing model code.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

CHOSEN_FILE = "health/chosen.json"  # inside the lab package


def chosen_path() -> Path:
    """Where the packaged choice lives."""
    return Path(str(resources.files("lab").joinpath(CHOSEN_FILE)))


def load_chosen() -> str:
    """The name of the packaged context-health measure.

    Raises:
        ValueError: the file is missing, does not parse, or lacks a non-empty ``measure``.
    """
    path = chosen_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"context-health choice {path} cannot be read: {exc}") from exc
    measure = data.get("measure") if isinstance(data, dict) else None
    if not isinstance(measure, str) or not measure:
        raise ValueError(f"context-health choice {path} needs a non-empty 'measure', got {measure!r}; "
                         "re-run `lab calibrate-health --save`")
    return measure


def write_chosen(measure: str, *, decided_by: str, model: str, chosen_at: str | None) -> Path:
    """Write the packaged choice (what :func:`load_chosen` reads); returns its path.

    Raises:
        ValueError: an empty ``measure``.
    """
    if not isinstance(measure, str) or not measure:
        raise ValueError(f"measure={measure!r} must be a non-empty candidate name")
    path = chosen_path()
    path.write_text(json.dumps({"measure": measure, "rule": "lab.health.calibration.choose", "decided_by": decided_by,
                                "model": model, "chosen_at": chosen_at}, indent=1) + "\n", encoding="utf-8")
    return path
