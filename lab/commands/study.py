"""``lab study``: run the empirical study (context health -> entropy -> speculative acceptance).

Run the study on the prompt set: prefill sinks and context health, decode entropy, speculative decoding with the
draft; test the pre-stated hypotheses H1-H6 (Holm family, with power) and write a report directory.

Runs every prompt of the prompt set (a JSONL file or a named source of real prompts,
:mod:`lab.sources`) through one target prefill (the attention capture) and one
speculative decode whose verify passes give the entropy tracker's statistics
(:mod:`lab.study`), tests the pre-stated hypotheses (:mod:`lab.analysis`) and writes
``<out>/<timestamp>-study/`` (:mod:`lab.render.study`).
Bad flags or a bad prompt file exit 2 before any model loads. An interrupted study
(Ctrl-C, SIGTERM) keeps its finished prompts in ``<out>/.study-work-<key>/`` and says
so; the same command, or ``--resume DIR``, continues where it stopped. ``--resume``
takes everything that changes the numbers from DIR (settings, stored prompt set,
hence seeds) and works on DIR itself, renamed or copied; a typed flag that DIR fixes
is refused unless it equals DIR's value. A work directory is locked while a study
runs in it (:func:`lab.study.work.hold_work_dir`): a second run is refused in one line.

Big studies: ``--shard K/N`` runs only the K-th of N disjoint, category-balanced
slices into the same work-directory layout (and writes no report); ``--merge
DIR...`` builds one report from the shards' work directories, refusing shards
whose settings differ, and a typed flag that the directories fix unless it equals
their value (as ``--resume`` does). Any scheduler (a Slurm array, GNU parallel, several
machines with a shared disk) can run the shards.

On a Ray cluster: ``--ray [ADDRESS]`` runs the prompts on actors that each hold
the models (:mod:`lab.runs.cluster`), into the same work directory, so
``--resume`` and ``--merge`` work as for a serial run. Without an address a local
cluster is started on this machine; ``--ray auto`` joins a running one. Prompts
that fail after Ray's retries are named, and no report is written without them.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os

from lab.commands.common import (add_draft_weights_arg, add_model_args, add_out_arg, add_ranged_arg, add_ray_args,
                                 cluster_config, command_parser, parse_shard, range_text)
from lab.commands.runtime_choice import add_runtime_arg, refuse_runtime

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    from lab.speculative.draft_dtypes import DRAFT_DTYPE_CHOICES, DRAFT_DTYPE_HELP

    p = command_parser(subparsers, "study", run, __doc__)
    add_model_args(p)
    add_draft_weights_arg(p)
    p.add_argument("--draft", default=None,
                   help="draft spec: early-exit:N, prompt-lookup or a model name (default: the profile's draft)")
    p.add_argument("--draft-dtype", default=None, choices=DRAFT_DTYPE_CHOICES,
                   help=f"a draft model's dtype: {DRAFT_DTYPE_HELP} (default: the study's measured "
                        "choice for the profile, else the target's dtype)")
    _add_sample_args(p)
    _add_work_args(p)
    add_runtime_arg(p, torch_only="the study's prefill measures (sinks, context health)")
    add_out_arg(p)
    # None = not typed, so that --resume can tell a flag typed by the user from a default
    # (the defaults are filled in by _fresh_config); --model's and --out's shared defaults too.
    p.set_defaults(model=None, out=None)


def _add_sample_args(p: argparse.ArgumentParser) -> None:
    """The prompts and the numbers of a study: the set, its size, the decode, the seed and the bootstrap."""
    from lab.analysis.hypotheses import N_RESAMPLES
    from lab.study.config import DEFAULT_GAMMA, DEFAULT_MAX_NEW_TOKENS, DEFAULT_TEMPERATURE

    p.add_argument("--prompts", default=None,
                   help="prompt file (JSONL) or a named source of real prompts: humaneval (164 code problems), "
                        "pydoc-topics (79, summary), zen-of-python (19, creative), sympy-doctests (43, math); "
                        "default: the embedded set of 84 prompts; lab/data/prompts_large.jsonl holds 450, "
                        "lab/data/prompts_power.jsonl 1,440 (the size the power table asks for)")
    add_ranged_arg(p, "study", "--limit", None, "run at most N prompts, balanced across categories, each clean prompt "
                   "with its twins, ", " (default: all)")
    add_ranged_arg(p, "study", "--max-new-tokens", None, "new tokens per prompt's decode, ",
                   f" (default: {DEFAULT_MAX_NEW_TOKENS})")
    add_ranged_arg(p, "study", "--gamma", None, "draft tokens per speculative round, ", f" (default: {DEFAULT_GAMMA})")
    add_ranged_arg(p, "study", "--temperature", None, "sampling temperature of the (speculative) decode, ",
                   f" (default: {DEFAULT_TEMPERATURE})")
    add_ranged_arg(p, "study", "--seed", None, "study seed, ", "; each prompt's seed derives from it (default: 0)")
    add_ranged_arg(p, "study", "--resamples", N_RESAMPLES, "bootstrap resamples for the confidence intervals, ",
                   f" (default: {N_RESAMPLES})")


def _add_work_args(p: argparse.ArgumentParser) -> None:
    """Where and how the work runs: resume, shards and their merge, a Ray cluster, threads."""
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="continue the interrupted study in this work directory (renamed or copied ones too), with "
                        "its stored settings and prompt set; flags that change the numbers are refused unless they "
                        "equal DIR's; the report goes beside DIR unless --out is given")
    p.add_argument("--shard", default=None, metavar="K/N",
                   help="run only the K-th of N disjoint, category-balanced slices (each clean prompt with its twins) into "
                        "the work directory, without a report; merge the shards with --merge")
    p.add_argument("--merge", nargs="+", default=None, metavar="DIR",
                   help="build one report from these shards' .study-work-* directories (their settings must agree); "
                        "flags that change the numbers are refused unless they equal the directories'")
    add_ray_args(p, units="prompts", command="study", what="study")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help=f"torch threads, {range_text('study', 'threads')}: of this process (default: torch's choice), "
                        "or of each worker or Ray actor, which reserves as many CPUs (default 1); the numbers equal "
                        "across runs with equal threads")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help=f"local worker processes, {range_text('study', 'workers')}, each loading the models once and "
                        "taking prompts from one queue, with --threads threads each (default: on the CPU, one "
                        "one-thread worker per CPU where every worker's float32 models, at most 8x their GGUF files, "
                        "fit in half the memory, lab.runs.local.auto_workers; else 1, this process alone with "
                        "--threads)")


# Flags whose values DIR fixes under --resume: dest -> the settings.json key they set.
RESUME_FIXED = {"model": "model", "draft": "draft", "device": "device", "dtype": "dtype", "prompts": "prompts_sha256",
                "limit": "limit", "max_new_tokens": "max_new_tokens", "gamma": "gamma", "seed": "seed",
                "temperature": "temperature", "draft_dtype": "draft_dtype_flag", "weights": "weights",
                "draft_weights": "draft_weights"}
# Settings recorded only when not at their default (float32 weights): absent means this.
RESUME_DEFAULTS = {"weights": "float32", "draft_weights": "float32"}


def _fresh_config(args: argparse.Namespace):
    from lab.models.profiles import DEFAULT_PROFILE
    from lab.study.config import DEFAULT_GAMMA, DEFAULT_MAX_NEW_TOKENS, DEFAULT_TEMPERATURE, StudyConfig

    pick = lambda v, default: default if v is None else v  # noqa: E731
    return StudyConfig(model=pick(args.model, DEFAULT_PROFILE), draft=args.draft, prompts=args.prompts,
                       limit=args.limit, max_new_tokens=pick(args.max_new_tokens, DEFAULT_MAX_NEW_TOKENS),
                       gamma=pick(args.gamma, DEFAULT_GAMMA), seed=pick(args.seed, 0),
                       temperature=pick(args.temperature, DEFAULT_TEMPERATURE), device=args.device,
                       dtype=args.dtype, out=pick(args.out, "reports"), n_resamples=args.resamples,
                       draft_dtype=args.draft_dtype, weights=args.weights, draft_weights=args.draft_weights)


def _resume_conflicts(args: argparse.Namespace, settings: dict) -> list[str]:
    """The typed flags whose values differ from the settings DIR was started with."""
    from lab.models.devices import parse_dtype, resolve_device
    from lab.prompts import select_prompts
    from lab.sources import load_prompt_set
    from lab.study.work import prompts_digest

    out = []
    for dest, key in RESUME_FIXED.items():
        typed = getattr(args, dest)
        if typed is None or (dest in ("weights", "draft_weights") and typed == "float32"):
            continue  # not typed (the weights flags default to float32: typed or not, DIR decides)
        value = typed
        if dest == "device":
            value = str(resolve_device(typed))
        elif dest == "dtype":
            value = str(parse_dtype(typed, resolve_device(settings.get("device")))).removeprefix("torch.")
        elif dest == "prompts":
            value = prompts_digest(select_prompts(load_prompt_set(typed), settings.get("limit")))
        elif dest == "temperature":
            value = float(typed)
        stored = settings.get(key, RESUME_DEFAULTS.get(key))
        if value != stored:
            flag = f"--{dest.replace('_', '-')}"
            was = "another prompt set" if dest == "prompts" else f"no {flag}" if stored is None else repr(stored)
            out.append(f"{flag} {typed!r} (DIR has {was})")
    return out


def checked_runner_factory(plan) -> "CheckedRunnerFactory":
    """A runner factory that loads the models, then checks every prompt's length + ``--max-new-tokens``
    against the target's context (:func:`lab.decode.check_context`) before any prompt runs.

    Raises (from the factory):
        ValueError: a prompt too long for the context, or one the chat template refuses,
            naming the prompt's id.
    """
    return CheckedRunnerFactory(tuple(plan.prompts))


@dataclasses.dataclass(frozen=True)
class CheckedRunnerFactory:
    """:func:`checked_runner_factory`'s factory: a value, not a closure, so that it pickles to a worker process."""

    prompts: tuple

    def __call__(self, config):
        from lab.decode import check_context
        from lab.models.chat import encode_chat
        from lab.study.runner import ModelRunner

        runner = ModelRunner.load(config)
        if getattr(runner, "target", None) is None:  # a runner without a model (tests' fakes): nothing to check
            return runner
        for prompt in self.prompts:
            try:
                ids = encode_chat(runner.tokenizer, [dict(m) for m in prompt.messages])
                check_context(runner.target, ids.shape[1], config.max_new_tokens, arg="--max-new-tokens")
            except ValueError as exc:  # in a set of hundreds, say which prompt
                raise ValueError(f"prompt {prompt.id!r}: {exc}") from None
        return runner


