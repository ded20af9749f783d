"""The dequantized-model cache is checked when used and rebuilt from the GGUF source when damaged.

Fault class (a damaged cache read as it is): a truncated or garbage ``model.safetensors`` in the cache
ended in ``SafetensorError ... incomplete metadata`` (only ``config.json`` was checked).
Every cache here lives under ``LAB_CACHE_DIR=<tmp>``; the real cache is never touched.
"""

from __future__ import annotations

import logging
import os

import pytest

from lab.models import cache as model_cache
from tests import support


def _tiny_cache(folder, manifest=True):
    model = support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2)
    model.save_pretrained(folder)
    support.chatml_tokenizer().save_pretrained(folder)
    if manifest:
        model_cache.write_manifest(folder, "tiny.gguf")
    return folder


def _truncate(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.mark.parametrize("manifest", [True, False], ids=["manifest", "old-cache"])
@pytest.mark.parametrize("damage", ["truncated", "garbage", "same-size-edit"])
def test_cache_problem_names_the_damaged_file(tmp_path, manifest, damage):
    folder = _tiny_cache(tmp_path / "smollm2", manifest)
    assert model_cache.cache_problem(folder) is None
    weights = folder / "model.safetensors"
    if damage == "truncated":
        _truncate(weights)
    elif damage == "garbage":
        weights.write_bytes(b"not a model at all")
    else:
        if not manifest:
            pytest.skip("a same-size edit inside the weights needs the recorded sha256")
        data = bytearray(weights.read_bytes())
        data[-1] ^= 0xFF
        weights.write_bytes(bytes(data))
    problem = model_cache.cache_problem(folder)
    assert problem is not None and "model.safetensors" in problem


def test_cache_problem_untouched_cache_is_not_rehashed(tmp_path, monkeypatch):
    folder = _tiny_cache(tmp_path / "m")
    monkeypatch.setattr(model_cache, "file_sha256", lambda p: pytest.fail("rehashed an untouched file"))
    assert model_cache.cache_problem(folder) is None


def test_load_model_damaged_cache_rebuilds_from_gguf_saying_so(tmp_path, monkeypatch, caplog):
    """The damaged cache of the default profile is moved aside and rebuilt from its GGUF source (here the
    dequantization is replaced by a tiny model), with a warning; the load then succeeds."""
    import transformers

    from lab.models import loading as models

    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path))
    _truncate(_tiny_cache(tmp_path / "smollm2", manifest=False) / "model.safetensors")
    built = []
    real_model, real_tok = transformers.AutoModelForCausalLM.from_pretrained, transformers.AutoTokenizer.from_pretrained

    def model_from(src, *a, gguf_file=None, **k):
        if gguf_file is None:
            return real_model(src, *a, **k)
        built.append(gguf_file)
        return support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2)

    def tok_from(src, *a, gguf_file=None, **k):
        return support.chatml_tokenizer() if gguf_file is not None else real_tok(src, *a, **k)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", model_from)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", tok_from)
    with caplog.at_level(logging.WARNING, logger="lab"):
        model, _ = models.load_model("smollm2", device="cpu")
    assert len(built) == 1 and built[0].endswith(".gguf")
    assert any("damaged" in r.getMessage() and "rebuilding" in r.getMessage() for r in caplog.records)
    assert model_cache.cache_problem(tmp_path / "smollm2") is None
    assert (tmp_path / "smollm2" / model_cache.MANIFEST).is_file()
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith(".")) == []  # nothing left aside


def test_load_model_unloadable_default_profile_does_not_suggest_itself(tmp_path, monkeypatch):
    """Poor case: "use the embedded default instead: --model smollm2" was said to a user already on it."""
    from lab.models import loading as models

    monkeypatch.setattr(models, "resolve_source", lambda name: (str(tmp_path), models.PROFILES["smollm2"]))
    with pytest.raises(models.ModelUnavailableError) as info:
        models.load_model("smollm2", device="cpu")
    assert "--model smollm2" not in str(info.value)


# --------------------------------------------------------------------------- the cache's source
# Fault class (a stale cache served): a cache was keyed by its GGUF file's name only, so a package upgrade that
# replaced the file under the same name went on serving weights made from the old one.


def _source(tmp_path, data=b"GGUF" + bytes(range(200)), name="tiny.gguf"):
    src = tmp_path / "src" / name
    src.parent.mkdir(exist_ok=True)
    src.write_bytes(data)
    return src


def _cache_from(tmp_path, src):
    folder = tmp_path / "cache"
    model_cache.write_manifest(_tiny_cache(folder, manifest=False), model_cache.source_record(src))
    return folder


