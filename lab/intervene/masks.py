"""Where a twin's added text lies in its prompt, and the attention masks of the intervention's arms.

Positions (batch 1 throughout): a twin's prompt has S tokens; the added span ``[a, b)`` is the
tokens of its added text (a distractor or a neutral passage, with the blank line that joins it
to the question); the sequence every arm scores is the prompt followed by the continuation
up to its last token, N = S + T - 1 positions; the T *decode queries* are positions
S - 1 .. N - 1 (the query at S - 1 + t predicts continuation token t).

An arm other than the plain forward is an :class:`Intervention`: every query at a position
``>= first_query`` gets ``shift`` added to its attention logits onto the keys
``[key_start, key_end)``. A shift of 0 changes nothing (the ``empty`` arm: the machinery with
no effect), ``log(lambda)`` multiplies those keys' unnormalized attention weights by lambda
(a dose), ``-inf`` blocks them (stored as the dtype's minimum, transformers' convention for
eager masks, so no softmax sees ``-inf - (-inf)``). Keys always lie before every query of
the pass, so a query's own key stays visible and no row is ever fully blocked.

The arms (:data:`ARMS`):

* ``A0``: the plain forward (no intervention; :mod:`lab.intervene.score` runs it without a mask);
* ``empty``: decode queries, span keys, shift 0;
* ``A1``: decode queries cannot attend to span keys;
* ``L0.5`` / ``L0.25``: decode queries' logits onto span keys shifted by log(lambda) (:data:`LAMBDAS`);
* ``sink``: decode queries cannot attend to key 0, the attention sink (Xiao et al. 2023,
  StreamingLLM, arXiv:2309.17453): described (design version 1 had it as the positive control;
  the Qwen2.5 pair's decode barely needs it, see :mod:`lab.analysis.intervention`);
* ``C+``: decode queries cannot attend to the question, keys ``[b, S - 1)`` (everything after the
  added span but the last prompt token): a positive control that must move entropy, since the
  continuation scored is the model's own answer to that question;
* ``A2``: no query at or after ``b`` attends to span keys, so the question and the decode
  are blind to the added text: the twin becomes its clean prompt at the twin's positions.

Mask convention: as :func:`lab.stream.perplexity.model_attention_mask` (transformers 5.x
passes a 4D ``[1, 1, Q, K]`` mask through as-is; the eager path adds it to the scores;
Gemma 3's sliding layers get their own entry of a per-layer-type dict, intersected with the
model's window, measured in positions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from lab.analysis.intervention import ARMS, DOSE  # the arms are the design's, stated with its tests
from lab.attention_mask import model_attention_mask
from lab.models.chat import encode_chat
from lab.prompts import StudyPrompt

# The dose arms' lambdas, from the dose test's own table, so the shift applied and the lambda regressed on agree.
LAMBDAS = {arm: lam for arm, lam in DOSE if arm not in ("A0", "A1")}


@dataclass(frozen=True)
class AddedSpan:
    """Token positions ``[start, end)`` of the added text in a twin's prompt ids.

    Raises:
        ValueError: ``start < 1`` (position 0 is the template's first token, never added
            text, and the sink that the ``sink`` arm masks) or ``end <= start``.
    """

    start: int
    end: int

    def __post_init__(self) -> None:
        if not 1 <= self.start < self.end:
            raise ValueError(f"span=[{self.start}, {self.end}) must satisfy 1 <= start < end")

    def __len__(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Intervention:
    """Queries at positions ``>= first_query`` get ``shift`` added to their attention logits onto keys
    ``[key_start, key_end)``.

    Attributes:
        first_query: The first position fed again (the pass covers ``first_query .. N - 1``).
        key_start / key_end: The keys shifted, all before ``first_query``.
        shift: 0 (nothing), ``log(lambda)`` (a dose) or ``-inf`` (blocked), in logit units (nats).

    Raises:
        ValueError: keys not in ``[0, first_query)``, an empty key range, or a NaN or +inf shift.
    """

    first_query: int
    key_start: int
    key_end: int
    shift: float

    def __post_init__(self) -> None:
        if not 0 <= self.key_start < self.key_end <= self.first_query:
            raise ValueError(f"keys=[{self.key_start}, {self.key_end}) must be non-empty and before "
                             f"first_query={self.first_query}")
        if math.isnan(self.shift) or self.shift == math.inf:
            raise ValueError(f"shift={self.shift!r} must be finite or -inf")


def arm_intervention(arm: str, span: AddedSpan, n_prompt: int) -> Intervention:
    """The :class:`Intervention` of an arm of :data:`ARMS` other than ``A0``.

    Args:
        arm: ``"empty"``, ``"A1"``, ``"L0.5"``, ``"L0.25"``, ``"sink"``, ``"C+"`` or ``"A2"``.
        span: The twin's added span.
        n_prompt: S, the twin's prompt length; decode queries start at S - 1.

    Raises:
        ValueError: ``A0`` or an unknown arm, or a span that leaves no token between its end and the last
            prompt token (no question for C+ to mask).
    """
    if span.end >= n_prompt - 1:
        raise ValueError(f"span=[{span.start}, {span.end}) must end before the question, which ends at the last "
                         f"prompt token ({n_prompt - 1})")
    decode = n_prompt - 1
    if arm == "empty":
        return Intervention(decode, span.start, span.end, 0.0)
    if arm == "A1":
        return Intervention(decode, span.start, span.end, -math.inf)
    if arm in LAMBDAS:
        return Intervention(decode, span.start, span.end, math.log(LAMBDAS[arm]))
    if arm == "sink":
        return Intervention(decode, 0, 1, -math.inf)
    if arm == "C+":
        return Intervention(decode, span.end, decode, -math.inf)
    if arm == "A2":
        return Intervention(span.end, span.start, span.end, -math.inf)
    raise ValueError(f"arm={arm!r} has no mask; use one of {list(ARMS[1:])} (A0 is the plain forward)")


def check_eager(model: Any, which: str) -> None:
    """Refuse a model whose attention is not eager (the only path that adds a float mask and returns
    attention probabilities).

    Raises:
        ValueError: another attention implementation, naming ``which`` model.
    """
    impl = model.config._attn_implementation
    if impl != "eager":
        raise ValueError(f"the {which} model runs attn_implementation={impl!r}; the intervention needs 'eager' "
                         "(its masks shift attention logits and its mediator reads attention probabilities)")


def intervention_mask(model: Any, intervention: Intervention, n_keys: int) -> torch.Tensor | dict[str, torch.Tensor]:
    """The ``attention_mask`` of a pass of queries ``first_query .. n_keys - 1`` over keys ``0 .. n_keys - 1``.

    Causal (key position <= query position), with the intervention's shift added on its keys
    for every query of the pass, and, on a model with sliding layers, the window on those.

    Args:
        model: An eager transformers causal LM (Llama, Qwen2, Gemma 3 families).
        intervention: The arm's :class:`Intervention`.
        n_keys: N, the keys (cached plus fed) the pass attends over, > ``first_query``.

    Returns:
        An additive float mask ``[1, 1, Q, K]`` in the model's dtype on its device (0 attend,
        ``shift`` dosed, the dtype's minimum blocked), Q = N - ``first_query``, K = N; or for a
        model with sliding layers ``{"full_attention": ..., "sliding_attention": ...}``.

    Raises:
        ValueError: a non-eager model, ``n_keys <= first_query``, or an unsupported sliding set-up.
    """
    check_eager(model, "given")
    if n_keys <= intervention.first_query:
        raise ValueError(f"n_keys={n_keys} must exceed first_query={intervention.first_query}")
    query_pos = torch.arange(intervention.first_query, n_keys)  # [Q]
    key_pos = torch.arange(n_keys)  # [K]
    shifted = torch.zeros(query_pos.numel(), n_keys, dtype=torch.bool)  # [Q, K]
    shifted[:, intervention.key_start:intervention.key_end] = True
    blocked = intervention.shift == -math.inf
    causal = key_pos[None, :] <= query_pos[:, None]  # [Q, K]
    keep = causal & ~shifted if blocked else causal
    masks = model_attention_mask(model, keep, query_pos, key_pos)
    by_type = masks if isinstance(masks, dict) else {"": masks}
    out = {}
    for layer_type, mask in by_type.items():  # [1, 1, Q, K] each, 0 where attended
        if not blocked:  # the dose lands only where the key is attended at all
            mask = mask.masked_fill(shifted.to(mask.device) & (mask == 0), intervention.shift)
        assert bool((mask > torch.finfo(mask.dtype).min).any(-1).all()), "a query row is fully blocked"
        out[layer_type] = mask
    return out if isinstance(masks, dict) else out[""]


def twin_prompt_ids(tokenizer: Any, twin: StudyPrompt, clean: StudyPrompt) -> tuple[torch.Tensor, AddedSpan]:
    """A twin's prompt ids, rendered as the study renders them, and its added span.

    The twin's user message is its added text followed by its clean prompt's user message
    (in the prompt files the added text ends with a blank line). Both prompts are rendered
    with :func:`lab.models.chat.encode_chat` (the chat template, ``add_generation_prompt=True``,
    as ``lab study``); the span's characters are located in the twin's rendered text and
    mapped to tokens with a fast tokenizer's offsets. A token holding characters of the
    added text belongs to the span, a boundary token that also holds template or question
    characters included; so a boundary token makes the tokens outside the span differ from
    the clean prompt's, and the twin is refused rather than given a span that is not exactly
    its added text. Outside the span the twin's tokens equal the clean prompt's (checked),
    so masking the span (arm ``A2``) leaves the clean prompt at the twin's positions.

    Args:
        tokenizer: A fast transformers tokenizer (offset mapping).
        twin: A poisoned or neutral :class:`~lab.prompts.StudyPrompt` of ``clean``.
        clean: Its clean prompt.

    Returns:
        ``(ids, span)``: int64 ``[S]`` prompt ids on the CPU, and the :class:`AddedSpan`.

    Raises:
        ValueError: one line naming the twin's id: not a twin of ``clean``; its user message
            does not end with the clean one's or adds nothing; a slow tokenizer; its offsets
            do not reproduce the template's ids; or tokens outside the span differ from the
            clean prompt's.
    """
    where = f"prompt {twin.id!r}"
    if twin.twin_of != clean.id:
        raise ValueError(f"{where}: twin_of={twin.twin_of!r} does not name the clean prompt {clean.id!r}")
    content, question = twin.messages[-1]["content"], clean.messages[-1]["content"]
    n_added = len(content) - len(question)
    if not content.endswith(question) or not content[:n_added].strip():
        raise ValueError(f"{where}: its user message is not added text followed by the user message of {clean.id!r}")
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"{where}: locating the added text needs a fast tokenizer (offset mapping)")
    messages = [dict(m) for m in twin.messages]
    ids = encode_chat(tokenizer, messages)[0]  # [S]
    clean_ids = encode_chat(tokenizer, [dict(m) for m in clean.messages])[0]
    if getattr(tokenizer, "chat_template", None):  # encode_chat's two renderings, as text
        text, special = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False), False
    else:
        text, special = "\n\n".join(m["content"] for m in messages), True
    enc = tokenizer(text, add_special_tokens=special, return_offsets_mapping=True)
    if enc["input_ids"] != ids.tolist():
        raise ValueError(f"{where}: its rendered text tokenizes differently from the chat template's ids; "
                         "cannot locate the added text")
    first_char = text.rfind(content)  # the last user message: only the assistant header follows it
    if first_char < 0:
        raise ValueError(f"{where}: the chat template changes its user message's text; cannot locate the added text")
    end_char = first_char + n_added
    offsets = enc["offset_mapping"]
    start = next((i for i, (_, e) in enumerate(offsets) if e > first_char), len(offsets))
    end = next((i for i, (s, _) in enumerate(offsets) if s >= end_char and i >= start), len(offsets))
    if end <= start or start < 1:
        raise ValueError(f"{where}: the added text covers no token, or starts the prompt")
    outside = torch.cat([ids[:start], ids[end:]])
    if not torch.equal(outside, clean_ids):
        raise ValueError(f"{where}: its tokens outside the added text [{start}, {end}) differ from {clean.id!r}'s "
                         "(a token straddles the added text's boundary)")
    return ids, AddedSpan(start, end)
