"""The dequantized-model cache: where it lives, and a manifest written with it, checked on every use.

A GGUF profile is dequantized once into ``<cache_dir()>/<profile>/`` (:mod:`lab.models.loading`).
A truncated or overwritten ``model.safetensors`` there would reach safetensors and end in
``SafetensorError ... incomplete metadata``, so the cache is checked when it is used:

* ``lab-cache.json`` (:data:`MANIFEST`), written with the cache, records every file's
  size, sha256 and modification time. On use, sizes must match; a file whose
  modification time changed since it was written is hashed again and must match
  (hashing 0.5 GB takes about a second, so an untouched cache costs nothing);
* every ``*.safetensors`` file is checked structurally (the format's 8-byte header
  length, a JSON header, tensors whose data ends exactly at the end of the file), which
  catches truncation and garbage in a cache that has no manifest.

:func:`cache_problem` says what is wrong, or ``None``; :mod:`lab.models.loading` then rebuilds
the cache from the GGUF source, saying so.

The manifest also records the source the cache was made from: the GGUF file's name, size,
sha256 and modification time (:func:`source_record`). A cache is only as good as its source:
a package upgrade that replaces a GGUF file under the same name (another quantization, a
re-upload) would otherwise go on serving weights made from the old file.
:func:`source_problem` compares the record with the file as it is now (size first; the sha256
only when the modification time moved), and :mod:`lab.models.loading` and
:mod:`lab.models.quantize` rebuild a cache whose source changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

MANIFEST = "lab-cache.json"
MANIFEST_FORMAT = 2  # 1 recorded the source by name only; 2 by name, size, sha256 and mtime
# A safetensors header is a JSON index of tensor names, dtypes, shapes and offsets:
# kilobytes for these models. A "length" past this is garbage, not a header.
MAX_SAFETENSORS_HEADER = 100 * 2**20
_READ_BLOCK = 1 << 22


def cache_dir() -> Path:
    """Where dequantized GGUF models are cached: ``$LAB_CACHE_DIR`` or ``~/.cache/lab/models``."""
    root = os.environ.get("LAB_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "lab" / "models"


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 4 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_READ_BLOCK):
            h.update(block)
    return h.hexdigest()


def source_record(path: Path) -> dict:
    """What a cache was made from: ``{"name", "size", "sha256", "mtime_ns"}`` of the file ``path``.

    Raises:
        OSError: ``path`` cannot be read.
    """
    st = path.stat()
    return {"name": path.name, "size": st.st_size, "sha256": file_sha256(path), "mtime_ns": st.st_mtime_ns}


def _rewrite_source(folder: Path, manifest: dict, record: dict) -> None:
    """Store ``record`` as the manifest's source, atomically (a reader sees the old or the new file)."""
    manifest = {**manifest, "source": record}
    tmp = folder / f".{MANIFEST}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, folder / MANIFEST)
    except OSError:  # a read-only cache still serves; the check just repeats next time
        tmp.unlink(missing_ok=True)


def source_problem(folder: Path, src: Path | dict) -> str | None:
    """Whether the cache ``folder`` was made from the source ``src`` as it is now; ``None`` when it was.

    ``src`` is either the GGUF file itself or, where the file is pinned (a chunked profile's
    :class:`lab.models.gguf_chunks.ChunkedGGUF`: name, size and sha256 fixed in code, checked
    whenever the file is joined), that pinned record, which is compared without touching the
    file. For a file, the manifest's record (:func:`source_record`) must name it with its size;
    when its modification time differs from the record, its sha256 must match (a reinstall of
    the same bytes passes, and the record's time is updated so the next use does not hash again).
    A manifest of the first format recorded only the name: a matching name is taken on trust once,
    and the full record is written in its place. A cache without a manifest (older still) cannot be
    checked and is left to :func:`cache_problem`.

    Args:
        folder: A cache directory that :func:`cache_problem` accepted.
        src: The GGUF file the cache would be made from now, or its pinned
            ``{"name", "size", "sha256"}``.

    Returns:
        A sentence naming the difference, or ``None``.
    """
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        recorded = manifest.get("source")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return f"{MANIFEST} is unreadable"
    name = src["name"] if isinstance(src, dict) else src.name
    if isinstance(recorded, str):  # MANIFEST_FORMAT 1: the name only
        if recorded != name:
            return f"it was made from {recorded}, not {name}"
        try:
            _rewrite_source(folder, manifest, dict(src) if isinstance(src, dict) else source_record(src))
        except OSError as exc:
            return f"its source {src} cannot be read ({exc.strerror or exc})"
        return None
    if not isinstance(recorded, dict) or not {"name", "size", "sha256"} <= recorded.keys():
        return f"{MANIFEST} does not record its source"
    if recorded["name"] != name:
        return f"it was made from {recorded['name']}, not {name}"
    if isinstance(src, dict):
        if (recorded["size"], recorded["sha256"]) != (src["size"], src["sha256"]):
            return f"{name} is pinned to another file now (size or sha256 differ from the cache's source)"
        return None
    try:
        st = src.stat()
    except OSError as exc:
        return f"its source {src} cannot be read ({exc.strerror or exc})"
    if recorded["size"] != st.st_size:
        return f"it was made from a {recorded['size']:,}-byte {name}; that file now has {st.st_size:,} bytes"
    if recorded.get("mtime_ns") != st.st_mtime_ns:
        if file_sha256(src) != recorded["sha256"]:
            return f"{name} was replaced since the cache was made (its sha256 differs)"
        _rewrite_source(folder, manifest, {**recorded, "mtime_ns": st.st_mtime_ns})
    return None


