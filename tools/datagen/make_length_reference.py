"""Write the clean length-reference prompts: held-out questions after harmless text of graded length.

A context-health candidate that falls with the number of content tokens N measures
length as much as context. :mod:`lab.health.references` refers such a candidate to the
value clean prompts *of the same length* get on the same model; this set is what that
reference is fitted on. It shares no question with the calibration prompts the choice
rule judges (``calibration_prompts.jsonl``) nor with the study's sets: its questions are
the 24 of ``sinks_held_out.jsonl``.

Each question appears alone and after a passage of CPython's help topics
(``pydoc_data.topics``; real documentation nobody here wrote: accurate, harmless, with
no instruction) of about :data:`ADDED_TOKENS` added tokens (SmolLM2's tokenizer; other
tokenizers split the same text into a similar count, and the reference is fitted on
each model's own N, so the targets only need to spread the lengths over the range the
calibration and study prompts cover, about 5 to 500 content tokens). The passage for
the k-th length starts at the k-th topic ranked by word overlap with the question, so
the lengths of one question do not nest one text. Built the way the neutral twins are
(:mod:`tools.datagen.make_neutral_twins`): passage, blank line, question.

Deterministic; run from the project root (needs SmolLM2's tokenizer, no weights)::

    python -m tools.datagen.make_length_reference   # writes lab/data/length_reference.jsonl
"""

from __future__ import annotations

from tools.datagen import DATA_DIR, Count, read_jsonl, token_counter, write_jsonl
from tools.datagen.make_neutral_twins import JOIN, fit_topics, ranked_topics

ADDED_TOKENS = (0, 24, 64, 160, 420)  # per question: alone, then four log-spaced passage lengths
REFERENCE_FILE = "length_reference.jsonl"
QUESTIONS_FILE = "sinks_held_out.jsonl"


def reference_records(questions: list[dict], count: Count, topics: dict[str, str]) -> list[dict]:
    """``{"id", "prompt", "note"}`` per question and length of :data:`ADDED_TOKENS`.

    Args:
        questions: ``{"id", "prompt"}`` records.
        count: Tokens of a text (no special tokens).
        topics: Help-topic name -> text.
    """
    out = []
    for q in questions:
        question = q["prompt"]
        ranked = ranked_topics(question, topics)
        for k, target in enumerate(ADDED_TOKENS):
            if target == 0:
                out.append({"id": f"{q['id']}-0", "prompt": question, "note": "the question alone"})
                continue
            text, used = fit_topics(question, ranked[k:], topics, [count], [target])
            out.append({"id": f"{q['id']}-{target}", "prompt": text + JOIN + question,
                        "note": f"CPython help topics {', '.join(used)} (pydoc_data.topics), cut to about "
                                f"{target} added tokens (SmolLM2's tokenizer)"})
    return out


def main() -> None:
    from pydoc_data.topics import topics

    here = DATA_DIR
    records = reference_records(read_jsonl(here / QUESTIONS_FILE), token_counter("smollm2"), dict(topics))
    write_jsonl(here / REFERENCE_FILE, records)
    print(f"{here / REFERENCE_FILE}: {len(records)} prompts")


if __name__ == "__main__":
    main()
