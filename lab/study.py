"""The empirical study: prefill -> decode -> speculative decoding, per prompt, with resume.

The lab's thesis (issue 5): context quality shapes attention during prefill,
attention shapes the model's confidence (entropy) during decode, and confidence
decides how well speculative decoding works. For every prompt of the prompt set
(:mod:`lab.prompts`) one pipeline measures, with the lab's own modules:

1. **prefill** (:func:`lab.prefill.analyze_prefill`): context health (0..10), the
   sink rate at position 0 and its mean over content positions, the share of
   attention received by position 0, and the number of content sinks;
2. **decode** (:func:`lab.tracker.track_generate`): mean, max and variance of the
   per-step entropy (bits) and the mean varentropy (bits^2);
3. **speculative decoding** (:func:`lab.speculative.speculative_generate`) with the
   profile's draft (:attr:`lab.models.ModelProfile.draft`): alpha, tau, and for
   every drafted token its draft entropy and whether the target accepted it.

Sampling mode, consistently: both decodes sample at ``temperature`` (default 1.0,
no top-k/top-p) with a seed derived from the study seed and the prompt id
(:func:`prompt_seed`), so acceptance is the probabilistic alpha of Leviathan et
al. (2023) (p = target, q = draft; a drafted token is kept with probability
min(1, p/q)), a prompt's numbers do not depend on the order prompts run in, and
a resumed study equals an uninterrupted one.

Resume: each finished prompt is written to ``<out>/.study-work-<key>/<id>.json``
(temp file + ``os.replace``, so a file is either complete or absent); ``<key>`` is
a hash of every setting that changes the numbers (:func:`settings_key`). A rerun
with the same settings, or ``--resume <work dir>``, loads the finished prompts and
runs only the rest; a work file that does not parse or does not match is ignored
and its prompt redone. The final report is written atomically by
:mod:`lab.render.study` via :func:`lab.reports.report_dir`, after which the work
directory is removed (:func:`discard_work`).

The per-prompt runner is injectable (:data:`Runner`): tests pass a fake;
:class:`ModelRunner` is the real one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from lab import models as lab_models
from lab.analysis import N_RESAMPLES, StudyAnalysis, analyze
from lab.prompts import StudyPrompt, default_prompts_path, load_prompts, select_prompts

logger = logging.getLogger(__name__)

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
WORK_FORMAT = 1  # bump when the work-file layout changes; old files are then redone

PER_PROMPT_FIELDS = (
    "id", "category", "variant", "twin_of", "n_prompt_tokens",
    "context_health", "sink_rate_pos0", "sink_rate_content_mean", "position0_share", "n_content_sinks",
    "mean_entropy_bits", "max_entropy_bits", "var_entropy_bits", "mean_varentropy_bits2", "n_new_tokens",
    "alpha", "tau", "n_drafted", "n_drafted_tested", "n_accepted", "n_rounds",
    "prefill_s", "decode_s", "speculative_s", "wall_s", "text",
)
PER_TOKEN_FIELDS = ("prompt_id", "category", "variant", "round", "index",
                    "draft_entropy_bits", "draft_normalized_entropy", "accepted", "tested")
_TOKEN_KEYS = PER_TOKEN_FIELDS[3:]  # what a runner reports per drafted token


@dataclass(frozen=True)
class StudyConfig:
    """Settings of one study; the CLI maps its flags onto this.

    Attributes:
        model: Target profile, path or hub id.
        draft: Draft spec for :func:`lab.speculative.make_draft`; ``None`` = the
            profile's (``early-exit:24`` for smollm2, the 0.5B model for qwen2.5).
        prompts: Prompt file; ``None`` = the embedded set.
        limit: Take at most this many prompts (balanced, twins kept together).
        max_new_tokens: Budget of each decode and each speculative run.
        gamma: Draft tokens per speculative round.
        seed: Study seed; each prompt's seed is derived from it (:func:`prompt_seed`).
        temperature: Sampling temperature of both decodes (> 0: sampling mode).
        device, dtype: As :func:`lab.models.load_model`.
        out: Reports root; the work directory lives inside it too.
        n_resamples: Bootstrap resamples of the analysis.
    """

    model: str = lab_models.DEFAULT_PROFILE
    draft: str | None = None
    prompts: str | None = None
    limit: int | None = None
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    gamma: int = DEFAULT_GAMMA
    seed: int = 0
    temperature: float = DEFAULT_TEMPERATURE
    device: str | None = None
    dtype: str | None = None
    out: str = "reports"
    n_resamples: int = N_RESAMPLES

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "gamma", "n_resamples"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r} must be a positive integer")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed={self.seed!r} must be a non-negative integer")
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1):
            raise ValueError(f"limit={self.limit!r} must be a positive integer")
        if not isinstance(self.temperature, (int, float)) or not math.isfinite(self.temperature) or self.temperature <= 0:
            raise ValueError(f"temperature={self.temperature!r} must be > 0: the study runs in sampling mode")

    def draft_spec(self) -> str:
        """The draft spec in force.

        Raises:
            ValueError: no ``draft`` given and ``model`` is not a profile with one.
        """
        if self.draft:
            return self.draft
        profile = lab_models.PROFILES.get(self.model)
        if profile is None or not profile.draft:
            raise ValueError(f"model={self.model!r} has no profile draft; pass --draft (early-exit:N, "
                             "prompt-lookup or a model name)")
        return profile.draft


@dataclass
class PromptOutcome:
    """What the runner measured for one prompt.

    Attributes:
        row: Per-prompt numbers, keys :data:`PER_PROMPT_FIELDS` (``id`` ...
            ``twin_of`` may be left out; the pipeline fills them from the prompt).
        tokens: One dict per drafted token with ``round``, ``index``,
            ``draft_entropy_bits``, ``draft_normalized_entropy``, ``accepted``, ``tested``.
    """

    row: dict[str, Any]
    tokens: list[dict[str, Any]]


class Runner(Protocol):
    """Measures one prompt; ``info`` describes the models (for the report)."""

    info: dict[str, Any]

    def __call__(self, prompt: StudyPrompt) -> PromptOutcome: ...


class Progress(Protocol):
    """Receives progress events (the Rich bar in :mod:`lab.render.study` is one)."""

    def start(self, total: int, done: int) -> None: ...

    def advance(self, prompt_id: str, wall_s: float) -> None: ...


class _NoProgress:
    def start(self, total: int, done: int) -> None:
        pass

    def advance(self, prompt_id: str, wall_s: float) -> None:
        pass


def prompt_seed(study_seed: int, prompt_id: str) -> int:
    """The sampling seed of one prompt: 62 bits of sha256(f"{study_seed}:{prompt_id}")."""
    digest = hashlib.sha256(f"{study_seed}:{prompt_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 2


# --------------------------------------------------------------------------- the real runner


def _count(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return int(value.bool().sum()) if value.dtype == torch.bool else int(value.numel())
    return len(value) if value is not None else 0


class ModelRunner:
    """The real per-prompt runner: target, tokenizer and draft, loaded once.

    Args:
        target: The target causal LM (eval mode).
        tokenizer: Its tokenizer.
        draft: A drafter from :func:`lab.speculative.make_draft`.
        config: The study settings (decode budget, gamma, temperature, seed).
        info: Description of the models for the report.
    """

    def __init__(self, target: Any, tokenizer: Any, draft: Any, config: StudyConfig, info: dict[str, Any]):
        self.target, self.tokenizer, self.draft, self.config, self.info = target, tokenizer, draft, config, info

    @classmethod
    def load(cls, config: StudyConfig) -> "ModelRunner":
        """Load the target (``lab.models.load_model``) and build the profile's draft.

        Raises:
            ValueError, lab.models.ModelUnavailableError: as the loaders do.
        """
        from lab.speculative import make_draft

        spec = config.draft_spec()
        t0 = time.perf_counter()
        target, tokenizer = lab_models.load_model(config.model, device=config.device, dtype=config.dtype)
        draft = make_draft(target, spec, target_tokenizer=tokenizer)
        info = {"model": dict(getattr(target, "lab_source", {}) or {"model": config.model}),
                "draft": spec, "draft_name": getattr(draft, "name", type(draft).__name__),
                "load_s": time.perf_counter() - t0}
        return cls(target, tokenizer, draft, config, info)

    def __call__(self, prompt: StudyPrompt) -> PromptOutcome:
        import torch

        from lab.prefill import analyze_prefill
        from lab.speculative import speculative_generate
        from lab.tracker import track_generate

        cfg = self.config
        seed = prompt_seed(cfg.seed, prompt.id)
        messages = [dict(m) for m in prompt.messages]
        input_ids = lab_models.encode_chat(self.tokenizer, messages)
        eos = lab_models.eos_token_ids(self.target, self.tokenizer)
        t_start = time.perf_counter()

        # 1. prefill: where attention goes, and how healthy the context is
        pre = analyze_prefill(self.target, self.tokenizer, messages)
        t_pre = time.perf_counter()
        rates = [float(v) for v in torch.as_tensor(pre.sink_rate).reshape(-1).tolist()]
        content = [r for r, role in zip(rates, pre.roles) if role == "content"]

        # 2. decode with the entropy tracker (sampling, seeded)
        track = track_generate(self.target, self.tokenizer, input_ids, max_new_tokens=cfg.max_new_tokens,
                               temperature=cfg.temperature, seed=seed)
        t_dec = time.perf_counter()

        # 3. speculative decoding with the draft (same sampling, own seeded generator)
        gen = torch.Generator(device=input_ids.device if input_ids.device.type != "mps" else "cpu").manual_seed(seed)
        spec = speculative_generate(self.target, self.draft, input_ids.to(next(self.target.parameters()).device),
                                    gamma=cfg.gamma, max_new_tokens=cfg.max_new_tokens,
                                    temperature=cfg.temperature, generator=gen, eos_token_ids=eos)
        t_spec = time.perf_counter()

        row = {
            "n_prompt_tokens": int(input_ids.shape[1]),
            "context_health": float(pre.context_health),
            "sink_rate_pos0": rates[0] if rates else math.nan,
            "sink_rate_content_mean": sum(content) / len(content) if content else math.nan,
            "position0_share": float(pre.position0_share),
            "n_content_sinks": _count(pre.content_sinks),
            "mean_entropy_bits": track.mean_entropy_bits,
            "max_entropy_bits": track.max_entropy_bits,
            "var_entropy_bits": track.var_entropy_bits,
            "mean_varentropy_bits2": track.mean_varentropy_bits2,
            "n_new_tokens": len(track.new_token_ids),
            "alpha": spec.alpha,
            "tau": spec.tau,
            "n_drafted": spec.n_drafted,
            "n_drafted_tested": spec.n_drafted_tested,
            "n_accepted": spec.n_accepted,
            "n_rounds": len(spec.rounds),
            "prefill_s": t_pre - t_start,
            "decode_s": t_dec - t_pre,
            "speculative_s": t_spec - t_dec,
            "text": track.text,
        }
        tokens = [{k: t[k] for k in _TOKEN_KEYS} for t in spec.per_token()]
        return PromptOutcome(row=row, tokens=tokens)


# --------------------------------------------------------------------------- plan and work directory


@dataclass
class StudyPlan:
    """A study ready to run: its prompts, settings and work directory."""

    config: StudyConfig
    prompts: list[StudyPrompt]
    settings: dict[str, Any]
    key: str
    work_dir: Path


def settings_key(settings: dict[str, Any]) -> str:
    """16 hex digits of sha256 over the canonical JSON of the settings."""
    blob = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def plan_study(config: StudyConfig) -> StudyPlan:
    """Load and select the prompts, fix the settings and the work directory.

    Everything is validated here, before any model work.

    Raises:
        ValueError: a bad prompt file (naming the line), bad settings, or a device /
            dtype that is not available.
    """
    prompts_path = Path(config.prompts) if config.prompts else default_prompts_path()
    prompts = select_prompts(load_prompts(prompts_path), config.limit)
    device = lab_models.resolve_device(config.device)
    dtype = str(lab_models.parse_dtype(config.dtype, device)).removeprefix("torch.")
    lab_models.check_model_available(config.model)  # an unknown model is named as such, not as a missing draft
    from lab.speculative import check_draft_spec

    if check_draft_spec(config.draft_spec()) == "model":  # N against the depth is checked once the target loads
        lab_models.check_model_available(config.draft_spec())
    prompt_digest = hashlib.sha256(
        json.dumps([p.to_json() for p in prompts], sort_keys=True).encode()).hexdigest()
    settings = {
        "format": WORK_FORMAT,
        "model": config.model, "draft": config.draft_spec(), "device": str(device), "dtype": dtype,
        "prompts_file": str(prompts_path), "prompts_sha256": prompt_digest, "n_prompts": len(prompts),
        "limit": config.limit, "max_new_tokens": config.max_new_tokens, "gamma": config.gamma,
        "seed": config.seed, "temperature": float(config.temperature),
    }
    key = settings_key(settings)
    return StudyPlan(config, prompts, settings, key, Path(config.out) / f"{WORK_PREFIX}{key}")


def config_from_work_dir(work_dir: str | Path, **overrides: Any) -> StudyConfig:
    """The settings stored in a work directory, as a :class:`StudyConfig` (for ``--resume``).

    Args:
        work_dir: A ``.study-work-<key>`` directory left by an interrupted study.
        overrides: Fields that do not change the numbers (``n_resamples``).

    Raises:
        ValueError: the directory or its ``settings.json`` is missing or unreadable.
    """
    path = Path(work_dir)
    settings_file = path / "settings.json"
    if not settings_file.is_file():
        raise ValueError(f"resume={str(path)!r} is not a study work directory (no settings.json)")
    try:
        s = json.loads(settings_file.read_text(encoding="utf-8"))
        cfg = StudyConfig(model=s["model"], draft=s["draft"], prompts=s["prompts_file"], limit=s["limit"],
                          max_new_tokens=s["max_new_tokens"], gamma=s["gamma"], seed=s["seed"],
                          temperature=s["temperature"], device=s["device"], dtype=s["dtype"],
                          out=str(path.parent), **overrides)
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"resume={str(path)!r}: settings.json is unreadable ({exc})") from exc
    return cfg


def _write_json_atomic(path: Path, data: Any) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, allow_nan=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def work_file(plan: StudyPlan, prompt: StudyPrompt) -> Path:
    """Where a finished prompt's outcome is kept."""
    return plan.work_dir / f"{prompt.id}.json"


