"""The dataset builders (``tools/datagen``) stay outside the package: the lab reads ``lab/data`` and never a builder.

Fault class: a module of ``lab`` that imports a builder runs in a checkout and fails with
``ImportError`` once the lab is installed from its wheel, which ships ``lab/data``'s files and
not ``tools/`` (``pyproject.toml``: package discovery takes ``lab*`` only). The imports are read
from the source with :mod:`ast`, so a function-local import counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import lab
from tools.datagen import DATA_DIR

LAB_DIR = Path(lab.__file__).resolve().parent


def imports_of_tools(source: str) -> list[tuple[int, str]]:
    """``(line, module)`` of every import statement of ``source`` that names the ``tools`` package."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "tools"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "tools":
            out.append((node.lineno, node.module))
    return out


def test_no_lab_module_imports_the_dataset_builders():
    found = [f"{path.relative_to(LAB_DIR.parent)}:{line} imports {module}"
             for path in sorted(LAB_DIR.rglob("*.py"))
             for line, module in imports_of_tools(path.read_text(encoding="utf-8"))]
    assert not found, "the wheel does not ship tools/: " + "; ".join(found)


def test_imports_of_tools_planted_source_finds_local_and_aliased_imports():
    source = ("import json\nimport tools.datagen as dg\n\n"
              "def f():\n    from tools.datagen.make_study_twins import load_sample\n"
              "from lab.data import x\nfrom .tools import y\n")
    assert imports_of_tools(source) == [(2, "tools.datagen"), (5, "tools.datagen.make_study_twins")]


def test_lab_data_holds_data_and_no_builder():
    assert DATA_DIR == LAB_DIR / "data"  # the builders write the files the package reads
    assert sorted(p.name for p in DATA_DIR.glob("*.py")) == ["__init__.py"]
