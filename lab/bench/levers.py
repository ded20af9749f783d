"""The bench's speed levers beyond a fixed-gamma model draft.

Each lever is one more method in ``lab bench``'s alternating run, measured rather
than assumed:

* **dynamic draft length** (:class:`~lab.speculative.policies.DynamicGamma`): grow
  gamma after a fully accepted round, shrink it after a rejection;
* **a cheaper draft**: the same draft model cast to another dtype (bfloat16 halves
  the bytes a memory-bound draft step reads), or per pass shape
  (:mod:`lab.speculative.per_pass`, ``PREFILL:STEP`` such as ``float32:bfloat16``).
  Lossless: the float32 target still verifies every token, so only alpha and c
  move. Each cast draft also runs with every adaptive stop (``pmin:X``, llama.cpp's
  draft-confidence stop) at the largest gamma and with every dynamic policy, so the
  levers combine in the same alternating run;
* **prompt lookup** (:class:`~lab.speculative.drafts.PromptLookupDraft`): no draft
  model; shines when the answer copies the prompt, as in a code-editing prompt;
* **transformers' assisted generation at its own defaults** (``assistant_model``
  only: its draft length schedule and confidence stop as the library ships them).

:data:`CODE_PROMPTS` holds the code prompts the issue's targets are stated on,
the last one a code-editing prompt (the model rewrites a function it was given).
"""

from __future__ import annotations

import copy
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Callable, Iterator

import torch

from lab.bench.phases import FirstTokenClock
from lab.bench.results import BASELINE
from lab.speculative.drafts import Drafter, PromptLookupDraft
from lab.speculative.loop import speculative_generate
from lab.speculative.per_pass import pass_shapes, per_pass_draft
from lab.speculative.settings import SpeculativeSettings
from lab.speculative.policies import DynamicGamma

CODE_PROMPTS = (
    "Write a Python function that merges two sorted lists.",
    "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
    "Add type hints and a docstring to this function and keep its logic unchanged:\n\n"
    "def find_max(values):\n    best = values[0]\n    for v in values[1:]:\n        if v > best:\n"
    "            best = v\n    return best\n",
)


@contextmanager
def assistant_settings(assistant: Any, **settings: Any) -> Iterator[None]:
    """Set assisted-generation fields on the assistant's own generation config, then restore it.

    transformers 5.24's assisted generation reads ``num_assistant_tokens``,
    ``num_assistant_tokens_schedule`` and ``assistant_confidence_threshold`` from the
    *assistant model's* ``generation_config`` (``AssistedCandidateGenerator``);
    passed to ``generate()`` they are silently ignored and the library's defaults
    (20 tokens, confidence threshold 0.4) run instead. Restoring afterwards keeps a
    ``"heuristic"`` schedule, which writes its gamma back there, from leaking into
    the next method. ``assistant`` None (prompt lookup: transformers drafts from the
    prompt itself) sets nothing.
    """
    if assistant is None:
        assert not settings, f"assisted settings {settings} without an assistant model"
        yield
        return
    saved = copy.deepcopy(assistant.generation_config)
    try:
        for key, value in settings.items():
            setattr(assistant.generation_config, key, value)
        yield
    finally:
        assistant.generation_config = saved


def timed_speculative(name: str, target: Any, drafter: Drafter, ids: torch.Tensor, make_run: Callable[..., Any],
                      settings: SpeculativeSettings, *, generator: torch.Generator | None = None) -> Any:
    """One speculative generation as a bench ``Run``, with its first-token time and draft pass shapes.

    The first round's end (``on_round``) marks the first committed tokens
    (:mod:`lab.bench.phases`); the time runs from this call, so it includes the
    target's prefill and the draft's. ``settings`` and ``generator`` go to
    :func:`speculative_generate`. The draft's logged forwards
    (:attr:`~lab.speculative.drafts.DraftFacts.passes`) are grouped by shape, with a
    per-pass draft's cache casts beside them.
    """
    clock = FirstTokenClock()

    def on_round(record: Any, committed: Any, cache: Any) -> None:
        clock.first(record.n_accepted + (record.next_token is not None))

    r = speculative_generate(target, drafter, ids, settings, generator=generator, on_round=on_round)
    run = make_run(name, 0, 0, len(r.tokens), clock.elapsed(), r.decode_time_s, r.tokens, spec=r,
                   first_token_s=clock.first_token_s, n_first=clock.n_first)
    facts = drafter.facts()
    if facts.passes:
        run.draft_passes = pass_shapes(facts.passes)
        if facts.n_casts:
            run.draft_passes["cache cast"] = {"dtypes": [], "n": facts.n_casts, "tokens": 0,
                                              "time_s": facts.cast_time_s}
    return run


