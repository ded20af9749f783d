"""The study's settings and the runner / progress interfaces (the per-prompt records: :mod:`lab.study.outcome`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

from lab.models.profiles import DEFAULT_PROFILE, PROFILES
from lab.analysis.hypotheses import N_RESAMPLES
from lab.prompts import StudyPrompt
from lab.ranges import GAMMA, LIMIT, RESAMPLES, SAMPLED_TEMPERATURE, SEED, TOKENS, check_value
from lab.runs.shards import check_shard
from lab.study.outcome import PromptOutcome
from lab.models.weights import WEIGHTS
from lab.speculative.draft_dtypes import DRAFT_DTYPE_CHOICES


# Defaults of the full study (`make study`), chosen so its prompts fit a 15-minute budget on
# 2 CPU cores: the speculative run dominates, and with the early-exit draft sampling at T = 1
# nearly only the first drafted token of a round is tested, so gamma 2 loses almost no
# per-token data while drafting half as much (figures: docs/results.md, "The study's defaults").
DEFAULT_MAX_NEW_TOKENS = 24
DEFAULT_GAMMA = 2
DEFAULT_TEMPERATURE = 1.0  # sampling mode: alpha is the probabilistic acceptance rate
WORK_PREFIX = ".study-work-"
# Bump when the work-file layout or the pipeline changes: a work file of another format is redone.
# Format 3: one target decode per prompt (read off the speculative run's verify passes; no decode_s).
# Format 4: finished prompts in outcomes/<stem>-<digest>.json (lab.study.work.work_file_name), so no
# prompt id can overwrite the directory's own files or exceed a file name's length.
WORK_FORMAT = 4
# H6 (content vs sampling settings): a balanced subset of clean prompts also runs the
# speculative decode at each design temperature (the main run's alpha is reused when the
# study temperature is one of them). Clean prompts per category: 6 (36 prompts, 72 added
# speculative runs). H6's jackknife test then detects a prompt SD of alpha of 0.14 with no
# temperature effect (run-to-run SD 0.1) in about 86 % of studies at Holm's strictest level
# (0.05 / 9), where 2 a category (12 prompts) detected it in about 3 % and 4 in 44 %
# (simulated; tests/statistical/test_hypothesis_size.py checks the figure). H6c reads the same subset.
TEMPERATURE_SUBSET_PER_CATEGORY = 6

# The draft's dtype in the study, per target profile whose profile draft is a separate
# model: chosen by a measured end-to-end comparison on the study's own prompts, since a
# half-precision draft can be faster per step yet slower to prefill, depending on the CPU.
# (dtype, where the choice came from: it goes into the report); a profile not listed runs its
# draft in the target's dtype. The measurements are in docs/results.md ("The study's
# defaults"); re-measure on another CPU: --draft-dtype float32|bfloat16.
STUDY_DRAFT_DTYPES: dict[str, tuple[str, str]] = {
    "qwen2.5-coder": ("bfloat16", "6 study prompts, 2026-12-01: 93.5 s CPU / 221 s wall vs float32 94.4 s / "
                                  "303 s (one thread, busy machine), same alphas; see docs/results.md"),
}


@dataclass(frozen=True)
class StudyConfig:
    """Settings of one study; the CLI maps its flags onto this.

    Attributes:
        model: Target profile, path or hub id.
        draft: Draft spec for :func:`lab.speculative.draft_specs.make_draft`; ``None`` = the
            profile's (``early-exit:24`` for smollm2, the 0.5B model for qwen2.5).
        prompts: Prompt file; ``None`` = the embedded set.
        limit: Take at most this many prompts (balanced, twins kept together).
        shard: ``(K, N)``: run only the K-th (1-based) of N disjoint, category-balanced
            slices of the selected prompts (:func:`lab.study.work.shard_prompts`);
            ``None`` runs them all. Not part of the settings key: every shard of one
            study shares its work-directory name, so shards can be merged.
        max_new_tokens: Budget of each decode and each speculative run.
        gamma: Draft tokens per speculative round.
        seed: Study seed; each prompt's seed is derived from it (:func:`prompt_seed`).
        temperature: Sampling temperature of both decodes (> 0: sampling mode).
        device, dtype: As :func:`lab.models.loading.load_model`.
        out: Reports root; the work directory lives inside it too.
        n_resamples: Bootstrap resamples of the analysis.
        draft_dtype: The draft model's dtype (one of
            :data:`lab.speculative.draft_dtypes.DRAFT_DTYPE_CHOICES`); ``None`` =
            the study's measured choice for the profile (:data:`STUDY_DRAFT_DTYPES`),
            else the target's dtype. Only a draft with its own weights has one.
        weights, draft_weights: The linear layers' representation of the target and of a
            draft with weights of its own (:data:`lab.models.weights.WEIGHTS`; ``q4`` reads a
            GGUF profile's own 4-bit codes). Recorded in the settings only when not
            ``float32``, so float32 work directories keep their key.
    """

    model: str = DEFAULT_PROFILE
    draft: str | None = None
    prompts: str | None = None
    limit: int | None = None
    shard: tuple[int, int] | None = None
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    gamma: int = DEFAULT_GAMMA
    seed: int = 0
    temperature: float = DEFAULT_TEMPERATURE
    device: str | None = None
    dtype: str | None = None
    out: str = "reports"
    n_resamples: int = N_RESAMPLES
    draft_dtype: str | None = None
    weights: str = "float32"
    draft_weights: str = "float32"

    def __post_init__(self) -> None:
        for name in ("weights", "draft_weights"):
            if getattr(self, name) not in WEIGHTS:
                raise ValueError(f"{name}={getattr(self, name)!r} must be one of {', '.join(WEIGHTS)}")
        if self.draft_dtype is not None and self.draft_dtype not in DRAFT_DTYPE_CHOICES:
            raise ValueError(f"draft_dtype={self.draft_dtype!r} must be one of {', '.join(DRAFT_DTYPE_CHOICES)}")
        for name, rng in (("max_new_tokens", TOKENS), ("gamma", GAMMA), ("n_resamples", RESAMPLES)):
            check_value(name, getattr(self, name), rng, "must be a positive integer")
        check_value("seed", self.seed, SEED)
        check_value("limit", self.limit, LIMIT, "must be a positive integer")
        if self.shard is not None:
            check_shard(self.shard, f"shard={self.shard!r} must be (K, N) with 1 <= K <= N")
        check_value("temperature", self.temperature, SAMPLED_TEMPERATURE, "must be > 0: the study runs in sampling mode")

    def draft_spec(self) -> str:
        """The draft spec in force.

        Raises:
            ValueError: no ``draft`` given and ``model`` is not a profile with one.
        """
        if self.draft:
            return self.draft
        profile = PROFILES.get(self.model)
        if profile is None or not profile.draft:
            raise ValueError(f"model={self.model!r} has no profile draft; pass --draft (early-exit:N, "
                             "prompt-lookup or a model name)")
        return profile.draft

    def draft_dtype_choice(self) -> tuple[str | None, str]:
        """The draft's dtype in force and where it came from.

        Returns:
            ``(dtype, source)``: ``dtype`` None means the target's; ``source`` says
            whether the flag, the study's measured choice for the profile
            (:data:`STUDY_DRAFT_DTYPES`) or the default set it.
        """
        if self.draft_dtype is not None:
            return self.draft_dtype, "--draft-dtype"
        if self.draft_weights != "float32":  # the table chose among float32-weight representations; --draft-weights is one
            return None, (f"the target's dtype: the draft's {self.draft_weights} weights replace the representation "
                          "that lab.study.config.STUDY_DRAFT_DTYPES chooses")
        if self.draft is None and self.model in STUDY_DRAFT_DTYPES:
            dtype, why = STUDY_DRAFT_DTYPES[self.model]
            return dtype, f"the study's measured choice for {self.model} (lab.study.config.STUDY_DRAFT_DTYPES): {why}"
        return None, "the target's dtype (the default: no measured choice for this draft)"


class Runner(Protocol):
    """Measures one prompt; ``info`` describes the models (for the report)."""

    info: dict[str, Any]

    def __call__(self, prompt: StudyPrompt) -> PromptOutcome: ...

    # Optional: ``alpha_at(prompt, temperature) -> float``, the speculative decode's
    # alpha at another temperature (H6); runners without it leave H6 untested.


class Progress(Protocol):
    """Receives progress events (the Rich bar in :mod:`lab.render.study` is one)."""

    def start(self, total: int, done: int) -> None: ...

    def advance(self, prompt_id: str, wall_s: float) -> None: ...

    # Optional: ``status(in_flight: int, failed: int)``, called by executors that run
    # several prompts at once (:mod:`lab.runs.cluster`) whenever either count changes.


class NoProgress:
    """A :class:`Progress` that reports nothing (the default of :func:`lab.study.run.run_study`)."""

    def start(self, total: int, done: int) -> None:
        pass

    def advance(self, prompt_id: str, wall_s: float) -> None:
        pass


def prompt_seed(study_seed: int, prompt_id: str) -> int:
    """The sampling seed of one prompt: 62 bits of sha256(f"{study_seed}:{prompt_id}")."""
    digest = hashlib.sha256(f"{study_seed}:{prompt_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 2


