"""``lab study``: the lab's main job, the empirical study of prefill -> entropy -> acceptance.

Runs every prompt of the prompt set (a JSONL file or a named source of real prompts,
:mod:`lab.sources`) through one target prefill (the attention capture) and one
speculative decode whose verify passes give the entropy tracker's statistics
(:mod:`lab.study`), tests the pre-stated hypotheses (:mod:`lab.analysis`) and writes
``<out>/<timestamp>-study/`` (:mod:`lab.render.study`).
Bad flags or a bad prompt file exit 2 before any model loads. An interrupted study
(Ctrl-C) keeps its finished prompts in ``<out>/.study-work-<key>/``; the same
command, or ``--resume`` with that directory, continues where it stopped.

Big studies: ``--shard K/N`` runs only the K-th of N disjoint, category-balanced
slices into the same work-directory layout (and writes no report); ``--merge
DIR...`` builds one report from the shards' work directories, refusing shards
whose settings differ. Any scheduler (a Slurm array, GNU parallel, several
machines with a shared disk) can run the shards.
"""

from __future__ import annotations

import argparse
import logging

from lab.commands.common import add_model_args, add_out_arg

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    from lab.analysis import N_RESAMPLES
    from lab.study import DEFAULT_GAMMA, DEFAULT_MAX_NEW_TOKENS, DEFAULT_TEMPERATURE

    p = subparsers.add_parser(
        "study", help="run the empirical study (context health -> entropy -> speculative acceptance)",
        description="Run the study on the prompt set: prefill sinks and context health, decode entropy, "
                    "speculative decoding with the draft; test the pre-stated hypotheses H1-H6 (Holm family, with "
                    "power) and write a report directory.",
    )
    add_model_args(p)
    p.add_argument("--draft", default=None,
                   help="draft spec: early-exit:N, prompt-lookup or a model name (default: the profile's draft)")
    p.add_argument("--draft-dtype", default=None, choices=("float32", "float16", "bfloat16"),
                   help="dtype of a draft model (default: the study's measured choice for the profile, "
                        "else the target's dtype)")
    p.add_argument("--prompts", default=None,
                   help="prompt file (JSONL) or a named source of real prompts: humaneval (164 code problems), "
                        "pydoc-topics (79, summary), zen-of-python (19, creative), sympy-doctests (43, math); "
                        "default: the embedded set of 84 prompts; lab/data/prompts_large.jsonl holds 450")
    p.add_argument("--limit", type=int, default=None,
                   help="run at most N prompts, balanced across categories, twin pairs kept together (default: all)")
    p.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS,
                   help=f"new tokens per prompt's decode (default: {DEFAULT_MAX_NEW_TOKENS})")
    p.add_argument("--gamma", type=int, default=DEFAULT_GAMMA,
                   help=f"draft tokens per speculative round (default: {DEFAULT_GAMMA})")
    p.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE,
                   help=f"sampling temperature of the (speculative) decode, > 0 (default: {DEFAULT_TEMPERATURE})")
    p.add_argument("--seed", type=int, default=0, help="study seed; each prompt's seed derives from it (default: 0)")
    p.add_argument("--resamples", type=int, default=N_RESAMPLES,
                   help=f"bootstrap resamples for the confidence intervals (default: {N_RESAMPLES})")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="continue the interrupted study in this .study-work-* directory, with its stored settings")
    p.add_argument("--shard", default=None, metavar="K/N",
                   help="run only the K-th of N disjoint, category-balanced slices (twin pairs kept together) into "
                        "the work directory, without a report; merge the shards with --merge")
    p.add_argument("--merge", nargs="+", default=None, metavar="DIR",
                   help="build one report from these shards' .study-work-* directories (their settings must agree)")
    add_out_arg(p)
    p.set_defaults(func=run)


def checked_runner_factory(plan):
    """A runner factory that loads the models, then checks every prompt's length + ``--max-new-tokens``
    against the target's context (:func:`lab.decode.check_context`) before any prompt runs."""
    from lab.decode import check_context
    from lab.models import encode_chat
    from lab.study import ModelRunner

    def factory(config):
        runner = ModelRunner.load(config)
        if getattr(runner, "target", None) is None:  # a runner without a model (tests' fakes): nothing to check
            return runner
        for prompt in plan.prompts:
            ids = encode_chat(runner.tokenizer, [dict(m) for m in prompt.messages])
            check_context(runner.target, ids.shape[1], config.max_new_tokens, arg="--max-new-tokens")
        return runner

    return factory


def run(args: argparse.Namespace) -> int:
    from lab.render.console import stdout_console
    from lab.render.study import StudyProgress, verdict_table, write_report
    from lab.study import StudyConfig, config_from_work_dir, discard_work, plan_study, run_study

    # 1. Validate everything (flags, prompt file, device) before loading a model.
    if args.merge:
        return _merge(args)
    shard = parse_shard(args.shard) if args.shard else None
    if args.resume:
        config = config_from_work_dir(args.resume, n_resamples=args.resamples)
    else:
        config = StudyConfig(model=args.model, draft=args.draft, prompts=args.prompts, limit=args.limit,
                             max_new_tokens=args.max_new_tokens, gamma=args.gamma, seed=args.seed,
                             temperature=args.temperature, device=args.device, dtype=args.dtype, out=args.out,
                             n_resamples=args.resamples, draft_dtype=args.draft_dtype)
    if shard is not None:
        import dataclasses

        config = dataclasses.replace(config, shard=shard)
    plan = plan_study(config)
    logger.info("study: %d prompts, work directory %s", len(plan.prompts), plan.work_dir)

    # 2. Run (or resume), with a progress bar on stderr.
    with StudyProgress() as progress:
        result = run_study(plan, progress=progress, runner_factory=checked_runner_factory(plan))

    # 3. A shard stops here: its prompts are in the work directory, for --merge.
    if shard is not None:
        stdout_console().print(f"shard {shard[0]}/{shard[1]}: {len(plan.prompts)} of {len(plan.all_prompts)} prompts "
                               f"finished in {plan.work_dir}; when every shard is done: lab study --merge DIR...",
                               markup=False, highlight=False, soft_wrap=True)
        return 0

    # 4. Report atomically, then drop the work directory.
    path = write_report(result)
    discard_work(plan)
    out = stdout_console()
    out.print(verdict_table(result))
    out.print(f"report: {path}")
    return 0


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)``.

    Raises:
        ValueError: not two integers with 1 <= K <= N, naming ``--shard``.
    """
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r} must be K/N, e.g. 2/4") from None
    if not 1 <= k <= n:
        raise ValueError(f"--shard {text!r} needs 1 <= K <= N")
    return k, n


def _merge(args: argparse.Namespace) -> int:
    from lab.render.console import stdout_console
    from lab.render.study import verdict_table, write_report
    from lab.study import merge_study

    if args.resume or args.shard:
        raise ValueError("--merge cannot be combined with --resume or --shard")
    result = merge_study(args.merge, n_resamples=args.resamples, out=args.out)
    path = write_report(result)
    out = stdout_console()
    out.print(verdict_table(result))
    if result.missing:
        out.print(f"warning: {len(result.missing)} prompts had no finished result in the shards and are left out",
                  markup=False, highlight=False)
    out.print(f"report: {path} (the shard work directories are kept; remove them when done)",
              markup=False, highlight=False, soft_wrap=True)
    return 0
