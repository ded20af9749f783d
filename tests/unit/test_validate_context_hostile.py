"""``lab validate-context`` and its files tried as a hostile user would (issue 53's fresh round): each test is
one case that once ended in a traceback, an unforeseen error, a refusal after the model loaded, a message
naming the wrong thing or a silently ignored input."""

from __future__ import annotations

import json

import pytest

from lab.health.context_items import load_items


def _item(i: int, **kw) -> dict:
    return {"id": f"p{i}", "package": "pkg", "object": f"f{i}", "question": f"What does `f{i}` do?",
            "relevant": f"Return the sum {i}.", "irrelevant": f"Open the file {i}.", **kw}


def _write(path, items) -> str:
    path.write_text("".join(json.dumps(it) + "\n" for it in items), encoding="utf-8")
    return str(path)


def test_load_items_deeply_nested_line_refused_by_line(tmp_path):
    """Fault class: a JSON line nested past Python's recursion limit ended in an unforeseen RecursionError."""
    bad = tmp_path / "deep.jsonl"
    bad.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ValueError, match=r"deep.jsonl:1: not JSON \(nested too deeply"):
        load_items(bad)


def test_load_items_not_utf8_refused_naming_file_and_line(tmp_path):
    """Fault class: a pairs file that is not UTF-8 was refused by the codec's message alone (no file, no line)."""
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes((json.dumps(_item(0)) + "\n").encode() + json.dumps(_item(1)).encode()[:-2] + b'\xe9"}\n')
    with pytest.raises(ValueError, match=r"latin1.jsonl:2: not valid UTF-8"):
        load_items(bad)


def test_load_items_lone_surrogate_refused_before_the_tokenizer(tmp_path):
    """Fault class: a ``\\ud800`` escape passed the reader and ended in the tokenizer's TypeError after the model
    loaded (an error the lab did not foresee)."""
    bad = _write(tmp_path / "sur.jsonl", [_item(0), _item(1, relevant="x\ud800y"), _item(2)])
    with pytest.raises(ValueError, match=r"sur.jsonl:2: field 'relevant' holds a lone surrogate"):
        load_items(bad)


def test_load_items_pair_with_one_context_twice_refused(tmp_path):
    """Fault class: a pair whose relevant and irrelevant contexts are the same text (it cannot rank) was scored
    and pulled every AUROC toward 0.5 in silence."""
    bad = _write(tmp_path / "same.jsonl", [_item(0), _item(1, irrelevant=_item(1)["relevant"]), _item(2)])
    with pytest.raises(ValueError, match=r"same.jsonl:2: 'relevant' and 'irrelevant' are the same text"):
        load_items(bad)


def test_load_items_unicode_line_separators_stay_inside_their_record(tmp_path):
    """U+2028, U+0085 and U+2029 inside a string are JSON Lines text, not line ends."""
    path = tmp_path / "sep.jsonl"
    path.write_text("".join(json.dumps(_item(i, relevant=f"a\u2028b\u0085c\u2029{i}"), ensure_ascii=False) + "\r\n"
                            for i in range(3)), encoding="utf-8")
    items = load_items(path)
    assert [it.line for it in items] == [1, 2, 3] and items[0].relevant == "a\u2028b\u0085c\u20290"


# --- the command: refused before any model loads -------------------------------------------------------------

from lab import cli  # noqa: E402
from lab.health.context_validity import reference_path, validity_figures  # noqa: E402
from tests import support  # noqa: E402

TINY_CONFIG = {"max_position_embeddings": 64, "num_hidden_layers": 2, "num_attention_heads": 4}


@pytest.fixture
def known_tiny(monkeypatch, tmp_path):
    """A model whose config and tokenizer are known without loading it (as a dequantized profile's are); a
    fitted measure for it in the user's folder; loading the model fails the test."""
    from lab.models import loading

    monkeypatch.setattr(loading, "known_config", lambda name: dict(TINY_CONFIG), raising=False)
    monkeypatch.setattr(loading, "load_tokenizer", lambda name: support.chatml_tokenizer())
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path / "cal"))
    _reference(heads=[[1, 3], [0, 0]])


def _reference(**kw) -> None:
    path = reference_path("smollm2", packaged=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"profile": "smollm2", "measure": "lookback_heads", "heads": [[0, 0]],
                                "intercept": 0.0, "slope": 0.0, "n_pairs": 3, "loo_auroc": 0.5,
                                "selection_file": "x", "report": "y", **kw}))


def _words(n: int, shift: int = 0) -> str:
    return " ".join(support.WORDS[(j + shift) % len(support.WORDS)] for j in range(n))


