"""The lab's default draft: per round, no draft, prompt lookup or the draft model, by the costs measured as it runs.

Speculative decoding pays only when a round's expected tokens outweigh its cost. On a CPU the
verify pass over gamma + 1 positions is not free (on llama.cpp's kernels on 2 cores a pass of
m positions costs about 1 + 0.6 (m - 1) target steps) and a 0.5B draft costs 0.6 of a 1.5B
target's step, so a fixed set-up loses on new text, while prompt lookup, whose draft costs
nothing, wins where the answer copies the prompt. :class:`AutoDraft` chooses each round:

* the expected tokens of a round of gamma drafts at acceptance rate alpha,
  ``E(alpha, gamma) = (1 - alpha^(gamma+1)) / (1 - alpha)`` (Leviathan et al. 2023, eq. 1);
* its cost, ``gamma * t_draft + t_verify(gamma + 1)``, where Leviathan et al. take the verify
  pass as one target step; here its cost is a line in the positions fed, fitted to the
  verify passes measured so far (:class:`CostEstimates`);
* the rate ``E / cost`` of each candidate (a draft model at each gamma, prompt lookup at each
  gamma up to the match it found, if any) against the target alone, ``1 / t_verify(1)``;
  the highest wins (:func:`plan_round`). No draft means a plain target step.

Alpha per source is a discounted Beta-Binomial estimate over the tokens the target tested
(:class:`Acceptance`); prompt lookup's is kept per length of the run that agrees with the
earlier occurrence (:data:`LOOKUP_RUNS`), since a 1-token match is a weak guess and a
20-token run a copy in progress.

Lossless: every choice is a function of the finished rounds and the committed prefix only,
never of the target's coming distribution, so each round's accept / resample step
(:func:`lab.speculative.verify.verify`) keeps the output distributed as the target's.

The loop tells the drafter each finished round (:meth:`AutoDraft.observe`, called because
its :class:`~lab.speculative.drafts.DraftFacts` say ``observes_rounds``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from lab.sampling import SamplingConfig
from lab.speculative.drafts import (AdaptiveDraftLength, DraftFacts, Drafter, PromptLookupDraft, Proposal,
                                    empty_proposal)
from lab.speculative.theory import expected_tokens_per_round

if TYPE_CHECKING:
    from lab.speculative.results import RoundRecord

SOURCES = ("none", "prompt-lookup", "model")
# The most tokens auto drafts in a round when --gamma is not typed: prompt lookup copying a long span
# gains up to about 12 tokens a round on llama.cpp's CPU kernels (verify slope 0.6) before the pass
# costs more than its expected tokens; 16 leaves the choice to the measured costs.
AUTO_MAX_GAMMA = 16
# The verify pass's extra cost per position fed, over one target step, assumed until two pass
# lengths are measured: 0.6-0.8 measured on llama.cpp (qwen2.5-coder q4, 2-core AMD EPYC), 0.3 on
# torch (a verify over gamma + 1 positions costs 1.3-2.3 target steps on the lab's CPUs). Only a
# prior: the measured passes replace it within a few rounds.
VERIFY_SLOPE_PRIOR = {"llama.cpp": 0.7, "torch": 0.3}
PRIOR_WEIGHT = 2.0  # pseudo-observations behind each prior (slope, alpha)
# A draft model left idle must first feed the committed tokens its cache lacks (the whole prompt, the first
# time): a cost paid once that the following model rounds share. plan_round charges a round this share of it,
# so the draft model starts only where it pays back within a few rounds.
CATCHUP_ROUNDS = 4
FILL_PRIOR = 0.25  # one token of a draft's multi-token pass, in draft steps, until such a pass is timed
# Prompt lookup's acceptance is estimated per length of the run that agrees with the earlier occurrence
# (PromptLookupDraft.match): 1, 2, 3-7, 8-15 or 16+ tokens; a long run means the answer is copying.
LOOKUP_RUNS = (1, 2, 3, 8, 16)
# Alpha assumed before any token is tested, per source: optimistic enough that a long copy is tried early.
ALPHA_PRIOR = {"model": 0.75, "lookup-1": 0.35, "lookup-2": 0.5, "lookup-3": 0.65, "lookup-8": 0.8, "lookup-16": 0.9}
# Every round, each source's counts are weighed down by this factor (half-life about 14 rounds): text changes
# (a copy starts and ends), so alpha follows the recent rounds, and a source left unused drifts back to its
# prior, to be tried again where its prior says it may pay (a discounted estimate; no forced probes).
FORGET = 0.95


@dataclass
class Acceptance:
    """A source's per-token acceptance rate: Beta-Binomial, ``(kept + w a0) / (tested + w)``.

    Attributes:
        prior: alpha assumed before any token is tested, in (0, 1).
        kept, tested: tokens kept / tested by the target so far, weighed down by :data:`FORGET` per round.
    """

    prior: float
    kept: float = 0.0
    tested: float = 0.0

    @property
    def alpha(self) -> float:
        """The running estimate, in (0, 1)."""
        return (self.kept + PRIOR_WEIGHT * self.prior) / (self.tested + PRIOR_WEIGHT)

    def add(self, kept: int, tested: int) -> None:
        """One round's counts."""
        if not 0 <= kept <= tested:
            raise ValueError(f"kept={kept!r} must be in [0, tested={tested!r}]")
        self.kept += kept
        self.tested += tested

    def forget(self) -> None:
        """Weigh the counts so far down by :data:`FORGET` (once per round)."""
        self.kept *= FORGET
        self.tested *= FORGET


