"""The study sets' twins (tools.datagen.make_study_twins): distractors drawn from the sample of real prose, spread
over it, never about their question; neutral twins from standard-library docstrings, not the length
reference's help topics; the embedded set in sync with its generator."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from lab.prompts import load_prompts
from tests.support import assert_twins_built_like_the_embedded_set
from tools.datagen import DATA_DIR as DATA
from tools.datagen import jsonl_text, read_jsonl
from tools.datagen import make_study_twins as twins
from tools.datagen.make_health_validation import shingles
from tools.datagen.make_neutral_twins import LENGTH_TOLERANCE, TOKENIZERS, content_words, distractor_picker

pytestmark = pytest.mark.unit

STUDY_FILES = ("prompts.jsonl", "prompts_large.jsonl", "prompts_power.jsonl")
# Stated by issue 36 (item 6): the distractors are a sample of at least 24 texts, not six fixed ones.
MIN_TEXTS = 24


@pytest.fixture(scope="module")
def sample() -> list[dict]:
    return twins.load_sample()


@pytest.mark.parametrize("name", STUDY_FILES)
def test_every_poisoned_twin_is_a_sample_text_then_its_question(name):
    assert_twins_built_like_the_embedded_set(load_prompts(DATA / name))


def test_embedded_set_uses_a_distinct_text_per_twin_and_the_larger_sets_the_whole_sample(sample):
    """Fault class: a set whose twins lean on a few texts (the old six), so the random-effect test has no texts."""
    assert len(sample) >= MIN_TEXTS
    embedded = Counter(p.distractor for p in load_prompts(DATA / "prompts.jsonl") if p.variant == "poisoned")
    assert len(embedded) == sum(embedded.values()) == 18  # 18 twins, 18 texts
    for name in ("prompts_large.jsonl", "prompts_power.jsonl"):
        uses = Counter(p.distractor for p in load_prompts(DATA / name) if p.variant == "poisoned")
        assert set(uses) == {d["id"] for d in sample}, name
        assert max(uses.values()) - min(uses.values()) <= 2, (name, uses)  # the no-shared-word rule skews a little


@pytest.mark.parametrize("name", STUDY_FILES)
def test_no_distractor_shares_a_content_word_with_its_question(name, sample):
    words = {d["id"]: content_words(d["text"]) for d in sample}
    prompts = load_prompts(DATA / name)
    by_id = {p.id: p for p in prompts}
    for p in prompts:
        if p.variant == "poisoned":
            assert not content_words(by_id[p.twin_of].messages[-1]["content"]) & words[p.distractor], p.id


def test_embedded_set_twins_equal_generator_output(sample):
    """Fault class: hand edits or a stale file. The poisoned twins need no tokenizer, so they are rebuilt here
    byte for byte; the neutral twins' lengths are recounted by the slow test below and the integration tier."""
    records = read_jsonl(DATA / "prompts.jsonl")
    assert [r for r in records if r.get("variant") != "neutral"] == twins.with_sample_distractors(records, sample)


@pytest.mark.parametrize("name", ("prompts.jsonl", "prompts_power.jsonl"))
def test_neutral_twins_come_from_docstrings_not_the_length_reference(name):
    """The neutral text is from another source than the length reference's (help topics and four packages'
    docstrings) and the health validation set's, so neither check reads the study's own text."""
    records = read_jsonl(DATA / name)
    by_id = {r["id"]: r for r in records}
    neutral = [r for r in records if r.get("variant") == "neutral"]
    assert len(neutral) == sum(r.get("variant") == "poisoned" for r in records)
    reference = set()
    for other in ("length_reference.jsonl", "length_reference_docstrings.jsonl", "health_validation.jsonl"):
        for rec in read_jsonl(DATA / other):  # the decoded text: the file's JSON escapes would split words
            reference |= shingles(rec["prompt"])
    for r in neutral:
        assert "standard-library docstrings" in r["note"] and "help topic" not in r["note"], r["id"]
        sizes = re.findall(r"(\S+) (\d+) \(poisoned (\d+)\)", r["note"])
        assert [n for n, _, _ in sizes] == list(TOKENIZERS), r["note"]
        assert all(abs(int(g) - int(t)) <= LENGTH_TOLERANCE * int(t) for _, g, t in sizes), r["note"]
        question = "\n\n" + by_id[r["twin_of"]]["messages"][-1]["content"]
        assert r["messages"][-1]["content"].endswith(question), r["id"]
        passage = r["messages"][-1]["content"][: -len(question)]
        assert not shingles(passage) & reference, r["id"]


def test_calibration_neutral_variants_come_from_docstrings():
    records = read_jsonl(DATA / twins.CALIBRATION_FILE)
    assert len(records) == 36
    assert all("standard-library docstrings" in r["note"] for r in records)


def test_distractor_picker_takes_the_least_used_text_without_a_shared_word():
    sample = [{"id": "a", "text": "rivers flow"}, {"id": "b", "text": "mountains rise"},
              {"id": "c", "text": "oceans swell"}]
    pick = distractor_picker(sample)
    assert [pick("Tell me about deserts")["id"] for _ in range(4)] == ["a", "b", "c", "a"]
    assert pick("Why do rivers flow?")["id"] == "b"  # "a" shares "rivers"/"flow"; "b" is least used next in turn
    assert pick("rivers mountains oceans") is None  # every text shares a word: nothing taken
    assert pick("Tell me about deserts")["id"] == "c"  # the refusal used nothing up


def test_poisoned_twin_refuses_a_question_every_text_is_about():
    clean = {"id": "q-1", "category": "factual", "messages": [{"role": "user", "content": "rivers"}]}
    with pytest.raises(ValueError, match="q-1: shares a content word with every distractor"):
        twins.poisoned_twin(clean, distractor_picker([{"id": "a", "text": "rivers flow"}]))


@pytest.mark.slow
def test_neutral_twins_equal_generator_output(sample):
    """The embedded set's neutral twins and the calibration's, rebuilt with the tokenizers, byte for byte."""
    from tools.datagen.make_intervention_triples import neutral_pool
    from tools.datagen.make_neutral_twins import token_counters

    try:
        counts = token_counters()
    except Exception as exc:  # noqa: BLE001 - any tokenizer that cannot be loaded here skips, whatever the cause
        pytest.skip(f"the tokenizers of {TOKENIZERS} are not available: {exc}")
    pool = twins.study_pool(neutral_pool())
    records = read_jsonl(DATA / "prompts.jsonl")
    assert jsonl_text(twins.with_neutral_twins(records, counts, pool)) == \
        (DATA / "prompts.jsonl").read_text(encoding="utf-8")
    assert jsonl_text(twins.calibration_records(DATA / "prompts.jsonl", counts, pool)) == \
        (DATA / twins.CALIBRATION_FILE).read_text(encoding="utf-8")
