"""The house rules the code's shape must keep, read from the source with :mod:`ast` (STYLE.md).

Fault classes guarded: a command that grows its own report building and decisions (a thick
``run``), or hides them in a long helper or flag registration beside a thin ``run``; a caller that probes a drafter's concrete class or an attribute the ``Drafter``
protocol declares instead of asking the protocol; a renderer that opens a file to learn what the
result it draws is (so a report names what a file says when it is drawn, not what the analysis
used); a decode loop that grows a parameter per feature; a test module that imports another
test module (a shared fake must live once, in a support module); provenance attached to a
foreign object (``model.lab_source``).

Each check carries a planted control: the same scanner, fed a small source string that breaks
the rule, must find it, so a scanner that finds nothing by construction fails.
"""

from __future__ import annotations

import ast
import unicodedata
from pathlib import Path

import lab

ROOT = Path(lab.__file__).resolve().parent.parent
LAB = ROOT / "lab"
TESTS = ROOT / "tests"

# A command's function reads as one screen of named steps: flags -> config -> package -> render -> write.
MAX_COMMAND_FUNCTION_LINES = 60
MAX_LOOP_PARAMETERS = 8  # the target, the draft, the prompt, one settings object and the callbacks
DRAFTER_MODULES = {"lab/speculative/drafts.py", "lab/speculative/self_draft.py", "lab/speculative/per_pass.py"}
READING_CALLS = {"read_text", "read_bytes", "load_chosen", "load_reference", "load_calibration"}


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# ---- scanners (each returns the offending lines of one module) ----

def long_functions(tree: ast.Module, limit: int = MAX_COMMAND_FUNCTION_LINES, *,
                   names: set[str] | None = None) -> list[str]:
    """Functions, nested ones and methods included, longer than ``limit`` lines from ``def`` to their last
    line (only those named in ``names``, when given)."""
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return [f"{n.name} is {n.end_lineno - n.lineno + 1} lines (line {n.lineno})" for n in functions
            if (names is None or n.name in names) and n.end_lineno - n.lineno + 1 > limit]


