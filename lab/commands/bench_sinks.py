"""``lab bench-sinks``: benchmark the streaming sink capture (time, peak memory) against plain and eager prefill.

Time and peak memory (beyond the loaded model) of a plain SDPA prefill, the streaming sink capture, and eager
output_attentions=True; each in its own subprocess.

Each measurement runs in its own subprocess (this command with ``--worker``) so peaks never mix;
see :mod:`lab.bench.sinks`. Measurements (defaults): plain SDPA prefill and streaming capture at
2,048 and 8,192 tokens; eager ``output_attentions=True`` at 2,048 tokens. Linux only. The load
average and torch threads are sampled before and after each subprocess (:mod:`lab.machine`) and
a busy machine is flagged. The report ``<out>/<timestamp>-bench-sinks-<model>/`` holds
``report.json``, ``bench.csv`` and ``summary.md``.
"""

from __future__ import annotations

import argparse
import json

from lab.commands.common import (add_model_args, add_out_arg, add_ranged_arg, add_threads_arg, check_model_args,
                                 command_parser, parse_lengths)
from lab.kinds.bench_sinks import KIND as BENCH_SINKS
from lab.ranges import SINK_LENGTH


def register(subparsers: argparse._SubParsersAction) -> None:
    p = command_parser(subparsers, "bench-sinks", run, __doc__)
    add_model_args(p)
    p.add_argument("--lengths", default="2048,8192",
                   help=f"comma-separated prompt lengths in tokens for plain and capture runs, each in "
                        f"{SINK_LENGTH.text} (default: 2048,8192)")
    add_ranged_arg(p, "bench-sinks", "--eager-length", 2048, "prompt length for the eager output_attentions=True "
                   "comparison, ", "; 0 skips it (default: 2048)")
    add_threads_arg(p)
    add_out_arg(p)
    p.add_argument("--worker", nargs=2, metavar=("MODE", "LENGTH"), default=None, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    if args.worker is not None:  # one measurement, one JSON line on stdout
        from lab.bench.sinks import measure_here

        print(json.dumps(measure_here(args.model, args.worker[0], int(args.worker[1]), device=args.device,
                                      dtype=args.dtype, weights=args.weights, threads=args.threads)))
        return 0
    from lab.bench.sinks import CSV_FIELDS, bench_sinks
    from lab.machine import LoadLog, busy_warning, set_threads
    from lab.models.loading import load_model
    from lab.render.console import print_report, stderr_console, stdout_console
    from lab.render.sinks import bench_markdown, bench_table
    from lab.reports import environment_record
    from lab.views.publish import report_folder

    # 1. Validate before running anything.
    lengths = list(parse_lengths(args.lengths, "--lengths", SINK_LENGTH))
    device = check_model_args(args)
    threads = set_threads(args.threads)  # the workers use the same (torch's default is the same in each)
    model, _ = load_model(args.model, device=device, dtype=args.dtype, weights=args.weights)
    limit = model.config.max_position_embeddings
    if max(lengths + [args.eager_length]) > limit:
        raise ValueError(f"--lengths={args.lengths!r} / --eager-length exceed the model's context of {limit}")
    env = environment_record(model)
    del model

    # 2. One subprocess per measurement (lab.bench.sinks), then show and write.
    data = bench_sinks(args.model, lengths, args.eager_length, device=args.device, dtype=args.dtype,
                       threads=args.threads, environment=env, torch_threads=threads, load_log=LoadLog(threads=threads),
                       status=stderr_console().status)
    out = stdout_console()
    out.print(bench_table(data))
    warning = busy_warning(data.machine_load)
    if warning:
        from rich.text import Text

        out.print(Text(warning, style="bold yellow"))
    with report_folder(args.out, BENCH_SINKS, args.model) as rd:
        rd.write_report(data)
        rd.write_csv("bench.csv", data.results, fieldnames=CSV_FIELDS)
        rd.write_text("summary.md", bench_markdown(data))
    print_report(out, rd.final)
    return 0