def load_finished(plan: StudyPlan, prompt: StudyPrompt) -> PromptOutcome | None:
    """A finished prompt's outcome from the work directory, or ``None`` if absent or unusable.

    A file that does not parse, was written under other settings or for another
    prompt, or lacks a field is ignored (with a warning) and the prompt is redone.
    """
    path = work_file(plan, prompt)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        ok = (isinstance(data, dict) and data.get("key") == plan.key and data.get("prompt") == prompt.to_json()
              and isinstance(data.get("row"), dict) and all(k in data["row"] for k in PER_PROMPT_FIELDS)
              and isinstance(data.get("tokens"), list)
              and all(isinstance(t, dict) and all(k in t for k in _TOKEN_KEYS) for t in data["tokens"]))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        ok = False
    if not ok:
        logger.warning("ignoring unusable work file %s; %s will be redone", path, prompt.id)
        return None
    return PromptOutcome(row=data["row"], tokens=data["tokens"])


def save_finished(plan: StudyPlan, prompt: StudyPrompt, outcome: PromptOutcome) -> Path:
    """Write a finished prompt's outcome atomically (temp file + ``os.replace``)."""
    path = work_file(plan, prompt)
    _write_json_atomic(path, {"key": plan.key, "prompt": prompt.to_json(), "row": outcome.row,
                              "tokens": outcome.tokens})
    return path


