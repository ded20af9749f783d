"""A draft that runs each kind of forward pass in the dtype that is cheapest for it.

A model draft makes three shapes of forward pass:

* **prefill**: the whole prompt, once per sequence (hundreds of tokens: compute-bound);
* **catch-up**: the committed tokens the draft's cache lacks at the start of a round
  (1 or 2 in the speculative loop: the correction or bonus token, plus the last
  accepted draft token when the whole draft was kept);
* **step**: one token while drafting (memory-bound: it reads every weight once).

Which dtype is cheapest depends on the CPU. On an AVX2-only CPU bfloat16 halves the
bytes a step reads but makes a many-token pass several times slower (no native bf16
arithmetic); on a CPU with AMX-BF16 bfloat16 was measured faster on every shape
(README, "The bench"). :class:`PerPassDraft` holds the draft's weights in two dtypes
(``PREFILL:STEP``, e.g. ``float32:bfloat16``): passes of at least
:data:`LONG_PASS_TOKENS` tokens run in the prefill dtype, shorter ones in the step
dtype, and the KV cache is cast to the dtype of the pass about to read it.

Lossless whatever the dtypes: the draft only proposes; the target (in its own dtype)
verifies every token, so only alpha and the draft's cost c move (Leviathan et al.
2023: the output distribution does not depend on q).

The draft dtype vocabulary's names live in :mod:`lab.speculative.draft_dtypes` (no
torch, so the commands' help stays light); here they become torch dtypes
(:data:`DTYPES`) and specs are parsed (:func:`parse_draft_dtype`).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any, Sequence

import torch

from lab.decode import sync
from lab.speculative.draft_dtypes import DTYPE_NAMES, PER_PASS_ALIAS, PER_PASS_DEFAULT, PER_PASS_SPEC
from lab.speculative.drafts import DraftFacts, ModelDraft

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}  # the vocabulary's names as torch dtypes
# Passes of this many tokens or more run in the prefill dtype. The speculative loop's
# catch-ups feed at most 2 tokens and a prompt has more than 16 (the bench's shortest
# code prompt is ~40 with the chat template), so any value in 3..40 splits them alike;
# 16 keeps a longer catch-up (a streaming or evicting caller) on the prefill side.
LONG_PASS_TOKENS = 16


def parse_draft_dtype(spec: str) -> tuple[str, str]:
    """``"bfloat16"`` -> ``("bfloat16", "bfloat16")``; ``"float32:bfloat16"`` or ``"per-pass"`` -> per-pass dtypes.

    Args:
        spec: A name from :data:`DTYPES`, ``PREFILL:STEP`` of two such names, or :data:`PER_PASS_ALIAS`.

    Returns:
        ``(prefill_dtype, step_dtype)``, names from :data:`DTYPES`.

    Raises:
        ValueError: a name outside :data:`DTYPES`, or more than two parts (the message echoes ``spec``).
    """
    text = str(spec).strip()
    if text == PER_PASS_ALIAS:
        return PER_PASS_DEFAULT
    parts = text.split(":")
    if len(parts) > 2 or any(p not in DTYPES for p in parts):
        raise ValueError(f"--draft-dtype={spec!r} must be a dtype ({', '.join(DTYPES)}), PREFILL:STEP "
                         f"(e.g. {PER_PASS_SPEC}) or {PER_PASS_ALIAS!r}")
    return (parts[0], parts[-1])


def cast_cache(cache: Any, dtype: torch.dtype) -> int:
    """Cast every layer's keys and values of a transformers ``DynamicCache`` to ``dtype``, in place.

    The drafter owns its cache (house rule 7), so an in-place cast changes no one
    else's state. Keys and values are ``[B, H_kv, T, D]`` per layer; positions are
    kept exactly (a cast drops nothing: tested against a negative control).

    Returns:
        The number of layers cast (0 when the cache was empty or already ``dtype``).
    """
    n = 0
    for layer in cache.layers:
        if getattr(layer, "is_initialized", False) and layer.keys.dtype != dtype:
            layer.keys, layer.values = layer.keys.to(dtype), layer.values.to(dtype)
            n += 1
    return n


def cache_dtype(cache: Any) -> torch.dtype | None:
    """The dtype of the first initialized layer's keys, or None for an empty cache."""
    for layer in cache.layers:
        if getattr(layer, "is_initialized", False):
            return layer.keys.dtype
    return None


