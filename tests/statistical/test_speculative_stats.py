"""Statistical tests: speculative sampling emits exactly the target's distribution.

Each test draws a fixed number of samples with a fixed seed and runs a chi-square
goodness-of-fit test on **counts** (``scipy.stats.chisquare``), pooling bins whose
expected count is below 5. A test fails when p < ``P_THRESHOLD`` = 1e-3: the stated
false-positive rate of each check is 0.1 % (a correct implementation fails a given
check with probability 0.001 over the choice of seed; the seeds are fixed, so a
passing run stays passing). An outcome with expected probability 0 that is observed
even once fails outright.

Each test has a negative control: a deliberately broken variant, implemented here
and never in library code, that the same test must reject (asserted). Sample counts
are chosen so every control is rejected with overwhelming power (its p-value is
many orders of magnitude below the threshold) while the tier stays fast.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Callable

import pytest
import torch
from hypothesis import example, given, settings, strategies as st

from lab.sampling import SamplingConfig, sampling_probs
from lab.speculative.theory import accepted_length_pmf, acceptance_probability
from lab.speculative.verify import residual_probs, verify
from tests.support import chisq_pvalue

P_THRESHOLD = 1e-3  # per-check false-positive rate
N_FIRST = 3000  # draws per (p, q) for the first-token test
N_SEQ = 5000  # sequences for the Markov-chain tests
N_ROUNDS = 3000  # rounds for the accepted-length test

VerifyFn = Callable[..., tuple[int, int]]


# --------------------------------------------------------------------------- broken variants (controls)


def _ratio_test(draft_tokens, draft_probs, target_probs, generator, residual, always_accept=False):
    gamma = draft_tokens.shape[0]
    for i in range(gamma):
        p, q = target_probs[i, draft_tokens[i]], draft_probs[i, draft_tokens[i]]
        u = torch.rand((), generator=generator, dtype=torch.float64)
        if not always_accept and not u * q < p:
            return i, int(torch.multinomial(residual(target_probs[i], draft_probs[i]), 1, generator=generator))
    return gamma, int(torch.multinomial(target_probs[gamma], 1, generator=generator))


def verify_always_accept(d, dp, tp, *, generator=None):
    return _ratio_test(d, dp, tp, generator, residual_probs, always_accept=True)


def verify_softmaxed_residual(d, dp, tp, *, generator=None):
    return _ratio_test(d, dp, tp, generator, lambda p, q: torch.softmax(p - q, dim=-1))


def verify_residual_without_q(d, dp, tp, *, generator=None):
    return _ratio_test(d, dp, tp, generator, lambda p, q: p)


# --------------------------------------------------------------------------- harnesses


def first_token_counts(verify_fn: VerifyFn, p: torch.Tensor, q: torch.Tensor, gamma: int, n: int, seed: int,
                       greedy_draft_soft_q: bool = False) -> Counter:
    """Counts of the first emitted token when every position has target p and draft q."""
    g = torch.Generator().manual_seed(seed)
    target_rows, draft_rows = p.expand(gamma + 1, -1), q.expand(gamma, -1)
    counts: Counter = Counter()
    for _ in range(n):
        if greedy_draft_soft_q:  # fault: draft picks argmax(q) but is scored with the soft q
            drafts = q.argmax().repeat(gamma)
        else:
            drafts = torch.multinomial(draft_rows, 1, replacement=True, generator=g).squeeze(-1)
        n_acc, nxt = verify_fn(drafts, draft_rows, target_rows, generator=g)
        counts[int(drafts[0]) if n_acc >= 1 else nxt] += 1
    return counts


def markov_sequences(verify_fn: VerifyFn, P: torch.Tensor, Q: torch.Tensor, length: int, gamma: int, n: int,
                     seed: int) -> Counter:
    """Whole sequences of ``length`` tokens from start state 0, drafted from chain Q, verified against chain P.

    Rounds draft at most ``remaining - 1`` tokens, as the decode loop does.
    """
    g = torch.Generator().manual_seed(seed)
    counts: Counter = Counter()
    for _ in range(n):
        seq = [0]
        while len(seq) - 1 < length:
            k = min(gamma, length - (len(seq) - 1) - 1)
            drafts, cur = [], seq[-1]
            for _ in range(k):
                cur = int(torch.multinomial(Q[cur], 1, generator=g))
                drafts.append(cur)
            ctx = torch.tensor([seq[-1]] + drafts)
            n_acc, nxt = verify_fn(torch.tensor(drafts, dtype=torch.long), Q[ctx[:-1]], P[ctx], generator=g)
            seq += drafts[:n_acc] + [nxt]
        counts[tuple(seq[1:])] += 1
    return counts


def exact_sequence_probs(P: torch.Tensor, length: int) -> dict:
    out = {}
    for seq in itertools.product(range(P.shape[0]), repeat=length):
        prob, prev = 1.0, 0
        for t in seq:
            prob, prev = prob * float(P[prev, t]), t
        out[seq] = prob
    return out


# --------------------------------------------------------------------------- strategies


@st.composite
def distribution_pairs(draw):
    """(p, q): two distributions over V in [2, 6] entries, some entries exactly 0."""
    v = draw(st.integers(2, 6))
    weights = st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=False)
    raw_p = torch.tensor(draw(st.lists(weights, min_size=v, max_size=v)), dtype=torch.float64)
    raw_q = torch.tensor(draw(st.lists(weights, min_size=v, max_size=v)), dtype=torch.float64)
    from hypothesis import assume
    assume(raw_p.sum() > 0.2 and raw_q.sum() > 0.2)
    return (raw_p / raw_p.sum()).float(), (raw_q / raw_q.sum()).float()


EQUAL = (torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.5, 0.3, 0.2]))
DISJOINT = (torch.tensor([0.7, 0.3, 0.0, 0.0]), torch.tensor([0.0, 0.0, 0.4, 0.6]))
ZERO_PROB = (torch.tensor([0.6, 0.0, 0.4, 0.0]), torch.tensor([0.25, 0.25, 0.25, 0.25]))
# Controls use a pair where every fault moves a lot of mass (TV distance 0.6).
CONTROL_P = torch.tensor([0.6, 0.3, 0.1, 0.0])
CONTROL_Q = torch.tensor([0.1, 0.2, 0.3, 0.4])


def _first_token_pvalue(verify_fn, p, q, gamma=2, seed=0, **kw) -> float:
    counts = first_token_counts(verify_fn, p, q, gamma, N_FIRST, seed, **kw)
    return chisq_pvalue(counts, {i: float(p[i]) for i in range(p.shape[0])})


# --------------------------------------------------------------------------- tests


@settings(max_examples=3, derandomize=True, database=None)
@given(distribution_pairs())
@example(EQUAL)
@example(DISJOINT)
@example(ZERO_PROB)
def test_verify_first_emitted_token_is_distributed_as_target(pair):
    """For any p, q: P(first emitted token = x) = p(x) (Leviathan et al. 2023, Theorem 3.5)."""
    p, q = pair
    pv = _first_token_pvalue(verify, p, q)
    assert pv >= P_THRESHOLD, f"p={p.tolist()} q={q.tolist()} gamma=2 n={N_FIRST}: chi-square p-value {pv:.2e}"


@pytest.mark.parametrize("broken", [verify_always_accept, verify_softmaxed_residual, verify_residual_without_q])
def test_verify_first_token_control_broken_variant_is_rejected(broken):
    pv = _first_token_pvalue(broken, CONTROL_P, CONTROL_Q)
    assert pv < P_THRESHOLD, f"control {broken.__name__} was not rejected (p-value {pv:.2e})"


def test_verify_first_token_control_greedy_draft_scored_with_soft_q_is_rejected():
    pv = _first_token_pvalue(verify, CONTROL_P, CONTROL_Q, greedy_draft_soft_q=True)
    assert pv < P_THRESHOLD, f"greedy-draft/soft-q control not rejected (p-value {pv:.2e})"


def test_verify_first_token_greedy_draft_with_its_one_hot_q_is_lossless():
    """The fix for the control above: a greedy draft's q is one-hot on its argmax."""
    q_greedy = torch.nn.functional.one_hot(CONTROL_Q.argmax(), 4).float()
    pv = _first_token_pvalue(verify, CONTROL_P, q_greedy, greedy_draft_soft_q=True)
    assert pv >= P_THRESHOLD, f"p={CONTROL_P.tolist()} one-hot q: p-value {pv:.2e}"


