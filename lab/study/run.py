"""Running (or resuming) the study, shards and their merge, and gathering the tables for the analysis."""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from lab.analysis import StudyAnalysis, analyze
from lab.analysis.claims import temperature_column
from lab.prompts import StudyPrompt
from lab.study.config import (_TOKEN_KEYS, DESIGN_TEMPERATURES, OPTIONAL_FIELDS, PER_PROMPT_COLUMNS,
                              PER_PROMPT_FIELDS, Progress, PromptOutcome, Runner, StudyConfig, _NoProgress)
from lab.study.runner import ModelRunner
from lab.study.work import (StudyPlan, _write_json_atomic, hold_work_dir, load_finished, plan_from_work_dir,
                            plan_study, read_settings, save_finished, write_prompt_set)

logger = logging.getLogger(__name__)


@dataclass
class StudyResult:
    """A finished study, ready for :mod:`lab.render.study` to report.

    Attributes:
        plan: The plan it ran.
        per_prompt: One row per prompt (:data:`PER_PROMPT_FIELDS`), prompt-file order.
        per_token: One row per drafted token (:data:`PER_TOKEN_FIELDS`).
        analysis: H1-H6 and the descriptive statistics.
        info: The runner's description of the models (empty for a fake runner).
        n_resumed: Prompts loaded from the work directory instead of run.
        wall_s: Wall time of this invocation up to the analysis (model loading included).
        started: ``time.perf_counter()`` at the start, so the report can add its own time.
        missing: Prompts of the plan with no finished outcome (a merge of incomplete shards).
        merged_from: Work directories a merged report was built from (empty otherwise).
    """

    plan: StudyPlan
    per_prompt: list[dict[str, Any]]
    per_token: list[dict[str, Any]]
    analysis: StudyAnalysis
    info: dict[str, Any]
    n_resumed: int
    wall_s: float
    started: float = field(default=0.0, repr=False)
    missing: list[str] = field(default_factory=list)
    merged_from: list[str] = field(default_factory=list)

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
        WorkDirBusyError: another process runs this study in the same work directory
            (:func:`lab.study.work.hold_work_dir`; held here unless the caller holds it).
    """
    plan = config_or_plan if isinstance(config_or_plan, StudyPlan) else plan_study(config_or_plan)
    with hold_work_dir(plan):
        return _run_held(plan, runner=runner, runner_factory=runner_factory, progress=progress)


def _run_held(plan: StudyPlan, *, runner: Runner | None, runner_factory: Callable[[StudyConfig], Runner] | None,
              progress: Progress | None) -> StudyResult:
    """:func:`run_study` with the work directory held."""
    started = time.perf_counter()
    progress = progress or _NoProgress()
    # 1. settle the work directory and what is already finished there
    created = not plan.work_dir.exists()
    plan.work_dir.mkdir(parents=True, exist_ok=True)
    write_prompt_set(plan)  # before settings.json, which marks a work directory: a resume reads both
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
        missing = [k for k in PER_PROMPT_FIELDS if k not in outcome.row and k not in _PIPELINE_FIELDS]
        if missing:
            raise ValueError(f"runner returned no {missing} for prompt {p.id!r}")
        for k in OPTIONAL_FIELDS:
            outcome.row.setdefault(k, None)  # not measured by this runner (None survives JSON, unlike NaN)
        if p.id in plan.temperature_ids:
            _temperature_runs(runner, p, outcome, plan.config.temperature)
        outcome.row["wall_s"] = time.perf_counter() - t0
        outcome.row.update({"id": p.id, "category": p.category, "variant": p.variant, "twin_of": p.twin_of})
        save_finished(plan, p, outcome)
        outcomes[p.id] = outcome
        progress.advance(p.id, outcome.row["wall_s"])

    # 3. tables in prompt order, then the analysis
    return assemble(plan, outcomes, info, n_resumed=n_resumed, started=started)


_PIPELINE_FIELDS = ("id", "category", "variant", "twin_of", "wall_s")  # filled by run_study, not the runner


def _temperature_runs(runner: Runner, prompt: StudyPrompt, outcome: PromptOutcome, temperature: float) -> None:
    """H6: alpha at each design temperature (the main run's alpha where the study runs at one)."""
    alpha_at = getattr(runner, "alpha_at", None)
    if alpha_at is None and not any(math.isclose(t, temperature) for t in DESIGN_TEMPERATURES):
        return
    t0 = time.perf_counter()
    for t in DESIGN_TEMPERATURES:
        if math.isclose(t, temperature):
            outcome.row[temperature_column(t)] = outcome.row["alpha"]
        elif alpha_at is not None:
            outcome.row[temperature_column(t)] = float(alpha_at(prompt, t))
    if alpha_at is not None:
        outcome.row["temperature_s"] = time.perf_counter() - t0


def assemble(plan: StudyPlan, outcomes: dict[str, PromptOutcome], info: dict[str, Any], *, n_resumed: int = 0,
             started: float | None = None, prompts: Sequence[StudyPrompt] | None = None,
             merged_from: Sequence[str] = ()) -> StudyResult:
    """Tables in prompt order from finished outcomes, then the analysis.

    Args:
        plan: The plan (its ``prompts``, or ``prompts`` if given, fix the order).
        outcomes: Finished outcomes by prompt id; prompts without one are listed in
            ``missing`` and left out of the tables.
        info, n_resumed, started, merged_from: Carried into the :class:`StudyResult`.
    """
    started = time.perf_counter() if started is None else started
    order = list(plan.prompts if prompts is None else prompts)
    done = [p for p in order if p.id in outcomes]
    per_prompt = [{k: outcomes[p.id].row.get(k) for k in PER_PROMPT_COLUMNS} for p in done]
    per_token = [{"prompt_id": p.id, "category": p.category, "variant": p.variant,
                  **{k: t[k] for k in _TOKEN_KEYS}} for p in done for t in outcomes[p.id].tokens]
    decodes = {p.id: outcomes[p.id].decode for p in done if outcomes[p.id].decode}
    analysis = analyze(per_prompt, per_token, seed=plan.config.seed, n_resamples=plan.config.n_resamples,
                       decodes=decodes)
    return StudyResult(plan, per_prompt, per_token, analysis, info, n_resumed, time.perf_counter() - started,
                       started, missing=[p.id for p in order if p.id not in outcomes], merged_from=list(merged_from))


def merge_study(work_dirs: Sequence[str | Path], **overrides: Any) -> StudyResult:
    """One study from the finished prompts of several shards' work directories.

    Every directory must hold the same ``settings.json`` (the shard is not part of
    it) and the prompt set it was started with (:func:`plan_from_work_dir`).
    Prompts finished in no directory are listed in ``missing``. Each prompt's
    numbers come from its seed alone, so the merge of all shards equals an
    unsharded run with the same seed.

    Args:
        work_dirs: ``.study-work-<key>`` directories (one per shard, or shared).
        overrides: Fields that do not change the numbers (``n_resamples``, ``out``).

    Raises:
        ValueError: no directory, a directory without settings, settings that
            differ (naming the keys), a changed prompt set, or no finished prompt.
    """
    started = time.perf_counter()
    dirs = [Path(d) for d in work_dirs]
    if not dirs:
        raise ValueError("merge needs at least one work directory")
    settings = [read_settings(d, flag="--merge") for d in dirs]  # raises for a non-work dir
    for d, s in zip(dirs[1:], settings[1:]):
        if s != settings[0]:
            keys = sorted(k for k in set(s) | set(settings[0]) if s.get(k) != settings[0].get(k))
            raise ValueError(f"merge: {str(d)!r} was run with other settings than {str(dirs[0])!r} "
                             f"(differ in {', '.join(keys)}); shards of one study must share every setting")
    plan = plan_from_work_dir(dirs[0], flag="--merge", **overrides)
    outcomes: dict[str, PromptOutcome] = {}
    info: dict[str, Any] = {}
    for d in dirs:
        shard_plan = StudyPlan(plan.config, plan.all_prompts, plan.settings, plan.key, d, plan.all_prompts,
                               plan.temperature_ids)
        for p in plan.all_prompts:
            if p.id not in outcomes:
                done = load_finished(shard_plan, p)
                if done is not None:
                    outcomes[p.id] = done
        if not info and (d / "runner.json").is_file():
            info = json.loads((d / "runner.json").read_text(encoding="utf-8"))
    if not outcomes:
        raise ValueError(f"merge: no finished prompt in {', '.join(map(str, dirs))}")
    return assemble(plan, outcomes, info, n_resumed=len(outcomes), started=started, prompts=plan.all_prompts,
                    merged_from=[str(d) for d in dirs])


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
