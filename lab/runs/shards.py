"""A run's units dealt into shards: the K-th of N round-robin slices.

A unit is what must stay on one shard (a study prompt with its twins, an intervention triple). The
caller orders its units (the study by category, then file order, so every shard gets about the same
number of each category); the j-th unit goes to shard ``j mod N``. The N slices are disjoint and
cover the units exactly.
"""

from __future__ import annotations

from typing import Sequence, TypeVar

T = TypeVar("T")


def check_shard(shard: object, refusal: str | None = None) -> None:
    """The one shard rule: refuse anything but ``(K, N)``, two integers with ``1 <= K <= N``.

    Args:
        shard: The shard, as the caller holds it.
        refusal: The message, in the words of what the user gave (``--shard 3/2 needs 1 <= K <= N``,
            a config field); default ``shard=K/N must have 1 <= K <= N``.

    Raises:
        ValueError: naming the shard.
    """
    ok = (isinstance(shard, tuple) and len(shard) == 2
          and all(isinstance(v, int) and not isinstance(v, bool) for v in shard) and 1 <= shard[0] <= shard[1])
    if not ok:
        if refusal is None:
            k, n = shard
            refusal = f"shard={k}/{n} must have 1 <= K <= N"
        raise ValueError(refusal)


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
