"""``lab bench-tracker``: measure the entropy tracker's overhead on decode time.

Decode with the entropy tracker off and on (same loop, alternating repeats) and report the overhead; writes
<out>/<timestamp>-bench-tracker/.

The same decode loop runs with the tracker off and on, for exactly ``--max-new-tokens`` tokens,
``--repeats`` alternating pairs after one warm-up of each, and the tracker's statistics alone are
timed on a logits row of the model's vocabulary size (:mod:`lab.bench.tracker`, which derives
the overheads). Both arms must produce the same tokens; the report says so.

Writes ``<out>/<timestamp>-bench-tracker/`` with ``report.json`` (every raw time)
and ``summary.md``.
"""

from __future__ import annotations

import argparse

from lab.commands.common import (add_model_args, add_out_arg, add_ranged_arg, add_sampling_args, add_threads_arg,
                                 check_model_args, command_parser, load_model_step)
from lab.kinds.bench_tracker import KIND as BENCH_TRACKER
from lab.models.source import model_source

DEFAULT_PROMPT = "Explain in a few sentences why the sky is blue."


def register(subparsers: argparse._SubParsersAction) -> None:
    p = command_parser(subparsers, "bench-tracker", run, __doc__)
    add_model_args(p)
    p.add_argument("--prompt", default=DEFAULT_PROMPT, help=f"prompt to decode from (default: {DEFAULT_PROMPT!r})")
    add_ranged_arg(p, "bench-tracker", "--max-new-tokens", 64, "tokens per run, EOS ignored, ", " (default: 64)")
    add_ranged_arg(p, "bench-tracker", "--repeats", 5, "timed off/on pairs after one warm-up pair, ", " (default: 5)")
    add_sampling_args(p, "bench-tracker", more=" (seeded), adding the sampled-entropy statistics")
    add_ranged_arg(p, "bench-tracker", "--stats-iterations", 200, "iterations of the statistics-only timing on one "
                   "logits row, ", " (default: 200)")
    add_threads_arg(p)
    add_out_arg(p)


def run(args: argparse.Namespace) -> int:
    import torch

    from lab.bench.tracker import time_arms, time_statistics, tracker_report
    from lab.decode import check_context
    from lab.machine import LoadLog, set_threads
    from lab.models.chat import build_messages, encode_chat
    from lab.render.console import print_report, stderr_console, stdout_console
    from lab.render.entropy import bench_markdown, render_bench
    from lab.reports import environment_record
    from lab.views.publish import report_folder
    from lab.tracker.results import DecodeSettings

    # 1. Validate before loading.
    settings = DecodeSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                              top_k=args.top_k, top_p=args.top_p, seed=0)
    messages = build_messages(args.prompt)
    device = check_model_args(args)

    # 2. Load.
    load_log = LoadLog(threads=set_threads(args.threads))
    err = stderr_console()
    model, tokenizer = load_model_step(err, args, device)
    input_ids = encode_chat(tokenizer, messages)
    check_context(model, input_ids.shape[1], settings.max_new_tokens, arg="--max-new-tokens")  # before any decoding

    # 3. Warm up both arms, then time alternating pairs; 4. the statistics alone, on a row of the model's vocabulary.
    with err.status("timing") as status:
        arms = time_arms(model, input_ids, settings, args.repeats, load_log, progress=status.update)
    vocab_size = int(model.get_output_embeddings().weight.shape[0])
    stats_s = time_statistics(vocab_size, device, settings.top_alternatives, settings.do_sample, args.stats_iterations)

    # 5. Show, then write the report atomically.
    result = tracker_report(prompt=args.prompt, settings=settings, repeats=args.repeats,
                            prompt_tokens=int(input_ids.shape[1]), vocab_size=vocab_size,
                            model=model_source(model), environment=environment_record(model), arms=arms,
                            statistics_s=stats_s, torch_threads=torch.get_num_threads(),
                            machine_load=load_log.record())
    render_bench(result, stdout_console())
    with report_folder(args.out, BENCH_TRACKER) as rd:
        rd.write_report(result)
        rd.write_text("summary.md", bench_markdown(result))
    print_report(stdout_console(), rd.final)
    return 0
