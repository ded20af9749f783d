"""The context-measure validation items and their scoring on one model.

An item (one line of ``lab/data/context_selection.jsonl``, ``context_validation.jsonl`` or
``context_heldback.jsonl``, built by ``tools/datagen/make_context_validation.py``) is a
documented function with a question about it, its own docstring (``relevant``) and another
function's docstring of the same length within 5 % (``irrelevant``). Each context is asked
as one user message, ``context + blank line + question`` (the study twins' form), so the
context's token span is located exactly (:func:`lab.intervene.masks.twin_prompt_ids`).

Per prompt (:func:`score_prompt`): the model's greedy continuation, then the two reliance
measures (:func:`lab.health.reliance.context_reliance`) and, through a callable the command
binds, today's context health (the prefill measure), so all three go through the same
validation (:mod:`lab.health.context_validity`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

FIELDS = ("id", "package", "object", "question", "relevant", "irrelevant")
_SURROGATE = re.compile("[\ud800-\udfff]")  # a JSON \udXXX escape without its pair


@dataclass(frozen=True)
class ContextItem:
    """One validation item (see the module docstring); ``line`` is its 1-based line in the file."""

    id: str
    package: str
    object: str
    question: str
    relevant: str
    irrelevant: str
    line: int = 0


def load_items(path: str | Path, limit: int | None = None, *, flag: str | None = None) -> list[ContextItem]:
    """Read validation items from a JSON Lines file (split at ``\\n`` only); ``flag`` names the flag that named it
    in a refusal of the file (``--pairs``).

    Raises:
        ValueError: one line naming the file and line: refused by :func:`lab.files.read_text` (no such file,
            not a regular file, larger than :data:`lab.files.MAX_PROMPT_SET_BYTES`, not UTF-8), bad JSON (nested
            too deeply included), a missing or non-string field, a field holding a lone surrogate (no
            tokenizer encodes it), a relevant context equal to the irrelevant one (the pair cannot tell
            them apart), a duplicate id, or no item.
    """
    from lab.files import MAX_PROMPT_SET_BYTES, read_text
    from lab.prompts import jsonl_lines

    p = Path(path)
    items: list[ContextItem] = []
    seen: set[str] = set()
    for n, raw in enumerate(jsonl_lines(read_text(p, MAX_PROMPT_SET_BYTES, f"{flag} {p}" if flag else str(p))), 1):
        if not raw.strip():
            continue
        where = f"{p}:{n}"
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"{where}: not JSON ({exc})") from None
        except RecursionError:
            raise ValueError(f"{where}: not JSON (nested too deeply to read)") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{where}: expected a JSON object")
        for key in FIELDS:
            if not isinstance(obj.get(key), str) or not obj[key].strip():
                raise ValueError(f"{where}: field {key!r} must be a non-empty string")
            if _SURROGATE.search(obj[key]):
                raise ValueError(f"{where}: field {key!r} holds a lone surrogate ({_SURROGATE.search(obj[key])[0]!a}),"
                                 f" not text a tokenizer can encode")
        if obj["relevant"] == obj["irrelevant"]:
            raise ValueError(f"{where}: 'relevant' and 'irrelevant' are the same text; a pair needs two contexts")
        if obj["id"] in seen:
            raise ValueError(f"{where}: duplicate id {obj['id']!r}")
        seen.add(obj["id"])
        items.append(ContextItem(*(obj[k] for k in FIELDS), line=n))
    if not items:
        raise ValueError(f"{p}: no items")
    return items[:limit] if limit else items


@dataclass(frozen=True)
class PromptScores:
    """One prompt's measures: ``lookback`` in [0, 1], ``contrast_bits`` >= 0, ``gain_bits`` (the answer's
    log-probability gain), ``health`` on 0..10 (NaN if not measurable), ``n_context`` the context's tokens,
    ``n_prompt`` the prompt's, ``lookback_per_head`` ``[L][H]``."""

    lookback: float
    contrast_bits: float
    gain_bits: float
    health: float
    n_context: int
    n_prompt: int
    lookback_per_head: tuple[tuple[float, ...], ...] = ()


@dataclass(frozen=True)
class ItemScores:
    """Both prompts of one item."""

    id: str
    package: str
    relevant: PromptScores
    irrelevant: PromptScores

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready row: the id, package and each prompt's measures by ``relevant_*`` / ``irrelevant_*``."""
        out: dict[str, Any] = {"id": self.id, "package": self.package}
        for side in ("relevant", "irrelevant"):
            for key, value in vars(getattr(self, side)).items():
                out[f"{side}_{key}"] = value
        return out


