"""``lab bench-weights``: time and numerics of float32, bfloat16, int8 and q4 weights on a GGUF model.

Kernel time per GGUF tensor type and representation at M = 1 and M = gamma + 1, and each representation's next-token
distributions against float32 on held-out text.

Per GGUF tensor type of the model's linear layers: the time of float32, bfloat16, int8 and (where
the file has 4-bit codes) q4 layers at ``M = 1`` and ``M = gamma + 1`` rows, and the verify pass
in steps; then each whole-model representation against float32 on held-back HumanEval problems
(or ``--text``): top-1 agreement, KL and entropy shift; and, in each loaded representation, a
decode step profiled by kernel family beside the weight bytes each family reads, with the
GGUF file's own bytes for the same layers (what llama.cpp reads) (:mod:`lab.bench.weights`). Writes
``<out>/<timestamp>-bench-weights-<model>/`` with ``report.json`` and ``summary.md``; the load
average is sampled around each part and a busy machine is flagged.
"""

from __future__ import annotations

import argparse

from lab.commands.common import (add_model_args, add_out_arg, add_ranged_arg, add_threads_arg, check_model_args,
                                 command_parser)
from lab.kinds.bench_weights import KIND as BENCH_WEIGHTS

# The kernel table's and the step profile's flags (what --skip-kernels leaves out), with their defaults.
KERNEL_DEFAULTS = {"gamma": 5, "repeats": 5, "steps": 10}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = command_parser(subparsers, "bench-weights", run, __doc__)
    add_model_args(p)
    add_ranged_arg(p, "bench-weights", "--gamma", None, "draft tokens per round: the verify pass has gamma + 1 rows, ",
                   " (default: 5)")
    add_ranged_arg(p, "bench-weights", "--repeats", None, "timed calls per layer shape, M and representation, ",
                   " (median; default: 5)")
    add_ranged_arg(p, "bench-weights", "--problems", 2, "held-back HumanEval problems for the numerics, ",
                   " (default: 2; 0 with --text)")
    add_ranged_arg(p, "bench-weights", "--steps", None, "one-token decode steps timed, then profiled, per "
                   "representation, ", " (default: 10)")
    p.add_argument("--skip-kernels", action="store_true",
                   help="numerics only: no kernel table, no step profile (both need a quiet machine; so not with "
                        "--gamma, --repeats or --steps)")
    p.add_argument("--text", action="append", default=None,
                   help="held-out text for the numerics, not empty (repeatable)")
    add_threads_arg(p)
    add_out_arg(p)


def _kernel_settings(args: argparse.Namespace) -> dict[str, int]:
    """``{"gamma", "repeats", "steps"}``, checked with the flags they run with, before any model loads.

    Raises:
        ValueError: a model that is not a GGUF profile; ``--weights`` or ``--dtype`` (the command loads
            every representation itself, in float32 on the CPU); ``--gamma``, ``--repeats`` or ``--steps``
            with ``--skip-kernels``; no text for the numerics, or an empty ``--text``; a device other than
            the CPU; each naming the flag.
    """
    from lab.models.loading import is_gguf_model

    if not is_gguf_model(args.model):
        raise ValueError(f"--model {args.model!r}: bench-weights compares a GGUF profile's own codes; "
                         "use smollm2, gemma3-270m, qwen2.5-coder or qwen2.5-coder-0.5b")
    if args.weights != "float32" or args.dtype is not None:
        flag = f"--weights {args.weights}" if args.weights != "float32" else f"--dtype {args.dtype}"
        raise ValueError(f"{flag}: bench-weights loads float32, bfloat16, int8 and q4 itself, in float32 on the CPU; "
                         "drop it")
    typed = [f"--{k}" for k in KERNEL_DEFAULTS if getattr(args, k) is not None]
    if args.skip_kernels and typed:
        raise ValueError(f"{', '.join(typed)} would have no effect: the kernel table and the step profile read "
                         f"{'them' if len(typed) > 1 else 'it'}, and --skip-kernels skips both")
    if args.problems == 0 and not args.text:
        raise ValueError("--problems=0 needs at least one --text for the numerics")
    for text in args.text or []:
        if not text.strip():
            raise ValueError(f"--text {text!r} is empty: the numerics need tokens to compare")
    if check_model_args(args).type != "cpu":
        raise ValueError(f"--device {args.device}: the quantized kernels run on the CPU only")
    return {k: default if getattr(args, k) is None else getattr(args, k) for k, default in KERNEL_DEFAULTS.items()}


def run(args: argparse.Namespace) -> int:
    # 1. Validate before loading.
    kernel = _kernel_settings(args)

    # 2. Kernels on the float32 model, then numerics one representation at a time (lab.bench.weights).
    from lab.bench.prompt_split import humaneval_prompts
    from lab.bench.weights import bench_weights
    from lab.machine import LoadLog, set_threads
    from lab.render.bench_weights import weights_markdown
    from lab.render.console import print_report, stderr_console, stdout_console
    from lab.views.publish import report_folder

    load_log = LoadLog(threads=set_threads(args.threads))
    texts = [text for _, text in humaneval_prompts("held-back", args.problems)] if args.problems else []
    texts += args.text or []
    result = bench_weights(args.model, texts, **kernel, skip_kernels=args.skip_kernels, load_log=load_log,
                           status=stderr_console().status)

    # 3. Write the report atomically, then show it.
    summary = weights_markdown(result)
    with report_folder(args.out, BENCH_WEIGHTS, args.model) as rd:
        rd.write_report(result)
        rd.write_text("summary.md", summary)
    stdout_console().print(summary, markup=False, highlight=False, soft_wrap=True)
    print_report(stdout_console(), rd.final)
    return 0
