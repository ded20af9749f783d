"""Running (or resuming) the study and gathering its tables for the analysis."""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from lab.analysis import StudyAnalysis, analyze
from lab.prompts import StudyPrompt
from lab.study.config import (_TOKEN_KEYS, PER_PROMPT_FIELDS, Progress, PromptOutcome, Runner, StudyConfig,
                              _NoProgress)
from lab.study.runner import ModelRunner
from lab.study.work import StudyPlan, _write_json_atomic, load_finished, plan_study, save_finished

logger = logging.getLogger(__name__)

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
