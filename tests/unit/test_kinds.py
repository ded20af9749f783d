"""lab.kinds: every report kind declared once, and everything that lists kinds reading the declarations.

Fault class: a kind listed in several places joined by strings (the CLI's command list, the views' kind
names, a page module found by its file name), where adding a kind means editing each and missing one
fails silently (a folder read as another kind, a page without its sections, a command not offered).
"""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

import pytest

import lab.kinds
from lab import cli
from lab.kinds import Kind, all_kinds, command_modules, kind_named, names_longest_first
from lab.views.files import kind_of
from lab.views.page import PAGE, kind_module
from lab.views.publish import report_folder

pytestmark = pytest.mark.unit


def test_kinds_every_declared_command_module_registers_a_subcommand():
    for kind in all_kinds():
        for name in kind.commands:
            assert callable(getattr(importlib.import_module(name), "register", None)), f"{kind}: {name}"


def test_kinds_every_declared_page_module_draws_a_page():
    declared = [k for k in all_kinds() if k.page]
    assert declared, "no kind declares a page"
    for kind in declared:
        assert callable(getattr(kind.page_module(), "page", None)), f"{kind}: {kind.page}"


def test_kinds_every_name_is_read_back_from_its_folder_name():
    for name in names_longest_first():
        assert kind_of(f"20261207-101010-{name}-some-slug") == name
        assert kind_of(f"20261207-101010-{name}") == name


def test_kinds_cli_lists_exactly_the_declared_commands_in_order():
    """`lab --help` offers each declared module's subcommands, in the declared order, and nothing else."""
    import argparse

    expected = []
    for name in command_modules():
        one = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(name).register(one)
        expected.extend(one.choices)
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == expected
    assert len(command_modules()) == len(set(command_modules())), "a command module is declared by two kinds"


def test_kinds_names_and_places_are_unique():
    kinds = all_kinds()
    assert len({k.name for k in kinds}) == len(kinds)
    assert [k.listed for k in kinds] == sorted({k.listed for k in kinds})


def test_kinds_a_bad_name_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"kind name='Bad Kind' must be lowercase words joined by '-'"):
        Kind("Bad Kind", listed=1)


def test_kinds_a_page_without_a_typed_report_is_refused():
    """A page reads its report typed: a kind that names a page module and no report type is a declaration error."""
    with pytest.raises(ValueError, match=r"kind 'paged' names a page module but no typed report"):
        Kind("paged", listed=1, page="some.module")


TOY_KIND = '''
"""A toy kind, declared in one module and nowhere else."""
from __future__ import annotations

from dataclasses import dataclass

from lab.kinds import Kind


@dataclass(frozen=True)
class Report:
    """The toy's report.json: one count."""

    count: int


KIND = Kind("toy-kind", listed=10_000, commands=("toy_kind_command",), page="toy_kind_page", report=Report)
'''

TOY_COMMAND = '''
def register(subparsers):
    p = subparsers.add_parser("toy", help="a toy kind's command")
    p.set_defaults(func=lambda args: 0)
'''

TOY_PAGE = '''
from markupsafe import Markup
from lab.views.core import KindPage, Section


def page(files, report):
    return KindPage(headline=f"toy headline {report.count}",
                    sections=(Section("Toy section", Markup("<p>toy body</p>"), "toy"),))
'''


