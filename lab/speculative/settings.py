"""What one speculative decode is asked to do: the settings of :func:`lab.speculative.loop.speculative_generate`.

One frozen dataclass holds everything a decode and each of its rounds share (the budget,
gamma and how it moves, the sampling filter of both sides, the draft's early stop, the
target's logits processors, the EOS ids, whether the target's prefill rides on the first
verify pass), validated once on construction, so the loop takes the target, the draft, the
prompt, this object and its callbacks. :meth:`SpeculativeSettings.from_setup` turns a
command's resolved :class:`~lab.speculative.setups.DraftSetup` into one.

p = target, q = draft (Leviathan et al. 2023).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from lab.decode import check_max_new_tokens, eos_set
from lab.ranges import GAMMA, check_value
from lab.sampling import SamplingConfig
from lab.speculative.drafts import AdaptiveDraftLength
from lab.speculative.policies import DynamicGamma, GammaPolicy
from lab.speculative.setups import DraftSetup

GREEDY = SamplingConfig()  # temperature 0: the argmax on both sides



@dataclass(frozen=True)
class SpeculativeSettings:
    """How one speculative decode runs; validated (and normalized) on construction.

    Attributes:
        max_new_tokens: Budget of new tokens, >= 1.
        gamma: Maximum draft tokens per round, >= 1; a round drafts at most ``remaining - 1``.
        sampling: The filter for both sides (:class:`~lab.sampling.SamplingConfig`); temperature 0 = greedy.
        adaptive: The draft's early stop, an :class:`~lab.speculative.drafts.AdaptiveDraftLength`
            (``"entropy:X"`` / ``"pmin:X"`` is parsed into one); None = always the round's gamma.
        gamma_policy: Chooses each round's gamma in ``[1, gamma]``
            (:mod:`lab.speculative.policies`); None = the fixed ``gamma``.
        logits_processor: transformers ``LogitsProcessorList`` applied to the target's logits at each
            verified position with that position's prefix, or None.
        eos_token_ids: Ids that end generation (an int, an iterable or None is normalized to a
            frozenset). An EOS accepted mid-round ends it there: no bonus token, later drafts untested.
        fuse_prefill: Fuse the target's prefill into the first verify pass when the draft keeps its
            own cache and no target cache is given (transformers' assisted generation does the same);
            False = a prefill pass of its own. Default True: one target pass fewer, the same tokens.

    Raises:
        ValueError: a field out of range or of the wrong type, naming the field and echoing the value.
    """

    max_new_tokens: int
    gamma: int = 4
    sampling: SamplingConfig = GREEDY
    adaptive: AdaptiveDraftLength | None = None
    gamma_policy: GammaPolicy | None = None
    logits_processor: Any = None
    eos_token_ids: frozenset[int] = frozenset()
    fuse_prefill: bool = True

    def __post_init__(self) -> None:
        check_max_new_tokens(self.max_new_tokens)
        check_value("gamma", self.gamma, GAMMA)
        if not isinstance(self.sampling, SamplingConfig):
            raise ValueError(f"sampling={self.sampling!r} must be a lab.sampling.SamplingConfig")
        if isinstance(self.adaptive, str):
            object.__setattr__(self, "adaptive", AdaptiveDraftLength.parse(self.adaptive))
        elif self.adaptive is not None and not isinstance(self.adaptive, AdaptiveDraftLength):
            raise ValueError(f"adaptive={self.adaptive!r} must be an AdaptiveDraftLength, 'entropy:X', 'pmin:X' "
                             "or None")
        if self.gamma_policy is not None and not callable(getattr(self.gamma_policy, "next_gamma", None)):
            raise ValueError(f"gamma_policy={self.gamma_policy!r} must be a GammaPolicy (next_gamma) or None")
        object.__setattr__(self, "eos_token_ids", _eos_ids(self.eos_token_ids))
        if not isinstance(self.fuse_prefill, bool):
            raise ValueError(f"fuse_prefill={self.fuse_prefill!r} must be True or False")

    @classmethod
    def from_setup(cls, setup: DraftSetup, *, max_new_tokens: int, sampling: SamplingConfig = GREEDY,
                   eos_token_ids: Iterable[int] | int | None = None) -> "SpeculativeSettings":
        """The settings that run a draft set-up: a ``dynamic`` policy sets gamma to its maximum.

        Args:
            setup: The :class:`~lab.speculative.setups.DraftSetup` in force (its draft dtype is the
                drafter's business, not the loop's).
            max_new_tokens, sampling, eos_token_ids: As the attributes.

        Returns:
            A :class:`SpeculativeSettings`.

        Raises:
            ValueError: a malformed ``adaptive`` or ``dynamic`` spec in ``setup``, or a field out of range.
        """
        policy = DynamicGamma.parse(setup.dynamic) if setup.dynamic else None
        return cls(max_new_tokens=max_new_tokens, gamma=policy.max_gamma if policy is not None else setup.gamma,
                   sampling=sampling, adaptive=setup.adaptive or None, gamma_policy=policy,
                   eos_token_ids=eos_token_ids)


def _eos_ids(value: Iterable[int] | int | None) -> frozenset[int]:
    """``eos_token_ids`` as a frozenset of ints (:func:`lab.decode.eos_set`), or ValueError naming it."""
    try:
        return eos_set(value)
    except (TypeError, ValueError):
        raise ValueError(f"eos_token_ids={value!r} must be an int, an iterable of ints or None") from None
