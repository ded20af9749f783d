"""lab.models.fewrow: float32 passes of a few rows multiplied as ``W @ X^T``, padded to an even row count.

Fault class: a faster path that is silently another function (a padded row leaking into the output,
rows transposed or swapped, the bias dropped or added twice, the wrong rows kept), a path taken where
it was not measured (another dtype or device, a long prefill), a switch that unties tied weights, and
a path that is never taken at all (a no-op "optimisation" every equality test would pass).
"""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F

from lab.models import fewrow
from lab.models.fewrow import MAX_ROWS, REL_TOL, FewRowLinear, few_row_linear, use_few_row_gemm
from lab.models.loading import load_model
from lab.models.source import model_source
from tests import support

# float32, dot products of 48 terms of unit-normal values: REL_TOL of the largest output
ATOL = 1e-5


def _inputs(shape, out_features=40, in_features=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, in_features, generator=g)
    w = torch.randn(out_features, in_features, generator=g)
    b = torch.randn(out_features, generator=g)
    return x, w, b


@pytest.mark.parametrize("shape", [(1,), (2,), (3,), (4,), (1, 1), (1, 3), (2, 2), (1, 1, 4)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_few_row_linear_equals_f_linear_row_for_row(shape, with_bias):
    """Every row of the padded ``W @ X^T`` is that row's ``F.linear``: same shape, same values up to rounding."""
    x, w, b = _inputs(shape)
    bias = b if with_bias else None
    got = few_row_linear(x, w, bias)
    want = F.linear(x, w, bias)
    assert got.shape == want.shape and got.dtype == torch.float32 and got.is_contiguous()
    torch.testing.assert_close(got, want, rtol=REL_TOL, atol=ATOL)


def test_few_row_linear_rows_keep_their_order_and_padding_never_shows():
    """Distinct rows come back in order, and a 3-row pass (padded to 4) equals each row passed alone."""
    x, w, b = _inputs((3,))
    together = few_row_linear(x, w, b)
    alone = torch.cat([few_row_linear(x[i:i + 1], w, b) for i in range(3)])
    torch.testing.assert_close(together, alone, rtol=REL_TOL, atol=ATOL)
    assert not torch.allclose(together[0], together[1])  # distinct inputs: a swap would show


def test_few_row_linear_does_not_change_its_input():
    x, w, b = _inputs((3,))
    before = x.clone()
    few_row_linear(x, w, b)
    assert torch.equal(x, before)


@pytest.mark.parametrize("rows", [0, MAX_ROWS + 1])
def test_few_row_linear_refuses_a_row_count_outside_its_range(rows):
    x, w, _ = _inputs((rows,))
    with pytest.raises(ValueError, match=rf"1 to {MAX_ROWS} rows, got {rows}"):
        few_row_linear(x, w)


def test_few_row_linear_refuses_another_dtype():
    x, w, _ = _inputs((1,))
    with pytest.raises(ValueError, match="float32"):
        few_row_linear(x.double(), w.double())


@pytest.mark.parametrize("rows,want", [(1, 2), (2, 2), (3, 4), (4, 4)])
def test_padded_rows_is_the_even_count_measured_fast(rows, want):
    assert fewrow._padded_rows(rows) == want


def _counting_mm(monkeypatch):
    calls = []
    real = torch.mm

    def mm(a, b):
        calls.append((tuple(a.shape), tuple(b.shape)))
        return real(a, b)

    monkeypatch.setattr(fewrow.torch, "mm", mm)
    return calls


@pytest.mark.parametrize("rows", [1, 2, 3, 4])
def test_layer_takes_the_few_row_path_up_to_max_rows(monkeypatch, rows):
    """The path is taken: one ``W @ X^T`` product with the padded row count, not ``F.linear``."""
    layer = torch.nn.Linear(48, 40)
    layer.__class__ = FewRowLinear
    calls = _counting_mm(monkeypatch)
    x = torch.randn(1, rows, 48)
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=REL_TOL, atol=ATOL)
    assert calls == [((40, 48), (48, fewrow._padded_rows(rows)))]


@pytest.mark.parametrize("x", [torch.randn(1, MAX_ROWS + 1, 48), torch.randn(1, 1, 48).double(),
                               torch.randn(1, 1, 48).bfloat16()], ids=["prefill", "float64", "bfloat16"])
def test_layer_leaves_other_passes_to_f_linear(monkeypatch, x):
    layer = torch.nn.Linear(48, 40).to(x.dtype)
    layer.__class__ = FewRowLinear
    calls = _counting_mm(monkeypatch)
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))
    assert calls == []


