"""The conformance checks over an engine's server: the sampling law per setting, greedy equality, the same seed.

Each check sends its requests through an :class:`~lab.conform.client.EngineClient` and
compares what came back with a :class:`Reference`: an object that gives, for a prompt of
token ids, the next-token logits ``[V]`` (float32) of the same weights, and the chain the
engine declares. Here the reference is :class:`lab.conform.fake_server.FakeModel`; the
lab's own decode of a GGUF's weights comes later (docs/design.md, "Conformance").

* :func:`sampling_law_check`: per setting, the reference law of the declared chain
  (:func:`~lab.conform.chains.chain_probs`), n draws where n is what
  :func:`~lab.conform.stats.samples_for_power` prescribes for the stated distance ``tv``
  at ``alpha / m`` (Holm's first step, m testable settings), the law test of their counts,
  and Holm across the settings.
* :func:`greedy_check`: the engine's greedy tokens against the argmax of the reference's
  logits teacher-forced on those tokens, near-ties excused
  (:func:`~lab.conform.stats.greedy_check`), and the drawn tokens' reported logprobs
  against the reference's log-softmax (:func:`~lab.conform.stats.logprob_check`).
* :func:`seed_check`: the same request twice gives the same tokens and text.

**Verdicts** are :mod:`lab.verdicts`' words, each for the claim that the engine does what
it declares, judged against bars stated in advance (:func:`lab.verdicts.meets_bars`):
``supported`` when the bar is met (no Holm rejection at ``alpha`` with the planned power
against ``tv``; greedy tokens equal but for near-ties and logprobs within the tolerance;
equal texts), ``not supported`` when not, ``untestable`` with its reason where no n
decides (a greedy setting, or a law that keeps one token: no law on its support differs
from it; greedy equality tests those).

Shapes: V = vocabulary size, T = greedy steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from lab.conform.answers import EngineError
from lab.conform.chains import Chain, Settings, chain_probs
from lab.conform.client import EngineClient, derive_seed
from lab.conform.stats import (FamilyTest, GreedyCheck, LawTest, LogprobCheck, PowerPlan, greedy_check as greedy_test,
                               holm_family, law_test, logprob_check, samples_for_power)
from lab.safe_text import clipped
from lab.verdicts import INCONCLUSIVE, meets_bars, settled

GREEDY_SETTING = "greedy: the law is one token (greedy_check tests it)"
ONE_TOKEN_LAW = "the law keeps one token: no law on its support differs from it (greedy_check tests it)"


class Reference(Protocol):
    """What the checks compare an engine with: the same weights' logits and the declared chain."""

    chain: Chain

    def next_logits(self, prompt: Sequence[int]) -> np.ndarray:
        """float32 ``[V]`` next-token logits after ``prompt`` (token ids)."""


@dataclass(frozen=True)
class SettingLaw:
    """One setting's law test.

    Attributes:
        name: The setting as the declared chain applies it (:meth:`~lab.conform.chains.Chain.describe`).
        settings: The setting.
        plan: The samples it needed and what they buy; None when untestable.
        test: Its law test; None when untestable.
        adjusted_p: Its Holm-adjusted p-value; None when untestable.
        token_counts: ``(token id, times drawn)`` for each token drawn, ids ascending (the raw counts).
        verdict: :data:`lab.verdicts.SUPPORTED`, ``NOT_SUPPORTED`` or ``UNTESTABLE``.
        untestable: Why no n decides it (``""`` when testable).
    """

    name: str
    settings: Settings
    plan: PowerPlan | None
    test: LawTest | None
    adjusted_p: float | None
    token_counts: tuple[tuple[int, int], ...]
    verdict: str
    untestable: str = ""


@dataclass(frozen=True)
class LawCheck:
    """The sampling-law check of one prompt over several settings.

    Attributes:
        prompt: The prompt's token ids.
        chain: The declared chain's engine name.
        tv: The total-variation distance each setting is sized to detect.
        alpha: The family's level.
        power: The power each setting is sized for.
        seed: The run's seed (each setting's requests carry seeds derived from it).
        settings: One :class:`SettingLaw` per setting, in the order given.
        family: Holm across the testable settings; None when none is.
        verdict: The family's: ``not supported`` when any setting is rejected, ``untestable`` when none is testable.
        id_field: The answer field the token ids were read from (``""`` when nothing was drawn).
    """

    prompt: tuple[int, ...]
    chain: str
    tv: float
    alpha: float
    power: float
    seed: int
    settings: tuple[SettingLaw, ...]
    family: FamilyTest | None
    verdict: str
    id_field: str