def test_source_problem_accepts_the_file_it_was_made_from_without_rehashing(tmp_path, monkeypatch):
    src = _source(tmp_path)
    folder = _cache_from(tmp_path, src)
    monkeypatch.setattr(model_cache, "file_sha256", lambda p: pytest.fail("rehashed an untouched source"))
    assert model_cache.source_problem(folder, src) is None


def test_source_problem_same_bytes_reinstalled_pass_and_are_not_hashed_twice(tmp_path, monkeypatch):
    src = _source(tmp_path)
    folder = _cache_from(tmp_path, src)
    os.utime(src, ns=(1, 1))  # reinstalled: same bytes, another time
    assert model_cache.source_problem(folder, src) is None
    monkeypatch.setattr(model_cache, "file_sha256", lambda p: pytest.fail("the new time was not recorded"))
    assert model_cache.source_problem(folder, src) is None


@pytest.mark.parametrize("change", ["same-size-other-bytes", "other-size", "other-name"])
def test_source_problem_names_a_replaced_source(tmp_path, change):
    src = _source(tmp_path)
    folder = _cache_from(tmp_path, src)
    if change == "same-size-other-bytes":
        data = bytearray(src.read_bytes())
        data[-1] ^= 0xFF
        src.write_bytes(bytes(data))
        os.utime(src, ns=(2, 2))
        expected = "sha256 differs"
    elif change == "other-size":
        src.write_bytes(src.read_bytes() + b"more")
        expected = "bytes"
    else:
        src = _source(tmp_path, name="other.gguf")
        expected = "tiny.gguf, not other.gguf"
    problem = model_cache.source_problem(folder, src)
    assert problem is not None and expected in problem


def test_source_problem_first_format_name_is_trusted_once_then_pinned(tmp_path):
    """A manifest of format 1 (the name only) is upgraded in place; from then on the bytes count."""
    src = _source(tmp_path)
    folder = _tiny_cache(tmp_path / "cache", manifest=False)
    model_cache.write_manifest(folder, "tiny.gguf")
    assert model_cache.source_problem(folder, _source(tmp_path, name="other.gguf")) is not None  # control
    assert model_cache.source_problem(folder, src) is None
    assert model_cache.cache_problem(folder) is None  # the rewritten manifest still describes the files
    data = bytearray(src.read_bytes())
    data[0] ^= 0xFF
    src.write_bytes(bytes(data))
    os.utime(src, ns=(3, 3))
    assert "sha256 differs" in model_cache.source_problem(folder, src)


def test_source_problem_pinned_record_is_compared_without_the_file(tmp_path):
    pinned = {"name": "big.gguf", "size": 10, "sha256": "ab" * 32}
    folder = _tiny_cache(tmp_path / "cache", manifest=False)
    model_cache.write_manifest(folder, pinned)
    assert model_cache.source_problem(folder, dict(pinned)) is None
    assert "pinned to another file" in model_cache.source_problem(folder, {**pinned, "sha256": "cd" * 32})


def test_source_problem_without_a_manifest_is_left_to_cache_problem(tmp_path):
    assert model_cache.source_problem(_tiny_cache(tmp_path / "c", manifest=False), _source(tmp_path)) is None


def test_load_model_cache_made_from_another_gguf_is_rebuilt_saying_so(tmp_path, monkeypatch, caplog):
    """A sound float32 cache whose manifest names another source is stale: rebuilt, with a warning."""
    import transformers

    from lab.models import loading as models

    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path))
    folder = _tiny_cache(tmp_path / "smollm2", manifest=False)
    model_cache.write_manifest(folder, {"name": "an-older-release.gguf", "size": 1, "sha256": "0" * 64})
    built = []

    def model_from(src, *a, gguf_file=None, **k):
        if gguf_file is None:
            return transformers.models.llama.LlamaForCausalLM.from_pretrained(src, *a, **k)
        built.append(gguf_file)
        return support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2)

    real_tok = transformers.AutoTokenizer.from_pretrained
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", model_from)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        lambda src, *a, gguf_file=None, **k: support.chatml_tokenizer() if gguf_file else real_tok(src, *a, **k))
    with caplog.at_level(logging.WARNING, logger="lab"):
        models.load_model("smollm2", device="cpu")
    assert len(built) == 1
    assert any("stale" in r.getMessage() and "an-older-release.gguf" in r.getMessage() for r in caplog.records)
    assert model_cache.source_problem(tmp_path / "smollm2", models.gguf_source(models.PROFILES["smollm2"])) is None
