"""``lab validate-context`` and its files tried as a hostile user would (issue 53's fresh round): each test is
one case that once ended in a traceback, an unforeseen error, a refusal after the model loaded, a message
naming the wrong thing or a silently ignored input."""

from __future__ import annotations

import json

import pytest

from lab.health.context_items import load_items


def _item(i: int, **kw) -> dict:
    return {"id": f"p{i}", "package": "pkg", "object": f"f{i}", "question": f"What does `f{i}` do?",
            "relevant": f"Return the sum {i}.", "irrelevant": f"Open the file {i}.", **kw}


def _write(path, items) -> str:
    path.write_text("".join(json.dumps(it) + "\n" for it in items), encoding="utf-8")
    return str(path)


def test_load_items_deeply_nested_line_refused_by_line(tmp_path):
    """Fault class: a JSON line nested past Python's recursion limit ended in an unforeseen RecursionError."""
    bad = tmp_path / "deep.jsonl"
    bad.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ValueError, match=r"deep.jsonl:1: not JSON \(nested too deeply"):
        load_items(bad)


def test_load_items_not_utf8_refused_naming_file_and_line(tmp_path):
    """Fault class: a pairs file that is not UTF-8 was refused by the codec's message alone (no file, no line)."""
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes((json.dumps(_item(0)) + "\n").encode() + json.dumps(_item(1)).encode()[:-2] + b'\xe9"}\n')
    with pytest.raises(ValueError, match=r"latin1.jsonl:2: not valid UTF-8"):
        load_items(bad)


def test_load_items_lone_surrogate_refused_before_the_tokenizer(tmp_path):
    """Fault class: a ``\\ud800`` escape passed the reader and ended in the tokenizer's TypeError after the model
    loaded (an error the lab did not foresee)."""
    bad = _write(tmp_path / "sur.jsonl", [_item(0), _item(1, relevant="x\ud800y"), _item(2)])
    with pytest.raises(ValueError, match=r"sur.jsonl:2: field 'relevant' holds a lone surrogate"):
        load_items(bad)


def test_load_items_pair_with_one_context_twice_refused(tmp_path):
    """Fault class: a pair whose relevant and irrelevant contexts are the same text (it cannot rank) was scored
    and pulled every AUROC toward 0.5 in silence."""
    bad = _write(tmp_path / "same.jsonl", [_item(0), _item(1, irrelevant=_item(1)["relevant"]), _item(2)])
    with pytest.raises(ValueError, match=r"same.jsonl:2: 'relevant' and 'irrelevant' are the same text"):
        load_items(bad)


def test_load_items_unicode_line_separators_stay_inside_their_record(tmp_path):
    """U+2028, U+0085 and U+2029 inside a string are JSON Lines text, not line ends."""
    path = tmp_path / "sep.jsonl"
    path.write_text("".join(json.dumps(_item(i, relevant=f"a\u2028b\u0085c\u2029{i}"), ensure_ascii=False) + "\r\n"
                            for i in range(3)), encoding="utf-8")
    items = load_items(path)
    assert [it.line for it in items] == [1, 2, 3] and items[0].relevant == "a\u2028b\u0085c\u20290"
