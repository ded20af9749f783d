"""Add a length-matched *neutral* twin beside every poisoned twin of a study prompt set.

A poisoned twin is its clean prompt plus a distractor, so it is always longer; a
measure that only reads length ranks it below its clean twin. The neutral twin
holds length fixed: its user message is a passage of real documentation, a blank
line, then the clean question, and the passage is cut (at a word boundary) so that
the text it adds has the poisoned twin's added length to within
:data:`LENGTH_TOLERANCE` in the tokens of every tokenizer of :data:`TOKENIZERS`.
Added length = tokens of the twin's user message minus tokens of the clean one.

Passages: CPython's help topics (``pydoc_data.topics``, the text of ``help('for')``
etc., written by the CPython documentation authors; nobody here wrote them). For
each clean question the topics are ranked by the content words they share with it
(ties: topic name order); the passage starts at the best-ranked topic whose text
matches the length on every tokenizer (tokenizers split code and prose in
different ratios), taking the next ones while it is too short; so
the added text is documentation, accurate and harmless, and as relevant as a
lexical match in that pool allows: close for the code and math questions, only
lexical for the factual, creative and ambiguous ones. Each record names its topics
in ``note``.

Deterministic: re-running rewrites the same files (existing neutral twins are
replaced), given the same CPython (its help topics) and tokenizers. Run from the
project root (needs the tokenizers of :data:`TOKENIZERS`; no weights are loaded)::

    python -m lab.data.make_neutral_twins   # prompts.jsonl, prompts_power.jsonl, calibration_neutral.jsonl
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Sequence

LENGTH_TOLERANCE = 0.05  # neutral added tokens within 5 % of the poisoned twin's, on every tokenizer
TOKENIZERS = ("smollm2", "qwen2.5-coder-0.5b")  # qwen2.5-coder (1.5B) shares the 0.5B's tokenizer
JOIN = "\n\n"  # as the poisoned twins: added text, blank line, clean question
STUDY_FILES = ("prompts.jsonl", "prompts_power.jsonl")
CALIBRATION_FILE = "calibration_neutral.jsonl"
_STOP = frozenset("about after also and are because been before being between both but can could does each "
                  "every from have here into just like made make many more most much must only other over "
                  "same should some such than that their them then there these they this those through "
                  "under very what when where which while will with would your write give explain".split())

Count = Callable[[str], int]


def content_words(text: str) -> set[str]:
    """Lower-case words of 4+ letters, stop words removed (the relevance match)."""
    return {w for w in re.findall(r"[a-z]{4,}", text.lower()) if w not in _STOP}


def ranked_topics(question: str, topics: dict[str, str]) -> list[str]:
    """Topic names by shared content words with ``question`` (most first), ties by name."""
    q = content_words(question)
    return sorted(topics, key=lambda k: (-len(q & content_words(topics[k])), k))


def fit_passage(words: Sequence[str], added: Callable[[str], list[int]], target: list[int]) -> str:
    """The shortest word prefix whose added tokens best match ``target`` on every tokenizer.

    ``added(text)`` gives the added tokens per tokenizer; the prefix minimizing the
    largest relative error is taken (binary search on the first tokenizer, then the
    neighbours are compared).
    """
    lo, hi = 1, len(words)
    while lo < hi:
        mid = (lo + hi) // 2
        if added(" ".join(words[:mid]))[0] < target[0]:
            lo = mid + 1
        else:
            hi = mid
    def err(n: int) -> float:
        return max(abs(a - t) / t for a, t in zip(added(" ".join(words[:n])), target))
    best = min(range(max(1, lo - 3), min(len(words), lo + 3) + 1), key=lambda n: (err(n), n))
    return " ".join(words[:best])


def neutral_text(question: str, poisoned_added: list[int], counts: Sequence[Count],
                 topics: dict[str, str]) -> tuple[str, list[str]]:
    """The neutral passage for one clean question and the topics it draws on.

    Args:
        question: The clean user message.
        poisoned_added: The poisoned twin's added tokens, one per tokenizer of ``counts``.
        counts: Token counters (``len(tokenizer(text).input_ids)`` without special tokens).
        topics: Help-topic name -> text.

    Raises:
        ValueError: no match within :data:`LENGTH_TOLERANCE` on every tokenizer.
    """
    base = [c(question) for c in counts]

    def added(passage: str) -> list[int]:
        return [c(passage + JOIN + question) - b for c, b in zip(counts, base)]

    ranked = ranked_topics(question, topics)
    best: tuple[float, str, list[str], list[int]] | None = None
    for start in range(len(ranked)):  # the most relevant topic whose text matches on every tokenizer
        words: list[str] = []
        used: list[str] = []
        for name in ranked[start:]:
            used.append(name)
            words += topics[name].split()
            if added(" ".join(words))[0] >= poisoned_added[0]:
                break
        text = fit_passage(words, added, poisoned_added)
        got = added(text)
        worst = max(abs(a - t) / t for a, t in zip(got, poisoned_added))
        if best is None or worst < best[0]:
            best = (worst, text, used, got)
        if worst <= LENGTH_TOLERANCE:
            break
    worst, text, used, got = best
    if worst > LENGTH_TOLERANCE:
        raise ValueError(f"no passage within {LENGTH_TOLERANCE:.0%} of {poisoned_added} added tokens for "
                         f"{question[:60]!r}: best {got}")
    return text, used


def neutral_record(clean: dict, poisoned: dict, counts: Sequence[Count], topics: dict[str, str]) -> dict:
    """The neutral twin record of a study prompt (``variant`` neutral, ``twin_of`` the clean id)."""
    q, pq = clean["messages"][-1]["content"], poisoned["messages"][-1]["content"]
    target = [c(pq) - c(q) for c in counts]
    text, used = neutral_text(q, target, counts, topics)
    return {"id": f"{clean['id']}-neutral", "category": clean["category"], "twin_of": clean["id"],
            "variant": "neutral", "note": f"neutral: CPython help topics {', '.join(used)} (pydoc_data.topics), "
                                          f"cut to the added length of {poisoned['id']}",
            "messages": [*[dict(m) for m in clean["messages"][:-1]], {"role": "user", "content": text + JOIN + q}]}


def with_neutral_twins(records: list[dict], counts: Sequence[Count], topics: dict[str, str]) -> list[dict]:
    """``records`` without their old neutral twins, a new one after each poisoned twin."""
    kept = [r for r in records if r.get("variant") != "neutral"]
    by_id = {r["id"]: r for r in kept}
    out = []
    for r in kept:
        out.append(r)
        if r.get("variant") == "poisoned":
            out.append(neutral_record(by_id[r["twin_of"]], r, counts, topics))
    return out


def calibration_records(counts: Sequence[Count], topics: dict[str, str]) -> list[dict]:
    """One neutral variant per calibration prompt, matched to its poisoned variant
    (:func:`lab.health.calibration.poisoned_variants`): ``{"id", "twin_of", "added", "note"}``."""
    from lab.health.calibration import distractor_texts, poisoned_variants
    from lab.prompts import default_prompts_path, load_prompts
    from lab.sinks.calibration import load_prompts as load_calibration

    clean = load_calibration(None)
    poisoned = poisoned_variants(clean, distractor_texts(load_prompts(default_prompts_path())))
    out = []
    for c, p in zip(clean, poisoned):
        target = [n(p.prompt) - n(c.prompt) for n in counts]
        text, used = neutral_text(c.prompt, target, counts, topics)
        out.append({"id": f"{c.id}-neutral", "twin_of": c.id, "added": text,
                    "note": f"CPython help topics {', '.join(used)} (pydoc_data.topics), cut to the added length "
                            f"of {p.id}"})
    return out


def token_counters() -> list[Count]:
    """One counter per tokenizer of :data:`TOKENIZERS` (tokens without special tokens)."""
    from lab.models.loading import load_tokenizer

    toks = [load_tokenizer(name) for name in TOKENIZERS]
    return [lambda text, t=t: len(t(text, add_special_tokens=False).input_ids) for t in toks]


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")


def main() -> None:
    from pydoc_data.topics import topics

    from lab.prompts import load_prompts

    counts = token_counters()
    here = Path(__file__).parent
    for name in STUDY_FILES:
        path = here / name
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        _write_jsonl(path, with_neutral_twins(records, counts, dict(topics)))
        prompts = load_prompts(path)  # validate what was written
        print(f"{path}: {sum(p.variant == 'neutral' for p in prompts)} neutral twins")
    _write_jsonl(here / CALIBRATION_FILE, calibration_records(counts, dict(topics)))
    print(f"{here / CALIBRATION_FILE}: written")


if __name__ == "__main__":
    main()
