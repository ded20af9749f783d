"""Values that passed the CLI's checks and broke after the model loaded (out-of-range seeds, unbounded sizes).

Each case must exit 2 with one line naming the flag as typed, before any model loads
(``load_model`` is replaced by a function that fails the test).
"""

from __future__ import annotations

import pytest

from lab import cli
from lab.models.source import ModelSource, register_source

SEED_PAST_TORCH = str(2**64)  # torch.Generator.manual_seed takes [0, 2**64 - 1]


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
def test_cli_seed_out_of_range_exits_2_naming_seed_before_model_loads(argv, seed, tmp_path, capsys, no_model_loading):
    """Fault class (a seed past 64 bits accepted): --seed 18446744073709551616 failed after the model loaded
    ("Overflow when unpacking long long")."""
    line = _exit_2_naming([*argv, "--seed", seed], "--seed", tmp_path, capsys)
    assert "2**64" in line or "18446744073709551615" in line


@pytest.mark.parametrize("argv,flag", [(["entropy", "x\udcff"], "prompt"), (["entropy", "hi", "--system", "\udcffx"], "--system"),
                                       (["sinks", "q", "--context", "a\udcc3"], "--context")],
                         ids=["prompt", "system", "context"])
def test_cli_argument_that_is_not_utf8_exits_2_naming_it(argv, flag, tmp_path, capsys, no_model_loading):
    """Fault class: a command line that is not valid UTF-8 (Python keeps the bytes as lone surrogates) reached
    the tokenizer and ended in an unforeseen TypeError."""
    line = _exit_2_naming(argv, flag, tmp_path, capsys)
    assert "is not valid UTF-8" in line and "\\x" in line


@pytest.mark.parametrize("argv,flag", [
    (["speculate", "hi", "--gamma", "100000"], "--gamma"),
    (["stream", "--gamma", "100000"], "--gamma"),
    (["study", "--gamma", "100000"], "--gamma"),
    (["bench", "--gammas", "1,100000"], "--gammas"),
    (["bench", "--dynamic", "dynamic:4:100000"], "--dynamic"),
    (["study", "--resamples", "100000000"], "--resamples"),
], ids=["speculate", "stream", "study", "bench-gammas", "bench-dynamic", "study-resamples"])
def test_cli_gamma_or_resamples_past_bound_exits_2_naming_flag(argv, flag, tmp_path, capsys, no_model_loading):
    """Fault class (unbounded sizes accepted): --gamma 100000 printed 900 KB and plotted for minutes;
    --resamples 1e8 ran without a word."""
    _exit_2_naming(argv, flag, tmp_path, capsys)


def test_check_bounds_accepts_the_bounds_and_refuses_one_past():
    from argparse import Namespace

    from lab.commands.common import check_bounds
    from lab.ranges import GAMMA, RESAMPLES, SEED

    MAX_GAMMA, MAX_RESAMPLES, SEED_MAX = GAMMA.limit, RESAMPLES.limit, SEED.input_hi

    check_bounds(Namespace(gamma=MAX_GAMMA, seed=SEED_MAX, resamples=MAX_RESAMPLES))
    check_bounds(Namespace(gamma=1, seed=0, resamples=1))
    for bad in ({"gamma": MAX_GAMMA + 1}, {"seed": SEED_MAX + 1}, {"resamples": MAX_RESAMPLES + 1}, {"seed": -1}):
        with pytest.raises(ValueError, match=f"--{next(iter(bad))}="):
            check_bounds(Namespace(**bad))


@pytest.mark.parametrize("text", ["1,,2", "1,2,", ",1"])
def test_cli_bench_gammas_with_empty_item_exits_2(text, tmp_path, capsys, no_model_loading):
    """Poor case: --gammas 1,,2 was accepted (the empty item silently dropped)."""
    _exit_2_naming(["bench", "--gammas", text], "--gammas", tmp_path, capsys)


@pytest.mark.parametrize("argv,needle", [
    (["speculate", "hi", "--adaptive", "entropy:2"], "--adaptive 'entropy:2'"),
    (["speculate", "hi", "--adaptive", "pmin:-1"], "--adaptive 'pmin:-1'"),
    (["bench", "--adaptive", "entropy:7"], "--adaptive 'entropy:7'"),
    (["sinks", "--prompt-file", "EMPTY"], "--prompt-file="),
    (["entropy", "hi", "--top-alternatives", "1000000"], "--top-alternatives=1000000"),
    (["study", "--limit", "4", "--shard", "5/1000"], "--shard 5/1000"),
    (["bench", "--draft-dtype", "float32:int4"], "--draft-dtype='float32:int4'"),
    (["bench", "--humaneval", "held-back:9"], "--humaneval held-back:9"),
    (["bench", "--prompts", "none"], "--prompts none"),
], ids=["adaptive-entropy", "adaptive-pmin", "bench-adaptive", "empty-prompt-file", "top-alternatives", "empty-shard",
        "bench-draft-dtype", "bench-humaneval", "bench-prompts-none"])
