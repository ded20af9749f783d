"""The larger prompt set (lab/data/prompts_large.jsonl) and its generator stay in sync and balanced."""

from __future__ import annotations

import json
from collections import Counter

from lab.prompts import CATEGORIES, load_prompts
from tests.support import assert_twins_built_like_the_embedded_set
from tools.datagen import DATA_DIR
from tools.datagen import make_prompts_large as gen
from tools.datagen.make_study_twins import load_sample

LARGE = DATA_DIR / "prompts_large.jsonl"


def test_prompts_large_file_equals_generator_output():
    """Regenerating gives the committed file byte for byte (fault class: hand edits or a stale file)."""
    records = gen.build(load_sample())
    expected = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    assert LARGE.read_text(encoding="utf-8") == expected


def test_prompts_large_balanced_with_twins_built_like_the_embedded_set():
    prompts = load_prompts(LARGE)
    counts = Counter((p.category, p.variant) for p in prompts)
    for cat in CATEGORIES:
        assert counts[(cat, "clean")] == gen.PER_CATEGORY and counts[(cat, "poisoned")] == gen.TWINS_PER_CATEGORY
    assert_twins_built_like_the_embedded_set(prompts)
