"""The bench's input-grounded tasks (tools.datagen.make_grounded_tasks, lab/data/grounded_tasks.jsonl).

Each task asks for an edit whose answer copies most of its prompt (a rename, a quoted docstring) on a
real function of an installed package; the tuning and held-back splits come from different packages.
No model, no weights.
"""

from __future__ import annotations

import ast
import json
import re

import pytest

from lab.bench.prompt_split import (GROUP_GROUNDED, PromptSet, grounded_prompts, grounded_tasks, parse_grounded)
from tools.datagen import DATA_DIR, jsonl_text
from tools.datagen import make_grounded_tasks as mk

pytestmark = pytest.mark.unit

FIELDS = {"id", "split", "kind", "package", "version", "licence", "object", "prompt"}


@pytest.fixture(scope="module")
def tasks() -> list[dict]:
    return [json.loads(line) for line in (DATA_DIR / mk.OUT_FILE).read_text(encoding="utf-8").splitlines()]


def _norm(package: str) -> str:
    return re.sub(r"[-_.]+", "-", package).lower()


def test_grounded_tasks_have_their_fields_counts_and_every_kind(tasks):
    assert all(set(t) == FIELDS for t in tasks)
    for split, n in mk.N_PER_SPLIT.items():
        mine = [t for t in tasks if t["split"] == split]
        assert len(mine) == n and {t["kind"] for t in mine} == set(mk.KINDS)
    assert len({t["id"] for t in tasks}) == len(tasks) and len({t["object"] for t in tasks}) == len(tasks)
    assert all(t["licence"] and t["version"] for t in tasks)


def test_grounded_splits_come_from_different_packages_used_by_no_other_data_file(tasks):
    by_split = {s: {_norm(t["package"]) for t in tasks if t["split"] == s} for s in mk.N_PER_SPLIT}
    assert not by_split["tuning"] & by_split["held-back"]
    others = set()
    for path in sorted(DATA_DIR.glob("*.jsonl")):
        if path.name != mk.OUT_FILE:
            for line in path.read_text(encoding="utf-8").splitlines():
                rec = json.loads(line) if line.strip() else {}
                if isinstance(rec, dict) and isinstance(rec.get("package"), str):
                    others.add(_norm(rec["package"]))
    assert not (by_split["tuning"] | by_split["held-back"]) & others


def test_grounded_prompt_holds_the_function_and_asks_what_its_kind_says(tasks):
    for t in tasks:
        code = t["prompt"].split("```python\n", 1)[1].rsplit("\n```", 1)[0]
        tree = ast.parse(code)  # the real function, whole
        (fn,) = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        assert t["object"].endswith("." + fn.name)
        assert mk.MIN_LINES <= code.count("\n") + 1 <= mk.MAX_LINES + 1
        if t["kind"] == "rename-function":
            assert f"`{fn.name}` to `{fn.name}_impl`" in t["prompt"]
        elif t["kind"] == "rename-parameter":
            old = re.search(r"parameter `(\w+)`", t["prompt"]).group(1)
            assert old in {a.arg for a in fn.args.args + fn.args.posonlyargs + fn.args.kwonlyargs}
        else:
            assert len(ast.get_docstring(fn).split()) >= mk.MIN_DOC_WORDS


def test_grounded_spec_is_parsed_and_refused_in_one_line():
    assert parse_grounded("held-back") == ("held-back", None) and parse_grounded("tuning:2") == ("tuning", 2)
    for bad, says in (("test", "must be one of"), ("tuning:0", r"in \[1, 9\]"), ("tuning:x", "must be an integer"),
                      ("held-back:99", r"in \[1, 9\]")):
        with pytest.raises(ValueError, match=says):
            parse_grounded(bad)


def test_prompt_set_adds_grounded_tasks_as_their_own_group():
    ps = PromptSet.of(["hi"], "none", "held-back:2")
    assert ps.groups == ("short", GROUP_GROUNDED, GROUP_GROUNDED) and ps.grounded == "held-back:2"
    assert ps.texts[1:] == tuple(text for _, text in grounded_prompts("held-back", 2))
    assert [t["id"] for t in grounded_tasks("tuning")][:1] == ["grounded-tuning-00"]


def test_bench_refuses_grounded_with_its_other_schedules(tmp_path, capsys, no_model_loading):
    from tests.support import cli_exit

    for command in ("bench-tune", "bench-seed-tables", "bench-tune-runtime"):
        rc = cli_exit([command, "--grounded", "held-back", "--out", str(tmp_path)])
        assert rc == 2 and "--grounded" in capsys.readouterr().err, command


@pytest.mark.slow
def test_grounded_file_equals_generator_output(tasks):
    """Fault class: hand edits or a stale file (re-running the builder must give the file byte for byte)."""
    import importlib.metadata

    for t in tasks:
        if importlib.metadata.version(t["package"]) != t["version"]:
            pytest.skip(f"{t['package']} {importlib.metadata.version(t['package'])} is installed; the file was "
                        f"built with {t['version']}")
    assert (DATA_DIR / mk.OUT_FILE).read_text(encoding="utf-8") == jsonl_text(mk.generate(), sort_keys=True)