@dataclass(frozen=True)
class GreedyResult:
    """Greedy tokens and their logprobs against the reference.

    Attributes:
        prompt: The prompt's token ids.
        token_ids: ``[T]`` the engine's greedy tokens.
        greedy: Their equality with the reference's argmax, near-ties excused.
        logprobs: Their reported logprobs against the reference's, nats.
        verdict: ``supported`` when both pass.
        id_field: The answer field the ids were read from.
    """

    prompt: tuple[int, ...]
    token_ids: tuple[int, ...]
    greedy: GreedyCheck
    logprobs: LogprobCheck
    verdict: str
    id_field: str


@dataclass(frozen=True)
class SeedCheck:
    """The same request, seed included, sent twice.

    Attributes:
        seed: The seed both requests carried.
        first_ids: ``[T]`` the first answer's tokens.
        second_ids: ``[T']`` the second's.
        first_text: The first answer's text.
        second_text: The second's.
        verdict: ``supported`` when tokens and text are the same.
    """

    seed: int
    first_ids: tuple[int, ...]
    second_ids: tuple[int, ...]
    first_text: str
    second_text: str
    verdict: str

    @property
    def same(self) -> bool:
        return self.first_ids == self.second_ids and self.first_text == self.second_text


def _check_ids(prompt) -> tuple[int, ...]:
    if isinstance(prompt, (str, bytes)) or not isinstance(prompt, Sequence) or not prompt or not all(
            isinstance(t, (int, np.integer)) and not isinstance(t, bool) and t >= 0 for t in prompt):
        raise ValueError(f"prompt={clipped(prompt, 60)} must be a non-empty sequence of token ids >= 0 "
                         "(the reference reads ids)")
    return tuple(int(t) for t in prompt)


def _check_level(value, name: str, low: float = 0.0, high: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value < high:
        raise ValueError(f"{name}={value!r} must be in ({low:g}, {high:g})")
    return float(value)


def _logits(reference: Reference, prompt: tuple[int, ...]) -> np.ndarray:
    x = np.asarray(reference.next_logits(prompt))
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"reference.next_logits must give a vector [V], V >= 2, got shape {x.shape}")
    return x.astype(np.float64)


def _in_vocabulary(client: EngineClient, ids: Sequence[int], vocab_size: int) -> None:
    """An id the reference has no logit for is the engine's fault (another model, another tokenizer)."""
    outside = [t for t in ids if t >= vocab_size]
    if outside:
        raise EngineError(f"{client.url}{client.endpoint}: answered token id {outside[0]}, outside the reference's "
                          f"vocabulary (V = {vocab_size}): is the server running the same model?")


def _same_chain(client: EngineClient, reference: Reference) -> None:
    if client.chain != reference.chain:
        raise ValueError(f"the client declares {client.chain} and the reference {reference.chain}: one chain is tested")


def sampling_law_check(client: EngineClient, reference: Reference, prompt: Sequence[int],
                       settings_list: Sequence[Settings], tv: float, alpha: float, seed: int,
                       power: float = 0.9) -> LawCheck:
    """Whether the engine draws the next token from its declared chain's law at each setting (module docstring).

    Each testable setting draws ``samples_for_power(law, tv, alpha / m, power).n`` tokens (m
    testable settings), setting i's requests seeded from ``derive_seed(seed, "law", i)``; its
    counts are law-tested against the reference law and the family is Holm-corrected at ``alpha``.

    Args:
        client: The engine's client; its chain must be the reference's.
        reference: The same weights' next-token logits and the declared chain.
        prompt: Token ids (the caller adds BOS where the model wants one).
        settings_list: The settings, each once.
        tv: Total-variation distance each setting is sized to detect, in (0, 0.5).
        alpha: The family's level, in (0, 1).
        seed: Any integer >= 0.
        power: Power against ``tv`` per setting, in (0, 1).

    Returns:
        A :class:`LawCheck`.

    Raises:
        ValueError: a bad prompt, level or seed; no settings or one twice; client and reference
            declaring different chains; ``tv`` too large for a law (:func:`~lab.conform.stats.least_favourable`)
            or too small to plan (:data:`~lab.conform.stats.MAX_SAMPLES`).
        EngineError: the server fails, or answers a token outside the reference's vocabulary.
    """
    prompt = _check_ids(prompt)
    tv, alpha, power = _check_level(tv, "tv", high=0.5), _check_level(alpha, "alpha"), _check_level(power, "power")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed={seed!r} must be an integer >= 0")
    _same_chain(client, reference)
    chain = reference.chain
    settings_list = tuple(settings_list)
    if not all(isinstance(s, Settings) for s in settings_list):
        raise ValueError("settings_list must hold lab.conform.chains.Settings")
    names = [chain.describe(s) for s in settings_list]
    if not names or len(set(names)) != len(names):
        raise ValueError(f"settings_list must hold at least one setting, each once, got {names}")
    logits = _logits(reference, prompt)
    # 1. the reference law of each setting, and which a law test can decide
    laws = [chain_probs(logits, chain, s) for s in settings_list]
    why = [GREEDY_SETTING if s.greedy else ONE_TOKEN_LAW if (law > 0).sum() < 2 else ""
           for s, law in zip(settings_list, laws)]
    m = sum(not reason for reason in why)
    # 2. draws at each testable setting's planned n, and their law tests
    plans, tests, counts, id_field = {}, {}, {}, ""
    for i, (s, law) in enumerate(zip(settings_list, laws)):
        if why[i]:
            continue
        plans[i] = samples_for_power(law, tv, alpha / m, power)
        draws = client.next_token_samples(prompt, s, plans[i].n, derive_seed(seed, "law", i))
        _in_vocabulary(client, draws.token_ids, law.size)
        counts[i] = np.bincount(np.asarray(draws.token_ids, dtype=np.int64), minlength=law.size)
        tests[i] = law_test(counts[i], law)
        id_field = draws.id_field
    # 3. Holm across the testable settings
    family = holm_family({names[i]: tests[i].p_value for i in tests}, alpha) if tests else None
    results = []
    for i, s in enumerate(settings_list):
        if why[i]:
            results.append(SettingLaw(names[i], s, None, None, None, (), settled(INCONCLUSIVE, why[i]), why[i]))
            continue
        adjusted = family.adjusted[family.names.index(names[i])]
        drawn = tuple((int(t), int(c)) for t, c in enumerate(counts[i]) if c)
        results.append(SettingLaw(names[i], s, plans[i], tests[i], adjusted, drawn,
                                  meets_bars(names[i] not in family.rejected)))
    verdict = settled(INCONCLUSIVE, "no setting is testable") if family is None else meets_bars(family.passed)
    return LawCheck(prompt, chain.engine, tv, alpha, power, seed, tuple(results), family, verdict, id_field)


