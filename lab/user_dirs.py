"""The lab's per-user folders outside the installed package (written through :mod:`lab.runs.files`).

- :func:`calibration_dir`: calibrations a user made (``lab calibrate-sinks``, ``lab
  calibrate-health --save``, ``lab validate-context --save``): ``$LAB_CALIBRATION_DIR``, else
  ``~/.cache/lab/calibrations``. The one resolver of "the user's file, else the packaged one":
  :func:`user_file` and :func:`packaged_file` place the two copies, :func:`read_first` picks the
  one a loader reads and :func:`found_first` says None where neither is there. Its rule: anything
  at the user's path, a folder or a FIFO included, is the user's and refused by name if it is no
  file, never skipped (the sinks' and health calibrations, the length references, the fitted
  context measures); the stored health verdicts (:mod:`lab.health.validation`) read a regular file
  only (``counts=Path.is_file``); :func:`way_out` ends the refusal of a bad one. Nothing ever writes into the
  package. The calibrations refuse a
  ``$LAB_CALIBRATION_DIR`` that is a file, or lies under one, before their minutes of work
  (:func:`check_calibration_dir`), in one line naming the variable, not when they save.
- :func:`tuning_dir`: the draft set-ups ``lab bench-tune`` measured best on this machine
  (:mod:`lab.tuning`): ``$LAB_TUNING_DIR``, else ``~/.cache/lab/tuning``.
- :func:`log_dir`: full tracebacks of errors the lab did not foresee (``lab.cli``):
  ``$LAB_LOG_DIR``, else ``~/.cache/lab/logs``; when that cannot be written,
  ``<tempdir>/lab-logs``.

Stdlib only, and nothing from the rest of the lab (:func:`packaged_file` names the ``lab`` package's folder,
importing none of its modules): the math and data modules may import it.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Callable

CALIBRATION_ENV = "LAB_CALIBRATION_DIR"
LOG_ENV = "LAB_LOG_DIR"
TUNING_ENV = "LAB_TUNING_DIR"


def lab_home() -> Path:
    """``~/.cache/lab``: the lab's per-user folder (the model cache is ``models/`` inside it)."""
    return Path.home() / ".cache" / "lab"


def calibration_dir() -> Path:
    """Where the user's own calibrations go: ``$LAB_CALIBRATION_DIR`` or ``~/.cache/lab/calibrations``.

    The folder may not exist yet; it is created by the first write. A reader finds nothing in
    a folder that cannot exist (the packaged files are read then); a command that will write
    here checks it first (:func:`check_calibration_dir`).
    """
    root = os.environ.get(CALIBRATION_ENV)
    return Path(root).expanduser() if root else lab_home() / "calibrations"


def check_calibration_dir() -> Path:
    """:func:`calibration_dir`, checked before a calibration's minutes of work rather than when it saves.

    Raises:
        ValueError: ``$LAB_CALIBRATION_DIR`` is a file or lies under one (no folder can be made
            there), in one line naming the variable.
    """
    path = calibration_dir()
    blocker = _file_in_the_way(path)
    if blocker is not None:
        where = "is a file" if blocker == path else f"lies under {str(blocker)!r}, a file"
        raise ValueError(f"{CALIBRATION_ENV}={os.environ.get(CALIBRATION_ENV)!r} {where}, not a folder: point it at "
                         f"a folder (or unset it for {lab_home() / 'calibrations'})")
    return path


def packaged_file(relative: str) -> Path:
    """``lab/<relative>``: a file the package ships (read only: nothing writes into the package; it need not exist)."""
    return Path(str(resources.files("lab").joinpath(relative)))


def user_file(relative: str) -> Path:
    """``<calibration_dir()>/<relative>``: the user's own copy of a packaged file (it need not exist)."""
    return calibration_dir() / relative


def read_first(user: Path, packaged: Path, *, counts: Callable[[Path], bool] | None = None) -> Path:
    """``user`` when anything is at its path, else ``packaged`` (which need not exist).

    A folder, a FIFO or a symbolic link to nothing where the user's file goes is the user's file:
    its reader refuses it by name (:func:`lab.schemas.read_json`: "not a regular file"), never
    skips it for the packaged one, which would change the run's numbers without a word.

    Args:
        user, packaged: The user's copy and the package's (:func:`user_file`, :func:`packaged_file`).
        counts: What counts as a copy being there; None: anything at its path (:func:`present`).
            ``Path.is_file`` reads a regular file only, skipping anything else at the user's path.
    """
    return user if (counts or present)(user) else packaged


def found_first(user: Path, packaged: Path, *, counts: Callable[[Path], bool] | None = None) -> Path | None:
    """:func:`read_first`'s choice when a copy is there (by ``counts``), else None (neither: nothing to read)."""
    path = read_first(user, packaged, counts=counts)
    return path if (counts or present)(path) else None


def way_out(path: Path, packaged: Path, what: str, rerun: str) -> str:
    """How to get past a bad file read by :func:`read_first`, ending its one-line refusal: the user's copy is
    deleted (the packaged ``what`` is read then; ``rerun`` writes a new one), the packaged one reinstalled.

    Examples:
        >>> way_out(Path("u/c.json"), Path("p/c.json"), "choice", "lab calibrate-health --save")
        'delete it: the packaged choice is read then, and `lab calibrate-health --save` writes a new one'
    """
    if path == packaged:
        return "the lab's installed files are damaged: reinstall it"
    return f"delete it: the packaged {what} is read then, and `{rerun}` writes a new one"


def present(path: Path) -> bool:
    """Whether anything is at ``path``: a file, a folder, a FIFO, a symbolic link (one to nothing included)."""
    return os.path.lexists(path)


def _file_in_the_way(path: Path) -> Path | None:
    """``path`` or the nearest of its existing ancestors when that is not a folder, else None."""
    for candidate in (path, *path.parents):
        try:
            if candidate.exists():
                return None if candidate.is_dir() else candidate
        except OSError:  # a folder that cannot be searched: the write will name it
            return None
    return None


def tuning_dir() -> Path:
    """Where ``lab bench-tune`` writes its winners: ``$LAB_TUNING_DIR`` or ``~/.cache/lab/tuning`` (may not exist yet)."""
    root = os.environ.get(TUNING_ENV)
    return Path(root).expanduser() if root else lab_home() / "tuning"


def log_dir() -> Path:
    """Where tracebacks go: ``$LAB_LOG_DIR`` or ``~/.cache/lab/logs`` (may not exist yet)."""
    root = os.environ.get(LOG_ENV)
    return Path(root).expanduser() if root else lab_home() / "logs"
