"""Locking a study's work directory against a second process (``flock`` beside the work directories)."""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Protocol


class StudyPlan(Protocol):
    """What the lock reads of a :class:`lab.study.work.StudyPlan` (the lock sits below the plan)."""

    work_dir: Path
    config: Any  # a StudyConfig; only ``config.shard`` is read
    locked: bool


class WorkDirBusyError(ValueError):
    """Another process is running a study in this work directory (see :func:`hold_work_dir`)."""


LOCKS_DIR = ".study-locks"  # beside the work directories, so a lock outlives its directory's removal


def lock_path(work_dir: Path, shard: tuple[int, int] | None = None) -> Path:
    """``<parent>/.study-locks/<dir name>.lock`` (``.shard-K-of-N.lock`` for one shard's own lock)."""
    suffix = f".shard-{shard[0]}-of-{shard[1]}" if shard else ""
    return work_dir.parent / LOCKS_DIR / f"{work_dir.name}{suffix}.lock"


@contextmanager
def hold_work_dir(plan: StudyPlan) -> Iterator[StudyPlan]:
    """Hold the plan's work directory against other processes while a study runs in it.

    An ``flock`` on :func:`lock_path` (``<out>/.study-locks/``): shared for a shard (shards of one study run in
    one directory at once, on purpose; a second copy of the same shard is refused by a
    per-shard lock), exclusive for a whole run, which deletes the directory when its
    report is written. A process that cannot get its lock fails at once, before any
    model loads. After locking, the lock file is checked to be the one at the path (a
    finishing run removes it with its directory), else the lock is taken again.

    Raises:
        WorkDirBusyError: another study holds the directory (naming it, in one line).
        ValueError: the folder of the lock cannot be written (naming it).
    """
    if plan.locked:
        yield plan
        return
    paths = [lock_path(plan.work_dir)] + ([lock_path(plan.work_dir, plan.config.shard)] if plan.config.shard else [])
    modes = [fcntl.LOCK_SH if plan.config.shard else fcntl.LOCK_EX, fcntl.LOCK_EX]
    held: list[tuple[Path, int, int]] = []
    try:
        for path, mode in zip(paths, modes):
            held.append((path, mode, _lock(path, mode, plan)))
        plan.locked = True
        yield plan
    finally:
        plan.locked = False
        for path, mode, fd in reversed(held):
            if mode == fcntl.LOCK_EX:  # the only holder: removing it is safe (a waiter sees the inode change)
                path.unlink(missing_ok=True)
            os.close(fd)
        try:
            paths[0].parent.rmdir()  # only when no other lock is left in it
        except OSError:
            pass


def _lock(path: Path, mode: int, plan: StudyPlan) -> int:
    for _ in range(100):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:  # a finishing run removed the empty locks folder meanwhile
            continue
        except OSError as exc:  # a read-only or refusing folder: bad input, not a crash
            raise ValueError(f"cannot lock the study's work directory {str(plan.work_dir)!r}: {str(path.parent)!r} "
                             f"refuses it ({exc.strerror or exc}); use another --out") from None
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if ".shard-" in path.name:
                who = "shard {}/{} of this study is".format(*plan.config.shard)
            else:
                who = "an unsharded run of this study is" if plan.config.shard else "this study (or a shard of it) is"
            raise WorkDirBusyError(f"{who} already running in {str(plan.work_dir)!r} (it holds {path.name}); "
                                   "wait for it to finish, or use another --out") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the lock file was removed by a run that finished meanwhile: lock the new one
    raise WorkDirBusyError(f"could not lock {str(path)!r}")


def running_shards(work_dir: Path) -> list[str]:
    """``K/N`` of each shard whose per-shard lock is held now (a shard running in ``work_dir``)."""
    import re

    held = []
    for path in sorted((work_dir.parent / LOCKS_DIR).glob(f"{work_dir.name}.shard-*-of-*.lock")):
        m = re.search(r"\.shard-(\d+)-of-(\d+)\.lock$", path.name)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            held.append(f"{m[1]}/{m[2]}" if m else path.name)
        finally:
            os.close(fd)
    return held
