"""The twin builders' shared rules: length-matched passages, content words, the distractor picker.

A poisoned twin is its clean prompt plus a distractor, so it is always longer; a
measure that only reads length ranks it below its clean twin. The neutral twin
holds length fixed: its user message is a passage of real documentation, a blank
line, then the clean question, and the passage is cut (at a word boundary,
:func:`fit_passage`) so that the text it adds has the poisoned twin's added length
to within :data:`LENGTH_TOLERANCE` in the tokens of every tokenizer of
:data:`TOKENIZERS`. Added length = tokens of the twin's user message minus tokens
of the clean one.

Used by :mod:`tools.datagen.make_study_twins` (the study's twins: the distractor sample and
standard-library docstrings), :mod:`tools.datagen.make_intervention_triples` (the same for
``lab intervene``; both write their twins with :func:`poisoned_record` and :func:`neutral_record`)
and :mod:`tools.datagen.make_length_reference` (CPython's help topics, :func:`ranked_topics`).
No weights are loaded; :func:`token_counters` needs the tokenizers.
"""

from __future__ import annotations

import platform
import re
import zlib
from collections.abc import Callable, Sequence

from tools.datagen import Count, token_counter

LENGTH_TOLERANCE = 0.05  # neutral added tokens within 5 % of the poisoned twin's, on every tokenizer
TOKENIZERS = ("smollm2", "qwen2.5-coder-0.5b")  # qwen2.5-coder (1.5B) shares the 0.5B's tokenizer
JOIN = "\n\n"  # as the poisoned twins: added text, blank line, clean question
_STOP = frozenset("about after also and are because been before being between both but can could does each "
                  "every from have here into just like made make many more most much must only other over "
                  "same should some such than that their them then there these they this those through "
                  "under very what when where which while will with would your write give explain".split())
NEUTRAL_CANDIDATES = 60  # best-ranked docstrings tried per question (one long enough is nearly always in the first few)


def content_words(text: str) -> set[str]:
    """Lower-case words of 4+ letters, stop words removed (the relevance match)."""
    return {w for w in re.findall(r"[a-z]{4,}", text.lower()) if w not in _STOP}


def distractor_picker(sample: Sequence[dict]) -> Callable[[str], dict | None]:
    """A function question -> the distractor record it takes from ``sample`` (None: every one shares a word).

    Each call takes the least-used text so far (ties: the next after the last one taken) that shares
    no content word (:func:`content_words`) with the question, so a set's twins spread over the whole
    sample and no distractor is about its question. ``sample`` records have a ``"text"``.
    """
    words = [content_words(d["text"]) for d in sample]
    uses = [0] * len(sample)
    turn = [0]

    def pick(question: str) -> dict | None:
        q = content_words(question)
        order = sorted(range(len(sample)), key=lambda k: (uses[k], (k - turn[0]) % len(sample)))
        k = next((k for k in order if not q & words[k]), None)
        if k is None:
            return None
        uses[k] += 1
        turn[0] = k + 1
        return sample[k]

    return pick


def ranked_topics(question: str, topics: dict[str, str]) -> list[str]:
    """Topic names by shared content words with ``question`` (most first), ties by name."""
    q = content_words(question)
    return sorted(topics, key=lambda k: (-len(q & content_words(topics[k])), k))


def added_tokens(question: str, counts: Sequence[Count]) -> Callable[[str], list[int]]:
    """A function text -> the tokens it adds before ``question`` (text, blank line, question), one per counter."""
    base = [c(question) for c in counts]
    return lambda text: [c(text + JOIN + question) - b for c, b in zip(counts, base)]


def relative_error(got: Sequence[int], target: Sequence[int]) -> float:
    """The largest ``|got - target| / target`` over the tokenizers."""
    return max(abs(a - t) / t for a, t in zip(got, target))


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
    best = min(range(max(1, lo - 3), min(len(words), lo + 3) + 1),
               key=lambda n: (relative_error(added(" ".join(words[:n])), target), n))
    return " ".join(words[:best])


def fit_topics(question: str, names: Sequence[str], topics: dict[str, str], counts: Sequence[Count],
               target: list[int]) -> tuple[str, list[str]]:
    """The topics of ``names`` in turn, until they add ``target[0]`` tokens before ``question``, cut to
    :func:`fit_passage`'s best match with ``target`` on every counter; and the names taken."""
    added = added_tokens(question, counts)
    words: list[str] = []
    used: list[str] = []
    for name in names:
        used.append(name)
        words += topics[name].split()
        if added(" ".join(words))[0] >= target[0]:
            break
    return fit_passage(words, added, target), used


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
    added = added_tokens(question, counts)
    ranked = ranked_topics(question, topics)
    best: tuple[float, str, list[str], list[int]] | None = None
    for start in range(len(ranked)):  # the most relevant topic whose text matches on every tokenizer
        text, used = fit_topics(question, ranked[start:], topics, counts, poisoned_added)
        got = added(text)
        worst = relative_error(got, poisoned_added)
        if best is None or worst < best[0]:
            best = (worst, text, used, got)
        if worst <= LENGTH_TOLERANCE:
            break
    worst, text, used, got = best
    if worst > LENGTH_TOLERANCE:
        raise ValueError(f"no passage within {LENGTH_TOLERANCE:.0%} of {poisoned_added} added tokens for "
                         f"{question[:60]!r}: best {got}")
    return text, used


