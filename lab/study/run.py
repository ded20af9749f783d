"""Running (or resuming) the study, shards and their merge, and gathering the tables for the analysis."""

from __future__ import annotations

import logging
import math
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from lab.analysis.study import StudyAnalysis, analyze
from lab.prompts import StudyPrompt
from lab.study.config import NoProgress, Progress, Runner, StudyConfig
from lab.study.outcome import DraftedToken, PromptOutcome, PromptRow, temperature_field
from lab.analysis.claims import DESIGN_TEMPERATURES
from lab.study.runner import ModelRunner
from lab.health.context_validity import context_measure_record
from lab.schemas import FileSchemaError
from lab.study.work import (StudyPlan, hold_work_dir, load_finished, plan_from_work_dir, plan_study,
                            read_finished, read_runner_info, read_settings, save_finished, write_prompt_set)
from lab.runs.files import write_json_atomic
from lab.runs.engine import Executor, SerialExecutor, UnitFailure
from lab.runs.locks import WorkDirBusyError, running_shards
from lab.runs.workdir import differing_keys

logger = logging.getLogger(__name__)


@dataclass
class StudyResult:
    """A finished study, ready for :mod:`lab.render.study` to report.

    Attributes:
        plan: The plan it ran.
        per_prompt: One row per prompt, prompt-file order.
        per_token: One row per drafted token, with its prompt's identity.
        analysis: H1-H6 and the descriptive statistics.
        info: The runner's description of the models (empty for a fake runner).
        n_resumed: Prompts loaded from the work directory instead of run.
        wall_s: Wall time of this invocation up to the analysis (model loading included).
        started: ``time.perf_counter()`` at the start, so the report can add its own time.
        missing: Prompts of the plan with no finished outcome (a merge of incomplete shards,
            or prompts the executor gave up on).
        failed: Prompt id -> why the executor gave up on it (empty for a serial run, which
            stops at a runner's error instead).
        merged_from: Work directories a merged report was built from (empty otherwise).
        context_measure: H1's context measure and its validity record
            (:func:`lab.health.context_validity.context_measure_record`).
    """

    plan: StudyPlan
    per_prompt: list[PromptRow]
    per_token: list[DraftedToken]
    analysis: StudyAnalysis
    info: dict[str, Any]
    n_resumed: int
    wall_s: float
    started: float = field(default=0.0, repr=False)
    missing: list[str] = field(default_factory=list)
    merged_from: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    context_measure: dict[str, Any] = field(default_factory=dict)

    @property
    def compute_s(self) -> float:
        """Sum of per-prompt wall times, resumed prompts included (the study's cost)."""
        return float(sum(r.wall_s or 0.0 for r in self.per_prompt))


def run_study(config_or_plan: StudyConfig | StudyPlan, *, runner: Runner | None = None,
              runner_factory: Callable[[StudyConfig], Runner] | None = None,
              progress: Progress | None = None, executor: Executor | None = None) -> StudyResult:
    """Run (or resume) the study and analyze it; the report is written by the caller.

    Args:
        config_or_plan: Settings, or a plan from :func:`plan_study`.
        runner: A :data:`Runner` to use (tests pass a fake).
        runner_factory: Builds the runner from the config when ``runner`` is
            ``None`` (default :meth:`ModelRunner.load`); called only when some
            prompt is left to run, so a finished work directory loads no model.
        progress: Progress events (``start`` once, ``advance`` per prompt run).
        executor: Where the prompts run (:class:`lab.runs.engine.Executor`, given a
            :class:`StudyExperiment`); default a :class:`lab.runs.engine.SerialExecutor` over ``runner``
            (else one loaded by ``runner_factory``). Prompts it
            gives up on are in ``failed`` and ``missing`` of the result.

    Returns:
        A :class:`StudyResult`.

    Raises:
        ValueError: bad settings or prompt file (before any model work).
        WorkDirBusyError: another process runs this study in the same work directory
            (:func:`lab.study.work.hold_work_dir`; held here unless the caller holds it).
    """
    plan = config_or_plan if isinstance(config_or_plan, StudyPlan) else plan_study(config_or_plan)
    with hold_work_dir(plan):
        return _run_held(plan, runner=runner, runner_factory=runner_factory, progress=progress, executor=executor)


