"""Keeping a second process out of a run's work directory: an ``flock`` beside it.

A whole run holds its directory's lock exclusively; each shard holds it shared (the shards of one run
work in one directory at once, on purpose) plus an exclusive lock of its own, so a second copy of the
same shard is refused. Locks live in ``<parent>/.locks/``, beside the work directories, so a lock
outlives its directory's removal by a finishing run; after locking, the lock file is checked to be the
one at the path (a finishing run removes it), else it is taken again. A process that cannot get its
lock fails at once, in one line naming who holds it (the shards running, by K/N, when they keep a
whole run out), before any model loads.

:func:`waiting_lock` is the other kind: a lock that waits its turn instead of failing (the runtime's
build, :mod:`lab.runtime.build`: a second build waits, then finds the first one's install). Every
``flock`` of the lab is taken here.
"""

from __future__ import annotations

import fcntl
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

LOCKS_DIR = ".locks"
_RETRIES = 100  # a lock file removed between open and flock by a finishing run: take the new one


class WorkDirBusyError(ValueError):
    """Another process is running in this work directory (see :func:`hold`)."""


def lock_path(work_dir: Path, shard: tuple[int, int] | None = None) -> Path:
    """``<parent>/.locks/<dir name>.lock`` (``.shard-K-of-N.lock`` for one shard's own lock)."""
    suffix = f".shard-{shard[0]}-of-{shard[1]}" if shard else ""
    return work_dir.parent / LOCKS_DIR / f"{work_dir.name}{suffix}.lock"


@contextmanager
def hold(work_dir: Path, shard: tuple[int, int] | None, what: str) -> Iterator[None]:
    """Hold ``work_dir`` against other processes: shared plus the shard's own lock for a shard, exclusive otherwise.

    Args:
        work_dir: The run's work directory (it need not exist yet).
        shard: ``(K, N)`` for one shard of the run, None for a whole run.
        what: The run's kind in messages ("study", "intervention").

    Raises:
        WorkDirBusyError: another process holds what this one needs (naming the directory and who holds it).
        ValueError: the folder of the locks cannot be written (naming it).
    """
    paths = [lock_path(work_dir)] + ([lock_path(work_dir, shard)] if shard else [])
    modes = [fcntl.LOCK_SH if shard else fcntl.LOCK_EX, fcntl.LOCK_EX]
    held: list[tuple[Path, int, int]] = []
    try:
        for path, mode in zip(paths, modes):
            held.append((path, mode, _lock(path, mode, work_dir, shard, what)))
        yield
    finally:
        for path, mode, fd in reversed(held):
            if mode == fcntl.LOCK_EX:  # the only holder: removing it is safe (a waiter sees the inode change)
                path.unlink(missing_ok=True)
            os.close(fd)
        try:
            paths[0].parent.rmdir()  # only when no other lock is left in it
        except OSError:
            pass


def _lock(path: Path, mode: int, work_dir: Path, shard: tuple[int, int] | None, what: str) -> int:
    for _ in range(_RETRIES):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:  # a finishing run removed the empty locks folder meanwhile
            continue
        except OSError as exc:  # a read-only or refusing folder, a folder where the lock goes: bad input
            raise ValueError(f"cannot lock the {what}'s work directory {str(work_dir)!r}: {str(path)!r} "
                             f"refuses it ({exc.strerror or exc}); use another --out") from None
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise WorkDirBusyError(f"{_holder(path, work_dir, shard, what)} already running in {str(work_dir)!r} "
                                   f"(holding {path.name}); wait for it to finish, or use another --out") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the lock file was removed by a run that finished meanwhile: lock the new one
    raise WorkDirBusyError(f"could not lock {str(path)!r}")


def _holder(path: Path, work_dir: Path, shard: tuple[int, int] | None, what: str) -> str:
    """Who holds the lock this process could not get, as the subject of "... already running"."""
    if ".shard-" in path.name and shard:
        return f"shard {shard[0]}/{shard[1]} of this {what} is"
    if shard:
        return f"an unsharded run of this {what} is"
    shards = running_shards(work_dir)  # a whole run is kept out by its own shards as much as by another run
    if shards:
        many = len(shards) > 1
        return f"shard{'s' if many else ''} {', '.join(shards)} of this {what} {'are' if many else 'is'}"
    return f"another whole run of this {what} is"


def running_shards(work_dir: Path) -> list[str]:
    """``K/N`` of each shard whose own lock is held now (a shard running in ``work_dir``)."""
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


@contextmanager
def waiting_lock(path: Path) -> Iterator[None]:
    """Hold ``path`` (created, or truncated, with the umask's permissions) exclusively, waiting for any
    other holder to let go first; let go when the block ends.

    Raises:
        OSError: ``path`` cannot be opened for writing.
    """
    with Path(path).open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