def _prompts(context: str, question: str, item_id: str):
    """The clean prompt (the question alone) and its neutral twin (``context + blank line + question``)."""
    from lab.prompts import StudyPrompt

    clean = StudyPrompt(id=item_id or "q", category="summary", messages=({"role": "user", "content": question},))
    twin = StudyPrompt(id=f"{clean.id}-ctx", category="summary", variant="neutral", twin_of=clean.id,
                       messages=({"role": "user", "content": f"{context}\n\n{question}"},))
    return clean, twin


def prompt_ids(tokenizer: Any, context: str, question: str, item_id: str = "") -> tuple[tuple[Any, Any], Any, Any]:
    """``((ids, span), clean, twin)``: the prompt's int64 ``[S]`` ids and its context's token span
    (:func:`lab.intervene.masks.twin_prompt_ids`), and the two :class:`~lab.prompts.StudyPrompt` behind them.

    Raises:
        ValueError: the context's span cannot be located exactly (named by ``item_id``).
    """
    from lab.intervene.masks import twin_prompt_ids

    clean, twin = _prompts(context, question, item_id)
    return twin_prompt_ids(tokenizer, twin, clean), clean, twin


def check_items(tokenizer: Any, items: Sequence[ContextItem], source: str, new_tokens: int,
                context: int | None) -> None:
    """Refuse, before any pair is scored, a prompt that cannot be scored: its context's span not located
    exactly, or its tokens plus ``new_tokens`` past the model's ``context`` (None: not checked).

    Raises:
        ValueError: the first such prompt, naming ``source``, its line, its id, the side and the lengths.
    """
    for item in items:
        for side in ("relevant", "irrelevant"):
            where = f"{source}:{item.line}: pair {item.id!r} ({side} context)"
            try:
                (ids, _), _, _ = prompt_ids(tokenizer, getattr(item, side), item.question, item.id)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
            if context is not None and ids.numel() + new_tokens > context:
                raise ValueError(f"{where}: {ids.numel()} prompt tokens plus --new-tokens {new_tokens} pass the "
                                 f"model's context of {context}; shorten it or leave the pair out")


def score_prompt(model: Any, tokenizer: Any, eos: frozenset[int], context: str, question: str, n_tokens: int,
                 *, item_id: str = "", health: Callable[[list[dict[str, str]]], float] | None = None) -> PromptScores:
    """Greedy continuation of ``context + blank line + question``, then its reliance measures and health.

    ``health`` maps the prompt's chat messages to today's context health (in the lab,
    :func:`lab.health.graded.graded_health` of :func:`lab.sinks.prefill.analyze_prefill` bound to the
    model, as ``lab calibrate-health`` binds it); ``None`` records NaN.

    Raises:
        ValueError: the context's span cannot be located (named by ``item_id``), the prompt beyond the
            model's context, or a continuation shorter than 2 tokens.
    """
    import torch

    from lab.health.reliance import context_reliance
    from lab.intervene.score import greedy_continuation
    from lab.models.chat import encode_chat

    with torch.inference_mode():
        (ids, span), clean, twin = prompt_ids(tokenizer, context, question, item_id)
        question_ids = encode_chat(tokenizer, [dict(m) for m in clean.messages])[0]
        continuation = greedy_continuation(model, ids, n_tokens, eos)
        if continuation.numel() < 2:  # an answer that ends at once: its first two tokens, EOS not stopping it
            continuation = greedy_continuation(model, ids, 2)
        rel = context_reliance(model, ids, span, question_ids, continuation)
    value = math.nan if health is None else float(health([dict(twin.messages[0])]))
    return PromptScores(lookback=rel.lookback_ratio, contrast_bits=rel.contrast_bits, gain_bits=rel.gain_bits,
                        health=value, n_context=len(span), n_prompt=int(ids.numel()),
                        lookback_per_head=rel.lookback_per_head)


def score_items(model: Any, tokenizer: Any, eos: frozenset[int], items: Sequence[ContextItem], n_tokens: int, *,
                health: Callable[[list[dict[str, str]]], float] | None = None,
                progress: Callable[[int, int, str], None] | None = None) -> list[ItemScores]:
    """:func:`score_prompt` on both contexts of every item, in order; ``progress(i, n, id)`` before each."""
    out = []
    for i, item in enumerate(items):
        if progress is not None:
            progress(i, len(items), item.id)
        sides = [score_prompt(model, tokenizer, eos, ctx, item.question, n_tokens, item_id=item.id,
                              health=health) for ctx in (item.relevant, item.irrelevant)]
        out.append(ItemScores(item.id, item.package, *sides))
    return out