# Markov chains over 3 states: rows are next-token distributions given the previous token.
P_CHAIN = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6], [0.05, 0.55, 0.4]])
Q_CHAIN = torch.tensor([[0.2, 0.5, 0.3], [0.4, 0.1, 0.5], [0.34, 0.33, 0.33]])


def test_markov_whole_sequences_match_exact_enumeration():
    """Sequences of 3 tokens with gamma = 2 (rounds of several lengths, budget cuts) equal the target chain's law."""
    counts = markov_sequences(verify, P_CHAIN, Q_CHAIN, length=3, gamma=2, n=N_SEQ, seed=1)
    pv = chisq_pvalue(counts, exact_sequence_probs(P_CHAIN, 3))
    assert pv >= P_THRESHOLD, f"P={P_CHAIN.tolist()} Q={Q_CHAIN.tolist()} len=3 gamma=2 n={N_SEQ}: p-value {pv:.2e}"


def test_markov_second_emitted_token_marginal_matches_target():
    counts = markov_sequences(verify, P_CHAIN, Q_CHAIN, length=2, gamma=3, n=N_SEQ, seed=2)
    second = Counter()
    for seq, c in counts.items():
        second[seq[1]] += c
    exact = (P_CHAIN[0] @ P_CHAIN).tolist()  # sum_a P(0, a) P(a, b)
    pv = chisq_pvalue(second, dict(enumerate(exact)))
    assert pv >= P_THRESHOLD, f"second-token marginal, gamma=3 n={N_SEQ}: p-value {pv:.2e}"