@dataclass
class CostEstimates:
    """Seconds of a verify pass of m positions, ``a + b (m - 1)``, and of one draft-model step.

    ``a`` is the mean one-position pass; ``b`` is fitted by least squares through the passes of
    more positions, shrunk toward ``slope_prior * a`` with :data:`PRIOR_WEIGHT` pseudo-passes.
    Passes that also filled the prompt (a fused prefill) are not verify passes and are left out.

    Attributes:
        slope_prior: b / a assumed before longer passes are measured (:data:`VERIFY_SLOPE_PRIOR`).
        draft_prior: a draft step over a target step assumed before a draft step is measured
            (the draft's FLOP ratio, :class:`lab.speculative.admission.DraftCost`).
    """

    slope_prior: float
    draft_prior: float = 0.5
    _n: dict[int, int] = field(default_factory=dict)  # positions fed -> passes
    _sum: dict[int, float] = field(default_factory=dict)  # positions fed -> seconds
    _draft_s: float = 0.0
    _draft_steps: int = 0
    _fill_s: float = 0.0
    _fill_tokens: int = 0

    def add_verify(self, positions: int, seconds: float) -> None:
        if positions < 1 or not math.isfinite(seconds) or seconds < 0:
            return
        self._n[positions] = self._n.get(positions, 0) + 1
        self._sum[positions] = self._sum.get(positions, 0.0) + seconds

    def add_draft(self, seconds: float, steps: int) -> None:
        if steps >= 1 and math.isfinite(seconds) and seconds >= 0:
            self._draft_s += seconds
            self._draft_steps += steps

    def add_fill(self, seconds: float, tokens: int) -> None:
        """A draft pass of several tokens (feeding what its cache lacks)."""
        if tokens >= 2 and math.isfinite(seconds) and seconds >= 0:
            self._fill_s += seconds
            self._fill_tokens += tokens

    def step(self) -> float:
        """``a``: seconds of a one-position pass (a plain target step); until one is timed, the most-timed
        pass length over the prior line; 1.0 before any pass (only ratios matter then)."""
        if 1 in self._n:
            return self._sum[1] / self._n[1]
        if not self._n:
            return 1.0
        m = max(self._n, key=lambda k: self._n[k])
        return self._sum[m] / self._n[m] / (1.0 + self.slope_prior * (m - 1))

    def slope(self) -> float:
        """``b`` >= 0: least squares of ``t - a`` on ``m - 1`` over the longer passes, with
        :data:`PRIOR_WEIGHT` pseudo-passes at ``m - 1 = 1`` on the prior line (a ridge toward ``slope_prior * a``)."""
        a = self.step()
        sxy = sum((m - 1) * (self._sum[m] - self._n[m] * a) for m in self._n if m > 1)
        sxx = sum(self._n[m] * (m - 1) ** 2 for m in self._n if m > 1)
        return max((sxy + PRIOR_WEIGHT * self.slope_prior * a) / (sxx + PRIOR_WEIGHT), 0.0)

    def verify(self, positions: int) -> float:
        """Seconds of a verify pass over ``positions`` >= 1 (one committed token and positions - 1 drafts)."""
        return self.step() + self.slope() * (positions - 1)

    def draft_step(self) -> float:
        """Seconds of one draft-model step: measured, else ``draft_prior`` target steps."""
        if self._draft_steps:
            return self._draft_s / self._draft_steps
        return self.draft_prior * self.step()

    def fill_token(self) -> float:
        """Seconds per token of a draft's multi-token pass: measured, else :data:`FILL_PRIOR` draft steps."""
        if self._fill_tokens:
            return self._fill_s / self._fill_tokens
        return FILL_PRIOR * self.draft_step()