def _run_held(plan: StudyPlan, *, runner: Runner | None, runner_factory: Callable[[StudyConfig], Runner] | None,
              progress: Progress | None, executor: Executor | None) -> StudyResult:
    """:func:`run_study` with the work directory held."""
    started = time.perf_counter()
    progress = progress or NoProgress()
    # 1. settle the work directory and what is already finished there
    created = not plan.work_dir.exists()
    plan.work_dir.mkdir(parents=True, exist_ok=True)
    write_prompt_set(plan)  # before settings.json, which marks a work directory: a resume reads both
    if not plan.work.settings_file.is_file():
        plan.work.write_settings(plan.settings)
    finished = plan.work.resume(plan.prompts, lambda path, p: load_finished(plan, p, path))
    outcomes: dict[str, PromptOutcome] = {pid: done for pid, done in finished.items() if done is not None}
    n_resumed = len(outcomes)
    todo = [p for p in plan.prompts if p.id not in outcomes]
    if n_resumed:
        logger.info("resuming %s: %d of %d prompts already finished", plan.work_dir, n_resumed, len(plan.prompts))

    # 2. run what is left through the executor (here, or on a cluster), one atomic work file per finished prompt
    info_file = plan.work_dir / "runner.json"
    info: dict[str, Any] = {}
    failed: dict[str, str] = {}
    if todo:
        executor = executor or SerialExecutor(runner)
        try:
            info = executor.start(StudyExperiment(plan, runner_factory))
        except BaseException:  # e.g. a draft deeper than the target: leave nothing behind
            executor.close()
            if created:
                plan.work.discard()
            raise
        write_json_atomic(info_file, info)
    else:
        info = read_runner_info(plan.work_dir)
    progress.start(len(plan.prompts), n_resumed)
    if todo:
        try:
            for p, got in executor.run(todo, progress):  # in the order they finish
                if isinstance(got, UnitFailure):
                    failed[p.id] = got.error
                    continue
                save_finished(plan, p, got)
                outcomes[p.id] = got
                progress.advance(p.id, got.row.wall_s)
        finally:
            executor.close()

    # 3. tables in prompt order, then the analysis
    result = assemble(plan, outcomes, info, n_resumed=n_resumed, started=started)
    result.failed = failed
    return result


def measure(runner: Runner, prompt: StudyPrompt, plan: StudyPlan) -> PromptOutcome:
    """One prompt's full outcome: the runner's numbers, the H6 temperature runs, its wall time and ids.

    The unit of work of every executor (:class:`StudyExperiment`: in this process, or inside
    an actor by :mod:`lab.runs.cluster`); a prompt's numbers depend only on the
    settings and its seed, never on where or in which order it runs.
    """
    t0 = time.perf_counter()
    outcome = runner(prompt)
    row = outcome.row
    if prompt.id in plan.temperature_ids:
        row = _temperature_runs(runner, prompt, row, plan.config.temperature)
    row = replace(row, wall_s=time.perf_counter() - t0, id=prompt.id, category=prompt.category,
                  variant=prompt.variant, twin_of=prompt.twin_of)
    return replace(outcome, row=row)


