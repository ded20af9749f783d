"""Simulated studies with the structure of `make study`, for the size and power checks of the hypothesis tests.

Not a test module: :mod:`tests.statistical.test_hypothesis_size` draws its data here. A
simulated study has the embedded prompt set's own rows (ids, categories, variants,
``twin_of``: 66 clean prompts, 18 poisoned and 18 neutral twins, so 18 questions are
asked three times), prompt lengths from the prompts' own text, and the H6 temperature
subset that :func:`lab.study.work.temperature_subset` chooses. Its numbers are drawn with
the structure the study's data have (every standard deviation is a named constant):

* context health and mean decode entropy carry a random effect of the question, shared
  by a triple, and both drift with log prompt length (which H1 holds fixed);
* H1's context measure ``lookback_heads`` exists for the twins only (NaN for a clean prompt, as
  the study records it), with a question effect shared by a question's two twins and a drift
  with log length; it is drawn from a generator of its own (``[seed, 1]``), so the draws of
  every other column are those of the study without it;
* per-prompt alpha carries a question effect and a prompt effect; the tested drafted
  tokens (:data:`TOKENS_PER_PROMPT`, as the study's 24 new tokens at gamma 2 give) draw
  acceptance from the prompt's alpha, and their draft entropies share a prompt level,
  so tokens are correlated within a prompt in both variables;
* the decode's word labels and entropies (H5) carry a question effect on the
  initial-minus-continuation difference, with mean 0;
* the H6 subset's alpha at 0.3, 0.7 and 1.0 shifts by +s, 0, -s on the alpha scale with
  s equal to the prompts' SD of alpha: the boundary of H6's null (the temperatures'
  variance equals the prompts').

:class:`Plant` adds an effect to one hypothesis; the default plants nothing. A plant moves
values and never draws from the generator, so a seed gives the same null study whatever
the plant fields.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats
from scipy.optimize import brentq

from lab.analysis.claims import DESIGN_TEMPERATURES, H6_COLUMNS
from lab.prompts import load_prompts
from lab.study.work import temperature_subset

HEALTH_QUESTION_SD, HEALTH_PROMPT_SD = 1.0, 1.0  # a triple's healths correlate at about 0.5
ENTROPY_QUESTION_SD, ENTROPY_PROMPT_SD = 0.35, 0.3  # ... and its mean entropies at about 0.6
ENTROPY_MEAN = 2.0  # a prompt's mean decode entropy, mean over prompts (bits)
HEALTH_PER_LOG_LENGTH, ENTROPY_PER_LOG_LENGTH = -0.4, 0.15  # drifts per SD of log length
ALPHA_MEAN, ALPHA_QUESTION_SD, ALPHA_PROMPT_SD = 0.5, 0.1, 0.1  # prompts' SD of alpha about 0.14
TOKENS_PER_PROMPT = (10, 24)  # tested drafted tokens per prompt, uniform between these
# draft entropy's intra-prompt correlation 0.5; with alpha's (about 0.08) and ~17 tokens a prompt,
# a test that takes tokens as independent rejects about 13 % of null studies at 5 %
DRAFT_ENTROPY_PROMPT_SD, DRAFT_ENTROPY_TOKEN_SD = 1.0, 1.0
DRAFT_ENTROPY_MEAN = 2.0  # a prompt's draft entropy level, mean over prompts (bits; tokens' are folded at 0)
SUBWORD_QUESTION_SD = 0.3  # H5: a question's words shift initial - continuation (mean 0)
WORDS_PER_DECODE = 10
DECODE_TOKEN_SD = 1.0  # a decoded token's entropy about its prompt's mean entropy (bits)
# H1's lookback_heads (twins only): a question's two twins correlate at about 0.5; it drifts with length a
# little (the measure is referenced to length, the study's twins' lengths vary with their distractor)
LOOKBACK_QUESTION_SD, LOOKBACK_PROMPT_SD = 0.05, 0.05
LOOKBACK_PER_LOG_LENGTH = -0.01


@dataclass(frozen=True)
class Plant:
    """Effects to plant (0: none), each positive in the direction its hypothesis predicts. Units:

    * ``h1``: the partial Pearson correlation of ``lookback_heads`` and entropy given length among the twins
      (planted negative; clean prompts carry no value and no plant);
    * ``h2``: the point-biserial r of draft entropy and acceptance over all tested tokens (planted
      negative), by a drop in acceptance probability with a token's draft entropy about its prompt's
      level (:func:`draft_entropy_slope`);
    * ``h3``: the population eta^2_H of H3 on the clean prompts' alpha (:func:`category_rank_share`), by
      moving every prompt's alpha level by its category's shift (:func:`category_shifts`);
    * ``h4``: the poisoned - neutral shift in SDs of the pair difference (health down, entropy up);
    * ``h5``: the population matched-pairs rank-biserial r of the per-question initial - continuation
      differences (:func:`subword_shift_bits`);
    * ``h6c``: the share of the variance of an H6-subset prompt's mean alpha over the temperatures that
      category explains (population epsilon^2), by shifting the subset prompts' alpha at every
      temperature by their category's shift.
    """

    h1: float = 0.0
    h2: float = 0.0
    h3: float = 0.0
    h4: float = 0.0
    h5: float = 0.0
    h6c: float = 0.0


def study_prompts(path: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """A prompt set's rows (default: the embedded set; ``limit`` selects as ``lab study --limit``): id,
    category, variant, twin_of, n_prompt_tokens (about 1.3 tokens a word of the messages plus 20 for the chat
    template)."""
    from lab.prompts import select_prompts

    out = []
    for p in select_prompts(load_prompts(path), limit):
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


def _mean_inverse_tokens() -> float:
    """E[1/m] for m tested drafted tokens a prompt, uniform on :data:`TOKENS_PER_PROMPT`."""
    return float((1 / np.arange(TOKENS_PER_PROMPT[0], TOKENS_PER_PROMPT[1] + 1)).mean())


def category_shifts(categories) -> dict[str, float]:
    """Each category's alpha shift per unit of between-category SD: evenly spaced over the sorted
    categories, mean 0 and SD 1 over categories (which weigh alike: the study's are balanced)."""
    names = sorted(set(categories))
    x = np.linspace(-1.0, 1.0, len(names))
    return dict(zip(names, (x / x.std()).tolist()))


QUADRATURE_NODES = 40  # Gauss-Hermite nodes over a prompt's alpha level: 160 move the rank share by < 1e-4


@functools.cache
def _alpha_atoms() -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """The values a prompt's alpha can take (k / m, sorted, distinct) and, per m, where k = 0..m sit in them."""
    fractions = {m: np.round(np.arange(m + 1) / m, 12) for m in range(TOKENS_PER_PROMPT[0], TOKENS_PER_PROMPT[1] + 1)}
    values = np.unique(np.concatenate(list(fractions.values())))
    return values, {m: np.searchsorted(values, f) for m, f in fractions.items()}


def _clean_alpha_pmf(shift: float, subset_share: float) -> np.ndarray:
    """Probabilities of a clean prompt's alpha over :func:`_alpha_atoms`, as :func:`simulate_study` draws it,
    its level moved by ``shift``: level clip(ALPHA_MEAN + N(0, s) + shift, 0.05, 0.95) (s the prompts' SD of
    alpha), less s on the H6 subset (a share ``subset_share``), m uniform on TOKENS_PER_PROMPT, alpha
    Binomial(m, clip(level, 0.02, 0.98)) / m."""
    z, w = np.polynomial.hermite_e.hermegauss(QUADRATURE_NODES)  # standard normal nodes, weights sum to sqrt(2 pi)
    s = math.hypot(ALPHA_QUESTION_SD, ALPHA_PROMPT_SD)
    level = np.clip(ALPHA_MEAN + s * z + shift, 0.05, 0.95)
    prob = np.clip(level[None, :] - np.array([0.0, s])[:, None], 0.02, 0.98)  # [2 (outside, in subset), nodes]
    weight = np.array([1 - subset_share, subset_share])[:, None] * (w / w.sum())[None, :]  # [2, nodes]
    values, where = _alpha_atoms()
    out = np.zeros(values.size)
    for m, idx in where.items():
        out[idx] += (stats.binom.pmf(np.arange(m + 1)[:, None, None], m, prob[None]) * weight).sum(axis=(1, 2))
    return out / len(where)


def category_rank_share(category_sd: float, subset_share: float) -> float:
    """Population eta^2_H of H3 (the limit of Kruskal-Wallis H / n): the share of the variance of a clean
    prompt's mid-rank in the pooled alpha (ties counted half, as the test's tie correction does) that lies
    between categories, each category's levels moved by ``category_sd`` times its :func:`category_shifts`."""
    pattern = category_shifts(p["category"] for p in _prompts()).values()
    pmf = np.array([_clean_alpha_pmf(category_sd * c, subset_share) for c in pattern])  # [categories, atoms]
    pooled = pmf.mean(axis=0)
    mid_rank = np.cumsum(pooled) - pooled / 2  # P(alpha' < a) + P(alpha' = a) / 2
    between = float(((pmf @ mid_rank - 0.5) ** 2).mean())
    return between / ((1 - float((pooled ** 3).sum())) / 12)


@functools.cache
def category_sd_for_rank_share(share: float, subset_share: float) -> float:
    """The between-category SD of alpha levels whose :func:`category_rank_share` is ``share`` (0 <= share < 0.8)."""
    return float(brentq(lambda sd: category_rank_share(sd, subset_share) - share, 0.0, 1.0)) if share else 0.0


def subset_mean_alpha_sd() -> float:
    """SD of an H6-subset prompt's mean alpha over the design temperatures within its category, no effect
    planted: the prompt's level and the binomial noise at each temperature (alpha ALPHA_MEAN + shift_t)."""
    s2 = ALPHA_QUESTION_SD ** 2 + ALPHA_PROMPT_SD ** 2
    t = len(DESIGN_TEMPERATURES)
    bernoulli = sum((ALPHA_MEAN + shift) * (1 - ALPHA_MEAN - shift) - s2  # sum over t of E[a (1 - a)]
                    for shift in (math.sqrt(s2), 0.0, -math.sqrt(s2)))
    return math.sqrt(s2 + bernoulli / t ** 2 * _mean_inverse_tokens())


@functools.cache
def draft_entropy_slope(r: float, mean_acceptance: float) -> float:
    """The drop in acceptance probability per bit of a token's draft entropy about its prompt's level that
    gives a point-biserial r of -r between draft entropy and acceptance over all tokens (clipping aside).

    Draft entropy is |X|, X = level + token noise ~ N(DRAFT_ENTROPY_MEAN, sd): acceptance's covariance with
    it is -slope Cov(|X| - level, |X|), and the level's share of X gives Cov(level, |X|) = share Cov(X, |X|).

    Args:
        r: The point-biserial r to plant, in the predicted direction (acceptance falls with entropy).
        mean_acceptance: Acceptance's mean over tokens (its SD is that of a Bernoulli).
    """
    mu, sd = DRAFT_ENTROPY_MEAN, math.hypot(DRAFT_ENTROPY_PROMPT_SD, DRAFT_ENTROPY_TOKEN_SD)
    share = (DRAFT_ENTROPY_PROMPT_SD / sd) ** 2
    e_abs = float(stats.norm.expect(abs, loc=mu, scale=sd))
    e_x_abs = float(stats.norm.expect(lambda x: x * abs(x), loc=mu, scale=sd))
    var_abs = mu ** 2 + sd ** 2 - e_abs ** 2
    cov = var_abs - share * (e_x_abs - mu * e_abs)
    return r * math.sqrt(var_abs * mean_acceptance * (1 - mean_acceptance)) / cov


@functools.cache
def _subword_noise_var() -> float:
    """Variance of one decode's mean initial minus mean continuation entropy about its planted shift:
    E[Var |mu + e|] E[1/I + 1/C | I >= 1], e ~ N(0, DECODE_TOKEN_SD) about the prompt's mean entropy mu
    (normal over prompts: question, prompt and length effects), over :func:`_decode`'s words (1, 2 or 3
    pieces alike; I words of 2 or more pieces, C their continuations)."""
    i = np.arange(1, WORDS_PER_DECODE + 1)[:, None]  # multi-piece words
    j = np.arange(WORDS_PER_DECODE + 1)[None, :]  # three-piece words among them
    weight = stats.binom.pmf(i, WORDS_PER_DECODE, 2 / 3) * stats.binom.pmf(j, i, 0.5)  # [I, J]
    mu_sd = math.sqrt(ENTROPY_QUESTION_SD ** 2 + ENTROPY_PROMPT_SD ** 2 + ENTROPY_PER_LOG_LENGTH ** 2)
    folded = float(stats.norm.expect(lambda mu: stats.foldnorm.var(abs(mu) / DECODE_TOKEN_SD),
                                     loc=ENTROPY_MEAN, scale=mu_sd)) * DECODE_TOKEN_SD ** 2
    return folded * float((weight * (1 / i + 1 / (i + j))).sum() / weight.sum())


@functools.cache
def subword_shift_bits(r: float) -> float:
    """The initial - continuation entropy shift (bits) whose per-question differences have population
    matched-pairs rank-biserial r = 2 P(d_i + d_j > 0) - 1 (Kerby 2014), with d_q normal about the shift with
    variance SUBWORD_QUESTION_SD^2 + noise / (the question's prompts): a mixture over questions of 1 and 3."""
    sizes = np.array(list(Counter(p["twin_of"] or p["id"] for p in _prompts()).values()))
    var = SUBWORD_QUESTION_SD ** 2 + _subword_noise_var() / sizes  # [questions]
    pair_sd = np.sqrt(var[:, None] + var[None, :])

    def gap(shift: float) -> float:
        return 2 * float(stats.norm.cdf(2 * shift / pair_sd).mean()) - 1 - r

    return float(brentq(gap, -10.0, 10.0))


def pair_design_prompts() -> tuple[dict[str, Any], ...]:
    """The rows of the pair's study design: ``--limit 344`` of the power set (172 clean prompts, 86 twin pairs)."""
    return _pair_prompts()


@functools.cache
def _pair_prompts() -> tuple[dict[str, Any], ...]:
    from importlib import resources

    return tuple(study_prompts(str(resources.files("lab") / "data" / "prompts_power.jsonl"), 344))


def simulate_study(seed: int, plant: Plant = Plant(), subset: frozenset[str] | None = None, *, decodes: bool = True,
                   prompts: tuple[dict[str, Any], ...] | None = None
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, dict[str, list]]]:
    """One simulated study: ``(per_prompt rows, per_token rows, decodes)`` for :func:`lab.analysis.study.analyze`.

    Args:
        seed: Seed of the generator (one study per seed).
        plant: Effects to plant.
        subset: H6's temperature subset; ``None``: :func:`h6_subset`.
        decodes: Draw the decodes (H5); ``False`` leaves them empty (faster, for checks of other tests).
        prompts: The design's rows (:func:`study_prompts`); ``None``: the embedded set's.
    """
    rng = np.random.default_rng(seed)
    prompts = _prompts() if prompts is None else prompts
    subset = h6_subset() if subset is None else subset
    questions = sorted({p["twin_of"] or p["id"] for p in prompts})
    qi = {q: i for i, q in enumerate(questions)}
    nq = len(questions)
    q_health, q_entropy = rng.normal(0, HEALTH_QUESTION_SD, nq), rng.normal(0, ENTROPY_QUESTION_SD, nq)
    rng_lb = np.random.default_rng([seed, 1])  # H1's measure: its own draws, the other columns' unchanged
    q_lookback, lookback_sd = rng_lb.normal(0, LOOKBACK_QUESTION_SD, nq), math.hypot(LOOKBACK_QUESTION_SD,
                                                                                     LOOKBACK_PROMPT_SD)
    q_alpha, q_subword = rng.normal(0, ALPHA_QUESTION_SD, nq), rng.normal(0, SUBWORD_QUESTION_SD, nq)
    logn = np.log([p["n_prompt_tokens"] for p in prompts])
    z = (logn - logn.mean()) / logn.std()
    entropy_sd = math.hypot(ENTROPY_QUESTION_SD, ENTROPY_PROMPT_SD)
    pair_sd = math.sqrt(2) * HEALTH_PROMPT_SD, math.sqrt(2) * ENTROPY_PROMPT_SD
    alpha_sd = math.hypot(ALPHA_QUESTION_SD, ALPHA_PROMPT_SD)
    shifts = dict(zip(DESIGN_TEMPERATURES, (alpha_sd, 0.0, -alpha_sd)))  # H6's boundary null
    n_subset = sum(p["id"] in subset for p in prompts)
    n_clean = sum(p["variant"] == "clean" for p in prompts)
    category = category_shifts(p["category"] for p in prompts)
    h3_sd = category_sd_for_rank_share(plant.h3, n_subset / n_clean)  # between-category SD of alpha levels
    h6c_sd = math.sqrt(plant.h6c / (1 - plant.h6c)) * subset_mean_alpha_sd()
    slope = draft_entropy_slope(plant.h2, ALPHA_MEAN - n_subset / len(prompts) * alpha_sd) if plant.h2 else 0.0
    subword_shift = subword_shift_bits(plant.h5) if plant.h5 else 0.0
    rows, tokens, out = [], [], {}
    for k, p in enumerate(prompts):
        q = qi[p["twin_of"] or p["id"]]
        poisoned = p["variant"] == "poisoned"
        in_subset = p["id"] in subset
        health_dev = q_health[q] + rng.normal(0, HEALTH_PROMPT_SD)
        health = 5 + health_dev + HEALTH_PER_LOG_LENGTH * z[k] - (plant.h4 * pair_sd[0] if poisoned else 0)
        twin = p["variant"] != "clean"
        lookback_dev = q_lookback[q] + rng_lb.normal(0, LOOKBACK_PROMPT_SD) if twin else 0.0
        lookback = 0.5 + lookback_dev + LOOKBACK_PER_LOG_LENGTH * z[k] if twin else math.nan
        # H1: a twin's entropy = ... + beta * lookback_dev, beta for partial correlation plant.h1 given length
        beta = -plant.h1 / math.sqrt(max(1e-12, 1 - plant.h1 ** 2)) * entropy_sd / lookback_sd
        entropy = (ENTROPY_MEAN + q_entropy[q] + rng.normal(0, ENTROPY_PROMPT_SD) + ENTROPY_PER_LOG_LENGTH * z[k]
                   + beta * lookback_dev + (plant.h4 * pair_sd[1] if poisoned else 0))
        a_mean = float(np.clip(ALPHA_MEAN + q_alpha[q] + rng.normal(0, ALPHA_PROMPT_SD)
                               + category[p["category"]] * (h3_sd + (h6c_sd if in_subset else 0.0)), 0.05, 0.95))
        m = int(rng.integers(TOKENS_PER_PROMPT[0], TOKENS_PER_PROMPT[1] + 1))
        level = DRAFT_ENTROPY_MEAN + rng.normal(0, DRAFT_ENTROPY_PROMPT_SD)
        draft_h = np.abs(level + rng.normal(0, DRAFT_ENTROPY_TOKEN_SD, m))
        a_main = a_mean + (shifts[1.0] if in_subset else 0.0)
        prob = np.clip(a_main - slope * (draft_h - level), 0.02, 0.98)
        accepted = rng.random(m) < prob
        row = {**p, "context_health": float(health), "lookback_heads": float(lookback),
               "mean_entropy_bits": float(entropy),
               "alpha": float(accepted.mean())}
        if in_subset:
            for t, col in zip(DESIGN_TEMPERATURES, H6_COLUMNS):
                row[col] = (row["alpha"] if t == 1.0 else
                            float(rng.binomial(m, float(np.clip(a_mean + shifts[t], 0.02, 0.98))) / m))
        rows.append(row)
        tokens += [{"prompt_id": p["id"], "draft_entropy_bits": h, "accepted": a, "tested": True}
                   for h, a in zip(draft_h.tolist(), accepted.tolist())]
        if decodes:
            out[p["id"]] = _decode(rng, entropy, q_subword[q] + subword_shift)
    return rows, tokens, out


def _decode(rng: np.random.Generator, mean_entropy: float, initial_shift: float) -> dict[str, list]:
    """Word labels and entropies of one decode: words of 1-3 pieces, entropies around the prompt's mean."""
    words, ent = [], []
    for _ in range(WORDS_PER_DECODE):
        k = int(rng.integers(1, 4))
        words += [""] if k == 1 else ["initial"] + ["continuation"] * (k - 1)
        ent += list(np.abs(mean_entropy + rng.normal(0, DECODE_TOKEN_SD, k)) + ([initial_shift] + [0.0] * (k - 1)))
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
