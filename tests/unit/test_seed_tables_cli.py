"""``lab bench-seed-tables`` end to end on tiny random models (a few seconds: the passage's ~700-token
prompt is re-read by the no-cache loop at every step, so it lives in this tier).

Fault class: a report whose rows are not the rows the seed printed, or that lacks the seed's figures.
The speeds themselves are not tested (no test depends on timing).
"""

from __future__ import annotations

import json
import math

from lab import cli
from lab.bench.seed_tables import SEED_CACHING, SEED_GAMMA_SWEEP

from tests.support import cli_exit, report_dirs


def _tiny_models(monkeypatch):
    from tests import support

    support.patch_tiny_loader(monkeypatch)


def test_cli_seed_tables_writes_both_tables_beside_the_seeds_figures(tmp_path, capsys, monkeypatch):
    _tiny_models(monkeypatch)
    rc = cli.main(["bench-seed-tables", "--draft", "early-exit:1", "--max-new-tokens", "4", "--repeats", "1",
                   "--threads", "1", "--device", "cpu", "--out", str(tmp_path)])
    out = capsys.readouterr()
    assert rc == 0, out.err
    (run,) = report_dirs(tmp_path)
    report = json.loads((run / "report.json").read_text(encoding="utf-8"))
    cmp = report["comparison"]
    assert [r["row"] for r in cmp["gamma_sweep"]] == list(SEED_GAMMA_SWEEP)
    assert [r["row"] for r in cmp["caching"]] == ["no cache", "cached"]
    assert cmp["gamma_sweep"][1]["seed"]["acceptance_mean"] == SEED_GAMMA_SWEEP["gamma 4"]["acceptance_mean"]
    assert cmp["speedup_from_caching"]["seed"] == SEED_CACHING["speedup_from_caching"]
    assert set(report["caching"]["methods"]) == {"target-only (lab loop)", "speculative gamma=4",
                                                 "speculative gamma=4 no-cache"}
    assert set(report["gamma_sweep"]["methods"]) == {"target-only (lab loop)", "speculative gamma=4",
                                                     "speculative gamma=6"}
    assert all(r["seed"] is not None for r in report["gamma_sweep"]["runs"]), "sampling mode records seeds"
    assert math.isfinite(cmp["gamma_sweep"][1]["lab"]["acceptance"]["median"])
    summary = (run / "summary.md").read_text(encoding="utf-8")
    assert "13.8-14.7" in summary and "2.12x" in summary and "The seed's findings on this run" in summary


def test_cli_seed_tables_refuses_flags_of_another_schedule(tmp_path, capsys):
    rc = cli_exit(["bench-seed-tables", "--temperature", "1", "--out", str(tmp_path)])
    assert rc == 2 and "unrecognized arguments: --temperature 1" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