def discard_work(plan: StudyPlan) -> None:
    """Remove the work directory (after the final report is in place)."""
    shutil.rmtree(plan.work_dir, ignore_errors=True)


# --------------------------------------------------------------------------- running


@dataclass
class StudyResult:
    """A finished study, ready for :mod:`lab.render.study` to report.

    Attributes:
        plan: The plan it ran.
        per_prompt: One row per prompt (:data:`PER_PROMPT_FIELDS`), prompt-file order.
        per_token: One row per drafted token (:data:`PER_TOKEN_FIELDS`).
        analysis: H1-H4 and the descriptive statistics.
        info: The runner's description of the models (empty for a fake runner).
        n_resumed: Prompts loaded from the work directory instead of run.
        wall_s: Wall time of this invocation up to the analysis (model loading included).
        started: ``time.perf_counter()`` at the start, so the report can add its own time.
    """

    plan: StudyPlan
    per_prompt: list[dict[str, Any]]
    per_token: list[dict[str, Any]]
    analysis: StudyAnalysis
    info: dict[str, Any]
    n_resumed: int
    wall_s: float
    started: float = field(default=0.0, repr=False)

    @property
    def compute_s(self) -> float:
        """Sum of per-prompt wall times, resumed prompts included (the study's cost)."""
        return float(sum(r.get("wall_s") or 0.0 for r in self.per_prompt))


