"""The entropy tracker's per-step statistics, computed on the device from one logits row.

:func:`row_statistics` fuses the entropy and varentropy of :mod:`lab.entropy` into
one ``log_softmax`` per row, without input checks (each check is a pass over V and,
on a GPU, a host sync per step). :class:`StepRecorder` is the hook the decode core
(:func:`lab.decode.generate`) calls at every step: it keeps the numbers as device
tensors and moves them to the host once, in :meth:`StepRecorder.finish`.

References: Shannon (1948) for entropy; varentropy as the variance of the surprisal
(Kontoyiannis & Verdu 2013).
"""

from __future__ import annotations

import math

import torch


# exp(-1e4) is exactly 0 in float32 and float64, so clamping log-probs at this floor
# changes no probability; it turns the -inf of masked entries into a finite number
# so that p * log p is 0 * finite = 0 instead of 0 * inf = NaN, without a mask pass.
LOG_PROB_FLOOR = -1.0e4


def row_statistics(logits: torch.Tensor, *, with_varentropy: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Entropy and varentropy of one logits row from a single ``log_softmax``.

    The same quantities as :func:`lab.entropy.entropy` and :func:`lab.entropy.varentropy`
    (Shannon entropy; varentropy ``sum_i p_i (-log p_i - H)^2``), fused for the decode
    loop: one log-softmax, no input checks (each check is a pass over V and, on a GPU,
    a host sync per step). A NaN or +inf logit yields a NaN entropy, which
    :func:`track_generate` turns into an error after the loop.

    Args:
        logits: Float logits ``[V]`` (any float dtype; computed in float32, or float64
            for float64 input); ``-inf`` entries are masked tokens.
        with_varentropy: Skip the varentropy passes when ``False`` (returns 0 for it).

    Returns:
        ``(entropy_nats, varentropy_nats2, log_probs)``: two 0-d tensors and the
        ``[V]`` log-probabilities (floored at :data:`LOG_PROB_FLOOR`).
    """
    x = logits if logits.dtype == torch.float64 else logits.float()
    log_p = torch.log_softmax(x, dim=-1).clamp_min(LOG_PROB_FLOOR)  # [V]
    p = log_p.exp()
    # one fused multiply-add pass; + 0.0 turns the -0.0 of a point mass (-(1 * 0)) into 0.0, which
    # a report would otherwise store as "-0.0"; clamp: H >= 0, and rounding can dip just below
    h = (-torch.dot(p, log_p)).clamp_min(0.0) + 0.0
    if not with_varentropy:
        return h, torch.zeros_like(h), log_p
    varent = torch.dot(p, (log_p + h).square())  # (-log p - H)^2 = (log p + H)^2
    return h, varent, log_p


class StepRecorder:
    """Per-step statistics kept as device tensors until :meth:`finish`."""

    def __init__(self, top_alternatives: int, do_sample: bool):
        self.k = top_alternatives
        self.do_sample = do_sample
        self.rows: list[torch.Tensor] = []  # each [4]: H, varentropy, H_sampled (nats), log p(chosen)
        self.alt_ids: list[torch.Tensor] = []  # each [k]
        self.alt_log_probs: list[torch.Tensor] = []  # each [k]
        self.vocab_size = 0

    def record(self, logits: torch.Tensor, warped: torch.Tensor, chosen: torch.Tensor) -> None:
        """The core's ``on_step`` hook: raw logits ``[1, V]``, the filtered logits the token was
        drawn from ``[1, V]`` (-inf where dropped), the chosen token ``[1, 1]`` int64."""
        # Everything stays on the device; unit conversions wait for finish(), so each
        # step launches as few kernels as possible.
        row = logits[0]  # [V]
        self.vocab_size = row.shape[-1]
        h, varent, log_p = row_statistics(row)
        if self.do_sample:
            h_sampled = row_statistics(warped[0], with_varentropy=False)[0]
        else:
            h_sampled = torch.zeros_like(h)  # greedy draws from a point mass on the argmax
        top_log_p, top_ids = log_p.topk(min(self.k, self.vocab_size))  # [k], most likely first
        self.rows.append(torch.stack([h, varent, h_sampled, log_p[chosen[0, 0]]]))  # nats, nats^2, nats, log p
        self.alt_ids.append(top_ids)
        self.alt_log_probs.append(top_log_p)

    def finish(self) -> tuple[list[list[float]], list[list[int]], list[list[float]]]:
        """Move everything to the host once; rows become ``[H, H/log2 V, varentropy, H_sampled,
        p_chosen]`` in bits, bits^2 and probabilities."""
        if not self.rows:
            return [], [], []
        raw = torch.stack(self.rows).double().cpu()  # [n, 4]
        ln2 = math.log(2.0)
        norm = math.log(self.vocab_size) if self.vocab_size > 1 else math.inf  # V = 1: normalized 0
        rows = torch.stack([raw[:, 0] / ln2, raw[:, 0] / norm, raw[:, 1] / ln2**2, raw[:, 2] / ln2,
                            raw[:, 3].exp()], dim=1)  # [n, 5]
        return (rows.tolist(), torch.stack(self.alt_ids).cpu().tolist(),
                torch.stack(self.alt_log_probs).double().cpu().exp().tolist())
