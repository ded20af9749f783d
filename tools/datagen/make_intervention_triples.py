"""Write the twin triples of ``lab intervene``: unused clean questions, a sample of real distractors, neutral twins.

Three files in ``lab/data``, deterministic for a given set of installed versions:

* :data:`DISTRACTOR_FILE`, the distractor sample: prose that ships with an installed
  package or with CPython and that nobody here wrote, namely the long descriptions in the
  ``METADATA`` of the distributions of :data:`METADATA_SOURCES` (each package's README as
  installed) and IDLE's prose files (:data:`CPYTHON_FILES`). It is a different kind of
  source from every other text the lab holds. The length reference and the study sets'
  neutral twins are CPython help topics; the health validation set and the docstring
  reference are docstrings (NumPy, SciPy, Rich, standard-library modules, Matplotlib,
  transformers, jsonschema, pip; none of those distributions is read here); the study
  prompts are templates, HumanEval, help topics, PEP 20 and SymPy. A text is a run of
  consecutive prose paragraphs of one source (:func:`candidate_runs`, :func:`is_prose`) of
  :data:`MIN_TOKENS` to :data:`MAX_TOKENS` SmolLM2 tokens that passes :func:`rejection` (no
  word that talks to a reader or a model, no imperative, two sentences or more and none twice)
  and shares no :data:`~tools.datagen.make_health_validation.SHINGLE_WORDS`-word run with the
  files of :data:`AVOID_FILES` or with a text already taken. At most :data:`MAX_PER_SOURCE`
  texts per source, sources in the order listed. Each record names its package, version and
  path and its length on every tokenizer of :data:`~tools.datagen.make_neutral_twins.TOKENIZERS`.
* :data:`TRIPLES_FILE` (the main set) and :data:`PILOT_FILE` (the pilot), in the study's
  prompt format (:mod:`lab.prompts`): per triple the clean prompt (its record as in the
  power set, id kept), its poisoned twin ``<id>-iP`` (distractor, blank line, question;
  ``distractor`` is the text's id) and its neutral twin ``<id>-iN``.

Questions: the clean prompts of :data:`POWER_FILE` that no study used: not in the pair's
study selection (:func:`lab.prompts.select_prompts` with :data:`STUDY_LIMIT`), and no
question of :data:`USED_FILES` (the embedded set ``make study`` runs, and the large set).
Per category they are shuffled with :data:`SEED`; the pilot takes the first
:data:`PILOT_PER_CATEGORY` per category, then the main set the next
``PER_CATEGORY - PILOT_PER_CATEGORY``, categories in turn (:func:`assign`). Each triple
takes the distractor used least so far in its set (ties: the next after the last taken)
that shares no content word (:func:`tools.datagen.make_neutral_twins.content_words`) with its
question; a question that shares one with every distractor is passed over.

Neutral twins are built as the study's (:func:`~tools.datagen.make_neutral_twins.neutral_record`), from
another pool than the length reference's help topics: the docstrings of CPython's standard library
outside the health validation set's modules (:func:`neutral_pool`), ranked by content words shared
with the question. The match is lexical: close for the code questions, often none for the factual,
creative and ambiguous ones, which the pool cannot be relevant to.

Run from the project root (needs the tokenizers of ``TOKENIZERS``, no weights; about 20 s)::

    python -m tools.datagen.make_intervention_triples
"""

from __future__ import annotations

import importlib.metadata
import itertools
import json
import platform
import random
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tools.datagen import DATA_DIR, Count, module_files, parsed_modules, read_jsonl, stdlib_dir, write_jsonl
from tools.datagen.make_health_validation import candidate_texts, file_docstrings, shingles, stdlib_files
from tools.datagen.make_neutral_twins import (JOIN, TOKENIZERS, content_words, distractor_picker, neutral_record,
                                             poisoned_record, token_counters)

