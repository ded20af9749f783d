"""The sink detector's calibration files: a profile's ``<profile>.json`` and the cross-profile ``choice.json``.

Both are written by ``lab calibrate-sinks`` (:mod:`lab.sinks.profiles`), shipped under
``lab/sinks/calibrations/`` and read back from the user's folder first:

* A **sink calibration** (:data:`SCHEMA`): the ``profile`` it is for, a threshold per candidate
  statistic (``thresholds``: a number, or null where the sweep found none), each candidate's
  feasible thresholds (``candidates``), the ``statistic`` the file is read for and the
  ``migrated`` record of its rewrites. ``profile`` and ``thresholds`` are what a hand-made
  file (``lab sinks --calibration FILE``) needs.
* A **sink detector choice** (:data:`CHOICE_SCHEMA`): the ``statistic`` the cross-profile rule
  chose, its ``default_threshold`` for a model without a file and the ``profiles`` it read.

Every threshold lies in its statistic's range (:func:`threshold_problem`: a sink rate in
(0, 1), a z above 0), the one rule :func:`lab.sinks.profiles.check_threshold` applies to
``--threshold`` too. A file that fails is refused (the command exits 2 naming it): a
threshold read silently from elsewhere would change what counts as a sink.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Collection

from lab import schemas
from lab.schemas import FileSchemaError

KIND = "sink calibration"
CHOICE_KIND = "sink detector choice"
# The magnitude a threshold may have: a sink rate lies in (0, 1), and a log-MAD z is at most
# -ln(1e-30) = 69 (the detector's log floor) over a MAD of at least 0.05, under 1,400: a larger
# number in a file is no threshold the detector could use (and a 400-digit one overflows a float).
MAX_THRESHOLD = 1e6

_NAME = {"type": "string", "minLength": 1, "pattern": r"^[^\x00-\x1f\x7f]*$"}  # printed in a line: no newlines
_STATISTIC = {"type": "string", "minLength": 1}  # one of the detector's statistics: checked by the loaders
_NUMBER = {"type": "number", "finite": MAX_THRESHOLD}
_WHEN = {"type": ["string", "null"]}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["profile", "thresholds"],
    "properties": {
        "profile": _NAME,
        "statistic": _STATISTIC,
        "thresholds": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": _STATISTIC,
            "additionalProperties": {"type": ["number", "null"], "finite": MAX_THRESHOLD},
        },
        "candidates": {
            "type": "object",
            "propertyNames": _STATISTIC,
            "additionalProperties": {
                "type": "object",
                "properties": {"feasible_thresholds": {"type": "array", "items": _NUMBER}},
            },
        },
        "migrated": {"type": "array", "items": {"type": "object"}},
    },
}

CHOICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["statistic", "default_threshold"],
    "properties": {
        "rule": {"type": "string"},
        "statistic": _STATISTIC,
        "default_threshold": _NUMBER,
        "profiles": {"type": "array", "items": _NAME},
        "chosen_at": _WHEN,
    },
}


def threshold_problem(statistic: str, threshold: Any) -> str | None:
    """What is wrong with ``threshold`` on ``statistic``'s scale, or None when it lies in range.

    A sink rate must lie in (0, 1): 0 or below flags every position any query attends to, 1 or
    above none. A z must be above 0: at or below 0 it flags at least half of the positions.
    Neither finds sinks.
    """
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        return "must be a finite number"
    if statistic == "sink_rate" and not 0 < threshold < 1:
        return "is a sink rate (a share of queries): it must lie in (0, 1)"
    if statistic != "sink_rate" and threshold <= 0:
        return f"is a z ({statistic}): it must be above 0"
    return None


def _unknown(names: Collection[str], statistics: Collection[str]) -> str | None:
    return next((n for n in names if n not in statistics), None)


def check(data: dict, path: str | Path, statistics: Collection[str]) -> dict:
    """What :data:`SCHEMA` cannot state: every statistic one of ``statistics``
    (:data:`lab.sinks.candidates.STATISTICS`, passed in so this package imports no part it reads
    files for), and every threshold, and every feasible one, within its statistic's range.

    Raises:
        FileSchemaError: naming the statistic, or the threshold and its value.
    """
    names = [*data["thresholds"], *(data.get("candidates") or {}), *filter(None, [data.get("statistic")])]
    if (bad := _unknown(names, statistics)) is not None:
        raise FileSchemaError(path, KIND, f"{bad!r} is not a statistic of the detector ({', '.join(statistics)})")
    for statistic, value in data["thresholds"].items():
        problem = None if value is None else threshold_problem(statistic, value)
        if problem:
            raise FileSchemaError(path, KIND, f"thresholds/{statistic}={value!r} {problem}")
    for statistic, record in (data.get("candidates") or {}).items():
        for value in record.get("feasible_thresholds") or ():
            if problem := threshold_problem(statistic, value):
                raise FileSchemaError(path, KIND, f"candidates/{statistic}/feasible_thresholds: {value!r} {problem}")
    return data


def check_choice(data: dict, path: str | Path, statistics: Collection[str]) -> dict:
    """What :data:`CHOICE_SCHEMA` cannot state: the statistic one of ``statistics``, and the default
    threshold within its range.

    Raises:
        FileSchemaError: naming the statistic, or ``default_threshold`` and its value.
    """
    if (bad := _unknown([data["statistic"]], statistics)) is not None:
        raise FileSchemaError(path, CHOICE_KIND, f"{bad!r} is not a statistic of the detector ({', '.join(statistics)})")
    if problem := threshold_problem(data["statistic"], data["default_threshold"]):
        raise FileSchemaError(path, CHOICE_KIND, f"default_threshold={data['default_threshold']!r} {problem}")
    return data


def load_calibration_file(path: str | Path, statistics: Collection[str]) -> dict:
    """A sink calibration, validated by :data:`SCHEMA` and :func:`check`.

    Raises:
        FileSchemaError: unreadable, not JSON, or invalid (one line naming the file).
    """
    return check(schemas.load(path, SCHEMA, KIND), path, statistics)


def load_choice_file(path: str | Path, statistics: Collection[str]) -> dict:
    """A sink detector choice, validated by :data:`CHOICE_SCHEMA` and :func:`check_choice`.

    Raises:
        FileSchemaError: unreadable, not JSON, or invalid (one line naming the file).
    """
    return check_choice(schemas.load(path, CHOICE_SCHEMA, CHOICE_KIND), path, statistics)
