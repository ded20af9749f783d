"""GGUF 4-bit codes and the quantized linear layers, on synthetic blocks (no weights).

The reference for decoding is gguf-py's own float32 dequantizer (``gguf.quants.dequantize``):
the lab's codes, scales and offsets must reproduce it bit for bit. The layers are checked
against a dense float32 matmul by the weight they report (:meth:`dequantized`), within the
bfloat16 rounding of activations and scales that the kernels' fast path implies.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize

from lab.models import gguf_blocks
from lab.models.qlinear import CastLinear, Int4Linear, Int8Linear, check_cpu, set_dense_rows, unpack_int4
from lab.models.weights import WEIGHTS, check_weights
from tests.provenance import ENVIRONMENT, MACHINE_LOAD

# bfloat16 keeps 8 significant bits: a dot product of bfloat16-rounded activations and
# weights is within a few 2^-8 of the float32 one, relative to its norm.
BF16_RELATIVE = 2.0 ** -6


def _random_blocks(type_name: str, n_rows: int, blocks_per_row: int, seed: int) -> np.ndarray:
    """``uint8 (n_rows, blocks_per_row * block_bytes)`` of valid blocks (finite float16 fields)."""
    rng = np.random.default_rng(seed)
    block_bytes = gguf_blocks.Q4_K_BYTES if type_name == "Q4_K" else gguf_blocks.Q4_1_BYTES
    raw = rng.integers(0, 256, size=(n_rows * blocks_per_row, block_bytes), dtype=np.uint8)
    halves = rng.normal(0, 0.05, size=(n_rows * blocks_per_row, 2)).astype(np.float16)
    raw[:, 0:4] = halves.view(np.uint8).reshape(-1, 4)  # d, dmin (Q4_K) or d, m (Q4_1)
    return raw.reshape(n_rows, blocks_per_row * block_bytes)


@pytest.mark.parametrize("type_name", gguf_blocks.DECODABLE)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decode_random_blocks_reproduce_gguf_dequantization_bit_for_bit(type_name, seed):
    """scale * codes + offset == gguf-py's float32 dequantization, for every weight."""
    per_row = 2 if type_name == "Q4_K" else 8
    raw = _random_blocks(type_name, n_rows=5, blocks_per_row=per_row, seed=seed)
    codes, scale, offset = gguf_blocks.decode(type_name, raw)
    reference = gguf_dequantize(raw, GGMLQuantizationType[type_name])
    assert codes.dtype == np.uint8 and codes.max() <= 15
    assert scale.shape == offset.shape == (5, codes.shape[1] // gguf_blocks.GROUP)
    assert np.array_equal(gguf_blocks.dequantize(codes, scale, offset), reference)


@pytest.mark.parametrize("type_name", gguf_blocks.DECODABLE)
def test_decode_negative_control_swapped_nibbles_are_caught(type_name):
    """The bit-for-bit comparison rejects a decoder that reads high nibbles before low ones."""
    raw = _random_blocks(type_name, n_rows=3, blocks_per_row=2, seed=7)
    codes, scale, offset = gguf_blocks.decode(type_name, raw)
    half = 16 if type_name == "Q4_1" else 32
    swapped = codes.reshape(3, -1, 2, half)[:, :, ::-1].reshape(codes.shape)
    reference = gguf_dequantize(raw, GGMLQuantizationType[type_name])
    assert not np.array_equal(gguf_blocks.dequantize(swapped, scale, offset), reference)


def test_decode_bad_input_is_refused_naming_the_problem():
    with pytest.raises(ValueError, match="whole number"):
        gguf_blocks.decode_q4_k(np.zeros((2, 100), dtype=np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        gguf_blocks.decode_q4_1(np.zeros((2, 20), dtype=np.int16))
    with pytest.raises(ValueError, match="Q6_K"):
        gguf_blocks.decode("Q6_K", np.zeros((2, 210), dtype=np.uint8))


def _relative_error(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y - ref).norm() / ref.norm())


def test_int4_linear_from_gguf_codes_matches_dense_matmul_of_its_weight():
    """Int4Linear(x) == x @ W^T + b within bfloat16 rounding, W the decoded codes' weight."""
    raw = _random_blocks("Q4_K", n_rows=64, blocks_per_row=1, seed=3)
    codes, scale, offset = gguf_blocks.decode("Q4_K", raw)
    weight = torch.from_numpy(gguf_blocks.dequantize(codes, scale, offset))
    bias = torch.randn(64)
    layer = Int4Linear.from_codes(torch.from_numpy(codes), torch.from_numpy(scale), torch.from_numpy(offset), bias)
    x = torch.randn(2, 3, 256, generator=torch.Generator().manual_seed(0))
    y = layer(x)
    assert y.shape == (2, 3, 64) and y.dtype == torch.float32
    assert _relative_error(y, x @ weight.T + bias) < BF16_RELATIVE
    assert _relative_error(layer.dequantized(), weight) < BF16_RELATIVE


def test_int4_linear_negative_control_wrong_zero_point_is_caught():
    """The same tolerance rejects a layer built without the (q - 8) zero-point shift."""
    raw = _random_blocks("Q4_1", n_rows=32, blocks_per_row=8, seed=4)
    codes, scale, offset = gguf_blocks.decode("Q4_1", raw)
    weight = torch.from_numpy(gguf_blocks.dequantize(codes, scale, offset))
    broken = Int4Linear.from_codes(torch.from_numpy(codes), torch.from_numpy(scale),
                                   torch.from_numpy(offset - 8 * scale))
    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(1))
    assert _relative_error(broken(x), x @ weight.T) > BF16_RELATIVE


@pytest.mark.parametrize("n, k", [(64, 256), (32, 64), (96, 96)])
def test_unpack_int4_recovers_the_codes_torch_packed(n, k):
    """The CPU pack's layout is measured, not assumed: unpacking gives back every code, and the weight
    rebuilt from them equals what the kernel multiplies by (read through an identity matrix)."""
    codes = torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=torch.Generator().manual_seed(n + k))
    scale, offset = torch.rand(n, k // 32) * 0.01, -torch.rand(n, k // 32) * 0.08
    layer = Int4Linear.from_codes(codes, scale, offset)
    assert torch.equal(unpack_int4(layer.packed, n, k), codes)
    through_kernel = torch.ops.aten._weight_int4pack_mm_for_cpu(torch.eye(k, dtype=torch.bfloat16), layer.packed,
                                                                 32, layer.scale_zeros).float().t()
    assert torch.equal(layer.dequantized().to(torch.bfloat16).float(), through_kernel)


def test_unpack_int4_negative_control_another_layer_shape_is_refused():
    layer = Int4Linear.from_codes(torch.zeros(64, 64, dtype=torch.uint8), torch.ones(64, 2), torch.zeros(64, 2))
    with pytest.raises(ValueError, match="packed must be uint8"):
        unpack_int4(layer.packed, 32, 128)


@pytest.mark.parametrize("kind", ["q4", "int8"])
def test_dense_rows_sends_many_row_passes_to_the_dense_weight_and_single_rows_to_the_kernel(kind):
    """With dense_rows = 2 a one-row pass is the kernel's, bit for bit, and a many-row pass is x W^T within
    bfloat16 rounding; set_dense_rows builds the dense copy, and unset frees it."""
    weight = torch.randn(64, 256, generator=torch.Generator().manual_seed(5)) * 0.05
    if kind == "q4":
        raw = _random_blocks("Q4_K", n_rows=64, blocks_per_row=1, seed=6)
        codes, scale, offset = gguf_blocks.decode("Q4_K", raw)
        weight = torch.from_numpy(gguf_blocks.dequantize(codes, scale, offset))
        layer = Int4Linear.from_codes(torch.from_numpy(codes), torch.from_numpy(scale), torch.from_numpy(offset))
    else:
        layer = Int8Linear.from_weight(weight)
    model = torch.nn.Sequential(layer)
    one, many = torch.randn(1, 256), torch.randn(24, 256)
    kernel_one = layer(one)
    assert set_dense_rows(model, 2) == 1
    assert layer.dense is not None and torch.equal(layer(one), kernel_one)
    assert _relative_error(layer(many), many @ layer.dequantized().T) < BF16_RELATIVE
    set_dense_rows(model, None)
    assert layer.dense is None and layer.dense_rows is None
    with pytest.raises(ValueError, match="dense_rows=0"):
        set_dense_rows(model, 0)


def test_int4_linear_bad_codes_are_refused():
    with pytest.raises(ValueError, match="0..15"):
        Int4Linear.from_codes(torch.full((8, 32), 16), torch.ones(8, 1), torch.zeros(8, 1))
    with pytest.raises(ValueError, match="multiple"):
        Int4Linear.from_codes(torch.zeros(8, 48, dtype=torch.uint8), torch.ones(8, 1), torch.zeros(8, 1))


def test_int8_linear_per_channel_error_bounded_by_half_a_step():
    """Each weight of Int8Linear is within half a quantization step (absmax / 254) of the original."""
    weight = torch.randn(48, 96, generator=torch.Generator().manual_seed(2))
    layer = Int8Linear.from_weight(weight)
    step = weight.abs().amax(dim=1, keepdim=True) / 127
    # the scales are stored in bfloat16: allow their rounding on top of half a step
    assert ((layer.dequantized() - weight).abs() <= step * (0.5 + 127 * 2.0 ** -8)).all()
    x = torch.randn(5, 96, generator=torch.Generator().manual_seed(3))
    assert _relative_error(layer(x), x @ weight.T) < 4 * BF16_RELATIVE


def test_cast_linear_holds_bfloat16_and_returns_input_dtype():
    weight = torch.randn(16, 32)
    layer = CastLinear(weight, torch.zeros(16))
    x = torch.randn(3, 32)
    assert layer.weight.dtype == torch.bfloat16 and layer(x).dtype == torch.float32
    assert _relative_error(layer(x), x @ weight.T) < BF16_RELATIVE


def test_weights_names_and_device_are_checked():
    assert check_weights("q4") == "q4" and set(WEIGHTS) == {"float32", "bfloat16", "int8", "q4"}
    with pytest.raises(ValueError, match="weights='int3'"):
        check_weights("int3")
    with pytest.raises(ValueError, match="CPU only"):
        check_cpu("cuda:0")
    check_cpu("cpu")


def test_q4_with_another_dtype_is_refused_before_anything_loads():
    """The file's codes are checked against float32 weights: a bfloat16 load would fail that check
    with an error the user cannot act on (seen on a fresh cache: `lab study --draft-weights q4` loaded
    the draft in the study's bfloat16), so the combination is refused in one line first."""
    from lab.models.loading import load_model

    with pytest.raises(ValueError, match="weights='q4'.*bfloat16 does not apply"):
        load_model("smollm2", device="cpu", dtype="bfloat16", weights="q4")


def _tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("weights", ["int8", "bfloat16"])
def test_converted_cache_round_trip_gives_the_same_logits(tmp_path, weights, monkeypatch):
    """A model rebuilt from the converted cache (no conversion) computes exactly what the converted one did."""
    from lab.models import quantize
    from lab.models.quantize import load_or_convert

    ids = torch.arange(10).unsqueeze(0)
    first = _tiny_model()
    summary = load_or_convert(first, None, weights, tmp_path / "tiny.weights")
    assert summary["layers"] == {weights: 2 * 7 + 1}  # q, k, v, o, gate, up, down per layer; the LM head

    def no_conversion(*args, **kwargs):
        raise AssertionError("the cache was not used: the model was converted again")

    monkeypatch.setattr(quantize, "quantize_model", no_conversion)
    second = _tiny_model()
    assert load_or_convert(second, None, weights, tmp_path / "tiny.weights") == summary
    with torch.no_grad():
        assert torch.equal(first(ids).logits, second(ids).logits)
        assert not torch.equal(first(ids).logits, _tiny_model()(ids).logits)  # control: it is not float32


def test_converted_cache_damaged_is_rebuilt_with_a_warning(tmp_path, caplog):
    """A corrupted cache file (same size, other bytes) is detected by the manifest, discarded and rebuilt."""
    from lab.models.quantize import CACHE_FILE, load_or_convert

    cache = tmp_path / "tiny.weights"
    load_or_convert(_tiny_model(), None, "int8", cache)
    data = bytearray((cache / CACHE_FILE).read_bytes())
    data[-5:] = b"\x00\x01\x02\x03\x04"
    (cache / CACHE_FILE).write_bytes(bytes(data))
    import os

    os.utime(cache / CACHE_FILE, (1, 1))  # a changed mtime makes the manifest hash the file again
    with caplog.at_level("WARNING"):
        load_or_convert(_tiny_model(), None, "int8", cache)
    assert "damaged" in caplog.text and "was modified" in caplog.text
    assert load_or_convert(_tiny_model(), None, "int8", cache)["layers"] == {"int8": 15}


def test_int4_layer_round_trips_through_portable_codes():
    """Int4Linear -> portable nibbles -> Int4Linear gives the same outputs (the pack is rebuilt on load)."""
    from torch import nn

    from lab.models.quantize import install_portable, portable_tensors

    raw = _random_blocks("Q4_1", n_rows=32, blocks_per_row=2, seed=5)
    codes, scale, offset = gguf_blocks.decode("Q4_1", raw)
    layer = Int4Linear.from_codes(torch.from_numpy(codes), torch.from_numpy(scale), torch.from_numpy(offset))
    layer.codes_for_cache = torch.from_numpy(codes[:, 0::2] | (codes[:, 1::2] << 4))
    holder = nn.Sequential(layer)
    tensors, kinds = portable_tensors(holder)
    rebuilt = nn.Sequential(nn.Linear(64, 32, bias=False))
    install_portable(rebuilt, tensors, kinds)
    x = torch.randn(3, 64)
    assert isinstance(rebuilt[0], Int4Linear) and torch.equal(rebuilt(x), holder(x))


def test_compare_identical_log_probs_agree_everywhere_with_zero_kl():
    from lab.bench.weights import compare

    lp = [torch.log_softmax(torch.randn(5, 11, generator=torch.Generator().manual_seed(s)), -1) for s in (0, 1)]
    row = compare(lp, [t.clone() for t in lp], "same")
    assert (row.positions, row.top1_agree) == (10, 10)
    assert row.mean_kl_nats == pytest.approx(0.0, abs=1e-7) and row.max_abs_entropy_shift_bits < 1e-6


def test_compare_negative_control_reversed_vocabulary_disagrees_and_has_positive_kl():
    """The same comparison reports a model whose logits are the reference's reversed as far off."""
    from lab.bench.weights import compare

    lp = [torch.log_softmax(3 * torch.randn(20, 9, generator=torch.Generator().manual_seed(2)), -1)]
    row = compare(lp, [lp[0].flip(-1)], "reversed")
    assert row.top1_agree < row.positions // 2 and row.mean_kl_nats > 0.1
    with pytest.raises(ValueError, match="same texts and shapes"):
        compare(lp, [lp[0][:3]], "short")


def test_bench_weights_refuses_a_model_without_gguf_codes(capsys):
    from lab import cli

    assert cli.main(["bench-weights", "--model", "Qwen/Qwen2.5-0.5B-Instruct"]) == 2
    assert "GGUF profile" in capsys.readouterr().err


def test_bench_weights_refuses_zero_steps_before_loading(capsys, monkeypatch):
    from lab import cli
    from lab.models import loading

    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("loaded a model before refusing"))
    assert cli.main(["bench-weights", "--model", "smollm2", "--steps", "0"]) == 2
    assert "--steps=0" in capsys.readouterr().err