@dataclass(frozen=True)
class RoundPlan:
    """What :func:`plan_round` chose for one round.

    Attributes:
        source: ``"none"`` (a plain target step), ``"prompt-lookup"`` or ``"model"``.
        gamma: draft tokens to propose (0 for ``"none"``).
        rate: the expected tokens per second of that choice.
        rate_none: the target alone's, ``1 / t_verify(1)``.
    """

    source: str
    gamma: int
    rate: float
    rate_none: float


def plan_round(costs: CostEstimates, *, max_gamma: int, model_alpha: float | None, lookup_alpha: float | None,
               lookup_len: int, model_lag: int = 0) -> RoundPlan:
    """The rate-maximizing choice for the next round: no draft, prompt lookup or the draft model, and gamma.

    For each candidate ``E(alpha, g) / (g * t_draft + t_verify(g + 1))`` (Leviathan et al. 2023, eq. 1 over
    the measured cost, :class:`CostEstimates`); prompt lookup's draft costs nothing and can propose at most
    the ``lookup_len`` tokens that followed its match; a draft model whose cache lacks ``model_lag`` committed
    tokens besides the last is charged a :data:`CATCHUP_ROUNDS` share of feeding them. Ties go to the cheaper
    choice (none, then lookup).

    Args:
        costs: The running cost estimates.
        max_gamma: The most draft tokens allowed this round, >= 0.
        model_alpha: The draft model's running alpha, or None without a draft model.
        lookup_alpha: Prompt lookup's running alpha for the match found, or None without a match.
        lookup_len: Tokens the match can propose (0 without a match).
        model_lag: Committed tokens the draft model's cache lacks besides the last (the prompt, at first).

    Returns:
        :class:`RoundPlan`.

    Examples:
        >>> c = CostEstimates(slope_prior=0.6)
        >>> c.add_verify(1, 0.030); c.add_verify(5, 0.102)  # a step of 30 ms, 18 ms per extra position
        >>> plan_round(c, max_gamma=8, model_alpha=None, lookup_alpha=0.95, lookup_len=6).source
        'prompt-lookup'
        >>> plan_round(c, max_gamma=8, model_alpha=None, lookup_alpha=0.3, lookup_len=6).source
        'none'
    """
    t1 = costs.verify(1)
    best = RoundPlan("none", 0, 1.0 / t1, 1.0 / t1)
    if max_gamma < 1:
        return best
    if lookup_alpha is not None and lookup_len >= 1:
        for g in range(1, min(lookup_len, max_gamma) + 1):
            rate = expected_tokens_per_round(lookup_alpha, g) / costs.verify(g + 1)
            if rate > best.rate:
                best = RoundPlan("prompt-lookup", g, rate, best.rate_none)
    if model_alpha is not None:
        td, catchup = costs.draft_step(), max(model_lag, 0) * costs.fill_token() / CATCHUP_ROUNDS
        for g in range(1, max_gamma + 1):
            rate = expected_tokens_per_round(model_alpha, g) / (catchup + g * td + costs.verify(g + 1))
            if rate > best.rate:
                best = RoundPlan("model", g, rate, best.rate_none)
    return best


