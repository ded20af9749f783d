"""The sink detector's calibrations as packaged data: one loader, below the prefill analysis.

A calibrated constant belongs to the data it was calibrated on, so none is copied
into code. Two kinds of file, shipped under ``lab/sinks/calibrations/`` and written by
``lab calibrate-sinks`` into the user's folder (see the end of this docstring):

* ``<profile>.json``, one per calibrated profile (``lab calibrate-sinks --model
  PROFILE``): a threshold for every candidate statistic (``thresholds``, all swept
  on the same prefills), each candidate's feasible thresholds and counts
  (``candidates``), and ``statistic``, the detector statistic the file is read for.
  A file whose ``statistic`` was rewritten without re-running the sweep records
  why in ``migrated`` (:func:`migrate_statistic`).
* ``choice.json``, across profiles: the statistic the rule of
  :func:`lab.sinks.calibration.choose_statistic` chose over the ``profiles``' own
  recorded feasible thresholds, and ``default_threshold``, the threshold on that
  statistic's scale for a model without a file. Read by :func:`load_choice`.

Every command that flags sinks (``lab sinks``, the study, ``lab stream``'s
``detected`` policy, ``lab calibrate-health``) gets its threshold through
:func:`resolve_threshold`, keyed by the profile the model was loaded as
(``lab.models.source.model_source(model).profile``): the profile file's threshold for the chosen
statistic; for a model without a file (a hub id, a local path, a profile not yet
calibrated) the default, with a warning that the threshold is not calibrated for
it. A profile file without a finite threshold for the chosen statistic raises,
since another candidate's threshold is on another scale.

The candidate statistics themselves (:data:`lab.sinks.candidates.STATISTICS`) are
the rule's definitions and stay code.

Where the files are read from and written to: the package ships them, and nothing
writes into the package. ``lab calibrate-sinks`` writes its files, atomically, into the
user's folder :func:`user_dir` (``$LAB_CALIBRATION_DIR/sinks``, default
``~/.cache/lab/calibrations/sinks``). The loaders read a file there before the package's
own (:func:`calibration_path`, :func:`choice_path`), and ``--calibration FILE`` (``lab
sinks``) overrides both for one run; the file used is named in the report and in a log
line. A threshold must lie in the statistic's range (:func:`check_threshold`): a sink
rate in (0, 1), a z above 0.

Every file is read through its schema (:mod:`lab.schemas.calibration`: shape, and every
threshold in its statistic's range); a file that fails, the user's or the package's, is
refused with one line naming it (the command exits 2), never skipped for another file.
"""

from __future__ import annotations

import functools
import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection, Sequence

from lab.models.source import model_source
from lab.schemas import FileSchemaError
from lab.schemas.calibration import load_calibration_file, load_choice_file, threshold_problem
from lab.sinks.candidates import STATISTIC_LABEL, STATISTICS
from lab.user_dirs import packaged_file, present, read_first, user_file, way_out
from lab.runs.files import write_text_atomic

logger = logging.getLogger(__name__)

CALIBRATION_DIR = "sinks/calibrations"  # inside the lab package
USER_SUBDIR = "sinks"  # inside the user's calibration folder (lab.user_dirs.calibration_dir)
CHOICE_FILE = "choice.json"  # the cross-profile choice, beside the profile files
SOURCE_CALIBRATED = "calibrated"
SOURCE_DEFAULT = "default (not calibrated for this model)"
SOURCE_GIVEN = "given"


@dataclass(frozen=True)
class SinkCalibration:
    """One profile's calibrated sink threshold.

    Attributes:
        profile: The profile name (``lab.models.profiles.PROFILES``).
        statistic: The statistic the threshold applies to (the packaged choice).
        threshold: The chosen threshold (middle of the feasible range).
        path: Where it was read from.
    """

    profile: str
    statistic: str
    threshold: float
    path: str


