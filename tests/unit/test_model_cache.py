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


# --------------------------------------------------------------------------- a malformed manifest
# Fault class (a malformed manifest blocks the cache for good): "files": [] ended every run in an
# AttributeError and a file entry without "size" in KeyError: 'size', on the unforeseen-error path; the
# cache was never rebuilt. Every variant of lab.schemas.cache is in tests/unit/test_schemas_cache.py.


def _patch_dequantization(monkeypatch, built):
    """transformers' GGUF loading replaced by a tiny model; loading a directory stays real."""
    import transformers

    real_model, real_tok = transformers.AutoModelForCausalLM.from_pretrained, transformers.AutoTokenizer.from_pretrained

    def model_from(src, *a, gguf_file=None, **k):
        if gguf_file is None:
            return real_model(src, *a, **k)
        built.append(gguf_file)
        return support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", model_from)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        lambda src, *a, gguf_file=None, **k: support.chatml_tokenizer() if gguf_file
                        else real_tok(src, *a, **k))


def _files_empty(manifest, weights_file):
    manifest["files"] = []


def _size_missing(manifest, weights_file):
    del manifest["files"][weights_file]["size"]


@pytest.mark.parametrize("edit", [_files_empty, _size_missing], ids=["files-empty", "size-missing"])
def test_load_model_malformed_manifest_rebuilds_the_cache_saying_so(tmp_path, monkeypatch, caplog, edit):
    """Regression (a malformed manifest blocks the cache for good): the float32 cache is rebuilt, with a
    warning naming the manifest, and the load succeeds."""
    import json

    from lab.models import loading as models

    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path))
    folder = _tiny_cache(tmp_path / "smollm2", manifest=False)
    model_cache.write_manifest(folder, model_cache.source_record(models.gguf_source(models.PROFILES["smollm2"])))
    manifest = json.loads((folder / model_cache.MANIFEST).read_text())
    edit(manifest, "model.safetensors")
    (folder / model_cache.MANIFEST).write_text(json.dumps(manifest))
    built = []
    _patch_dequantization(monkeypatch, built)
    with caplog.at_level(logging.WARNING, logger="lab"):
        models.load_model("smollm2", device="cpu")
    assert len(built) == 1
    assert any("damaged" in r.getMessage() and model_cache.MANIFEST in r.getMessage() for r in caplog.records)
    assert model_cache.cache_problem(folder) is None


@pytest.mark.parametrize("edit", [_files_empty, _size_missing], ids=["files-empty", "size-missing"])
def test_load_or_convert_malformed_manifest_converts_again(tmp_path, caplog, edit):
    """Regression (a malformed manifest blocks the cache for good), on a converted cache as in the report."""
    import json

    from lab.models.quantize import CACHE_FILE, load_or_convert

    cache = tmp_path / "tiny.weights-int8"
    load_or_convert(support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2), None, "int8", cache)
    manifest = json.loads((cache / model_cache.MANIFEST).read_text())
    edit(manifest, CACHE_FILE)
    (cache / model_cache.MANIFEST).write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING, logger="lab"):
        summary = load_or_convert(support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2), None,
                                  "int8", cache)
    assert summary["layers"] == {"int8": 8} and "damaged" in caplog.text
    assert model_cache.cache_problem(cache, index="layers.json") is None


# --------------------------------------------------------------------------- silent corruption
# Fault class (silent bit-rot served): bytes zeroed inside a cached safetensors with its modification time
# restored were never hashed again; the model's output was garbage with no warning.