@pytest.fixture()
def toy_kind(tmp_path, monkeypatch):
    """A new kind added as a new module of lab.kinds (its command and page modules beside it), nothing edited."""
    kinds_dir = tmp_path / "kinds"
    kinds_dir.mkdir()
    (kinds_dir / "toy_kind.py").write_text(textwrap.dedent(TOY_KIND))
    (tmp_path / "toy_kind_command.py").write_text(textwrap.dedent(TOY_COMMAND))
    (tmp_path / "toy_kind_page.py").write_text(textwrap.dedent(TOY_PAGE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(lab.kinds, "__path__", [*lab.kinds.__path__, str(kinds_dir)])
    yield kind_named("toy-kind")
    for name in ("lab.kinds.toy_kind", "toy_kind_command", "toy_kind_page"):
        sys.modules.pop(name, None)


def test_kinds_a_toy_kind_added_as_one_module_reaches_the_cli_the_views_and_the_reports(toy_kind, tmp_path):
    assert toy_kind is not None and toy_kind.name == "toy-kind"
    assert command_modules()[-1] == "toy_kind_command"
    parser = cli.build_parser()
    assert parser.parse_args(["toy"]).func(None) == 0
    assert kind_of("20261207-101010-toy-kind-x") == "toy-kind"
    assert kind_module("toy-kind") is importlib.import_module("toy_kind_page")
    with report_folder(tmp_path / "reports", toy_kind, "x") as rd:
        rd.write_report({"count": 3})
        rd.write_text("summary.md", "# toy\n")
    assert rd.final.name.endswith("-toy-kind-x")
    assert json.loads((rd.final / "report.json").read_text()) == {"kind": "toy-kind", "format": 1, "count": 3}
    page = (rd.final / PAGE).read_text(encoding="utf-8")
    assert "toy headline 3" in page and "<p>toy body</p>" in page
    assert rd.final.name in (tmp_path / "reports" / PAGE).read_text(encoding="utf-8")


def test_kinds_without_the_toy_module_no_toy_kind(toy_kind, monkeypatch):
    """Negative control: the same registry without the toy's module knows no toy kind."""
    monkeypatch.setattr(lab.kinds, "__path__", lab.kinds.__path__[:-1])
    assert kind_named("toy-kind") is None and kind_of("20261207-101010-toy-kind-x") == ""


def test_kinds_every_committed_report_opens_with_its_figures(tmp_path):
    """Every report folder under reports/ in git (written before report.json, format 1, existed) opens: its kind is
    read from its name, its exact figures from the file its kind kept them in then, and its page draws its own
    sections (no "Not drawn")."""
    import shutil
    from pathlib import Path

    from lab.views.files import read_report
    from lab.views.page import page_html

    import subprocess

    repo = Path(__file__).resolve().parents[2]
    listed = subprocess.run(["git", "ls-files", "reports"], cwd=repo, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: no committed reports to open")
    # The folders git tracks, not whatever else a user's own runs left under reports/ (it ignores those).
    names = {Path(line).parts[1] for line in listed.stdout.splitlines() if len(Path(line).parts) > 2}
    folders = sorted(repo / "reports" / name for name in names)
    assert folders, "no committed reports"
    for folder in folders:
        copy = tmp_path / folder.name
        shutil.copytree(folder, copy)
        files = read_report(copy)
        assert files.kind and not files.problems, (folder.name, files.problems)
        declared = kind_named(files.kind)
        if declared.older_file or (copy / "report.json").is_file():
            assert files.report, folder.name
        assert 'id="not-drawn"' not in page_html(files), folder.name


TYPED = [k for k in all_kinds() if k.report is not None]


@pytest.mark.parametrize("kind", TYPED, ids=str)
def test_kinds_typed_report_from_json_of_to_json_is_the_report(kind):
    """Report.from_json(r.to_json()) == r for every typed kind, and every variant of one (a ``report`` per name),
    through json text, and r.to_json() meets the report's JSON Schema (lab.typed.json_schema)."""
    import json

    import jsonschema
    from hypothesis import given, settings

    from lab.typed import json_schema, to_json
    from tests.strategies import typed_values

    shapes = kind.report if isinstance(kind.report, dict) else {kind.name: kind.report}
    assert set(shapes) <= {kind.name, *kind.variants}
    for name, shape in shapes.items():
        schema = jsonschema.Draft202012Validator(json_schema(shape))  # built once: validate() rechecks the schema

        @settings(max_examples=15)  # a report is large: 15 draws of each shape, small containers (tests.strategies)
        @given(typed_values(shape))
        def round_trip(report):
            data = json.loads(json.dumps(to_json(report), allow_nan=False))
            schema.validate(data)
            assert kind.read({"kind": name, "format": 1, **data}) == report

        round_trip()


def test_kinds_typed_negative_control_a_report_of_another_kind_is_refused():
    """The check above can fail: a report read as a kind it is not, or of a newer format, is refused naming why."""
    from lab.kinds import ShapeError
    from lab.kinds.bench_sinks import KIND as BENCH_SINKS

    with pytest.raises(ShapeError, match=r"^kind: a bench-sinks report, not 'entropy'$"):
        BENCH_SINKS.read({"kind": "entropy"})
    with pytest.raises(ShapeError, match=r"^format: a format this lab reads \(0 to 1\), not '2'$"):
        BENCH_SINKS.read({"kind": "bench-sinks", "format": 2})
    with pytest.raises(ShapeError, match=r"^model: missing"):
        BENCH_SINKS.read({"kind": "bench-sinks", "format": 1})