def check_threshold(statistic: str, threshold: float, where: str) -> float:
    """``threshold`` if it lies in ``statistic``'s range: a sink rate in (0, 1), a z above 0.

    A rate of 0 or below flags every position any query attends to, a rate of 1 or above
    none; a z at or below 0 flags at least half of them: neither finds sinks.

    Raises:
        ValueError: a non-finite or out-of-range value, naming ``where`` (a flag or a file) and the value.
    """
    if problem := threshold_problem(statistic, threshold):
        raise ValueError(f"{where}={threshold!r} {problem}")
    return float(threshold)


@dataclass(frozen=True)
class DetectorChoice:
    """The detector's statistic and the default threshold, as the cross-profile rule chose them.

    Attributes:
        statistic: One of :data:`lab.sinks.candidates.STATISTICS`.
        default_threshold: The threshold for a model without a calibration file, on
            ``statistic``'s scale (a rate in ``[0, 1]`` for ``sink_rate``, else a z).
        profiles: The profiles whose calibration files the rule read.
        path: Where it was read from.
    """

    statistic: str
    default_threshold: float
    profiles: tuple[str, ...]
    path: str

    @property
    def label(self) -> str:
        """How a threshold on the statistic reads: ``"sink rate"`` or ``"z"``."""
        return STATISTIC_LABEL[self.statistic]


def calibration_dir() -> Path:
    """The packaged calibrations folder (read only: nothing writes here)."""
    return packaged_file(CALIBRATION_DIR)


def user_dir() -> Path:
    """The user's sink calibrations, written by ``lab calibrate-sinks`` (``$LAB_CALIBRATION_DIR/sinks``)."""
    return user_file(USER_SUBDIR)


def _read_first(name: str) -> Path:
    return read_first(user_dir() / name, calibration_dir() / name)


def calibration_path(profile: str) -> Path:
    """The calibration file of ``profile`` the loader reads: the user's, else the packaged one (it may not exist)."""
    return _read_first(f"{profile}.json")


def choice_path() -> Path:
    """The cross-profile choice the loader reads: the user's, else the packaged one."""
    return _read_first(CHOICE_FILE)


def is_packaged(path: str | Path) -> bool:
    """Whether ``path`` is one of the package's own files (not a user's or a given one)."""
    return Path(path).parent == calibration_dir()


def _read(load: Callable[[Path, Collection[str]], dict], path: Path, fix: str) -> dict:
    """``load(path, STATISTICS)`` (a loader of :mod:`lab.schemas.calibration`), or one line naming the file and
    the way out.

    Raises:
        ValueError: the file fails its schema; the message ends with ``fix``.
    """
    try:
        return load(path, STATISTICS)
    except FileSchemaError as exc:
        raise ValueError(f"{exc}; {fix}") from None


def _fix(path: Path, rerun: str) -> str:
    """How to get past a bad file: a user's is deleted (every command reads the packaged one then, the
    calibration that remakes it included), a packaged one reinstalled."""
    return way_out(path, calibration_dir() / path.name, "file", rerun)


def load_choice() -> DetectorChoice:
    """The packaged choice of the detector's statistic and default threshold (``choice.json``).

    Raises:
        ValueError: the file is missing or fails :data:`lab.schemas.calibration.CHOICE_SCHEMA` (a
            statistic outside :data:`lab.sinks.candidates.STATISTICS`, a ``default_threshold``
            outside its range), in one line naming the file.
    """
    path = choice_path()
    data = _read(load_choice_file, path, _fix(path, "lab calibrate-sinks"))
    return DetectorChoice(statistic=data["statistic"], default_threshold=float(data["default_threshold"]),
                          profiles=tuple(data.get("profiles") or ()), path=str(path))


