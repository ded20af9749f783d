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


def pytest_addoption(parser):
    parser.addoption("--lab-reports", default=None, metavar="DIR",
                     help="root of the integration tier's experiment log (default: $LAB_TEST_REPORTS, else "
                          "reports/ in the repository); each run writes <DIR>/<timestamp>-integration/")


@pytest.fixture(autouse=True)
def _user_dirs_in_tmp(tmp_path_factory, monkeypatch):
    """No test reads or writes the user's own calibrations, logs or tuned set-ups (``~/.cache/lab/...``):
    each test gets empty ones (``LAB_CALIBRATION_DIR``, ``LAB_LOG_DIR``, ``LAB_TUNING_DIR``; subprocesses
    inherit them)."""
    root = tmp_path_factory.mktemp("lab-user")
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(root / "calibrations"))
    monkeypatch.setenv("LAB_LOG_DIR", str(root / "logs"))
    monkeypatch.setenv("LAB_TUNING_DIR", str(root / "tuning"))
