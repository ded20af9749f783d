"""``--peer llama.cpp`` and ``--llama-cpp DIR`` for ``lab bench``: flags, checks, set-up.

Everything here runs before any model loads: a missing binary or a model without a GGUF
file exits 2 with the flag named (:class:`lab.bench.peer.llamacpp.PeerUnavailableError` is a
``ValueError``); a binary that is there but broken (``--version`` dies, hangs or prints
garbage) exits 1 naming it (:class:`lab.bench.peer.llamacpp.PeerRunError`).
"""

from __future__ import annotations

import argparse
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ContextManager, Sequence

from lab.bench.peer.llamacpp import PeerBinaries, PeerUnavailableError, locate

PEERS = ("llama.cpp",)
CTX_MARGIN = 64  # -c above prompt + budget + gamma: room for the final verify batch's extra tokens


def add_peer_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--peer", choices=PEERS, default=None,
                   help="also run this runtime's target alone and its speculative decoding in the same "
                        "alternating schedule, on the GGUF files the lab loaded (needs `make peer` or --llama-cpp)")
    p.add_argument("--llama-cpp", default=None, metavar="DIR",
                   help="a llama.cpp build's bin directory (or its root) holding llama-speculative-simple, "
                        "llama-completion and llama-bench (default: the one `make peer` built in the lab's cache)")


@dataclass(frozen=True)
class PeerSetup:
    bins: PeerBinaries
    target_gguf: Path
    draft_gguf: Path
    version: dict[str, str]  # ``--version``, parsed


def _gguf(name: str, flag: str) -> Path:
    from lab.models.profiles import PROFILES
    from lab.models.loading import gguf_path

    profile = PROFILES.get(name)
    if profile is None or profile.source == "hub":
        gguf = [n for n, p in PROFILES.items() if p.source != "hub"]
        raise ValueError(f"{flag} {name!r}: --peer llama.cpp runs on GGUF files; use a GGUF profile "
                         f"({', '.join(gguf)})")
    return gguf_path(profile)


def check_peer_args(args: argparse.Namespace, draft_spec: str) -> PeerSetup | None:
    """Validate ``--peer`` / ``--llama-cpp``; locate the binaries and both GGUF files; run ``--version``.

    Raises:
        ValueError: ``--llama-cpp`` without ``--peer``, or a model/draft without a GGUF file.
        PeerUnavailableError: a binary is missing (names ``make peer`` and ``--llama-cpp``).
        PeerRunError: ``llama-completion --version`` failed, hung or printed no version (names it).
    """
    from lab.bench.peer.bench import probe_version

    if args.peer is None:
        if args.llama_cpp is not None:
            raise ValueError(f"--llama-cpp {args.llama_cpp!r} needs --peer llama.cpp")
        return None
    bins = locate(args.llama_cpp)
    target, draft = _gguf(args.model, "--model"), _gguf(draft_spec, "--draft")
    return PeerSetup(bins, target, draft, probe_version(bins))


def peer_for(setup: PeerSetup | None, tokenizer: Any, texts: Sequence[str], ids: Sequence[Any], *, threads: int,
             gammas: Sequence[int], max_new_tokens: int) -> ContextManager[Any]:
    """The :class:`lab.bench.peer.bench.LlamaCppPeer` for the prompts ``texts`` (user messages) and their
    loaded ``ids``, a context that closes the peer on leaving; without ``--peer`` (``setup`` None) a context
    that gives None.

    Each prompt's text is the lab's chat template rendered to text (``tokenize=False``)
    from the same messages it tokenized; llama.cpp tokenizes it with special tokens
    parsed, so both start from the same tokens (their counts are reported side by side).
    """
    from lab.bench.peer.bench import LlamaCppPeer
    from lab.models.chat import build_messages

    if setup is None:
        return nullcontext()
    prompts = {tuple(prompt_ids[0].tolist()): tokenizer.apply_chat_template(
        build_messages(text), add_generation_prompt=True, tokenize=False) for text, prompt_ids in zip(texts, ids)}
    ctx = max(t.shape[1] for t in ids) + max_new_tokens + max(gammas) + CTX_MARGIN
    return LlamaCppPeer(setup.bins, setup.target_gguf, setup.draft_gguf, prompts, threads=threads, gammas=gammas,
                        ctx_size=ctx, decode=lambda toks: tokenizer.decode(toks, skip_special_tokens=True),
                        version=setup.version)


__all__ = ["PEERS", "PeerSetup", "PeerUnavailableError", "add_peer_args", "check_peer_args", "peer_for"]
