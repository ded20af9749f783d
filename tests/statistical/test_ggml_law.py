"""The sampling-mode law on the llama.cpp runtime: the lab's speculative loop, run on SmolLM2's GGUF through
llama.cpp's kernels, emits the target's own two-token distribution.

Same design as ``test_speculative_stats``'s loop test: a fixed prompt, temperature 1 with top-k 6,
two new tokens, ``N_LOOP`` runs from one seeded generator, a chi-square test on the counts of the
(first, second) pairs against the exact law computed from the runtime's own passes (pooled bins
with expected count < 5). A check fails at p < ``P_THRESHOLD`` = 1e-3, its stated false-positive
rate. Negative control: the loop's verify swapped for the residual-without-q fault, which the same
test must reject.

The draft is prompt lookup (q one-hot on the token that followed the last match): the prompt repeats a
phrase, so the first round always drafts one token d; the fault then re-emits d after rejecting it,
adding (1 - p_d) p_d to its probability (the test asserts p_d sits where that is detectable).
The runtime runs one thread, so its sums do not depend on the machine's load.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from lab.sampling import SamplingConfig, sampling_probs
from tests.support import chisq_pvalue

pytestmark = pytest.mark.statistical

P_THRESHOLD = 1e-3
N_LOOP = 600  # the control moves p_d by (1 - p_d) p_d = 0.17 (p_d 0.215): rejected at p << 1e-10
LOOP_SAMPLING = SamplingConfig(temperature=1.0, top_k=6)
TEXT = "one two three, one two"  # prompt lookup drafts "three"


def _exact_two_token_law(model, prompt) -> tuple[dict, torch.Tensor]:
    from lab.decode import new_cache

    p1 = sampling_probs(model(prompt, new_cache(model)).logits[0, -1], LOOP_SAMPLING)
    exact = {}
    for a in p1.nonzero().flatten().tolist():
        ext = torch.cat([prompt, torch.tensor([[a]])], 1)
        p2 = sampling_probs(model(ext, new_cache(model)).logits[0, -1], LOOP_SAMPLING)
        for b in p2.nonzero().flatten().tolist():
            exact[(a, b)] = float(p1[a] * p2[b])
    return exact, p1


def _loop_counts(model, tok, seed: int) -> tuple[Counter, dict]:
    from lab.speculative.draft_specs import make_draft
    from lab.speculative.loop import speculative_generate
    from lab.speculative.settings import SpeculativeSettings

    prompt = torch.tensor([tok.encode(TEXT)])
    exact, p1 = _exact_two_token_law(model, prompt)
    draft = make_draft(model, "prompt-lookup", target_tokenizer=tok)
    proposed = draft.propose(prompt[0], 1, sampling=LOOP_SAMPLING).tokens.tolist()
    assert len(proposed) == 1, "the prompt must make prompt lookup draft a token"
    assert 0.05 <= float(p1[proposed[0]]) <= 0.95, f"p_d = {float(p1[proposed[0]]):.3f}: the control would lack power"
    g = torch.Generator().manual_seed(seed)
    counts: Counter = Counter()
    for _ in range(N_LOOP):
        res = speculative_generate(model, draft, prompt,
                                   SpeculativeSettings(max_new_tokens=2, gamma=3, sampling=LOOP_SAMPLING), generator=g)
        counts[tuple(res.tokens)] += 1
    return counts, exact


def _verify_residual_without_q(draft_tokens, draft_probs, target_probs, *, generator=None):
    """The fault (never in library code): the usual accept test, but a rejection resamples from p itself
    instead of the residual max(0, p - q) renormalized."""
    from lab.speculative.verify import verify

    n_acc, nxt = verify(draft_tokens, draft_probs, target_probs, generator=generator)
    if n_acc < int(draft_tokens.shape[0]):  # rejected: draw from p at that position instead
        nxt = int(torch.multinomial(target_probs[n_acc], 1, generator=generator))
    return n_acc, nxt


def test_ggml_speculative_loop_first_two_tokens_match_target_sampling(ggml_smollm2):
    counts, exact = _loop_counts(*ggml_smollm2, seed=5)
    pv = chisq_pvalue(counts, exact)
    assert pv >= P_THRESHOLD, f"llama.cpp runtime, prompt-lookup draft, T=1 top_k=6, n={N_LOOP}: p-value {pv:.2e}"


def test_ggml_speculative_loop_control_residual_without_q_is_rejected(ggml_smollm2, monkeypatch):
    import lab.speculative.loop as loop

    monkeypatch.setattr(loop, "verify", _verify_residual_without_q)
    counts, exact = _loop_counts(*ggml_smollm2, seed=5)
    pv = chisq_pvalue(counts, exact)
    assert pv < P_THRESHOLD, f"llama.cpp runtime control not rejected (p-value {pv:.2e})"