def run(args: argparse.Namespace) -> int:
    from lab.machine import set_threads
    from lab.reports import check_reports_root
    from lab.study.work import hold_work_dir, plan_from_work_dir, plan_study, read_settings

    # 1. Validate everything (flags, prompt file, device, Ray) before loading a model.
    refuse_runtime(args, "study")
    if args.merge:
        return _merge(args)
    cluster = cluster_config(args)
    if cluster is not None and args.workers is not None:
        raise ValueError("--workers runs local processes and --ray runs Ray actors: choose one")
    shard = parse_shard(args.shard) if args.shard else None
    if args.resume:  # DIR fixes everything that changes the numbers; --out only moves the report
        conflicts = _resume_conflicts(args, read_settings(args.resume))
        if conflicts:
            raise ValueError(f"--resume {args.resume!r} continues with the settings it was started with; "
                             f"drop {', '.join(conflicts)}, or start a new study without --resume")
        overrides = {"n_resamples": args.resamples, "shard": shard}
        if args.out is not None:
            overrides["out"] = str(check_reports_root(args.out))
        plan = plan_from_work_dir(args.resume, **overrides)
    else:
        check_reports_root(args.out or "reports")
        config = _fresh_config(args)
        if shard is not None:
            config = dataclasses.replace(config, shard=shard)
        plan = plan_study(config)
        out = usable_out(config.out)
        if out != config.out:
            plan = plan_study(dataclasses.replace(config, out=out))
    if shard is not None and not plan.prompts:
        from lab.study.work import count_units

        raise ValueError(f"--shard {args.shard} selects no prompt: the {len(plan.all_prompts)} selected prompts "
                         f"form {count_units(plan.all_prompts)} units (a twin pair or a single prompt), so N must "
                         "be at most that")

    executor = _executor(args, plan, cluster)
    if executor is None:
        set_threads(args.threads)
    with hold_work_dir(plan):  # another run in this work directory is refused here, in one line
        logger.info("study: %d prompts, work directory %s", len(plan.prompts), plan.work_dir)
        try:
            return _run_and_report(plan, shard, executor)
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: say what is kept and how to go on
            from lab.study.work import load_finished

            if plan.work_dir.is_dir():
                n = sum(load_finished(plan, p) is not None for p in plan.prompts)
                exc.args = (f"{n} finished prompts are kept in {plan.work_dir}; continue with: "
                            f"lab study --resume {plan.work_dir}",)
            raise