def twin_lookback(model: Any, tokenizer: Any, eos: frozenset[int], twin: Any, clean: Any, reference: Any,
                  n_tokens: int) -> tuple[float, int]:
    """The fitted context measure of a study twin, its added text as the context span: ``(value, span tokens)``.

    Scored as a validation prompt is (:func:`score_prompt`): the twin's ``n_tokens`` greedy continuation
    and the teacher-forced pass that reads the per-head lookback ratios, both with eager attention
    (switched on for the call, :func:`lab.health.reliance.eager_attention`), then
    :meth:`lab.health.context_validity.HeadReference.score`.

    Args:
        model, tokenizer: The study's target and its fast tokenizer.
        eos: Ids that end the continuation.
        twin, clean: A poisoned or neutral :class:`~lab.prompts.StudyPrompt` and its clean prompt.
        reference: The model's :class:`~lab.health.context_validity.HeadReference`.
        n_tokens: The continuation's budget (the validation's ``--new-tokens``).

    Raises:
        ValueError: the added text's span cannot be located exactly (named by the twin's id), or a kept
            head outside the model.
    """
    import torch

    from lab.health.reliance import eager_attention, lookback_per_head
    from lab.intervene.masks import twin_prompt_ids
    from lab.intervene.score import greedy_continuation

    ids, span = twin_prompt_ids(tokenizer, twin, clean)
    with torch.inference_mode(), eager_attention(model):
        continuation = greedy_continuation(model, ids, n_tokens, eos)
        if continuation.numel() < 2:  # an answer that ends at once: its first two tokens, as score_prompt
            continuation = greedy_continuation(model, ids, 2)
        per_head = lookback_per_head(model, ids, span, continuation)
    return reference.score(per_head, len(span)), len(span)


@dataclass(frozen=True)
class ContextReading:
    """The context measure of one prompt a user gave with ``--context`` (``lab sinks``, ``lab entropy``); shown by
    :mod:`lab.render.context` and the report's page.

    Attributes:
        value: ``lookback_heads`` of the prompt (higher = the decode reads the context more, for its length);
            None when the model has no fitted measure.
        n_context: Tokens of the context span.
        record: :func:`lab.health.context_validity.context_measure_record` of the model: the file, each saved
            verdict's line and ``unmeasurable`` (why the value may not be read as the context; None: it passed).
    """

    value: float | None
    n_context: int
    record: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "n_context": self.n_context, **self.record}


def with_context(messages: Sequence[dict[str, str]], context: str) -> list[dict[str, str]]:
    """``messages`` with ``context`` and a blank line before the last user message's text (the study twins' and
    the validation pairs' form, the one the measure was validated on)."""
    out = [dict(m) for m in messages]
    last = max(i for i, m in enumerate(out) if m["role"] == "user")
    out[last]["content"] = f"{context}\n\n{out[last]['content']}"
    return out


def read_context(model: Any, tokenizer: Any, profile: str, messages: Sequence[dict[str, str]],
                 context: str, n_tokens: int = 24) -> ContextReading:
    """The context measure of ``context`` before the question ``messages`` (:func:`with_context`), read with the
    model's fitted measure (:func:`lab.health.context_validity.load_context_measure`) as a study twin's is
    (:func:`twin_lookback`), with the measure's validity record beside it.

    Raises:
        ValueError: the context's span cannot be located exactly, or a kept head outside the model.
        FileSchemaError: the measure's file is bad.
    """
    from lab.health.context_validity import context_measure_record, load_context_measure
    from lab.intervene.masks import twin_prompt_ids
    from lab.models.chat import eos_token_ids
    from lab.models.profiles import PROFILES
    from lab.prompts import StudyPrompt

    clean = StudyPrompt(id="prompt", category="summary", messages=tuple(dict(m) for m in messages))
    twin = StudyPrompt(id="prompt-with-context", category="summary", variant="neutral", twin_of="prompt",
                       messages=tuple(with_context(messages, context)))
    record = context_measure_record(profile)
    found = load_context_measure(profile) if profile in PROFILES else None
    if found is None:
        _, span = twin_prompt_ids(tokenizer, twin, clean)  # the span is still checked and counted
        return ContextReading(value=None, n_context=len(span), record=record)
    eos = frozenset(eos_token_ids(model, tokenizer))
    value, n_context = twin_lookback(model, tokenizer, eos, twin, clean, found.reference, n_tokens)
    return ContextReading(value=value, n_context=n_context, record=record)
