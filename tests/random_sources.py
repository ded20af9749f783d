"""Deterministic random sources for :func:`lab.speculative.verify.verify` (no torch.Generator).

A seeded generator almost never draws a uniform of exactly 0 or exactly ``p/q``, so
faults that live on those boundaries (``<=`` for ``<`` in the ratio test, vLLM PR
#23803) pass every seeded test. :class:`StubRandom` returns the uniforms a test
chooses and records the distribution the final token was drawn from.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

# The largest float64 below 1: the largest uniform torch.rand(dtype=float64) can return.
LARGEST_UNIFORM = math.nextafter(1.0, 0.0)


class StubRandom:
    """A :class:`lab.speculative.verify.RandomSource` that returns chosen values.

    Args:
        uniforms: The uniforms handed to the ratio test, in order (float64, [0, 1)).
        draw_u: The final draw is the inverse CDF of the row at ``draw_u``: the first
            index whose cumulative probability exceeds ``draw_u`` (so ``draw_u = 0``
            returns the first index with positive probability; a zero-probability
            index is never returned).

    Attributes:
        rows: Every distribution passed to :meth:`categorical`, as float64 copies.
    """

    def __init__(self, uniforms: Sequence[float] = (), draw_u: float = 0.0):
        self._uniforms = [float(u) for u in uniforms]
        self._draw_u = float(draw_u)
        self.rows: list[torch.Tensor] = []

    def uniforms(self, n: int, device: torch.device) -> torch.Tensor:
        assert n == len(self._uniforms), f"verify asked for {n} uniforms, the stub holds {len(self._uniforms)}"
        return torch.tensor(self._uniforms, dtype=torch.float64, device=device)

    def categorical(self, probs: torch.Tensor) -> int:
        row = probs.detach().double().cpu()
        self.rows.append(row)
        cum = row.cumsum(0)  # [V]
        return int((cum > self._draw_u * float(cum[-1])).nonzero()[0])
