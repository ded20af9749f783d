"""The study's plan and its work directory: settings key, atomic per-prompt work files, resume."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab import models as lab_models
from lab.prompts import StudyPrompt, default_prompts_path, load_prompts, select_prompts
from lab.study.config import _TOKEN_KEYS, PER_PROMPT_FIELDS, WORK_FORMAT, WORK_PREFIX, PromptOutcome, StudyConfig

logger = logging.getLogger(__name__)

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
    lab_models.check_model_name(config.model)  # an unknown model is named as such, not as a missing draft
    from lab.speculative import check_draft_spec

    check_draft_spec(config.draft_spec())  # N against the depth is checked once the target loads
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

