"""``lab bench-tune`` end to end on tiny random models, then ``lab speculate`` reading its winner.

Fault classes: a tuning run that touches the held-back split; a winner that is written but not
the one ``lab speculate`` runs; a tuned set-up that runs without being named. No speed is tested.
"""

from __future__ import annotations

import json

import torch

from lab import cli
from lab.bench.prompt_split import HELD_BACK
from lab.speculative.setups import DraftSetup
from lab.tuning import DRAFT_SETUP, machine_key, read_tuned

from tests.support import report_dirs


def _tiny_models(monkeypatch):
    from tests import support

    support.patch_tiny_loader(monkeypatch)


def test_cli_tune_writes_the_winner_and_speculate_runs_it(tmp_path, capsys, monkeypatch):
    _tiny_models(monkeypatch)
    before = torch.get_num_threads()
    try:
        rc = cli.main(["bench-tune", "--draft", "early-exit:1", "--gammas", "1,2", "--max-new-tokens", "4",
                       "--repeats", "1", "--humaneval", "tuning:1", "--threads", "1", "--device", "cpu",
                       "--out", str(tmp_path / "bench")])
        out = capsys.readouterr()
        assert rc == 0, out.err
        (run,) = report_dirs((tmp_path / "bench"))
        report = json.loads((run / "report.json").read_text(encoding="utf-8"))
        assert not any(f"humaneval-{i:03d}" in json.dumps(report["prompts"]) for i in HELD_BACK)
        assert set(report["configs"]) == {"greedy", "sampling"} and report["configs"]["sampling"]["sampling"]["temperature"] > 0
        tuned = read_tuned(DRAFT_SETUP, "smollm2", machine_key(1), match={"draft": "early-exit:1"})
        assert tuned.data is not None, tuned.note
        assert DraftSetup(**tuned.data["setup"]).as_dict() == report["winner"]
        assert "tuned set-up:" in out.out and "winner:" in (run / "summary.md").read_text(encoding="utf-8")

        rc = cli.main(["speculate", "hi", "--draft", "early-exit:1", "--max-new-tokens", "4", "--device", "cpu",
                       "--out", str(tmp_path / "spec")])
        err = capsys.readouterr().err
        assert rc == 0, err
        (srun,) = report_dirs((tmp_path / "spec"))
        setup = json.loads((srun / "report.json").read_text(encoding="utf-8"))["settings"]["draft_setup"]
        assert setup["sources"]["gamma"] == f"tuned: {tuned.path}" and setup["gamma"] == tuned.data["setup"]["gamma"]
        assert f"from tuned: {tuned.path}" in err
    finally:
        torch.set_num_threads(before)


def test_cli_tune_refuses_the_held_back_split(tmp_path, capsys):
    rc = cli.main(["bench-tune", "--humaneval", "held-back:2", "--out", str(tmp_path)])
    assert rc == 2 and "tuning split only" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_cli_tune_keeps_the_report_when_the_tuning_file_cannot_be_written(tmp_path, capsys, monkeypatch):
    """Fault class: a measured set-up lost (an unforeseen OSError, no report) because its tuning file could not be
    written (a folder in its place)."""
    _tiny_models(monkeypatch)
    before = torch.get_num_threads()
    DRAFT_SETUP.path("smollm2").mkdir(parents=True)
    try:
        rc = cli.main(["bench-tune", "--draft", "early-exit:1", "--gammas", "1", "--max-new-tokens", "3",
                       "--repeats", "1", "--humaneval", "tuning:1", "--threads", "1", "--device", "cpu",
                       "--out", str(tmp_path / "bench")])
    finally:
        torch.set_num_threads(before)
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lab bench")]
    (run,) = report_dirs((tmp_path / "bench"))
    report = json.loads((run / "report.json").read_text(encoding="utf-8"))
    assert rc == 1 and len(err) == 1 and f"the tuning file '{DRAFT_SETUP.path('smollm2')}' could not" in err[0]
    # Which candidate wins (gamma 1, or the dynamic policy's max 12) is a timing; that one was kept is not.
    assert str(run) in err[0] and report["winner"]["gamma"] in (1, 12) and (run / "summary.md").exists()