def test_cli_error_names_the_flag_as_typed(argv, needle, tmp_path, capsys, no_model_loading):
    """Poor case: errors named Python parameters (entropy_threshold=, pmin=, prompt='') or ran nothing with
    exit 0 (--shard 5/1000), or recorded a value larger than what was stored (--top-alternatives)."""
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    line = _exit_2_naming([str(empty) if a == "EMPTY" else a for a in argv], needle, tmp_path, capsys)
    assert "entropy_threshold=" not in line and "pmin=" not in line and "prompt=''" not in line


@pytest.mark.parametrize("argv", [["entropy", "hi", "--max-new-tokens", "0"], ["study", "--gamma", "0"],
                                  ["speculate", "hi", "--seed", "-1"]])
def test_cli_bad_argument_creates_no_out_tree(argv, tmp_path, capsys, no_model_loading):
    """Poor case: bad arguments still created the --out directory tree."""
    out = tmp_path / "a" / "b" / "c"
    rc = cli.main([*argv, "--device", "cpu", "--out", str(out)])
    assert rc == 2 and not (tmp_path / "a").exists(), capsys.readouterr().err


def test_cli_empty_out_is_refused(tmp_path, capsys, no_model_loading, monkeypatch):
    """Poor case: --out "" wrote into the current directory."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["entropy", "hi", "--out", ""]) == 2
    assert "--out" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_cli_draft_model_unavailable_names_draft_not_model(tmp_path, capsys, no_model_loading, monkeypatch):
    """Poor case: a --draft that is not available was answered with "use ... --model smollm2"."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc = cli.main(["speculate", "hi", "--draft", "some-owner/no-such-draft", "--device", "cpu",
                   "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "--draft 'some-owner/no-such-draft'" in err and "--model smollm2" not in err, err


@pytest.mark.parametrize("command", [["speculate", "hi"], ["bench"], ["study", "--limit", "2"], ["stream"]],
                         ids=["speculate", "bench", "study", "stream"])
@pytest.mark.parametrize("draft,weights,needle", [
    ("early-exit:4", "int8", "no weights of its own"),
    ("some/hub-id", "q4", "not a GGUF profile"),
], ids=["early-exit-int8", "hub-q4"])
def test_cli_draft_weights_that_do_not_fit_the_draft_exit_2_before_model_loads(command, draft, weights, needle,
                                                                               tmp_path, capsys, no_model_loading):
    """Poor case: speculate, bench and study refused these only once the target had loaded (minutes on the
    1.5B), inside make_draft; only stream checked them first (lab.speculative.draft_specs.check_draft)."""
    _exit_2_naming([*command, "--draft", draft, "--draft-weights", weights], needle, tmp_path, capsys)


def test_check_draft_returns_the_kind_and_checks_the_model_only_for_a_model_draft(monkeypatch):
    from lab.models import loading as models
    from lab.speculative.draft_specs import check_draft

    seen = []
    monkeypatch.setattr(models, "check_draft_available", seen.append)
    assert check_draft("early-exit:2") == "early-exit" and check_draft("prompt-lookup") == "prompt-lookup"
    assert seen == []
    assert check_draft("smollm2", "bfloat16") == "model" and seen == ["smollm2"]
    with pytest.raises(ValueError, match="--draft-weights='bfloat16'.*prompt-lookup.*runs no model"):
        check_draft("prompt-lookup", "bfloat16")
    with pytest.raises(ValueError, match="early-exit.*use --weights"):
        check_draft("early-exit:2", "int8")


def test_load_model_file_path_is_called_a_file(tmp_path):
    """Poor case: a file given as a model was called "the directory"."""
    from lab.models import loading as models

    f = tmp_path / "weights.bin"
    f.write_bytes(b"x")
    with pytest.raises(models.ModelUnavailableError, match="is a file, not a model directory"):
        models.load_model(str(f), device="cpu")


def test_row_statistics_point_mass_entropy_is_plus_zero():
    """Poor case: the sampled entropy was stored as -0.0 with top-k 1 (-(1 * log 1) = -0.0)."""
    import math

    import torch

    from lab.tracker.stats import row_statistics

    h, _, _ = row_statistics(torch.tensor([2.0, float("-inf"), float("-inf")]), with_varentropy=False)
    assert float(h) == 0.0 and math.copysign(1.0, float(h)) == 1.0


