"""Every numeric flag of every command has a range, stated in its help, and a value outside it is refused in
one line naming the flag, before any model loads; so is a flag that would have no effect in its combination.

The numeric flags are read off the parser itself, so a flag added without a range fails here.
"""

from __future__ import annotations

import argparse
import math
import os

import pytest

from lab import cli
from lab.commands.common import check_bounds, flag_range, range_text
from lab.ranges import Range

pytestmark = pytest.mark.unit

# What each command needs besides the flag under test to get past argparse.
REQUIRED = {"entropy": ["hi"], "speculate": ["hi"], "sinks": ["hi"], "bench-weights": ["--model", "smollm2"]}
# A range that depends on a file read at run time (the sink statistic of choice.json), checked by
# lab.sinks.profiles.check_threshold before the model loads, and stated in the help for the statistic in force.
OWN_CHECK = {("sinks", "threshold"): ("0", "inf")}
# Comma-separated lists of integers, each item bounded: (command, flag, a low item, a high item).
LIST_FLAGS = [("bench", "--gammas", "0", "65"), ("bench-sinks", "--lengths", "15", "131073"),
              ("calibrate-sinks", "--long-lengths", "63", "131073")]


def _numeric_flags() -> list[tuple[str, argparse.Action]]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [(cmd, a) for cmd, p in sub.choices.items() for a in p._actions
            if a.option_strings and a.type in (int, float) and a.help != argparse.SUPPRESS]


def _outside(rng: Range, kind: type) -> tuple[str, str]:
    """A value just below and one just above ``rng``, as typed."""
    step = 1 if kind is int else 0.5
    low = rng.lo if rng.lo_open else rng.lo - step
    high = (os.cpu_count() or 1) + 1 if rng.cpus else rng.input_hi + step
    return str(kind(low)), str(kind(high))


def _cases() -> list:
    out = []
    for cmd, action in _numeric_flags():
        flag = action.option_strings[-1]
        rng = flag_range(cmd, action.dest)
        if rng is not None:
            values = _outside(rng, action.type)
        else:  # no range: the test below fails, naming the flag
            values = OWN_CHECK.get((cmd, action.dest), ("?",))
        out += [pytest.param(cmd, flag, v, id=f"{cmd} {flag} {v}") for v in values]
    out += [pytest.param(cmd, flag, v, id=f"{cmd} {flag} {v}") for cmd, flag, *vs in LIST_FLAGS for v in vs]
    return out


def _refused(argv: list[str], tmp_path, capsys) -> str:
    """Run ``lab ARGV``; assert exit 2, one stderr line, no report; return the line."""
    out = tmp_path / "out"
    try:
        rc = cli.main([*argv, "--out", str(out)])
    except SystemExit as exc:  # argparse's own refusals
        rc = exc.code
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"lab {argv[0]}: error: "), lines
    assert not out.exists() or not any(out.iterdir())
    return lines[0]


@pytest.mark.parametrize("cmd,action", [pytest.param(c, a, id=f"{c} {a.option_strings[-1]}")
                                        for c, a in _numeric_flags()])
def test_numeric_flag_has_a_bound_stated_in_its_help(cmd, action):
    """Fault class: a numeric flag without a range (``--repeats 1000000000`` ran on for hours)."""
    if (cmd, action.dest) in OWN_CHECK:
        return
    assert flag_range(cmd, action.dest) is not None, f"lab {cmd} {action.option_strings[-1]} has no range"
    assert range_text(cmd, action.dest) in action.help


@pytest.mark.parametrize("cmd,flag,value", _cases())
def test_numeric_flag_outside_its_range_exits_2_naming_it_before_model_loads(cmd, flag, value, tmp_path, capsys,
                                                                              no_model_loading):
    """Fault class: a value outside a flag's range accepted (0 as "the default", 100000 threads ending in
    "out of memory"), or refused only after the model loaded."""
    assert value != "?", f"lab {cmd} {flag} has no bound"
    line = _refused([cmd, *REQUIRED.get(cmd, []), flag, value], tmp_path, capsys)
    assert flag in line