@dataclass(frozen=True)
class StudyExperiment:
    """The study as an experiment of the run engine (:class:`lab.runs.engine.Experiment`).

    A unit is a prompt, measured by :func:`measure` on a runner that a worker loads once
    (``runner_factory``, default :meth:`ModelRunner.load`).
    """

    plan: StudyPlan
    runner_factory: Callable[[StudyConfig], Runner] | None = None

    @property
    def device(self) -> str:
        return str(self.plan.settings["device"])

    def load(self) -> Runner:
        return (self.runner_factory or ModelRunner.load)(self.plan.config)

    def info(self, runner: Runner) -> dict[str, Any]:
        return dict(getattr(runner, "info", {}) or {})

    def measure(self, runner: Runner, prompt: StudyPrompt) -> PromptOutcome:
        return measure(runner, prompt, self.plan)

    def for_workers(self) -> StudyExperiment:
        """The plan with the device and dtype its settings resolved, so every worker loads the same models."""
        pinned = replace(self.plan.config, device=self.plan.settings["device"], dtype=self.plan.settings["dtype"])
        return StudyExperiment(replace(self.plan, config=pinned), self.runner_factory)


def _temperature_runs(runner: Runner, prompt: StudyPrompt, row: PromptRow, temperature: float) -> PromptRow:
    """H6: ``row`` with alpha at each design temperature (the main run's alpha where the study runs at one)."""
    alpha_at = getattr(runner, "alpha_at", None)
    if alpha_at is None and not any(math.isclose(t, temperature) for t in DESIGN_TEMPERATURES):
        return row
    t0 = time.perf_counter()
    alphas = {}
    for t in DESIGN_TEMPERATURES:
        if math.isclose(t, temperature):
            alphas[temperature_field(t)] = row.alpha
        elif alpha_at is not None:
            alphas[temperature_field(t)] = float(alpha_at(prompt, t))
    timing = {"temperature_s": time.perf_counter() - t0} if alpha_at is not None else {}
    return replace(row, **alphas, **timing)


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
    per_prompt = [outcomes[p.id].row for p in done]
    per_token = [replace(t, prompt_id=p.id, category=p.category, variant=p.variant)
                 for p in done for t in outcomes[p.id].tokens]
    decodes = {p.id: outcomes[p.id].decode.as_columns() for p in done if outcomes[p.id].decode}
    context_measure = context_measure_record(plan.config.model)  # H1's gate: the measure's validity record
    # the analysis reads the records as their columns (it sits below the study and knows no study type)
    analysis = analyze([r.as_columns() for r in per_prompt], [t.as_columns() for t in per_token],
                       seed=plan.config.seed, n_resamples=plan.config.n_resamples, decodes=decodes,
                       context_unmeasurable=context_measure["unmeasurable"],
                       distractors={p.id: p.distractor for p in done if p.distractor})
    return StudyResult(plan, per_prompt, per_token, analysis, info, n_resumed, time.perf_counter() - started,
                       started, missing=[p.id for p in order if p.id not in outcomes], merged_from=list(merged_from),
                       context_measure=context_measure)