def test_weights_q4_refused_for_a_hub_model_before_loading(capsys):
    from lab import cli

    assert cli.main(["entropy", "Hi", "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--weights", "q4"]) == 2
    assert "--weights q4" in capsys.readouterr().err


def test_layers_from_the_cache_sit_on_aligned_memory(tmp_path):
    """Fault class: a SIGSEGV in _weight_int8pack_mm on a weight read from the cache at an address 8 bytes off
    a 64-byte boundary (safetensors' data offsets). Installed buffers are fresh, 64-byte aligned allocations."""
    from safetensors.torch import load_file

    from lab.models.quantize import CACHE_FILE, load_or_convert

    cache = tmp_path / "tiny.weights"
    load_or_convert(_tiny_model(), None, "int8", cache)
    raw = load_file(str(cache / CACHE_FILE))
    assert any(t.data_ptr() % 64 for t in raw.values()), "precondition: the file's tensors are not all aligned"
    model = _tiny_model()
    load_or_convert(model, None, "int8", cache)
    buffers = [m.weight_int8 for m in model.modules() if isinstance(m, Int8Linear)]
    assert buffers and all(b.data_ptr() % 64 == 0 for b in buffers)


def test_converted_cache_from_another_source_or_conversion_is_converted_again(tmp_path, caplog, monkeypatch):
    """Fault class (a stale converted cache served): the converted cache was keyed by the GGUF file's name
    only."""
    import json

    from lab.models import quantize
    from lab.models.quantize import LAYERS_FILE, load_or_convert

    src = tmp_path / "model.gguf"
    src.write_bytes(b"GGUF" + bytes(64))
    cache = tmp_path / "tiny.weights"
    load_or_convert(_tiny_model(), None, "int8", cache, source=src)
    calls = []
    real = quantize.quantize_model
    monkeypatch.setattr(quantize, "quantize_model", lambda *a, **k: calls.append(1) or real(*a, **k))
    load_or_convert(_tiny_model(), None, "int8", cache, source=src)
    assert calls == []  # control: the same source is served from the cache
    src.write_bytes(b"GGUF" + bytes(63) + b"\x01")  # same name and size, another file
    os.utime(src, ns=(5, 5))
    with caplog.at_level("WARNING"):
        load_or_convert(_tiny_model(), None, "int8", cache, source=src)
    assert calls == [1] and "stale" in caplog.text and "sha256 differs" in caplog.text
    meta = json.loads((cache / LAYERS_FILE).read_text())
    assert meta["conversion"] == quantize.CONVERSION_VERSION
    monkeypatch.setattr(quantize, "CONVERSION_VERSION", quantize.CONVERSION_VERSION + 1)
    caplog.clear()
    with caplog.at_level("WARNING"):
        load_or_convert(_tiny_model(), None, "int8", cache, source=src)
    assert calls == [1, 1] and "conversion version" in caplog.text