def load_calibration(profile: str | None, path: str | Path | None = None, *,
                     statistic: str | None = None) -> SinkCalibration | None:
    """The calibration of ``profile`` for the chosen statistic, or ``None`` when there is none.

    Args:
        profile: The profile name; its file is the user's, else the packaged one
            (:func:`calibration_path`).
        path: A calibration file to read instead (``--calibration FILE``); it may have been
            made for another profile (its own ``profile`` is returned).
        statistic: Read the threshold the same sweep gave another candidate of
            :data:`lab.sinks.candidates.STATISTICS` (a control on another scale); ``None``
            (default): the chosen statistic (:func:`load_choice`).

    Raises:
        ValueError: the file exists but fails :data:`lab.schemas.calibration.SCHEMA` (any
            threshold out of its range among them), lacks a threshold for the chosen statistic
            (:func:`load_choice`), or (without ``path``) was calibrated for another profile; a
            given ``path`` that is not a file; the choice file's own errors. One line naming the file.
    """
    given = path is not None
    if given:
        path = Path(path).expanduser()
        if not path.is_file():
            raise ValueError(f"--calibration={str(path)!r} is not a file")
    elif not profile:
        return None
    else:
        path = calibration_path(profile)
        if not present(path):  # a folder or FIFO in the user's place is read, and refused by name
            return None
    if statistic is not None and statistic not in STATISTICS:
        raise ValueError(f"statistic={statistic!r} is not one of {', '.join(STATISTICS)}")
    statistic = load_choice().statistic if statistic is None else statistic
    fix = ("fix it or give another --calibration" if given else
           _fix(path, f"lab calibrate-sinks --model {profile}"))
    data = _read(load_calibration_file, path, fix)
    chosen, named = data["thresholds"].get(statistic), data["profile"]
    if (not given and named != profile) or chosen is None:
        raise ValueError(f"sink calibration {path} has no threshold for statistic {statistic!r} "
                         f"of profile {profile or named!r}; {fix}")
    return SinkCalibration(profile=named, statistic=statistic, threshold=float(chosen), path=str(path))


def resolve_threshold(model: Any, threshold: float | None,
                      calibration: str | Path | None = None) -> tuple[float, str | None, str, str | None]:
    """``(threshold, calibrated_for, source, path)`` for an analysis of ``model``.

    A given ``threshold`` wins (``source = "given"``); else ``calibration`` (a file given
    with ``--calibration``); else the model's profile calibration (the user's file, else
    the packaged one); else the default (:func:`load_choice`), with a ``UserWarning``
    naming the model. ``path`` is the file the threshold came from (None: given); a file
    other than the package's own is announced in a log line.

    Raises:
        ValueError: as :func:`load_calibration` and :func:`load_choice`.
    """
    if threshold is not None:
        return float(threshold), None, SOURCE_GIVEN, None
    info = source.as_dict() if (source := model_source(model, default=None)) is not None else {}
    cal = load_calibration(info.get("profile"), calibration)
    if cal is not None:
        _announce(f"sink threshold {cal.threshold:g} (calibrated for {cal.profile}) from {cal.path}", cal.path)
        return cal.threshold, cal.profile, SOURCE_CALIBRATED, cal.path
    choice = load_choice()
    warnings.warn(f"sink threshold not calibrated for model {info.get('model', type(model).__name__)!r}: "
                  f"using the default {choice.label} > {choice.default_threshold:g} "
                  "(run `lab calibrate-sinks` on a profile)", UserWarning, stacklevel=3)
    _announce(f"sink detector default from {choice.path}", choice.path)
    return choice.default_threshold, None, SOURCE_DEFAULT, choice.path


@functools.lru_cache(maxsize=64)
def _announce(message: str, path: str) -> None:
    """A log line naming the file used: INFO for a user's or given file, DEBUG for the package's own.

    Once per message and process (the cache): a study resolves the threshold for every prompt.
    """
    logger.log(logging.DEBUG if is_packaged(path) else logging.INFO, message)