def _executor(args: argparse.Namespace, plan, cluster):
    """Where the prompts run: a Ray cluster (``--ray``), local worker processes (``--workers``, or by default
    where :func:`lab.runs.local.auto_workers` says more than one fits), or ``None``: this process."""
    from lab.runs.cluster import RayExecutor
    from lab.runs.local import ProcessExecutor, auto_workers

    if cluster is not None:
        return RayExecutor(cluster)
    workers = args.workers
    if workers is None:
        workers = 1 if args.threads is not None else auto_workers(plan.config.model, plan.config.draft_spec(),
                                                                   str(plan.settings["device"]))
    workers = min(workers, max(1, len(plan.prompts)))
    return ProcessExecutor(workers, args.threads or 1) if workers > 1 else None


def _run_and_report(plan, shard: tuple[int, int] | None, executor) -> int:
    from lab.render.console import print_report, stdout_console
    from lab.render.study import StudyProgress, verdict_table, write_report
    from lab.reports import ReportWriteError
    from lab.study.work import discard_work
    from lab.study.run import run_study

    # 2. Run (or resume), with a progress bar on stderr.
    factory = checked_runner_factory(plan)
    with StudyProgress() as progress:
        result = run_study(plan, progress=progress, runner_factory=factory, executor=executor)
    if result.failed:
        return _report_failed(result)

    # 3. A shard stops here: its prompts are in the work directory, for --merge.
    if shard is not None:
        stdout_console().print(f"shard {shard[0]}/{shard[1]}: {len(plan.prompts)} of {len(plan.all_prompts)} prompts "
                               f"finished in {plan.work_dir}; when every shard is done: lab study --merge DIR...",
                               markup=False, highlight=False, soft_wrap=True)
        return 0

    # 4. Report atomically, then drop the work directory (kept when the report fails).
    try:
        path = write_report(result)
    except ReportWriteError as exc:
        raise ReportWriteError(f"{exc}; the finished prompts are kept in {plan.work_dir}: "
                               f"lab study --resume {plan.work_dir} --out DIR writes the report") from exc
    discard_work(plan)
    out = stdout_console()
    out.print(verdict_table(result))
    print_report(out, path)
    return 0


