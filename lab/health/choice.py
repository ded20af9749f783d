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

The package ships the file and nothing writes into the package: ``--save`` writes
``health/chosen.json`` in the user's calibration folder (``$LAB_CALIBRATION_DIR``, default
``~/.cache/lab/calibrations``), atomically, and the loader reads that file before the
package's own (:func:`chosen_path` says which).

Stdlib only (and :mod:`lab.user_dirs`), so the pure measures can import it without importing model code.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from lab.user_dirs import calibration_dir, write_text_atomic

CHOSEN_FILE = "health/chosen.json"  # inside the lab package, and inside the user's calibration folder


def packaged_path() -> Path:
    """Where the packaged choice lives (read only)."""
    return Path(str(resources.files("lab").joinpath(CHOSEN_FILE)))


def user_path() -> Path:
    """Where ``lab calibrate-health --save`` writes the user's choice."""
    return calibration_dir() / CHOSEN_FILE


def chosen_path() -> Path:
    """The choice the loader reads: the user's, else the packaged one."""
    user = user_path()
    return user if user.is_file() else packaged_path()


def load_chosen() -> str:
    """The name of the chosen context-health measure (the user's choice, else the packaged one).

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
    """Write the user's choice (what :func:`load_chosen` then reads), atomically; returns its path.

    Raises:
        ValueError: an empty ``measure``.
        OSError: the user's calibration folder cannot be written.
    """
    if not isinstance(measure, str) or not measure:
        raise ValueError(f"measure={measure!r} must be a non-empty candidate name")
    return write_text_atomic(user_path(), json.dumps(
        {"measure": measure, "rule": "lab.health.calibration.choose", "decided_by": decided_by, "model": model,
         "chosen_at": chosen_at}, indent=1) + "\n")