def _zero(path, start, length):
    """Zero ``length`` bytes of ``path`` from ``start`` and restore its modification time."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[start:start + length] = bytes(len(data[start:start + length]))
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _large_tiny_cache(folder):
    """A cache whose model.safetensors spans a few sampling strides (a 5.5 MB random model)."""
    support.tiny_llama(vocab_size=256, num_layers=2, hidden=256, heads=4).save_pretrained(folder)
    support.chatml_tokenizer().save_pretrained(folder)
    model_cache.write_manifest(folder, "tiny.gguf")
    weights = folder / "model.safetensors"
    assert weights.stat().st_size > 4 * model_cache.SAMPLE_STRIDE, "precondition: several strides"
    return folder, weights


@pytest.mark.parametrize("at", [0.3, 0.55, 0.9])
def test_cache_problem_zeroed_bytes_with_mtime_restored_are_caught(tmp_path, at):
    """Regression (silent bit-rot served): damage a stride wide or more, anywhere, with the time restored,
    is caught by the sampled sha256 (and the data part is zeroed, so the structural check passes)."""
    folder, weights = _large_tiny_cache(tmp_path / "m")
    start = int(weights.stat().st_size * at)
    _zero(weights, start, model_cache.SAMPLE_STRIDE + model_cache.SAMPLE_WINDOW)
    assert model_cache.safetensors_problem(weights) is None  # precondition: only a hash can tell
    problem = model_cache.cache_problem(folder)
    assert problem is not None and "model.safetensors" in problem and "sampled sha256" in problem


def test_cache_problem_sampled_check_reads_a_small_part_of_each_file(tmp_path, monkeypatch):
    """The check on use costs about 1/256 of the bytes (SAMPLE_WINDOW every SAMPLE_STRIDE), never a full hash."""
    folder, weights = _large_tiny_cache(tmp_path / "m")
    monkeypatch.setattr(model_cache, "file_sha256", lambda p: pytest.fail("hashed in full"))
    read = []
    real_open = open

    class Counting:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def read(self, n):
            data = self.fh.read(n)
            read.append(len(data))
            return data

        def __getattr__(self, name):
            return getattr(self.fh, name)

    monkeypatch.setattr("builtins.open", lambda *a, **k: Counting(real_open(*a, **k)) if a[0] == weights
                        else real_open(*a, **k))
    assert model_cache.cache_problem(folder) is None
    size = weights.stat().st_size
    strides = -(-size // model_cache.SAMPLE_STRIDE)
    assert sum(read) <= (strides + 1) * model_cache.SAMPLE_WINDOW + size // 100  # the windows (+ the header check)


def test_load_or_convert_zeroed_bytes_in_the_converted_cache_convert_again(tmp_path, monkeypatch, caplog):
    """Regression (silent bit-rot served), on a converted cache: the zeroed weights are not installed."""
    from lab.models.quantize import CACHE_FILE, load_or_convert

    monkeypatch.setattr(model_cache, "SAMPLE_STRIDE", 1 << 16)  # the schema's smallest: the tiny file spans several
    cache = tmp_path / "tiny.weights-int8"
    load_or_convert(support.tiny_llama(vocab_size=256, num_layers=2, hidden=128, heads=4), None, "int8", cache)
    size = (cache / CACHE_FILE).stat().st_size
    assert size > 3 * (1 << 16), "precondition: several strides"
    _zero(cache / CACHE_FILE, size // 2, (1 << 16) + model_cache.SAMPLE_WINDOW)
    with caplog.at_level(logging.WARNING, logger="lab"):
        load_or_convert(support.tiny_llama(vocab_size=256, num_layers=2, hidden=128, heads=4), None, "int8", cache)
    assert "damaged" in caplog.text and "sampled sha256 differs" in caplog.text


def test_cache_problem_format_2_manifest_is_hashed_once_then_gains_its_samples(tmp_path, monkeypatch):
    """A cache written before the sampled sha256 existed loads (after one full hash that confirms it) and
    its manifest gains the samples; from then on it is not hashed in full."""
    import json

    folder = _tiny_cache(tmp_path / "m")
    path = folder / model_cache.MANIFEST
    manifest = json.loads(path.read_text())
    for rec in manifest["files"].values():
        del rec["sampled"]
    path.write_text(json.dumps({**manifest, "format": 2}))
    hashed = []
    real = model_cache.file_sha256
    monkeypatch.setattr(model_cache, "file_sha256", lambda p: hashed.append(p.name) or real(p))
    assert model_cache.cache_problem(folder) is None
    assert "model.safetensors" in hashed
    upgraded = json.loads(path.read_text())
    assert upgraded["format"] == model_cache.MANIFEST_FORMAT
    assert all("sampled" in rec for rec in upgraded["files"].values())
    hashed.clear()
    assert model_cache.cache_problem(folder) is None and hashed == []


def test_cache_problem_touched_file_is_hashed_once_and_its_time_recorded(tmp_path, monkeypatch):
    folder = _tiny_cache(tmp_path / "m")
    os.utime(folder / "model.safetensors", ns=(7, 7))  # same bytes, another time
    assert model_cache.cache_problem(folder) is None
    monkeypatch.setattr(model_cache, "file_sha256", lambda p: pytest.fail("the new time was not recorded"))
    assert model_cache.cache_problem(folder) is None


# --------------------------------------------------------------------------- a read-only cache
# Fault class (a read-only cache ends on the unforeseen path): with --weights q4 and a cache folder that
# cannot be written, the model was converted and the run then failed writing the cache.


def test_load_or_convert_cache_that_cannot_be_written_runs_uncached_saying_so(tmp_path, monkeypatch, caplog):
    """Regression (a read-only cache ends on the unforeseen path), simulated so it runs as root too: the
    staging folder cannot be made."""
    import tempfile

    from lab.models.quantize import load_or_convert

    def refused(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    cache = tmp_path / "tiny.weights-int8"
    with caplog.at_level(logging.WARNING, logger="lab"):
        summary = load_or_convert(support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2), None,
                                  "int8", cache)
    assert summary["layers"] == {"int8": 8} and not cache.exists()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "running without caching" in warnings[0] and "Permission denied" in warnings[0]


def test_load_or_convert_damaged_cache_that_cannot_be_moved_aside_runs_uncached(tmp_path, monkeypatch, caplog):
    from lab.models.quantize import LAYERS_FILE, load_or_convert

    cache = tmp_path / "tiny.weights-int8"
    load_or_convert(support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2), None, "int8", cache)
    (cache / LAYERS_FILE).write_text("{")  # damaged
    monkeypatch.setattr(model_cache, "discard", lambda folder: (_ for _ in ()).throw(PermissionError(13, "denied")))
    with caplog.at_level(logging.WARNING, logger="lab"):
        summary = load_or_convert(support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2), None,
                                  "int8", cache)
    assert summary["layers"] == {"int8": 8}
    assert "cannot be moved aside" in caplog.text and "for this run only" in caplog.text


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into a read-only folder anyway")
def test_load_or_convert_read_only_cache_folder_runs_uncached(tmp_path, caplog):
    """Regression (a read-only cache ends on the unforeseen path), with a real read-only folder."""
    from lab.models.quantize import load_or_convert

    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(0o555)
    try:
        with caplog.at_level(logging.WARNING, logger="lab"):
            summary = load_or_convert(support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2), None,
                                      "int8", root / "tiny.weights-int8")
    finally:
        root.chmod(0o755)
    assert summary["layers"] == {"int8": 8} and "running without caching" in caplog.text


def test_load_model_float32_cache_that_cannot_be_written_is_one_line_naming_lab_cache_dir(tmp_path, monkeypatch):
    """The float32 cache is what transformers loads, so it cannot be skipped: a folder that cannot be written
    is refused before the dequantization, in one line naming the folder and LAB_CACHE_DIR."""
    from lab.models import loading as models

    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "ro"))
    monkeypatch.setattr(models, "_writable", lambda folder: False)
    built = []
    _patch_dequantization(monkeypatch, built)
    with pytest.raises(models.ModelUnavailableError) as info:
        models.load_model("smollm2", device="cpu")
    assert built == [] and "LAB_CACHE_DIR" in str(info.value) and str(tmp_path / "ro") in str(info.value)
    assert "\n" not in str(info.value)


def test_load_or_convert_cache_lacking_a_layer_of_the_model_converts_again_naming_it(tmp_path, caplog):
    """Fault class (silently wrong numbers): a ``layers.json`` without ``lm_head``, its summary and
    manifest kept consistent, ran that layer in float32 while the report said the cache's weights."""
    import json

    from lab.models.qlinear import Int8Linear
    from lab.models.quantize import LAYERS_FILE, load_or_convert

    cache = tmp_path / "tiny.weights-int8"
    load_or_convert(support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2), None, "int8", cache)
    layers = json.loads((cache / LAYERS_FILE).read_text())
    del layers["layers"]["lm_head"]
    layers["summary"]["layers"]["int8"] -= 1
    (cache / LAYERS_FILE).write_text(json.dumps(layers))
    source = json.loads((cache / model_cache.MANIFEST).read_text())["source"]
    model_cache.write_manifest(cache, source)  # consistent: the cache reads as whole
    assert model_cache.cache_problem(cache, index=LAYERS_FILE) is None
    model = support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2)
    with caplog.at_level(logging.WARNING, logger="lab"):
        summary = load_or_convert(model, None, "int8", cache)
    assert summary["layers"] == {"int8": 8} and isinstance(model.lm_head, Int8Linear)
    warning = next(r.getMessage() for r in caplog.records if "lm_head" in r.getMessage())
    assert str(cache) in warning and "damaged" in warning and "converting again" in warning
    assert "lm_head" in json.loads((cache / LAYERS_FILE).read_text())["layers"]  # rebuilt whole


@pytest.mark.parametrize("gguf_type, unlisted", [("F32", []), ("Q6_K", ["lm_head"]), ("Q4_K", ["lm_head"])])
def test_unlisted_layers_under_q4_spares_only_a_layer_the_conversion_leaves_float32(monkeypatch, gguf_type, unlisted):
    from types import SimpleNamespace

    from lab.models import quantize

    model = support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2)
    listed = {name: "q4" for name, m in model.named_modules() if type(m).__name__ == "Linear" and name != "lm_head"}
    tensor = SimpleNamespace(tensor_type=SimpleNamespace(name=gguf_type))
    monkeypatch.setattr(quantize, "linear_tensors", lambda model, reader: {"lm_head": (tensor, None)})
    monkeypatch.setattr("gguf.GGUFReader", lambda path: None)
    assert quantize.unlisted_layers(model, listed, "q4", "m.gguf") == unlisted
    assert quantize.unlisted_layers(model, listed, "int8", None) == ["lm_head"]
