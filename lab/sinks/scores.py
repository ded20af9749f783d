"""Attention sinks: the math (pure tensors in, tensors out; no model code).

An *attention sink* is a key position that receives far more attention than its
meaning explains, typically the first token (StreamingLLM: Xiao et al. 2023,
"Efficient Streaming Language Models with Attention Sinks", arXiv:2309.17453).
This module scores positions and turns the scores into sink flags and a
context-health number.

Shapes: ``L`` layers, ``H`` query heads, ``S`` positions (prompt length).
Attention matrices are probabilities (rows are queries, each row sums to 1, zero
above the diagonal for causal attention).

* :func:`attention_received` -- the importance score of Gu et al. 2024 ("When
  Attention Sink Emerges in Language Models: An Empirical View", arXiv:2410.10781,
  Sec. 3): ``alpha_k = sum_{i>=k} A[i, k] / (S - k)``, the mean attention key ``k``
  receives from the ``S - k`` queries that can see it. Dividing by ``S - k``
  (not ``S``) is the causal normalization: without it early positions look heavy
  only because more queries see them.
* :func:`robust_z` -- how far ``log alpha_k`` lies from a robust baseline (median,
  normal-consistent MAD). Logs make the score invariant to a common scale and
  tame the heavy right tail of attention mass.
* :func:`observer_matched_z` -- the same robust log-MAD z, but each position is
  compared with baseline positions seen by a similar number of queries (a lab
  departure from Gu et al., who compare raw scores with a fixed epsilon): key ``k``
  is seen by ``n_k = S - k`` queries at distances ``0 .. n_k - 1``, and queries
  attend mostly to their recent past, so late keys (small ``n_k``) get a higher
  mean score from position alone. Without this, the last few hundred positions of a
  long uniform prompt all looked like sinks.
* :func:`sink_rate` -- Gu et al.'s metric: the fraction of (layer, head) pairs
  whose score at a position exceeds ``epsilon`` (0.3 in the paper).
* :func:`head_geometric_mean` -- the geometric mean of received attention over
  heads (and layers, if asked): the "typical" score a sink must raise across the
  network, not in one or two heads.
* :func:`layer_sink_spans` -- from per-layer sink flags ``[L, S]``, the first and
  last layer where each position is a sink and in how many layers it is one: the
  primary sink at position 0 holds from an early layer to the last, "secondary"
  sinks hold over a band of middle layers (Gu et al. 2024; Xiao et al. 2023).
* :func:`context_health` -- a 0-10 summary of how many *content* positions are
  sinks and how strongly (formula in its docstring).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.stats import median_abs_deviation

# Smallest value taken before a log: softmax can underflow to exactly 0 in float32
# for a key no query attends to; 1e-30 keeps log finite and far below any real score.
LOG_FLOOR = 1e-30

# Floor on the MAD of log scores (natural-log units). When at least half of the
# baseline values are identical the MAD is 0 and a z-score would be infinite; with
# this floor a difference of less than ~5 % in received attention never counts as
# more than one robust standard deviation, and z stays finite.
MAD_FLOOR = 0.05

# observer_matched_z: baseline positions are pooled in bins one octave wide in the
# number of observing queries n (n in [2^j, 2^(j+1))): over one octave the recency
# trend of log received attention moves by ~0.5 on SmolLM2 (measured on an 8k-token
# prompt), about one robust SD, so a bin's median is a fair local reference.
OBSERVER_BIN_RATIO = 2.0
# ... and adjacent bins are merged until each holds at least this many baseline
# positions, so a median is never taken over a handful of noisy scores. A prompt with
# at most this many baseline positions has one bin: exactly robust_z's global baseline.
MIN_BIN_POSITIONS = 32

# Gu et al. 2024 use epsilon = 0.3 for the sink-rate metric.
DEFAULT_EPSILON = 0.3

# context_health: a content sink counts 1 plus its z-excess over the threshold in
# units of SEVERITY_SCALE (a sink 2 robust SDs above the threshold counts double).
SEVERITY_SCALE = 2.0
# context_health = 10 * exp(-HEALTH_RATE * penalty): 1 % of content tokens as mild
# sinks gives ~9.0, 10 % gives ~3.7, so the score separates "a stray sink" from
# "the context is riddled with them".
HEALTH_RATE = 10.0


def attention_received(attn: torch.Tensor) -> torch.Tensor:
    """Mean attention each key position receives from the queries that can see it.

    Implements the importance score of Gu et al. 2024 (arXiv:2410.10781, Sec. 3),
    ``alpha_k = (1 / (S - k)) * sum_{i=k}^{S-1} A[i, k]`` (0-based ``k``).

    Args:
        attn: Float tensor ``[..., S, S]`` of attention probabilities, rows are
            queries ``i``, columns keys ``k``; causal (entries above the diagonal
            are ignored, as no query can see a later key).

    Returns:
        Float tensor ``[..., S]`` (same dtype as ``attn``, float32 for integer or
        half input) of mean received attention, in ``[0, 1]`` for a valid attention
        matrix; leading dimensions are kept.

    Raises:
        ValueError: ``attn`` is not a floating tensor of shape ``[..., S, S]`` with
            ``S >= 1``.
    """
    if not isinstance(attn, torch.Tensor) or not attn.is_floating_point():
        raise ValueError(f"attn must be a floating torch.Tensor, got {type(attn).__name__}")
    if attn.dim() < 2 or attn.shape[-1] != attn.shape[-2] or attn.shape[-1] == 0:
        raise ValueError(f"attn must have shape [..., S, S] with S >= 1, got {tuple(attn.shape)}")
    x = attn if attn.dtype in (torch.float32, torch.float64) else attn.float()
    s = x.shape[-1]
    lower = torch.tril(x)  # queries i >= k only: [..., S, S]
    observers = torch.arange(s, 0, -1, dtype=x.dtype, device=x.device)  # S - k: [S]
    return lower.sum(dim=-2) / observers


def robust_z(values: torch.Tensor, exclude=(), mad_floor: float = MAD_FLOOR) -> torch.Tensor:
    """Robust z-score of ``log(values)`` against a median / MAD baseline.

    ``z_k = (log v_k - median_B(log v)) / max(MAD_B(log v), mad_floor)`` where ``B``
    is the set of positions not in ``exclude`` and MAD is normal-consistent
    (``scipy.stats.median_abs_deviation(..., scale="normal")``, so it estimates the
    standard deviation for normal data). Every position gets a z, excluded ones
    included; they just do not move the baseline.

    Zero MAD (at least half the baseline identical) is handled by the floor
    ``mad_floor`` (default :data:`MAD_FLOOR`), so z is always finite. Values are
    clamped to :data:`LOG_FLOOR` before the log (an exact 0 from softmax underflow).
    Scaling all values by a positive constant leaves z unchanged.

    Args:
        values: Non-negative float tensor ``[S]`` (e.g. received attention).
        exclude: Positions (ints, or a bool tensor ``[S]``) left out of the baseline.
        mad_floor: Positive floor on the MAD, natural-log units.

    Returns:
        Float32 tensor ``[S]`` of z-scores (float64 for float64 input).

    Raises:
        ValueError: ``values`` is not a 1-D non-empty float tensor, has negative or
            non-finite entries, an excluded position is out of range, every position
            is excluded, or ``mad_floor <= 0``.
    """
    if not isinstance(values, torch.Tensor) or values.dim() != 1 or values.numel() == 0:
        raise ValueError(f"values must be a non-empty 1-D tensor, got "
                         f"{tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__}")
    if not values.is_floating_point():
        raise ValueError(f"values must be floating point, got {values.dtype}")
    if not torch.isfinite(values).all() or (values < 0).any():
        raise ValueError("values must be finite and non-negative")
    if not mad_floor > 0:
        raise ValueError(f"mad_floor={mad_floor!r} must be positive")
    s = values.numel()
    keep = _keep_mask(exclude, s)
    if not keep.any():
        raise ValueError(f"exclude={exclude!r} leaves no position for the baseline (S={s})")
    x = values if values.dtype == torch.float64 else values.float()
    logs = x.clamp_min(LOG_FLOOR).log()
    base = logs[keep].detach().cpu().double().numpy()
    center = float(np.median(base))
    spread = max(float(median_abs_deviation(base, scale="normal")), mad_floor)
    return (logs - center) / spread


def observer_matched_z(values: torch.Tensor, exclude=(), *, bin_ratio: float = OBSERVER_BIN_RATIO,
                       min_bin: int = MIN_BIN_POSITIONS, mad_floor: float = MAD_FLOOR) -> torch.Tensor:
    """Robust log-MAD z of ``values`` against positions observed by a similar number of queries.

    Position ``k`` of ``S`` (0-based, causal) is observed by ``n_k = S - k`` queries.
    The baseline positions ``B`` (those not in ``exclude``) are grouped by ``n`` into
    bins ``[n0 * r^j, n0 * r^(j+1))`` (``r = bin_ratio``, ``n0`` the smallest ``n`` in
    ``B``), neighbouring bins merged until each holds ``>= min_bin`` positions. Each
    bin gives a point ``(median log n, median log v)``; ``c(n)`` is the piecewise-linear
    interpolation of those points in ``log n``; past the outer points it is the higher
    of the end value and the end segment's straight line, so extrapolation never lowers
    the bar. A power law ``v = a * n^b`` is reproduced exactly between the points and,
    for ``b <= 0`` (late keys get more), below the first one. Then, with residuals
    ``r_k = log v_k - c(n_k)``,

    ``z_k = (r_k - median_B(r)) / max(MAD_B(r), mad_floor)`` (normal-consistent MAD).

    This is :func:`robust_z` (the robust log-MAD z) with its constant median replaced
    by the recency baseline ``c(n)``; with one bin (``|B| <= min_bin`` or all of
    ``B`` in one bin) it equals :func:`robust_z` exactly. Departure from Gu et al. 2024
    (arXiv:2410.10781), whose importance score is compared with a fixed epsilon: late
    keys are seen only by nearby queries, which attend locally, so their mean score is
    inflated by position alone; here a position is a sink only if it stands out from
    positions seen by as many queries from as far.

    Args:
        values: Non-negative float tensor ``[S]`` (received attention, a probability).
        exclude: Positions (ints or a bool tensor ``[S]``) left out of the baseline.
        bin_ratio: Width of a bin as a ratio of observer counts (> 1).
        min_bin: Fewest baseline positions per bin (>= 1).
        mad_floor: Positive floor on the MAD, natural-log units.

    Returns:
        Float tensor ``[S]`` (float32; float64 for float64 input) of z-scores.

    Raises:
        ValueError: as :func:`robust_z`, or ``bin_ratio <= 1`` or ``min_bin < 1``.
    """
    if not bin_ratio > 1:
        raise ValueError(f"bin_ratio={bin_ratio!r} must be > 1")
    if isinstance(min_bin, bool) or not isinstance(min_bin, int) or min_bin < 1:
        raise ValueError(f"min_bin={min_bin!r} must be an integer >= 1")
    robust_z(values, exclude, mad_floor)  # the same validation, one place
    s = values.numel()
    keep = _keep_mask(exclude, s).numpy()
    logs = values.detach().cpu().double().clamp_min(LOG_FLOOR).log().numpy()
    log_n = np.log(np.arange(s, 0, -1, dtype=np.float64))  # log n_k, n_k = S - k: [S]
    center = _observer_baseline(log_n[keep], logs[keep], log_n, math.log(bin_ratio), min_bin)
    resid = logs - center
    spread = max(float(median_abs_deviation(resid[keep], scale="normal")), mad_floor)
    z = (resid - float(np.median(resid[keep]))) / spread
    return torch.from_numpy(z).to(torch.float64 if values.dtype == torch.float64 else torch.float32)


def _observer_baseline(base_log_n: np.ndarray, base_logs: np.ndarray, log_n: np.ndarray, log_ratio: float,
                       min_bin: int) -> np.ndarray:
    """``c(log n)`` at every ``log_n``: piecewise-linear through per-bin medians (see observer_matched_z)."""
    order = np.argsort(base_log_n, kind="stable")
    x, y = base_log_n[order], base_logs[order]
    edges = np.searchsorted(x, x[0] + log_ratio * np.arange(1, int((x[-1] - x[0]) / log_ratio) + 2), side="left")
    bins, start = [], 0
    for end in [*edges[:-1], len(x)]:  # merge a bin into the next until it holds min_bin positions
        if end - start >= min_bin or end == len(x):
            bins.append((start, end))
            start = end
    if len(bins) > 1 and bins[-1][1] - bins[-1][0] < min_bin:  # a short last bin joins the one before
        bins[-2:] = [(bins[-2][0], bins[-1][1])]
    bins = [(a, b) for a, b in bins if b > a]
    px = np.array([np.median(x[a:b]) for a, b in bins])
    py = np.array([np.median(y[a:b]) for a, b in bins])
    if len(bins) == 1:
        return np.full_like(log_n, py[0])
    out = np.interp(log_n, px, py)  # flat past the end points
    lo, hi = log_n < px[0], log_n > px[-1]  # past them, the end segment's line where it is higher
    out[lo] = np.maximum(out[lo], py[0] + (log_n[lo] - px[0]) * (py[1] - py[0]) / (px[1] - px[0]))
    out[hi] = np.maximum(out[hi], py[-1] + (log_n[hi] - px[-1]) * (py[-1] - py[-2]) / (px[-1] - px[-2]))
    return out


def _keep_mask(exclude, s: int) -> torch.Tensor:
    """Bool ``[S]``: True where a position stays in the baseline."""
    if isinstance(exclude, torch.Tensor) and exclude.dtype == torch.bool:
        if exclude.shape != (s,):
            raise ValueError(f"exclude mask has shape {tuple(exclude.shape)}, expected ({s},)")
        return ~exclude.cpu()
    keep = torch.ones(s, dtype=torch.bool)
    for p in (exclude.tolist() if isinstance(exclude, torch.Tensor) else exclude):
        if not isinstance(p, int) or not -s <= p < s:
            raise ValueError(f"exclude contains position {p!r}, outside [0, {s})")
        keep[p] = False
    return keep


def sink_rate(received: torch.Tensor, epsilon: float = DEFAULT_EPSILON, *, per_layer: bool = False) -> torch.Tensor:
    """Fraction of (layer, head) pairs whose received attention at a position exceeds ``epsilon``.

    Gu et al. 2024 (arXiv:2410.10781, Sec. 3.1) call a position a sink in head
    ``(l, h)`` when its importance score ``alpha`` exceeds ``epsilon`` (0.3 there)
    and report the rate over all heads; here per position.

    Args:
        received: Float tensor ``[L, H, S]`` of mean received attention
            (:func:`attention_received` per layer and head).
        epsilon: Threshold in ``(0, 1)`` on received attention (a probability).
        per_layer: Keep layers apart: the fraction of each layer's heads, ``[L, S]``.

    Returns:
        Float32 tensor ``[S]`` (``[L, S]`` with ``per_layer``) in ``[0, 1]``.

    Raises:
        ValueError: ``received`` is not 3-D floating, or ``epsilon`` outside ``(0, 1)``.
    """
    if not isinstance(received, torch.Tensor) or received.dim() != 3 or not received.is_floating_point():
        raise ValueError(f"received must be a float tensor [L, H, S], got "
                         f"{tuple(received.shape) if isinstance(received, torch.Tensor) else type(received).__name__}")
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon={epsilon!r} must lie in (0, 1)")
    return (received > epsilon).float().mean(dim=1 if per_layer else (0, 1))


def head_geometric_mean(per_head: torch.Tensor, dims=(0, 1)) -> torch.Tensor:
    """Geometric mean of received attention over ``dims``: ``exp(mean(log max(x, LOG_FLOOR)))``.

    Args:
        per_head: Non-negative float tensor ``[L, H, S]`` (received attention, probabilities).
        dims: Dimensions averaged in log space: ``(0, 1)`` layers and heads -> ``[S]``;
            ``1`` heads only -> ``[L, S]``.

    Returns:
        Float32 tensor (float64 for float64 input), ``per_head``'s shape without ``dims``.

    Raises:
        ValueError: ``per_head`` is not a 3-D floating tensor.
    """
    if not isinstance(per_head, torch.Tensor) or per_head.dim() != 3 or not per_head.is_floating_point():
        raise ValueError(f"per_head must be a float tensor [L, H, S], got "
                         f"{tuple(per_head.shape) if isinstance(per_head, torch.Tensor) else type(per_head).__name__}")
    x = per_head if per_head.dtype == torch.float64 else per_head.float()
    return x.clamp_min(LOG_FLOOR).log().mean(dim=dims).exp()


def layer_sink_spans(layer_flags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per position, the first and last layer where it is flagged, and the number of flagged layers.

    Args:
        layer_flags: Bool tensor ``[L, S]``: position ``k`` is a sink in layer ``l``.

    Returns:
        ``(first, last, count)``, int64 tensors ``[S]``; ``first = last = -1`` and
        ``count = 0`` where a position is flagged in no layer. ``count`` may be below
        ``last - first + 1``: a sink that lapses in some layers between the two.

    Raises:
        ValueError: ``layer_flags`` is not a 2-D bool tensor.
    """
    if not isinstance(layer_flags, torch.Tensor) or layer_flags.dim() != 2 or layer_flags.dtype != torch.bool:
        raise ValueError("layer_flags must be a bool tensor [L, S]")
    n_layers = layer_flags.shape[0]
    layer = torch.arange(n_layers).unsqueeze(1).expand_as(layer_flags)  # [L, S]
    count = layer_flags.sum(dim=0)
    first = torch.where(layer_flags, layer, n_layers).amin(dim=0) if n_layers else count
    last = torch.where(layer_flags, layer, -1).amax(dim=0) if n_layers else count
    none = count == 0
    return first.masked_fill(none, -1), last.masked_fill(none, -1), count


