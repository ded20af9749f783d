"""Simulated studies with the structure of `make study`, for the size and power checks of the hypothesis tests.

Not a test module: :mod:`tests.statistical.test_hypothesis_size` draws its data here. A
simulated study has the embedded prompt set's own rows (ids, categories, variants,
``twin_of``: 66 clean prompts, 18 poisoned and 18 neutral twins, so 18 questions are
asked three times), prompt lengths from the prompts' own text, and the H6 temperature
subset that :func:`lab.study.work.temperature_subset` chooses. Its numbers are drawn with
the structure the study's data have (every standard deviation is a named constant):

* context health and mean decode entropy carry a random effect of the question, shared
  by a triple, and both drift with log prompt length (which H1 holds fixed);
* per-prompt alpha carries a question effect and a prompt effect; the tested drafted
  tokens (:data:`TOKENS_PER_PROMPT`, as the study's 24 new tokens at gamma 2 give) draw
  acceptance from the prompt's alpha, and their draft entropies share a prompt level,
  so tokens are correlated within a prompt in both variables;
* the decode's word labels and entropies (H5) carry a question effect on the
  initial-minus-continuation difference, with mean 0;
* the H6 subset's alpha at 0.3, 0.7 and 1.0 shifts by +s, 0, -s on the alpha scale with
  s equal to the prompts' SD of alpha: the boundary of H6's null (the temperatures'
  variance equals the prompts').

:class:`Plant` adds an effect to one hypothesis; the default plants nothing.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from lab.analysis.claims import DESIGN_TEMPERATURES, H6_COLUMNS
from lab.prompts import load_prompts
from lab.study.work import temperature_subset

HEALTH_QUESTION_SD, HEALTH_PROMPT_SD = 1.0, 1.0  # a triple's healths correlate at about 0.5
ENTROPY_QUESTION_SD, ENTROPY_PROMPT_SD = 0.35, 0.3  # ... and its mean entropies at about 0.6
HEALTH_PER_LOG_LENGTH, ENTROPY_PER_LOG_LENGTH = -0.4, 0.15  # drifts per SD of log length
ALPHA_MEAN, ALPHA_QUESTION_SD, ALPHA_PROMPT_SD = 0.5, 0.1, 0.1  # prompts' SD of alpha about 0.14
TOKENS_PER_PROMPT = (10, 24)  # tested drafted tokens per prompt, uniform between these
# draft entropy's intra-prompt correlation 0.5; with alpha's (about 0.08) and ~17 tokens a prompt,
# a test that takes tokens as independent rejects about 13 % of null studies at 5 %
DRAFT_ENTROPY_PROMPT_SD, DRAFT_ENTROPY_TOKEN_SD = 1.0, 1.0
SUBWORD_QUESTION_SD = 0.3  # H5: a question's words shift initial - continuation (mean 0)
WORDS_PER_DECODE = 10


@dataclass(frozen=True)
class Plant:
    """Effects to plant (0: none). Units: ``h1`` the partial Pearson correlation of health and entropy
    given length; ``h4`` the poisoned - neutral shift in SDs of the pair difference (health down,
    entropy up); ``h5`` the initial - continuation shift in SDs of the per-question difference;
    ``h2`` the drop in acceptance probability per bit of draft entropy."""

    h1: float = 0.0
    h2: float = 0.0
    h4: float = 0.0
    h5: float = 0.0


def study_prompts() -> list[dict[str, Any]]:
    """The embedded prompt set's rows: id, category, variant, twin_of, n_prompt_tokens (about 1.3 tokens
    a word of the messages plus 20 for the chat template)."""
    out = []
    for p in load_prompts():
        words = sum(len(m["content"].split()) for m in p.messages)
        out.append({"id": p.id, "category": p.category, "variant": p.variant, "twin_of": p.twin_of,
                    "n_prompt_tokens": int(round(1.3 * words + 20))})
    return out


@functools.cache
def _prompts() -> tuple[dict[str, Any], ...]:
    return tuple(study_prompts())


@functools.cache
def h6_subset() -> frozenset[str]:
    """The prompt ids of the H6 temperature subset (the study's own choice on the embedded set)."""
    return temperature_subset(load_prompts())


def simulate_study(seed: int, plant: Plant = Plant(), subset: frozenset[str] | None = None, *, decodes: bool = True
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, dict[str, list]]]:
    """One simulated study: ``(per_prompt rows, per_token rows, decodes)`` for :func:`lab.analysis.study.analyze`.

    Args:
        seed: Seed of the generator (one study per seed).
        plant: Effects to plant.
        subset: H6's temperature subset; ``None``: :func:`h6_subset`.
        decodes: Draw the decodes (H5); ``False`` leaves them empty (faster, for checks of other tests).
    """
    rng = np.random.default_rng(seed)
    prompts = _prompts()
    subset = h6_subset() if subset is None else subset
    questions = sorted({p["twin_of"] or p["id"] for p in prompts})
    qi = {q: i for i, q in enumerate(questions)}
    nq = len(questions)
    q_health, q_entropy = rng.normal(0, HEALTH_QUESTION_SD, nq), rng.normal(0, ENTROPY_QUESTION_SD, nq)
    q_alpha, q_subword = rng.normal(0, ALPHA_QUESTION_SD, nq), rng.normal(0, SUBWORD_QUESTION_SD, nq)
    logn = np.log([p["n_prompt_tokens"] for p in prompts])
    z = (logn - logn.mean()) / logn.std()
    health_sd = math.hypot(HEALTH_QUESTION_SD, HEALTH_PROMPT_SD)
    entropy_sd = math.hypot(ENTROPY_QUESTION_SD, ENTROPY_PROMPT_SD)
    pair_sd = math.sqrt(2) * HEALTH_PROMPT_SD, math.sqrt(2) * ENTROPY_PROMPT_SD
    alpha_sd = math.hypot(ALPHA_QUESTION_SD, ALPHA_PROMPT_SD)
    shifts = dict(zip(DESIGN_TEMPERATURES, (alpha_sd, 0.0, -alpha_sd)))  # H6's boundary null
    rows, tokens, out = [], [], {}
    for k, p in enumerate(prompts):
        q = qi[p["twin_of"] or p["id"]]
        poisoned = p["variant"] == "poisoned"
        health_dev = q_health[q] + rng.normal(0, HEALTH_PROMPT_SD)
        health = 5 + health_dev + HEALTH_PER_LOG_LENGTH * z[k] - (plant.h4 * pair_sd[0] if poisoned else 0)
        # H1: entropy = ... + beta * health_dev with beta for partial correlation plant.h1 given length
        beta = -plant.h1 / math.sqrt(max(1e-12, 1 - plant.h1 ** 2)) * entropy_sd / health_sd
        entropy = (2 + q_entropy[q] + rng.normal(0, ENTROPY_PROMPT_SD) + ENTROPY_PER_LOG_LENGTH * z[k]
                   + beta * health_dev + (plant.h4 * pair_sd[1] if poisoned else 0))
        a_mean = float(np.clip(ALPHA_MEAN + q_alpha[q] + rng.normal(0, ALPHA_PROMPT_SD), 0.05, 0.95))
        in_subset = p["id"] in subset
        m = int(rng.integers(TOKENS_PER_PROMPT[0], TOKENS_PER_PROMPT[1] + 1))
        level = 2 + rng.normal(0, DRAFT_ENTROPY_PROMPT_SD)
        draft_h = np.abs(level + rng.normal(0, DRAFT_ENTROPY_TOKEN_SD, m))
        a_main = a_mean + (shifts[1.0] if in_subset else 0.0)
        prob = np.clip(a_main - plant.h2 * (draft_h - level), 0.02, 0.98)
        accepted = rng.random(m) < prob
        row = {**p, "context_health": float(health), "mean_entropy_bits": float(entropy),
               "alpha": float(accepted.mean())}
        if in_subset:
            for t, col in zip(DESIGN_TEMPERATURES, H6_COLUMNS):
                row[col] = (row["alpha"] if t == 1.0 else
                            float(rng.binomial(m, float(np.clip(a_mean + shifts[t], 0.02, 0.98))) / m))
        rows.append(row)
        tokens += [{"prompt_id": p["id"], "draft_entropy_bits": h, "accepted": a, "tested": True}
                   for h, a in zip(draft_h.tolist(), accepted.tolist())]
        if decodes:
            out[p["id"]] = _decode(rng, entropy, q_subword[q] + plant.h5 * SUBWORD_QUESTION_SD)
    return rows, tokens, out