def timed_generate(name: str, target: Any, ids: torch.Tensor, make_run: Callable[..., Any], seeds: Any,
                   settings: AbstractContextManager[Any] | None = None, **generate_kwargs: Any) -> Any:
    """One transformers ``generate`` as a bench ``Run``: seeded from ``seeds`` (sampling mode), timed by a
    :class:`~lab.bench.phases.FirstTokenClock`, inside ``settings`` (:func:`assistant_settings` for assisted
    generation); ``generate_kwargs`` go to ``target.generate``."""
    seeds.seed_global()
    clock = FirstTokenClock()
    with torch.inference_mode(), settings or nullcontext():
        out = target.generate(ids, streamer=clock, **generate_kwargs)
    dt = clock.elapsed()
    toks = out[0, ids.shape[1]:].tolist()
    return make_run(name, 0, 0, len(toks), dt, None, toks, first_token_s=clock.first_token_s, n_first=clock.n_first)


def select_methods(methods: list[tuple[str, Any]], wanted: tuple[str, ...]) -> list[tuple[str, Any]]:
    """Keep the baseline and the methods whose name contains one of ``wanted`` (() = all).

    Raises:
        ValueError: a wanted name that matches no method (naming ``--methods`` and the choices).
    """
    if not wanted:
        return methods
    names = [n for n, _ in methods]
    missing = [w for w in wanted if not any(w in n for n in names)]
    if missing:
        raise ValueError(f"--methods {','.join(missing)!r} matches no method; the methods are: {'; '.join(names)}")
    return [(n, f) for n, f in methods if n == BASELINE or any(w in n for w in wanted)]


def lever_methods(target: Any, draft: Any, config: Any, *, eos: list[int], hf_kwargs: Callable[..., dict],
                  make_run: Callable[..., Any], seeds: Any) -> list[tuple[str, Callable[[torch.Tensor, int], Any]]]:
    """The lever methods ``config`` asks for, as ``(name, fn(ids, budget) -> Run)`` pairs.

    Args:
        target / draft: as in :func:`lab.bench.run.run_bench`.
        config: a :class:`lab.bench.run.BenchConfig` (``dynamic``,
            ``draft_dtypes``, ``prompt_lookup``, ``assisted``, ``gammas``).
        eos: end-of-sequence ids.
        hf_kwargs: ``(ids, eos) -> generate kwargs`` for transformers runs (the bench's filter).
        make_run: the bench's ``Run`` constructor.
        seeds: the bench's :class:`lab.bench.run.RunSeeds` (the current run's seed; sampling mode).
    """
    g_max = max(config.gammas)
    policies = [DynamicGamma.parse(s) for s in config.dynamic]
    methods: list[tuple[str, Callable[[torch.Tensor, int], Any]]] = []

    def spec(name: str, drafter: Any, gamma: int, policy: DynamicGamma | None, adaptive: str | None = None) -> None:
        def fn(ids: torch.Tensor, budget: int) -> Any:
            settings = SpeculativeSettings(max_new_tokens=budget, gamma=gamma, sampling=config.sampling,
                                           adaptive=adaptive, gamma_policy=policy, eos_token_ids=eos)
            return timed_speculative(name, target, drafter, ids, make_run, settings,
                                     generator=seeds.generator(ids.device))
        methods.append((name, fn))

    for p in policies:
        spec(f"speculative {p.describe()}", draft, p.max_gamma, p)
    for dtype in config.draft_dtypes:
        cast = per_pass_draft(draft, dtype)
        for g in (config.gammas if config.dtype_sweep else (g_max,)):  # every gamma when tuning
            spec(f"speculative gamma={g} draft={dtype}", cast, g, None)
        for p in policies:
            spec(f"speculative {p.describe()} draft={dtype}", cast, p.max_gamma, p)
        for a in config.adaptive:  # the levers combined: a cheaper draft with a confidence stop
            spec(f"speculative gamma={g_max} adaptive={a} draft={dtype}", cast, g_max, None, a)
            for p in policies:
                spec(f"speculative {p.describe()} adaptive={a} draft={dtype}", cast, p.max_gamma, p, a)
    facts = draft.facts()
    if config.prompt_lookup and facts.model is not None:  # a draft that runs no model is prompt lookup already
        lookup = PromptLookupDraft(int(target.config.vocab_size))
        spec(f"prompt-lookup gamma={g_max}", lookup, g_max, None)
        for p in policies:
            spec(f"prompt-lookup {p.describe()}", lookup, p.max_gamma, p)
    assistant = facts.assistant_model
    if config.assisted and assistant is not None:
        name = "transformers assisted (its defaults)"

        def assisted_defaults(ids: torch.Tensor, budget: int) -> Any:
            return timed_generate(name, target, ids, make_run, seeds, assistant_settings(assistant),  # restore after
                                  max_new_tokens=budget, assistant_model=assistant, **hf_kwargs(ids, eos))
        methods.append((name, assisted_defaults))
    return methods
