"""The dequantized-model cache: where it lives, and a manifest written with it, checked on every use.

A GGUF profile is dequantized once into ``<cache_dir()>/<profile>/`` (:mod:`lab.models.loading`).
A truncated or overwritten ``model.safetensors`` there would reach safetensors and end in
``SafetensorError ... incomplete metadata``, so the cache is checked when it is used:

* ``lab-cache.json`` (:data:`MANIFEST`), written with the cache and validated against its schema
  (:mod:`lab.schemas.cache`: a manifest that fails is a damaged cache), records every file's
  size, sha256, modification time and a sampled sha256 (one :data:`SAMPLE_WINDOW` every
  :data:`SAMPLE_STRIDE`, and the last, :func:`sampled_sha256`). On use, the folder must hold
  exactly the files listed (hidden files aside), with their sizes; a file whose modification
  time changed since it was written is hashed in full again and must match; an untouched one
  must match its sampled sha256. That catches bit-rot and edits made with the time restored
  wherever they touch a sampled window: always when they span ``SAMPLE_STRIDE + SAMPLE_WINDOW``
  bytes or more, by chance when smaller; it reads 1/256 of the bytes (docs/models.md gives the
  measured cost). A manifest written before the sampled sha256 existed (format 2) is checked
  against the full sha256 once and gains it;
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
import logging
import os
import shutil
import struct
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from lab.files import make_staging, publish, write_text_atomic
from lab.schemas import FileSchemaError, read_json
from lab.schemas.cache import MANIFEST, MANIFEST_FORMAT, load_manifest

# The sampled sha256: one page-sized window every MiB reads 1/256 of a file (2 MB of SmolLM2's
# 538 MB float32 cache), so it runs on every use; damage that spans a window is caught.
SAMPLE_WINDOW = 4096
SAMPLE_STRIDE = 1 << 20
# A safetensors header is a JSON index of tensor names, dtypes, shapes and offsets:
# kilobytes for these models. A "length" past this is garbage, not a header.
MAX_SAFETENSORS_HEADER = 100 * 2**20
_READ_BLOCK = 1 << 22

logger = logging.getLogger(__name__)


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


def sampled_sha256(path: Path, stride: int, window: int) -> str:
    """Hex sha256 of the ``window``-byte windows of a file at offsets 0, ``stride``, 2 ``stride`` ...
    and of its last ``window`` bytes (a file no longer than ``window`` is hashed whole).

    Args:
        path: The file.
        stride: Bytes from one window's start to the next (:data:`SAMPLE_STRIDE`).
        window: Bytes per window (:data:`SAMPLE_WINDOW`), at most ``stride``.

    Returns:
        64 hex digits; reads about ``size * window / stride`` bytes.

    Raises:
        OSError: ``path`` cannot be read.
    """
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:  # unbuffered: each window is one read, nothing more
        size = os.fstat(fh.fileno()).st_size
        if hasattr(os, "posix_fadvise"):  # no read-ahead around each window from a cold disk
            os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
        offsets = list(range(0, size, stride)) + ([size - window] if size > window else [])
        for offset in offsets:
            fh.seek(offset)
            h.update(fh.read(window))
    return h.hexdigest()


def _file_record(path: Path) -> dict:
    """A manifest's record of one file: size, sha256, mtime and its sampled sha256."""
    st = path.stat()
    return {"size": st.st_size, "sha256": file_sha256(path), "mtime_ns": st.st_mtime_ns,
            "sampled": _sampled_record(path)}


def _sampled_record(path: Path) -> dict:
    return {"stride": SAMPLE_STRIDE, "window": SAMPLE_WINDOW,
            "sha256": sampled_sha256(path, SAMPLE_STRIDE, SAMPLE_WINDOW)}


