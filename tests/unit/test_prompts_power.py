"""The power-size prompt set (lab/data/prompts_power.jsonl): in sync with its generator, its
size and balance, twins built like the embedded set's, every real source in it, and the
README's power table computed from it."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest

from lab.prompts import CATEGORIES, load_prompts
from tests.support import assert_twins_built_like_the_embedded_set
from tools.datagen import DATA_DIR
from tools.datagen import make_prompts_power as gen
from tools.datagen.make_study_twins import load_sample

POWER_SET = DATA_DIR / "prompts_power.jsonl"
README = Path(__file__).parents[2] / "docs" / "design.md"  # where the power table is documented


@pytest.fixture(scope="module")
def prompts():
    return load_prompts(POWER_SET)


def test_prompts_power_file_equals_generator_output():
    """Regenerating gives the committed file's clean and poisoned records byte for byte (fault class:
    hand edits, a stale file, or a source package whose version changed under the set). The neutral
    twins need the tokenizers: tests/unit/test_study_twins.py checks their form, the integration
    tier their lengths."""
    records = gen.build(load_sample(), gen.real_records())
    expected = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    lines = POWER_SET.read_text(encoding="utf-8").splitlines(keepends=True)
    assert "".join(ln for ln in lines if json.loads(ln).get("variant") != "neutral") == expected


def test_prompts_power_size_balance_and_twins_built_like_the_embedded_set(prompts):
    assert len(prompts) >= 1800 and sum(p.variant == "poisoned" for p in prompts) >= 350
    counts = Counter((p.category, p.variant) for p in prompts)
    for cat in CATEGORIES:
        assert counts[(cat, "clean")] == gen.PER_CATEGORY and counts[(cat, "poisoned")] == gen.TWINS_PER_CATEGORY
        assert counts[(cat, "neutral")] == gen.TWINS_PER_CATEGORY
    assert_twins_built_like_the_embedded_set(prompts)


def test_prompts_power_holds_every_distinct_real_source_prompt(prompts):
    from lab.sources import load_source

    contents = {p.messages[-1]["content"]: p for p in prompts}
    for cat, names in gen.SOURCES_BY_CATEGORY.items():
        for name in names:
            real = load_source(name)
            assert real, name
            for p in real:
                assert contents[p.messages[-1]["content"]].category == cat
    notes = Counter(json.loads(line).get("note") for line in POWER_SET.read_text(encoding="utf-8").splitlines())
    assert notes["source: humaneval"] == 164  # the whole benchmark


def test_readme_power_table_is_the_computed_one(prompts):
    """Every row of the README's power table for the set states what power_table computes."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("Power of the study on `lab/data/prompts_power.jsonl`"):]
    for row in gen.power_table(prompts):
        line = next(ln for ln in section.splitlines() if ln.startswith(f"| {row['name']} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == f"{row['n']} {row['unit']}", line
        if math.isfinite(row["min_detectable"]):
            assert cells[2] == f"{row['min_detectable']:.3f}" and cells[4] == str(row["n_needed"]), line
        else:
            assert re.search(r"from a run", cells[2]), line