def run_study(config_or_plan: StudyConfig | StudyPlan, *, runner: Runner | None = None,
              runner_factory: Callable[[StudyConfig], Runner] | None = None,
              progress: Progress | None = None) -> StudyResult:
    """Run (or resume) the study and analyze it; the report is written by the caller.

    Args:
        config_or_plan: Settings, or a plan from :func:`plan_study`.
        runner: A :data:`Runner` to use (tests pass a fake).
        runner_factory: Builds the runner from the config when ``runner`` is
            ``None`` (default :meth:`ModelRunner.load`); called only when some
            prompt is left to run, so a finished work directory loads no model.
        progress: Progress events (``start`` once, ``advance`` per prompt run).

    Returns:
        A :class:`StudyResult`.

    Raises:
        ValueError: bad settings or prompt file (before any model work).
    """
    started = time.perf_counter()
    plan = config_or_plan if isinstance(config_or_plan, StudyPlan) else plan_study(config_or_plan)
    progress = progress or _NoProgress()
    # 1. settle the work directory and what is already finished there
    created = not plan.work_dir.exists()
    plan.work_dir.mkdir(parents=True, exist_ok=True)
    settings_file = plan.work_dir / "settings.json"
    if not settings_file.is_file():
        _write_json_atomic(settings_file, plan.settings)
    outcomes: dict[str, PromptOutcome] = {}
    for p in plan.prompts:
        done = load_finished(plan, p)
        if done is not None:
            outcomes[p.id] = done
    n_resumed = len(outcomes)
    todo = [p for p in plan.prompts if p.id not in outcomes]
    if n_resumed:
        logger.info("resuming %s: %d of %d prompts already finished", plan.work_dir, n_resumed, len(plan.prompts))

    # 2. run what is left, one atomic work file per finished prompt
    info_file = plan.work_dir / "runner.json"
    info: dict[str, Any] = {}
    if todo:
        if runner is None:
            try:
                runner = (runner_factory or ModelRunner.load)(plan.config)
            except BaseException:  # e.g. a draft deeper than the target: leave nothing behind
                if created:
                    shutil.rmtree(plan.work_dir, ignore_errors=True)
                raise
        info = dict(getattr(runner, "info", {}) or {})
        _write_json_atomic(info_file, info)
    elif info_file.is_file():
        info = json.loads(info_file.read_text(encoding="utf-8"))
    progress.start(len(plan.prompts), n_resumed)
    for p in todo:
        t0 = time.perf_counter()
        outcome = runner(p)
        outcome.row["wall_s"] = time.perf_counter() - t0
        outcome.row.update({"id": p.id, "category": p.category, "variant": p.variant, "twin_of": p.twin_of})
        missing = [k for k in PER_PROMPT_FIELDS if k not in outcome.row]
        if missing:
            raise ValueError(f"runner returned no {missing} for prompt {p.id!r}")
        save_finished(plan, p, outcome)
        outcomes[p.id] = outcome
        progress.advance(p.id, outcome.row["wall_s"])

    # 3. tables in prompt order, then the analysis
    per_prompt = [{k: outcomes[p.id].row[k] for k in PER_PROMPT_FIELDS} for p in plan.prompts]
    per_token = [{"prompt_id": p.id, "category": p.category, "variant": p.variant,
                  **{k: t[k] for k in _TOKEN_KEYS}} for p in plan.prompts for t in outcomes[p.id].tokens]
    analysis = analyze(per_prompt, per_token, seed=plan.config.seed, n_resamples=plan.config.n_resamples)
    return StudyResult(plan, per_prompt, per_token, analysis, info, n_resumed,
                       time.perf_counter() - started, started)


def config_dict(config: StudyConfig) -> dict[str, Any]:
    """The config as plain values (for study.json)."""
    return asdict(config)


def summarize_prompts(prompts: Sequence[StudyPrompt]) -> dict[str, Any]:
    """Counts of the selected prompts by category and variant."""
    cats: dict[str, int] = {}
    for p in prompts:
        cats[p.category] = cats.get(p.category, 0) + 1
    return {"n_prompts": len(prompts), "by_category": cats,
            "n_poisoned": sum(p.variant == "poisoned" for p in prompts)}