def test_cli_calibrate_sinks_long_length_past_context_exits_2_before_model_loads(tmp_path, capsys, no_model_loading,
                                                                                 monkeypatch):
    """Poor case: --long-lengths 100000 failed only after the model loaded, as "prompt has 100030 tokens"."""
    from lab.models import loading as models

    monkeypatch.setattr(models, "known_context_length", lambda name: 8192)
    line = _exit_2_naming(["calibrate-sinks", "--long-lengths", "2048,100000"], "--long-lengths", tmp_path, capsys)
    assert "8192" in line and "100000" in line


def test_known_context_length_reads_a_local_config_without_loading(tmp_path):
    from lab.models.loading import known_context_length

    (tmp_path / "config.json").write_text('{"max_position_embeddings": 77}')
    assert known_context_length(str(tmp_path)) == 77
    assert known_context_length(str(tmp_path / "missing")) is None


def test_cli_draft_that_fails_to_load_names_draft_not_model(tmp_path, capsys, monkeypatch):
    """Poor case: a --draft model that failed to load (after the target) was answered about --model."""
    from lab.speculative import draft_specs
    from lab.models import loading as models
    from tests import support

    tok = support.chatml_tokenizer()

    def tiny_load(name, **kw):
        model = support.tiny_llama(vocab_size=len(tok))
        register_source(model, ModelSource(model=name, device="cpu", dtype="float32"))
        return model, tok

    def failing_draft(target, spec, **kw):
        raise models.ModelUnavailableError(f"model {spec!r} ({spec}) is not available on this machine: the "
                                           f"directory holds no loadable model; {models.USE_DEFAULT_HINT}")

    draft_dir = tmp_path / "draft"
    draft_dir.mkdir()
    monkeypatch.setattr(models, "load_model", tiny_load)
    monkeypatch.setattr(draft_specs, "make_draft", failing_draft)
    rc = cli.main(["speculate", "hi", "--draft", str(draft_dir), "--device", "cpu", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and f"--draft {str(draft_dir)!r}" in err and "--model smollm2" not in err, err


# A value no flag takes: more digits than Python reads as an int (4,300), and past the largest float.
DIGITS_5000 = "9" * 5000
# The most an error line may take with a 5,000-character value echoed cut.
MOST_LINE = 300
# What each command needs besides the flag under test to get past argparse.
REQUIRED = {"entropy": ["hi"], "speculate": ["hi"], "sinks": ["hi"], "bench-weights": ["--model", "smollm2"]}


def _numeric_flags(kind=(int, float)):
    import argparse

    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [pytest.param(cmd, a, id=f"{cmd} {a.option_strings[-1]}") for cmd, p in sub.choices.items()
            for a in p._actions if a.option_strings and a.type in kind and a.help != argparse.SUPPRESS]


def _one_short_line(argv, tmp_path, capsys):
    """Run ``lab ARGV``: exit 2 and one stderr line under MOST_LINE characters, without "inf"; return it."""
    try:
        rc = cli.main([*argv, "--out", str(tmp_path / "out")])
    except SystemExit as exc:
        rc = exc.code
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1, lines
    assert len(lines[0]) < MOST_LINE and "inf" not in lines[0].replace("info", ""), lines[0]
    return lines[0]


@pytest.mark.parametrize("cmd,action", _numeric_flags())
def test_cli_numeric_flag_5000_digits_exits_2_in_one_short_line_stating_the_range(cmd, action, tmp_path, capsys,
                                                                                  no_model_loading):
    """Fault class: an error line that dumps the whole value (5,060 characters), an error that names a wrong
    reason (a valid integer called "invalid"), a value silently changed (echoed as --temperature=inf)."""
    from lab.commands.common import flag_range

    flag = max(action.option_strings, key=len)
    line = _one_short_line([cmd, *REQUIRED.get(cmd, []), flag, DIGITS_5000], tmp_path, capsys)
    assert f"{flag}='999" in line and "(5,000 characters)" in line, line
    assert ("is out of range" if action.type is int else "is too large for a float") in line, line
    rng = flag_range(cmd, action.dest)
    assert rng is None or rng.text.split(", ")[0] in line, line  # the range (its CPU count, where it has one)


@pytest.mark.parametrize("cmd,action", _numeric_flags((float,)))
@pytest.mark.parametrize("value", ["1e-400", "-1e-400"])
def test_cli_float_flag_that_rounds_to_0_exits_2_saying_so(cmd, action, value, tmp_path, capsys, no_model_loading):
    """Fault class: a value silently changed (--temperature 1e-400 ran greedy, parsed to 0.0) or an error that
    names a wrong reason (--top-p 1e-400 refused as --top-p=0.0)."""
    flag = max(action.option_strings, key=len)
    line = _one_short_line([cmd, *REQUIRED.get(cmd, []), flag, value], tmp_path, capsys)
    assert f"{flag}='{value}' rounds to 0 in a float" in line and "=0.0" not in line, line


@pytest.mark.parametrize("argv,needle", [
    (["entropy", "hi", "--temperature", "1e-400"], "--temperature='1e-400' rounds to 0 in a float; use 0 for greedy"),
    (["entropy", "hi", "--temperature", "0.5", "--top-p", "1e-400"],
     "--top-p='1e-400' rounds to 0 in a float: must be in (0, 1]"),
    (["entropy", "hi", "--temperature", "1e400"], "--temperature='1e400' is too large for a float: must be in [0, 100]"),
    (["speculate", "hi", "--gamma", "5_0"], "--gamma='5_0' is written with an underscore"),
    (["entropy", "hi", "--temperature", "0_5"], "--temperature='0_5' is written with an underscore"),
    (["entropy", "hi", "--temperature", "-1e-320"], "--temperature=-1e-320 must be in [0, 100]"),
    (["entropy", "hi", "--top-k", "9" * 4000], "(4,000 characters) must be in [1, 1048576]"),
    (["entropy", "hi", "--seed", "x" * 5000], "argument --seed: invalid int value: 'xxx"),
], ids=["temperature-1e-400", "top-p-1e-400", "temperature-1e400", "gamma-underscore", "temperature-underscore",
        "temperature-negative-exponent", "top-k-4000-digits", "seed-not-a-number-long"])
def test_cli_numeric_flag_hostile_value_exits_2_naming_the_reason(argv, needle, tmp_path, capsys, no_model_loading):
    """Fault classes: a value silently changed (1e-400 ran greedy, 5_0 ran as gamma 50), an error that names a wrong
    reason (argparse's "expected one argument" for -1e-320), an error line that dumps the whole value."""
    assert needle in _one_short_line(argv, tmp_path, capsys)


@pytest.mark.parametrize("argv,needle", [
    (["speculate", "hi", "--adaptive", f"pmin:{DIGITS_5000}"], "X is too large for a float: must be in (0, 1)"),
    (["bench", "--adaptive", f"entropy:{DIGITS_5000}"], "X is too large for a float: must be in (0, 1]"),
    (["speculate", "hi", "--adaptive", "entropy:1e-400"], "X rounds to 0 in a float: must be in (0, 1]"),
    (["speculate", "hi", "--draft", f"early-exit:{DIGITS_5000}"], "N is out of range"),
    (["speculate", "hi", "--draft", "early-exit:5_0"], "N is written with an underscore"),
    (["bench", "--dynamic", f"dynamic:4:{DIGITS_5000}"], "MAX is out of range: must be in [1, 64]"),
    (["bench", "--dynamic", f"dynamic:4:{'9' * 150}"], "must be <= 64"),
    (["bench", "--gammas", f"1,{DIGITS_5000}"], "is out of range: must be in [1, 64]"),
    (["bench-tune", "--gammas", "1,5_0"], "--gammas='5_0' is written with an underscore"),
    (["bench-sinks", "--lengths", DIGITS_5000], "is out of range: must be in [16, 131072]"),
    (["calibrate-sinks", "--long-lengths", DIGITS_5000], "is out of range: must be in [64, 131072]"),
    (["bench", "--humaneval", f"held-back:{DIGITS_5000}"], "N is out of range: the count must be in [1, 5]"),
    (["bench", "--grounded", f"held-back:{DIGITS_5000}"], "N is out of range: the count must be in [1,"),
    (["study", "--shard", f"1/{DIGITS_5000}"], "N is out of range; K/N needs 1 <= K <= N"),
    (["intervene", "--shard", "1_0/20"], "K is written with an underscore"),
    (["study", "--ray", f"host:{DIGITS_5000}"], "the port is outside 1-65535"),
    (["stream", "--policies", f"window:{DIGITS_5000}"], "the window W must be at most 131072"),
    (["stream", "--policies", f"sinks:{DIGITS_5000}+4"], "K must be at most 131072"),
    (["entropy", "hi", "--device", f"cuda:{DIGITS_5000}"], "is not a valid torch device"),
], ids=["adaptive-pmin", "bench-adaptive-entropy", "adaptive-rounds-to-0", "early-exit", "early-exit-underscore",
        "dynamic", "dynamic-150-digits", "gammas", "gammas-underscore", "lengths", "long-lengths", "humaneval",
        "grounded", "shard", "shard-underscore", "ray-port", "policy-window", "policy-sinks", "device"])
def test_cli_compound_flag_hostile_number_exits_2_in_one_short_line(argv, needle, tmp_path, capsys,
                                                                    no_model_loading):
    """Fault classes: an error line that dumps the whole value (10,099 characters for --dynamic, Python's own
    digit-limit message for --ray), an error that names a wrong reason, a value silently changed
    (early-exit:5_0 ran 50 layers, pmin:1e-400 refused as X=0.0)."""
    line = _one_short_line(argv, tmp_path, capsys)
    assert needle in line and "=0.0" not in line, line
