"""The seed's other two claims as pre-stated hypotheses: H5 and H6.

* **H5** subword commitment points: within a word made of several sub-tokens, the
  first sub-token carries more decode entropy than the sub-tokens completing it.
  Word boundaries come from the tokenizer's own decoding of each generated token
  (:func:`word_positions`: a piece ending in letters opens a word; a piece glued to
  it, starting with a letter, digit, ``_`` or a byte fragment, continues it); never
  from a vocabulary list. Per prompt, the mean entropy (bits) at
  word-initial sub-tokens of multi-token words and at their continuations; paired
  Wilcoxon signed-rank on initial - continuation over prompts, effect the
  matched-pairs rank-biserial r with a BCa CI, predicted > 0. **Negative control**:
  the same test with the labels shuffled within each prompt (fixed seed); it must
  not reject at :data:`ALPHA`, else H5 is ``inconclusive`` whatever its p.
* **H6** content moves acceptance more than the sampling temperature: on a balanced
  subset of clean prompts the speculative decode runs at temperatures 0.3, 0.7 and 1.0
  (same seed and budget; top-p is not varied). The prompts x temperatures table of alpha
  is read as a two-way layout with one run per cell, the prompt-by-temperature
  interaction as error (Searle, Casella & McCulloch 1992, ch. 4): with P prompts, T
  temperatures and mean squares MS_prompt, MS_temp, MS_error,
  ``sigma^2_prompt = (MS_prompt - MS_error) / T`` (prompts random) and
  ``sigma^2_temp = (MS_temp - MS_error) / P``, the latter estimating
  ``sum_t tau_t^2 / (T - 1)``, the variance of the temperatures' fixed effects. Both are
  unbiased, and both subtract the same run-to-run noise. Effect = sigma^2_prompt -
  sigma^2_temp (alpha^2 units), predicted > 0, smallest effect of interest
  :data:`SMALLEST_VARIANCE_GAP`. p and CI: the delete-one-prompt jackknife standard
  error (Efron & Stein 1981), t on P - 1 df. The shares of the total variance are in
  ``details``. Simulated at the boundary null (sigma^2_prompt = sigma^2_temp) the test
  rejects with the predicted sign less often than its nominal one-sided rate
  (tests/statistical/test_hypothesis_size.py).
* **H6c** category on the same subset: epsilon^2 of category on each prompt's mean
  alpha over the temperatures, ``(SS_between - (k - 1) MS_within) / SS_total`` (Kelley
  1935; about 0 without an effect, unlike eta^2, which takes in prompt-to-prompt
  variance with few prompts per category); p from a permutation of the category labels
  over prompts; CI from a bootstrap of prompts within each category (percentile).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

from lab.analysis.effects import bootstrap_ci, rank_biserial_paired
from lab.analysis.hypotheses import (ALPHA, FAMILY_CI_LEVEL, HYPOTHESES, MIN_N, N_RESAMPLES, SMALLEST_EFFECT,
                                     SMALLEST_ETA_SQ, TestResult, untested_result)

INITIAL, CONTINUATION = "initial", "continuation"
DESIGN_TEMPERATURES = (0.3, 0.7, 1.0)  # H6: stated in advance, low / middle / the study's own
# H6's smallest effect of interest, in alpha^2: prompts spread alpha more than temperatures by at
# least the variance of a +-0.05 swing in alpha, half the run-to-run resolution of alpha over the
# ~20 tested tokens of a study run (binomial SD about 0.1).
SMALLEST_VARIANCE_GAP = 0.05 ** 2
H6_PERMUTATIONS = 1999  # H6c's label permutations; p = (1 + #{stat* >= stat}) / (1 + permutations)
PERMUTATION_TIE = 1e-12  # a permuted epsilon^2 this close to the observed one counts as equal (float rounding)


def temperature_column(temperature: float) -> str:
    """The per-prompt column holding alpha at one design temperature (``alpha_t0.3``)."""
    return f"alpha_t{temperature:g}"


H6_COLUMNS = tuple(temperature_column(t) for t in DESIGN_TEMPERATURES)


# A byte-level BPE (Qwen2.5, GPT-2) splits a multi-byte UTF-8 character over tokens;
# decoded alone, each such token gives U+FFFD. It is part of the character (and so of
# the word) its neighbours complete, so it counts as a letter here.
BYTE_FRAGMENT = "\ufffd"


def _letter(ch: str) -> bool:
    return ch.isalpha() or ch == BYTE_FRAGMENT


def _word_char(ch: str) -> bool:
    """Characters that keep a word going when glued to it: letters, byte fragments, and the
    digits and underscores of code identifiers (``values_list``, ``utf8``)."""
    return _letter(ch) or ch.isdigit() or ch == "_"


def _opens(piece: str) -> bool:
    """The piece ends in a run of word characters holding a letter: a word may start there."""
    run = len(piece)
    while run > 0 and _word_char(piece[run - 1]):
        run -= 1
    return run < len(piece) and any(_letter(ch) for ch in piece[run:])


def word_positions(pieces: Sequence[str]) -> list[str]:
    """Label each decoded token piece ``"initial"``, ``"continuation"`` or ``""``.

    A piece *continues* the open word when it starts with a word character (a letter,
    a byte fragment U+FFFD, a digit or ``_``) and no whitespace: the tokenizer split the
    word (``" unbelie" + "vably"``, ``" snake" + "_case"``, ``" �" + "�" + "mega"`` for
    ``Ωmega``). Otherwise a piece *opens* a word when it ends in a run of word
    characters holding a letter (``" compute"``, ``"(values"``); a piece ending in
    anything else (``"):\n"``, ``"."``) closes it. Only words of two or more pieces
    are labelled (opener ``"initial"``, the rest ``"continuation"``); other pieces
    (single-piece words, punctuation, numbers, newlines) get ``""``. Works on the
    tokenizer's own decoding, for SentencePiece (``▁``) and byte-level BPE (``Ġ``)
    alike, since both decode a word-initial token to a leading space.

    Args:
        pieces: ``tokenizer.decode([id])`` of each generated token, in order.

    Returns:
        One label per piece.
    """
    labels = [""] * len(pieces)
    word: list[int] = []

    def close() -> None:
        if len(word) >= 2:
            labels[word[0]] = INITIAL
            for j in word[1:]:
                labels[j] = CONTINUATION
        word.clear()

    for i, piece in enumerate(pieces):
        if not piece:
            continue  # decodes to nothing: neither opens nor closes a word
        if word and _word_char(piece[0]):
            word.append(i)  # glued: the same word goes on
            if not _word_char(piece[-1]):
                close()
            continue
        close()
        if _opens(piece):
            word.append(i)
    close()
    return labels


def _prompt_means(entropy: Sequence[float], labels: Sequence[str]) -> tuple[float, float]:
    h = np.asarray(entropy, dtype=float)
    lab = np.asarray(labels)
    ini, con = h[lab == INITIAL], h[lab == CONTINUATION]
    return (float(ini.mean()) if ini.size else math.nan, float(con.mean()) if con.size else math.nan)


def _by_question(values: np.ndarray, questions: Sequence[str]) -> np.ndarray:
    """Mean of ``values`` per question, questions in order of first appearance."""
    order = list(dict.fromkeys(questions))
    q = np.asarray(questions)
    return np.asarray([float(values[q == u].mean()) for u in order])


def _wilcoxon_paired(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    d = a - b
    if d.size < MIN_N or not np.any(d != 0):
        return math.nan, math.nan
    return rank_biserial_paired(d), float(stats.wilcoxon(d).pvalue)


def subword_test(decodes: Mapping[str, Mapping[str, Sequence[Any]]], *, name: str = "H5", seed: int = 0,
                 n_resamples: int = N_RESAMPLES, questions: Mapping[str, str] | None = None,
                 ci_level: float = FAMILY_CI_LEVEL) -> TestResult:
    """H5 with its shuffled-label negative control (module docstring).

    The unit is the question: twins share their question's words, so the per-prompt
    differences (initial - continuation) of one question are averaged before the test.

    Args:
        decodes: Per prompt id: ``entropy_bits`` (one float per generated token) and
            ``word`` (labels from :func:`word_positions`). Prompts without both an
            initial and a continuation token are left out.
        seed: Seed of the shuffle and the bootstrap.
        n_resamples: Bootstrap resamples.
        questions: The question of each prompt id; ``None`` or a missing id: the prompt is
            its own question.
        ci_level: The interval's confidence level.

    Returns:
        A :class:`TestResult`, effect = matched-pairs rank-biserial r of initial -
        continuation, predicted +1; ``details`` holds the control's r and p and
        ``control_rejects``.

    Raises:
        ValueError: a prompt's entropies and labels differ in length.
    """
    test = ("paired Wilcoxon signed-rank over questions (mean entropy at word-initial minus continuation "
            "sub-tokens, prompts of one question averaged); control: labels shuffled within each prompt")
    rng = np.random.default_rng(seed)
    ini, con, ini_s, con_s, qs = [], [], [], [], []
    for pid in sorted(decodes):
        d = decodes[pid]
        h, lab = list(d.get("entropy_bits") or []), list(d.get("word") or [])
        if len(h) != len(lab):
            raise ValueError(f"prompt {pid!r}: {len(h)} entropies but {len(lab)} word labels")
        a, b = _prompt_means(h, lab)
        if not (math.isfinite(a) and math.isfinite(b)):
            continue
        keep = [i for i, w in enumerate(lab) if w]
        shuffled = list(lab)
        for i, w in zip(keep, rng.permutation([lab[i] for i in keep])):
            shuffled[i] = str(w)
        sa, sb = _prompt_means(h, shuffled)
        ini.append(a), con.append(b), ini_s.append(sa), con_s.append(sb)
        qs.append(str((questions or {}).get(pid, pid)))
    a, b = _by_question(np.asarray(ini), qs), _by_question(np.asarray(con), qs)
    n = len(a)
    if n < MIN_N:
        return untested_result(name, test, "rank_biserial_r", n, 1, SMALLEST_EFFECT,
                         f"{n} questions have prompts with both word-initial and continuation sub-tokens; need {MIN_N}")
    r, p = _wilcoxon_paired(a, b)
    if not math.isfinite(p):
        return untested_result(name, test, "rank_biserial_r", n, 1, SMALLEST_EFFECT, "every difference is 0")
    lo, hi = bootstrap_ci((a - b,), rank_biserial_paired, paired=False, method="BCa", seed=seed,
                          n_resamples=n_resamples, level=ci_level)
    ok = np.isfinite(np.asarray(ini_s)) & np.isfinite(np.asarray(con_s))
    q_ok = [q for q, k in zip(qs, ok) if k]
    sa, sb = _by_question(np.asarray(ini_s)[ok], q_ok), _by_question(np.asarray(con_s)[ok], q_ok)
    cr, cp = _wilcoxon_paired(sa, sb)
    control_rejects = bool(math.isfinite(cp) and cp < ALPHA)
    note = ("negative control REJECTED (shuffled labels also differ): the test is not trustworthy here"
            if control_rejects else "")
    return TestResult(name, HYPOTHESES[name], test, "rank_biserial_r", r, lo, hi, p, n, 1, SMALLEST_EFFECT,
                      note=note, ci_level=ci_level,
                      details={"median_difference_bits": float(np.median(a - b)), "n_prompts": len(ini),
                               "control_r": cr, "control_p": cp, "control_rejects": control_rejects,
                               "control_n": int(sa.size)})




def variance_components(alpha: np.ndarray) -> tuple[float, float, float]:
    """(sigma^2_prompt, sigma^2_temp, MS_error) of a prompts x temperatures table (module docstring).

    Args:
        alpha: ``[P prompts, T temperatures]``, finite, P >= 2 and T >= 2.
    """
    p, t = alpha.shape
    grand, rows, cols = alpha.mean(), alpha.mean(axis=1), alpha.mean(axis=0)
    ms_prompt = t * float(((rows - grand) ** 2).sum()) / (p - 1)
    ms_temp = p * float(((cols - grand) ** 2).sum()) / (t - 1)
    resid = alpha - rows[:, None] - cols[None, :] + grand
    ms_error = float((resid ** 2).sum()) / ((p - 1) * (t - 1))
    return (ms_prompt - ms_error) / t, (ms_temp - ms_error) / p, ms_error


def _variance_gap(alpha: np.ndarray) -> float:
    s_prompt, s_temp, _ = variance_components(alpha)
    return s_prompt - s_temp


def _h6_table(alpha_by_prompt: Mapping[str, Sequence[float]]) -> tuple[list[str], np.ndarray]:
    """The prompt ids that ran at every temperature and their ``[P, T]`` table (``[0, 0]`` without any)."""
    ids = [p for p in sorted(alpha_by_prompt) if np.all(np.isfinite(np.asarray(alpha_by_prompt[p], dtype=float)))]
    return ids, np.asarray([alpha_by_prompt[p] for p in ids], dtype=float).reshape(len(ids), -1 if ids else 0)


def content_vs_settings_test(alpha_by_prompt: Mapping[str, Sequence[float]], *, name: str = "H6",
                             ci_level: float = FAMILY_CI_LEVEL) -> TestResult:
    """H6 (module docstring): sigma^2_prompt - sigma^2_temp with a jackknife t over prompts.

    Args:
        alpha_by_prompt: Per prompt id, alpha at each design temperature (same order
            for every prompt); prompts with a non-finite alpha are left out.
        name: Hypothesis name.
        ci_level: The interval's confidence level.

    Returns:
        A :class:`TestResult`, effect = the variance gap (alpha^2), predicted +1; ``details``:
        both components, the error mean square, their shares of the total variance, the
        jackknife standard error and the per-temperature mean alpha.
    """
    test = ("two-way decomposition of alpha (prompts x temperatures, interaction as error): sigma^2_prompt - "
            "sigma^2_temperature; jackknife-over-prompts t on prompts - 1 df")
    effect_name = "variance_gap"
    ids, alpha = _h6_table(alpha_by_prompt)
    if len(ids) < MIN_N or alpha.shape[1] < 2:
        return untested_result(name, test, effect_name, len(ids), 1, SMALLEST_VARIANCE_GAP,
                               f"{len(ids)} prompts ran at every one of {alpha.shape[1]} temperatures; "
                               f"need {MIN_N} prompts and 2 temperatures")
    if np.ptp(alpha) == 0:
        return untested_result(name, test, effect_name, len(ids), 1, SMALLEST_VARIANCE_GAP, "alpha is constant")
    p_n = len(ids)
    gap = _variance_gap(alpha)
    leave_one = np.asarray([_variance_gap(np.delete(alpha, i, axis=0)) for i in range(p_n)])
    se = math.sqrt((p_n - 1) / p_n * float(((leave_one - leave_one.mean()) ** 2).sum()))
    if se == 0:
        return untested_result(name, test, effect_name, p_n, 1, SMALLEST_VARIANCE_GAP,
                               "the jackknife standard error is 0")
    pval = float(2 * stats.t.sf(abs(gap) / se, p_n - 1))
    half = float(stats.t.isf((1 - ci_level) / 2, p_n - 1)) * se
    s_prompt, s_temp, ms_error = variance_components(alpha)
    total = float(alpha.var(ddof=1))
    return TestResult(name, HYPOTHESES[name], test, effect_name, gap, gap - half, gap + half, pval, p_n, 1,
                      SMALLEST_VARIANCE_GAP, ci_level=ci_level, details={
                          "var_prompt": s_prompt, "var_temperature": s_temp, "var_error": ms_error,
                          "share_prompt": s_prompt / total, "share_temperature": s_temp / total, "se": se,
                          "mean_alpha_by_temperature": alpha.mean(axis=0).tolist(), "n_runs": int(alpha.size)})


def epsilon_squared(values: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Epsilon^2 of groups ``codes`` on ``values``, for each row of ``codes``.

    Args:
        values: ``[n]`` floats.
        codes: ``[B, n]`` integer group codes 0..k-1, every group present in each row.

    Returns:
        ``[B]``: ``(SS_between - (k - 1) MS_within) / SS_total`` (NaN where SS_total is 0).
    """
    n, k = values.size, int(codes.max()) + 1
    dev = values - values.mean()
    ss_total = float(dev @ dev)
    onehot = codes[..., None] == np.arange(k)  # [B, n, k]
    sums, counts = (onehot * dev[None, :, None]).sum(axis=1), onehot.sum(axis=1)  # [B, k]
    ss_between = (sums ** 2 / np.maximum(counts, 1)).sum(axis=1)
    ms_within = (ss_total - ss_between) / (n - k)
    return (ss_between - (k - 1) * ms_within) / ss_total if ss_total > 0 else np.full(codes.shape[0], math.nan)


