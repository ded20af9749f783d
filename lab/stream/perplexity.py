"""Per-token NLL of a text under each retention policy: one masked forward per policy.

Instead of streaming token by token with an evicting cache, the whole text goes
through the model once with the policy's attention mask (query q sees exactly the
keys :func:`lab.stream.policies.policy_visibility` allows). That is the same
computation: in streaming, the key/value of position k is computed when k is fed,
from what k could see then, and later queries see it only while the policy keeps
it; RoPE is applied at the text's own positions, so dropping a cache entry equals
masking it (tested against a token-by-token evicting cache in the unit tier).

The policy's keep-mask reaches the model through
:func:`lab.attention_mask.model_attention_mask` (bool for SDPA, additive for eager; Gemma 3's
sliding layers get the policy AND their own window).

``recompute:W`` (the paper's oracle): token t is scored by a fresh forward over
tokens ``[t - W, t)`` at their own positions, logits of the last one only; windows
are batched. It costs about W forwards per scored token, so it scores a regular
sample of the targets (``every``-th), stated in the report.

Memory: logits are never held for the whole text (``[S, V]`` float32 is 800 MB at
S = 4,096 and V = 49,152): the head runs over chunks of the final hidden states.
The policy mask is boolean ``[S, S]`` (16 MB at 4,096), shared by every layer.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from lab.attention_mask import model_attention_mask
from lab.stream.policies import Policy, policy_visibility

# Rows of the LM head computed at once: [HEAD_CHUNK, V] float32 is 100 MB at V = 49,152.
HEAD_CHUNK = 512


def context_length(model: Any) -> int:
    """The model's context (``max_position_embeddings``)."""
    return int(getattr(model.config, "max_position_embeddings"))


def check_fits(model: Any, n_tokens: int, what: str = "the text") -> None:
    """Refuse a text longer than the model's context (positions stay the text's own).

    Raises:
        ValueError: ``n_tokens`` exceeds the context, naming its length.
    """
    ctx = context_length(model)
    if n_tokens > ctx:
        raise ValueError(f"{what}: {n_tokens} tokens is more than the model's context of {ctx} positions; "
                         "positions stay the text's own, so the text must fit (cut it with --tokens)")


def _logits(model: Any, hidden: torch.Tensor) -> torch.Tensor:
    """The LM head (with the model's final soft-capping, if any) on hidden states ``[..., D]``."""
    logits = model.lm_head(hidden).float()
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


def _nll_from_hidden(model: Any, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """NLL in nats, float32 ``[N]``, of ``targets`` ``[N]`` given hidden states ``[N, D]``, head in chunks."""
    out = []
    for i in range(0, targets.numel(), HEAD_CHUNK):
        logits = _logits(model, hidden[i:i + HEAD_CHUNK])  # [c, V]
        out.append(F.cross_entropy(logits, targets[i:i + HEAD_CHUNK].to(logits.device), reduction="none"))
    return torch.cat(out).cpu() if out else torch.zeros(0)


@torch.no_grad()
def masked_nll(model: Any, input_ids: torch.Tensor, policy: Policy,
               detected: tuple[int, ...] | None = None) -> torch.Tensor:
    """Per-token NLL under a policy, in one forward pass with the policy's mask.

    Args:
        model: A transformers causal LM (batch 1).
        input_ids: int64 ``[1, S]``, S within the model's context.
        policy: Any policy but ``recompute`` (see :func:`recompute_nll`).
        detected: Ranked detector positions, for ``detected`` policies.

    Returns:
        Float32 ``[S - 1]`` in nats: entry ``t - 1`` is ``-log p(x_t | keys visible to query t - 1)``.

    Raises:
        ValueError: a ``recompute`` policy, a bad shape, a text longer than the context,
            or an unsupported attention set-up.
    """
    if policy.kind == "recompute":
        raise ValueError("recompute policies are scored by recompute_nll, not by a mask")
    if input_ids.dim() != 2 or input_ids.shape[0] != 1 or input_ids.shape[1] < 2:
        raise ValueError(f"input_ids must be [1, S] with S >= 2, got {tuple(input_ids.shape)}")
    s = input_ids.shape[1]
    check_fits(model, s)
    device = next(model.parameters()).device
    pos = torch.arange(s)
    keep = policy_visibility(policy, pos, pos, detected)  # [S, S] bool
    mask = model_attention_mask(model, keep, pos, pos)
    hidden = model.model(input_ids=input_ids.to(device), attention_mask=mask,
                         position_ids=pos[None].to(device), use_cache=False).last_hidden_state[0]  # [S, D]
    return _nll_from_hidden(model, hidden[:-1], input_ids[0, 1:])


@torch.no_grad()
def recompute_nll(model: Any, input_ids: torch.Tensor, window: int, targets: torch.Tensor, *,
                  batch_size: int = 16) -> torch.Tensor:
    """``recompute:W``: each target scored by a fresh forward over its last W tokens.

    Args:
        model: A transformers causal LM.
        input_ids: int64 ``[1, S]``.
        window: W >= 1 tokens of context per target.
        targets: int64 ``[N]`` target positions t in ``[1, S)``.
        batch_size: Windows per forward (each ``[W]`` tokens at their own positions).

    Returns:
        Float32 ``[N]`` NLL in nats of ``x_t`` given ``x_{max(0, t-W) .. t-1}``.

    Raises:
        ValueError: bad window, batch size or target positions.
    """
    s = input_ids.shape[1]
    if window < 1 or batch_size < 1:
        raise ValueError(f"window={window} and batch_size={batch_size} must be >= 1")
    if targets.numel() and (int(targets.min()) < 1 or int(targets.max()) >= s):
        raise ValueError(f"targets must lie in [1, {s}), got [{int(targets.min())}, {int(targets.max())}]")
    check_fits(model, s)
    device = next(model.parameters()).device
    ids = input_ids[0]
    out = torch.empty(targets.numel(), dtype=torch.float32)
    # Targets with fewer than W tokens before them use a shorter window; group by length.
    lengths = torch.clamp(targets, max=window)
    for length in torch.unique(lengths).tolist():
        idx = torch.nonzero(lengths == length).flatten()
        for i in range(0, idx.numel(), batch_size):
            sel = idx[i:i + batch_size]
            starts = targets[sel] - length  # [b]
            offs = starts[:, None] + torch.arange(length)[None]  # [b, length] positions
            hidden = model.model(input_ids=ids[offs].to(device), position_ids=offs.to(device),
                                 use_cache=False).last_hidden_state[:, -1]  # [b, D]
            out[sel] = _nll_from_hidden(model, hidden, ids[targets[sel]])
    return out


def recompute_targets(n_tokens: int, start: int, every: int) -> torch.Tensor:
    """The targets ``recompute`` scores: ``start, start + every, ...`` below ``n_tokens``, int64."""
    if every < 1:
        raise ValueError(f"every={every} must be >= 1")
    return torch.arange(max(start, 1), n_tokens, every)


def perplexity(nll: torch.Tensor) -> float:
    """exp(mean NLL in nats); NaN entries are ignored."""
    x = nll[~torch.isnan(nll)]
    return math.exp(float(x.double().mean())) if x.numel() else float("nan")
