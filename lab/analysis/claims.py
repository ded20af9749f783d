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
* **H6** content moves acceptance more than sampling settings: on a balanced subset
  of clean prompts (2 per category) the speculative decode runs at temperatures
  0.3, 0.7 and 1.0 (same seed and budget). In the prompts x temperatures table of
  alpha (balanced, so the sums of squares are orthogonal), eta^2_category =
  SS_category / SS_total and eta^2_temperature = SS_temperature / SS_total; effect =
  eta^2_category - eta^2_temperature, predicted > 0, smallest effect of interest
  0.01. CI and p from a cluster bootstrap over prompts stratified by category
  (percentile CI; two-sided bootstrap p = 2 min(P(d* <= 0), P(d* >= 0)), floored
  at 1 / (resamples + 1)). Both effect sizes are reported with their own CIs.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

from lab.analysis.effects import CI_LEVEL, bootstrap_ci, rank_biserial_paired
from lab.analysis.hypotheses import (ALPHA, HYPOTHESES, MIN_N, N_RESAMPLES, SMALLEST_EFFECT, SMALLEST_ETA_SQ, TestResult,
                                     untested_result)

INITIAL, CONTINUATION = "initial", "continuation"
DESIGN_TEMPERATURES = (0.3, 0.7, 1.0)  # H6: stated in advance, low / middle / the study's own


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


