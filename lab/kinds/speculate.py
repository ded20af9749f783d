"""``lab speculate``: one prompt through speculative decoding, accepted drafts, corrections and bonus
tokens replayed, theory beside measurement."""

from __future__ import annotations

from dataclasses import dataclass, field

from lab.kinds import Kind
from lab.provenance import Environment, ModelSource


@dataclass(frozen=True)
class DraftSetup:
    """The draft set-up in force and where each part came from (:meth:`lab.speculative.setups.ResolvedSetup.as_dict`).

    Attributes:
        draft_dtype: A draft model's dtype; None = the target's.
        gamma: Draft tokens per round (the most, under a dynamic policy).
        adaptive: ``"entropy:X"`` / ``"pmin:X"`` early stop; None = off.
        dynamic: ``"dynamic:START:MAX"`` draft-length policy; None = fixed gamma.
        sources: Where each of the four came from, by name (``"--gamma"``, ``"default: <why>"`` ...).
        notes: Sentences about the choice (a tuning file ignored ...).
    """

    draft_dtype: str | None
    gamma: int
    adaptive: str | None
    dynamic: str | None
    sources: dict[str, str]
    notes: list[str]


@dataclass(frozen=True)
class Sampling:
    """The sampling filter of both sides (:class:`lab.sampling.SamplingConfig`).

    Attributes:
        temperature: Dimensionless, >= 0; 0 = greedy.
        top_k: Tokens kept by top-k; None = all.
        top_p: Nucleus mass kept, in (0, 1].
    """

    temperature: float
    top_k: int | None
    top_p: float


@dataclass(frozen=True)
class Settings:
    """How the run was set up (:meth:`lab.speculative.report.SpeculateConfig.report`).

    Attributes:
        draft: The draft in force (``--draft`` or the profile's).
        gamma: Draft tokens per round, at most.
        adaptive: The draft's early stop; None = off.
        draft_dtype: The draft model's dtype; None = the target's.
        dynamic: The draft-length policy; None = fixed gamma.
        draft_setup: The set-up with its sources.
        max_new_tokens: The most tokens generated, tokens.
        sampling: The sampling filter.
        seed: The sampling seed (drawn when not given).
        runtime: ``"torch"`` or ``"llama.cpp"``.
        runtime_source: Where that came from (``"--runtime"`` or ``"default: <why>"``).
    """

    draft: str
    gamma: int
    adaptive: str | None
    draft_dtype: str | None
    dynamic: str | None
    draft_setup: DraftSetup
    max_new_tokens: int
    sampling: Sampling
    seed: int
    runtime: str
    runtime_source: str


@dataclass(frozen=True)
class Acceptance:
    """The acceptance figures (:meth:`lab.speculative.results.SpeculativeResult.acceptance_summary`); a rate that is
    undefined (nothing tested, no rounds, no time) is None.

    Attributes:
        alpha: Accepted over tested draft tokens, in [0, 1].
        tau: Tokens emitted per round.
        n_rounds: Rounds.
        n_drafted: Draft tokens proposed.
        n_drafted_tested: Draft tokens the target tested.
        n_accepted: Draft tokens kept.
        expected_tokens_per_round_at_alpha: Leviathan et al. 2023's Equation 1 at alpha and gamma, tokens.
        accepted_length_histogram: Rounds of the full gamma drafts by tokens accepted (0 to gamma), counts.
        all_rounds_histogram: Every round by tokens accepted, counts.
        geometric_expected: The truncated geometric law's expected counts of ``accepted_length_histogram``.
        geometric_chi2: The chi-square of the fit; None with too few rounds.
        geometric_p_value: Its p-value, in [0, 1]; None with too few rounds.
        tokens: Tokens generated.
        tokens_per_s: Tokens per second, end to end.
        prefill_time_s: Prefill, seconds.
        draft_time_s: Draft forward passes, seconds.
        verify_time_s: Verify passes, seconds.
        overhead_time_s: The rest, seconds.
        total_time_s: The whole decode, seconds.
        stopped_by: Why the decode stopped (``"eos"``, ``"max_new_tokens"`` ...).
    """

    alpha: float | None
    tau: float | None
    n_rounds: int
    n_drafted: int
    n_drafted_tested: int
    n_accepted: int
    expected_tokens_per_round_at_alpha: float | None
    accepted_length_histogram: list[int]
    all_rounds_histogram: list[int]
    geometric_expected: list[float]
    geometric_chi2: float | None
    geometric_p_value: float | None
    tokens: int
    tokens_per_s: float | None
    prefill_time_s: float
    draft_time_s: float
    verify_time_s: float
    overhead_time_s: float
    total_time_s: float
    stopped_by: str