def _decode(rng: np.random.Generator, mean_entropy: float, initial_shift: float) -> dict[str, list]:
    """Word labels and entropies of one decode: words of 1-3 pieces, entropies around the prompt's mean."""
    words, ent = [], []
    for _ in range(WORDS_PER_DECODE):
        k = int(rng.integers(1, 4))
        words += [""] if k == 1 else ["initial"] + ["continuation"] * (k - 1)
        ent += list(np.abs(mean_entropy + rng.normal(0, 1.0, k)) + ([initial_shift] + [0.0] * (k - 1)))
    return {"entropy_bits": [float(e) for e in ent], "word": words}


# --------------------------------------------------------------------------- lab intervene's triples
# Simulated triples for the size and power checks of :mod:`lab.analysis.intervention`, apart from the
# study's simulation above. Per triple: a question level, a twin effect per twin, each twin's own
# response to masking (the masking shift varies by twin), noise per (twin, arm), and a random effect of
# the distractor on the poisoned twin's pull (mean ``effect_bits``, scaled by the attention lambda the arm
# leaves to the span). Beta falls with entropy by BETA_PER_BIT plus its own noise per (twin, arm).

TRIPLE_ENTROPY_MEAN = 2.0
TRIPLE_ARM_SD = 0.06  # a twin's mean entropy over 24 tokens, arm to arm
TRIPLE_MASK_TWIN_SD = 0.04  # how much masking moves each twin, twin to twin
TRIPLE_MASK_SHIFT_BITS = 0.1  # masking any added text moves both twins alike (cancels in the differences)
TRIPLE_DISTRACTOR_SD = 0.06  # the distractor text's own pull: the random effect the tests must cluster on
TRIPLE_A2_GAP_SD = 0.01  # position-only: the twins at one offset differ by little more than rounding
TRIPLE_C_PLUS_BITS, TRIPLE_C_PLUS_SD = 0.5, 0.1  # masking the question moves entropy by about half a bit
BETA_MEAN, BETA_PER_BIT, BETA_ARM_SD = 0.6, -0.2, 0.01  # 0.05 bits of entropy <-> 0.01 of beta
TRIPLE_ARM_LAMBDA = {"A0": 1.0, "empty": 1.0, "A1": 0.0, "L0.5": 0.5, "L0.25": 0.25, "sink": 1.0, "C+": 1.0, "A2": 0.0}


