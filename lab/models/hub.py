"""Is a Hugging Face hub model loadable here, decided in seconds, before transformers tries.

``from_pretrained`` on an unreachable hub retries with back-off (about 49 s and 32
warnings for one model here) before it fails. The lab decides first, cheaply:

1. a model already in the local hub cache (its ``config.json``) is loadable, and is
   then loaded with ``local_files_only`` so nothing is re-checked online;
2. with offline mode set (``HF_HUB_OFFLINE``), any other hub model is not;
3. otherwise one TCP connection to the hub endpoint (``HF_ENDPOINT``, default
   ``https://huggingface.co``) with a :data:`HUB_PROBE_TIMEOUT_S` timeout tells
   whether downloading can work at all.

The answer is a reason string (``None`` = go ahead), so callers raise their own error.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

# One connection attempt; a reachable hub answers a TCP handshake in well under a
# second, and an unreachable one should fail within a few seconds.
HUB_PROBE_TIMEOUT_S = 3.0


def offline() -> bool:
    """Whether offline mode is set (``HF_HUB_OFFLINE`` = 1/true/yes/on)."""
    return os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() in ("1", "true", "yes", "on")


def in_local_cache(repo_id: str) -> bool:
    """Whether the local hub cache holds the model's ``config.json`` (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # a malformed id is "not cached"; resolve_source names it properly
        return False
    return isinstance(found, str)


def endpoint() -> str:
    """The hub endpoint URL (``HF_ENDPOINT`` or the public hub)."""
    return os.environ.get("HF_ENDPOINT", "").strip() or "https://huggingface.co"


def unreachable_reason(timeout_s: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """``None`` if a TCP connection to the hub endpoint opens within ``timeout_s``, else why not."""
    url = urlparse(endpoint())
    host = url.hostname
    if not host:
        return f"HF_ENDPOINT={endpoint()!r} is not a URL"
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"the hub ({host}:{port}) is unreachable from this machine ({type(exc).__name__}: {exc})"


def unavailable_reason(repo_id: str) -> str | None:
    """Why hub model ``repo_id`` cannot be loaded here, or ``None`` if it can.

    Cached locally: loadable. Offline mode: not loadable. Otherwise the hub must
    answer one connection within :data:`HUB_PROBE_TIMEOUT_S` seconds.
    """
    if in_local_cache(repo_id):
        return None
    if offline():
        return "it is not in the local Hugging Face cache and HF_HUB_OFFLINE is set, so nothing is downloaded"
    return unreachable_reason()
