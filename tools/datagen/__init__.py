"""The builders of the lab's packaged data sets: they write ``lab/data/*.jsonl`` in a checkout.

The data files ship in the wheel (``pyproject.toml``'s package-data); these builders do not:
the lab reads the files and never runs a builder. Each builder is deterministic for a given
CPython, set of installed package versions and tokenizers; the unit tier rebuilds the study sets,
the calibration's neutral variants, the intervention triples, the context measure's paired sets and
the grounded tasks and compares them with the files byte for byte. Run a builder from the repository
root (``make setup-test`` installs the tokenizers they count with; a builder names any source
package it reads that is not installed; no weights)::

    python -m tools.datagen.make_health_validation     # health_validation.jsonl, length_reference_docstrings.jsonl
    python -m tools.datagen.make_context_validation    # context_{selection,validation,heldback}.jsonl
    python -m tools.datagen.make_length_reference      # length_reference.jsonl
    python -m tools.datagen.make_intervention_triples  # distractors.jsonl, intervention_{pilot,triples}.jsonl
    python -m tools.datagen.make_study_twins           # prompts.jsonl's twins, calibration_neutral.jsonl
    python -m tools.datagen.make_prompts_large         # prompts_large.jsonl
    python -m tools.datagen.make_prompts_power         # prompts_power.jsonl
    python -m tools.datagen.make_grounded_tasks        # grounded_tasks.jsonl

The builders read one another's files (the distractor sample, the sets whose text another set
must not share): after rebuilding one file, run the unit tier, whose regeneration tests name any
other file that no longer matches its builder.
:mod:`tools.datagen.make_neutral_twins` holds the rules the twin builders share; this module holds
what every builder reads and writes with: JSONL files, token counters and installed source files.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sysconfig
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parents[2] / "lab" / "data"  # the checkout's lab/data, which the wheel ships

Count = Callable[[str], int]


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSONL file (blank lines skipped)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def jsonl_text(records: Sequence[dict], *, sort_keys: bool = False) -> str:
    """Records as the files hold them: one JSON object a line, UTF-8 kept."""
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=sort_keys) + "\n" for r in records)


def write_jsonl(path: Path, records: Sequence[dict], *, sort_keys: bool = False) -> None:
    """Write ``records`` to ``path`` as :func:`jsonl_text` gives them."""
    path.write_text(jsonl_text(records, sort_keys=sort_keys), encoding="utf-8")


def token_counter(name: str) -> Count:
    """Tokens of a text under the tokenizer of profile ``name``, without special tokens (loads no weights)."""
    from lab.models.loading import load_tokenizer

    tok = load_tokenizer(name)
    return lambda text: len(tok(text, add_special_tokens=False).input_ids)


def stdlib_dir() -> Path:
    """The running interpreter's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def package_root(name: str, missing: str) -> Path:
    """The directory of the installed import package ``name``, read without importing it.

    Raises:
        ValueError: ``missing`` (the message), when the package is not installed.
    """
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(missing)
    return Path(next(iter(spec.submodule_search_locations)))


def module_files(root: Path, skip: Callable[[tuple[str, ...]], bool], base: Path | None = None
                 ) -> list[tuple[Path, str]]:
    """``(path, dotted module)`` of every Python file under ``root``, sorted by path.

    Args:
        root: The directory searched.
        skip: Given a file's path parts relative to ``base`` (suffix dropped), whether to leave it out.
        base: What module names are relative to; default ``root``'s parent (``root`` is a package).
    """
    out = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(base or root.parent).with_suffix("").parts
        if not skip(parts):
            out.append((path, ".".join(p for p in parts if p != "__init__")))
    return out


def parsed_modules(files: Iterable[tuple[Path, str]]) -> Iterator[tuple[str, ast.Module]]:
    """``(module, tree)`` of each file that parses; a file that is not UTF-8 or not valid Python is passed over."""
    for path, module in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        yield module, tree


def public_defs(tree: ast.Module, module: str, descend: Callable[[ast.ClassDef], bool] = lambda node: True
                ) -> Iterator[tuple[str, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef]]:
    """``(dotted name, node)`` of a module's public classes and functions, then their public members, breadth first.

    A name with a leading underscore (dunders included) is private; functions nested in functions are
    not reached, and a class's members only where ``descend(class)`` holds.
    """
    kinds = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    stack: list[tuple[ast.AST, str]] = [(tree, module)]
    while stack:
        node, prefix = stack.pop(0)
        for child in getattr(node, "body", []):
            if isinstance(child, kinds) and not child.name.startswith("_"):
                name = f"{prefix}.{child.name}"
                yield name, child
                if isinstance(child, ast.ClassDef) and descend(child):
                    stack.append((child, name))