@pytest.mark.parametrize("weights, family, bytes_per_weight", [("int8", "int8", 1), ("bfloat16", "dense", 2)])
def test_weight_bytes_are_each_layers_codes_and_scales(weights, family, bytes_per_weight):
    """The bytes a step reads, by family, equal the layers' own sizes computed from their shapes."""
    from torch import nn

    from lab.bench.weights import weight_bytes
    from lab.models.quantize import quantize_model

    model = _tiny_model()
    shapes = [(m.out_features, m.in_features) for m in model.modules() if isinstance(m, nn.Linear)]
    quantize_model(model, None, weights)
    scales = sum(n for n, _ in shapes) * 2 if weights == "int8" else 0  # bfloat16 per output channel
    assert weight_bytes(model) == {family: sum(n * k for n, k in shapes) * bytes_per_weight + scales}
    assert weight_bytes(_tiny_model()) == {"dense": sum(n * k for n, k in shapes) * 4}  # control: float32


def test_step_profile_puts_the_int8_kernels_time_in_their_family():
    """Every family is reported; an int8 model spends kernel time in int8 and none in dense matmuls, and
    the rate is its bytes over that time; a float32 model (the control) the other way round."""
    from lab.bench.weights import FAMILIES, step_profile
    from lab.models.quantize import quantize_model

    ids = torch.arange(12).unsqueeze(0)
    model = _tiny_model()
    quantize_model(model, None, "int8")
    p = step_profile(model, ids, steps=3, weights="int8")
    assert set(p.family_ms) == set(FAMILIES) and p.context == 12 and p.steps == 3 and p.step_ms > 0
    assert p.family_ms["int8"] > 0 and p.family_ms["dense"] == 0 and p.gb_per_s("dense") is None
    assert p.gb_per_s("int8") == pytest.approx(p.family_bytes["int8"] / p.family_ms["int8"] / 1e6)
    control = step_profile(_tiny_model(), ids, steps=3, weights="float32")
    assert control.family_ms["int8"] == 0 and control.family_ms["dense"] > 0