def category_share_test(alpha_by_prompt: Mapping[str, Sequence[float]], categories: Mapping[str, str], *,
                        name: str = "H6c", seed: int = 0, n_resamples: int = N_RESAMPLES,
                        n_permutations: int = H6_PERMUTATIONS, ci_level: float = FAMILY_CI_LEVEL) -> TestResult:
    """H6c (module docstring): epsilon^2 of category on the prompts' mean alpha, permutation p.

    Args:
        alpha_by_prompt: As :func:`content_vs_settings_test`.
        categories: Category of each prompt id.
        seed: Seed of the permutations and the bootstrap.
        n_resamples: Bootstrap resamples (CI only).
        n_permutations: Label permutations (p only).
        ci_level: The interval's confidence level.

    Returns:
        A :class:`TestResult`, effect = epsilon^2, predicted +1; ``details``: the groups'
        sizes and mean alpha.
    """
    test = ("epsilon^2 of category on each prompt's mean alpha over the temperatures; permutation of category "
            "labels; stratified percentile bootstrap CI")
    ids, alpha = _h6_table(alpha_by_prompt)
    cats = np.asarray([categories[p] for p in ids])
    labels, codes = np.unique(cats, return_inverse=True)
    if len(ids) < MIN_N or labels.size < 2 or len(ids) <= labels.size:
        return untested_result(name, test, "epsilon_squared", len(ids), 1, SMALLEST_ETA_SQ,
                               f"{len(ids)} prompts in {labels.size} categories; need {MIN_N} prompts, "
                               "2 categories and more prompts than categories")
    means = alpha.mean(axis=1)
    if np.ptp(means) == 0:
        return untested_result(name, test, "epsilon_squared", len(ids), 1, SMALLEST_ETA_SQ, "alpha is constant")
    rng = np.random.default_rng(seed)
    eps = float(epsilon_squared(means, codes[None, :])[0])
    perms = np.argsort(rng.random((n_permutations, codes.size)), axis=1)
    null = epsilon_squared(means, codes[perms])
    # two-sided, as every test of the family: twice the smaller tail, counting the observed labelling
    upper = float((1 + (null >= eps - PERMUTATION_TIE).sum()) / (1 + n_permutations))
    lower = float((1 + (null <= eps + PERMUTATION_TIE).sum()) / (1 + n_permutations))
    pval = min(1.0, 2 * min(upper, lower))
    strata = [np.flatnonzero(codes == k) for k in range(labels.size)]
    idx = np.concatenate([s[rng.integers(0, s.size, (n_resamples, s.size))] for s in strata], axis=1)  # [B, P]
    boot = np.asarray([epsilon_squared(means[row], codes[row][None, :])[0] for row in idx])  # [n_resamples]
    q = [(1 - ci_level) / 2 * 100, (1 + ci_level) / 2 * 100]
    lo, hi = np.nanpercentile(boot, q).tolist() if np.isfinite(boot).any() else [math.nan, math.nan]  # NaN: 0 resamples
    groups = {str(u): {"n": int((codes == k).sum()), "mean_alpha": float(means[codes == k].mean())}
              for k, u in enumerate(labels)}
    return TestResult(name, HYPOTHESES[name], test, "epsilon_squared", eps, lo, hi, pval, len(ids), 1,
                      SMALLEST_ETA_SQ, ci_level=ci_level, details={"groups": groups})
