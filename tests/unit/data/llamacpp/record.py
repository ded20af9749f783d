"""Re-record the llama.cpp outputs the parser tests read (run after bumping the pinned version).

    PYTHONPATH=. .venv/bin/python tests/unit/data/llamacpp/record.py

Needs ``make peer`` and the Qwen pair (``make setup-test``). Writes, next to this file, the
real stdout/stderr of ``llama-completion`` and ``llama-speculative-simple`` (gamma 5) on
one code prompt, 16 greedy tokens, 2 threads; ``llama-bench -o json`` for each model
(a 6-token batch and 16 one-token steps, 1 repeat); and ``--version``'s stderr.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from lab.models.chat import build_messages
from lab.models.profiles import PROFILES
from lab.models.loading import gguf_path, load_tokenizer
from lab.bench.peer.llamacpp import (PeerRunConfig, bench_command, completion_command, locate, prompt_file_text,
                               speculative_command, version_command)

HERE = Path(__file__).parent
PROMPT = "Write a Python function that returns the n-th Fibonacci number iteratively."


def _save(name: str, cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    (HERE / f"{name}.stdout").write_text(proc.stdout, encoding="utf-8")
    (HERE / f"{name}.stderr").write_text(proc.stderr, encoding="utf-8")


def main() -> None:
    bins = locate(None)
    target, draft = gguf_path(PROFILES["qwen2.5-coder"]), gguf_path(PROFILES["qwen2.5-coder-0.5b"])
    text = load_tokenizer("qwen2.5-coder").apply_chat_template(build_messages(PROMPT), add_generation_prompt=True,
                                                               tokenize=False)
    (HERE / "prompt.txt").write_text(text, encoding="utf-8")
    prompt_file = HERE / "prompt-file.tmp"
    prompt_file.write_text(prompt_file_text(text), encoding="utf-8")
    cfg = PeerRunConfig(threads=2, gamma=5, max_new_tokens=16, ctx_size=512)
    try:
        _save("completion", completion_command(bins, target, prompt_file, cfg))
        _save("speculative", speculative_command(bins, target, draft, prompt_file, cfg))
    finally:
        prompt_file.unlink()
    for role, model in (("target", target), ("draft", draft)):
        proc = subprocess.run(bench_command(bins, model, cfg, repeats=1), capture_output=True, text=True, check=True)
        (HERE / f"bench-{role}.json").write_text(proc.stdout, encoding="utf-8")
    proc = subprocess.run(version_command(bins), capture_output=True, text=True, check=True)
    (HERE / "version.stderr").write_text(proc.stderr, encoding="utf-8")
    print(f"recorded into {HERE} (load average {os.getloadavg()})")


if __name__ == "__main__":
    main()
