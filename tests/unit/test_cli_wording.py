"""Error messages name arguments as the user typed them.

Fault class: a library ``ValueError`` naming a Python parameter (``max_new_tokens=0``)
reaching the user of a CLI whose flag is ``--max-new-tokens``. The CLI boundary
rewrites every parameter that is one of the command's flags; these tests sweep bad
values over every command.
"""

from __future__ import annotations

import re

import pytest

from lab import cli


def test_as_typed_rewrites_flags_only():
    flags = {"max_new_tokens": "--max-new-tokens", "top_p": "--top-p", "gamma": "--gamma"}
    assert cli.as_typed("max_new_tokens=0 must be >= 1", flags) == "--max-new-tokens=0 must be >= 1"
    assert cli.as_typed("top_p=1.5 and gamma=0", flags) == "--top-p=1.5 and --gamma=0"
    assert cli.as_typed("--gamma=0 already typed", flags) == "--gamma=0 already typed"
    assert cli.as_typed("min_bin=0 is internal", flags) == "min_bin=0 is internal"
    assert cli.as_typed("my_gamma=1", flags) == "my_gamma=1"


def test_flag_names_cover_every_option_of_every_command():
    parser = cli.build_parser()
    for command in ("entropy", "sinks", "speculate", "bench", "bench-tracker", "bench-sinks", "calibrate-sinks",
                    "study"):
        flags = cli.flag_names(parser, command)
        assert flags["out"] == "--out" and flags["model"] == "--model", command
        assert all(f.startswith("--") for f in flags.values()), flags


BAD = [
    ["entropy", "hi", "--max-new-tokens", "0"], ["entropy", "hi", "--top-p", "0"],
    ["entropy", "hi", "--top-k", "0"], ["entropy", "hi", "--top-alternatives", "0"],
    ["entropy", "hi", "--temperature", "-1"], ["entropy", "hi", "--seed", "-1"],
    ["sinks", "hi", "--threshold", "nan"], ["sinks", "hi", "--device", "banana"],
    ["speculate", "hi", "--max-new-tokens", "0"], ["speculate", "hi", "--top-k", "0"],
    ["speculate", "hi", "--top-p", "2"], ["speculate", "hi", "--dtype", "float8"],
    ["bench", "--repeats", "0"], ["bench", "--max-new-tokens", "1"], ["bench", "--threads", "0"],
    ["bench-tracker", "--stats-iterations", "0"], ["bench-tracker", "--threads", "0"],
    ["bench-tracker", "--max-new-tokens", "0"],
    ["bench-sinks", "--eager-length", "-1"], ["bench-sinks", "--threads", "0"],
    ["calibrate-sinks", "--prompts", "/no/such/file.jsonl"],
    ["study", "--limit", "0"], ["study", "--max-new-tokens", "0"], ["study", "--gamma", "0"],
    ["study", "--temperature", "-1"],
]


@pytest.mark.parametrize("argv", BAD, ids=[" ".join(a) for a in BAD])
def test_cli_bad_value_error_names_the_flag_as_typed(tmp_path, capsys, no_model_loading, argv):
    """Exit 2, one line, the flag as typed (``--max-new-tokens=``), never the Python name (``max_new_tokens=``)."""
    rc = cli.main([*argv, "--out", str(tmp_path / "reports")])
    err = capsys.readouterr().err.strip()
    flag = next(a for a in argv if a.startswith("--"))
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert f"{flag}=" in err, err
    python_names = {d for d in cli.flag_names(cli.build_parser(), argv[0]) if "_" in d or d == flag[2:]}
    leaked = [d for d in python_names if re.search(rf"(?<![\w-]){re.escape(d)}=", err)]
    assert not leaked, err
