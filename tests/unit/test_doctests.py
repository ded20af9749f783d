"""The ``Examples:`` blocks of the public math and loop functions run as doctests.

Each example is a claim a reader can check by hand (the entropy of a uniform distribution
over 4 tokens is 2.0 bits); running them keeps the documentation true. A module listed here
must have examples, and a failing example is reported with its expected and actual output.
"""

from __future__ import annotations

import doctest
import importlib
import types

import pytest

# The modules whose public functions end their docstrings with runnable examples.
DOCUMENTED_MODULES = (
    "lab.entropy",
    "lab.sampling",
    "lab.speculative.verify",
    "lab.speculative.theory",
    "lab.analysis.effects",
    "lab.attention_mask",
    "lab.health.reliance",
    "lab.models.hooks",
    "lab.user_dirs",
    "lab.typed",
    "lab.health.context_validity",
    "lab.numbers",
    "lab.verdicts",
    "lab.views.core",
    "lab.views.kinds._summary",
    "lab.views.kinds.entropy",
    "lab.views.kinds.intervene",
    "lab.views.kinds.sinks",
    "lab.views.kinds.study",
    "lab.ranges",
    "lab.safe_text",
    "lab.files",
    "lab.conform.chains",
    "lab.conform.stats",
    "lab.conform.fake",
    "lab.conform.answers",
    "lab.conform.client",
    "lab.conform.fake_server",
)


def run_examples(module: types.ModuleType) -> tuple[int, int, str]:
    """Run every docstring example of ``module``; ``(attempted, failed, doctest's report)``."""
    report: list[str] = []
    runner = doctest.DocTestRunner(verbose=False)
    results = [runner.run(test, out=report.append) for test in doctest.DocTestFinder(exclude_empty=True).find(module)]
    return sum(r.attempted for r in results), sum(r.failed for r in results), "".join(report)


@pytest.mark.parametrize("module_name", DOCUMENTED_MODULES)
def test_docstring_examples_of_documented_module_all_pass(module_name):
    attempted, failed, report = run_examples(importlib.import_module(module_name))
    assert attempted > 0, f"{module_name} has no docstring examples to run"
    assert failed == 0, f"{failed} of {attempted} examples in {module_name} failed:\n{report}"


def _planted_module(source: str) -> types.ModuleType:
    module = types.ModuleType("planted")
    exec(source, module.__dict__)
    return module


def test_docstring_examples_wrong_output_is_reported():
    """Fault class: an example whose printed result is wrong passing unnoticed (negative control)."""
    module = _planted_module('def double(x):\n'
                             '    """Examples:\n\n    >>> double(2)\n    5\n    """\n'
                             '    return 2 * x\n')
    attempted, failed, report = run_examples(module)
    assert (attempted, failed) == (1, 1)
    assert "Expected:\n    5\nGot:\n    4" in report, report


def test_docstring_examples_module_without_examples_counts_none():
    """Fault class: a listed module whose examples were deleted still passing (negative control)."""
    attempted, failed, _ = run_examples(_planted_module('def double(x):\n    """Twice x."""\n    return 2 * x\n'))
    assert (attempted, failed) == (0, 0)
