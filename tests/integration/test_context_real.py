"""A prompt at the context limit on the real SmolLM2 (context 8,192): ~8,170 prompt tokens plus 60 new tokens.

Regression (fault class: silent decode past the context window, which writes a
normal-looking report of 8,234 positions): ``lab entropy`` and ``lab speculate``
both refuse the input with the same line, before any decoding, and write nothing.
"""

from __future__ import annotations

import pytest

from lab import cli
from lab.decode import context_length
from lab.models.chat import build_messages, encode_chat

CONTEXT = 8192  # SmolLM2's max_position_embeddings; long_prompt checks it against the loaded model


@pytest.fixture(scope="module")
def long_prompt(smollm2):
    model, tok = smollm2
    assert context_length(model) == CONTEXT  # the limit the lab itself reads from the model
    words = ("the lighthouse keeper counted the steps while the sea changed colour below . " * 800).split()
    lo, hi = 1000, len(words)
    while lo < hi:  # the longest prefix whose chat encoding stays within CONTEXT - 30 tokens
        mid = (lo + hi + 1) // 2
        n = encode_chat(tok, build_messages(" ".join(words[:mid]))).shape[1]
        lo, hi = (mid, hi) if n <= CONTEXT - 30 else (lo, mid - 1)
    text = " ".join(words[:lo])
    n = encode_chat(tok, build_messages(text)).shape[1]
    assert CONTEXT - 60 < n <= CONTEXT - 30
    return text, n


@pytest.mark.parametrize("command", [["entropy"], ["speculate", "--draft", "prompt-lookup"]])
def test_real_prompt_plus_budget_past_context_refused_same_line(tmp_path, capsys, long_prompt, command):
    text, n = long_prompt
    rc = cli.main([command[0], text, *command[1:], "--max-new-tokens", "60", "--device", "cpu",
                   "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2
    expected = (f"--max-new-tokens=60: the prompt ({n} tokens) plus 60 new tokens needs {n + 60} positions, "
                f"more than the model's context of {CONTEXT}")
    assert expected in err
    assert list(tmp_path.iterdir()) == []