DISTRACTOR_FILE = "distractors.jsonl"
TRIPLES_FILE = "intervention_triples.jsonl"
PILOT_FILE = "intervention_pilot.jsonl"
POWER_FILE = "prompts_power.jsonl"
USED_FILES = ("prompts.jsonl", "prompts_large.jsonl")  # every question in them counts as used
STUDY_LIMIT = 344  # the pair's study: ``lab study --prompts prompts_power.jsonl --limit 344``
PER_CATEGORY = 42  # 6 x 42 = 252 triples: 240 for the analysis, 12 for the pilot
PILOT_PER_CATEGORY = 2
SEED = 37
MIN_TOKENS, MAX_TOKENS = 40, 120  # SmolLM2 tokens of a distractor: long enough to read, short for a 2-core run
MAX_PER_SOURCE = 2  # spread the sample over many sources
MIN_NEUTRAL_WORDS = 8  # shorter docstrings ("Return self == value.") are not passages
# The lab's prompt and text files: a distractor shares no word run with any of them.
AVOID_FILES = ("calibration_prompts.jsonl", "length_reference.jsonl",
               "length_reference_docstrings.jsonl", "health_validation.jsonl", "prompts.jsonl",
               "prompts_large.jsonl", "prompts_power.jsonl", "sinks_held_out.jsonl", "seed_part2_prompt.txt")
METADATA_SOURCES = ("annotated-doc", "charset-normalizer", "click", "contourpy", "fsspec", "httpcore2", "httpx2",
                    "Jinja2", "MarkupSafe", "mpmath", "pillow", "pydantic", "pyflakes", "pyparsing", "PyYAML",
                    "regex", "sortedcontainers", "torch", "typer")
CPYTHON_FILES = ("idlelib/CREDITS.txt", "idlelib/README.txt")
# Words that address a reader or a model, or read as an instruction to one (substrings, lower case).
META_WORDS = ("ignore", "answer", "respond", "you must", "instruction", "question", "prompt", "please")
READER_WORDS = ("you", "your", "yours", "yourself", "note", "see")  # whole words, lower case
IMPERATIVES = frozenset("add ask avoid call check consider contact define do don't follow get go help "
                        "install join keep let look make open pick read refer remember report run save see "
                        "send set start take try use visit write".split())
_MARKUP = re.compile(r"[`*_\[\]{}<>|#\\]|https?:|www\.|>>>|::|\.\. ")
_LINE_MARKUP = re.compile(r"^(\s|[-=~^+*#>|.:<!\[`]|\d+[.)]\s)")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_INLINE = ((re.compile(r"\[([^\]]+)\]\([^)]*\)"), r"\1"),  # [text](url)
           (re.compile(r"\[([^\]]+)\]\[[^\]]*\]"), r"\1"),  # [text][ref]
           (re.compile(r"`([^`<]+?)(?:\s*<[^>]*>)?`__?"), r"\1"),  # `text <url>`_
           (re.compile(r"(?<=\w)__?(?=[\s.,;:)]|$)"), ""),  # name_ (a reST reference)
           (re.compile(r"\*\*([^*]+)\*\*"), r"\1"),  # **bold**
           (re.compile(r"(?<![\w*])\*([^*\s][^*]*?)\*(?![\w*])"), r"\1"))  # *emphasis*
NEUTRAL_SKIP = ("test", "tests", "idlelib", "pydoc_data", "lib2to3", "turtledemo", "site-packages", "ensurepip")


@dataclass(frozen=True)
class Document:
    """One source text a distractor may come from.

    Attributes:
        source: ``"metadata"`` (a distribution's long description) or ``"cpython"`` (a file of its library).
        package: The distribution's name, or ``"python"``.
        version: Its installed version.
        path: Where the text lies (``<dist-info>/METADATA`` or the file under the standard library).
        text: The text.
    """

    source: str
    package: str
    version: str
    path: str
    text: str


def plain(paragraph: str) -> str:
    """``paragraph`` without inline emphasis and link markup (Markdown and reST; a link keeps its text),
    lines joined by single spaces. Inline code (backticks) is left for :func:`is_prose` to reject."""
    text = " ".join(paragraph.split())
    for pattern, repl in _INLINE:
        text = pattern.sub(repl, text)
    return text


