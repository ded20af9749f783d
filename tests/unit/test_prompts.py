"""Prompt file validation and balanced selection (lab.prompts)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from lab.prompts import CATEGORIES, load_prompts, parse_prompts, select_prompts

MIN_PROMPTS = 60  # issue 5: at least 60 prompts
MIN_TWINS = 15  # issue 5: at least 15 poisoned twins


def _line(pid="a", category="math", content="What is 2 + 2?", **extra) -> str:
    return json.dumps({"id": pid, "category": category, "messages": [{"role": "user", "content": content}], **extra})


# --------------------------------------------------------------------------- the embedded set


def test_embedded_prompts_meet_issue_requirements():
    prompts = load_prompts()
    clean = [p for p in prompts if p.variant == "clean"]
    poisoned = [p for p in prompts if p.variant == "poisoned"]
    assert len(prompts) >= MIN_PROMPTS
    assert set(p.category for p in prompts) == set(CATEGORIES)
    assert len(poisoned) >= MIN_TWINS
    by_id = {p.id: p for p in prompts}
    for p in poisoned:
        twin = by_id[p.twin_of]
        # same question after distractor text: the clean user message ends the poisoned one
        assert p.messages[-1]["content"].endswith(twin.messages[-1]["content"])
        # a real distractor of the sample: at least 40 tokens (over 100 characters) of prose before it
        assert len(p.messages[-1]["content"]) > len(twin.messages[-1]["content"]) + 100
    assert min(Counter(p.category for p in clean).values()) >= 10


def test_embedded_summary_prompts_supply_a_passage():
    summaries = [p for p in load_prompts() if p.category == "summary"]
    assert summaries, "the embedded set has no summary prompts"
    for p in summaries:
        assert "Passage:" in p.messages[-1]["content"], p.id


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("bad_line,match", [
    ("{not json", "malformed JSON"),
    ('["a list"]', "expected a JSON object"),
    (_line(category="poetry"), "category='poetry'"),
    (_line(pid=""), "id=''"),
    (_line(pid="a/b"), "id='a/b'"),
    (_line(twinof="x"), "unknown field"),
    (json.dumps({"id": "a", "category": "math"}), "missing field 'messages'"),
    (json.dumps({"id": "a", "category": "math", "messages": []}), "non-empty list"),
    (json.dumps({"id": "a", "category": "math", "messages": [{"role": "bot", "content": "x"}]}), "role='bot'"),
    (json.dumps({"id": "a", "category": "math", "messages": [{"role": "user", "content": "  "}]}), "is empty"),
    (json.dumps({"id": "a", "category": "math", "messages": [{"role": "assistant", "content": "x"}]}), "must be 'user'"),
    (_line(variant="spicy"), "variant='spicy'"),
    (_line(variant="poisoned"), "needs twin_of"),
])
def test_parse_prompts_bad_line_raises_naming_line(bad_line, match):
    lines = [_line(pid="ok-1"), bad_line]
    with pytest.raises(ValueError, match=match) as info:
        parse_prompts(lines, source="p.jsonl")
    assert "p.jsonl:2" in str(info.value)


def test_parse_prompts_duplicate_id_names_both_lines():
    with pytest.raises(ValueError, match=r"p.jsonl:3: duplicate id='a' \(first on line 1\)"):
        parse_prompts([_line(pid="a"), _line(pid="b"), _line(pid="a")], source="p.jsonl")


def test_parse_prompts_twin_pointing_nowhere_raises():
    with pytest.raises(ValueError, match=r"p.jsonl:2: twin_of='zz' names no prompt"):
        parse_prompts([_line(pid="a"), _line(pid="b", twin_of="zz", variant="poisoned")], source="p.jsonl")


def test_parse_prompts_twin_of_other_category_raises():
    with pytest.raises(ValueError, match="differs from its twin"):
        parse_prompts([_line(pid="a"), _line(pid="b", category="code", twin_of="a")], source="p.jsonl")


def test_parse_prompts_second_twin_of_same_clean_raises():
    lines = [_line(pid="a"), _line(pid="b", twin_of="a"), _line(pid="c", twin_of="a")]
    with pytest.raises(ValueError, match="already has a poisoned twin"):
        parse_prompts(lines, source="p.jsonl")


def test_parse_prompts_twin_of_poisoned_raises():
    lines = [_line(pid="a"), _line(pid="b", twin_of="a"), _line(pid="c", twin_of="b")]
    with pytest.raises(ValueError, match="must name a clean one"):
        parse_prompts(lines, source="p.jsonl")


def test_parse_prompts_empty_file_raises():
    with pytest.raises(ValueError, match="holds no prompts"):
        parse_prompts(["", "  "], source="p.jsonl")


def test_parse_prompts_twin_without_variant_is_poisoned():
    prompts = parse_prompts([_line(pid="a"), "", _line(pid="b", twin_of="a")])
    assert [(p.id, p.variant, p.line) for p in prompts] == [("a", "clean", 1), ("b", "poisoned", 3)]


def test_load_prompts_missing_file_raises(tmp_path):
    with pytest.raises(ValueError, match="nope.jsonl': no such file$"):
        load_prompts(tmp_path / "nope.jsonl")


# --------------------------------------------------------------------------- selection


@pytest.mark.parametrize("limit", [1, 2, 5, 6, 11, 12, 13, 16, 18, 30, 60])
def test_select_prompts_limit_keeps_balance_and_whole_pairs(limit):
    prompts = load_prompts()
    chosen = select_prompts(prompts, limit)
    ids = {p.id for p in chosen}
    assert len(chosen) == limit
    for p in chosen:
        if p.twin_of is not None:
            assert p.twin_of in ids, f"{p.id} without its clean twin"
    # no category is more than one unit (a triple: clean, poisoned, neutral) ahead of another
    counts = Counter(p.category for p in chosen)
    if limit >= 3 * len(CATEGORIES):
        assert set(counts) == set(CATEGORIES)
        assert max(counts.values()) - min(counts.values()) <= 3
    assert [p.id for p in chosen] == [p.id for p in prompts if p.id in ids]  # file order


def test_select_prompts_small_limit_holds_twin_pairs():
    chosen = select_prompts(load_prompts(), 16)
    assert sum(p.variant == "poisoned" for p in chosen) >= 5


def test_select_prompts_none_takes_all():
    prompts = load_prompts()
    assert select_prompts(prompts, None) == prompts


@pytest.mark.parametrize("limit", [0, -3, True, 2.5])
def test_select_prompts_bad_limit_raises(limit):
    with pytest.raises(ValueError, match="limit="):
        select_prompts(load_prompts(), limit)


def test_load_prompts_non_utf8_file_names_file_and_line(tmp_path):
    """Regression (bad input): undecodable bytes gave a bare codec error naming nothing."""
    from lab.prompts import load_prompts

    bad = tmp_path / "p.jsonl"
    bad.write_bytes(b'{"id": "a"}\n\xff\xfe\n')
    with pytest.raises(ValueError, match=r"p\.jsonl'?:2: not valid UTF-8"):
        load_prompts(bad)
