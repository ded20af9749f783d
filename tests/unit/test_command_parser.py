"""The command layer's shared parser steps: a command's words from its module docstring, a ranged flag's type
and help from its range.

Fault class: two homes for one thing drifting apart (a command's ``--help`` description and its module
docstring; a flag's ``type`` and the range the parser checks it against).
"""

from __future__ import annotations

import argparse
import importlib

import pytest

from lab import cli
from lab.commands.common import add_ranged_arg, command_parser, flag_range, range_text
from lab.kinds import command_modules

pytestmark = pytest.mark.unit

DOC = """``lab demo PROMPT``: do a thing to a prompt
and say so.

Do the thing,   then
say what was done.

What the module says besides: not shown by --help.
"""


def _subparsers() -> argparse._SubParsersAction:
    return argparse.ArgumentParser(prog="lab").add_subparsers(dest="command")


def test_command_parser_docstring_gives_summary_description_and_run():
    def run(args: argparse.Namespace) -> int:
        return 0

    sub = _subparsers()
    p = command_parser(sub, "demo", run, DOC)
    assert sub._choices_actions[0].help == "do a thing to a prompt and say so"
    assert p.description == "Do the thing, then say what was done."
    assert p.parse_args([]).func is run


def test_command_parser_description_given_replaces_the_docstring_one():
    p = command_parser(_subparsers(), "demo", lambda args: 0, DOC, description="raw\n  text",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    assert p.description == "raw\n  text" and p.formatter_class is argparse.RawDescriptionHelpFormatter


def test_command_parser_docstring_without_its_form_is_refused():
    with pytest.raises(AssertionError, match="lab demo"):
        command_parser(_subparsers(), "demo", lambda args: 0, "Does a thing.\n\nMore.\n")


def test_command_docstrings_first_line_names_the_command():
    """Every registered command's summary is its module docstring's first paragraph (intervene's too)."""
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help for a in sub._choices_actions}
    for name in command_modules():
        module = importlib.import_module(name)
        if module.__name__.endswith("bench_tune"):
            docs = {"bench-tune": module.TUNE_DOC, "bench-tune-runtime": module.TUNE_RUNTIME_DOC}
        else:
            docs = {module.__doc__.split("``")[1].split()[1]: module.__doc__}
        for command, doc in docs.items():
            assert doc.startswith(f"``lab {command}"), (name, doc[:40])
            assert " ".join(doc.split("\n\n")[0].split()).endswith(f"{helps[command]}."), command


@pytest.mark.parametrize("flag, kind", [("--temperature", float), ("--top-p", float), ("--seed", int),
                                        ("--max-new-tokens", int)])
def test_add_ranged_arg_type_and_help_from_the_range(flag, kind):
    p = argparse.ArgumentParser()
    add_ranged_arg(p, "stream", flag, None, "before ", " after")
    action = p._actions[-1]
    dest = flag.removeprefix("--").replace("-", "_")
    assert action.type is kind and kind is (int if flag_range("stream", dest).integer else float)
    assert action.help == f"before {range_text('stream', dest)} after"


def test_add_ranged_arg_flag_without_a_range_is_refused():
    with pytest.raises(AssertionError, match="--prompt"):
        add_ranged_arg(argparse.ArgumentParser(), "stream", "--prompt", None, "")