def _run(argv, capsys) -> str:
    assert cli.main(["validate-context", "--model", "smollm2", "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err


def test_validate_context_set_beside_pairs_refused(no_model_loading, tmp_path, capsys):
    """Fault class: ``--set heldback --pairs FILE`` judged the file and ignored the typed --set in silence."""
    pairs = _write(tmp_path / "p.jsonl", [_item(i) for i in range(3)])
    assert "--set heldback has no effect with --pairs" in _run(["--set", "heldback", "--pairs", pairs], capsys)


def test_validate_context_empty_pairs_path_refused(no_model_loading, capsys):
    """Fault class: ``--pairs ''`` was read as no --pairs and the packaged validation set judged instead."""
    assert "--pairs '' names no file" in _run(["--pairs", ""], capsys)


def test_validate_context_non_profile_refused_without_advising_a_refused_command(no_model_loading, tmp_path, capsys):
    """Fault class: a local model without a fitted measure was told to run ``--set selection --save``, which
    --save refuses for a model that is not a profile (and its path was joined into the calibration folder)."""
    pairs = _write(tmp_path / "p.jsonl", [_item(i) for i in range(3)])
    err = _run(["--pairs", pairs, "--model", str(tmp_path)], capsys)
    assert "is not one of the model profiles" in err and "--set selection fits and judges it in one run" in err
    assert "--save first" not in err


def test_validate_context_context_past_the_window_refused_by_pair_before_loading(known_tiny, no_model_loading,
                                                                                 tmp_path, capsys):
    """Fault class: a pair longer than the model's context was refused only after the model loaded, blaming
    ``max_new_tokens`` (a flag this command does not have) and naming no pair."""
    pairs = _write(tmp_path / "p.jsonl", [_item(0), _item(1, relevant=_words(80)), _item(2)])
    err = _run(["--pairs", pairs, "--new-tokens", "3"], capsys)
    assert "p.jsonl:2: pair 'p1' (relevant context)" in err and "--new-tokens 3" in err
    assert "context of 64" in err and "max_new_tokens" not in err


def test_validate_context_reference_head_outside_the_model_refused_naming_the_file(known_tiny, no_model_loading,
                                                                                   tmp_path, capsys):
    """Fault class: a fitted measure whose head the model lacks was refused after every pair was scored, naming
    no file, and a head index past the heads was called outside the model's layers."""
    _reference(heads=[[0, 7]])
    pairs = _write(tmp_path / "p.jsonl", [_item(i) for i in range(3)])
    err = _run(["--pairs", pairs, "--new-tokens", "3"], capsys)
    assert str(reference_path("smollm2", packaged=False)) in err and "(layer 0, head 7)" in err
    assert "2 layers x 4 heads" in err


def test_validate_context_reference_of_another_profile_refused(no_model_loading, tmp_path, monkeypatch, capsys):
    """Fault class: a fitted measure copied from another model's file was read as this model's in silence."""
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path / "cal"))
    _reference(profile="gemma3-270m")
    err = _run(["--set", "validation", "--limit", "3"], capsys)
    assert "fitted for 'gemma3-270m', not 'smollm2'" in err


def test_validity_figures_constant_length_says_rho_undefined():
    """Fault class: with every relevant context of one length the bar read "|rho(length)| nan > 0.2"."""
    f = validity_figures("x", [0.3, 0.5, 0.9], [0.1, 0.2, 0.3], [12, 12, 12], [10, 14, 12])
    assert any("rho(length) undefined" in reason for reason in f.failed)
    assert not any("nan" in reason for reason in f.failed)


@pytest.fixture
def tiny_model(monkeypatch, tmp_path):
    """A tiny eager Llama in place of the model, nothing known about it before it loads."""
    from lab.models import loading

    tok = support.chatml_tokenizer()
    monkeypatch.setattr(loading, "load_model", lambda name, **kw: (
        support.tiny_llama(vocab_size=len(tok), max_positions=4096, attn_implementation="eager"), tok))
    monkeypatch.setattr(loading, "check_model_available", lambda name: None)
    monkeypatch.setattr(loading, "known_config", lambda name: None, raising=False)


@pytest.mark.slow
def test_validate_context_save_that_cannot_be_written_exits_1_naming_the_file_report_kept(tiny_model, tmp_path,
                                                                                          monkeypatch, capsys):
    """Fault class: ``--save`` on a full disk (or a calibration folder that refuses it) ended in an unforeseen
    OSError after the report was written."""
    (tmp_path / "cal").mkdir()
    (tmp_path / "cal" / "health").write_text("a file where the folder goes")
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path / "cal"))
    out = tmp_path / "reports"
    import lab.commands.validate_context as vc
    from lab.health.context_items import load_items

    small = tmp_path / "selection.jsonl"  # the selection set cut to 3 pairs (--save refuses --limit)
    lines = vc.resources.files("lab").joinpath("data", vc.SETS["selection"]).read_text().splitlines()[:3]
    small.write_text("\n".join(lines) + "\n")
    assert len(load_items(small)) == 3
    monkeypatch.setitem(vc.SETS, "selection", str(small))
    assert cli.main(["validate-context", "--set", "selection", "--save", "--new-tokens", "3",
                     "--model", "smollm2", "--device", "cpu", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "the report is complete in" in err and "could not be saved to" in err
    assert str(reference_path("smollm2", packaged=False)) in err and "did not foresee" not in err
    assert len(list(out.glob("*validate-context*/report.json"))) == 1


@pytest.mark.slow
def test_validate_context_reference_head_outside_the_model_refused_before_scoring_when_unknown(tiny_model, tmp_path,
                                                                                               monkeypatch, capsys):
    """Fault class: with the model's shape unknown before it loads, a fitted measure naming a head it lacks
    was refused only after every pair was scored; now at once after the model loads, naming the file."""
    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path / "cal"))
    _reference(heads=[[5, 0]])
    import lab.health.context_items as ci

    monkeypatch.setattr(ci, "score_items", lambda *a, **k: pytest.fail("pairs scored before the check"))
    pairs = _write(tmp_path / "p.jsonl", [_item(i) for i in range(3)])
    err = _run(["--pairs", pairs, "--new-tokens", "3"], capsys)
    assert "(layer 5, head 0) is not in the model's 2 layers x 4 heads" in err