def test_markov_sequences_control_residual_without_q_is_rejected():
    counts = markov_sequences(verify_residual_without_q, P_CHAIN, Q_CHAIN, length=3, gamma=2, n=N_SEQ, seed=1)
    pv = chisq_pvalue(counts, exact_sequence_probs(P_CHAIN, 3))
    assert pv < P_THRESHOLD, f"residual-without-q control not rejected on sequences (p-value {pv:.2e})"


def _accepted_length_pvalue(verify_fn, p, q, gamma, seed) -> tuple[float, float]:
    g = torch.Generator().manual_seed(seed)
    alpha = float(acceptance_probability(p, q))
    target_rows, draft_rows = p.expand(gamma + 1, -1), q.expand(gamma, -1)
    hist: Counter = Counter()
    for _ in range(N_ROUNDS):
        drafts = torch.multinomial(draft_rows, 1, replacement=True, generator=g).squeeze(-1)
        hist[verify_fn(drafts, draft_rows, target_rows, generator=g)[0]] += 1
    return chisq_pvalue(hist, dict(enumerate(accepted_length_pmf(alpha, gamma)))), alpha


def test_accepted_length_histogram_follows_truncated_geometric_law():
    """i.i.d. positions: n_accepted ~ truncated geometric with alpha = sum min(p, q)."""
    p, q = torch.tensor([0.5, 0.3, 0.2, 0.0]), torch.tensor([0.3, 0.3, 0.2, 0.2])
    pv, alpha = _accepted_length_pvalue(verify, p, q, gamma=4, seed=3)
    assert pv >= P_THRESHOLD, f"alpha={alpha:.3f} gamma=4 n={N_ROUNDS}: p-value {pv:.2e}"


def test_accepted_length_control_always_accept_is_rejected():
    p, q = torch.tensor([0.5, 0.3, 0.2, 0.0]), torch.tensor([0.3, 0.3, 0.2, 0.2])
    pv, alpha = _accepted_length_pvalue(verify_always_accept, p, q, gamma=4, seed=3)
    assert pv < P_THRESHOLD, f"always-accept control not rejected (alpha={alpha:.3f}, p-value {pv:.2e})"


# --------------------------------------------------------------------------- the loop on a tiny model

N_LOOP = 1500  # runs of the full decode loop
LOOP_SAMPLING = SamplingConfig(temperature=1.0, top_k=6)  # top-k keeps the two-token outcome space small


# a separate draft model on its own cache; the target's first layer on the target's cache; both models
# with int8 weight-only layers (lab.models.quantize): lossless relative to the target as loaded; and the auto
# draft (lab.speculative.auto) with that draft model, its plan forced to alternate prompt lookup and the model
# round by round (a function of the rounds so far), so both drafting sources and a switch between them are drawn
LOOP_DRAFTS = ("model", "early-exit", "model-int8", "auto-rotating")


