"""A draft set-up (draft dtype, gamma, adaptive stop, dynamic draft length) and where each part came from.

Which set-up is fastest depends on the CPU (bfloat16 arithmetic or not, AMX or not), the
thread count and the torch version, so ``lab bench-tune`` measures the candidates on a
machine and writes the winner to the lab's cache (:mod:`lab.tuning`). A command that
decodes speculatively (``lab speculate``, the study) resolves its set-up field by field
with :func:`resolve_setup`: a flag the user typed, else the tuned set-up for this
machine, else :data:`DEFAULT_SETUPS` for the profile, else :data:`FALLBACK`; and it says
which, per field, on the terminal and in its report.

Names only, no torch, so that the commands' validation stays light.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from lab.ranges import GAMMA, check_value
from lab.safe_text import clipped
from lab.speculative.draft_dtypes import DRAFT_DTYPE_CHOICES
from lab.speculative.policies import VALUE_SHOWN, DynamicGamma

# The draft's early stops, "entropy:X" and "pmin:X" (lab.speculative.drafts.AdaptiveDraftLength.parse).
ADAPTIVE_STOPS = ("entropy", "pmin")


def parse_dynamic(spec: str) -> DynamicGamma:
    """A ``dynamic:START:MAX`` policy whose MAX is within the gamma a flag takes (:data:`lab.ranges.GAMMA`): what
    ``--dynamic`` and a tuning file take.

    Raises:
        ValueError: a malformed spec (the policy's own message) or ``MAX=<m> must be <= 64``; the caller says
            whose spec it was (a flag, a file's field).
    """
    policy = DynamicGamma.parse(spec)
    if policy.max_gamma > GAMMA.limit:
        raise ValueError(f"MAX={clipped(policy.max_gamma, VALUE_SHOWN)} must be <= {GAMMA.limit}")
    return policy

SETUP_FIELDS = ("draft_dtype", "gamma", "adaptive", "dynamic")


@dataclass(frozen=True)
class DraftSetup:
    """How the speculative loop runs a given draft.

    Attributes:
        draft_dtype: A draft model's dtype (one of :data:`DRAFT_DTYPE_CHOICES`); None = the target's.
            Only a draft with weights of its own (a separate model) has one.
        gamma: Draft tokens per round (the maximum, under a dynamic policy), in :data:`lab.ranges.GAMMA`.
        adaptive: ``"entropy:X"`` / ``"pmin:X"`` early stop, or None.
        dynamic: ``"dynamic:START:MAX"`` draft-length policy, or None (fixed gamma).

    Raises:
        ValueError: a draft dtype outside the choices or gamma < 1 (naming the field).
    """

    draft_dtype: str | None = None
    gamma: int = 4
    adaptive: str | None = None
    dynamic: str | None = None

    def __post_init__(self) -> None:
        if self.draft_dtype is not None and self.draft_dtype not in DRAFT_DTYPE_CHOICES:
            raise ValueError(f"draft_dtype={self.draft_dtype!r} must be one of {', '.join(DRAFT_DTYPE_CHOICES)}")
        check_value("gamma", self.gamma, GAMMA)

    def describe(self) -> str:
        """``"draft bfloat16, gamma 5, pmin:0.6"`` (the target's dtype as ``"draft in the target's dtype"``)."""
        parts = [f"draft {self.draft_dtype}" if self.draft_dtype else "draft in the target's dtype"]
        parts.append(self.dynamic if self.dynamic else f"gamma {self.gamma}")
        if self.adaptive:
            parts.append(self.adaptive)
        return ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


FALLBACK = DraftSetup()  # the target's dtype, gamma 4, no stop: what the loop ran before any measurement

# The documented best set-up per target profile (its profile draft), from measurements on more
# than one CPU class; (set-up, why). A profile not listed runs FALLBACK.
# qwen2.5-coder (0.5B float32 draft vs bfloat16): on a Xeon with AMX-BF16 the bfloat16 draft
# prefills 40 tokens in 0.28 s vs 0.62 s and steps in 0.168 s vs 0.176 s, and `lab bench --levers`
# chose bfloat16 gamma 5 (docs/results.md); on a 2-core Xeon with AVX-512 BF16 but no AMX,
# held-back HumanEval problems, greedy, 48 tokens, end to end: bfloat16 gamma 5 1.13x the target
# alone, float32 gamma 4 1.05x, per-pass gamma 5 1.00x. bfloat16 gamma 5 led on both.
DEFAULT_SETUPS: dict[str, tuple[DraftSetup, str]] = {
    "qwen2.5-coder": (DraftSetup(draft_dtype="bfloat16", gamma=5),
                      "bfloat16 draft, gamma 5: the fastest measured on both an AMX-BF16 and a non-AMX "
                      "AVX-512-BF16 Xeon (lab.speculative.setups.DEFAULT_SETUPS)"),
}


# The documented set-up per target profile on the llama.cpp runtime (lab.runtime.ggml; no draft dtype: the
# GGUF files' own weights); (set-up, why). Filled from `lab bench --runtime llama.cpp` (docs/results.md).
# qwen2.5-coder with its 0.5B draft, 2026-12-03, 2-core AMD EPYC (AVX-512 BF16, no AMX), held-back HumanEval,
# greedy, 64 tokens: gamma 1 9.16 tok/s end to end, gamma 2 9.03, gamma 3 8.99, gamma 4 9.04 (alpha 0.97-0.99);
# a verify pass of gamma + 1 tokens costs 1.72 / 2.36 / 3.08 / 3.68 target steps there, so longer drafts buy
# nothing. All four are slower than the target alone (12.6): see docs/results.md, "The llama.cpp runtime".
DEFAULT_GGML_SETUPS: dict[str, tuple[DraftSetup, str]] = {
    "qwen2.5-coder": (DraftSetup(gamma=1),
                      "gamma 1: the fastest end to end of gammas 1-4 on the llama.cpp runtime on a 2-core "
                      "AVX-512 EPYC (one CPU class measured; lab.speculative.setups.DEFAULT_GGML_SETUPS)"),
}


@dataclass(frozen=True)
class ResolvedSetup:
    """The set-up in force and, per field of :data:`SETUP_FIELDS`, where it came from.

    Attributes:
        setup: The :class:`DraftSetup` that runs.
        sources: Field -> ``"--flag"``, ``"tuned: <path>"`` or ``"default: <reason>"``.
        notes: Lines to show once (a tuning file ignored and why), in order.
    """

    setup: DraftSetup
    sources: dict[str, str]
    notes: tuple[str, ...] = field(default=())

    def summary_line(self) -> str:
        """One line for the terminal: the set-up, then each distinct source and the fields it set."""
        by_source: dict[str, list[str]] = {}
        for name in SETUP_FIELDS:
            by_source.setdefault(self.sources[name], []).append(name.replace("_", " "))
        why = "; ".join(f"{', '.join(names)} from {src}" for src, names in by_source.items())
        return f"draft set-up: {self.setup.describe()} ({why})"

    def as_dict(self) -> dict[str, Any]:
        return {**self.setup.as_dict(), "sources": dict(self.sources), "notes": list(self.notes)}


def default_setup(profile: str | None, has_weights: bool) -> tuple[DraftSetup, str]:
    """The documented set-up for a profile's own draft, and why: ``(setup, "default: <reason>")``.

    Args:
        profile: The target profile name, or None (a path / hub id: no documented set-up).
        has_weights: Whether the draft is a separate model (only such a draft has a dtype).
    """
    if profile in DEFAULT_SETUPS:
        setup, why = DEFAULT_SETUPS[profile]
        if not has_weights:
            setup = DraftSetup(gamma=setup.gamma, adaptive=setup.adaptive, dynamic=setup.dynamic)
        return setup, f"default: {why}"
    return FALLBACK, "default: no tuned or documented set-up for this model and draft (gamma 4, the target's dtype)"


def default_ggml_setup(profile: str | None) -> tuple[DraftSetup, str]:
    """The documented llama.cpp-runtime set-up for a profile's own draft, and why (``"default: <reason>"``)."""
    if profile in DEFAULT_GGML_SETUPS:
        setup, why = DEFAULT_GGML_SETUPS[profile]
        return setup, f"default: {why}"
    return FALLBACK, "default: no documented llama.cpp set-up for this model and draft (gamma 4)"


def resolve_setup(flags: dict[str, Any], *, base: DraftSetup, base_source: str, has_weights: bool,
                  notes: tuple[str, ...] = ()) -> ResolvedSetup:
    """Field by field: a flag the user typed (not None) wins, else ``base`` (tuned or default).

    A typed ``gamma`` replaces a base ``dynamic`` policy (the user asked for a fixed draft
    length); a draft without weights of its own never gets a base draft dtype.

    Args:
        flags: Field -> the value typed, or None; keys from :data:`SETUP_FIELDS` and the flag
            names in :data:`FLAG_NAMES`.
        base: The tuned or default set-up.
        base_source: ``"tuned: <path>"`` or ``"default: <reason>"``.
        has_weights: Whether the draft is a separate model.
        notes: Lines to keep with the result (why a tuning file was ignored).

    Raises:
        ValueError: a typed draft dtype for a draft without weights, naming ``--draft-dtype``.
    """
    values, sources = {}, {}
    typed_dtype = flags.get("draft_dtype")
    if typed_dtype is not None and not has_weights:
        raise ValueError(f"--draft-dtype {typed_dtype}: the draft has no weights of its own (early-exit or "
                         "prompt-lookup); it runs in the target's dtype")
    for name in SETUP_FIELDS:
        if flags.get(name) is not None:
            values[name], sources[name] = flags[name], FLAG_NAMES[name]
        else:
            values[name], sources[name] = getattr(base, name), base_source
    if flags.get("gamma") is not None and flags.get("dynamic") is None and values["dynamic"] is not None:
        values["dynamic"], sources["dynamic"] = None, f"{FLAG_NAMES['gamma']} (a fixed draft length)"
    if not has_weights and values["draft_dtype"] is not None:
        values["draft_dtype"], sources["draft_dtype"] = None, "the target's (the draft has no weights of its own)"
    return ResolvedSetup(DraftSetup(**values), sources, tuple(notes))


FLAG_NAMES = {"draft_dtype": "--draft-dtype", "gamma": "--gamma", "adaptive": "--adaptive", "dynamic": "--dynamic"}