def _rewrite_manifest(folder: Path, manifest: dict) -> None:
    """Store ``manifest`` atomically (a reader sees the old or the new file); a read-only cache keeps the
    old one, and the check that led here repeats next time."""
    try:
        write_text_atomic(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    except OSError:
        pass


def _rewrite_source(folder: Path, manifest: dict, record: dict) -> None:
    """Store ``record`` as the manifest's source."""
    _rewrite_manifest(folder, {**manifest, "source": record})


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
        manifest = load_manifest(path)
    except FileSchemaError as exc:
        return str(exc)
    recorded = manifest["source"]
    name = src["name"] if isinstance(src, dict) else src.name
    if isinstance(recorded, str):  # MANIFEST_FORMAT 1: the name only
        if recorded != name:
            return f"it was made from {recorded}, not {name}"
        try:
            _rewrite_source(folder, manifest, dict(src) if isinstance(src, dict) else source_record(src))
        except OSError as exc:
            return f"its source {src} cannot be read ({exc.strerror or exc})"
        return None
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
    """Record size, sha256, mtime and sampled sha256 of every file in ``folder`` (call before it is
    renamed into place).

    Args:
        folder: The finished cache directory (its staging name).
        source: What it was built from: a :func:`source_record` (a GGUF file), or a label.
    """
    files = {p.name: _file_record(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST}
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

    Checks, in order: ``index`` (the folder's JSON description: ``config.json`` for a model)
    parses; with a manifest, that it meets its schema (:func:`lab.schemas.cache.load_manifest`)
    and describes the folder (:func:`_files_problem`); every ``*.safetensors`` file is
    structurally whole (:func:`safetensors_problem`).

    Returns:
        One line saying what is wrong (a bad manifest: its path and the problem), or ``None``.
    """
    if not folder.is_dir():
        return f"{folder} is not a directory"
    try:
        read_json(folder / index, "model index")  # bounded; a FIFO or a device in its place is refused unread
    except FileSchemaError:
        return f"{index} is missing or unreadable"
    manifest = folder / MANIFEST
    if manifest.exists() or manifest.is_symlink():
        try:
            problem = _files_problem(folder, load_manifest(manifest))
        except FileSchemaError as exc:
            return str(exc)
        except OSError as exc:
            return f"a cached file cannot be read ({exc.strerror or exc})"
        if problem:
            return problem
    for p in sorted(folder.glob("*.safetensors")):
        problem = safetensors_problem(p)
        if problem:
            return problem
    if not any(folder.glob("*.safetensors")):
        return "no model.safetensors"
    return None


def _files_problem(folder: Path, manifest: dict) -> str | None:
    """Whether ``folder`` holds exactly the files ``manifest`` lists, as they were written.

    Hidden files aside, nothing may be added (an added ``adapter_config.json`` or tokenizer file
    would change what transformers loads) and nothing missing; sizes must match; a file whose
    modification time moved must match its full sha256, an untouched one its sampled sha256
    (:func:`sampled_sha256`). A file without a sampled sha256 (a format 2 manifest) is hashed in
    full once; its sampled sha256 (and a moved time that its full hash confirmed) is then
    written into the manifest, so the next use is cheap again.

    Raises:
        OSError: a listed file cannot be read.
    """
    files = manifest["files"]
    extra = sorted(p.name for p in folder.iterdir() if not p.name.startswith(".") and p.name != MANIFEST
                   and p.name not in files)
    if extra:
        return f"{extra[0]} is not listed in {MANIFEST} (added since the cache was written)"
    confirmed = {}
    for name, rec in files.items():
        p = folder / name
        if not p.is_file():
            return f"{name} is missing"
        st = p.stat()
        if st.st_size != rec["size"]:
            return f"{name} has {st.st_size} bytes, {rec['size']} when written"
        sampled = rec.get("sampled")
        if st.st_mtime_ns != rec["mtime_ns"] or sampled is None:
            logger.info("hashing %s of the model cache %s in full (%s; once)", name, folder,
                        "its manifest predates sampled hashes" if sampled is None else "its time changed")
            if file_sha256(p) != rec["sha256"]:
                return f"{name} was modified since it was written (its sha256 differs)"
            confirmed[name] = {**rec, "mtime_ns": st.st_mtime_ns, "sampled": _sampled_record(p)}
        elif sampled_sha256(p, sampled["stride"], sampled["window"]) != sampled["sha256"]:
            return (f"{name} changed since it was written though its modification time did not "
                    "(its sampled sha256 differs: disk corruption or an edit with the time restored)")
    if confirmed:
        _rewrite_manifest(folder, {**manifest, "format": MANIFEST_FORMAT, "files": {**files, **confirmed}})
    return None


def discard(folder: Path) -> None:
    """Move a damaged cache aside (atomically, so no reader sees it half-deleted), then delete it.

    Raises:
        OSError: it cannot be moved (a read-only cache); it is left as it was.
    """
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
    staging = make_staging(target.parent, target.name, prefix=f".{target.name}-", private=True)
    try:
        yield staging
        write_manifest(staging, source_record(source) if isinstance(source, Path) else source)
        publish(staging, target, if_taken="drop")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
