"""Write the context measure's paired sets: a question about a function after its own docstring and after another's.

A context measure must rank a context that answers the prompt's question above one that does
not, at the same length. These sets give it pairs whose labels come from the documentation's
own structure, not from anyone here: for a documented function F, the question
``In one sentence, what does `Class.method` do?`` (:data:`QUESTION`, the last two dotted
components of F) asked after F's own docstring, the *relevant* context, and after the docstring
of another function of the same package and length (the pairing rule below), the *irrelevant* context.
Docstrings are read with :mod:`ast` from the installed source files, never imported.

Three files, one record per function F, sharing no object, no docstring text and no
:data:`~tools.datagen.make_health_validation.SHINGLE_WORDS`-word run with one another, with any
other file in ``lab/data`` or with the study's named sources (HumanEval, CPython's help topics,
PEP 20, SymPy's doctests):

- ``context_selection.jsonl`` (:data:`SELECTION_FILE`): the lab's own choosing set,
  :data:`N_SELECTION` functions from CPython's standard library (the modules the health validation
  reads, :data:`~tools.datagen.make_health_validation.STDLIB_MODULES`); the standard library is kept
  for checks of this kind.
- ``context_validation.jsonl`` (:data:`VALIDATION_FILE`): the validation set, :data:`N_VALIDATION`
  functions from the third-party packages of :data:`VALIDATION_SOURCES` (hypothesis, pytest,
  Ray, huggingface_hub, NetworkX), none of which any other data file uses.
- ``context_heldback.jsonl`` (:data:`HELDBACK_FILE`): the held-back set, :data:`N_HELDBACK`
  functions from other packages, disjoint from both (:data:`HELDBACK_SOURCES`: fontTools,
  anyio, urllib3, requests, psutil, diskcache, packaging): other documentation, the same rules.

Each record: ``{"id", "package", "version", "licence", "object", "question", "relevant",
"irrelevant", "irrelevant_object", "n_chars_relevant", "n_chars_irrelevant", "n_tokens_relevant",
"n_tokens_irrelevant"}``; ``licence`` is the distribution's License-Expression (else its
one-line License field, else its licence classifiers); token counts are SmolLM2's tokenizer's,
without special tokens.

A context is a docstring's leading paragraphs, one, two, ... of them, before its first doctest,
directive, code or parameter section (:func:`context_texts`). The relevant contexts' lengths are
spread evenly in ``ln N`` from :data:`N_MIN` to :data:`N_MAX` SmolLM2 tokens
(:func:`tools.datagen.make_health_validation.targets`, each within :data:`LENGTH_TOLERANCE` of its
target), packages taking turns, so a length trend can be measured. Skipped: tests and vendored
copies of other projects (:data:`SKIP_DIRS`), private names (a function or class name with a
leading underscore, or ``:meta private:``), overloads, deprecated functions and aliases
(``deprecat`` or ``alias`` in the docstring or a decorator), texts under :data:`MIN_WORDS` words,
and a docstring whose text belongs to more than one object.

The pairing rule: the irrelevant context comes from a function of the same package, in another
module, whose last name differs from F's, whose text names neither F's last name nor the stem of
one of its words (:func:`mentions`), and whose text is within :data:`PAIR_TOLERANCE` of the relevant
text's characters; of :data:`PARTNER_DRAW` such partners drawn with a fixed seed, the one closest
to the relevant text in tokens is taken. Each docstring (and each context text) serves once in a
file, as relevant or as irrelevant.

Deterministic for a given CPython, set of installed versions and ``lab/data`` (each record names
its package, version and object); run from the project root (needs SmolLM2's tokenizer, no weights)::

    python -m tools.datagen.make_context_validation   # writes the three files above
"""

from __future__ import annotations

import ast
import importlib.metadata
import platform
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tools.datagen import (DATA_DIR, Count, module_files, package_root, parsed_modules, public_defs, read_jsonl,
                           token_counter, write_jsonl)
from tools.datagen.make_health_validation import (_strings, leading_texts, not_prose, shingles, stdlib_files,
                                                  targets)

SELECTION_FILE = "context_selection.jsonl"
VALIDATION_FILE = "context_validation.jsonl"
HELDBACK_FILE = "context_heldback.jsonl"
OWN_FILES = (SELECTION_FILE, VALIDATION_FILE, HELDBACK_FILE)
# Files built after these sets, whose text they were never checked against: the bench's grounded tasks (real
# function source of packages no data file reads; tools.datagen.make_grounded_tasks)
LATER_FILES = ("grounded_tasks.jsonl",)
QUESTION = "In one sentence, what does `{short}` do?"
# distribution -> its import packages (pytest's code lives in _pytest)
VALIDATION_SOURCES: dict[str, tuple[str, ...]] = {
    "hypothesis": ("hypothesis",), "pytest": ("_pytest",), "ray": ("ray",),
    "huggingface_hub": ("huggingface_hub",), "networkx": ("networkx",)}
