"""One verdict vocabulary (lab.verdicts) and one number formatter (lab.numbers), each spelled in one place.

Fault class: a verdict word or a missing-figure marker retyped beside its home (``DECIDED = ("supported",
"not supported")`` in a page, ``"n/a"`` inline in a renderer), which drifts from the judge that gives it
(issue "The house, fourth pass": the study's table said inconclusive where the note said untestable). The
scanner reads the source with :mod:`ast`; a planted source beside each check must be found.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import lab
from lab.analysis import hypotheses
from lab.numbers import MISSING, PAGE_MISSING
from lab.verdicts import (DECIDED, INCONCLUSIVE, NOT_SUPPORTED, NULL_WORDS, SUPPORTED, UNTESTABLE, VERDICTS,
                          meets_bars, null_rejected, settled)

pytestmark = pytest.mark.unit

LAB = Path(lab.__file__).resolve().parent
HOMES = {"lab/verdicts.py", "lab/numbers.py"}


def spelled_words(source: str, words: set[str]) -> list[tuple[int, str]]:
    """Every string constant of ``source`` that is one of ``words``, except where it names a field (a dict key,
    ``x.get("untestable")``, ``x["untestable"]``, ``"untestable" in x``): the field ``untestable`` shares its
    verdict's word."""
    tree = ast.parse(source)
    keys: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys.update(id(k) for k in node.keys if k is not None)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            keys.update(id(a) for a in node.args[:1])
        elif isinstance(node, ast.Subscript):
            keys.add(id(node.slice))
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            keys.add(id(node.left))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in words and id(n) not in keys]


def lab_sources() -> dict[str, str]:
    return {p.relative_to(LAB.parent).as_posix(): p.read_text(encoding="utf-8") for p in sorted(LAB.rglob("*.py"))}


@pytest.mark.slow  # about a second or more on a quiet 2-core machine (the quick loop's one-minute aim)
def test_verdict_words_spelled_only_in_lab_verdicts():
    found = {path: hits for path, source in lab_sources().items() if path not in HOMES
             and (hits := spelled_words(source, set(VERDICTS)))}
    assert not found, f"verdict words retyped outside lab/verdicts.py (import them from there): {found}"


def test_missing_marker_n_a_spelled_only_in_lab_numbers():
    found = {path: hits for path, source in lab_sources().items() if path not in HOMES
             and (hits := spelled_words(source, {MISSING}))}
    assert not found, f'"n/a" retyped outside lab/numbers.py (lab.numbers.MISSING, number_text): {found}'


def test_spelled_words_planted_source_found_and_field_names_skipped():
    planted = ('DECIDED = ("supported", "not supported")\n'
               'x = t.get("untestable") or t["untestable"] or {"untestable": 1} or "untestable" in t\n'
               'y = "n/a" if z is None else z\n')
    assert spelled_words(planted, set(VERDICTS)) == [(1, "supported"), (1, "not supported")]
    assert spelled_words(planted, {MISSING}) == [(3, "n/a")]


def test_hypotheses_reexports_the_one_vocabulary():
    assert (hypotheses.SUPPORTED, hypotheses.NOT_SUPPORTED, hypotheses.INCONCLUSIVE, hypotheses.UNTESTABLE,
            hypotheses.VERDICTS) == (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, UNTESTABLE, VERDICTS)
    assert set(DECIDED) < set(VERDICTS) and MISSING != PAGE_MISSING


def test_settled_untestable_reason_wins_over_every_verdict():
    assert [settled(v, "its measure fails validation") for v in VERDICTS] == [UNTESTABLE] * len(VERDICTS)
    assert [settled(v) for v in VERDICTS] == list(VERDICTS)


def test_null_and_bar_tests_give_vocabulary_verdicts_with_their_printed_words():
    assert {null_rejected(r) for r in (True, False)} <= set(VERDICTS) >= {meets_bars(ok) for ok in (True, False)}
    assert NULL_WORDS[null_rejected(True)] == "rejects the null"
    assert NULL_WORDS[null_rejected(False)] == "does not reject"
