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
package's own (:func:`chosen_path` says which). The file is read through its schema
(:data:`lab.schemas.health.CHOSEN_SCHEMA`: ``measure`` one of the candidates); a file that
fails, the user's or the package's, is refused with one line naming it (the command exits 2),
never skipped for another: every context-health figure of the run reads the measure.

No model code: the measures' names come from :mod:`lab.health.measures` (math only).
"""

from __future__ import annotations

import json
from pathlib import Path

from lab.health.measures import CANDIDATES
from lab.schemas import FileSchemaError
from lab.schemas.health import load_chosen_file
from lab.runs.files import write_text_atomic
from lab.user_dirs import packaged_file, read_first, user_file, way_out

CHOSEN_FILE = "health/chosen.json"  # inside the lab package, and inside the user's calibration folder


def packaged_path() -> Path:
    """Where the packaged choice lives (read only)."""
    return packaged_file(CHOSEN_FILE)


def user_path() -> Path:
    """Where ``lab calibrate-health --save`` writes the user's choice."""
    return user_file(CHOSEN_FILE)


def chosen_path() -> Path:
    """The choice the loader reads: the user's, else the packaged one."""
    return read_first(user_path(), packaged_path())  # a folder or FIFO there is refused by name, never skipped


def load_chosen() -> str:
    """The name of the chosen context-health measure (the user's choice, else the packaged one).

    Raises:
        ValueError: the file is missing or fails :data:`lab.schemas.health.CHOSEN_SCHEMA` (a
            ``measure`` that is no candidate among them), in one line naming it.
    """
    path = chosen_path()
    try:
        return load_chosen_file(path, CANDIDATES)["measure"]
    except FileSchemaError as exc:
        fix = way_out(path, packaged_path(), "choice", "lab calibrate-health --save")
        raise ValueError(f"{exc}; {fix}") from None


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