def usable_out(out: str) -> str:
    """``out``, or the reports fallback (:func:`lab.reports.fallback_root`) where ``out`` refuses a new folder.

    The work directory and its lock live under ``out``, so a fresh study needs a folder it can
    create there before it starts, not only when its report is written. The access bits that
    :func:`lab.reports.check_reports_root` reads do not tell: as root, ``/sys/kernel`` passes
    them and refuses ``mkdir`` (EPERM). So a folder is made and removed; where that fails the
    study runs under the fallback, with a warning naming both, as every command's report does.
    Creates ``out`` (and its parents) when it can.
    """
    import tempfile
    from pathlib import Path

    from lab.reports import fallback_root

    try:
        Path(out).expanduser().mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=".lab-probe-", dir=Path(out).expanduser()))
        return out
    except OSError as exc:
        fallback = fallback_root()
        logger.warning("cannot write the study under %s (%s); writing it under %s instead",
                       out, exc.strerror or exc, fallback)
        return str(fallback)


def _report_failed(result) -> int:
    """No report for a study that lacks prompts: name them and say how to finish (exit 1)."""
    import sys

    plan = result.plan
    n = len(result.missing)
    lines = [f"lab study: {len(result.failed)} of {len(plan.prompts)} prompts failed on the cluster; "
             f"the study lacks {n} prompt{'s' if n != 1 else ''}, so no report was written:"]
    lines += [f"  {pid}: {error}" for pid, error in result.failed.items()]
    lines.append(f"the {len(plan.prompts) - len(result.missing)} finished prompts are kept in {plan.work_dir}; "
                 f"rerun the failed ones with: lab study --resume {plan.work_dir} --ray ..., or report without "
                 f"them with: lab study --merge {plan.work_dir}")
    print("\n".join(lines), file=sys.stderr)
    return 1


def _merge(args: argparse.Namespace) -> int:
    from lab.render.console import print_report, stdout_console
    from lab.render.study import verdict_table, write_report
    from lab.reports import check_reports_root
    from lab.study.run import merge_study

    if args.resume or args.shard or args.ray is not None:
        raise ValueError("--merge cannot be combined with --resume, --shard or --ray")
    _check_merge_flags(args)
    result = merge_study(args.merge, n_resamples=args.resamples, out=str(check_reports_root(args.out or "reports")))
    path = write_report(result)
    out = stdout_console()
    out.print(verdict_table(result))
    if result.missing:
        out.print(f"warning: {len(result.missing)} prompts had no finished result in the shards and are left out",
                  markup=False, highlight=False)
    print_report(out, path, "(the shard work directories are kept; remove them when done)")
    return 0


def _check_merge_flags(args: argparse.Namespace) -> None:
    """Refuse the flags a merge would ignore: it runs no model, and its directories fix the settings.

    Raises:
        ValueError: ``--threads``, ``--workers``, ``--ray-actors`` or ``--ray-timeout`` (nothing runs), or a flag
            that DIR fixes (:data:`RESUME_FIXED`) typed with another value than the first
            directory's (the directories agree with each other, :func:`lab.study.run.merge_study`);
            naming the flags as typed.
    """
    from lab.study.work import read_settings

    idle = [f for f, v in (("--threads", args.threads), ("--workers", args.workers), ("--ray-actors", args.ray_actors),
                           ("--ray-timeout", args.ray_timeout)) if v is not None]
    if idle:
        raise ValueError(f"--merge runs no model, so {' and '.join(idle)} would have no effect: drop "
                         f"{'them' if len(idle) > 1 else 'it'}")
    conflicts = _resume_conflicts(args, read_settings(args.merge[0], flag="--merge"))
    if conflicts:
        raise ValueError(f"--merge reports the study with the settings its directories were run with; drop "
                         f"{', '.join(conflicts)}, or run a new study")
