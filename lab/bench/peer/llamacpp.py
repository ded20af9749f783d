"""llama.cpp as a second runtime: locate its binaries, build command lines, parse output.

The lab runs three binaries of the pinned llama.cpp (``make peer``, :mod:`lab.runtime.build`)
or of a user's own build (``--llama-cpp DIR``):

- ``llama-completion``: the target alone, greedy, on one prompt (``-no-cnv``: the prompt
  is the already-templated text, tokenized with special tokens parsed);
- ``llama-speculative-simple``: speculative decoding with the draft model
  (``--spec-type draft-simple``, ``--spec-draft-n-max GAMMA``, ``--spec-draft-n-min 0``,
  ``--spec-draft-p-min 0``: a fixed draft length like the lab's, no confidence stop);
- ``llama-bench``: tokens/s of one-token generation steps and of a (gamma + 1)-token
  batch for each model alone, i.e. llama.cpp's own c and verify cost.

Both generating binaries tokenize the prompt text with ``common_tokenize(ctx, prompt,
add_special=true, parse_special=true)``, so feeding them the text the lab's chat template
renders gives the prompt the lab encodes (the token count llama.cpp prints is recorded
beside the lab's). The parsers read the lines these binaries print in the pinned version
(``tests/unit/data/llamacpp/`` holds recorded outputs); a line that is missing raises
:class:`PeerOutputError` naming the field, never a silent zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lab.runtime.build import TARGETS, BuildConfig

SPECULATIVE, COMPLETION, BENCH = TARGETS


class PeerUnavailableError(ValueError):
    """A llama.cpp binary is missing (a ValueError: the CLI exits 2 on it, before any model loads)."""


class PeerRunError(RuntimeError):
    """A llama.cpp binary failed: it exited non-zero, died by a signal, ran past its timeout,
    or printed what the parser cannot read. The message names the binary and the cause in
    one line; the CLI prints it and exits 1."""


class PeerOutputError(PeerRunError):
    """llama.cpp's output lacks a field the parser needs (its format moved, or it printed garbage)."""


@dataclass(frozen=True)
class PeerBinaries:
    """Paths of the three binaries and where they came from."""

    bin_dir: Path
    speculative: Path
    completion: Path
    bench: Path
    source: str  # "make peer" or "--llama-cpp"


def locate(llama_cpp: Path | str | None = None) -> PeerBinaries:
    """Find the binaries in ``llama_cpp`` (a build's ``bin/`` or its parent) or the lab's cache.

    Raises:
        PeerUnavailableError: a binary is missing or not executable; the message names it,
            ``make peer`` and ``--llama-cpp``.
    """
    if llama_cpp is None:
        candidates, source = [BuildConfig().install_dir / "bin"], "make peer"
    else:
        root = Path(llama_cpp).expanduser()
        candidates, source = [root, root / "bin", root / "build" / "bin"], "--llama-cpp"
    for bin_dir in candidates:
        paths = [bin_dir / name for name in TARGETS]
        if all(p.is_file() and p.stat().st_mode & 0o111 for p in paths):
            return PeerBinaries(bin_dir, *paths, source=source)
    where = candidates[0]
    missing = [n for n in TARGETS if not (where / n).is_file()] or list(TARGETS)
    flag = f"--llama-cpp {llama_cpp}: " if llama_cpp is not None else ""
    raise PeerUnavailableError(
        f"{flag}llama.cpp binary {missing[0]} not found in {where}"
        + (f" (nor in {', '.join(str(c) for c in candidates[1:])})" if len(candidates) > 1 else "")
        + "; run `make peer` to build the pinned llama.cpp into the lab's cache, or pass "
          "--llama-cpp DIR with the bin directory of your own build")


@dataclass(frozen=True)
class PeerRunConfig:
    """One llama.cpp generation, mirroring a bench configuration.

    Attributes:
        threads: ``-t``/``-tb`` (the draft uses the same: llama.cpp's default).
        gamma: ``--spec-draft-n-max``: drafted tokens per round, the lab's gamma.
        max_new_tokens: tokens to emit. ``llama-speculative-simple`` emits one more than
            its ``-n`` (its loop stops only once ``n_predict > -n``), so it gets
            ``max_new_tokens - 1``; ``llama-completion`` gets ``max_new_tokens``.
        ctx_size: ``-c``; llama.cpp's default is the model's full trained context (32k
            for Qwen2.5), whose KV cache costs memory and time for nothing here.
    """

    threads: int
    gamma: int
    max_new_tokens: int
    ctx_size: int = 4096
    seed: int = 0  # greedy (--temp 0): the seed only pins the unused dist sampler

    def __post_init__(self) -> None:
        for name in ("threads", "gamma", "ctx_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r} must be >= 1")
        if self.max_new_tokens < 2:
            raise ValueError(f"max_new_tokens={self.max_new_tokens!r} must be >= 2")


def prompt_file_text(prompt: str) -> str:
    """What to write into the ``-f`` file so the binary reads back exactly ``prompt``.

    llama.cpp's ``-f`` drops one trailing newline of the file (common/arg.cpp), and a
    ChatML prompt ends with ``<|im_start|>assistant\n``: without the extra newline the
    binaries would decode from a different last token than the lab.
    """
    return prompt + "\n"


def _common_args(model: Path, prompt_file: Path, cfg: PeerRunConfig, n_predict: int) -> list[str]:
    """The flags both binaries take. ``--no-escape``: llama.cpp turns the two characters ``\\n`` (and ``\\t``,
    ``\\"`` ...) of a prompt into a newline (and a tab, a quote ...) unless told not to, so a prompt holding
    code with string escapes would reach it as other tokens than the lab's."""
    return ["-m", str(model), "-f", str(prompt_file), "-n", str(n_predict), "-c", str(cfg.ctx_size),
            "-t", str(cfg.threads), "-tb", str(cfg.threads), "--temp", "0", "--top-k", "1",
            "-s", str(cfg.seed), "--color", "off", "--no-escape"]


def completion_command(bins: PeerBinaries, target: Path, prompt_file: Path, cfg: PeerRunConfig) -> list[str]:
    """``llama-completion``: the target alone, greedy, ``max_new_tokens`` tokens, no chat."""
    return [str(bins.completion), *_common_args(target, prompt_file, cfg, cfg.max_new_tokens),
            "-no-cnv", "--no-display-prompt"]


def speculative_command(bins: PeerBinaries, target: Path, draft: Path, prompt_file: Path,
                        cfg: PeerRunConfig) -> list[str]:
    """``llama-speculative-simple``: target + draft, fixed draft length gamma, greedy."""
    return [str(bins.speculative), *_common_args(target, prompt_file, cfg, cfg.max_new_tokens - 1),
            "-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(cfg.gamma),
            "--spec-draft-n-min", "0", "--spec-draft-p-min", "0"]


def bench_command(bins: PeerBinaries, model: Path, cfg: PeerRunConfig, repeats: int) -> list[str]:
    """``llama-bench``: a (gamma + 1)-token batch (a verify pass) and ``max_new_tokens`` steps, JSON."""
    return [str(bins.bench), "-m", str(model), "-p", str(cfg.gamma + 1), "-n", str(cfg.max_new_tokens),
            "-t", str(cfg.threads), "-r", str(repeats), "-o", "json"]


def version_command(bins: PeerBinaries) -> list[str]:
    return [str(bins.completion), "--version"]
