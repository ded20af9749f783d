"""The busy-machine rule shared by every bench (lab/machine.py)."""

from __future__ import annotations

import os

import pytest
import torch

from lab import machine
from lab.machine import BUSY_MARGIN, LoadLog, busy_warning, is_busy, sample_load, set_threads


def _fake_load(monkeypatch, *values):
    it = iter(values)
    monkeypatch.setattr(os, "getloadavg", lambda: (next(it), 0.0, 0.0))


def test_sample_load_reads_load_average_and_torch_threads(monkeypatch):
    _fake_load(monkeypatch, 1.25)
    s = sample_load("before x")
    assert (s.label, s.load_1m, s.torch_threads) == ("before x", 1.25, torch.get_num_threads())


@pytest.mark.parametrize("load, threads, busy", [(1.4, 1, False), (1.6, 1, True), (2.5, 2, False), (2.51, 2, True)])
def test_is_busy_rule_is_threads_plus_margin(load, threads, busy):
    """busy <=> 1-min load > threads + BUSY_MARGIN (the bench's own threads explain that much load)."""
    s = machine.LoadSample("x", load, 0.0, 0.0, torch_threads=threads, cpu_count=2, wall_s=0.0)
    assert BUSY_MARGIN == 0.5 and is_busy(s) is busy


def test_load_log_samples_before_and_after_each_method_and_warns_when_busy(monkeypatch):
    _fake_load(monkeypatch, 0.2, 0.3, 0.4, 3.9)
    log = LoadLog(threads=1)
    with log.around("a"):
        pass
    with log.around("b"):
        pass
    summary = log.summary()
    assert [s["label"] for s in summary["samples"]] == ["before a", "after a", "before b", "after b"]
    assert summary["per_method"]["b"]["load_1m_after"] == [3.9]
    assert summary["busy"] and summary["busy_methods"] == ["b"] and summary["max_load_1m"] == 3.9
    warning = busy_warning(log.record())
    assert "WARNING: the machine was busy" in warning and "+ 0.5" in warning


def test_load_log_quiet_machine_gives_no_warning_negative_control(monkeypatch):
    _fake_load(monkeypatch, 0.2, 1.1)
    log = LoadLog(threads=1)
    with log.around("a"):
        pass
    assert not log.summary()["busy"] and busy_warning(log.record()) is None


def test_load_log_samples_after_a_failing_method(monkeypatch):
    _fake_load(monkeypatch, 0.2, 0.3)
    log = LoadLog(threads=1)
    with pytest.raises(RuntimeError), log.around("a"):
        raise RuntimeError("boom")
    assert len(log.samples) == 2


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_set_threads_rejects_non_positive_integers_naming_the_flag(bad):
    with pytest.raises(ValueError, match="--threads="):
        set_threads(bad)


def test_set_threads_none_keeps_torch_choice():
    assert set_threads(None) == torch.get_num_threads()