def _wilcoxon_paired(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    d = a - b
    if d.size < MIN_N or not np.any(d != 0):
        return math.nan, math.nan
    return rank_biserial_paired(d), float(stats.wilcoxon(d).pvalue)


def subword_test(decodes: Mapping[str, Mapping[str, Sequence[Any]]], *, name: str = "H5", seed: int = 0,
                 n_resamples: int = N_RESAMPLES) -> TestResult:
    """H5 with its shuffled-label negative control (module docstring).

    Args:
        decodes: Per prompt id: ``entropy_bits`` (one float per generated token) and
            ``word`` (labels from :func:`word_positions`). Prompts without both an
            initial and a continuation token are left out.
        seed: Seed of the shuffle and the bootstrap.
        n_resamples: Bootstrap resamples.

    Returns:
        A :class:`TestResult`, effect = matched-pairs rank-biserial r of initial -
        continuation, predicted +1; ``details`` holds the control's r and p and
        ``control_rejects``.

    Raises:
        ValueError: a prompt's entropies and labels differ in length.
    """
    test = ("paired Wilcoxon signed-rank over prompts (mean entropy at word-initial minus continuation "
            "sub-tokens); control: labels shuffled within each prompt")
    rng = np.random.default_rng(seed)
    ini, con, ini_s, con_s = [], [], [], []
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
    n = len(ini)
    if n < MIN_N:
        return untested_result(name, test, "rank_biserial_r", n, 1, SMALLEST_EFFECT,
                         f"{n} prompts have both word-initial and continuation sub-tokens; need {MIN_N}")
    a, b = np.asarray(ini), np.asarray(con)
    r, p = _wilcoxon_paired(a, b)
    if not math.isfinite(p):
        return untested_result(name, test, "rank_biserial_r", n, 1, SMALLEST_EFFECT, "every difference is 0")
    lo, hi = bootstrap_ci((a - b,), rank_biserial_paired, paired=False, method="BCa", seed=seed,
                          n_resamples=n_resamples)
    sa, sb = np.asarray(ini_s), np.asarray(con_s)
    ok = np.isfinite(sa) & np.isfinite(sb)
    cr, cp = _wilcoxon_paired(sa[ok], sb[ok])
    control_rejects = bool(math.isfinite(cp) and cp < ALPHA)
    note = ("negative control REJECTED (shuffled labels also differ): the test is not trustworthy here"
            if control_rejects else "")
    return TestResult(name, HYPOTHESES[name], test, "rank_biserial_r", r, lo, hi, p, n, 1, SMALLEST_EFFECT,
                      note=note, details={"median_difference_bits": float(np.median(a - b)),
                                          "control_r": cr, "control_p": cp, "control_rejects": control_rejects,
                                          "control_n": int(ok.sum())})




def _eta_squares(alpha: np.ndarray, cats: np.ndarray) -> tuple[float, float]:
    """(eta^2_category, eta^2_temperature) of a prompts x temperatures table ``alpha``."""
    grand = alpha.mean()
    ss_total = float(((alpha - grand) ** 2).sum())
    if ss_total == 0:
        return math.nan, math.nan
    t = alpha.shape[1]
    ss_cat = sum(float((cats == c).sum() * t * (alpha[cats == c].mean() - grand) ** 2) for c in np.unique(cats))
    ss_temp = float(alpha.shape[0] * ((alpha.mean(axis=0) - grand) ** 2).sum())
    return ss_cat / ss_total, ss_temp / ss_total


def content_vs_temperature_test(alpha_by_prompt: Mapping[str, Sequence[float]], categories: Mapping[str, str], *,
                                name: str = "H6", seed: int = 0, n_resamples: int = N_RESAMPLES) -> TestResult:
    """H6 (module docstring): eta^2_category - eta^2_temperature with a stratified cluster bootstrap.

    Args:
        alpha_by_prompt: Per prompt id, alpha at each design temperature (same order
            for every prompt); prompts with a non-finite alpha are left out.
        categories: Category of each prompt id.
        seed, n_resamples: Bootstrap seed and resamples.

    Returns:
        A :class:`TestResult`, effect = the difference, predicted +1; ``details`` has
        both eta^2 with their CIs and the per-temperature mean alpha.
    """
    test = "eta^2 of category vs of temperature on alpha (prompts x temperatures); stratified cluster bootstrap"
    ids = [p for p in sorted(alpha_by_prompt) if np.all(np.isfinite(np.asarray(alpha_by_prompt[p], dtype=float)))]
    if not ids:
        return untested_result(name, test, "eta_sq_difference", 0, 1, SMALLEST_ETA_SQ, "no prompt ran at every temperature")
    alpha = np.asarray([alpha_by_prompt[p] for p in ids], dtype=float)  # [n prompts, T temperatures]
    cats = np.asarray([categories[p] for p in ids])
    n_cat = len(np.unique(cats))
    if len(ids) < MIN_N or n_cat < 2 or alpha.shape[1] < 2:
        return untested_result(name, test, "eta_sq_difference", len(ids), 1, SMALLEST_ETA_SQ,
                         f"{len(ids)} prompts in {n_cat} categories at {alpha.shape[1]} temperatures; "
                         f"need {MIN_N} prompts, 2 categories and 2 temperatures")
    e_cat, e_temp = _eta_squares(alpha, cats)
    if not math.isfinite(e_cat):
        return untested_result(name, test, "eta_sq_difference", len(ids), 1, SMALLEST_ETA_SQ, "alpha is constant")
    rng = np.random.default_rng(seed)
    strata = [np.flatnonzero(cats == c) for c in np.unique(cats)]
    boot = np.empty((n_resamples, 2))
    for b in range(n_resamples):
        idx = np.concatenate([rng.choice(s, size=s.size, replace=True) for s in strata])
        boot[b] = _eta_squares(alpha[idx], cats[idx])
    diff = boot[:, 0] - boot[:, 1]
    diff = diff[np.isfinite(diff)]
    q = [(1 - CI_LEVEL) / 2 * 100, (1 + CI_LEVEL) / 2 * 100]
    lo, hi = (np.percentile(diff, q).tolist() if diff.size else [math.nan, math.nan])
    p = min(1.0, 2 * min(float((diff <= 0).mean()), float((diff >= 0).mean()))) if diff.size else math.nan
    p = max(p, 1.0 / (n_resamples + 1))
    cat_ci = np.nanpercentile(boot[:, 0], q).tolist()
    temp_ci = np.nanpercentile(boot[:, 1], q).tolist()
    return TestResult(name, HYPOTHESES[name], test, "eta_sq_difference", e_cat - e_temp, lo, hi, p, len(ids), 1,
                      SMALLEST_ETA_SQ, details={
                          "eta_sq_category": e_cat, "eta_sq_category_ci": cat_ci,
                          "eta_sq_temperature": e_temp, "eta_sq_temperature_ci": temp_ci,
                          "mean_alpha_by_temperature": alpha.mean(axis=0).tolist(), "n_runs": int(alpha.size)})
