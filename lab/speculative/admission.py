"""Which drafts a target admits: same vocabulary (checked from metadata), cost stated.

Two checks, both before or without running the draft:

* **Vocabulary** (:func:`check_tokenizer_vocab`): speculative decoding compares p
  and q token by token, so the draft's vocabulary must be the target's. It is
  decided from the two tokenizers alone (the draft's tokenizer loads from its
  tokenizer files or GGUF header, :func:`lab.models.loading.load_tokenizer`), so a draft that
  cannot match is refused before its weights are dequantized or loaded.
* **Cost** (:func:`draft_cost`): a draft is useful only if a draft step is cheaper
  than a target step (Leviathan et al. 2023, Theorem 3.8: the speedup needs
  c = cost(draft) / cost(target) < 1). The cost ratio by FLOPs per token
  (:func:`lab.speculative.theory.flops_per_token`) is computed and reported; a draft
  with c >= 1 is admitted (it is a legitimate experiment, e.g. a 1.5B draft for a 3B
  target), with a note saying it cannot speed decoding up. Layer count is not the
  cost: SmolLM2-135M has 30 layers and is a fine draft for the 24-layer 1.7B.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from lab.speculative.theory import flops_per_token

logger = logging.getLogger(__name__)

# The context at which the per-token FLOP ratio is stated: a typical chat prompt plus
# a short answer. The ratio changes little with context for same-family pairs.
COST_CONTEXT_TOKENS = 256


@dataclass(frozen=True)
class DraftCost:
    """FLOPs per token of a draft against its target.

    Attributes:
        draft_flops / target_flops: forward FLOPs for one token at ``context`` cached positions.
        context: cached positions assumed.
        ratio: c = draft_flops / target_flops.
        note: ``None`` when c < 1, else a sentence for the report and the terminal.
    """

    draft_flops: float
    target_flops: float
    context: int
    ratio: float
    note: str | None


def draft_cost(target_config: Any, draft_config: Any, *, draft_layers: int | None = None,
               context: int = COST_CONTEXT_TOKENS) -> DraftCost | None:
    """The draft's FLOP cost ratio c against the target, with a note when c >= 1.

    Args:
        target_config / draft_config: transformers configs (Llama-style fields).
        draft_layers: count only this many draft layers (an early-exit draft).
        context: cached positions (>= 0) at which FLOPs are counted.

    Returns:
        A :class:`DraftCost`, or ``None`` when a config lacks the fields
        :func:`flops_per_token` needs (the cost is then unknown, not assumed).
    """
    try:
        d = flops_per_token(draft_config, context, draft_layers)
        t = flops_per_token(target_config, context)
    except ValueError:
        return None
    ratio = d / t
    note = None
    if ratio >= 1.0:
        note = (f"the draft costs {ratio:.2f}x the target's FLOPs per token (c >= 1), so speculative decoding "
                "cannot be faster than the target alone here (Leviathan et al. 2023, Thm 3.8); run anyway")
        logger.warning("%s", note)
    return DraftCost(draft_flops=d, target_flops=t, context=context, ratio=ratio, note=note)


def check_tokenizer_vocab(target_tokenizer: Any, draft_tokenizer: Any, draft_name: str = "draft") -> None:
    """Refuse a draft whose vocabulary (token string -> id) differs from the target's.

    Raises:
        ValueError: the vocabularies differ; the message names the draft, both sizes
            and the first token that differs.
    """
    tv, dv = target_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    if tv == dv:
        return
    diff = next((t for t in sorted(set(tv) | set(dv)) if tv.get(t) != dv.get(t)), None)
    raise ValueError(
        f"draft={draft_name!r} has a different vocabulary ({len(dv)} tokens) from the target's "
        f"({len(tv)} tokens; first difference: token {diff!r} is id {dv.get(diff)} in the draft, "
        f"{tv.get(diff)} in the target); speculative decoding needs the same vocabulary")
