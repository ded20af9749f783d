"""Rebuild the twins of the study's prompt sets from the distractor sample, with neutral twins from docstrings.

A poisoned twin is a distractor text, a blank line, then its clean question; its neutral twin adds
harmless text of the same length instead. The distractors are the sample of
:data:`~tools.datagen.make_intervention_triples.DISTRACTOR_FILE` (prose that ships with installed
packages and CPython, nobody here wrote it, no instruction to a model; at least 24 texts, since a
verdict on a few texts is a verdict on those texts), so that H4a/H4b read a distractor as a random
effect (:mod:`lab.analysis.distractors`):

* **poisoned twins** (:func:`poisoned_twin`): each takes the least-used text of the sample so far in
  its file that shares no content word with its question
  (:func:`~tools.datagen.make_neutral_twins.distractor_picker`), so a set of 18 twins uses 18 texts
  and the power set's 360 use every text 12 or 13 times;
* **neutral twins** (:func:`with_neutral_twins`): standard-library docstrings (read with :mod:`ast`),
  ranked by content words shared with the question and cut to the poisoned twin's added length within
  :data:`~tools.datagen.make_neutral_twins.LENGTH_TOLERANCE` on every tokenizer
  (:func:`~tools.datagen.make_neutral_twins.neutral_passage`; :func:`study_pool`). That pool is
  neither the length reference's (CPython's help topics; Matplotlib, transformers, jsonschema and pip docstrings) nor
  the health validation set's (NumPy, SciPy, Rich and its standard-library modules);
* **the calibration's neutral variants** (``calibration_neutral.jsonl``), matched in the same way to
  the calibration's poisoned variants, which take the embedded set's distractors in turn
  (:func:`lab.health.calibration.poisoned_variants`).

This module rewrites the embedded set's twins in place (its hand-written clean prompts, their ids
and which of them has a twin stay, so ``--limit`` selections and the intervention triples' unused
questions stay the same) and the calibration's neutral variants; the generated sets' builders
(:mod:`tools.datagen.make_prompts_large`, :mod:`tools.datagen.make_prompts_power`) call
:func:`poisoned_twin` and :func:`with_neutral_twins` themselves.

Deterministic for a given CPython and tokenizers; run from the project root (needs the tokenizers
of :data:`~tools.datagen.make_neutral_twins.TOKENIZERS`, no weights; about a minute)::

    python -m tools.datagen.make_study_twins     # prompts.jsonl and calibration_neutral.jsonl
    python -m tools.datagen.make_prompts_large   # prompts_large.jsonl
    python -m tools.datagen.make_prompts_power   # prompts_power.jsonl
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Sequence
from pathlib import Path

from tools.datagen import DATA_DIR, Count, read_jsonl, write_jsonl
from tools.datagen.make_health_validation import shingles
from tools.datagen.make_intervention_triples import DISTRACTOR_FILE, neutral_pool
from tools.datagen.make_neutral_twins import (content_words, distractor_picker, neutral_passage, neutral_record,
                                             poisoned_record, token_counters)

EMBEDDED_FILE = "prompts.jsonl"
CALIBRATION_FILE = "calibration_neutral.jsonl"
# Prompt files whose text a neutral passage may not share a word run with: the length references the
# health measure is read against and the validation set it is checked on.
HEALTH_FILES = ("length_reference.jsonl", "length_reference_docstrings.jsonl", "health_validation.jsonl")

Picker = Callable[[str], "dict | None"]


def load_sample(data_dir: Path | None = None) -> list[dict]:
    """The distractor sample's records (``{"id", "text", "package", "version", "path", ...}``)."""
    return read_jsonl((data_dir or DATA_DIR) / DISTRACTOR_FILE)


