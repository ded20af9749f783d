"""Every file the lab reads, read through one bounded reader: a FIFO or an endless device is refused, never read.

A file a user names (``--context-file``, a prompt set, ``--pairs``) or the lab reads back (a tuning file,
a calibration, a study's ``settings.json``, a report's files for its page) may be anything a path can
name: a FIFO, whose ``open`` waits for a writer and whose read never ends; ``/dev/zero`` or
``/dev/urandom``, which never end; a folder; a file of gigabytes. :func:`read_bounded` opens without
blocking (``O_NONBLOCK``), refuses what is not a regular file at once, refuses a file larger than the
caller's bound and never reads more than the bound and one byte, so a file that grows while it is read
is refused too. :func:`read_text` adds UTF-8 decoding and one line naming the file as the user gave it.

Each file kind's bound is a named constant with its reason, here when several readers share it, beside
its reader otherwise. Stdlib only and importing no part of the lab: the commands, the schemas, the
study, the models and the pages all read through it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

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