def _names_a_draft(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "draft" in name.lower()


def draft_probes(tree: ast.Module) -> list[str]:
    """``getattr(<a draft>, ...)`` and ``isinstance(x, <...Draft class>)`` calls."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args):
            continue
        if node.func.id in ("getattr", "hasattr") and _names_a_draft(node.args[0]):
            found.append(f"line {node.lineno}: {node.func.id} on a drafter")
        if node.func.id == "isinstance" and len(node.args) == 2:
            classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            for cls in classes:
                name = cls.id if isinstance(cls, ast.Name) else cls.attr if isinstance(cls, ast.Attribute) else ""
                if name.endswith("Draft") or name.endswith("Drafter"):
                    found.append(f"line {node.lineno}: isinstance(..., {name})")
    return found


def file_reads(tree: ast.Module) -> list[str]:
    """Calls that read a file: ``open`` for reading, ``json.load``, ``Path.read_text`` and the lab's loaders."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name in READING_CALLS for a in node.names):
            found.append(f"line {node.lineno}: imports {', '.join(a.name for a in node.names)}")
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else (
            node.func.attr if isinstance(node.func, ast.Attribute) else "")
        if name in READING_CALLS:
            found.append(f"line {node.lineno}: {name}()")
        elif name == "load" and isinstance(node.func, ast.Attribute) and getattr(node.func.value, "id", "") == "json":
            found.append(f"line {node.lineno}: json.load()")
        elif name == "open":
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
            text = mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else "r"
            if "r" in text or "+" in text:
                found.append(f"line {node.lineno}: open(..., {text!r})")
    return found


def parameter_counts(tree: ast.Module, names: set[str]) -> dict[str, int]:
    """Number of parameters of each top-level function in ``names``."""
    return {n.name: len(n.args.posonlyargs) + len(n.args.args) + len(n.args.kwonlyargs)
            for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names}


def imports_of_test_modules(tree: ast.Module) -> list[str]:
    """Imports of a ``tests`` module that is itself a test module (``tests.unit.test_x`` ...)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tests"):
            targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names if a.name.startswith("tests")]
        else:
            continue
        for target in targets:
            if any(part.startswith("test_") for part in target.split(".")):
                found.append(f"line {node.lineno}: imports {target}")
                break
    return found


def attribute_uses(tree: ast.Module, attribute: str) -> list[str]:
    """Reads or writes of ``<x>.<attribute>`` and ``getattr(x, "<attribute>")``."""
    found = [f"line {n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == attribute]
    found += [f"line {n.lineno}: getattr" for n in ast.walk(tree)
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "setattr")
              and len(n.args) > 1 and isinstance(n.args[1], ast.Constant) and n.args[1].value == attribute]
    return found


# ---- the rules on the tree ----

def test_commands_run_is_at_most_sixty_lines():
    """Every ``lab/commands/*.py`` ``run`` reads flags, builds a config, calls a package, renders, writes."""
    offenders = {_rel(p): found for p in sorted((LAB / "commands").rglob("*.py"))
                 if (found := long_functions(_parse(p), names={"run"}))}
    assert not offenders, f"commands with a run over {MAX_COMMAND_FUNCTION_LINES} lines: {offenders}"


def test_commands_functions_are_at_most_sixty_lines():
    """No function under ``lab/commands/`` (helpers, flag registration, nested functions) is over the bound:
    a long one is split into named steps (flag groups, checks, load, run, report)."""
    offenders = {_rel(p): found for p in sorted((LAB / "commands").rglob("*.py")) if (found := long_functions(_parse(p)))}
    assert not offenders, f"functions under lab/commands over {MAX_COMMAND_FUNCTION_LINES} lines: {offenders}"


def test_drafters_are_asked_through_the_protocol_not_probed():
    """No ``getattr(draft, ...)`` / ``isinstance(..., *Draft)`` outside the modules that define drafters."""
    offenders = {}
    for path in sorted(LAB.rglob("*.py")):
        if _rel(path) not in DRAFTER_MODULES and (found := draft_probes(_parse(path))):
            offenders[_rel(path)] = found
    assert not offenders, f"drafter probes: {offenders}"


def test_renderers_open_no_file_to_learn_what_a_result_is():
    """``lab/render/`` draws what it is given: no file read, no loader of calibrations or choices."""
    offenders = {_rel(p): found for p in sorted((LAB / "render").glob("*.py")) if (found := file_reads(_parse(p)))}
    assert not offenders, f"renderers reading files: {offenders}"


def test_speculative_generate_takes_at_most_eight_parameters():
    """The decode loop takes the draft, the prompt, one settings object and the callbacks."""
    counts = parameter_counts(_parse(LAB / "speculative" / "loop.py"), {"speculative_generate"})
    counts |= parameter_counts(_parse(LAB / "tracker" / "speculative.py"), {"track_speculative"})
    assert set(counts) == {"speculative_generate", "track_speculative"}, counts
    assert max(counts.values()) <= MAX_LOOP_PARAMETERS, counts


def test_no_test_module_imports_another_test_module():
    """Shared fakes, fixtures and constants live once in support modules (``tests/support.py`` ...)."""
    offenders = {_rel(p): found for p in sorted(TESTS.rglob("*.py")) if (found := imports_of_test_modules(_parse(p)))}
    assert not offenders, f"test modules importing test modules: {offenders}"


def test_model_provenance_is_not_an_attribute_on_the_model():
    """Where a model came from is a typed record looked up explicitly, never ``model.lab_source``."""
    offenders = {}
    for path in sorted([*LAB.rglob("*.py"), *TESTS.rglob("*.py")]):
        # Only files naming the attribute, getattr or setattr can hold a use (identifiers read as Python
        # reads them, NFKC): the others (two thirds of the tree) need not be parsed.
        text = unicodedata.normalize("NFKC", path.read_text(encoding="utf-8"))
        if not any(word in text for word in ("lab_source", "getattr", "setattr")):
            continue
        if path.name != "test_house_rules.py" and (found := attribute_uses(_parse(path), "lab_source")):
            offenders[_rel(path)] = found
    assert not offenders, f"lab_source attribute uses: {offenders}"


# ---- planted controls: each scanner finds a planted breach ----

def test_scanners_find_planted_breaches():
    """Each scanner reports a source string written to break its rule, and passes a clean one."""
    body = "    x = 1\n" * MAX_COMMAND_FUNCTION_LINES
    assert long_functions(ast.parse("def run(args):\n" + body), names={"run"})
    assert not long_functions(ast.parse("def run(args):\n    return 0\n"))
    nested = "def register(sub):\n    def add_flags(p):\n" + "    " + body.replace("\n", "\n    ").rstrip() + "\n"
    assert [f.split()[0] for f in long_functions(ast.parse(nested))] == ["register", "add_flags"]
    assert not long_functions(ast.parse(nested), names={"run"})  # a long non-run function: only the wide rule
    assert long_functions(ast.parse("class C:\n    async def step(self):\n" + "    " + body.replace("\n", "\n    ")))
    assert len(draft_probes(ast.parse("getattr(draft, 'cost', None)\nisinstance(d, (ModelDraft, int))\n"))) == 2
    assert not draft_probes(ast.parse("getattr(model, 'config')\nisinstance(d, int)\n"))
    reads = "open(p)\nopen(p, 'rb')\njson.load(f)\np.read_text()\nfrom lab.health.choice import load_chosen\n"
    assert len(file_reads(ast.parse(reads))) == 5
    assert not file_reads(ast.parse("open(p, 'w')\nfig.savefig(p)\njson.dumps(x)\n"))
    assert parameter_counts(ast.parse("def f(a, b, *, c, d=1):\n    pass\n"), {"f"}) == {"f": 4}
    assert imports_of_test_modules(ast.parse("from tests.unit.test_x import y\n"))
    assert imports_of_test_modules(ast.parse("from tests.unit import test_x\n"))
    assert not imports_of_test_modules(ast.parse("from tests import support\nfrom tests.strategies import s\n"))
    assert len(attribute_uses(ast.parse("m.lab_source = {}\ngetattr(m, 'lab_source', None)\n"), "lab_source")) == 2


def test_results_that_cross_packages_are_frozen_dataclasses():
    """The study's row, the bench's result and summary, and each calibration report are typed, not dicts,
    and the functions that build them say so in their return annotation."""
    import dataclasses
    import typing

    from lab.bench import results as bench_results, seed_tables, summary
    from lab.bench.run import run_bench
    from lab.health import calibration as health_calibration, calibration_report as health_report
    from lab.kinds import bench as bench_kind, bench_tracker, calibrate_health
    from lab.sinks import calibration_report as sink_report
    from lab.study import outcome

    types = [outcome.PromptRow, outcome.DraftedToken, outcome.PromptOutcome, bench_results.BenchResult,
             bench_results.BenchReport, seed_tables.SeedTablesReport, bench_kind.TuneReport, bench_tracker.Report,
             sink_report.SinkCalibrationReport, calibrate_health.Report,
             health_calibration.HealthCalibration]
    loose = [t.__name__ for t in types if not (dataclasses.is_dataclass(t) and t.__dataclass_params__.frozen)]
    assert not loose, f"not frozen dataclasses: {loose}"
    builders = {run_bench: bench_results.BenchResult, summary.summarize: bench_results.BenchResult,
                sink_report.calibration_report: sink_report.SinkCalibrationReport,
                health_report.health_report: calibrate_health.Report,
                health_calibration.calibrate: health_calibration.HealthCalibration}
    wrong = {f.__qualname__: typing.get_type_hints(f).get("return") for f, t in builders.items()
             if typing.get_type_hints(f).get("return") is not t}
    assert not wrong, f"builders not annotated with their result type: {wrong}"