def test_use_few_row_gemm_switches_plain_float32_layers_and_keeps_ties():
    model = support.tiny_llama(vocab_size=64, num_layers=2, hidden=32, heads=2)
    model.config.tie_word_embeddings = True
    model.tie_weights()
    plain = sum(type(m) is torch.nn.Linear for m in model.modules())
    ids = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        before = model(ids).logits
    assert use_few_row_gemm(model) == plain > 0
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    assert model.lm_head.weight is model.model.embed_tokens.weight
    with torch.inference_mode():
        torch.testing.assert_close(model(ids).logits, before, rtol=REL_TOL, atol=ATOL)
    assert use_few_row_gemm(model) == 0  # already switched


def test_use_few_row_gemm_leaves_subclasses_and_other_dtypes():
    class Quantized(torch.nn.Linear):
        pass

    model = torch.nn.Sequential(Quantized(8, 8), torch.nn.Linear(8, 8).bfloat16(), torch.nn.Linear(8, 8))
    assert use_few_row_gemm(model) == 1
    assert [type(m) for m in model] == [Quantized, torch.nn.Linear, FewRowLinear]


def test_plain_env_keeps_the_plain_layer(monkeypatch):
    monkeypatch.setenv(fewrow.PLAIN_ENV, "1")
    model = torch.nn.Sequential(torch.nn.Linear(8, 8))
    assert use_few_row_gemm(model) == 0 and type(model[0]) is torch.nn.Linear


@pytest.fixture
def measured(monkeypatch):
    """few_row_pays measuring (no LAB_PLAIN_LINEAR), with an empty record of choices made."""
    monkeypatch.delenv(fewrow.PLAIN_ENV, raising=False)
    monkeypatch.setattr(fewrow, "_CHOSEN", {})


@pytest.fixture
def clock(monkeypatch):
    """A clock that moves only when a slowed function runs (:func:`_slow`): the choice never depends on how
    busy the machine is."""
    now = [0.0]
    monkeypatch.setattr(fewrow, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    return now


def _slow(fn, clock, seconds):
    def slowed(*args):
        clock[0] += seconds
        return fn(*args)
    return slowed


def test_few_row_pays_where_the_plain_layout_is_slower(measured, clock, monkeypatch):
    monkeypatch.setattr(fewrow, "F", types.SimpleNamespace(linear=_slow(F.linear, clock, 0.002)))
    monkeypatch.setattr(fewrow, "few_row_linear", _slow(fewrow.few_row_linear, clock, 0.001))
    assert fewrow.few_row_pays(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 32)))


def test_few_row_does_not_pay_where_it_is_slower_and_the_choice_is_kept(measured, clock, monkeypatch):
    """The negative control: the layout's own pass made slower (the Intel Xeon's case) is refused, and
    the choice holds for the process for those shapes."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 32))
    monkeypatch.setattr(fewrow, "F", types.SimpleNamespace(linear=_slow(F.linear, clock, 0.001)))
    monkeypatch.setattr(fewrow, "few_row_linear", _slow(fewrow.few_row_linear, clock, 0.002))
    assert not fewrow.few_row_pays(model)
    monkeypatch.setattr(fewrow, "few_row_linear", lambda *a: pytest.fail("timed again"))
    assert not fewrow.few_row_pays(model)


def test_few_row_within_its_margin_does_not_pay(measured, clock, monkeypatch):
    """A layout 5 % faster is inside PAY_MARGIN (10 %): the plain layout is kept."""
    monkeypatch.setattr(fewrow, "F", types.SimpleNamespace(linear=_slow(F.linear, clock, 0.00105)))
    monkeypatch.setattr(fewrow, "few_row_linear", _slow(fewrow.few_row_linear, clock, 0.001))
    assert not fewrow.few_row_pays(torch.nn.Sequential(torch.nn.Linear(64, 64)))


@pytest.mark.parametrize("value, pays", [("1", False), ("0", True)])
def test_plain_env_decides_without_timing(measured, monkeypatch, value, pays):
    monkeypatch.setenv(fewrow.PLAIN_ENV, value)
    monkeypatch.setattr(fewrow, "few_row_linear", lambda *a: pytest.fail("timed"))
    assert fewrow.few_row_pays(torch.nn.Sequential(torch.nn.Linear(8, 8))) is pays


def test_few_row_pays_without_float32_cpu_layers_is_false(measured):
    assert not fewrow.few_row_pays(torch.nn.Sequential(torch.nn.Linear(8, 8).bfloat16()))


def test_load_model_records_the_switched_layers(tmp_path):
    folder = tmp_path / "tiny"
    support.tiny_llama(vocab_size=64, num_layers=1, hidden=32, heads=2).save_pretrained(folder)
    support.chatml_tokenizer().save_pretrained(folder)
    model, _ = load_model(str(folder), device="cpu", dtype="float32")
    n = sum(isinstance(m, FewRowLinear) for m in model.modules())
    assert n > 0 and model_source(model).few_row_layers == n
    assert model_source(model).as_dict()["few_row_layers"] == n
