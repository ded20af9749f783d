"""Every file the lab reads, read through one bounded reader: a FIFO or an endless device is refused, never read.

A file a user names (``--context-file``, a prompt set, ``--pairs``) or the lab reads back (a tuning file,
a calibration, a study's ``settings.json``, a report's files for its page) may be anything a path can
name: a FIFO, whose ``open`` waits for a writer and whose read never ends; ``/dev/zero`` or
``/dev/urandom``, which never end; a folder; a file of gigabytes. :func:`read_bounded` opens without
blocking (``O_NONBLOCK``), refuses what is not a regular file at once, refuses a file larger than the
caller's bound and never reads more than the bound and one byte, so a file that grows while it is read
is refused too. :func:`read_text` adds UTF-8 decoding and one line naming the file as the user gave it.

Each file kind's bound is a named constant with its reason, here when several readers share it, beside
its reader otherwise.

Every file the lab writes whole, written through one atomic writer: :func:`atomic_file` (and
:func:`write_bytes_atomic`, :func:`write_text_atomic` on it) writes a temporary file beside the target,
flushes it to disk and renames it over the target, so a reader sees the old file or the new one, never a
half-written one. Every folder the lab builds whole (a report, a model cache, a build's install) is
filled in a hidden staging folder (:func:`make_staging`) and renamed into place (:func:`publish`); the
staging folders a killed process left are removed by :func:`sweep_staging`.

Stdlib only and importing no part of the lab: the commands, the schemas, the study, the models, the
runtime's build and the pages all read and write through it.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

MB = 2**20
# A context, a prompt or the stream's text: 8 MB is far more than any context window (the lab's longest,
# 131,072 tokens, is well under 1 MB of text), and small enough to hold in memory at once.
MAX_TEXT_BYTES = 8 * MB
# A prompt set or labelled pairs (JSON Lines): the largest packaged set is under 1 MB; 64 MB holds
# a hundred thousand prompts and more, far more than a run can prefill.
MAX_PROMPT_SET_BYTES = 64 * MB

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


class FileRefused(ValueError):
    """A file that is not read: missing, not a regular file, larger than its bound, or unreadable.

    Attributes:
        path: The file.
        problem: Why, in words that match the case (``"no such file"``, ``"not a regular file (a FIFO)"``,
            ``"larger than 8 MB"``).
    """

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path, self.problem = Path(path), problem
        super().__init__(f"{self.path}: {problem}")


def size_text(n_bytes: int) -> str:
    """A bound in words: ``8 MB``, ``64 kB``, ``100 bytes``.

    Examples:
        >>> size_text(8 * 2**20), size_text(2**16), size_text(100)
        ('8 MB', '64 kB', '100 bytes')
    """
    if n_bytes >= MB and n_bytes % MB == 0:
        return f"{n_bytes // MB} MB"
    if n_bytes >= 1024 and n_bytes % 1024 == 0:
        return f"{n_bytes // 1024} kB"
    return f"{n_bytes:,} bytes"


def _kind_problem(mode: int) -> str | None:
    """None for a regular file, else what the file is instead."""
    if stat.S_ISREG(mode):
        return None
    kind = next((what for test, what in _KINDS if test(mode)), "an unknown kind of file")
    return f"not a regular file ({kind})"


def _open_problem(path: Path, exc: OSError, follow_links: bool) -> str:
    """Why ``path`` could not be opened, in words that match the case."""
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return "a symbolic link to nothing, not a regular file" if path.is_symlink() else "no such file"
    if exc.errno == errno.ELOOP and not follow_links:
        return "not a regular file (a symbolic link)"
    try:  # a socket cannot be opened at all (ENXIO): say what it is
        problem = _kind_problem(os.stat(path, follow_symlinks=follow_links).st_mode)
    except OSError:
        problem = None
    return problem or f"cannot be read ({exc.strerror or exc})"


def read_bounded(path: str | Path, limit: int, *, follow_links: bool = True, head: bool = False) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    The kind is checked before the open (a device is not even opened) and again on the open file
    (``fstat``, in case the path was swapped between); the open never blocks (``O_NONBLOCK``: a FIFO
    opens at once and is then refused); at most ``limit + 1`` bytes are read, so a file that grew past
    its stated size is refused without being read to its end.

    Args:
        path: The file.
        limit: Most bytes accepted (> 0); the caller's named bound for this kind of file.
        follow_links: False refuses a symbolic link itself (``O_NOFOLLOW``: a report's page shows the
            report's own files only).
        head: True returns the first ``limit`` bytes of a longer file instead of refusing it (a page's
            head, where its metadata is).

    Returns:
        The file's bytes.

    Raises:
        ValueError: ``limit`` is not a positive integer.
        FileRefused: no such file, not a regular file (a directory, a FIFO, a device, a socket; a
            symbolic link where ``follow_links`` is False), larger than ``limit`` (unless ``head``), or
            unreadable.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit={limit!r} must be a positive integer")
    path = Path(path)
    try:
        problem = _kind_problem(os.stat(path, follow_symlinks=follow_links).st_mode)
    except OSError as exc:
        raise FileRefused(path, _open_problem(path, exc, follow_links)) from None
    if problem is not None:
        raise FileRefused(path, problem)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise FileRefused(path, _open_problem(path, exc, follow_links)) from None
    try:
        info = os.fstat(fd)
        problem = _kind_problem(info.st_mode)
        if problem is None and info.st_size > limit and not head:
            problem = f"larger than {size_text(limit)}"
        if problem is not None:
            raise FileRefused(path, problem)
        chunks, n_read = [], 0
        most = limit if head else limit + 1  # one byte past the bound tells a file that grew
        while n_read < most:
            chunk = os.read(fd, most - n_read)
            if not chunk:
                break
            chunks.append(chunk)
            n_read += len(chunk)
    except OSError as exc:
        raise FileRefused(path, f"cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if n_read > limit:  # it grew while it was read
        raise FileRefused(path, f"larger than {size_text(limit)}")
    return b"".join(chunks)


def read_text(path: str | Path, limit: int, what: str) -> str:
    """The UTF-8 text of ``path`` (:func:`read_bounded`); ``what`` is how the user named it (``--pairs x.jsonl``).
    A leading byte-order mark (what some editors on Windows write first) is not part of the text and is dropped.

    Raises:
        ValueError: one line ``"<what>: <problem>"`` (the problem as :class:`FileRefused` says it), or
            ``"<what>:<line>: not valid UTF-8 (...)"`` naming the line and the byte of the first bad byte.
    """
    try:
        data = read_bounded(path, limit)
    except FileRefused as exc:
        raise ValueError(f"{what}: {exc.problem}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ValueError(f"{what}:{line}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None


# --- writing: a file whole or not at all, a folder renamed into place --------------------------------------------


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_file(path: str | Path, *, suffix: str = ".tmp") -> Iterator[tuple[BinaryIO, Path]]:
    """Write ``path`` whole or not at all: yields ``(file, temporary path)`` to write (binary), then
    flushes the file to disk and renames it over ``path`` in one ``os.replace``.

    The temporary file ``.<name>.XXXXXXXX<suffix>`` is made beside ``path`` (one file system, so the
    rename is atomic), in ``path``'s folder, created if missing; the finished file gets the permissions
    the umask gives a new file (``mkstemp`` makes it 0600). The block may read the temporary file back
    (a check of what was written) and raise to refuse it.

    Raises:
        OSError: the folder cannot be created or written (the caller names what it was writing).
        Whatever the block raises, interrupts included: the old file is left as it was and the
        temporary file is removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh, tmp
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)  # atomic on one file system
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` whole or not at all (:func:`atomic_file`), creating its folder.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OSError: as :func:`atomic_file`.
    """
    with atomic_file(path) as (fh, _):
        fh.write(data)
    return Path(path)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all, creating its folder (:func:`atomic_file`).

    A failure leaves the old file as it was and no temporary file behind; the new file gets the
    permissions the umask gives a new file.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OSError: the folder cannot be created or written (the caller names what it was writing).
        UnicodeEncodeError: ``text`` holds a lone surrogate (nothing is written).
    """
    with atomic_file(path) as (fh, _):
        fh.write(text.encode("utf-8"))
    return Path(path)


_STAGING_TRIES = 100  # random 8-hex-digit names before giving up (a clash needs 2**32 staging folders)


def make_staging(parent: str | Path, name: str, *, prefix: str | None = None, private: bool = False) -> Path:
    """A new, empty, hidden staging folder in ``parent`` for the folder ``name``, to fill and :func:`publish`.

    Args:
        parent: Where the finished folder goes (the staging folder is beside it: one file system).
        name: The finished folder's name.
        prefix: The staging folder's name before its random part; default ``.<name>.partial-`` (what
            :func:`sweep_staging` finds by ``.*.partial-*``).
        private: False: made with ``os.mkdir``, so the umask applies (e.g. 0o755: a report is a folder
            the user shares like any other); True: made by ``tempfile.mkdtemp`` (0o700).

    Returns:
        ``<parent>/<prefix><random>``.

    Raises:
        OSError: ``parent`` refuses it (missing, read-only, a pseudo-filesystem).
        FileExistsError: no free name after a hundred tries.
    """
    parent = Path(parent)
    prefix = f".{name}.partial-" if prefix is None else prefix
    if private:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    for _ in range(_STAGING_TRIES):
        path = parent / f"{prefix}{secrets.token_hex(4)}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a staging directory for {name} in {parent}")


_MAX_NAME_TRIES = 1000  # names <final>, <final>-2 ... before giving up (a thousand runs in one second)


def publish(staging: Path, final: Path, *, if_taken: str = "raise") -> Path | None:
    """Rename the finished folder ``staging`` to ``final`` (atomic on one file system).

    Args:
        staging: The filled staging folder (:func:`make_staging`), or a folder in it.
        final: The name it gets.
        if_taken: What happens when ``final`` is taken (the rename refuses a non-empty target):
            ``"raise"``: the ``OSError`` propagates, ``staging`` is left as it is;
            ``"next"``: ``final-2``, ``final-3`` ... are tried in turn (overlapping runs of one command in
            one second share a timestamp, hence a name); a name that exists is skipped before trying, and
            the rename itself settles the race between two processes picking the same one (EEXIST,
            ENOTEMPTY: the next name); any other ``OSError`` propagates;
            ``"drop"``: another process won the race and its copy is complete: ``staging`` is removed
            (on any ``OSError`` of the rename) and None returned.

    Returns:
        The name the folder got; None when it was dropped.

    Raises:
        OSError: the rename failed (``"raise"``, or ``"next"`` for another reason than a taken name).
        FileExistsError: ``"next"`` found no free name after a thousand tries (the message says
            "report name": its one caller is :func:`lab.reports.report_dir`).
    """
    if if_taken == "drop":
        try:
            os.rename(staging, final)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            return None
        return final
    if if_taken == "raise":
        os.rename(staging, final)
        return final
    assert if_taken == "next", f"if_taken={if_taken!r} must be 'raise', 'next' or 'drop'"
    for i in range(1, _MAX_NAME_TRIES + 1):
        candidate = final if i == 1 else final.with_name(f"{final.name}-{i}")
        if candidate.exists():
            continue
        try:
            os.rename(staging, candidate)
            return candidate
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
    raise FileExistsError(f"no free report name for {final} after {_MAX_NAME_TRIES} tries")


def sweep_staging(parent: Path, pattern: str, older_than_s: float | None = None) -> None:
    """Remove the staging folders in ``parent`` matching ``pattern`` (a glob): what a process killed without
    cleanup (SIGKILL, power loss) left. With ``older_than_s``, only those last modified longer ago than that
    (others may be in use); without, all (the caller holds the lock every writer takes). Nothing that cannot
    be removed, or a ``parent`` that cannot be listed, stops it."""
    now = time.time()
    try:
        for p in parent.glob(pattern):
            try:
                if p.is_dir() and (older_than_s is None or now - p.stat().st_mtime > older_than_s):
                    shutil.rmtree(p, ignore_errors=True)
            except OSError:
                continue
    except OSError:
        pass
