"""Per-model sink calibrations: the threshold a model's own calibration chose.

A calibrated constant belongs to the model it was calibrated on. ``lab
calibrate-sinks --model PROFILE`` writes ``lab/sinks/calibrations/<profile>.json``
(shipped with the package); every command that flags sinks (``lab sinks``, the
study, ``lab stream``'s ``detected`` policy, ``lab calibrate-health``) reads the
threshold from there through :func:`resolve_threshold`, keyed by the profile the
model was loaded as (``model.lab_source["profile"]``). A model without a file (a hub
id, a local path, a profile not yet calibrated) gets
:data:`lab.sinks.prefill.DEFAULT_THRESHOLD` and a warning that the threshold is not
calibrated for it; the analysis records which case applied.

A file holds a threshold for every candidate statistic (``thresholds``), all swept on
the same prefills; the one read is :data:`lab.sinks.prefill.STATISTIC`'s, and a file without
it raises, since another candidate's threshold is on another scale. Its ``statistic``
field records what the detector used when the file was written (three of the four
shipped files were written while it was still ``gm_content``; their ``sink_rate``
thresholds come from the same sweep).
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

CALIBRATION_DIR = "sinks/calibrations"  # inside the lab package
SOURCE_CALIBRATED = "calibrated"
SOURCE_DEFAULT = "default (not calibrated for this model)"
SOURCE_GIVEN = "given"


@dataclass(frozen=True)
class SinkCalibration:
    """One profile's calibrated sink threshold.

    Attributes:
        profile: The profile name (``lab.models.loading.PROFILES``).
        statistic: The statistic the threshold applies to.
        threshold: The chosen threshold (middle of the feasible range).
        path: Where it was read from.
    """

    profile: str
    statistic: str
    threshold: float
    path: str


def calibration_path(profile: str) -> Path:
    """Where the packaged calibration of ``profile`` lives (it may not exist)."""
    return Path(str(resources.files("lab").joinpath(CALIBRATION_DIR))) / f"{profile}.json"


def load_calibration(profile: str | None) -> SinkCalibration | None:
    """The packaged calibration of ``profile``, or ``None`` when there is none.

    Raises:
        ValueError: the file exists but does not parse, lacks a finite ``threshold``
            for :data:`lab.sinks.prefill.STATISTIC`, or was calibrated for another profile.
    """
    from lab.sinks.prefill import STATISTIC

    if not profile:
        return None
    path = calibration_path(profile)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"sink calibration {path} cannot be read: {exc}") from exc
    chosen = (data.get("thresholds") or {}).get(STATISTIC) if isinstance(data, dict) else None
    if data.get("profile") != profile or not isinstance(chosen, (int, float)) or not math.isfinite(chosen):
        raise ValueError(f"sink calibration {path} has no finite threshold for statistic {STATISTIC!r} "
                         f"of profile {profile!r}; re-run `lab calibrate-sinks --model {profile}`")
    return SinkCalibration(profile=profile, statistic=STATISTIC, threshold=float(chosen), path=str(path))


def resolve_threshold(model: Any, threshold: float | None) -> tuple[float, str | None, str]:
    """``(threshold, calibrated_for, source)`` for an analysis of ``model``.

    A given ``threshold`` wins (``source = "given"``); else the model's profile
    calibration; else :data:`lab.sinks.prefill.DEFAULT_THRESHOLD`, with a ``UserWarning``
    naming the model.
    """
    from lab.sinks.prefill import DEFAULT_THRESHOLD, STATISTIC, STATISTIC_LABEL

    if threshold is not None:
        return float(threshold), None, SOURCE_GIVEN
    info = getattr(model, "lab_source", None) or {}
    cal = load_calibration(info.get("profile"))
    if cal is not None:
        return cal.threshold, cal.profile, SOURCE_CALIBRATED
    warnings.warn(f"sink threshold not calibrated for model {info.get('model', type(model).__name__)!r}: "
                  f"using the default {STATISTIC_LABEL[STATISTIC]} > {DEFAULT_THRESHOLD:g} (run `lab calibrate-sinks` on a profile)",
                  UserWarning, stacklevel=3)
    return float(DEFAULT_THRESHOLD), None, SOURCE_DEFAULT
