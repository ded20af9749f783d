"""The placebo-health control of H1 / H1c (pre-stated; :mod:`lab.analysis` states the rule).

A prompt's context health is swapped for the health of a length-matched prompt that asks
another question. Such a placebo carries whatever prompts of one length share but nothing of
the prompt's own context, so the study's adjusted test must find nothing on it; when it does,
the design (not the context) drives H1's correlation and H1 is ``inconclusive``. Pure
functions on numbers.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from lab.analysis.effects import partial_spearman, partial_spearman_p
from lab.analysis.hypotheses import ALPHA, MIN_N, partial_inputs

# The placebo control's tolerance: the length-matched placebo health must not reach this raw
# two-sided p (a clean design passes it in 95 % of studies).
PLACEBO_ALPHA = ALPHA


def placebo_donors(length: Sequence[float], clusters: Sequence[Any], *, seed: int = 0) -> np.ndarray:
    """Recipients and donors of the placebo control: for each recipient prompt, the index of the
    donor prompt nearest in log length; -1 for a prompt that is not a recipient.

    The questions, sorted by their shortest prompt, go alternately to the recipients and the
    donors, so both halves span the lengths and every donor asks another question. Donors
    never receive: were prompt i given j's value and j given i's, a true effect of x on y
    would itself correlate the swapped pairs. Ties in length are broken by a seeded random
    order; a donor may serve several recipients.
    """
    la = np.log(np.asarray(length, dtype=float))
    ca = np.asarray([str(v) for v in clusters])
    shortest = {}
    for q, v in zip(ca.tolist(), la.tolist()):
        shortest[q] = min(v, shortest.get(q, math.inf))
    order = sorted(shortest, key=lambda q: (shortest[q], q))
    receives = np.isin(ca, order[0::2])
    donors = np.full(la.size, -1)
    pool = np.flatnonzero(~receives)
    if pool.size:
        jitter = np.random.default_rng(seed).uniform(0, 1e-9, pool.size)  # breaks exact ties only
        for i in np.flatnonzero(receives):
            donors[i] = pool[int(np.argmin(np.abs(la[pool] - la[i]) + jitter))]
    return donors


def placebo_check(x: Sequence[float], y: Sequence[float], length: Sequence[float], clusters: Sequence[Any] | None = None,
                  *, seed: int = 0) -> dict[str, Any]:
    """The placebo-health control of H1 / H1c: the same adjusted test on the recipient prompts
    (half the questions) with each one's x replaced by the x of a length-matched donor prompt of
    another question (:func:`placebo_donors`).

    A placebo x carries whatever prompts of one length share (the length itself beyond what the
    rank adjustment removes, being a twin, ...) but nothing of the prompt's own context, so in a
    design where the adjusted test is sound it has no correlation with y: the check passes when
    its p is at least :data:`PLACEBO_ALPHA`.

    Returns:
        ``{"rho", "p_value", "n", "passes", "tolerance"}``; ``passes`` None (and rho, p NaN)
        when the placebo test cannot run.

    Raises:
        ValueError: as :func:`partial_correlation_test`.
    """
    xa, ya, na, ca = partial_inputs(x, y, length, clusters)
    donors = placebo_donors(na, ca, seed=seed)
    keep = donors >= 0
    out = {"rho": math.nan, "p_value": math.nan, "n": int(keep.sum()), "passes": None, "tolerance": PLACEBO_ALPHA}
    if keep.sum() < MIN_N:
        return out
    xp, yr, z = xa[donors[keep]], ya[keep], np.log(na[keep])
    if np.ptp(xp) == 0 or np.ptp(yr) == 0:
        return out
    rho, p = partial_spearman(xp, yr, z), partial_spearman_p(xp, yr, z, ca[keep])
    if math.isfinite(rho) and math.isfinite(p):
        out.update(rho=rho, p_value=p, passes=bool(p >= PLACEBO_ALPHA))
    return out