HELDBACK_SOURCES: dict[str, tuple[str, ...]] = {
    "fonttools": ("fontTools",), "anyio": ("anyio",), "urllib3": ("urllib3",), "requests": ("requests",),
    "psutil": ("psutil",), "diskcache": ("diskcache",), "packaging": ("packaging",)}
STDLIB_LICENCE = "PSF-2.0"
N_SELECTION, N_VALIDATION, N_HELDBACK = 60, 160, 80
SEEDS = {SELECTION_FILE: 50, VALIDATION_FILE: 51, HELDBACK_FILE: 52}
N_MIN, N_MAX = 15, 200  # SmolLM2 tokens of the relevant context alone (the question is about 15 more)
# Targets 160 apart in [15, 200] lie 1.6 % apart: 8 % keeps the set about evenly spread in ln N
# while most targets find a text in every package.
LENGTH_TOLERANCE = 0.08
PAIR_TOLERANCE = 0.05  # irrelevant context's characters within 5 % of the relevant one's (the bar)
STEM = 5  # "memoi" finds "memoize" in "Memoizing": an irrelevant context must not talk about F's name
# Texts picked for a token target lean to more tokens per character than their package's average (there
# are more short texts to pick from), so a partner matched on characters alone has fewer tokens more often
# than not (37 of 60 on the standard library): of PARTNER_DRAW partners drawn, the closest in tokens is taken.
PARTNER_DRAW = 50
MIN_WORDS = 8  # fewer words than this is a label ("Return the value."), not documentation
# Directory names of tests and of vendored copies of other projects' code (Ray's thirdparty* hold pathspec,
# tabulate, idna, psutil ...; pytest's _py is the py library's path module), whose documentation is not theirs.
SKIP_DIRS = frozenset({"tests", "test", "testing", "_vendor", "vendor", "vendored", "_vendored", "cloudpickle",
                       "externals", "extern", "_lib", "_py"})
SKIP_PREFIX = "thirdparty"


@dataclass(frozen=True)
class Function:
    """One documented function or method as found in a source file.

    Attributes:
        package: The distribution (``"python"`` for the standard library).
        version: Its installed version.
        licence: Its licence (:func:`licence`).
        module: The dotted module the function is defined in.
        obj: The function's dotted name (module, then class and function names).
        text: Its docstring, cleaned (``ast.get_docstring``).
    """

    package: str
    version: str
    licence: str
    module: str
    obj: str
    text: str

    @property
    def short(self) -> str:
        """The last two dotted components: ``Class.method`` or ``module.function``."""
        return ".".join(self.obj.split(".")[-2:])

    @property
    def name(self) -> str:
        return self.obj.rsplit(".", 1)[-1]


def _decorators(node: ast.AST) -> str:
    return " ".join(ast.unparse(d) for d in getattr(node, "decorator_list", []))


def module_functions(tree: ast.Module, module: str) -> list[tuple[str, str]]:
    """``(dotted name, docstring)`` of a module's public functions and the public methods of its public classes.

    Private names (leading underscore, dunders included, or ``:meta private:`` in the docstring),
    overloads and anything deprecated or an alias (by decorator or docstring) are left out; functions
    nested in functions are not reached.
    """
    out = []
    for name, node in public_defs(tree, module, descend=lambda c: "deprecat" not in _decorators(c).lower()):
        if isinstance(node, ast.ClassDef):
            continue
        doc = ast.get_docstring(node)
        marks = (_decorators(node) + " " + (doc or "")).lower()
        if (doc and "overload" not in _decorators(node) and "deprecat" not in marks
                and ":meta private:" not in marks and not re.search(r"\balias", marks)):
            out.append((name, doc))
    return out