def study_pool(pool: dict[str, str], data_dir: Path | None = None) -> dict[str, str]:
    """``pool`` less every docstring sharing a word run
    (:func:`~tools.datagen.make_health_validation.shingles`) with a prompt of :data:`HEALTH_FILES`.

    The standard-library pool already leaves out the validation set's modules; this also drops
    the odd stock phrase ("must be less than or equal to the ...") two docstrings share, so no
    neutral twin repeats text the health measure is fitted or checked on.
    """
    avoid: set[tuple[str, ...]] = set()
    for name in HEALTH_FILES:
        for r in read_jsonl((data_dir or DATA_DIR) / name):
            avoid |= shingles(r["prompt"])
    return {k: v for k, v in pool.items() if not shingles(v) & avoid}


def poisoned_twin(clean: dict, pick: Picker) -> dict:
    """The poisoned twin ``<id>-poisoned`` of a clean record: the text ``pick`` gives, a blank line, the question.

    Raises:
        ValueError: the question shares a content word with every text of the sample.
    """
    d = pick(clean["messages"][-1]["content"])
    if d is None:
        raise ValueError(f"{clean['id']}: shares a content word with every distractor of the sample")
    return poisoned_record(clean, d, "poisoned")


def with_sample_distractors(records: list[dict], sample: Sequence[dict]) -> list[dict]:
    """``records`` with every poisoned twin rebuilt from ``sample`` (file order) and neutral twins dropped."""
    pick = distractor_picker(sample)
    by_id = {r["id"]: r for r in records}
    return [poisoned_twin(by_id[r["twin_of"]], pick) if r.get("variant") == "poisoned" else r
            for r in records if r.get("variant") != "neutral"]


def with_neutral_twins(records: list[dict], counts: Sequence[Count], pool: dict[str, str]) -> list[dict]:
    """``records`` without their old neutral twins, a new one after each poisoned twin."""
    pool_words = {k: content_words(v) for k, v in pool.items()}
    kept = [r for r in records if r.get("variant") != "neutral"]
    by_id = {r["id"]: r for r in kept}
    out = []
    for r in kept:
        out.append(r)
        if r.get("variant") == "poisoned":
            out.append(neutral_record(by_id[r["twin_of"]], r, counts, pool, pool_words, "neutral"))
    return out


def calibration_records(embedded: Path, counts: Sequence[Count], pool: dict[str, str]) -> list[dict]:
    """One neutral variant per calibration prompt, matched to its poisoned variant
    (:func:`lab.health.calibration.poisoned_variants` over ``embedded``'s distractors):
    ``{"id", "twin_of", "added", "note"}``."""
    from lab.health.calibration import distractor_texts, poisoned_variants
    from lab.prompts import load_prompts
    from lab.sinks.calibration import load_prompts as load_calibration

    pool_words = {k: content_words(v) for k, v in pool.items()}
    clean = load_calibration(None)
    out = []
    for c, p in zip(clean, poisoned_variants(clean, distractor_texts(load_prompts(embedded)))):
        target = [n(p.prompt) - n(c.prompt) for n in counts]
        text, used = neutral_passage(c.prompt, target, counts, pool, pool_words)
        out.append({"id": f"{c.id}-neutral", "twin_of": c.id, "added": text,
                    "note": f"CPython {platform.python_version()} standard-library docstrings {', '.join(used)} "
                            f"(read with ast), cut to the added length of {p.id}"})
    return out


def main() -> None:
    from lab.prompts import load_prompts

    here = DATA_DIR
    counts, pool = token_counters(), study_pool(neutral_pool(), here)
    records = with_sample_distractors(read_jsonl(here / EMBEDDED_FILE), load_sample(here))
    write_jsonl(here / EMBEDDED_FILE, with_neutral_twins(records, counts, pool))
    prompts = load_prompts(here / EMBEDDED_FILE)  # validate what was written
    print(f"{here / EMBEDDED_FILE}: {sum(p.variant == 'poisoned' for p in prompts)} poisoned and "
          f"{sum(p.variant == 'neutral' for p in prompts)} neutral twins, "
          f"{len({p.distractor for p in prompts if p.variant == 'poisoned'})} distractor texts")
    write_jsonl(here / CALIBRATION_FILE, calibration_records(here / EMBEDDED_FILE, counts, pool))
    print(f"{here / CALIBRATION_FILE}: written")


if __name__ == "__main__":
    main()
