"""The model caches' manifest and layers file are validated by shape and range; a bad one is a damaged cache.

Fault class (a hand-edited or corrupted manifest trusted as read): with ``"files": []`` in a converted
cache's ``lab-cache.json`` every run ended on the unforeseen-error path with an ``AttributeError``, and
a file entry without ``size`` with ``KeyError: 'size'``; the cache was never discarded and rebuilt. Each
hostile variant here must be named in one line (:class:`lab.schemas.FileSchemaError`) and lead to a
rebuild, never to another exception. Caches live under ``tmp_path``; no real model is read.
"""

from __future__ import annotations

import json
import logging

import pytest

from lab.models import cache as model_cache
from lab.schemas import FileSchemaError
from lab.schemas import cache as cache_schema
from tests import support

pytestmark = pytest.mark.unit


def _folder(tmp_path):
    """A float32-style cache folder: a tiny model, its tokenizer and a manifest of the current format."""
    folder = tmp_path / "tiny"
    support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2).save_pretrained(folder)
    support.chatml_tokenizer().save_pretrained(folder)
    model_cache.write_manifest(folder, {"name": "tiny.gguf", "size": 10, "sha256": "ab" * 32})
    return folder


def _first(manifest):
    return next(iter(manifest["files"].values()))


def _set(path_in_manifest, value):
    def edit(m):
        *parents, last = path_in_manifest
        target = m
        for key in parents:
            target = next(iter(target.values())) if key == "<file>" else target[key]
        target[next(iter(target)) if last == "<file>" else last] = value
        return m
    return edit


def _drop(key):
    def edit(m):
        del _first(m)[key]
        return m
    return edit


# name -> the manifest (a dict, edited) or its bytes (a function of the valid manifest's bytes)
HOSTILE_MANIFESTS = {
    "files-empty-list": _set(["files"], []),
    "files-empty-object": _set(["files"], {}),
    "files-missing": lambda m: {k: v for k, v in m.items() if k != "files"},
    "size-missing": _drop("size"),
    "sha256-missing": _drop("sha256"),
    "mtime-missing": _drop("mtime_ns"),
    "size-string": _set(["files", "<file>", "size"], "538090408"),
    "size-negative": _set(["files", "<file>", "size"], -1),
    "size-huge": _set(["files", "<file>", "size"], 2**63),
    "size-float": _set(["files", "<file>", "size"], 12.5),
    "sha256-short": _set(["files", "<file>", "sha256"], "abc123"),
    "sha256-not-hex": _set(["files", "<file>", "sha256"], "z" * 64),
    "sha256-number": _set(["files", "<file>", "sha256"], 12),
    "mtime-negative": _set(["files", "<file>", "mtime_ns"], -5),
    "entry-a-list": _set(["files", "<file>"], [1, 2, 3]),
    "sampled-window-wider-than-stride": _set(["files", "<file>", "sampled"],
                                             {"stride": 1 << 16, "window": 1 << 17, "sha256": "0" * 64}),
    "sampled-stride-tiny": _set(["files", "<file>", "sampled"], {"stride": 1, "window": 1, "sha256": "0" * 64}),
    "sampled-missing-sha256": _set(["files", "<file>", "sampled"], {"stride": 1 << 20, "window": 4096}),
    "file-name-escapes": lambda m: {**m, "files": {"../../etc/passwd": _first(m)}},
    "file-name-is-the-manifest": lambda m: {**m, "files": {"lab-cache.json": _first(m)}},
    "format-unknown": _set(["format"], 99),
    "format-string": _set(["format"], "3"),
    "format-missing": lambda m: {k: v for k, v in m.items() if k != "format"},
    "source-number": _set(["source"], 5),
    "source-empty-object": _set(["source"], {}),
    "source-bad-sha256": _set(["source"], {"name": "tiny.gguf", "size": 10, "sha256": "no"}),
    "top-level-list": lambda m: [m],
    "top-level-null": lambda m: None,
    "nan-size": lambda m: json.dumps(m).replace('"size": 10,', '"size": NaN,', 1).encode(),
    "binary": lambda m: bytes(range(256)) * 4,
    "not-json": lambda m: b'{"format": 3, "files": {',
    "empty-file": lambda m: b"",
    "too-large": lambda m: b" " * (cache_schema.MAX_MANIFEST_BYTES + 1) + json.dumps(m).encode(),
}


def _write_hostile(folder, variant):
    path = folder / model_cache.MANIFEST
    valid = json.loads(path.read_text())
    out = HOSTILE_MANIFESTS[variant](valid)
    path.write_bytes(out if isinstance(out, bytes) else json.dumps(out).encode())
    return path


@pytest.mark.parametrize("variant", sorted(HOSTILE_MANIFESTS))
def test_load_manifest_hostile_variant_is_named_in_one_line(tmp_path, variant):
    path = _write_hostile(_folder(tmp_path), variant)
    with pytest.raises(FileSchemaError) as info:
        cache_schema.load_manifest(path)
    message = str(info.value)
    assert str(path) in message and "\n" not in message and len(message) < len(str(path)) + 250


def test_load_manifest_written_manifest_is_valid(tmp_path):
    """Control: what write_manifest writes meets the schema, so the hostile cases fail for their edit."""
    manifest = cache_schema.load_manifest(_folder(tmp_path) / model_cache.MANIFEST)
    assert manifest["format"] == cache_schema.MANIFEST_FORMAT
    assert all("sampled" in rec for rec in manifest["files"].values())