def licence(dist: str) -> str:
    """A distribution's licence: License-Expression, else a one-line License field, else its licence classifiers."""
    meta = importlib.metadata.metadata(dist)
    if meta.get("License-Expression"):
        return meta["License-Expression"]
    text = (meta.get("License") or "").strip()
    if text and "\n" not in text and len(text) <= 40:
        return text
    found = [c.split(" :: ")[-1] for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    if not found:
        raise ValueError(f"{dist}: no licence in its metadata")
    return "; ".join(found)


def _read(files: Sequence[tuple[Path, str]], package: str, version: str, lic: str) -> list[Function]:
    return [Function(package, version, lic, module, obj, doc)
            for module, tree in parsed_modules(files) for obj, doc in module_functions(tree, module)]


def package_functions(dist: str, roots: Sequence[str]) -> list[Function]:
    """The documented public functions of an installed distribution's import packages, read without importing them.

    Raises:
        ValueError: a package is not installed.
    """
    files = []
    for root_name in roots:
        root = package_root(root_name, f"the context validation sets need the {root_name!r} package ({dist}), "
                                       "which is not installed")
        files += module_files(root, lambda parts: bool(SKIP_DIRS & set(parts))
                              or any(p.startswith(SKIP_PREFIX) for p in parts))
    return _read(files, dist, importlib.metadata.version(dist), licence(dist))


def stdlib_functions() -> list[Function]:
    """The documented public functions of :data:`~tools.datagen.make_health_validation.STDLIB_MODULES` in the
    running interpreter's standard library."""
    return _read(stdlib_files(), "python", platform.python_version(), STDLIB_LICENCE)


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params|Returns?|Yields?|Raises|Examples?|Example usage|Usage"
                      r"|Notes?|Attributes|See Also|References|Warnings?|Todo|Keyword Arguments|Other Parameters"
                      r"|Methods)\s*:{0,2}\s*$", re.IGNORECASE)
_FIELD = re.compile(r"^\s*(:(param|parameter|arg|argument|key|keyword|type|returns?|rtype|raises?|except|ivar|var"
                    r"|yields?)\b|@param|>>>|```|\.\. |<[A-Za-z/])")
_UNDERLINE = re.compile(r"^\s*(-{3,}|={3,}|~{3,})\s*$")


def context_texts(doc: str) -> list[str]:
    """A docstring's leading paragraphs, one, two, ... of them joined by blank lines, before its first structural block.

    The docstring is cut at its first line that opens a doctest, a reST directive or field
    (``:param``), a code fence, an HTML tag or a section (``Args:``; a heading over dashes); the
    rest is split at blank lines, and an indented (code) paragraph, a bare call signature, an
    unfilled template field or a paragraph without a word ends the text. A text that ends with a
    colon (``For example::``) announces what follows and is not offered.

    Examples:
        >>> context_texts("Add two numbers.\\n\\nIt adds them.\\n\\nArgs:\\n    a: first.")
        ['Add two numbers.', 'Add two numbers.\\n\\nIt adds them.']
    """
    lines = doc.strip().splitlines()
    for i, line in enumerate(lines):
        underlined = i + 1 < len(lines) and _UNDERLINE.match(lines[i + 1]) and line.strip()
        if _SECTION.match(line.strip()) or _FIELD.match(line) or underlined:
            lines = lines[:i]
            break
    texts = leading_texts("\n".join(lines), lambda p: all(ln[:1].isspace() for ln in p.strip("\n").splitlines())
                          or not_prose(p.strip()))
    return [t for t in texts if not t.endswith(":")]  # "For example::" announces what was cut


def mentions(text: str, name: str) -> bool:
    """Whether ``text`` names ``name`` as a word, or holds the stem (first :data:`STEM` letters) of one of its words.

    The words of ``memoize_stampede`` or ``memoizeStampede`` are ``memoize`` and ``stampede``;
    words under 4 letters (``get``, ``add``) are too common to count.

    Examples:
        >>> mentions("Memoizing cache decorator.", "memoize_stampede"), mentions("Get a value.", "get_item")
        (True, False)
    """
    if re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text, re.IGNORECASE):
        return True
    words = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", name)
    return any(w.lower()[:STEM] in text.lower() for w in words if len(w) >= 4)


def _unique(functions: Sequence[Function]) -> list[Function]:
    """The functions whose docstring text is theirs alone (an overload, alias or copy shares its text: all go)."""
    seen = Counter(f.text for f in functions)
    return [f for f in functions if seen[f.text] == 1]