@dataclass(frozen=True)
class DraftCost:
    """FLOPs per token of the draft against its target (:class:`lab.speculative.admission.DraftCost`).

    Attributes:
        draft_flops: The draft's forward FLOPs for one token at ``context`` cached positions.
        target_flops: The target's, FLOPs.
        context: Cached positions assumed, tokens.
        ratio: c = draft_flops / target_flops (dimensionless).
        note: A sentence when c >= 1; None otherwise.
    """

    draft_flops: float
    target_flops: float
    context: int
    ratio: float
    note: str | None


@dataclass(frozen=True)
class Round:
    """One draft-verify-accept round (:class:`lab.speculative.results.RoundRecord` adds what is derived from it). A
    per-proposal figure is None in the file where the draft gave no finite number (NaN in the loop's record).

    Attributes:
        round: 0-based round index.
        proposed: Draft token ids proposed (at most gamma).
        n_accepted: Leading draft tokens kept.
        next_token: The correction or bonus token; None when an accepted EOS ended the round.
        next_kind: ``"correction"``, ``"bonus"`` or ``"none"``.
        stop_reason: Why drafting stopped (:data:`lab.speculative.drafts.STOP_REASONS`).
        draft_entropies: Entropy of the draft's distribution per proposed token, bits.
        draft_normalized_entropies: The same over log2 V, in [0, 1].
        accepted_mask: Per proposed token, whether it was kept.
        tested_mask: Per proposed token, whether the target tested it (tokens after the first rejection, or after
            an accepted EOS, are not tested).
        draft_time_s: The draft's forward passes this round, seconds.
        verify_time_s: The target's verify pass, seconds.
        n_draft_forwards: Draft forward passes this round.
        prefill_positions: Prompt positions the verify pass also filled (0, the default, but in a fused first round:
            that pass is the decode's prefill, not one of its verify passes).
        target_probs: p(x) per proposed token as the accept step used it (the sampling filter applied; one-hot in
            greedy mode), in [0, 1] (p = target), so min(1, p(x) / q(x)) is its acceptance probability (Leviathan
            et al. 2023, Algorithm 1); empty (the default) in records made before these were kept.
        draft_probs: q(x) per proposed token likewise, in [0, 1] (q = draft).
        draft_source: Who drafted this round when the drafter chooses per round (``"none"``, ``"prompt-lookup"``,
            ``"model"``: :class:`lab.speculative.auto.AutoDraft`); ``""`` (the default) otherwise.
    """

    round: int
    proposed: list[int]
    n_accepted: int
    next_token: int | None
    next_kind: str
    stop_reason: str
    draft_entropies: list[float | None]
    draft_normalized_entropies: list[float | None]
    accepted_mask: list[bool]
    tested_mask: list[bool]
    draft_time_s: float
    verify_time_s: float
    n_draft_forwards: int
    prefill_positions: int = 0
    target_probs: list[float | None] = field(default_factory=list)
    draft_probs: list[float | None] = field(default_factory=list)
    draft_source: str = ""


@dataclass(frozen=True)
class DraftedToken:
    """One drafted token (:meth:`lab.speculative.results.SpeculativeResult.per_token`).

    Attributes:
        round: Its round.
        index: Its position in the round's proposal.
        token_id: The token's id.
        draft_entropy_bits: The draft's entropy there, bits.
        draft_normalized_entropy: The same over log2 V, in [0, 1].
        accepted: Whether it was kept.
        tested: Whether the target tested it.
    """

    round: int
    index: int
    token_id: int
    draft_entropy_bits: float | None
    draft_normalized_entropy: float | None
    accepted: bool
    tested: bool


@dataclass(frozen=True)
class Report:
    """``report.json`` of ``lab speculate`` past its kind and format (:meth:`lab.speculative.report.SpeculateConfig.report`).

    Attributes:
        prompt: The user's prompt, as typed.
        system: The system prompt; None for the template's own.
        messages: The chat messages encoded (``role``, ``content``).
        prompt_ids: The encoded chat prompt's token ids.
        settings: How the run was set up.
        model: The target model's record (:meth:`lab.models.source.ModelSource.as_dict`).
        environment: The machine, libraries and model (:func:`lab.reports.environment`).
        acceptance: The acceptance figures.
        draft_cost: The draft's FLOP cost ratio; None when unknown.
        text: The answer as a user reads it (special tokens not shown).
        new_token_ids: The generated ids, in order.
        rounds: Every round, in order.
        per_token: Every drafted token, in order.
        token_texts: Each generated or proposed token's text as decoded alone, by its id (in decimal).
    """

    prompt: str
    system: str | None
    messages: list[dict[str, str]]
    prompt_ids: list[int]
    settings: Settings
    model: ModelSource
    environment: Environment
    acceptance: Acceptance
    draft_cost: DraftCost | None
    text: str
    new_token_ids: list[int]
    rounds: list[Round]
    per_token: list[DraftedToken]
    token_texts: dict[str, str]


KIND = Kind("speculate", listed=90, commands=("lab.commands.speculate",), page="lab.views.kinds.speculate",
            report=Report)