def simulate_triples(n_triples: int, n_distractors: int, *, seed: int, effect_bits: float = 0.0,
                     a2_gap_bits: float = 0.0, mask_shift_bits: float = TRIPLE_MASK_SHIFT_BITS) -> list:
    """Simulated :class:`lab.analysis.intervention.TripleSummary` objects, distractors in turn (balanced).

    Args:
        seed: Seed of the generator.
        effect_bits: The distractor's mean pull on the poisoned twin's entropy at full attention: plants
            did_entropy, h4b_forced and the dose slope at ``effect_bits`` and did_beta at
            ``-BETA_PER_BIT * effect_bits``.
        a2_gap_bits: A P - N gap under A2 (a position-only breach).
        mask_shift_bits: Masking's common shift of both twins' entropy (0: masking moves nothing).
    """
    from lab.analysis.intervention import ARMS, VARIANTS, TripleSummary

    rng = np.random.default_rng(seed)
    lam = np.array([TRIPLE_ARM_LAMBDA[a] for a in ARMS])  # (arms,)
    dist = np.arange(n_triples) % n_distractors
    pull = effect_bits + rng.normal(0, TRIPLE_DISTRACTOR_SD, n_distractors)[dist]  # (n,)
    level = rng.normal(TRIPLE_ENTROPY_MEAN, ENTROPY_QUESTION_SD, n_triples)[:, None, None]
    twin = rng.normal(0, ENTROPY_PROMPT_SD, (n_triples, 2, 1))
    mask = mask_shift_bits + rng.normal(0, TRIPLE_MASK_TWIN_SD, (n_triples, 2, 1))
    poisoned = np.array([1.0, 0.0])[None, :, None]  # VARIANTS = ("P", "N")
    dev = (twin + (1 - lam) * mask + poisoned * lam * pull[:, None, None]
           + rng.normal(0, TRIPLE_ARM_SD, (n_triples, 2, len(ARMS))))  # (n, twins, arms)
    a0, a2, cp = ARMS.index("A0"), ARMS.index("A2"), ARMS.index("C+")
    dev[:, :, ARMS.index("empty")] = dev[:, :, a0]
    dev[:, :, cp] = dev[:, :, a0] + rng.normal(TRIPLE_C_PLUS_BITS, TRIPLE_C_PLUS_SD, (n_triples, 2))
    dev[:, 0, a2] = dev[:, 1, a2] + a2_gap_bits + rng.normal(0, TRIPLE_A2_GAP_SD, n_triples)
    entropy = level + dev
    beta = BETA_MEAN + BETA_PER_BIT * dev + rng.normal(0, BETA_ARM_SD, dev.shape)
    m = rng.uniform(0.1, 0.3, (n_triples, 2, 1))
    span = lam * m / (1 - m + lam * m)  # a logit shift of log(lambda) on a span of mass m
    sink = np.where(np.array(ARMS) == "sink", 0.0, 0.5) + np.zeros_like(span)
    keys = [(v, a) for v in VARIANTS for a in ARMS]
    tables = [x.reshape(n_triples, -1).tolist() for x in (entropy, beta, span, sink)]
    return [TripleSummary(f"q{i:04d}", "code", f"d{dist[i]:02d}", *(dict(zip(keys, t[i])) for t in tables), 1e-6)
            for i in range(n_triples)]


