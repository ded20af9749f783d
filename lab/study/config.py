"""The study's settings, per-prompt outcome and the runner / progress interfaces."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from lab.models.profiles import DEFAULT_PROFILE, PROFILES
from lab.analysis.hypotheses import N_RESAMPLES
from lab.analysis.claims import H6_COLUMNS
from lab.prompts import StudyPrompt
from lab.models.weights import WEIGHTS
from lab.speculative.draft_dtypes import DRAFT_DTYPE_CHOICES


# Defaults of the full study (`make study`), chosen so its 84 prompts fit the 15-minute
# budget on 2 CPU cores. Measured with the embedded model, one thread, as CPU time per
# prompt (a load-independent upper bound on unloaded wall time): ~8 s for a clean
# prompt and 11-14 s for a poisoned one at 24 tokens and gamma 2, so ~13 min in all;
# at 32 tokens and gamma 4 it was ~13 s and ~20 s (over budget). The speculative run
# dominates: with the early-exit draft sampling at T = 1 alpha is ~0.1, so nearly only
# the first drafted token of a round is ever tested, and gamma 2 loses almost no
# per-token data while drafting half as much. Measured full default study on 2 CPU
# cores (torch's 2 threads, machine lightly shared, load ~1.9): 680 s wall (11.3 min);
# with one thread under heavier sharing 845 s wall, 752 s CPU. Both runs gave the
# same numbers. The report records each run's real wall time.
DEFAULT_MAX_NEW_TOKENS = 24
DEFAULT_GAMMA = 2
DEFAULT_TEMPERATURE = 1.0  # sampling mode: alpha is the probabilistic acceptance rate
WORK_PREFIX = ".study-work-"
# Seconds `--ray ADDRESS` waits for a running cluster to answer before it gives up
# (lab.study.cluster.check_reachable). Ray's own connect retries for minutes, printing GCS
# time-outs; a head node that answers at all answers a TCP connect and an HTTP/2 greeting in
# milliseconds on a LAN, so 10 s leave room for a busy one.
DEFAULT_CONNECT_TIMEOUT_S = 10.0
# Bump when the work-file layout or the pipeline changes: a work file of another format is redone.
# Format 3: one target decode per prompt (read off the speculative run's verify passes; no decode_s).
# Format 4: finished prompts in outcomes/<stem>-<digest>.json (lab.study.work.work_file_name), so no
# prompt id can overwrite the directory's own files or exceed a file name's length.
WORK_FORMAT = 4
# H6 (content vs sampling settings): a balanced subset of clean prompts also runs the
# speculative decode at each of these temperatures (the main run's alpha is reused
# when the study temperature is one of them). TEMPERATURE_SUBSET_PER_CATEGORY clean
# prompts per category: 6 x 2 = 12 prompts x 2 extra runs of ~4 s (clean prompt,
# 24 tokens, gamma 2; measured 4.1-5.1 s CPU per extra run on 4 subset prompts, one
# thread, on a busy machine) = ~110 s CPU added to the default study, whose estimate is
# then ~780 s wall on 2 threads (680 s measured before) or ~860 s CPU on one thread.
TEMPERATURE_SUBSET_PER_CATEGORY = 2

# The draft's dtype in the study, per target profile whose profile draft is a separate
# model: chosen by a measured end-to-end comparison on the study's own prompts (the
# figures are beside each entry), since a half-precision draft can be faster
# per step yet slower to prefill, depending on the CPU. (dtype, where the choice came
# from); a profile not listed runs its draft in the target's dtype.
#
# qwen2.5-coder (0.5B draft): measured 2026-12-01 on 6 study prompts (--limit 6: three
# clean/poisoned twin pairs), one-decode pipeline, float32 target, one torch thread, on a
# busy machine (load 8.2-9.6 on 2 cores): bfloat16 draft 93.5 s CPU / 221 s wall, float32
# draft 94.4 s / 303 s, the same alphas. CPU is a tie (1 %), the wall favours bfloat16, and
# on this CPU (AMX-BF16) the bfloat16 draft alone prefills 40 tokens in 0.28 s vs 0.62 s
# and steps in 0.168 s vs 0.176 s (one thread); `lab bench` on 2 quiet threads measured
# its cost ratio c at 0.20 vs 0.43. So bfloat16: no slower anywhere measured, lossless
# (the float32 target verifies every token). Re-measure on another CPU (an AVX2-only one
# was reported to prefill bfloat16 several times slower): --draft-dtype float32|bfloat16.
STUDY_DRAFT_DTYPES: dict[str, tuple[str, str]] = {
    "qwen2.5-coder": ("bfloat16", "6 study prompts, 2026-12-01: 93.5 s CPU / 221 s wall vs float32 94.4 s / "
                                  "303 s (one thread, busy machine), same alphas; see lab/study/config.py"),
}

PER_PROMPT_FIELDS = (
    "id", "category", "variant", "twin_of", "n_prompt_tokens",
    "context_health", "sink_rate_pos0", "sink_rate_content_mean", "position0_share", "n_content_sinks",
    "mean_entropy_bits", "max_entropy_bits", "var_entropy_bits", "mean_varentropy_bits2", "n_new_tokens",
    "alpha", "tau", "n_drafted", "n_drafted_tested", "n_accepted", "n_rounds",
    "prefill_s", "speculative_s", "wall_s", "text",
)
# Left None (empty in the CSV) when a runner does not report them (fake runners in tests): the
# count-based health (reported beside the graded one, for comparison), the subword summary of the
# tracked decode (H5), alpha at the design temperatures (H6, subset only), and the time of a
# separate tracked decode (decode_s: a runner that makes one; ModelRunner reads the decode off the
# speculative run and reports none).
# Every health candidate's value and the content length beside the chosen one, so that a long
# run (the pair's H1) can be re-read with another candidate, or one referenced to length, without
# running it again; kept equal to lab.health.measures.CANDIDATES by tests/unit/test_health.py
# (spelt out here so that the study's settings import no torch).
HEALTH_CANDIDATE_COLUMNS = ("health_soft_penalty", "health_content_share", "health_content_entropy",
                            "health_content_sink_rate", "health_relative_entropy", "health_local_entropy",
                            "health_content_entropy_for_length", "health_relative_entropy_for_length",
                            "health_local_entropy_for_length")
OPTIONAL_FIELDS = ("content_sink_health", "initial_entropy_bits", "continuation_entropy_bits",
                   "n_multi_token_words", *H6_COLUMNS, "temperature_s", "decode_s",
                   "n_content_tokens", *HEALTH_CANDIDATE_COLUMNS)
PER_PROMPT_COLUMNS = (*PER_PROMPT_FIELDS[:-1], *OPTIONAL_FIELDS, PER_PROMPT_FIELDS[-1])  # per_prompt.csv, text last
PER_TOKEN_FIELDS = ("prompt_id", "category", "variant", "round", "index",
                    "draft_entropy_bits", "draft_normalized_entropy", "accepted", "tested")
TOKEN_KEYS = PER_TOKEN_FIELDS[3:]  # what a runner reports per drafted token


# Ranges of a finished prompt's numbers, checked when a work file is loaded (a file edited
# by hand, or by another program, is redone rather than reported). NaN / None stand for
# "not measured" (e.g. no content positions) and pass; infinities never do.
RANGE_TOLERANCE = 1e-6  # float rounding at a bound (a normalized entropy of 1 + 1e-7)
_UNIT = ("alpha", "sink_rate_pos0", "sink_rate_content_mean", "position0_share", *H6_COLUMNS)
_HEALTH = ("context_health", "content_sink_health", *HEALTH_CANDIDATE_COLUMNS)  # 0..10
_NON_NEGATIVE = ("mean_entropy_bits", "max_entropy_bits", "var_entropy_bits", "mean_varentropy_bits2", "tau",
                 "initial_entropy_bits", "continuation_entropy_bits", "prefill_s", "decode_s", "speculative_s",
                 "wall_s", "temperature_s")
_COUNTS = ("n_prompt_tokens", "n_content_tokens", "n_content_sinks", "n_new_tokens", "n_drafted", "n_drafted_tested", "n_accepted",
           "n_rounds", "n_multi_token_words")


def _number_problem(name: str, v: Any, lo: float, hi: float) -> str | None:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
            or not lo - RANGE_TOLERANCE <= v <= hi + RANGE_TOLERANCE):
        return f"{name}={v!r} outside [{lo:g}, {hi:g}]"
    return None


def outcome_problem(row: dict[str, Any], tokens: list[dict[str, Any]]) -> str | None:
    """What is out of range in a finished prompt's numbers, or ``None``.

    Rates and shares in [0, 1], health in [0, 10], entropies, times and ``tau``
    non-negative, counts non-negative integers with n_accepted <= n_drafted_tested <=
    n_drafted; per drafted token a normalized entropy in [0, 1], a non-negative entropy
    and boolean ``accepted`` / ``tested``.
    """
    checks = [*((k, 0.0, 1.0) for k in _UNIT), *((k, 0.0, 10.0) for k in _HEALTH),
              *((k, 0.0, math.inf) for k in _NON_NEGATIVE)]
    for k, lo, hi in checks:
        problem = _number_problem(k, row.get(k), lo, hi)
        if problem:
            return problem
    for k in _COUNTS:
        v = row.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            return f"{k}={v!r} is not a count"
    if not row.get("n_accepted", 0) <= row.get("n_drafted_tested", 0) <= row.get("n_drafted", 0):
        return (f"n_accepted={row.get('n_accepted')!r} <= n_drafted_tested={row.get('n_drafted_tested')!r} <= "
                f"n_drafted={row.get('n_drafted')!r} does not hold")
    for i, t in enumerate(tokens):
        problem = (_number_problem(f"tokens[{i}].draft_normalized_entropy", t.get("draft_normalized_entropy"), 0, 1)
                   or _number_problem(f"tokens[{i}].draft_entropy_bits", t.get("draft_entropy_bits"), 0, math.inf))
        if problem:
            return problem
        if not isinstance(t.get("accepted"), bool) or not isinstance(t.get("tested"), bool):
            return f"tokens[{i}]: accepted / tested are not booleans"
    return None


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
        for name in ("max_new_tokens", "gamma", "n_resamples"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r} must be a positive integer")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed={self.seed!r} must be a non-negative integer")
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1):
            raise ValueError(f"limit={self.limit!r} must be a positive integer")
        if self.shard is not None:
            ok = (isinstance(self.shard, tuple) and len(self.shard) == 2
                  and all(isinstance(v, int) and not isinstance(v, bool) for v in self.shard))
            if not ok or not 1 <= self.shard[0] <= self.shard[1]:
                raise ValueError(f"shard={self.shard!r} must be (K, N) with 1 <= K <= N")
        if not isinstance(self.temperature, (int, float)) or not math.isfinite(self.temperature) or self.temperature <= 0:
            raise ValueError(f"temperature={self.temperature!r} must be > 0: the study runs in sampling mode")

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
        if self.draft is None and self.model in STUDY_DRAFT_DTYPES:
            dtype, why = STUDY_DRAFT_DTYPES[self.model]
            return dtype, f"the study's measured choice for {self.model} (lab.study.config.STUDY_DRAFT_DTYPES): {why}"
        return None, "the target's dtype (the default: no measured choice for this draft)"


@dataclass
class PromptOutcome:
    """What the runner measured for one prompt.

    Attributes:
        row: Per-prompt numbers, keys :data:`PER_PROMPT_FIELDS` (``id`` ...
            ``twin_of`` may be left out; the pipeline fills them from the prompt).
        tokens: One dict per drafted token with ``round``, ``index``,
            ``draft_entropy_bits``, ``draft_normalized_entropy``, ``accepted``, ``tested``.
        decode: Per generated token of the tracked decode: ``entropy_bits`` and
            ``word`` (``"initial"``, ``"continuation"`` or ``""``;
            :func:`lab.analysis.subwords.word_positions`); empty if not reported.
    """

    row: dict[str, Any]
    tokens: list[dict[str, Any]]
    decode: dict[str, list[Any]] = field(default_factory=dict)


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
    # several prompts at once (:mod:`lab.study.cluster`) whenever either count changes.


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


