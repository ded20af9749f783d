"""``lab bench-seed-tables``: rerun the seed's two speculative-decoding tables with its figures beside them.

Rerun the seed's Part 3 schedules (target alone vs gamma 4 vs gamma 6, 500 tokens, 5 repeats; the no-cache vs cached
speculative loop, 100 tokens, 3 repeats) sampling at temperature 0.7, top-p 0.9 on a passage of the Python Language
Reference, with the seed's figures beside them.

The schedules are :mod:`lab.bench.seed_tables`'. Writes ``<out>/<timestamp>-bench-seed-tables/`` with
``report.json`` and ``summary.md``.
"""

from __future__ import annotations

import argparse

from lab.commands.common import (add_draft_weights_arg, add_model_args, add_out_arg, add_ranged_arg, add_threads_arg,
                                 command_parser)

COMMAND = "bench-seed-tables"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = command_parser(subparsers, COMMAND, run, __doc__)
    add_model_args(p)
    add_draft_weights_arg(p)
    p.add_argument("--draft", default=None, help="early-exit:N or a model name/path: the no-cache loop re-forwards "
                                                 "the draft, so it needs one (default: the profile's draft)")
    add_ranged_arg(p, COMMAND, "--max-new-tokens", None, "new tokens per generation, ",
                   ", shortening both schedules (default: the seed's, 500 and 100)")
    add_ranged_arg(p, COMMAND, "--repeats", None, "timed repeats of each schedule, ",
                   " (default: the seed's 5, and 3 for caching)")
    add_ranged_arg(p, COMMAND, "--seed", 0, "sampling seed, ", "; each repeat derives one from it (default: 0)")
    add_threads_arg(p)
    add_out_arg(p)


def run(args: argparse.Namespace) -> int:
    """Both of the seed's Part 3 schedules, one report with its figures beside.

    Raises:
        ValueError: a draft without a model (the no-cache loop re-forwards one), or a Python without
            ``pydoc_data``.
    """
    import torch

    from lab.bench.seed_tables import SeedTablesReport, seed_passage, seed_prompt, seed_table_configs
    from lab.commands.bench import model_draft_args, run_draft_schedules, show_and_write
    from lab.models.source import model_source
    from lab.render.seed_tables import seed_tables_markdown
    from lab.reports import environment

    # 1. Validate before loading.
    configs = seed_table_configs(max_new_tokens=args.max_new_tokens, repeats=args.repeats, seed=args.seed)
    passage = seed_passage()
    device, threads, draft_spec, _ = model_draft_args(
        args, no_model="it needs a draft with a model (the no-cache loop re-forwards it), not --draft {}")

    # 2. Load and run both schedules (progress on stderr).
    model, ids, benches = run_draft_schedules(args, device, draft_spec, [seed_prompt(passage)], configs, threads,
                                              "seed tables")

    # 3. Compare, show, 4. write the report atomically.
    report = SeedTablesReport(model=model_source(model).as_dict(), draft=draft_spec, passage=passage,
                              prompt_tokens=int(ids[0].shape[1]), torch_threads=torch.get_num_threads(),
                              environment=environment(model), configs=configs, benches=benches)
    show_and_write(args.out, "seed-tables", report.to_json(), seed_tables_markdown(report))
    return 0
