"""``lab bench-weights``: each weight representation's kernel times and numerics on a GGUF model.

Per GGUF tensor type of the model's linear layers: the time of float32, bfloat16, int8 and (where
the file has 4-bit codes) q4 layers at ``M = 1`` and ``M = gamma + 1`` rows, and the verify pass
in steps; then each whole-model representation against float32 on held-back HumanEval problems
(or ``--text``): top-1 agreement, KL and entropy shift (:mod:`lab.bench.weights`). Writes
``<out>/<timestamp>-bench-weights-<model>/`` with ``report.json`` and ``summary.md``; the load
average is sampled around each part and a busy machine is flagged.
"""

from __future__ import annotations

import argparse

from lab.commands.common import add_model_args, add_out_arg, add_threads_arg, check_model_args


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench-weights", help="time and numerics of float32, bfloat16, int8 and q4 weights on a GGUF model",
        description="Kernel time per GGUF tensor type and representation at M = 1 and M = gamma + 1, and each "
                    "representation's next-token distributions against float32 on held-out text.",
    )
    add_model_args(p)
    p.add_argument("--gamma", type=int, default=5, help="draft tokens per round: the verify pass has gamma + 1 rows "
                                                        "(default: 5)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per layer shape, M and representation "
                                                          "(median; default: 5)")
    p.add_argument("--problems", type=int, default=2,
                   help="held-back HumanEval problems for the numerics (default: 2; 0 with --text)")
    p.add_argument("--skip-kernels", action="store_true", help="numerics only (the kernel times need a quiet machine)")
    p.add_argument("--text", action="append", default=None, help="held-out text for the numerics (repeatable)")
    add_threads_arg(p)
    add_out_arg(p)
    p.set_defaults(func=run)


def _markdown(result: dict) -> str:
    lines = [f"# Weight representations on {result['model']}", "",
             f"torch threads {result['torch_threads']}; load average {result['machine_load']}", "",
             "## Kernel time per GGUF type (summed over its layers)", "",
             f"| GGUF type | representation | layers | M = 1 (ms) | M = {result['gamma'] + 1} (ms) | verify in steps |",
             "|---|---|---|---|---|---|"]
    for r in result["kernels"]:
        lines.append(f"| {r['gguf_type']} | {r['representation']} | {r['layers']} | {r['step_ms']:.1f} | "
                     f"{r['verify_ms']:.1f} | {r['verify_ms'] / r['step_ms']:.2f} |")
    lines += ["", "## Against float32 on held-out text", "",
              "| weights | positions | top-1 agree | mean KL (nats) | max KL | mean abs entropy shift (bits) | max |",
              "|---|---|---|---|---|---|---|"]
    for r in result["numerics"]:
        lines.append(f"| {r['representation']} | {r['positions']} | {r['top1_agree']} | {r['mean_kl_nats']:.2e} | "
                     f"{r['max_kl_nats']:.2e} | {r['mean_abs_entropy_shift_bits']:.3f} | "
                     f"{r['max_abs_entropy_shift_bits']:.3f} |")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    # 1. Validate before loading.
    from lab.models.loading import is_gguf_model

    if not is_gguf_model(args.model):
        raise ValueError(f"--model {args.model!r}: bench-weights compares a GGUF profile's own codes; "
                         "use smollm2, gemma3-270m, qwen2.5-coder or qwen2.5-coder-0.5b")
    if args.gamma < 1 or args.repeats < 1 or args.problems < 0:
        raise ValueError(f"--gamma={args.gamma}, --repeats={args.repeats} must be >= 1 and --problems="
                         f"{args.problems} >= 0")
    if args.problems == 0 and not args.text:
        raise ValueError("--problems=0 needs at least one --text for the numerics")
    device = check_model_args(args)
    if device.type != "cpu":
        raise ValueError(f"--device {device}: the quantized kernels run on the CPU only")

    # 2. Kernels, on the float32 model.
    import dataclasses

    import torch

    from lab.bench.prompt_split import humaneval_prompts
    from lab.bench.weights import kernel_times, numerics
    from lab.machine import LoadLog, set_threads
    from lab.models.loading import gguf_path, load_model
    from lab.models.profiles import PROFILES
    from lab.render.console import stderr_console, stdout_console
    from lab.reports import environment, report_dir
    from lab.models.weights import WEIGHTS

    load_log = LoadLog(threads=set_threads(args.threads))
    err = stderr_console()
    with err.status(f"loading {args.model}"):
        model, tokenizer = load_model(args.model, device="cpu")
    env = environment(model)
    kernels = []
    if not args.skip_kernels:
        with err.status("timing the kernels"), load_log.around("kernels"):
            kernels = kernel_times(model, gguf_path(PROFILES[args.model]), gamma=args.gamma, repeats=args.repeats)
    del model

    # 3. Numerics, one representation at a time.
    texts = [text for _, text in humaneval_prompts("held-back", args.problems)] if args.problems else []
    texts += args.text or []
    batches = [tokenizer(t, return_tensors="pt").input_ids for t in texts]
    with err.status("numerics against float32"), load_log.around("numerics"):
        rows = numerics(lambda w: load_model(args.model, device="cpu", weights=w)[0], batches,
                        [w for w in WEIGHTS if w != "float32"])
    result = {"kind": "bench-weights", "model": args.model, "gamma": args.gamma, "repeats": args.repeats,
              "texts": len(texts), "kernels": [dict(dataclasses.asdict(k)) for k in kernels],
              "numerics": [dataclasses.asdict(r) for r in rows], "torch_threads": torch.get_num_threads(),
              "machine_load": load_log.summary(), "environment": env}
    summary = _markdown(result)
    with report_dir(args.out, "bench-weights", args.model) as rd:
        rd.write_json("report.json", result)
        rd.write_text("summary.md", summary)
    stdout_console().print(summary, markup=False, highlight=False, soft_wrap=True)
    stdout_console().print(f"report: {rd.final}", markup=False, highlight=False, soft_wrap=True)
    return 0
