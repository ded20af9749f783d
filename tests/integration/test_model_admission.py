"""A draft whose vocabulary differs from the target's is refused from metadata, before its weights load,
on the real embedded models."""

from __future__ import annotations

import pytest


def test_cli_speculate_gemma_draft_for_smollm2_refused_before_draft_weights_load(monkeypatch, tmp_path, capsys):
    """`--draft gemma3-270m` for `smollm2`: the vocabularies differ (49,152 vs 262,144
    tokens); the refusal comes from Gemma's tokenizer, and its weights (1.1 GB
    dequantized) are never loaded. Exit 2, one line, no report."""
    from lab import cli
    from lab.models import loading as models

    loaded = []
    real = models.load_model

    def spy(name, **kwargs):
        loaded.append(name)
        return real(name, **kwargs)

    monkeypatch.setattr(models, "load_model", spy)
    rc = cli.main(["speculate", "Hello", "--draft", "gemma3-270m", "--device", "cpu", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "draft='gemma3-270m' has a different vocabulary" in err and len(err.strip().splitlines()) == 1
    assert loaded == ["smollm2"], f"draft weights were loaded: {loaded}"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("spec", ["qwen2.5-coder-0.5b"])
def test_make_draft_qwen_draft_for_smollm2_refused_from_tokenizer(smollm2, spec, monkeypatch):
    """The same check on the chunked profile: decided from the 0.5B's cached tokenizer."""
    from lab.models import loading as models
    from lab.speculative.draft_specs import make_draft

    model, tok = smollm2
    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("draft weights loaded"))
    with pytest.raises(ValueError, match="different vocabulary"):
        make_draft(model, spec, target_tokenizer=tok)
