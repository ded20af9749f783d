"""The dequantized-model cache is checked when used and rebuilt from the GGUF source when damaged.

Fault class (issue 18, fault 4): a truncated or garbage ``model.safetensors`` in the cache
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