def context_health(content_scores: torch.Tensor, threshold: float, *,
                   severity_scale: float = SEVERITY_SCALE, rate: float = HEALTH_RATE) -> float:
    """Context health in ``[0, 10]``: 10 when no content position is a sink.

    With ``N`` content positions, sinks ``K = {k : z_k > threshold}`` and
    ``penalty = (1/N) * sum_{k in K} (1 + (z_k - threshold) / severity_scale)``,
    ``health = 10 * exp(-rate * penalty)``. The penalty grows with the density of
    content sinks (``|K| / N``) and with their severity (z-excess over the
    threshold), so the health is non-increasing in both; it is 10 exactly when
    ``K`` is empty (or there is no content). A lab formula, not from a paper.

    Args:
        content_scores: Float tensor ``[N]``: the sink detector's scores of content
            positions only (structural positions excluded by the caller); a robust z
            or a sink rate, whichever statistic the detector uses (the formula was
            designed on the z scale).
        threshold: The score above which a position is a sink.
        severity_scale: Score units per extra unit of penalty (> 0).
        rate: Penalty-to-score rate (> 0).

    Returns:
        A Python float in ``[0, 10]``.

    Raises:
        ValueError: ``content_scores`` is not 1-D floating or has NaN, or the threshold,
            severity_scale or rate is not finite / positive.
    """
    if not isinstance(content_scores, torch.Tensor) or content_scores.dim() != 1 or not content_scores.is_floating_point():
        raise ValueError("content_scores must be a 1-D float tensor")
    if torch.isnan(content_scores).any():
        raise ValueError("content_scores contains NaN")
    if not math.isfinite(threshold):
        raise ValueError(f"threshold={threshold!r} must be finite")
    if not severity_scale > 0 or not rate > 0:
        raise ValueError(f"severity_scale={severity_scale!r} and rate={rate!r} must be positive")
    n = content_scores.numel()
    if n == 0:
        return 10.0
    # The sink test runs in the input's dtype, as `is_sink` does elsewhere, so a score that
    # equals the threshold after rounding to float32 is a sink in neither place.
    is_sink = content_scores > threshold
    excess = content_scores.double()[is_sink] - threshold
    penalty = float((1.0 + excess / severity_scale).sum()) / n
    return float(min(10.0, max(0.0, 10.0 * math.exp(-rate * penalty))))
