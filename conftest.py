"""Project-wide pytest configuration for `lab`.

Tiers (registered in pyproject.toml, strict): a test's tier is its directory,
``tests/unit`` -> ``unit``, ``tests/statistical`` -> ``statistical``,
``tests/integration`` -> ``integration``; the marker is applied here so no test can
forget it. ``slow`` is added by hand.

Hypothesis profiles: ``default`` (fast, for the edit-test loop), ``ci``
(thorough, derandomized) and ``mutation`` (derandomized, no shrinking: for
``make mutation``), chosen with ``HYPOTHESIS_PROFILE``.

No test downloads anything: ``HF_HUB_OFFLINE=1`` is set before transformers is
imported, and the embedded models come from PyPI packages.

Integration runs leave an experiment log (``tests/integration/conftest.py``): one
``<ts>-integration/`` folder per run under ``reports/``, moved with
``--lab-reports DIR`` or ``LAB_TEST_REPORTS=DIR`` (the option wins). The option is
declared here because pytest reads options only from the root conftest.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest
from hypothesis import HealthCheck, Phase, settings

# No profile may depend on timing: no deadline, and no too_slow health check (it fails a test
# whose data generation merely ran slowly on a busy machine).
settings.register_profile("default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "ci",
    max_examples=300,
    deadline=None,
    derandomize=True,  # CI must not flake on a new random draw
    suppress_health_check=[HealthCheck.too_slow],
)
# `make mutation` only: mutmut re-runs the tests once per mutant and a killed mutant only
# needs the first failing example, so no shrinking (it dominated the run time), fixed seed.
settings.register_profile(
    "mutation",
    max_examples=60,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

_TIERS = ("unit", "statistical", "integration")


def pytest_collection_modifyitems(config, items):
    root = Path(__file__).parent / "tests"
    for item in items:
        try:
            tier = Path(item.fspath).relative_to(root).parts[0]
        except ValueError:
            continue
        if tier in _TIERS:
            item.add_marker(getattr(pytest.mark, tier))


def pytest_ignore_collect(collection_path, config):
    """Leave out a tier's directory whose tests the ``-m`` expression cannot select: ``-m "unit and not
    slow"`` (the quick loop) need not import the integration and statistical modules only to deselect
    them (about 2 s of each xdist worker's start). Other paths are left to pytest."""
    root = Path(__file__).parent / "tests"
    expr = config.getoption("markexpr")
    if expr and collection_path.parent == root and collection_path.name in _TIERS:
        if not _tier_selectable(expr, collection_path.name):
            return True
    return None


def _tier_selectable(expr: str, tier: str) -> bool:
    """Whether a test of ``tier`` (which carries that tier's marker and no other tier's: the tier is the
    directory) could satisfy the ``-m`` expression ``expr``, whatever other markers it has: every
    true/false assignment of the expression's other names is tried. True where it cannot tell (markers
    with arguments, more than 10 names, an expression pytest will refuse itself)."""
    from itertools import product

    from _pytest.mark.expression import Expression

    try:
        compiled = Expression.compile(expr)
    except SyntaxError:
        return True
    free = sorted(compiled.idents() - set(_TIERS))
    if len(free) > 10:
        return True
    for bits in product((False, True), repeat=len(free)):
        values = {**dict(zip(free, bits)), **{t: t == tier for t in _TIERS}}

        def matcher(name, /, **kwargs):
            if kwargs:
                raise LookupError(name)
            return values[name]

        try:
            if compiled.evaluate(matcher):
                return True
        except LookupError:
            return True
    return False


def pytest_addoption(parser):
    parser.addoption("--lab-reports", default=None, metavar="DIR",
                     help="root of the integration tier's experiment log (default: $LAB_TEST_REPORTS, else "
                          "reports/ in the repository); each run writes <DIR>/<timestamp>-integration/")


@pytest.fixture(autouse=True)
def _user_dirs_in_tmp(tmp_path_factory, monkeypatch):
    """No test reads or writes the user's own calibrations, logs or tuned set-ups (``~/.cache/lab/...``):
    each test gets empty ones (``LAB_CALIBRATION_DIR``, ``LAB_LOG_DIR``, ``LAB_TUNING_DIR``; subprocesses
    inherit them), torch as the default runtime (``LAB_RUNTIME``), the few-row layout without timing it
    (``LAB_PLAIN_LINEAR=0``) and ``lab study`` in one process (``LAB_STUDY_WORKERS=1``)."""
    root = tmp_path_factory.mktemp("lab-user")
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(root / "calibrations"))
    monkeypatch.setenv("LAB_LOG_DIR", str(root / "logs"))
    monkeypatch.setenv("LAB_TUNING_DIR", str(root / "tuning"))
    # A GGUF profile's default runtime is llama.cpp wherever `make peer` built it (lab.commands.runtime_choice): a test
    # runs torch unless it names llama.cpp, whatever this machine has built; the default's own tests unset this.
    monkeypatch.setenv("LAB_RUNTIME", "torch")
    # The few-row float32 layout is chosen by timing it at load (lab.models.fewrow.few_row_pays); a test takes it
    # without timing, so two processes of one test never decode with different layouts
    monkeypatch.setenv("LAB_PLAIN_LINEAR", "0")
    # lab study spreads its prompts over worker processes by default (lab.runs.local.auto_workers); a test runs
    # them in its own process, where its fakes are, unless it asks for workers
    monkeypatch.setenv("LAB_STUDY_WORKERS", "1")