def merge_study(work_dirs: Sequence[str | Path], **overrides: Any) -> StudyResult:
    """One study from the finished prompts of several shards' work directories.

    Every directory must hold the same ``settings.json`` (the shard is not part of
    it) and the prompt set it was started with (:func:`plan_from_work_dir`).
    Prompts finished in no directory are listed in ``missing``, and so are prompts whose
    work files cannot be trusted (:func:`lab.study.work.read_finished`: each named in a
    warning; a merge redoes nothing, ``--resume`` does). Each prompt's
    numbers come from its seed alone, so the merge of all shards equals an
    unsharded run with the same seed.

    Args:
        work_dirs: ``.study-work-<key>`` directories (one per shard, or shared).
        overrides: Fields that do not change the numbers (``n_resamples``, ``out``).

    Raises:
        ValueError: no directory, one directory named twice, a directory without settings, settings
            that differ (naming the keys), a changed prompt set, or no finished prompt.
        WorkDirBusyError: a shard (or a whole run) still runs in one of the
            directories, naming it and the shards: a report then would silently lack
            their prompts. Each directory is held while it is read.
    """
    started = time.perf_counter()
    dirs = [Path(d) for d in work_dirs]
    if not dirs:
        raise ValueError("merge needs at least one work directory")
    named: dict[Path, Path] = {}
    for d in dirs:  # one directory twice (or by two paths) was merged once and listed twice in the report
        if d.resolve() in named:
            raise ValueError(f"--merge names the work directory {str(named[d.resolve()])!r} twice"
                             + (f" (again as {str(d)!r})" if str(d) != str(named[d.resolve()]) else "")
                             + "; name each once")
        named[d.resolve()] = d
    settings = [read_settings(d, flag="--merge") for d in dirs]  # raises for a non-work dir
    for d, s in zip(dirs[1:], settings[1:]):
        if s != settings[0]:
            raise ValueError(f"merge: {str(d)!r} was run with other settings than {str(dirs[0])!r} "
                             f"(differ in {', '.join(differing_keys(s, settings[0]))}); shards of one study must "
                             "share every setting")
    plan = plan_from_work_dir(dirs[0], flag="--merge", **overrides)
    with ExitStack() as held:
        for d in {d.resolve(): d for d in dirs}.values():  # each directory once, by the path its shards lock
            try:
                held.enter_context(hold_work_dir(StudyPlan(plan.config, [], plan.settings, plan.key, d)))
            except WorkDirBusyError:
                shards = running_shards(d)
                who = f"shard{'s' if len(shards) > 1 else ''} {', '.join(shards)}" if shards else "a study"
                raise WorkDirBusyError(f"--merge: {who} still running in {str(d)!r}; merge when every shard has "
                                       "finished (a report now would lack their prompts)") from None
        return _merge_held(plan, dirs, started)


def _merge_held(plan: StudyPlan, dirs: list[Path], started: float) -> StudyResult:
    """:func:`merge_study` with every work directory held against running shards."""
    outcomes: dict[str, PromptOutcome] = {}
    damaged: dict[str, tuple[Path, FileSchemaError]] = {}  # prompt id -> a work file of it that cannot be trusted
    info: dict[str, Any] = {}
    for d in dirs:
        shard_plan = StudyPlan(plan.config, plan.all_prompts, plan.settings, plan.key, d, plan.all_prompts,
                               plan.temperature_ids)
        for p in plan.all_prompts:
            if p.id not in outcomes:
                try:
                    done = read_finished(shard_plan, p)
                except FileSchemaError as exc:
                    damaged.setdefault(p.id, (d, exc))
                    continue
                if done is not None:
                    outcomes[p.id] = done
        info = info or read_runner_info(d)
    for pid, (d, exc) in damaged.items():
        if pid not in outcomes:  # another shard's good file of the prompt is used instead
            logger.warning("%s; prompt %s is left out of the merged report, which is marked INCOMPLETE (merge "
                           "redoes no prompt: lab study --resume %s runs it again, then merge)", exc, pid, d)
    if not outcomes:
        raise ValueError(f"merge: no finished prompt in {', '.join(map(str, dirs))}"
                         + (f" ({len(damaged)} damaged work files, named above)" if damaged else ""))
    return assemble(plan, outcomes, info, n_resumed=len(outcomes), started=started, prompts=plan.all_prompts,
                    merged_from=[str(d) for d in dirs])


def config_dict(config: StudyConfig) -> dict[str, Any]:
    """The config as plain values (for the study's report.json)."""
    return asdict(config)


def summarize_prompts(prompts: Sequence[StudyPrompt]) -> dict[str, Any]:
    """Counts of the selected prompts by category and variant."""
    cats: dict[str, int] = {}
    for p in prompts:
        cats[p.category] = cats.get(p.category, 0) + 1
    return {"n_prompts": len(prompts), "by_category": cats,
            "n_poisoned": sum(p.variant == "poisoned" for p in prompts),
            "n_neutral": sum(p.variant == "neutral" for p in prompts)}