class AutoDraft:
    """Per round: no draft, prompt lookup, or a draft model, whichever the measured costs say is fastest.

    Args:
        vocab_size: Width V of the q rows (the target's vocabulary size).
        model: A model drafter (:class:`~lab.speculative.drafts.ModelDraft` or one of its kinds with its own
            KV cache), or None (prompt lookup or nothing).
        runtime: ``"torch"`` or ``"llama.cpp"``, for the verify-slope prior (:data:`VERIFY_SLOPE_PRIOR`).

    Raises:
        ValueError: a model drafter that drafts on the target's cache (an early-exit draft: its cost is the
            target's own layers, which auto does not time apart).

    The costs measured (a hardware fact) are kept across sequences; the acceptance rates (a property of the
    text) start again from their priors at each :meth:`reset`.
    """

    def __init__(self, vocab_size: int, model: Drafter | None = None, *, runtime: str = "torch"):
        if model is not None and model.facts().drafts_on_target_cache:
            raise ValueError(f"auto drafts with a model of its own cache; {model.name!r} drafts on the target's")
        self.vocab_size = int(vocab_size)
        self.model = model
        self.lookup = PromptLookupDraft(self.vocab_size)
        self.name = "auto" + (f":{model.name}" if model is not None else "")
        cost = model.facts().cost if model is not None else None
        draft_prior = float(cost.ratio) if cost is not None and math.isfinite(cost.ratio) else 0.5
        self.costs = CostEstimates(VERIFY_SLOPE_PRIOR.get(runtime, 0.3), draft_prior)
        self.reset()

    def facts(self) -> DraftFacts:
        """The draft model's facts (model, assistant, cost, weight dtype, passes), observing rounds."""
        inner = self.model.facts() if self.model is not None else DraftFacts()
        return DraftFacts(model=inner.model, assistant_model=inner.assistant_model, cost=inner.cost,
                          weight_dtype=inner.weight_dtype, drafts_on_target_cache=False, passes=inner.passes,
                          n_casts=inner.n_casts, cast_time_s=inner.cast_time_s, observes_rounds=True)

    def use_target_cache(self, cache: Any) -> None:
        if self.model is not None:
            self.model.use_target_cache(cache)

    def reset(self) -> None:
        if self.model is not None:
            self.model.reset()
        self.accept = {key: Acceptance(prior) for key, prior in ALPHA_PRIOR.items()}
        self._model_len = 0  # committed positions in the draft model's cache
        self._passes0 = 0  # the draft model's logged passes before the round in flight
        self._proposed_at = self._proposed_k = 0  # the round in flight's committed length and model drafts
        self._pending: tuple[str, str] | None = None  # (source, its acceptance key) of the round in flight

    def _plan(self, prefix: list[int], gamma: int) -> tuple[RoundPlan, str, list[int]]:
        run, cont = self.lookup.match(prefix, gamma)
        key = f"lookup-{max(r for r in LOOKUP_RUNS if r <= run)}" if cont else ""
        plan = plan_round(self.costs, max_gamma=gamma,
                          model_alpha=self.accept["model"].alpha if self.model is not None else None,
                          lookup_alpha=self.accept[key].alpha if cont else None, lookup_len=len(cont),
                          model_lag=len(prefix) - self._model_len - 1)
        return plan, key, cont

    def propose(self, prefix_ids: torch.Tensor, gamma: int, *, sampling: SamplingConfig,
                generator: torch.Generator | None = None, adaptive: AdaptiveDraftLength | None = None,
                eos_token_ids: frozenset[int] = frozenset()) -> Proposal:
        """Up to ``gamma`` tokens from the source :func:`plan_round` chooses (``source`` on the proposal; stop
        reason ``"cost"`` where auto drafted nothing, or fewer than ``gamma`` tokens by its own choice)."""
        device = prefix_ids.device
        if gamma < 1:
            self._pending = None
            return empty_proposal(self.vocab_size, "budget", device)
        plan, key, cont = self._plan(prefix_ids.tolist(), gamma)
        if plan.source == "none":
            self._pending = ("none", "")
            prop = empty_proposal(self.vocab_size, "cost", device)
        elif plan.source == "prompt-lookup":
            self._pending = ("prompt-lookup", key)
            prop = self.lookup.proposal(cont[:plan.gamma], plan.gamma, eos_token_ids, device)  # the match planned on
        else:
            self._pending = ("model", "model")
            assert self.model is not None
            self._passes0 = len(self.model.facts().passes)
            self._proposed_at = len(prefix_ids)
            prop = self.model.propose(prefix_ids, plan.gamma, sampling=sampling, generator=generator,
                                      adaptive=adaptive, eos_token_ids=eos_token_ids)
            self._proposed_k = int(prop.tokens.shape[0])
        prop.source = plan.source
        if prop.stop_reason == "gamma" and plan.gamma < gamma:  # auto chose this length, not the most allowed
            prop.stop_reason = "cost"
        return prop

    def commit(self, n_kept: int) -> None:
        if self._pending is not None and self._pending[0] == "model":
            assert self.model is not None
            self.model.commit(n_kept)
            # the draft fed every drafted token but the last; the commit keeps those the target kept
            self._model_len = self._proposed_at + min(n_kept, max(self._proposed_k - 1, 0))

    def observe(self, record: "RoundRecord") -> None:
        """Learn from a finished round: its verify pass's time and length, its draft steps, what was kept."""
        for estimate in self.accept.values():
            estimate.forget()
        pending, self._pending = self._pending, None
        if record.prefill_positions == 0:
            self.costs.add_verify(len(record.proposed) + 1, record.verify_time_s)
        if pending is None or pending[0] == "none" or not record.proposed:
            return
        source, key = pending
        if source == "model" and self.model is not None:
            for tokens, _, seconds in self.model.facts().passes[self._passes0:]:
                if tokens == 1:
                    self.costs.add_draft(seconds, 1)
                else:
                    self.costs.add_fill(seconds, tokens)
        self.accept[key].add(record.n_accepted, record.n_tested)