def test_step_profile_refuses_bad_input():
    from lab.bench.weights import step_profile

    with pytest.raises(ValueError, match="steps=0"):
        step_profile(_tiny_model(), torch.arange(4).unsqueeze(0), steps=0)
    with pytest.raises(ValueError, match=r"\(1, S\)"):
        step_profile(_tiny_model(), torch.arange(4), steps=1)


def test_bench_weights_report_json_holds_each_step_profile_with_its_rates(tmp_path):
    """report.json of ``lab bench-weights`` is its kind's typed report in the file's order: each step profile's
    fields then its GB/s for every family (null where a family reads nothing), a KL that is not finite as null;
    read back through the kind, it is the report written. Fault class: a report whose keys or order drift from
    what earlier reports hold."""
    import dataclasses
    import json

    from lab.bench.weights import FAMILIES, step_profile
    from lab.kinds.bench_weights import KIND, KernelRow, NumericsRow, Report
    from lab.models.quantize import quantize_model
    from lab.reports import ReportDir

    model = _tiny_model()
    quantize_model(model, None, "int8")
    profile = step_profile(model, torch.arange(12).unsqueeze(0), steps=2, weights="int8")
    report = Report(
        model="smollm2", gamma=5, repeats=1, texts=1, kernels=[KernelRow("Q8_0", "int8", 2, 64, 1.5, 3)],
        numerics=[NumericsRow("int8", 12, 11, float("nan"), 0.5, 0.01, 0.1)], torch_threads=1, steps=2,
        step_context=12, file_linear_bytes={"Q8_0": 99}, step_profiles=[profile.row()], machine_load=MACHINE_LOAD,
        environment=ENVIRONMENT)
    ReportDir(tmp_path, tmp_path, KIND).write_report(report)
    data = json.loads((tmp_path / "report.json").read_text())
    assert list(data) == ["kind", "format", "model", "gamma", "repeats", "texts", "kernels", "numerics",
                          "torch_threads", "steps", "step_context", "file_linear_bytes", "step_profiles",
                          "machine_load", "environment"]
    (written,) = data["step_profiles"]
    assert list(written) == ["weights", "context", "steps", "step_ms", "family_ms", "family_bytes", "gb_per_s"]
    assert written["gb_per_s"] == {f: profile.gb_per_s(f) for f in FAMILIES} and written["gb_per_s"]["dense"] is None
    assert data["numerics"][0]["mean_kl_nats"] is None and data["kernels"][0]["verify_ms"] == 3
    assert KIND.read(data) == dataclasses.replace(report, numerics=[dataclasses.replace(report.numerics[0],
                                                                                        mean_kl_nats=None)])