class PerPassDraft(ModelDraft):
    """A model draft with its weights in two dtypes: long passes in one, short passes in the other.

    Args:
        long_model: The draft in the prefill dtype (runs passes of >= ``long_pass_tokens``).
        step_model: The same draft in the step dtype (steps and short catch-ups).
        vocab_size / name: as :class:`~lab.speculative.drafts.ModelDraft`.
        long_pass_tokens: Threshold in tokens (>= 2); default :data:`LONG_PASS_TOKENS`.

    Attributes:
        cast_time_s: Seconds spent casting the KV cache since the last :meth:`reset`
            (also inside the round's draft time, since the cast happens in the forward).
        n_casts: Cache casts since the last :meth:`reset`.

    Raises:
        ValueError: ``long_pass_tokens`` < 2, or the two models' configs differ.
    """

    def __init__(self, long_model: Any, step_model: Any, vocab_size: int | None = None, name: str = "draft-model",
                 long_pass_tokens: int = LONG_PASS_TOKENS):
        if isinstance(long_pass_tokens, bool) or not isinstance(long_pass_tokens, int) or long_pass_tokens < 2:
            raise ValueError(f"long_pass_tokens={long_pass_tokens!r} must be an integer >= 2")
        shape_of = lambda m: (m.config.num_hidden_layers, m.config.hidden_size, m.config.vocab_size)  # noqa: E731
        if shape_of(long_model) != shape_of(step_model):
            raise ValueError("long_model and step_model must be the same draft (their configs differ)")
        self.long_model = long_model
        self.long_pass_tokens = long_pass_tokens
        super().__init__(step_model, vocab_size, name)

    def facts(self) -> DraftFacts:
        """As a model draft's, with the weight dtype as ``PREFILL:STEP`` and the cache casts."""
        facts = super().facts()
        if self.long_model is not self.model:
            long_dtype = str(next(self.long_model.parameters()).dtype).removeprefix("torch.")
            facts = dataclasses.replace(facts, weight_dtype=f"{long_dtype}:{facts.weight_dtype}")
        return dataclasses.replace(facts, n_casts=self.n_casts, cast_time_s=self.cast_time_s)

    def reset(self) -> None:
        super().reset()
        self.cast_time_s = 0.0
        self.n_casts = 0

    def _pass_model(self, n_tokens: int) -> Any:
        model = self.long_model if n_tokens >= self.long_pass_tokens else self.model
        held = cache_dtype(self.cache)
        if held is not None and held != model.dtype:  # the cache follows the pass that reads it
            t0 = time.perf_counter()
            self._cast(model.dtype)
            sync(self.device)
            self.cast_time_s += time.perf_counter() - t0
            self.n_casts += 1
        return model

    def _cast(self, dtype: torch.dtype) -> None:
        cast_cache(self.cache, dtype)


def per_pass_draft(draft: ModelDraft, spec: str) -> ModelDraft:
    """A copy of a model draft for a ``--draft-dtype`` spec (see :func:`parse_draft_dtype`).

    A single dtype gives a plain :class:`ModelDraft` cast to it (the cheaper-draft lever
    of ``lab bench``); ``PREFILL:STEP`` with two different dtypes gives a :class:`PerPassDraft`. The
    copies' probabilities stay float32 (the draft loop's ``sampling_probs``).

    Raises:
        ValueError: a bad spec, or ``draft`` is not a model draft.
    """
    prefill, step = parse_draft_dtype(spec)
    if not isinstance(draft, ModelDraft):
        raise ValueError(f"draft dtype={spec!r} needs a model draft, not {draft.name!r}")
    step_model = copy.deepcopy(draft.model).to(DTYPES[step])
    if prefill == step:
        cast = ModelDraft(step_model, draft.vocab_size, f"{draft.name} ({step})")
    else:
        same = next(draft.model.parameters()).dtype == DTYPES[prefill]
        long_model = draft.model if same else copy.deepcopy(draft.model).to(DTYPES[prefill])  # shared: read-only
        cast = PerPassDraft(long_model, step_model, draft.vocab_size, f"{draft.name} ({prefill}:{step})")
    cast.cost = draft.cost
    return cast


def pass_shapes(passes: Sequence[tuple[int, str, float]], long_pass_tokens: int = LONG_PASS_TOKENS) -> dict[str, Any]:
    """Group a draft's logged forwards (:attr:`~lab.speculative.drafts.DraftFacts.passes`) by shape.

    Args:
        passes: ``(tokens fed, weight dtype, seconds)`` per forward, in order; the first is the prefill.
        long_pass_tokens: Passes after the first with at least this many tokens count as ``"long catch-up"``.

    Returns:
        ``{shape: {"dtypes": sorted dtype names, "n": passes, "tokens": tokens fed, "time_s": seconds,
        "mean_s": seconds per pass}}`` for the shapes present: ``"prefill"``, ``"step"`` (1 token),
        ``"catch-up"`` (2 .. long_pass_tokens - 1 tokens) and ``"long catch-up"``.
    """
    rows = []
    for i, (n_tok, dtype, seconds) in enumerate(passes):
        shape = ("prefill" if i == 0 else "step" if n_tok == 1 else
                 "catch-up" if n_tok < long_pass_tokens else "long catch-up")
        rows.append({shape: {"dtypes": [dtype], "n": 1, "tokens": n_tok, "time_s": seconds}})
    return merge_pass_shapes(rows)


def merge_pass_shapes(groups: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum several :func:`pass_shapes` results (one per run) into one."""
    acc: dict[str, dict[str, Any]] = {}
    for g in groups:
        for shape, row in g.items():
            a = acc.setdefault(shape, {"dtypes": set(), "n": 0, "tokens": 0, "time_s": 0.0})
            a["dtypes"].update(row["dtypes"])
            for key in ("n", "tokens", "time_s"):
                a[key] += row[key]
    return {shape: dict(a, dtypes=sorted(a["dtypes"]), mean_s=a["time_s"] / a["n"]) for shape, a in acc.items()}
