"""Values that passed the CLI's checks and broke after the model loaded (issue 18, faults 5 and 7, poor cases).

Each case must exit 2 with one line naming the flag as typed, before any model loads
(``load_model`` is replaced by a function that fails the test).
"""

from __future__ import annotations

import pytest

from lab import cli

SEED_PAST_TORCH = str(2**64)  # torch.Generator.manual_seed takes [0, 2**64 - 1]


@pytest.fixture
def no_model(monkeypatch):
    from lab import models

    def refuse(*a, **k):
        raise AssertionError("a model was loaded despite a bad argument")

    monkeypatch.setattr(models, "load_model", refuse)


def _exit_2_naming(argv, flag, tmp_path, capsys):
    try:
        rc = cli.main([*argv, "--device", "cpu", "--out", str(tmp_path / "out")])
    except SystemExit as exc:  # argparse's own type errors
        rc = exc.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error" in line]
    assert rc == 2, err
    assert len(lines) == 1 and flag in lines[0], err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    return lines[0]


@pytest.mark.parametrize("argv", [["entropy", "hi", "--temperature", "1"], ["speculate", "hi", "--temperature", "1"],
                                  ["stream"], ["study"]], ids=["entropy", "speculate", "stream", "study"])
@pytest.mark.parametrize("seed", [SEED_PAST_TORCH, "-1"])
def test_cli_seed_out_of_range_exits_2_naming_seed_before_model_loads(argv, seed, tmp_path, capsys, no_model):
    """Fault 7: --seed 18446744073709551616 failed after the model loaded ("Overflow when unpacking long long")."""
    line = _exit_2_naming([*argv, "--seed", seed], "--seed", tmp_path, capsys)
    assert "2**64" in line or "18446744073709551615" in line


@pytest.mark.parametrize("argv,flag", [
    (["speculate", "hi", "--gamma", "100000"], "--gamma"),
    (["stream", "--gamma", "100000"], "--gamma"),
    (["study", "--gamma", "100000"], "--gamma"),
    (["bench", "--gammas", "1,100000"], "--gammas"),
    (["bench", "--dynamic", "dynamic:4:100000"], "--dynamic"),
    (["study", "--resamples", "100000000"], "--resamples"),
], ids=["speculate", "stream", "study", "bench-gammas", "bench-dynamic", "study-resamples"])
def test_cli_gamma_or_resamples_past_bound_exits_2_naming_flag(argv, flag, tmp_path, capsys, no_model):
    """Fault 5: --gamma 100000 printed 900 KB and plotted for minutes; --resamples 1e8 ran without a word."""
    _exit_2_naming(argv, flag, tmp_path, capsys)


def test_check_bounds_accepts_the_bounds_and_refuses_one_past():
    from argparse import Namespace

    from lab.commands.common import MAX_GAMMA, MAX_RESAMPLES, SEED_MAX, check_bounds

    check_bounds(Namespace(gamma=MAX_GAMMA, seed=SEED_MAX, resamples=MAX_RESAMPLES))
    check_bounds(Namespace(gamma=1, seed=0, resamples=1))
    for bad in ({"gamma": MAX_GAMMA + 1}, {"seed": SEED_MAX + 1}, {"resamples": MAX_RESAMPLES + 1}, {"seed": -1}):
        with pytest.raises(ValueError, match=f"--{next(iter(bad))}="):
            check_bounds(Namespace(**bad))


@pytest.mark.parametrize("text", ["1,,2", "1,2,", ",1"])
def test_cli_bench_gammas_with_empty_item_exits_2(text, tmp_path, capsys, no_model):
    """Poor case: --gammas 1,,2 was accepted (the empty item silently dropped)."""
    _exit_2_naming(["bench", "--gammas", text], "--gammas", tmp_path, capsys)