@pytest.mark.parametrize("argv,flag", [
    (["bench-seed-tables", "--repeats", "0"], "--repeats"),
    (["bench-seed-tables", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["bench-tune", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["bench-tune", "--repeats", "0"], "--repeats"),
    (["study", "--temperature", "1e9"], "--temperature"),
    (["bench", "--temperature", "1000"], "--temperature"),
    (["calibrate-sinks", "--long-lengths", "0"], "--long-lengths"),
    (["calibrate-sinks", "--long-lengths", ""], "--long-lengths"),
    (["bench-weights", "--model", "smollm2", "--repeats", "1000000000"], "--repeats"),
    (["bench-tune", "--threads", "100000"], "--threads"),
    (["bench-weights", "--model", "smollm2", "--problems", "100000"], "--problems"),
    (["calibrate-sinks", "--held-out", "/nonexistent"], "--held-out"),
    (["calibrate-health", "--reference-prompts", "/nonexistent"], "--reference-prompts"),
    (["entropy", "hi", "--device", "cpu:1"], "--device"),
    (["study", "--device", "cpu:0"], "--device"),
    (["bench-tune", "--humaneval", ""], "--humaneval"),
    (["bench-tune", "--draft", " "], "--draft"),
    (["bench", "--draft", ""], "--draft"),
    (["bench", "--gammas", "3,3"], "--gammas"),
    (["bench-tune", "--gammas", "4,3,4"], "--gammas"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_cli_issue_39_flag_value_exits_2_naming_the_flag_typed(argv, flag, tmp_path, capsys, no_model_loading):
    """Fault class: a flag value accepted silently (0 read as "the seed's default", cpu:1 recorded as a
    device), unbounded, or refused naming another flag (--humaneval for --problems, --prompts for
    --held-out)."""
    line = _refused(argv, tmp_path, capsys)
    assert flag in line


@pytest.mark.parametrize("argv,flag", [
    (["bench-weights", "--model", "smollm2", "--weights", "int8"], "--weights"),
    (["bench-weights", "--model", "smollm2", "--dtype", "bfloat16"], "--dtype"),
    (["bench-weights", "--model", "smollm2", "--skip-kernels", "--steps", "3"], "--steps"),
    (["bench-weights", "--model", "smollm2", "--problems", "0", "--text", ""], "--text"),
    (["bench-weights", "--model", "smollm2", "--text", " \n"], "--text"),
    (["bench-seed-tables", "--gammas", "4,6"], "--gammas"),
    (["bench-seed-tables", "--no-assisted"], "--no-assisted"),
    (["bench-tune", "--no-assisted"], "--no-assisted"),
    (["entropy", "hi", "--top-k", "5"], "--top-k"),
    (["speculate", "hi", "--top-p", "0.9"], "--top-p"),
    (["bench-tracker", "--top-k", "5"], "--top-k"),
    (["stream", "--no-acceptance", "--gamma", "3"], "--gamma"),
    (["stream", "--no-acceptance", "--draft", "early-exit:4"], "--draft"),
    (["stream", "--policies", "dense,window:252", "--recompute-every", "3"], "--recompute-every"),
    (["speculate", "hi", "--draft", "prompt-lookup", "--adaptive", "pmin:0.5"], "--adaptive"),
    (["speculate", "hi", "--draft", "prompt-lookup", "--adaptive", "entropy:0.3"], "--adaptive"),
    (["bench", "--draft", "prompt-lookup", "--adaptive", "pmin:0.5"], "--adaptive"),
    (["speculate", "hi", "--temperature", "0", "--seed", "5"], "--seed"),
    (["speculate", "hi", "--seed", "5"], "--seed"),
    (["entropy", "hi", "--seed", "5"], "--seed"),
    (["bench", "--humaneval", "tuning:"], "--humaneval"),
    (["bench", "--humaneval", "held-back: "], "--humaneval"),
    (["bench-tune", "--humaneval", "tuning:"], "--humaneval"),
    (["intervene", "--pilot", "pilot.jsonl", "--pilot-limit", "0"], "--pilot"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_cli_flag_without_effect_in_its_combination_exits_2_naming_it(argv, flag, tmp_path, capsys,
                                                                      no_model_loading):
    """Fault class: a flag accepted and then ignored (bench-weights --weights int8 did nothing; --seed-tables
    ran its own gammas; a top-k filter or a seed on a greedy decode; --adaptive on the prompt-lookup draft,
    whose one-hot q never stops; --humaneval tuning: read as the whole split), or an empty --text that failed
    after loading with an unforeseen reshape error."""
    line = _refused(argv, tmp_path, capsys)
    assert flag in line


@pytest.fixture(scope="module")
def merge_dir(tmp_path_factory):
    """A study work directory with 2 of its 4 prompts finished (fake runner): what --merge reads."""
    from lab.study.config import StudyConfig
    from lab.study.run import run_study
    from lab.study.work import plan_study
    from tests.study_fakes import FAST_RESAMPLES, FakeRunner, InterruptAfter

    cfg = StudyConfig(device="cpu", out=str(tmp_path_factory.mktemp("merge")), n_resamples=FAST_RESAMPLES, limit=4)
    with pytest.raises(InterruptAfter):
        run_study(cfg, runner=FakeRunner(fail_after=2))
    return plan_study(cfg).work_dir


@pytest.mark.parametrize("extra,flag", [
    (["--seed", "3"], "--seed"), (["--limit", "2"], "--limit"), (["--max-new-tokens", "8"], "--max-new-tokens"),
    (["--gamma", "5"], "--gamma"), (["--temperature", "0.5"], "--temperature"), (["--threads", "1"], "--threads"),
    (["--ray-actors", "2"], "--ray-actors"), (["--model", "qwen2.5-coder"], "--model"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_study_merge_with_a_flag_the_directories_fix_exits_2_naming_it(extra, flag, merge_dir, tmp_path, capsys,
                                                                      no_model_loading):
    """Fault class: a flag accepted and then ignored (--merge DIR --seed 3 exited 0, its report saying seed 0
    and every prompt; --threads with a merge that runs no model), where --resume refuses the same flags."""
    from tests.study_fakes import CLI_RESAMPLES

    line = _refused(["study", "--merge", str(merge_dir), *CLI_RESAMPLES, *extra], tmp_path, capsys)
    assert flag in line and "--merge" in line, line


@pytest.mark.slow  # about a second or more on a quiet 2-core machine (the quick loop's one-minute aim)
def test_study_merge_with_the_directories_own_values_runs(merge_dir, tmp_path, capsys, no_model_loading):
    """A typed flag equal to the directory's value is no conflict: the merge runs, as --resume does."""
    from tests.study_fakes import CLI_RESAMPLES

    rc = cli.main(["study", "--merge", str(merge_dir), *CLI_RESAMPLES, "--seed", "0", "--limit", "4",
                   "--out", str(tmp_path)])
    assert rc == 0, capsys.readouterr().err
    assert len(list(tmp_path.glob("*-study"))) == 1


def test_check_bounds_refuses_a_typed_seed_only_under_greedy_decoding():
    """A seed that does nothing (greedy) is refused where its default is None; lab bench's --seed defaults
    to 0, so a typed one cannot be told from it, and sampling uses every seed."""
    check_bounds(argparse.Namespace(command="entropy", temperature=0.5, seed=5))
    check_bounds(argparse.Namespace(command="entropy", temperature=0, seed=None))
    check_bounds(argparse.Namespace(command="bench", temperature=0, seed=0))
    with pytest.raises(ValueError, match=r"^--seed 5 has no effect with greedy decoding \(--temperature 0\)"):
        check_bounds(argparse.Namespace(command="speculate", temperature=0, seed=5))


def test_bench_tune_typed_default_gammas_are_used_not_replaced(monkeypatch):
    """Fault class: bench-tune --gammas 1,2,4,6 (the plain bench's default, typed) was silently replaced by
    the tuning gammas."""
    from lab.commands import bench, bench_tune

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop

    seen = []
    real = bench.parse_gammas
    monkeypatch.setattr(bench, "parse_gammas", lambda text: seen.append(real(text)) or seen[-1])
    monkeypatch.setattr(bench, "model_draft_args", stop)  # the set-up is read before this: stop here
    args = cli.build_parser().parse_args(["bench-tune", "--gammas", "1,2,4,6"])
    with pytest.raises(Stop):
        bench_tune.run_tune(args)
    assert seen == [(1, 2, 4, 6)]


def test_bound_check_accepts_both_ends_and_refuses_past_them():
    closed, half_open = Range(1, 64, integer=True), Range(0, 1, lo_open=True)
    for rng, inside in ((closed, (1, 64)), (half_open, (1e-9, 1.0))):
        for v in inside:
            rng.check("--x", v)
    for rng, outside in ((closed, (0, 65)), (half_open, (0.0, 1.0000001, math.nan, math.inf))):
        for v in outside:
            with pytest.raises(ValueError, match=r"^--x="):
                rng.check("--x", v)


def test_check_bounds_skips_flags_left_unset_and_refuses_a_cpu_index():
    check_bounds(argparse.Namespace(command="study", temperature=None, max_new_tokens=None, device="cpu"))
    with pytest.raises(ValueError, match="--device 'cpu:0'"):
        check_bounds(argparse.Namespace(device="cpu:0"))
    with pytest.raises(ValueError, match=r"--temperature=0 must be in \(0, 100\]"):
        check_bounds(argparse.Namespace(command="stream", temperature=0))
