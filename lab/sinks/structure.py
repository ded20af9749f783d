"""Which prompt positions the chat template fixes, and which the user typed.

A position is classified by where its token's characters come from in the text
the template renders, never by its token id alone:

* ``"content"`` -- overlaps the text of a message the caller passed (user or
  system). Text that *looks* like a template marker (a user typing
  ``<|im_start|>``) is content, even if it tokenizes to the marker's id.
* ``"system-default"`` -- a system prompt the template injects by itself when the
  caller gave none (SmolLM2 and Qwen2.5 do this).
* ``"template"`` -- everything else the template adds: BOS, turn markers, role
  names, newlines, the generation prompt. For a model without a chat template
  only the tokenizer's own special tokens (BOS) and the blank lines joining
  messages (see :func:`lab.models.loading.encode_chat`).

How: the template is rendered once with each message's content replaced by a
unique sentinel; the text between sentinels is the template's own. The real
rendering is then walked segment by segment (so a marker typed inside content
cannot be mistaken for the template's), the rendered text is tokenized with
character offsets, and the ids are checked to equal :func:`lab.models.loading.encode_chat`.
The injected system prompt is found by rendering once more with an explicit
(sentinel) system message and comparing the two prefixes.

``"template"`` and ``"system-default"`` positions together are the *structural*
positions: fixed by the template, independent of what the user wrote. A token
straddling a content boundary (a merge across it) counts as content.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from lab.models.chat import encode_chat

ROLE_TEMPLATE = "template"
ROLE_SYSTEM_DEFAULT = "system-default"
ROLE_CONTENT = "content"

# Private-use code points: no tokenizer maps them to a marker, no template edits them.
_SENTINEL = "\ue000{}\ue001"  # digits only: case filters leave it intact


@dataclass(frozen=True)
class PromptStructure:
    """A tokenized chat prompt with each position's origin.

    Attributes:
        input_ids: int64 ``[1, S]``, identical to :func:`lab.models.loading.encode_chat`.
        roles: ``S`` strings, one of ``"template"``, ``"system-default"``, ``"content"``.
        message_index: ``S`` ints: the message a content position belongs to, else -1.
        text: The rendered prompt text that was tokenized.
    """

    input_ids: torch.Tensor
    roles: tuple[str, ...]
    message_index: tuple[int, ...]
    text: str

    @property
    def structural(self) -> tuple[int, ...]:
        """Positions fixed by the template (roles ``template`` and ``system-default``)."""
        return tuple(i for i, r in enumerate(self.roles) if r != ROLE_CONTENT)

    @property
    def content_positions(self) -> tuple[int, ...]:
        return tuple(i for i, r in enumerate(self.roles) if r == ROLE_CONTENT)


def analyze_structure(tokenizer: Any, messages: Sequence[dict[str, str]], *,
                      add_generation_prompt: bool = True) -> PromptStructure:
    """Tokenize chat messages and classify every position as template, injected system or content.

    Args:
        tokenizer: A fast transformers tokenizer (character offsets are needed).
        messages: ``[{"role": ..., "content": ...}, ...]``, non-empty.
        add_generation_prompt: As in :func:`lab.models.loading.encode_chat`.

    Returns:
        :class:`PromptStructure`.

    Raises:
        ValueError: empty or malformed ``messages``; a tokenizer without offsets;
            a template that drops, reorders or rewrites message contents beyond
            whitespace trimming; re-tokenizing the rendered text differs from
            ``encode_chat``.
    """
    input_ids = encode_chat(tokenizer, messages, add_generation_prompt=add_generation_prompt)
    if getattr(tokenizer, "chat_template", None):
        text, spans, injected = _template_spans(tokenizer, messages, add_generation_prompt)
        add_special = False
    else:
        text, spans, injected = _plain_spans(messages)
        add_special = True
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"tokenizer {type(tokenizer).__name__} is not a fast tokenizer; character offsets are needed")
    enc = tokenizer(text, add_special_tokens=add_special, return_offsets_mapping=True)
    if list(enc["input_ids"]) != input_ids[0].tolist():
        raise ValueError("re-tokenizing the rendered chat template does not reproduce encode_chat's ids; "
                         "cannot attribute positions to the template")
    roles, owner = [], []
    for start, end in enc["offset_mapping"]:
        msg = next((i for i, (a, b) in spans.items() if start < b and end > a), -1)
        if msg >= 0:
            roles.append(ROLE_CONTENT)
        elif injected is not None and start < injected[1] and end > injected[0]:
            roles.append(ROLE_SYSTEM_DEFAULT)
        else:
            roles.append(ROLE_TEMPLATE)
        owner.append(msg)
    return PromptStructure(input_ids=input_ids, roles=tuple(roles), message_index=tuple(owner), text=text)


def _render(tokenizer: Any, messages: Sequence[dict[str, str]], add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=add_generation_prompt)


def _template_spans(tokenizer, messages, add_generation_prompt):
    """``(text, {message: (start, end)}, injected_span_or_None)`` for a chat template."""
    text = _render(tokenizer, messages, add_generation_prompt)
    sentinels = [_SENTINEL.format(i) for i in range(len(messages))]
    skeleton = _render(tokenizer, [{**m, "content": s} for m, s in zip(messages, sentinels)], add_generation_prompt)
    # 1. the template's own segments, and the order it places the contents in
    missing = [i for i, s in enumerate(sentinels) if s not in skeleton]
    if missing:
        raise ValueError(f"chat template drops or rewrites the content of messages[{missing[0]}]; "
                         "cannot attribute positions")
    order = sorted((skeleton.find(s), i) for i, s in enumerate(sentinels))
    segments, cursor = [], 0
    for at, i in order:
        segments.append(skeleton[cursor:at])
        cursor = at + len(sentinels[i])
    tail = skeleton[cursor:]
    # 2. walk the real rendering: segment, content, segment, ...
    spans: dict[int, tuple[int, int]] = {}
    pos = 0
    for seg, (_, i) in zip(segments, order):
        if not text.startswith(seg, pos):
            raise ValueError(f"chat template output differs from its skeleton before message {i}")
        pos += len(seg)
        content = messages[i]["content"]
        for candidate in (content, content.strip(), content.lstrip(), content.rstrip()):
            if text.startswith(candidate, pos):
                spans[i] = (pos, pos + len(candidate))
                pos += len(candidate)
                break
        else:
            raise ValueError(f"chat template rewrites the content of messages[{i}]; cannot locate it")
    if text[pos:] != tail:
        raise ValueError("chat template output differs from its skeleton after the last message")
    return text, spans, _injected_system(tokenizer, messages, skeleton, sentinels, order, add_generation_prompt)


def _injected_system(tokenizer, messages, skeleton, sentinels, order, add_generation_prompt):
    """Character span of a system prompt the template adds on its own, or None."""
    if not order or any(m.get("role") == "system" for m in messages):
        return None
    probe = _SENTINEL.format(len(messages))
    try:
        with_system = _render(tokenizer, [{"role": "system", "content": probe},
                                          *[{**m, "content": s} for m, s in zip(messages, sentinels)]],
                              add_generation_prompt)
    except Exception:  # a template that rejects system messages injects none we can locate
        return None
    first = sentinels[order[0][1]]
    if probe not in with_system or first not in with_system:
        return None
    before, after = with_system.split(probe, 1)
    between = after.split(first, 1)[0]
    prefix = skeleton[:order[0][0]]  # what precedes the first content without a system message
    if prefix.startswith(before) and prefix.endswith(between) and len(prefix) > len(before) + len(between):
        return (len(before), len(prefix) - len(between))
    return None


def _plain_spans(messages):
    """Spans for a model without a chat template: contents joined by blank lines (as encode_chat)."""
    spans, pos = {}, 0
    for i, m in enumerate(messages):
        spans[i] = (pos, pos + len(m["content"]))
        pos += len(m["content"]) + 2
    return "\n\n".join(m["content"] for m in messages), spans, None