def is_prose(paragraph: str) -> bool:
    """A paragraph of plain sentences: no markup or code line, no URL, at least 8 words, a final full stop."""
    lines = paragraph.splitlines()
    if any(_LINE_MARKUP.match(line) for line in lines) or _MARKUP.search(plain(paragraph)):
        return False
    if any(unicodedata.category(c) in ("So", "Sk", "Co", "Cs") for c in paragraph):  # emoji and symbols
        return False
    letters = [c for c in paragraph if c.isalpha()]
    if not letters or sum(c.isupper() for c in letters) > 0.3 * len(letters):  # licence shouting, acronym lists
        return False
    text = paragraph.rstrip()
    return len(paragraph.split()) >= 8 and text.endswith(".") and not text.endswith("..")  # "..." trails off


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` (split after ``.``, ``!`` or ``?`` before a capital), whitespace collapsed."""
    return [" ".join(s.split()) for s in _SENTENCE.split(" ".join(text.split())) if s.strip()]


def rejection(text: str) -> str | None:
    """Why ``text`` cannot be a distractor (a meta word, an imperative, a repeated sentence), or ``None``."""
    if (meta := rejection_meta(text)) is not None:
        return meta
    words = set(re.findall(r"[a-z']+", text.lower()))
    for word in READER_WORDS:
        if word in words:
            return f"holds {word!r}"
    sents = sentences(text)
    if len(sents) < 2:
        return "fewer than two sentences"
    if len({s.lower() for s in sents}) < len(sents):
        return "a sentence repeated"
    for s in sents:
        first = s.split()[0].lower().strip(",;:")
        if first in IMPERATIVES:
            return f"a sentence starts with the imperative {first!r}"
    return None


def candidate_runs(text: str, count: Count) -> list[str]:
    """Runs of consecutive prose paragraphs of ``text`` of :data:`MIN_TOKENS` to :data:`MAX_TOKENS` tokens.

    A run starts at a prose paragraph and takes the next ones while it is shorter than
    :data:`MIN_TOKENS`; a non-prose paragraph ends it. One run starts at each prose
    paragraph, so runs may overlap (:func:`distractor_records` keeps no two that share text).
    """
    paragraphs = [plain(p) if is_prose(p) else None for p in (p.strip() for p in re.split(r"\n\s*\n", text)) if p]
    out = []
    for i, first in enumerate(paragraphs):
        if first is None:
            continue
        run = [first]
        for nxt in paragraphs[i + 1:]:
            if nxt is None or count(JOIN.join(run)) >= MIN_TOKENS:
                break
            run.append(nxt)
        if MIN_TOKENS <= count(JOIN.join(run)) <= MAX_TOKENS:
            out.append(JOIN.join(run))
    return out


def distractor_records(documents: Sequence[Document], count: Count, avoid: set[tuple[str, ...]],
                       counts: Sequence[Count] = ()) -> list[dict]:
    """The distractor sample: per document (in order) its first :data:`MAX_PER_SOURCE` acceptable runs.

    Args:
        documents: The source texts, in the order they are read.
        count: SmolLM2's token count (no special tokens): the length rule.
        avoid: Word runs (:func:`~tools.datagen.make_health_validation.shingles`) no text may hold (nor
            a run of a text taken before it).
        counts: Token counters of :data:`~tools.datagen.make_neutral_twins.TOKENIZERS`, recorded per text.

    Returns:
        ``{"id", "text", "source", "package", "version", "path", "n_tokens"}`` per text.
    """
    avoid = set(avoid)
    out = []
    for doc in documents:
        taken = 0
        for text in candidate_runs(doc.text, count):
            if taken == MAX_PER_SOURCE:
                break
            if rejection(text) is not None or shingles(text) & avoid:
                continue
            taken += 1
            avoid |= shingles(text)
            stem = Path(doc.path).stem.lower() if doc.source == "cpython" else ""
            label = re.sub(r"[^a-z0-9]+", "-", f"{doc.package} {stem}".lower()).strip("-")
            out.append({"id": f"{label}-{taken}", "text": text, "source": doc.source, "package": doc.package,
                        "version": doc.version, "path": doc.path,
                        "n_tokens": {name: c(text) for name, c in zip(TOKENIZERS, counts)}})
    return out


def installed_documents() -> list[Document]:
    """The texts of :data:`METADATA_SOURCES` and :data:`CPYTHON_FILES` as installed here.

    Raises:
        ValueError: a distribution of :data:`METADATA_SOURCES` is not installed.
    """
    docs = []
    for name in METADATA_SOURCES:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise ValueError(f"the distractor sample needs the {name!r} distribution, which is not installed") from None
        meta = dist.metadata
        body = meta.get_payload() or meta.get("Description") or ""
        path = next((str(f) for f in dist.files or () if len(f.parts) == 2 and f.parts[1] == "METADATA"
                     and f.parts[0].endswith(".dist-info")), f"{meta['Name']}-{dist.version}.dist-info/METADATA")
        docs.append(Document("metadata", meta["Name"], dist.version, path, body))
    return docs + [Document("cpython", "python", platform.python_version(), rel,
                            (stdlib_dir() / rel).read_text(encoding="utf-8")) for rel in CPYTHON_FILES]


def neutral_pool() -> dict[str, str]:
    """Docstring name -> passage, for the public modules, classes and functions of the standard library
    outside the validation set, ``pydoc_data``, ``this``, IDLE and the tests (:data:`NEUTRAL_SKIP`).

    A passage is a docstring's leading paragraphs (:func:`~tools.datagen.make_health_validation.candidate_texts`)
    up to the first that is not a plain paragraph (:func:`neutral_paragraph`), if it has at least
    :data:`MIN_NEUTRAL_WORDS` words and none of :data:`META_WORDS`.
    """
    lib = stdlib_dir()
    skip_modules = {m for _, m in stdlib_files()} | {"this"}
    files = module_files(lib, lambda parts: any(p in NEUTRAL_SKIP or p.startswith(("config-", "_"))
                                                for p in parts if p != "__init__"), base=lib)
    pool: dict[str, str] = {}
    for module, tree in parsed_modules((path, m) for path, m in files if m not in skip_modules):
        for name, doc in file_docstrings(tree, module):
            texts = candidate_texts(doc)
            paragraphs = texts[-1].split(JOIN) if texts else []
            kept = list(itertools.takewhile(neutral_paragraph, paragraphs))
            text = JOIN.join(kept)
            if len(text.split()) >= MIN_NEUTRAL_WORDS and rejection_meta(text) is None:
                pool[name] = text
    return pool


def neutral_paragraph(paragraph: str) -> bool:
    """A docstring paragraph that reads as prose: a final full stop, no table or literal-block markup."""
    return paragraph.rstrip().endswith(".") and not re.search(r"\||\+-|::|>>>|^\s", paragraph, re.MULTILINE)


def rejection_meta(text: str) -> str | None:
    """The :data:`META_WORDS` rule alone (a neutral passage may address a reader, as documentation does)."""
    low = text.lower()
    return next((f"holds {w!r}" for w in META_WORDS if w in low), None)


def eligible_questions(power: list[dict], used_ids: set[str], used_texts: set[str],
                       seed: int = SEED) -> dict[str, list[dict]]:
    """Per category, the clean records of the power set no study used, shuffled with ``seed``."""
    from lab.prompts import CATEGORIES

    out = {}
    for i, cat in enumerate(CATEGORIES):
        recs = [r for r in power if r["category"] == cat and "twin_of" not in r and r["id"] not in used_ids
                and r["messages"][-1]["content"] not in used_texts]
        random.Random(seed + i).shuffle(recs)
        out[cat] = recs
    return out


def assign(queues: dict[str, list[dict]], per_category: int, distractors: Sequence[dict]) -> list[tuple[dict, dict]]:
    """``(clean record, distractor)`` pairs: ``per_category`` questions per category, categories in turn.

    Each question takes the least-used distractor (ties: the next after the last one taken)
    sharing no content word with it; a question sharing one with every distractor is passed
    over. Questions are consumed from the front of ``queues``.

    Raises:
        ValueError: a category runs out of questions.
    """
    pick = distractor_picker(distractors)
    out = []
    for _ in range(per_category):
        for cat, queue in queues.items():
            while True:
                if not queue:
                    raise ValueError(f"category {cat!r} has too few unused questions that fit a distractor")
                clean = queue.pop(0)
                taken = pick(clean["messages"][-1]["content"])
                if taken is not None:
                    break
            out.append((clean, taken))
    return out


def triple_records(clean: dict, distractor: dict, counts: Sequence[Count], pool: dict[str, str],
                   pool_words: dict[str, set[str]]) -> list[dict]:
    """The clean record, its poisoned twin ``<id>-iP`` and its neutral twin ``<id>-iN``."""
    poisoned = poisoned_record(clean, distractor, "iP")
    return [dict(clean), poisoned, neutral_record(clean, poisoned, counts, pool, pool_words, "iN")]


def build(power: list[dict], used_ids: set[str], used_texts: set[str], distractors: list[dict],
          counts: Sequence[Count], pool: dict[str, str]) -> tuple[list[dict], list[dict]]:
    """The pilot's and the main set's records (clean, poisoned, neutral per triple).

    Args:
        power: The records of ``prompts_power.jsonl``.
        used_ids: Ids of the power set's prompts a study used.
        used_texts: Question texts a study used (:data:`USED_FILES`).
        distractors: The records of :func:`distractor_records`.
        counts: Token counters of :data:`~tools.datagen.make_neutral_twins.TOKENIZERS`.
        pool: The neutral passages (:func:`neutral_pool`).

    Raises:
        ValueError: too few unused questions, or no neutral passage of the length.
    """
    queues = eligible_questions(power, used_ids, used_texts)
    pool_words = {k: content_words(v) for k, v in pool.items()}
    pilot = assign(queues, PILOT_PER_CATEGORY, distractors)
    main = assign(queues, PER_CATEGORY - PILOT_PER_CATEGORY, distractors)
    return ([r for c, d in pilot for r in triple_records(c, d, counts, pool, pool_words)],
            [r for c, d in main for r in triple_records(c, d, counts, pool, pool_words)])


def study_used(data_dir: Path) -> tuple[set[str], set[str]]:
    """Ids of the power set's prompts in the pair's study, and every question text of :data:`USED_FILES`."""
    from lab.prompts import load_prompts, select_prompts

    used_ids = {p.id for p in select_prompts(load_prompts(data_dir / POWER_FILE), STUDY_LIMIT)}
    used_texts = {p.messages[-1]["content"] for name in USED_FILES for p in load_prompts(data_dir / name)}
    return used_ids, used_texts


def avoided_shingles(data_dir: Path) -> set[tuple[str, ...]]:
    """Every word run of the files of :data:`AVOID_FILES`, less the study sets' twins.

    A study set's poisoned and neutral twins (records with ``twin_of``) are built from this sample
    and from :func:`neutral_pool` (:mod:`tools.datagen.make_study_twins`), so they are not other text.
    """
    out: set[tuple[str, ...]] = set()
    for name in AVOID_FILES:
        text = (data_dir / name).read_text(encoding="utf-8")
        if name.startswith("prompts"):
            text = "".join(line + "\n" for line in text.splitlines() if line.strip() and "twin_of" not in json.loads(line))
        out |= shingles(text)
    return out


def generate(data_dir: Path, counts: Sequence[Count]) -> dict[str, list[dict]]:
    """File name -> records of the three files (:data:`DISTRACTOR_FILE`, :data:`PILOT_FILE`, :data:`TRIPLES_FILE`)."""
    distractors = distractor_records(installed_documents(), counts[0], avoided_shingles(data_dir), counts)
    used_ids, used_texts = study_used(data_dir)
    pilot, main = build(read_jsonl(data_dir / POWER_FILE), used_ids, used_texts, distractors, counts, neutral_pool())
    return {DISTRACTOR_FILE: distractors, PILOT_FILE: pilot, TRIPLES_FILE: main}


def main() -> None:
    from lab.prompts import load_prompts

    assert TOKENIZERS[0] == "smollm2", "the distractor length rule counts SmolLM2's tokens"
    here = DATA_DIR
    for name, records in generate(here, token_counters()).items():
        write_jsonl(here / name, records)
        if name != DISTRACTOR_FILE:
            load_prompts(here / name)  # validate what was written
        print(f"{here / name}: {len(records)} records")


if __name__ == "__main__":
    main()