@pytest.mark.parametrize("variant", sorted(HOSTILE_MANIFESTS))
def test_cache_problem_hostile_manifest_is_a_damaged_cache(tmp_path, variant):
    """Every hostile manifest makes cache_problem name the manifest (the caller then rebuilds); none raises."""
    folder = _folder(tmp_path)
    assert model_cache.cache_problem(folder) is None
    _write_hostile(folder, variant)
    problem = model_cache.cache_problem(folder)
    assert problem is not None and model_cache.MANIFEST in problem


def test_cache_problem_manifest_that_is_a_directory_is_a_damaged_cache(tmp_path):
    folder = _folder(tmp_path)
    (folder / model_cache.MANIFEST).unlink()
    (folder / model_cache.MANIFEST).mkdir()
    assert "not a regular file" in model_cache.cache_problem(folder)


def test_cache_problem_listed_file_missing_or_extra_file_is_a_damaged_cache(tmp_path):
    """A file the manifest lists that is gone, or one added beside it (an adapter_config.json would change what
    transformers loads), is damage; hidden files (a manifest being rewritten) are not."""
    folder = _folder(tmp_path)
    (folder / ".DS_Store").write_bytes(b"x")
    assert model_cache.cache_problem(folder) is None  # control
    (folder / "adapter_config.json").write_text("{}")
    assert "adapter_config.json is not listed" in model_cache.cache_problem(folder)
    (folder / "adapter_config.json").unlink()
    (folder / "tokenizer.json").unlink()
    assert model_cache.cache_problem(folder) == "tokenizer.json is missing"


# --------------------------------------------------------------------------- the converted cache


def _converted(tmp_path):
    from lab.models.quantize import load_or_convert

    cache = tmp_path / "tiny.weights-int8"
    load_or_convert(support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2), None, "int8", cache)
    return cache


def _convert_counting(monkeypatch):
    from lab.models import quantize

    calls = []
    real = quantize.quantize_model
    monkeypatch.setattr(quantize, "quantize_model", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@pytest.mark.parametrize("variant", ["files-empty-list", "size-missing", "sha256-not-hex", "size-huge", "binary",
                                     "not-json", "format-unknown", "entry-a-list"])
def test_load_or_convert_hostile_manifest_rebuilds_the_cache_with_a_warning(tmp_path, monkeypatch, caplog, variant):
    from lab.models.quantize import load_or_convert

    cache = _converted(tmp_path)
    calls = _convert_counting(monkeypatch)
    _write_hostile(cache, variant)
    with caplog.at_level(logging.WARNING, logger="lab"):
        summary = load_or_convert(support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2), None,
                                  "int8", cache)
    assert calls == [1] and summary["layers"] == {"int8": 8}
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1 and "damaged" in warning[0] and model_cache.MANIFEST in warning[0]
    assert model_cache.cache_problem(cache, index="layers.json") is None  # rebuilt whole


HOSTILE_LAYERS = {
    "layers-empty": lambda m: {**m, "layers": {}},
    "layers-a-list": lambda m: {**m, "layers": []},
    "layer-kind-unknown": lambda m: {**m, "layers": {k: "int3" for k in m["layers"]}},
    "layer-name-odd": lambda m: {**m, "layers": {"../x": "int8"}},
    "summary-missing": lambda m: {k: v for k, v in m.items() if k != "summary"},
    "summary-count-disagrees": lambda m: {**m, "summary": {**m["summary"], "layers": {"int8": 3}}},
    "summary-count-negative": lambda m: {**m, "summary": {**m["summary"], "layers": {"int8": -8}}},
    "summary-other-weights": lambda m: {**m, "summary": {**m["summary"], "weights": "bfloat16"}},
    "conversion-zero": lambda m: {**m, "conversion": 0},
    "conversion-string": lambda m: {**m, "conversion": "1"},
    "top-level-string": lambda m: "layers",
}


@pytest.mark.parametrize("variant", sorted(HOSTILE_LAYERS))
def test_load_layers_hostile_variant_is_named_in_one_line(tmp_path, variant):
    path = _converted(tmp_path) / "layers.json"
    path.write_text(json.dumps(HOSTILE_LAYERS[variant](json.loads(path.read_text()))))
    with pytest.raises(FileSchemaError) as info:
        cache_schema.load_layers(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_load_layers_written_file_is_valid_and_a_version_1_file_still_is(tmp_path):
    """Control: the file conversion writes meets the schema; one without "conversion" (version 1) too."""
    path = _converted(tmp_path) / "layers.json"
    meta = cache_schema.load_layers(path)
    del meta["conversion"]
    path.write_text(json.dumps(meta))
    assert cache_schema.load_layers(path)["summary"]["weights"] == "int8"


@pytest.mark.parametrize("variant", ["layers-a-list", "summary-count-disagrees", "summary-other-weights"])
def test_load_or_convert_hostile_layers_file_rebuilds_the_cache(tmp_path, monkeypatch, caplog, variant):
    """A layers file edited with its manifest rewritten to match (so only the schema can tell) is damage."""
    from lab.models.quantize import load_or_convert

    cache = _converted(tmp_path)
    path = cache / "layers.json"
    path.write_text(json.dumps(HOSTILE_LAYERS[variant](json.loads(path.read_text()))))
    model_cache.write_manifest(cache, "int8")
    calls = _convert_counting(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="lab"):
        load_or_convert(support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2), None, "int8", cache)
    assert calls == [1] and "damaged" in caplog.text and "layers.json" in caplog.text
