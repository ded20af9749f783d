"""A run's JSON files written whole or not at all, and the names of its per-unit work files.

A reader sees the old file or the new one, never a half-written one: :func:`write_json_atomic` writes
through the lab's one atomic writer (:func:`lab.files.write_text_atomic`, re-exported here).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from lab.files import write_text_atomic  # re-exported: looked up here at each call (tests stand in for it)

# Characters of a unit id kept in its work file's name, for a reader; the digest beside them keeps
# the name unique, and the bound keeps it far below NAME_MAX (255 bytes) on every file system.
WORK_STEM_CHARS = 48
WORK_DIGEST_HEX = 16  # 64 bits of sha256 over the full id: two ids of one run never meet by chance
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def write_json_atomic(path: str | Path, data: Any) -> Path:
    """:func:`lab.files.write_text_atomic` of ``json.dumps(data)`` (default separators; NaN written as ``NaN``).

    Raises:
        OSError: as :func:`lab.files.write_text_atomic`.
        TypeError: ``data`` is not JSON-serializable (nothing is written).
    """
    return write_text_atomic(path, json.dumps(data, allow_nan=True))


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