def write_manifest(folder: Path, source: str | dict) -> Path:
    """Record size, sha256 and mtime of every file in ``folder`` (call before it is renamed into place).

    Args:
        folder: The finished cache directory (its staging name).
        source: What it was built from: a :func:`source_record` (a GGUF file), or a label.
    """
    files = {}
    for p in sorted(folder.iterdir()):
        if p.is_file() and p.name != MANIFEST:
            st = p.stat()
            files[p.name] = {"size": st.st_size, "sha256": file_sha256(p), "mtime_ns": st.st_mtime_ns}
    path = folder / MANIFEST
    path.write_text(json.dumps({"format": MANIFEST_FORMAT, "source": source, "files": files}, indent=1) + "\n",
                    encoding="utf-8")
    return path


def safetensors_problem(path: Path) -> str | None:
    """What is structurally wrong with a safetensors file, or ``None``.

    The format: 8 bytes little-endian header length N, N bytes of JSON mapping each
    tensor to ``data_offsets`` [begin, end) into the data that follows; the data ends
    where the last tensor does, which must be the end of the file.
    """
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return f"{path.name} has {size} bytes, too short for a safetensors header"
        (n,) = struct.unpack("<Q", head)
        if n > min(MAX_SAFETENSORS_HEADER, size - 8):
            return f"{path.name}: header length {n} does not fit its {size} bytes (truncated or not safetensors)"
        try:
            header = json.loads(fh.read(n))
            ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            return f"{path.name}: its header is not a safetensors index (garbage?)"
    expected = 8 + n + max(ends, default=0)
    if expected != size:
        return f"{path.name} has {size} bytes where its header says {expected} (truncated or overwritten)"
    return None


def cache_problem(folder: Path, index: str = "config.json") -> str | None:
    """What is wrong with a cached model directory, or ``None`` when it can be used.

    Checks, in order: ``index`` (the folder's JSON description: ``config.json`` for a model) parses; with a manifest, every recorded file
    exists with its size, and one modified since it was written still has its sha256;
    every ``*.safetensors`` file is structurally whole (:func:`safetensors_problem`).
    """
    if not folder.is_dir():
        return f"{folder} is not a directory"
    try:
        json.loads((folder / index).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return f"{index} is missing or unreadable"
    manifest = folder / MANIFEST
    if manifest.is_file():
        try:
            files = json.loads(manifest.read_text(encoding="utf-8"))["files"]
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
            return f"{MANIFEST} is unreadable"
        for name, rec in files.items():
            p = folder / name
            if not p.is_file():
                return f"{name} is missing"
            st = p.stat()
            if st.st_size != rec["size"]:
                return f"{name} has {st.st_size} bytes, {rec['size']} when written"
            if st.st_mtime_ns != rec["mtime_ns"] and file_sha256(p) != rec["sha256"]:
                return f"{name} was modified since it was written (its sha256 differs)"
    for p in sorted(folder.glob("*.safetensors")):
        problem = safetensors_problem(p)
        if problem:
            return problem
    if not any(folder.glob("*.safetensors")):
        return "no model.safetensors"
    return None


def discard(folder: Path) -> None:
    """Move a damaged cache aside (atomically, so no reader sees it half-deleted), then delete it."""
    import secrets
    import shutil

    aside = folder.with_name(f".{folder.name}.damaged-{secrets.token_hex(4)}")
    try:
        os.rename(folder, aside)
    except FileNotFoundError:  # another process moved it first
        return
    shutil.rmtree(aside, ignore_errors=True)


@contextmanager
def staged_cache(target: Path, source: str | Path | dict) -> Iterator[Path]:
    """A temporary folder beside ``target`` to fill; on success its manifest is written and it is renamed
    into place, so no reader ever sees a half-written cache.

    Args:
        target: the cache folder to create.
        source: what it was made from, recorded in the manifest: a file (its
            :func:`source_record`, which :func:`source_problem` checks later), a pinned
            ``{"name", "size", "sha256"}`` record, or a label.

    If ``target`` appeared meanwhile (another process won the race; its copy is complete), the staged
    copy is dropped. On any exception, interrupts included, the staged folder is removed and the
    exception propagates.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        yield staging
        write_manifest(staging, source_record(source) if isinstance(source, Path) else source)
        try:
            staging.rename(target)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