def pair_records(functions: dict[str, Sequence[Function]], count: Count, avoid: set[tuple[str, ...]],
                 *, n: int, seed: int, prefix: str) -> list[dict]:
    """One paired record per target length of :func:`targets` (``n``, :data:`N_MIN` to :data:`N_MAX`), packages in turn.

    Args:
        functions: Each package's documented functions (keys in the order the packages take turns).
        count: Tokens of a text (no special tokens).
        avoid: Word runs (:func:`shingles`) no context may contain.
        n: Number of records.
        seed: The draw among the texts that meet a target and of the :data:`PARTNER_DRAW` partners that fit
            (the one closest to the relevant text in tokens is taken, the first drawn among equals).
        prefix: The ids' prefix (``"{prefix}-{i:03d}"``).

    Returns:
        The records of the module docstring, in target order.

    Raises:
        ValueError: no package has an unused function (with a partner) within :data:`LENGTH_TOLERANCE` of a target.
    """
    rng = random.Random(seed)
    pools = {p: [(f, t) for f in _unique(fs) for t in context_texts(f.text)
                 if len(t.split()) >= MIN_WORDS and not shingles(t) & avoid] for p, fs in functions.items()}
    order = list(functions)
    used_docs: set[str] = set()  # whole docstrings and the contexts cut from them (two docstrings may start alike)
    used_questions: set[str] = set()
    out = []
    for i, target in enumerate(targets(n, N_MIN, N_MAX)):
        pick = None
        for p in order[i % len(order):] + order[:i % len(order)]:
            # characters per token lie in about [2, 8] for prose and code docstrings
            window = [(f, t) for f, t in pools[p] if 2 * target <= len(t) <= 8 * target
                      and not {f.text, t} & used_docs and f.short not in used_questions]
            rng.shuffle(window)
            for f, t in window:
                if abs(count(t) - target) > LENGTH_TOLERANCE * target:
                    continue
                partners = [(g, u) for g, u in pools[p] if abs(len(u) - len(t)) <= PAIR_TOLERANCE * len(t)
                            and g.module != f.module and g.name.lower() != f.name.lower() and g.text != f.text
                            and not {g.text, u} & used_docs and u != t and not mentions(u, f.name)]
                if partners:
                    rng.shuffle(partners)
                    n_t = count(t)
                    pick = (f, t, min(partners[:PARTNER_DRAW], key=lambda gu: abs(count(gu[1]) - n_t)))
                    break
            if pick is not None:
                break
        if pick is None:
            raise ValueError(f"no package of {order} has an unused, paired docstring text of about {target} tokens")
        f, t, (g, u) = pick
        used_docs |= {f.text, g.text, t, u}
        used_questions.add(f.short)
        out.append({"id": f"{prefix}-{i:03d}", "package": f.package, "version": f.version, "licence": f.licence,
                    "object": f.obj, "question": QUESTION.format(short=f.short), "relevant": t, "irrelevant": u,
                    "irrelevant_object": g.obj, "n_chars_relevant": len(t), "n_chars_irrelevant": len(u),
                    "n_tokens_relevant": count(t), "n_tokens_irrelevant": count(u)})
    return out


def lab_data_shingles(data_dir: Path, exclude: Sequence[str] = OWN_FILES + LATER_FILES) -> set[tuple[str, ...]]:
    """The word runs of every string in ``data_dir``'s JSONL and text files, the files named in ``exclude`` aside."""
    out: set[tuple[str, ...]] = set()
    for path in sorted([*data_dir.glob("*.jsonl"), *data_dir.glob("*.txt")]):
        if path.name in exclude:
            continue
        if path.suffix == ".jsonl":
            out |= set().union(*(shingles(_strings(r)) for r in read_jsonl(path)))
        else:
            out |= shingles(path.read_text(encoding="utf-8"))
    return out


def study_source_shingles() -> set[tuple[str, ...]]:
    """The word runs of the study's named sources' prompts (:data:`lab.sources.SOURCES`: HumanEval, help topics ...)."""
    from lab.sources import SOURCES, load_source

    return set().union(*(shingles(m["content"]) for s in SOURCES for p in load_source(s) for m in p.messages))


def record_shingles(records: Sequence[dict]) -> set[tuple[str, ...]]:
    """The word runs of the records' contexts, relevant and irrelevant."""
    return set().union(*(shingles(r["relevant"]) | shingles(r["irrelevant"]) for r in records))


def _packages(sources: dict[str, tuple[str, ...]]) -> dict[str, list[Function]]:
    return {dist: package_functions(dist, roots) for dist, roots in sources.items()}


def generate(data_dir: Path, count: Count) -> dict[str, list[dict]]:
    """The three files' records, built in turn, each avoiding the word runs of ``lab/data``'s other files, of the
    study's named sources and of the files built before it."""
    avoid = lab_data_shingles(data_dir) | study_source_shingles()
    sources = {
        SELECTION_FILE: (lambda: {"python": stdlib_functions()}, N_SELECTION, "stdlib"),
        VALIDATION_FILE: (lambda: _packages(VALIDATION_SOURCES), N_VALIDATION, "val"),
        HELDBACK_FILE: (lambda: _packages(HELDBACK_SOURCES), N_HELDBACK, "held"),
    }
    out = {}
    for name, (load, n, prefix) in sources.items():
        out[name] = pair_records(load(), count, avoid, n=n, seed=SEEDS[name], prefix=prefix)
        avoid |= record_shingles(out[name])
    return out


def main() -> None:
    for name, records in generate(DATA_DIR, token_counter("smollm2")).items():
        write_jsonl(DATA_DIR / name, records)
        per = {p: sum(r["package"] == p for r in records) for p in dict.fromkeys(r["package"] for r in records)}
        print(f"{DATA_DIR / name}: {len(records)} pairs, " + ", ".join(f"{p} {k}" for p, k in per.items()))


if __name__ == "__main__":
    main()