def simulated_triple_sd() -> dict[str, tuple[float, float]]:
    """Each intervention test's per-triple SD and its share between distractors (icc) under
    :func:`simulate_triples`, from the constants (the power the analysis claims is checked against these)."""
    from lab.analysis.intervention import DOSE

    lam = np.array([x for _, x in DOSE])
    s_ll = float(((lam - lam.mean()) ** 2).sum())
    mask, arm, u = 2 * TRIPLE_MASK_TWIN_SD ** 2, TRIPLE_ARM_SD ** 2, TRIPLE_DISTRACTOR_SD ** 2
    within = {"did_entropy": mask + 4 * arm, "dose": mask + 2 * arm / s_ll,
              "h4b_forced": 2 * ENTROPY_PROMPT_SD ** 2 + 2 * arm,
              "did_beta": BETA_PER_BIT ** 2 * (mask + 4 * arm) + 4 * BETA_ARM_SD ** 2}
    between = {k: (BETA_PER_BIT ** 2 if k == "did_beta" else 1.0) * u for k in within}
    return {k: (math.sqrt(within[k] + between[k]), between[k] / (within[k] + between[k])) for k in within}


def label_blind_masking(triples) -> np.ndarray:
    """The label-swap control's planted breach: the twins' masking effects summed, not differenced,
    [H(P,A1) - H(P,A0)] + [H(N,A1) - H(N,A0)] per triple, a statistic that P and N trading places leaves
    unchanged (it reads masking in general, not the distractor)."""
    def e(v, a):
        return np.array([t.entropy[v, a] for t in triples])

    return (e("P", "A1") - e("P", "A0")) + (e("N", "A1") - e("N", "A0"))


# --------------------------------------------------------------------------- H4's pairs by distractor text
# Poisoned - neutral differences of twin pairs whose distractor text pulls all its pairs alike (a random
# effect of the text), apart from the simulations above: the size and power checks of
# :mod:`lab.analysis.distractors`.

H4_PAIR_SD = math.sqrt(2) * ENTROPY_PROMPT_SD  # H4b's pair difference in simulate_study, within a text


def simulate_distractor_pairs(n_distractors: int, pairs_each: int, *, seed: int, distractor_sd: float,
                              effect: float = 0.0, pair_sd: float = H4_PAIR_SD) -> tuple[np.ndarray, list[str]]:
    """Differences ``effect + u_text + e_pair`` (u ~ N(0, distractor_sd), e ~ N(0, pair_sd)) and their texts'
    labels, ``pairs_each`` pairs a text (balanced, as the study's prompt sets); shape
    ``(n_distractors * pairs_each,)``."""
    rng = np.random.default_rng(seed)
    text = np.repeat(np.arange(n_distractors), pairs_each)
    d = effect + rng.normal(0, distractor_sd, n_distractors)[text] + rng.normal(0, pair_sd, text.size)
    return d, [f"d{i:02d}" for i in text]
