"""A run's units dealt into shards: the K-th of N round-robin slices.

A unit is what must stay on one shard (a study prompt with its twins, an intervention triple). The
caller orders its units (the study by category, then file order, so every shard gets about the same
number of each category); the j-th unit goes to shard ``j mod N``. The N slices are disjoint and
cover the units exactly.
"""

from __future__ import annotations

from typing import Sequence, TypeVar

T = TypeVar("T")


def check_shard(shard: tuple[int, int]) -> None:
    """Refuse a shard ``(K, N)`` outside ``1 <= K <= N``.

    Raises:
        ValueError: naming the shard.
    """
    k, n = shard
    if not 1 <= k <= n:
        raise ValueError(f"shard={k}/{n} must have 1 <= K <= N")


def deal(units: Sequence[T], shard: tuple[int, int] | None) -> list[T]:
    """The K-th (1-based) of N round-robin slices of ``units``, in their order; all of them without a shard.

    Args:
        units: The run's units in the order they are dealt.
        shard: ``(K, N)``, or None for the whole run.

    Raises:
        ValueError: not ``1 <= K <= N``.
    """
    if shard is None:
        return list(units)
    check_shard(shard)
    k, n = shard
    return [u for j, u in enumerate(units) if j % n == k - 1]
