"""lab.typed: a frozen dataclass to JSON and back, every value checked against its hint.

Fault class: a report read by string keys, where a value of the wrong shape (a list where an object was, a
string where a number was) surfaces as whatever the reader raises further on, or as a silent wrong figure.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema
import pytest
from hypothesis import given, strategies as st

from lab.typed import ShapeError, from_json, json_schema, may_be_absent, to_json

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Hyp:
    name: str
    effect: float | None
    verdict: Literal["supported", "not supported", "inconclusive", "untestable"]
    n: int = 0


@dataclass(frozen=True)
class Toy:
    kind_of_run: str
    tests: tuple[Hyp, ...]
    settings: dict[str, Any]
    best: Hyp | None = None
    counts: list[int] = field(default_factory=list)
    flag: bool = False


FINITE = st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=False)
JSON_LEAVES = st.none() | st.booleans() | st.integers(-10**6, 10**6) | FINITE | st.text(max_size=8)
TESTS = st.builds(Hyp, name=st.text(max_size=8), effect=st.none() | FINITE,
                  verdict=st.sampled_from(["supported", "not supported", "inconclusive", "untestable"]),
                  n=st.integers(0, 10**6))
TOYS = st.builds(Toy, kind_of_run=st.text(max_size=8), tests=st.lists(TESTS, max_size=4).map(tuple),
                 settings=st.dictionaries(st.text(max_size=5), JSON_LEAVES, max_size=4),
                 best=st.none() | TESTS, counts=st.lists(st.integers(0, 99), max_size=4), flag=st.booleans())


@given(TOYS)
def test_typed_from_json_of_to_json_is_the_value_and_its_text_round_trips(toy):
    """from_json(T, to_json(x)) == x, also through json.dumps/loads, and the value meets json_schema(T)."""
    data = json.loads(json.dumps(to_json(toy), allow_nan=False))
    assert from_json(Toy, data) == toy
    jsonschema.validate(data, json_schema(Toy))
    assert json.dumps(to_json(from_json(Toy, data))) == json.dumps(data)


def test_typed_to_json_keeps_declared_order_and_an_integer_for_a_float():
    data = {"kind_of_run": "x", "tests": [{"name": "H1", "effect": 3, "verdict": "supported", "n": 2}],
            "settings": {"b": 1, "a": [1, {"c": None}]}}
    toy = from_json(Toy, data)
    assert toy.tests[0].effect == 3 and isinstance(toy.tests[0].effect, int)
    assert list(to_json(toy)) == ["kind_of_run", "tests", "settings", "best", "counts", "flag"]
    assert to_json(toy)["settings"] == {"b": 1, "a": [1, {"c": None}]}


@pytest.mark.parametrize("data, where, problem", [
    ({"kind_of_run": "x", "tests": {}, "settings": {}}, "tests", "an array goes here, not an object of 0 keys"),
    ({"kind_of_run": "x", "tests": [{"name": "H1", "effect": "big", "verdict": "supported"}], "settings": {}},
     "tests[0].effect", "a number or null goes here, not a string ('big')"),
    ({"kind_of_run": "x", "tests": [{"name": "H1", "effect": 1.0, "verdict": "maybe"}], "settings": {}},
     "tests[0].verdict", "'supported' or 'not supported' or 'inconclusive' or 'untestable' goes here"),
    ({"kind_of_run": "x", "tests": [], "settings": {}, "counts": [1, True]}, "counts[1]", "an integer goes here, not true"),
    ({"kind_of_run": "x", "tests": []}, "settings", "missing (Toy needs it)"),
    ({"kind_of_run": "x", "tests": [], "settings": {}, "surprise": 1}, "", "no field 'surprise' in Toy"),
    ({"kind_of_run": "x", "tests": [{"name": "H1", "effect": math.inf, "verdict": "supported"}], "settings": {}},
     "tests[0].effect", "a number or null goes here, not the number inf"),
    ([1, 2], "", "an object goes here, not an array of 2"),
])
def test_typed_from_json_wrong_shape_names_where_and_what_in_one_line(data, where, problem):
    with pytest.raises(ShapeError) as info:
        from_json(Toy, data)
    assert info.value.where == where and info.value.problem.startswith(problem)
    assert "\n" not in str(info.value) and len(str(info.value)) < 200


def test_typed_a_long_value_is_cut_in_the_reason():
    with pytest.raises(ShapeError, match=r"not a string \('x{60}\.\.\.'\)$"):
        from_json(Toy, {"kind_of_run": "x", "tests": [], "settings": {}, "flag": "x" * 5000})


def test_typed_negative_control_a_right_value_raises_nothing():
    """The checks above fail for their planted fault, not for any value: the same record, well formed, reads."""
    assert from_json(Toy, {"kind_of_run": "x", "tests": [], "settings": {}, "flag": True}).flag is True


@dataclass(frozen=True, kw_only=True)
class Head:
    name: str
    draft: str


@dataclass(frozen=True, kw_only=True)
class Body:
    config: int
    draft: str
    extra: list[int] | None = may_be_absent()
    load: float | None


@dataclass(frozen=True, kw_only=True)
class Whole(Body, Head):
    """Head's fields, then Body's (bases laid out from the last; ``draft``, declared by both, where Head has it),
    and ``sides`` written before Body's ``load``."""

    sides: dict[str, Body] | None = may_be_absent(before="load")


WHOLE_KEYS = ["name", "draft", "config", "extra", "sides", "load"]


def test_typed_a_field_written_before_another_stands_there_in_to_json_and_json_schema():
    """A subclass's field declared may_be_absent(before=X) is written just before X, in the file and in the schema;
    read back it is the value, and left out when None. Fault class: a typed report whose keys come out in another
    order than the files written before the type (a byte changed in report.json)."""
    side = Body(config=2, draft="d", extra=None, load=None)
    whole = Whole(name="n", draft="d", config=1, extra=[3], sides={"s": side}, load=0.5)
    data = json.loads(json.dumps(to_json(whole)))
    assert list(data) == WHOLE_KEYS and list(data["sides"]["s"]) == ["config", "draft", "load"]
    assert list(json_schema(Whole)["properties"]) == WHOLE_KEYS
    jsonschema.validate(data, json_schema(Whole))
    assert from_json(Whole, data) == whole
    assert list(to_json(Whole(name="n", draft="d", config=1, load=None))) == ["name", "draft", "config", "load"]
    from lab.reports import to_jsonable  # the writer's converter: the same keys in the same order

    assert to_jsonable(whole) == to_json(whole) and list(to_jsonable(whole)) == WHOLE_KEYS


def test_typed_a_field_written_before_no_field_is_refused_naming_both():
    @dataclass(frozen=True)
    class Stray:
        a: int
        b: int | None = may_be_absent(before="c")

    with pytest.raises(TypeError, match=r"^Stray\.b is written before 'c', which is no field of Stray$"):
        to_json(Stray(1))
