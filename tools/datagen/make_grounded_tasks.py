"""Write the bench's input-grounded tasks: edits whose answer copies most of the prompt, from real source code.

Speculation by prompt lookup wins where the answer copies its prompt and nowhere else, so ``lab bench``
times both kinds of task: new text (HumanEval) and these. Each task gives one real function, read with
:mod:`ast` from an installed package's source (never imported), and asks for an edit whose answer is
mostly that function again, the three kinds taking turns:

- ``rename-function``: rename the function (and its calls inside itself) to ``<name>_impl``;
- ``rename-parameter``: rename one parameter used at least twice in the body to ``<param>_value``;
- ``quote-docstring``: quote the docstring word for word, then one sentence on what the function
  returns (a summary that quotes).

Two splits from different packages, so a set-up chosen on the bench's own tasks is checked on
others: ``tuning`` (:data:`TUNING_SOURCES`: tqdm and attrs) and ``held-back``
(:data:`HELD_BACK_SOURCES`: markdown-it-py and Pygments). None of these packages is a source of any other
data file (a test reads every file's ``package`` field: the context sets, the distractors, the health
and length references); the study reads HumanEval, CPython's help topics, PEP 20 and SymPy's doctests.

Functions taken: public (no leading underscore in the function's, its class's or its module's name),
not in a test module, :data:`MIN_LINES` to :data:`MAX_LINES` source lines with their decorators, with a
docstring of at least :data:`MIN_DOC_WORDS` words for ``quote-docstring``; in file order, modules
sorted, every :data:`STRIDE`-th candidate, until each split holds its count, kinds in turn.

Each record: ``{"id", "split", "kind", "package", "version", "licence", "object", "prompt"}``.
Deterministic for a given set of installed versions; run from the project root::

    python -m tools.datagen.make_grounded_tasks   # writes lab/data/grounded_tasks.jsonl
"""

from __future__ import annotations

import ast
import importlib.metadata
import textwrap
from collections.abc import Iterator, Sequence

from tools.datagen import DATA_DIR, module_files, package_root, write_jsonl
from tools.datagen.make_context_validation import licence

OUT_FILE = "grounded_tasks.jsonl"
# (distribution, import packages); tuning: the bench's own tasks; held-back: the check of a chosen set-up
TUNING_SOURCES = (("tqdm", ("tqdm",)), ("attrs", ("attr",)))
HELD_BACK_SOURCES = (("markdown-it-py", ("markdown_it",)), ("Pygments", ("pygments",)))
N_PER_SPLIT = {"tuning": 9, "held-back": 9}
KINDS = ("rename-function", "rename-parameter", "quote-docstring")
MIN_LINES, MAX_LINES = 10, 40  # long enough to copy, short enough for a bench prompt (about 120-500 tokens)
MIN_DOC_WORDS = 15
STRIDE = 3  # spread the tasks over each package's modules

ASK = {
    "rename-function": ("Rename the function `{old}` to `{new}` (and any call of it inside the function); change "
                        "nothing else. Reply with the whole function in one Python code block."),
    "rename-parameter": ("Rename the parameter `{old}` to `{new}` everywhere in this function; change nothing "
                         "else. Reply with the whole function in one Python code block."),
    "quote-docstring": ("Quote this function's docstring word for word, then add one sentence saying what the "
                        "function returns."),
}


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef]]:
    """``(qualified name within the module, node)`` of every public function and method, in file order."""
    def walk(node: ast.AST, prefix: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = prefix + child.name
                if not any(n.startswith("_") for n in qual.split(".")):  # nor its class's name
                    yield qual, child
    yield from walk(tree, "")


def _param_used_twice(node: ast.FunctionDef) -> str | None:
    """The first parameter (not self or cls) that the body names at least twice, or None."""
    args = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs if a.arg not in ("self", "cls")]
    used = [n.id for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.Name)]
    return next((a for a in args if used.count(a) >= 2 and len(a) >= 3), None)


def _source(lines: list[str], node: ast.FunctionDef) -> str:
    start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
    return textwrap.dedent("".join(lines[start:node.end_lineno]))


def task(kind: str, node: ast.FunctionDef, code: str) -> str | None:
    """The prompt of one task of ``kind`` on a function (``code``, its dedented source), or None if it does not fit."""
    if kind == "rename-function":
        ask = ASK[kind].format(old=node.name, new=f"{node.name}_impl")
    elif kind == "rename-parameter":
        param = _param_used_twice(node)
        if param is None:
            return None
        ask = ASK[kind].format(old=param, new=f"{param}_value")
    else:
        doc = ast.get_docstring(node)
        if doc is None or len(doc.split()) < MIN_DOC_WORDS:
            return None
        ask = ASK[kind]
    return f"{ask}\n\n```python\n{code.rstrip()}\n```"


def package_tasks(dist: str, roots: Sequence[str], split: str, n: int, start_kind: int = 0) -> list[dict]:
    """``n`` tasks from an installed distribution, kinds in turn from ``KINDS[start_kind]``; :func:`generate` adds ids.

    Raises:
        ValueError: a package is not installed, or it holds fewer than ``n`` fitting functions.
    """
    version, lic = importlib.metadata.version(dist), licence(dist)
    out: list[dict] = []
    seen = 0
    for root_name in roots:
        root = package_root(root_name, f"the grounded tasks need the {root_name!r} package ({dist}), "
                                       "which is not installed")
        for path, module in module_files(root, lambda parts: any(
                p.startswith("test") or (p.startswith("_") and p != "__init__") for p in parts)):
            text = path.read_text(encoding="utf-8")
            lines = text.splitlines(keepends=True)
            for qual, node in _functions(ast.parse(text)):
                code = _source(lines, node)
                if not MIN_LINES <= code.count("\n") <= MAX_LINES:
                    continue
                seen += 1
                if seen % STRIDE:
                    continue
                kind = KINDS[(start_kind + len(out)) % len(KINDS)]
                prompt = task(kind, node, code)
                if prompt is None:
                    continue
                out.append({"split": split, "kind": kind, "package": dist, "version": version, "licence": lic,
                            "object": f"{module}.{qual}", "prompt": prompt})
                if len(out) == n:
                    return out
    raise ValueError(f"{dist}: {len(out)} fitting functions, {n} wanted")


def generate() -> list[dict]:
    """Every task, the tuning split first; ids numbered within each split."""
    records: list[dict] = []
    for split, sources in (("tuning", TUNING_SOURCES), ("held-back", HELD_BACK_SOURCES)):
        share = N_PER_SPLIT[split] // len(sources)
        counts = [share + (i < N_PER_SPLIT[split] - share * len(sources)) for i in range(len(sources))]
        taken: list[dict] = []
        for (dist, roots), n in zip(sources, counts):
            taken += package_tasks(dist, roots, split, n, start_kind=len(taken))
        for i, rec in enumerate(taken):
            rec["id"] = f"grounded-{split}-{i:02d}"
        records += taken
    return records


def main() -> None:
    path = DATA_DIR / OUT_FILE
    write_jsonl(path, generate(), sort_keys=True)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