def recorded_feasible(profiles: Sequence[str]) -> dict[str, dict[str, list[float]]]:
    """``{profile: {statistic: feasible thresholds}}`` as recorded in each profile file (:func:`calibration_path`).

    Profiles without a file are left out; this is the input of
    :func:`lab.sinks.calibration.choose_statistic`.

    Raises:
        ValueError: a file fails :data:`lab.schemas.calibration.SCHEMA` or lacks ``candidates``
            (a hand-made file), in one line naming it.
    """
    out = {}
    for name in profiles:
        path = calibration_path(name)
        if not present(path):
            continue
        fix = _fix(path, f"lab calibrate-sinks --model {name}")
        data = _read(load_calibration_file, path, fix)
        if "candidates" not in data:
            raise ValueError(f"sink calibration {path} has no 'candidates' (a hand-made file?); {fix}")
        out[name] = {k: list(v.get("feasible_thresholds") or []) for k, v in data["candidates"].items()}
    return out


def _write_json(path: Path, data: dict) -> None:
    write_text_atomic(path, json.dumps(data, indent=1, allow_nan=False) + "\n")


def write_calibration(profile: str, data: dict) -> Path:
    """Write ``profile``'s calibration into the user's folder, atomically; returns its path.

    Raises:
        ValueError: ``data`` names another profile.
        OSError: the folder cannot be written.
    """
    if data.get("profile") != profile:
        raise ValueError(f"data['profile']={data.get('profile')!r} is not profile={profile!r}")
    path = user_dir() / f"{profile}.json"
    _write_json(path, data)
    return path


def write_choice(statistic: str, default_threshold: float, profiles: Sequence[str], *, chosen_at: str | None) -> Path:
    """Write ``choice.json`` (what :func:`load_choice` reads) into the user's folder, atomically; returns its path.

    Raises:
        ValueError: ``statistic`` outside :data:`lab.sinks.candidates.STATISTICS` or a
            ``default_threshold`` outside its range (:func:`check_threshold`).
        OSError: the folder cannot be written.
    """
    if statistic not in STATISTICS:
        raise ValueError(f"statistic={statistic!r} is not one of {', '.join(STATISTICS)}")
    check_threshold(statistic, default_threshold, "default_threshold")
    path = user_dir() / CHOICE_FILE
    _write_json(path, {"rule": "lab.sinks.calibration.choose_statistic", "statistic": statistic,
                       "default_threshold": float(default_threshold), "profiles": sorted(profiles),
                       "chosen_at": chosen_at})
    return path


def migrate_statistic(profile: str, statistic: str, *, reason: str, at: str) -> bool:
    """Rewrite the ``statistic`` field of ``profile``'s file without re-running its sweep.

    The file read is :func:`calibration_path`'s (the user's, else the packaged one); the
    rewritten file goes into the user's folder, atomically.

    For when the cross-profile rule chose another statistic than the one a file was
    written for: its ``thresholds`` hold every candidate's threshold from the same
    sweep, so only the field naming the detector's statistic changes. The change is
    recorded in the file's ``migrated`` list (``{"field", "from", "to", "reason", "at"}``).

    Returns:
        Whether the file changed (``False`` when it already names ``statistic``).

    Raises:
        ValueError: no file for ``profile``, the file fails its schema, or it has no threshold for ``statistic``.
    """
    path = calibration_path(profile)
    if not present(path):
        raise ValueError(f"profile={profile!r} has no sink calibration ({path})")
    data = _read(load_calibration_file, path, _fix(path, f"lab calibrate-sinks --model {profile}"))
    if data["thresholds"].get(statistic) is None:
        raise ValueError(f"sink calibration {path} has no finite threshold for statistic {statistic!r}: "
                         f"re-run `lab calibrate-sinks --model {profile}` instead of migrating it")
    if data.get("statistic") == statistic:
        return False
    data.setdefault("migrated", []).append({"field": "statistic", "from": data.get("statistic"), "to": statistic,
                                            "reason": reason, "at": at})
    data["statistic"] = statistic
    _write_json(user_dir() / path.name, data)
    return True
