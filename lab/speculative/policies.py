"""Draft-length policies: how many tokens to draft in the next round.

A policy decides gamma for the next round from what happened in the last one. It
sees only counts the loop already has (tokens proposed, tokens the target kept), so
it never changes the output distribution: the accept/reject test is the same for
any gamma, and gamma is fixed before the round's draws (a stopping rule on past
rounds only).

* :class:`FixedGamma`: the same gamma every round (Leviathan et al. 2023).
* :class:`DynamicGamma`: grow after a round whose every drafted token was kept,
  shrink after a rejection. The additive schedule (+2 / -1, floor 1) is the one
  transformers' assisted generation documents as ``num_assistant_tokens_schedule=
  "heuristic"``; llama.cpp's speculative example adapts its draft length to
  acceptance in the same spirit. Here the growth is also capped (``max_gamma``):
  an uncapped gamma drafts many tokens the target will reject once text becomes
  harder, and the verify pass over gamma + 1 positions grows with it.

The loop asks ``policy.next_gamma(rounds, max_gamma)`` before every round, with the
finished rounds only (:class:`GammaPolicy`). :class:`DynamicGamma` replays its
additive schedule over those rounds with :meth:`DynamicGamma.step`, so it holds no
state and one policy object can serve many runs.

Pure: frozen dataclasses, ``next_gamma`` and ``step`` are functions of their arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

from lab.ranges import GAMMA, NumberTextError, Underscored, read_number
from lab.safe_text import clipped

# Characters of a field's value an error shows: a parsed spec's message follows the spec itself, echoed whole.
VALUE_SHOWN = 20

if TYPE_CHECKING:
    from lab.speculative.results import RoundRecord


class GammaPolicy(Protocol):
    """Decides how many tokens the next round may draft (its gamma), from the rounds so far.

    The per-token early stop of :class:`~lab.speculative.drafts.AdaptiveDraftLength`
    acts inside a round, after this choice. A policy may read only what the loop has
    already committed (finished rounds), never the coming target distribution, so
    the output distribution is unchanged.
    """

    def next_gamma(self, rounds: Sequence["RoundRecord"], max_gamma: int) -> int:
        """Gamma for the next round, in ``[1, max_gamma]``."""
        ...

    def describe(self) -> str:
        """The policy as its spec string, for reports (``"fixed"``, ``"dynamic:4:12"``)."""
        ...


def _check_int(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}={clipped(value, VALUE_SHOWN)} must be an integer >= {low}")


@dataclass(frozen=True)
class FixedGamma:
    """Draft the same gamma every round (Leviathan et al. 2023): the loop's default.

    Attributes:
        gamma: draft tokens per round, >= 1; None = the loop's ``gamma`` (its maximum).
    """

    gamma: int | None = None

    def __post_init__(self) -> None:
        if self.gamma is not None:
            _check_int("gamma", self.gamma, GAMMA.lo)

    @property
    def initial(self) -> int | None:
        return self.gamma

    @property
    def max_gamma(self) -> int | None:
        return self.gamma

    def step(self, gamma: int, n_proposed: int, n_accepted: int) -> int:
        """The next round's gamma after one round: unchanged."""
        return gamma if self.gamma is None else self.gamma

    def next_gamma(self, rounds: Sequence["RoundRecord"], max_gamma: int) -> int:
        return max_gamma if self.gamma is None else min(self.gamma, max_gamma)

    def describe(self) -> str:
        return "fixed" if self.gamma is None else f"fixed:{self.gamma}"


@dataclass(frozen=True)
class DynamicGamma:
    """Grow gamma on full acceptance, shrink it on a rejection.

    Attributes:
        initial: gamma of the first round, in [min_gamma, max_gamma].
        min_gamma: floor, >= 1.
        max_gamma: cap, >= min_gamma.
        grow: added after a round whose proposed tokens were all kept (default 2,
            as transformers' heuristic schedule).
        shrink: subtracted after a round with a rejection (default 1, likewise).

    A round that proposed nothing (prompt lookup found no match) leaves gamma as is.
    """

    initial: int = 4
    min_gamma: int = 1
    max_gamma: int = 12
    grow: int = 2
    shrink: int = 1

    def __post_init__(self) -> None:
        _check_int("min_gamma", self.min_gamma, GAMMA.lo)
        _check_int("max_gamma", self.max_gamma, self.min_gamma)
        _check_int("grow", self.grow, 0)
        _check_int("shrink", self.shrink, 0)
        _check_int("initial", self.initial, self.min_gamma)
        if self.initial > self.max_gamma:
            raise ValueError(f"initial={clipped(self.initial, VALUE_SHOWN)} must be <= "
                             f"max_gamma={clipped(self.max_gamma, VALUE_SHOWN)}")

    @classmethod
    def parse(cls, spec: str) -> "DynamicGamma":
        """Parse ``"dynamic"``, ``"dynamic:START"`` or ``"dynamic:START:MAX"``.

        Raises:
            ValueError: any other form, or values out of range (echoing ``spec``).
        """
        head, *rest = str(spec).split(":")
        if head != "dynamic" or len(rest) > 2:
            raise ValueError(f"gamma policy={clipped(spec)} must be dynamic, dynamic:START or dynamic:START:MAX")
        values = []
        for name, text in zip(("START", "MAX"), rest):
            try:
                values.append(read_number(text, integer=True))
            except NumberTextError as exc:  # no echo: the caller names the spec (a flag, a file's field)
                raise type(exc)(f"{name} {exc}" + ("" if isinstance(exc, Underscored) else f": {GAMMA.must}")) \
                    from None
            except ValueError:
                raise ValueError(f"gamma policy={clipped(spec)}: START and MAX must be integers") from None
        kwargs = dict(zip(("initial", "max_gamma"), values))
        try:
            return cls(**kwargs)
        except ValueError as exc:
            raise ValueError(f"gamma policy={clipped(spec)}: {exc}") from None

    def step(self, gamma: int, n_proposed: int, n_accepted: int) -> int:
        """Gamma for the next round, from this round's gamma and counts.

        Args:
            gamma: this round's gamma.
            n_proposed: tokens the draft proposed this round (<= gamma; fewer when it
                stopped early or the budget cut it).
            n_accepted: of those, kept by the target (0 <= n_accepted <= n_proposed).

        Returns:
            ``gamma + grow`` (capped) if every proposed token was kept, ``gamma -
            shrink`` (floored) after a rejection, ``gamma`` if nothing was proposed.

        Raises:
            ValueError: counts out of range.
        """
        if not 0 <= n_accepted <= n_proposed:
            raise ValueError(f"n_accepted={n_accepted!r} must be in [0, n_proposed={n_proposed!r}]")
        if n_proposed == 0:
            return gamma
        if n_accepted == n_proposed:
            return min(self.max_gamma, gamma + self.grow)
        return max(self.min_gamma, gamma - self.shrink)

    def next_gamma(self, rounds: Sequence["RoundRecord"], max_gamma: int) -> int:
        """Gamma for the next round: :meth:`step` replayed from :attr:`initial` over the
        finished rounds (each round's drafted count and kept count), capped at the
        loop's ``max_gamma``. A round the budget cut short still steps from the
        policy's own gamma, not from the shorter count."""
        gamma = self.initial
        for r in rounds:
            gamma = self.step(gamma, len(r.proposed), r.n_accepted)
        return min(gamma, max_gamma)

    def describe(self) -> str:
        return f"dynamic:{self.initial}:{self.max_gamma}"