def _loop_two_token_counts(seed: int, draft_kind: str = "model") -> tuple[Counter, dict]:
    from lab.speculative.drafts import model_draft
    from lab.speculative.self_draft import EarlyExitDraft
    from lab.speculative.loop import speculative_generate
    from lab.speculative.settings import SpeculativeSettings
    from tests.support import tiny_llama_untied

    target = tiny_llama_untied(vocab_size=16, num_layers=2, seed=0, init_std=0.1)
    if draft_kind == "model-int8":
        from lab.models.quantize import quantize_model

        quantize_model(target, None, "int8")
        draft = model_draft(target, tiny_llama_untied(vocab_size=16, num_layers=1, seed=4, init_std=0.1))
        quantize_model(draft.model, None, "int8")
    elif draft_kind == "early-exit":  # lab.speculative.self_draft: drafts on the loop's (lent) target cache
        draft = EarlyExitDraft(target, 1)
    elif draft_kind == "auto-rotating":
        draft = _rotating_auto(model_draft(target, tiny_llama_untied(vocab_size=16, num_layers=1, seed=4,
                                                                     init_std=0.1)))
    else:
        draft = model_draft(target, tiny_llama_untied(vocab_size=16, num_layers=1, seed=4, init_std=0.1))
    # auto: 3 repeats, so prompt lookup proposes 15 (p gives it 0.25: both outcomes of its test are drawn)
    prompt = torch.tensor([[3, 15, 5, 9, 3]] if draft_kind == "auto-rotating" else [[3, 7, 5, 9]])
    with torch.inference_mode():
        p1 = sampling_probs(target(prompt).logits[0, -1], LOOP_SAMPLING)
        exact = {}
        for a in p1.nonzero().flatten().tolist():
            p2 = sampling_probs(target(torch.cat([prompt, torch.tensor([[a]])], 1)).logits[0, -1], LOOP_SAMPLING)
            for b in p2.nonzero().flatten().tolist():
                exact[(a, b)] = float(p1[a] * p2[b])
    g = torch.Generator().manual_seed(seed)
    counts: Counter = Counter()
    for _ in range(N_LOOP):
        res = speculative_generate(target, draft, prompt,
                                   SpeculativeSettings(max_new_tokens=2, gamma=3, sampling=LOOP_SAMPLING),
                                   generator=g)
        counts[tuple(res.tokens)] += 1
    return counts, exact


def _rotating_auto(model):
    """An auto draft whose plan is prompt lookup (one token) and the model (three tokens) in turn, per planned
    round across runs (two-token runs plan about one round each, so each run's first round alternates). Its third
    choice, no draft, is a plain target step: greedy-checked in tests/unit/test_auto_draft.py, and left out here
    because it draws no accept test and would only thin the control's power."""
    from lab.speculative import auto

    class Rotating(auto.AutoDraft):
        planned = 0

        def _plan(self, prefix, gamma):
            run, cont = self.lookup.match(prefix, gamma)
            source = ("prompt-lookup", "model")[self.planned % 2]
            self.planned += 1
            if source == "prompt-lookup" and not cont:
                source = "model"
            g = 0 if source == "none" else min(gamma, 1 if source == "prompt-lookup" else 3)
            return auto.RoundPlan(source, g, 1.0, 1.0), "lookup-1", cont

    return Rotating(16, model)


@pytest.mark.parametrize("draft_kind", LOOP_DRAFTS)
def test_speculative_loop_first_two_tokens_match_target_sampling(one_torch_thread, draft_kind):
    """The whole loop (draft cache, verify pass, rollback) in sampling mode: two-token law equals the target's."""
    counts, exact = _loop_two_token_counts(seed=5, draft_kind=draft_kind)
    pv = chisq_pvalue(counts, exact)
    assert pv >= P_THRESHOLD, f"tiny loop, {draft_kind} draft, T=1 top_k=6 gamma=3 n={N_LOOP}: p-value {pv:.2e}"


@pytest.mark.parametrize("draft_kind", LOOP_DRAFTS)
def test_speculative_loop_control_residual_without_q_is_rejected(one_torch_thread, monkeypatch, draft_kind):
    """The same loop test with the loop's verify swapped for the residual-without-q fault."""
    import lab.speculative.loop as loop

    monkeypatch.setattr(loop, "verify", verify_residual_without_q)
    counts, exact = _loop_two_token_counts(seed=5, draft_kind=draft_kind)
    pv = chisq_pvalue(counts, exact)
    assert pv < P_THRESHOLD, f"loop control, {draft_kind} draft, not rejected (p-value {pv:.2e})"

