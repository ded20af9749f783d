"""KV-cache retention policies as pure visibility functions (StreamingLLM).

Reference: Xiao, Tian, Chen, Han & Lewis 2023, "Efficient Streaming Language Models
with Attention Sinks" (arXiv:2309.17453), Section 3 and Table 1. A policy says, for
each query position q, which key positions k its attention may see. Positions are
the text's own (0-based token indices); nothing is re-numbered, which is valid while
the text fits the model's context (callers check).

Policies (``spec`` as typed on the command line):

* ``dense``: every earlier key, ``k <= q``.
* ``window:W``: the W most recent keys, the query itself included:
  ``q - W < k <= q``. Budget W.
* ``sinks:K+W``: the first K positions plus the W most recent. Budget K + W.
* ``detected:K+W`` (``detected:W`` means ``detected:4+W``): the positions the
  lab's sink detector flags on the text's first chunk (at most K, highest z
  first), plus the most recent keys, the same total budget as ``sinks:K+W``:
  when the detector flags n < K positions, the window gets the K - n spare slots.
* ``recompute:W``: sliding window with re-computation: each token is scored by a
  fresh forward over its last W tokens (the paper's quality oracle). Its
  visibility is the window's; what differs is that the kept keys are recomputed
  from the window alone (see :mod:`lab.stream.perplexity`).

The budget is the most keys one query sees. Shapes: ``Q`` queries, ``K`` keys.

``lab stream --help`` reads :data:`DEFAULT_POLICIES` from here, so the module imports torch only
inside the two functions that build tensors (:func:`kept_positions`, :func:`visibility`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lab.ranges import TOKENS
from lab.safe_text import clipped

if TYPE_CHECKING:
    import torch

KINDS = ("dense", "window", "sinks", "detected", "recompute")
# What `lab stream` compares by default: rows 0+W, 1+W and 4+W of StreamingLLM's Table 1, the
# detector's pick at the 4+W budget, and the recompute oracle at that budget (W = 252 + 4 = 256).
DEFAULT_POLICIES = "dense,window:252,sinks:1+252,sinks:4+252,detected:4+252,recompute:256"
# `detected:W` keeps as many detected positions as the paper's main setting keeps sinks.
DEFAULT_DETECTED_KEEP = 4

_SPEC = re.compile(r"^(dense)$|^(window|recompute):(\d+)$|^(sinks|detected):(?:(\d+)\+)?(\d+)$")


@dataclass(frozen=True)
class Policy:
    """A parsed retention policy.

    Attributes:
        spec: The canonical spec (``"sinks:4+252"``).
        kind: One of :data:`KINDS`.
        window: W, the most recent keys kept (None for ``dense``).
        n_keep: K, the positions kept besides the window (sinks or detected), else 0.
    """

    spec: str
    kind: str
    window: int | None = None
    n_keep: int = 0

    @property
    def budget(self) -> int | None:
        """Keys visible per query at most (None: unbounded, ``dense``)."""
        return None if self.window is None else self.window + self.n_keep

    @property
    def evicts(self) -> bool:
        return self.kind != "dense"


def _tokens(digits: str, spec: str, what: str) -> int:
    """A policy's K or W: at most the longest length :data:`lab.ranges.TOKENS` takes, checked on the digits
    first (Python refuses to convert an int string of more than 4,300 digits)."""
    most = TOKENS.input_hi
    if len(digits) > len(str(most)) or int(digits) > most:
        raise ValueError(f"policy {clipped(spec)}: {what} must be at most {most}{TOKENS.why}")
    return int(digits)


def parse_policy(spec: str) -> Policy:
    """Parse ``dense``, ``window:W``, ``sinks:K+W``, ``detected:[K+]W`` or ``recompute:W``.

    Raises:
        ValueError: any other form, W < 1, K < 1 for sinks/detected, or K or W above
            the longest length :data:`lab.ranges.TOKENS` takes (the message echoes ``spec``, cut
            when long).
    """
    m = _SPEC.match(str(spec).strip())
    if not m:
        raise ValueError(f"policy {clipped(spec)} is not one of dense, window:W, sinks:K+W, detected:K+W, recompute:W")
    if m.group(1):
        return Policy("dense", "dense")
    if m.group(2):
        w = _tokens(m.group(3), spec, "the window W")
        if w < TOKENS.lo:
            raise ValueError(f"policy {spec!r}: the window W must be >= {TOKENS.lo}")
        return Policy(f"{m.group(2)}:{w}", m.group(2), window=w)
    kind, k, w = m.group(4), m.group(5), _tokens(m.group(6), spec, "the window W")
    k = DEFAULT_DETECTED_KEEP if k is None and kind == "detected" else k
    if k is None:
        raise ValueError(f"policy {spec!r}: sinks needs K+W, e.g. sinks:4+252")
    k = _tokens(k, spec, "K") if isinstance(k, str) else k
    if k < TOKENS.lo or w < TOKENS.lo:
        raise ValueError(f"policy {spec!r}: K and W must both be >= {TOKENS.lo}")
    return Policy(f"{kind}:{k}+{w}", kind, window=w, n_keep=k)


def parse_policies(text: str) -> tuple[Policy, ...]:
    """Parse a comma-separated list; duplicates are refused.

    Raises:
        ValueError: an empty list, a bad spec, or the same policy twice.
    """
    specs = [s.strip() for s in str(text).split(",") if s.strip()]
    if not specs:
        raise ValueError(f"--policies={text!r} names no policy")
    policies = tuple(parse_policy(s) for s in specs)
    seen = [p.spec for p in policies]
    dup = sorted({s for s in seen if seen.count(s) > 1})
    if dup:
        raise ValueError(f"--policies={text!r} names {dup[0]} twice")
    return policies


def kept_positions(policy: Policy, detected: tuple[int, ...] | None = None) -> torch.Tensor:
    """Positions a policy keeps besides its window, int64 ``[n_keep]`` (empty for others).

    Args:
        policy: The policy.
        detected: For ``detected``, the flagged positions ranked best first; at most
            the first ``policy.n_keep`` are kept (None or empty: none flagged).
    """
    import torch

    if policy.kind == "sinks":
        return torch.arange(policy.n_keep)
    if policy.kind == "detected" and detected:
        return torch.tensor(sorted(detected[: policy.n_keep]), dtype=torch.long)
    return torch.zeros(0, dtype=torch.long)


def policy_window(policy: Policy, detected: tuple[int, ...] | None = None) -> int | None:
    """The window W a policy applies; a ``detected`` policy adds the slots its detector left unused."""
    if policy.kind == "detected":
        return policy.window + policy.n_keep - int(kept_positions(policy, detected).numel())
    return policy.window


def visibility(query_pos: torch.Tensor, key_pos: torch.Tensor, window: int | None,
               keep: torch.Tensor | None = None) -> torch.Tensor:
    """Which keys each query may see: causal, and in the window or kept.

    ``visible[i, j] = key_pos[j] <= query_pos[i] and
    (window is None or query_pos[i] - key_pos[j] < window or key_pos[j] in keep)``.

    Args:
        query_pos: int64 ``[Q]`` positions of the queries.
        key_pos: int64 ``[K]`` positions of the keys (any order, e.g. a pruned cache's).
        window: W (None: no window, i.e. dense).
        keep: int64 ``[n]`` positions always visible to later queries (sinks).

    Returns:
        Bool ``[Q, K]`` keep-mask (True = the query may attend to the key).
    """
    import torch

    q = query_pos.reshape(-1, 1)  # [Q, 1]
    k = key_pos.reshape(1, -1)  # [1, K]
    causal = k <= q
    if window is None:
        return causal
    recent = (q - k) < window
    if keep is not None and keep.numel():
        recent = recent | torch.isin(k, keep.to(k.device))
    return causal & recent


def policy_visibility(policy: Policy, query_pos: torch.Tensor, key_pos: torch.Tensor,
                      detected: tuple[int, ...] | None = None) -> torch.Tensor:
    """:func:`visibility` for a :class:`Policy`; bool ``[Q, K]`` (see there)."""
    return visibility(query_pos, key_pos, policy_window(policy, detected), kept_positions(policy, detected))


def rank_detected(z: torch.Tensor, observed: torch.Tensor, flagged: torch.Tensor) -> tuple[int, ...]:
    """The flagged positions for ``detected``, highest z first.

    Unflagged positions are never ranked: the highest z below the threshold sit in
    the chunk's last few dozen positions (seen by few queries, inflated by recency),
    not at sinks; a policy's spare slots go to its window instead.

    Args:
        z: Float ``[S]`` robust z of received attention (``lab.sinks.prefill.score_positions``).
        observed: Bool ``[S]``: observed by enough queries to be judged.
        flagged: Bool ``[S]``: the detector's sink flags.

    Returns:
        Flagged, observed positions, best first.
    """
    order = sorted((i for i in range(z.numel()) if bool(observed[i]) and bool(flagged[i])),
                   key=lambda i: (-float(z[i]), i))
    return tuple(order)
