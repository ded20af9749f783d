"""llama.cpp (``make peer``) on the Qwen pair's GGUF files: both modes, 16 greedy tokens, 1 thread.

Speculative decoding is lossless in greedy mode, so ``llama-speculative-simple``'s text must
equal ``llama-completion``'s on the same prompt, threads and sampler (llama.cpp against
itself: its quantized kernels need not match the lab's float32 dequantized weights).
Skipped, with the reason, where the binaries are not built; ``make test`` builds them.
"""

from __future__ import annotations

import math
import subprocess

import pytest

from lab.bench.peer.bench import call_timeout, run_binary
from lab.bench.peer.llamacpp import (PeerRunConfig, PeerUnavailableError, completion_command, locate,
                               prompt_file_text, speculative_command, version_command)
from lab.bench.peer.parse import parse_completion, parse_speculative, parse_version

N_TOKENS = 16
GAMMA = 5
# One thread: llama.cpp's OpenMP workers spin while they wait, so on a shared 2-core machine
# 2 threads ran 2.8x slower than 1 (1.5 against 4.1 tok/s, load 3.5); the test checks
# equality, not speed.
THREADS = 1
PROMPT = "Write a Python function that returns the n-th Fibonacci number iteratively."


@pytest.fixture(scope="module")
def peer_setup(tmp_path_factory):
    try:
        bins = locate(None)
    except PeerUnavailableError as exc:
        pytest.skip(f"llama.cpp peer binaries not built ({exc})")
    from lab.models.profiles import PROFILES
    from lab.models.loading import ModelUnavailableError, gguf_path, load_tokenizer
    from lab.models.chat import build_messages, encode_chat

    try:
        target, draft = gguf_path(PROFILES["qwen2.5-coder"]), gguf_path(PROFILES["qwen2.5-coder-0.5b"])
        tokenizer = load_tokenizer("qwen2.5-coder")
    except ModelUnavailableError as exc:
        pytest.skip(f"the Qwen pair's GGUF files are not installed ({exc})")
    messages = build_messages(PROMPT)
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    n_lab = encode_chat(tokenizer, messages).shape[1]  # what the lab's bench feeds its own methods
    prompt_file = tmp_path_factory.mktemp("peer") / "prompt.txt"
    prompt_file.write_text(prompt_file_text(text), encoding="utf-8")
    return bins, target, draft, prompt_file, text, n_lab


def test_peer_flags_exist_in_the_binaries_help(peer_setup):
    """Fault class: a flag renamed in the pinned version (``--draft`` became ``--spec-draft-n-max``)."""
    bins, target, draft, prompt_file, _, _ = peer_setup
    cfg = PeerRunConfig(threads=THREADS, gamma=GAMMA, max_new_tokens=N_TOKENS)
    for cmd in (speculative_command(bins, target, draft, prompt_file, cfg),
                completion_command(bins, target, prompt_file, cfg)):
        help_text = subprocess.run([cmd[0], "--help"], capture_output=True, text=True, timeout=60)
        text = help_text.stdout + help_text.stderr
        flags = [arg for arg in cmd[1:] if arg.startswith("-") and not arg.lstrip("-").replace(".", "").isdigit()]
        assert "-m" in flags and "-n" in flags, cmd  # the filter keeps flags, drops negative numbers
        for arg in flags:
            assert arg in text, f"{cmd[0]} --help does not list {arg}"


def test_peer_speculative_equals_its_target_alone_greedy(peer_setup, lab_log):
    """llama-speculative-simple overshoots its -n by up to gamma tokens, so the target alone
    then runs for exactly the count it emitted and the two texts must be equal."""
    import dataclasses

    bins, target, draft, prompt_file, text, n_lab = peer_setup
    cfg = PeerRunConfig(threads=THREADS, gamma=GAMMA, max_new_tokens=N_TOKENS, ctx_size=512)
    version = parse_version(run_binary(version_command(bins))[1])
    spec_steps = 2 * n_lab + N_TOKENS * (GAMMA + 1)  # what LlamaCppPeer allows a speculative call
    spec = parse_speculative(*run_binary(speculative_command(bins, target, draft, prompt_file, cfg),
                                         timeout=call_timeout(spec_steps)), prompt=text)
    same_count = dataclasses.replace(cfg, max_new_tokens=spec.n_predict)
    alone = parse_completion(*run_binary(completion_command(bins, target, prompt_file, same_count),
                                         timeout=call_timeout(n_lab + spec.n_predict)))
    lab_log.record(llama_cpp_commit=version["commit"], target_tokens_per_s=alone.n_generated / alone.decode_s,
                   speculative_tokens_per_s=spec.n_predict / spec.decode_s, alpha=spec.alpha,
                   n_drafted=spec.n_drafted, n_predict=spec.n_predict, unaccounted_pct=spec.perf.unaccounted_pct,
                   prompt_tokens_lab=n_lab, prompt_tokens_llama_cpp=spec.n_prompt)
    assert N_TOKENS <= spec.n_predict <= N_TOKENS + GAMMA and alone.n_generated == spec.n_predict
    assert spec.n_prompt == alone.n_prompt == n_lab, "llama.cpp tokenized the templated text differently"
    assert spec.n_drafted > 0 and 0 <= spec.n_accepted <= spec.n_drafted and not math.isnan(spec.alpha)
    assert spec.text == alone.text and spec.text.strip()
