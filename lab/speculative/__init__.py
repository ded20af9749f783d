"""Speculative decoding: a draft proposes gamma tokens, the target verifies them in one pass.

Modules, in dependency order: :mod:`.verify` and :mod:`.theory` (pure math),
the lab's one sampling filter (:mod:`lab.sampling`, re-exported as :mod:`.sampling`), :mod:`.drafts` (candidate
generation), :mod:`.results` (result types and the statistics derived from them),
:mod:`.loop` (the decode loop, on the decode core :mod:`lab.decode`) and
:mod:`.bench` (measurements).
References: Leviathan, Kalman & Matias 2023; Chen et al. 2023.
"""

from lab.speculative.drafts import (AdaptiveDraftLength, Drafter, ModelDraft, PromptLookupDraft, Proposal,
                                    early_exit_draft, early_exit_model, model_draft)
from lab.speculative.loop import (FixedGamma, GammaPolicy, check_draft_spec, make_draft, speculative_generate,
                                  target_generate)
from lab.speculative.results import RoundRecord, SpeculativeResult, TargetOnlyResult
from lab.sampling import SamplingConfig, filter_logits, sampling_probs
from lab.speculative.theory import (accepted_length_pmf, acceptance_probability, breakeven_alpha,
                                    expected_speedup, expected_tokens_per_round, flops_per_token)
from lab.speculative.verify import residual_probs, verify, verify_greedy

__all__ = [
    "AdaptiveDraftLength", "Drafter", "FixedGamma", "GammaPolicy", "filter_logits", "ModelDraft", "PromptLookupDraft", "Proposal", "RoundRecord",
    "SamplingConfig", "SpeculativeResult", "TargetOnlyResult", "accepted_length_pmf", "acceptance_probability",
    "breakeven_alpha", "early_exit_draft", "early_exit_model", "expected_speedup", "expected_tokens_per_round",
    "flops_per_token", "check_draft_spec", "make_draft", "model_draft", "residual_probs", "sampling_probs", "speculative_generate",
    "target_generate", "verify", "verify_greedy",
]
