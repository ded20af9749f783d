"""A run's work directory, one home for every experiment: its settings, one record per unit, resume, shards, lock.

A run that stops (Ctrl-C, a lost machine, a cluster that gave up on a unit) keeps what it finished, and the
same command continues from there. Every experiment keeps it the same way, in a :class:`WorkDir`:

* ``settings.json``: what fixes the run's numbers (:meth:`WorkDir.write_settings`,
  :meth:`WorkDir.read_settings`); a directory found with other settings is refused by its experiment, in its
  own words (:func:`differing_keys` names what differs);
* ``<records>/<work_file_name(unit id)>``: one JSON record per finished unit (:meth:`WorkDir.record_path`),
  written whole or not at all (:meth:`WorkDir.save`, :func:`lab.runs.files.write_json_atomic`);
* resume: every unit's record read back, or None for a unit to do again (:meth:`WorkDir.resume`; the
  experiment's reader says what a good record is);
* shards: the K-th of N round-robin slices of the units (:meth:`WorkDir.mine`, :func:`lab.runs.shards.deal`),
  all scored into the one directory;
* the lock: a second process kept out (:meth:`WorkDir.hold`, :func:`lab.runs.locks.hold`), the shards of one
  run sharing it.

The study (:mod:`lab.study.work`: records in ``outcomes/``) and the intervention (:mod:`lab.intervene.run`:
``records/``) declare theirs; what a record holds and how it is checked stays with them.
"""

from __future__ import annotations

import shutil
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence, TypeVar

from lab.runs import files, locks, shards
from lab.schemas import read_json

SETTINGS_FILE = "settings.json"


class Unit(Protocol):
    """What a run is made of (a study prompt, an intervention triple): anything with an ``id``."""

    @property
    def id(self) -> str: ...


U = TypeVar("U", bound=Unit)
R = TypeVar("R")


@dataclass(frozen=True)
class WorkDir:
    """One run's work directory.

    Attributes:
        path: The directory (it need not exist yet).
        what: The run's kind in messages ("study", "intervention").
        records: The folder of the per-unit records, inside ``path`` ("outcomes", "records").
        shard: ``(K, N)`` when this process runs one shard of the run, None for a whole run.
    """

    path: Path
    what: str
    records: str
    shard: tuple[int, int] | None = None

    @property
    def settings_file(self) -> Path:
        """``<path>/settings.json``."""
        return self.path / SETTINGS_FILE

    def read_settings(self, kind: str) -> Any:
        """``settings.json`` as stored (bounded, :func:`lab.schemas.read_json`; the caller checks its shape).

        Raises:
            lab.schemas.FileSchemaError: it cannot be read (not a regular file, too large) or is not JSON,
                naming it as ``kind``.
        """
        return read_json(self.settings_file, kind)

    def write_settings(self, settings: dict[str, Any]) -> Path:
        """Write ``settings.json`` whole or not at all.

        Raises:
            OSError: it cannot be written (the caller names what for).
        """
        return files.write_json_atomic(self.settings_file, settings)

    def record_path(self, unit_id: str) -> Path:
        """Where the record of the unit ``unit_id`` is kept: ``<path>/<records>/<work_file_name(unit_id)>``."""
        return self.path / self.records / files.work_file_name(unit_id)

    def save(self, unit_id: str, data: Any) -> Path:
        """Write a finished unit's record (JSON) whole or not at all.

        Raises:
            OSError: it cannot be written (the caller names the unit and what is kept).
            TypeError: ``data`` is not JSON-serializable (nothing is written).
        """
        return files.write_json_atomic(self.record_path(unit_id), data)

    def resume(self, units: Iterable[U], read: Callable[[Path, U], R | None]) -> dict[str, R | None]:
        """``{unit id: its record}`` for every unit, None for one to do (again).

        Args:
            units: The units this process runs.
            read: The experiment's reader of one record, given its path and its unit: the record, or None
                when there is none or it cannot be trusted (the reader says so).
        """
        return {u.id: read(self.record_path(u.id), u) for u in units}

    def mine(self, units: Sequence[U]) -> list[U]:
        """This process's units: the shard's round-robin slice (:func:`lab.runs.shards.deal`), else all."""
        return shards.deal(units, self.shard)

    def hold(self) -> AbstractContextManager[None]:
        """Keep other processes out while this one runs here (:func:`lab.runs.locks.hold`).

        Raises:
            lab.runs.locks.WorkDirBusyError: another process holds what this one needs, naming it.
            ValueError: the folder of the locks cannot be written, naming it.
        """
        return locks.hold(self.path, self.shard, self.what)

    def discard(self) -> None:
        """Remove the directory (once the run's report is in place)."""
        shutil.rmtree(self.path, ignore_errors=True)


def differing_keys(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The settings whose values differ between ``a`` and ``b`` (a key one lacks reads as None), sorted."""
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
