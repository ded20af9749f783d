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
def test_validate_context_fits_on_selection_saves_and_judges_a_pairs_file_with_it(tiny_eager, tmp_path, capsys,
                                                                                 monkeypatch):
    pairs = _pairs(tmp_path / "pairs.jsonl")
    out = tmp_path / "reports"
    argv = ["--model", "smollm2", "--device", "cpu", "--new-tokens", "3", "--out", str(out)]
    import lab.commands.validate_context as vc

    small = _pairs(tmp_path / "selection.jsonl", n=4)  # the selection set, cut to 4 pairs (--save refuses --limit)
    monkeypatch.setitem(vc.SETS, "selection", small)
    assert cli.main(["validate-context", "--set", "selection", "--save", *argv]) == 0
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
    (["--pairs", "x.jsonl", "--save"], "a pairs file's figures stay in its report"),
    (["--set", "validation", "--save", "--limit", "5"], "a verdict on part of the validation set is not kept"),
    (["--set", "selection", "--save", "--limit", "3"], "a measure fitted on part of the selection set is not kept"),
    (["--set", "selection", "--save", "--model", "./somewhere"], "not one"),
    (["--new-tokens", "1"], r"--new-tokens=1 must be in \[2,"),
    (["--set", "validation", "--model", "smollm2"], "no fitted context measure|validate-context"),
], ids=["save-pairs-file", "save-verdict-limit", "save-fit-limit", "save-not-profile", "one-token", "no-reference"])
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


def _validation(ref, set_name="validation", auroc=0.8):
    from lab.health.context_validity import ContextValidation
    from lab.kinds.validate_context import Figures

    fig = Figures(measure="lookback_heads", direction=1, n_pairs=160, auroc=auroc, ci_low=auroc - 0.07,
                  ci_high=auroc + 0.07, length_auroc=0.5, placebo_auroc=0.5, length_rho=0.01, end_share=0.0,
                  failed=() if auroc >= 0.75 else (f"AUROC {auroc:.2f} < 0.75",))
    return ContextValidation(profile="smollm2", set_name=set_name, items_file="/x/context_validation.jsonl",
                             reference=ref, reference_from="packaged", chosen=fig, others=(), rows=())


def test_packaged_context_measures_carry_their_verdicts_and_the_study_gate_reads_them(tmp_path, monkeypatch):
    """SmolLM2's measure failed the validation set (AUROC 0.73): the gate names the figures; the pair's passed."""
    from lab.health.context_validity import load_context_measure

    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path))
    small, pair = load_context_measure("smollm2"), load_context_measure("qwen2.5-coder")
    assert set(small.verdicts) == set(pair.verdicts) == {"validation", "heldback"}
    reason = small.unmeasurable()
    assert "AUROC 0.73 < 0.75" in reason and "160 validation pairs" in reason and "lab/data/context_validation" in reason
    assert pair.unmeasurable() is None and pair.verdicts["heldback"].figures.passes


def test_save_verdict_keeps_the_figures_beside_the_measure_and_a_new_fit_drops_them(tmp_path, monkeypatch):
    from lab.health.context_validity import load_context_measure, save_reference, save_verdict

    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path))
    packaged = load_context_measure("smollm2")
    path = save_verdict(packaged, _validation(packaged.reference, auroc=0.8), "R1")
    mine = load_context_measure("smollm2")
    assert mine.path == path and mine.reference == packaged.reference and mine.unmeasurable() is None
    assert mine.verdicts["validation"].report == "R1" and mine.verdicts["heldback"] == packaged.verdicts["heldback"]
    save_verdict(mine, _validation(mine.reference, auroc=0.6), "R2")  # the same set again: replaced
    again = load_context_measure("smollm2")
    assert again.verdicts["validation"].report == "R2" and "AUROC 0.60 < 0.75" in again.unmeasurable()
    save_reference(again.reference, "smollm2", "lab/data/context_selection.jsonl", "R3")  # a new fit: no verdict
    assert "no validation record" in load_context_measure("smollm2").unmeasurable()


def test_save_verdict_refuses_a_pairs_file_and_figures_of_another_measure(tmp_path, monkeypatch):
    from dataclasses import replace

    from lab.health.context_validity import load_context_measure, save_verdict

    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path))
    m = load_context_measure("smollm2")
    with pytest.raises(ValueError, match="only the packaged sets"):
        save_verdict(m, _validation(m.reference, set_name="pairs file"), "R")
    with pytest.raises(ValueError, match="another fitted measure"):
        save_verdict(m, _validation(replace(m.reference, slope=0.0)), "R")
    assert not reference_path("smollm2", packaged=False).exists()


@pytest.mark.parametrize("edit", [{"auroc": 2.0}, {"failed": "AUROC"}, {"extra": 1}, {"n_pairs": 1}],
                         ids=["auroc-above-1", "failed-not-list", "unknown-field", "too-few-pairs"])
def test_a_hostile_verdict_in_the_users_reference_is_refused_in_one_line(edit, tmp_path, monkeypatch):
    from lab.health.context_validity import load_context_measure
    from lab.schemas import FileSchemaError

    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path))
    data = json.loads(reference_path("smollm2", packaged=True).read_text())
    data["validation"].update(edit)
    user = reference_path("smollm2", packaged=False)
    user.parent.mkdir(parents=True)
    user.write_text(json.dumps(data))
    with pytest.raises(FileSchemaError) as exc:
        load_context_measure("smollm2")
    assert str(user) in str(exc.value) and "\n" not in str(exc.value)


def test_a_verdict_edited_to_pass_is_judged_again_from_its_figures(tmp_path, monkeypatch):
    """Fault class: a hand-edited file whose empty ``failed`` list claims a pass its AUROC does not reach."""
    from lab.health.context_validity import load_context_measure

    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path))
    data = json.loads(reference_path("smollm2", packaged=True).read_text())
    data["validation"].update(auroc=0.5, ci_low=0.4, ci_high=0.6, failed=[])
    user = reference_path("smollm2", packaged=False)
    user.parent.mkdir(parents=True)
    user.write_text(json.dumps(data))
    assert "AUROC 0.50 < 0.75" in load_context_measure("smollm2").unmeasurable()
