"""Files written whole or not at all, and the names of a run's per-unit work files.

A reader sees the old file or the new one, never a half-written one: the text goes to a temporary file
beside the target, is flushed to disk, and replaces the target in one ``os.replace``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

# Characters of a unit id kept in its work file's name, for a reader; the digest beside them keeps
# the name unique, and the bound keeps it far below NAME_MAX (255 bytes) on every file system.
WORK_STEM_CHARS = 48
WORK_DIGEST_HEX = 16  # 64 bits of sha256 over the full id: two ids of one run never meet by chance
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all, creating its folder.

    A failure leaves the old file as it was and no temporary file behind; the new file gets the
    permissions the umask gives a new file.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OSError: the folder cannot be created or written (the caller names what it was writing).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | Path, data: Any) -> Path:
    """:func:`write_text_atomic` of ``json.dumps(data)`` (default separators; NaN written as ``NaN``).

    Raises:
        OSError: as :func:`write_text_atomic`.
        TypeError: ``data`` is not JSON-serializable (nothing is written).
    """
    return write_text_atomic(path, json.dumps(data, allow_nan=True))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def work_file_name(unit_id: str) -> str:
    """The file name of a unit's record: ``<stem>-<digest>.json``, safe and bounded for any id.

    ``stem`` is the id with every character outside ``[A-Za-z0-9._-]`` replaced by ``_``, cut to
    :data:`WORK_STEM_CHARS` and without leading dots; ``digest`` is :data:`WORK_DIGEST_HEX` hex digits
    of sha256 over the whole id (UTF-8, lone surrogates kept), so ids that share a stem differ in it.
    At most 70 ASCII characters, whatever the id.
    """
    stem = _UNSAFE.sub("_", unit_id)[:WORK_STEM_CHARS].lstrip(".") or "prompt"
    digest = hashlib.sha256(unit_id.encode("utf-8", "surrogatepass")).hexdigest()[:WORK_DIGEST_HEX]
    return f"{stem}-{digest}.json"


def settings_key(settings: dict[str, Any]) -> str:
    """16 hex digits of sha256 over the canonical JSON of the settings (sorted keys, compact)."""
    blob = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
