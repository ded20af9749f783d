"""``lab intervene``: the causal test: mask what a context added, measure what moves in entropy and acceptance.

On twin triples (a clean question, its poisoned twin P with a distractor, its neutral twin N
with relevant text of the same added length), every arm scores the same tokens, the target's
greedy continuation of the clean prompt, teacher-forced:

  A0     no intervention;
  empty  the masking machinery with nothing masked (must equal A0 to 1e-4 bits: a control);
  A1     the decode queries cannot attend to the added span;
  L0.5, L0.25  their attention logits to the span shifted by log(lambda) (a dose);
  sink   the decode queries cannot attend to position 0, the attention sink (described);
  C+     the decode queries cannot attend to the question (a positive control: it must move
         entropy on at least 90 % of twins);
  A2     no query after the span attends to it: each twin becomes its clean prompt at an offset,
         so H(P,A2) - H(N,A2) must be equivalent to zero (a position-only control).

Target and draft are masked alike. Outcomes per arm: mean target entropy (bits), mean expected
acceptance beta = sum_x min(p, q) with the real draft, and the attention mass the decode queries
put on the span (the mediator). Pre-stated tests, one Holm family (one-sided, unit = triple,
the distractor text a random effect): the difference in differences on entropy and on beta,
the teacher-forced H4b, and a dose-response trend over lambda; the design is stated in full in
:mod:`lab.analysis.intervention`. A run whose controls fail says so at the top and decides nothing.

Writes ``<out>/<timestamp>-intervene-<model>/`` (``report.json``, ``triples.csv``,
``summary.md``, ``arms.png``); the work directory beside it keeps each finished triple, so the
same command continues where it stopped, ``--shard K/N`` splits a run over processes and ``--ray``
scores the triples on a Ray cluster (the records equal a serial run's).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from lab.commands.common import (add_draft_weights_arg, add_model_args, add_out_arg, add_ranged_arg, add_ray_args,
                                 check_model_args, cluster_config, command_parser, parse_shard)
from lab.ranges import PILOT_MAX

if TYPE_CHECKING:
    from lab.intervene.run import InterventionSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    p = command_parser(subparsers, "intervene", run, __doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                       description=__doc__.split("\n\n", 1)[1].split("\nWrites ")[0].strip())  # the design, as laid out
    add_model_args(p)
    p.add_argument("--draft", default=None,
                   help="early-exit:N or a draft model with the target's vocabulary (default: the profile's)")
    add_draft_weights_arg(p)
    p.add_argument("--triples", default=None, metavar="FILE",
                   help="a study prompt file; every clean prompt with a poisoned and a neutral twin is a triple "
                        "(default: lab/data/intervention_triples.jsonl, 240 triples never used in a study)")
    p.add_argument("--pilot", default=None, metavar="FILE",
                   help="the pilot triples, scored first to check the controls and excluded from the analysis "
                        "(default: lab/data/intervention_pilot.jsonl)")
    add_ranged_arg(p, "intervene", "--pilot-limit", None, "pilot triples scored, ",
                   f" (default: {PILOT_MAX}; 0 = no pilot)")
    add_ranged_arg(p, "intervene", "--limit", None, "main triples scored, balanced across categories, ",
                   " (default: all of --triples)")
    add_ranged_arg(p, "intervene", "--dense-rows", None, "with q4 or int8 weights, passes of at least this many "
                   "positions multiply by a bfloat16 copy of the dequantized weights instead of torch's weight-only "
                   "kernels (faster at many rows; 2 bytes a weight more memory), ",
                   " (default: the kernels throughout)")
    add_ranged_arg(p, "intervene", "--new-tokens", None, "T, the clean prompt's greedy continuation every arm scores, ",
                   " (default: 24)")
    add_ranged_arg(p, "intervene", "--seed", 0, "seed of the analysis' bootstrap and label swaps, ",
                   " (default: 0; the passes themselves are greedy)")
    p.add_argument("--shard", default=None, metavar="K/N",
                   help="score only the K-th of N interleaved slices into the work directory, without a report; "
                        "the same command without --shard then writes the report")
    add_ray_args(p, units="triples", command="intervene", what="run")
    add_ranged_arg(p, "intervene", "--threads", None, "torch threads, ",
                   ": of this process (default: torch's choice), or with --ray of each actor, which reserves as many "
                   "CPUs (default 1); the numbers equal across runs with equal threads")
    add_out_arg(p)


def settings_from(args: argparse.Namespace, device) -> InterventionSettings:
    """The run's settings from the flags, every file read and checked.

    Raises:
        ValueError: a bad triple file, a draft that cannot serve (prompt lookup has no distribution),
            or a ``--draft-weights`` for an early-exit draft, naming the flag.
    """
    from lab.intervene.run import DEFAULT_NEW_TOKENS, DEFAULT_PILOT, DEFAULT_TRIPLES, InterventionSettings
    from lab.intervene.run import file_sha256, load_triples
    from lab.models.profiles import PROFILES
    from lab.models.devices import parse_dtype
    from lab.speculative.draft_specs import check_draft, check_draft_spec

    spec = args.draft or getattr(PROFILES.get(args.model), "draft", None)
    if spec is None:
        raise ValueError(f"--model {args.model!r} has no default draft; pass --draft")
    if check_draft_spec(spec) == "prompt-lookup":
        raise ValueError("--draft='prompt-lookup' has no distribution to compare with the target's; use early-exit:N "
                         "or a draft model")
    check_draft(spec, args.draft_weights)
    quantized = {"q4", "int8"}
    if args.dense_rows is not None and args.weights not in quantized and (
            spec.startswith("early-exit:") or args.draft_weights not in quantized):
        raise ValueError(f"--dense-rows={args.dense_rows} needs q4 or int8 --weights or --draft-weights: float "
                         "weights are dense already")
    triples_file = str(args.triples or DEFAULT_TRIPLES)
    pilot_limit = PILOT_MAX if args.pilot_limit is None else args.pilot_limit
    pilot_file = None if pilot_limit == 0 else str(args.pilot or DEFAULT_PILOT)
    if pilot_limit == 0 and args.pilot:
        raise ValueError("--pilot with --pilot-limit 0 would have no effect: drop one")
    main = load_triples(triples_file, args.limit, flag="--triples")
    pilot = [] if pilot_file is None else load_triples(pilot_file, pilot_limit, flag="--pilot")
    shared = {t.id for t in main} & {t.id for t in pilot}
    if shared:
        raise ValueError(f"--pilot and --triples share {len(shared)} triple(s), e.g. {sorted(shared)[0]!r}: the pilot "
                         "is excluded from the analysis, so it must be other triples")
    return InterventionSettings(
        model=args.model, draft=spec, weights=args.weights, draft_weights=args.draft_weights,
        dtype=str(parse_dtype(args.dtype, device)).replace("torch.", ""), device=str(device),
        triples_file=triples_file, triples_sha256=file_sha256(triples_file), pilot_file=pilot_file,
        pilot_sha256=None if pilot_file is None else file_sha256(pilot_file), limit=args.limit,
        pilot_limit=len(pilot), new_tokens=args.new_tokens or DEFAULT_NEW_TOKENS, seed=args.seed,
        dense_rows=args.dense_rows)


def run(args: argparse.Namespace) -> int:
    from lab.intervene import run as iv
    from lab.render.console import stdout_console

    # 1. Everything checked before a model loads.
    shard = parse_shard(args.shard) if args.shard else None
    cluster = cluster_config(args)
    device = check_model_args(args)
    settings = settings_from(args, device)
    main = iv.load_triples(settings.triples_file, settings.limit)
    pilot = [] if settings.pilot_file is None else iv.load_triples(settings.pilot_file, settings.pilot_limit)
    iv.check_twins(settings.model, pilot + main, settings.draft, settings.new_tokens)  # no weights loaded
    if shard is not None and shard[1] > len(pilot + main):
        raise ValueError(f"--shard {args.shard!r}: {len(pilot + main)} triples (pilot included) cannot fill "
                         f"{shard[1]} shards; use N <= {len(pilot + main)}")
    if args.threads is not None and cluster is None:
        from lab.machine import set_threads

        set_threads(args.threads)
    work = iv.work_dir_for(args.out, settings)
    iv.prepare_work_dir(work, settings)

    # 2. Score what is left (pilot first), here or on the cluster, a progress line on stderr.
    records, failed = _score(work, pilot + main, settings, shard, cluster)
    if failed:
        return _report_failed(failed, work, len(pilot + main))
    if shard is not None:
        stdout_console().print(f"shard {shard[0]}/{shard[1]}: {len(records)} triples scored in {work}; the same "
                               "command without --shard writes the report", markup=False, highlight=False,
                               soft_wrap=True)
        return 0

    # 3. Analyse the main triples, check the pilot's controls, write the report.
    return _analyse_and_report(settings, [records[t.id] for t in pilot], [records[t.id] for t in main], work,
                               Path(args.out))


def _score(work: Path, triples: list, settings, shard: tuple[int, int] | None, cluster) -> tuple[dict, dict]:
    """The shard's triples scored into ``work`` (:func:`lab.intervene.run.run_triples`), held against other runs.

    Returns:
        ``({triple id: record}, {triple id: why the cluster gave up on it})``.
    """
    from lab.intervene import run as iv
    from lab.render.console import stderr_console
    from lab.runs.cluster import RayExecutor

    err = stderr_console()
    held = iv.work_of(work, shard)
    todo = held.mine(triples)
    try:
        with held.hold(), err.status("intervene") as status:
            def progress(done: int, n: int, tid: str) -> None:
                status.update(f"{done}/{n} triples scored" + (f", the last {tid}" if tid else ""))
            return iv.run_triples(work, todo, settings, RayExecutor(cluster) if cluster is not None else None,
                                  progress=progress, note=lambda msg: err.print(f"note: {msg}", markup=False,
                                                                                highlight=False, soft_wrap=True))
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the CLI's one line says what was kept
        exc.args = (f"the finished triples are kept in {work}; the same command continues",)
        raise


def _report_failed(failed: dict[str, str], work: Path, n: int) -> int:
    """No report for an intervention that lacks triples: name them and say how to finish (exit 1)."""
    import sys

    lines = [f"lab intervene: {len(failed)} of {n} triples failed on the cluster, so no report was written:"]
    lines += [f"  {tid}: {error}" for tid, error in failed.items()]
    lines.append(f"the finished triples are kept in {work}; the same command continues with the rest")
    print("\n".join(lines), file=sys.stderr)
    return 1


def _analyse_and_report(settings, pilot: list, main: list, work: Path, out: Path) -> int:
    """The analysis of the main triples and the pilot's controls, shown and written as the report."""
    from lab.intervene.report import build_report
    from lab.render.console import print_report, stdout_console
    from lab.render.intervention import render_console, write_report
    from lab.reports import ReportWriteError

    report = build_report(settings, pilot, main, work=work)
    console = stdout_console()
    render_console(report, console)
    try:
        final = write_report(report, out, work)
    except ReportWriteError as exc:
        raise ReportWriteError(f"{exc}; the finished triples are kept in {work}; the same command continues "
                               "and writes the report") from exc
    print_report(console, final)
    return 0