def greedy_check(client: EngineClient, reference: Reference, prompt: Sequence[int], max_tokens: int,
                 tie_tol: float, logprob_tol: float) -> GreedyResult:
    """The engine's greedy tokens and their logprobs against the reference, teacher-forced on the engine's tokens.

    Row t of the reference is ``reference.next_logits(prompt + tokens[:t])``, so a divergence
    at an excused near-tie leaves the later steps comparable. The logprob compared at step t
    is the drawn token's log-softmax of the raw logits (the engine's, as it reports it before
    sampling; the reference's in float64).

    Args:
        client: The engine's client; its chain must be the reference's.
        reference: The same weights' logits and the declared chain.
        prompt: Token ids.
        max_tokens: Greedy steps asked for, >= 1 (the engine may stop earlier at end of text).
        tie_tol: Nats, >= 0: a token whose logit is within this of the largest is excused.
        logprob_tol: Nats, >= 0: the largest logprob difference that passes.

    Returns:
        A :class:`GreedyResult`.

    Raises:
        ValueError: a bad prompt, count or tolerance; different chains.
        EngineError: the server fails, or answers a token outside the reference's vocabulary.
    """
    prompt = _check_ids(prompt)
    _same_chain(client, reference)
    for name, tol in (("tie_tol", tie_tol), ("logprob_tol", logprob_tol)):
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not (math.isfinite(tol) and tol >= 0):
            raise ValueError(f"{name}={tol!r} must be a finite number of nats >= 0")
    completion = client.greedy(prompt, max_tokens, top_n=1)
    tokens = completion.token_ids
    _in_vocabulary(client, tokens, _logits(reference, prompt).size)
    rows = np.stack([_logits(reference, prompt + tokens[:t]) for t in range(len(tokens))])  # [T, V]
    log_norm = rows.max(axis=1) + np.log(np.exp(rows - rows.max(axis=1, keepdims=True)).sum(axis=1))  # [T]
    reference_logprobs = rows[np.arange(len(tokens)), tokens] - log_norm
    greedy = greedy_test(rows, np.asarray(tokens, dtype=np.int64), tie_tol)
    logprobs = logprob_check(reference_logprobs, np.asarray(completion.logprobs), logprob_tol)
    return GreedyResult(prompt, tokens, greedy, logprobs, meets_bars(greedy.passed and logprobs.passed),
                        completion.id_field)


def seed_check(client: EngineClient, prompt, settings: Settings, seed: int, max_tokens: int) -> SeedCheck:
    """Whether the same request, seed included, gives the same tokens and text twice (:meth:`EngineClient.same_seed`).

    Args:
        client: The engine's client.
        prompt: Text or token ids.
        settings: The sampling setting (a sampled one: greedy decides nothing about seeds).
        seed: Any integer >= 0.
        max_tokens: Tokens per run, >= 1.

    Returns:
        A :class:`SeedCheck`.

    Raises:
        ValueError: a bad prompt, seed or count.
        EngineError: the server fails.
    """
    runs = client.same_seed(prompt, settings, seed, max_tokens)
    return SeedCheck(runs.seed, runs.first.token_ids, runs.second.token_ids, runs.first.text, runs.second.text,
                     meets_bars(runs.same))
