"""``lab validate-context`` on a tiny random model: the selection set fits and saves the measure, the
validation set is judged with it, and every bad input is refused before any model loads."""

from __future__ import annotations

import json

import pytest

from lab import cli
from lab.health.context_validity import HEADS, load_reference, reference_path
from tests import support

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _pairs(path, n: int = 6) -> str:
    lines = []
    for i in range(n):
        words = " ".join(support.WORDS[(i + j) % len(support.WORDS)] for j in range(6 + i))
        other = " ".join(support.WORDS[(3 * i + j + 1) % len(support.WORDS)] for j in range(6 + i))
        lines.append(json.dumps({"id": f"f{i}", "package": "pkg", "object": f"pkg.f{i}",
                                 "question": f"In one sentence, what does `f{i}` do?", "relevant": words,
                                 "irrelevant": other}))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture
def tiny_eager(monkeypatch, tmp_path):
    from lab.models import loading

    tok = support.chatml_tokenizer()

    def load(name, **kw):
        assert kw.get("attn_implementation") == "eager"
        return support.tiny_llama(vocab_size=len(tok), max_positions=4096, attn_implementation="eager"), tok

    monkeypatch.setattr(loading, "load_model", load)
    monkeypatch.setattr(loading, "check_model_available", lambda name: None)
    monkeypatch.setattr(loading, "known_config", lambda name: None)  # not the real profile's config and tokenizer
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path / "cal"))


@pytest.mark.slow
def test_validate_context_fits_on_selection_saves_and_judges_a_pairs_file_with_it(tiny_eager, tmp_path, capsys):
    pairs = _pairs(tmp_path / "pairs.jsonl")
    out = tmp_path / "reports"
    argv = ["--model", "smollm2", "--device", "cpu", "--new-tokens", "3", "--out", str(out)]
    assert cli.main(["validate-context", "--set", "selection", "--limit", "4", "--save", *argv]) == 0
    saved = reference_path("smollm2", packaged=False)
    assert saved.is_file()
    ref, path = load_reference("smollm2")
    assert path == saved and len(ref.heads) == HEADS and ref.n_pairs == 4
    assert cli.main(["validate-context", "--pairs", pairs, *argv]) == 0
    report = json.loads(sorted(out.glob("*validate-context*"))[-1].joinpath("report.json").read_text())
    v = report["validation"]
    assert v["reference_from"] == str(saved) and v["chosen"]["n_pairs"] == 6
    assert {f["measure"] for f in v["others"]} >= {"lookback", "contrast_bits", "gain_bits", "n_context"}
    assert "lookback_heads" in capsys.readouterr().out


@pytest.mark.parametrize("argv,match", [
    (["--set", "validation", "--save"], "--save keeps a measure fitted on --set selection"),
    (["--set", "selection", "--save", "--model", "./somewhere"], "not one"),
    (["--new-tokens", "1"], r"--new-tokens=1 must be in \[2,"),
    (["--set", "validation", "--model", "smollm2"], "no fitted context measure|validate-context"),
], ids=["save-not-selection", "save-not-profile", "one-token", "no-reference"])
def test_validate_context_refuses_bad_arguments_before_any_model_loads(argv, match, no_model_loading, tmp_path,
                                                                       monkeypatch, capsys):
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path / "cal"))
    if "--model" not in argv:
        argv = [*argv, "--model", "smollm2"]
    if match.startswith("no fitted"):  # no packaged reference either: point the package's at nothing
        import lab.health.context_validity as cv
        real = cv.reference_path
        monkeypatch.setattr(cv, "reference_path", lambda p, packaged: real(p, packaged=False) if packaged else
                            real(p, packaged=False))
    assert cli.main(["validate-context", *argv, "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert __import__("re").search(match, err), err


def test_validate_context_refuses_a_bad_pairs_file_by_name_and_line(no_model_loading, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a"}\n')
    assert cli.main(["validate-context", "--pairs", str(bad), "--model", "smollm2", "--device", "cpu"]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err


def test_validate_context_refuses_a_folder_in_place_of_the_users_reference(no_model_loading, tmp_path, monkeypatch,
                                                                           capsys):
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path))
    reference_path("smollm2", packaged=False).mkdir(parents=True)
    assert cli.main(["validate-context", "--model", "smollm2", "--device", "cpu"]) == 2
    assert "not a regular file" in capsys.readouterr().err


def test_packaged_smollm2_context_reference_reads_and_names_heads_inside_the_model(tmp_path, monkeypatch):
    """SmolLM2-135M has 30 layers of 9 heads; the packaged fit keeps HEADS of them, fitted on the selection set."""
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path))
    ref, path = load_reference("smollm2")
    assert path == reference_path("smollm2", packaged=True)
    assert len(ref.heads) == HEADS and all(0 <= layer < 30 and 0 <= head < 9 for layer, head in ref.heads)
    assert json.loads(path.read_text())["selection_file"] == "lab/data/context_selection.jsonl"