def neutral_passage(question: str, target: list[int], counts: Sequence[Count], pool: dict[str, str],
                    pool_words: dict[str, set[str]]) -> tuple[str, list[str]]:
    """The neutral passage for ``question`` of ``target`` added tokens, and the docstrings it draws on.

    The docstrings are ranked by content words shared with the question (ties in an order drawn
    per question: the CRC-32 of question and name, so that no one docstring serves every
    question it shares nothing with); the passage is the best-ranked one long enough on its own,
    cut at a word boundary (:func:`fit_passage`) to ``target`` within :data:`LENGTH_TOLERANCE` on
    every tokenizer, so it reads as one text; when none of the first :data:`NEUTRAL_CANDIDATES`
    fits alone, consecutive ranked docstrings are joined (:func:`neutral_text`).

    Raises:
        ValueError: no passage within the tolerance.
    """
    words = content_words(question)
    ranked = sorted(pool, key=lambda k: (-len(words & pool_words[k]), zlib.crc32(f"{question}\0{k}".encode()), k))
    ranked = ranked[:NEUTRAL_CANDIDATES]
    added = added_tokens(question, counts)
    for name in ranked:
        if any(a < t for a, t in zip(added(pool[name]), target)):
            continue  # too short alone
        passage = fit_passage(pool[name].split(), added, target)
        if relative_error(added(passage), target) <= LENGTH_TOLERANCE:
            return passage, [name]
    return neutral_text(question, target, counts, {k: pool[k] for k in ranked})


def _twin(clean: dict, suffix: str, variant: str, added: str, note: str, **fields) -> dict:
    """The ``variant`` twin ``<id>-<suffix>`` of a clean record: ``added``, a blank line, the clean question."""
    return {"id": f"{clean['id']}-{suffix}", "category": clean["category"], "twin_of": clean["id"],
            "variant": variant, **fields, "note": note,
            "messages": [*[dict(m) for m in clean["messages"][:-1]],
                         {"role": "user", "content": added + JOIN + clean["messages"][-1]["content"]}]}


def poisoned_record(clean: dict, distractor: dict, suffix: str) -> dict:
    """The poisoned twin ``<id>-<suffix>`` of a clean record: the distractor's text, a blank line, the question.

    Args:
        clean: A clean prompt record (``{"id", "category", "messages"}``).
        distractor: A record of the distractor sample (``{"id", "text", "package", "version", "path"}``).
        suffix: The twin's id suffix.
    """
    d = distractor
    return _twin(clean, suffix, "poisoned", d["text"], f"distractor {d['id']}: {d['package']} {d['version']}, "
                                                       f"{d['path']}", distractor=d["id"])


def neutral_record(clean: dict, poisoned: dict, counts: Sequence[Count], pool: dict[str, str],
                   pool_words: dict[str, set[str]], suffix: str) -> dict:
    """The neutral twin ``<id>-<suffix>``: docstring text of the poisoned twin's added length, a blank line, the
    question.

    Args:
        clean: A clean prompt record.
        poisoned: Its poisoned twin (:func:`poisoned_record`).
        counts: Token counters of :data:`TOKENIZERS`.
        pool: Docstring name -> passage; ``pool_words`` its :func:`content_words`.
        suffix: The twin's id suffix.

    Raises:
        ValueError: no passage of the pool within :data:`LENGTH_TOLERANCE` (:func:`neutral_passage`).
    """
    q = clean["messages"][-1]["content"]
    target = [c(poisoned["messages"][-1]["content"]) - c(q) for c in counts]
    passage, used = neutral_passage(q, target, counts, pool, pool_words)
    got = [c(passage + JOIN + q) - c(q) for c in counts]
    sizes = ", ".join(f"{n} {g} (poisoned {t})" for n, g, t in zip(TOKENIZERS, got, target))
    return _twin(clean, suffix, "neutral", passage,
                 f"neutral: CPython {platform.python_version()} standard-library docstrings {', '.join(used)} "
                 f"(read with ast), cut to the added length of {poisoned['id']}; added tokens {sizes}")


def token_counters() -> list[Count]:
    """One counter per tokenizer of :data:`TOKENIZERS` (tokens without special tokens)."""
    return [token_counter(name) for name in TOKENIZERS]
