"""``lab bench-weights``: each weight representation's kernel times and numerics on a GGUF model.

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
    p.add_argument("--steps", type=int, default=10,
                   help="one-token decode steps timed, then profiled, per representation (default: 10)")
    p.add_argument("--skip-kernels", action="store_true",
                   help="numerics only: no kernel table, no step profile (both need a quiet machine)")
    p.add_argument("--text", action="append", default=None, help="held-out text for the numerics (repeatable)")
    add_threads_arg(p)
    add_out_arg(p)
    p.set_defaults(func=run)


def _load_line(result: dict) -> str:
    load = result.get("machine_load") or {}
    busy = " **BUSY: timings are not a quiet machine's**" if load.get("busy") else ""
    return (f"torch threads {result['torch_threads']}; highest 1-minute load average "
            f"{load.get('max_load_1m') or float('nan'):.2f} on {load.get('cpu_count', '?')} CPUs{busy}. Profiled "
            "figures carry the profiler's own cost; the step column is timed without it.")


def _markdown(result: dict) -> str:
    from lab.bench.weights import FAMILIES

    lines = [f"# Weight representations on {result['model']}", "",
             _load_line(result), "",
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
    if result.get("step_profiles"):
        lines += ["", f"## A decode step in the model, by kernel family ({result['step_context']} positions cached, "
                      f"median of {result['steps']} steps; profiled ms per step)", "",
                  "| weights | step (ms) | " + " | ".join(FAMILIES) + " | weights read (MB) | GB/s in int4 / int8 / dense |",
                  "|---|---|" + "---|" * len(FAMILIES) + "---|---|"]
        for p in result["step_profiles"]:
            rates = " / ".join("-" if p["gb_per_s"].get(f) is None else f"{p['gb_per_s'][f]:.1f}"
                               for f in ("int4", "int8", "dense"))
            lines.append(f"| {p['weights']} | {p['step_ms']:.1f} | "
                         + " | ".join(f"{p['family_ms'].get(f, 0.0):.1f}" for f in FAMILIES)
                         + f" | {sum(p['family_bytes'].values()) / 1e6:.0f} | {rates} |")
        file_bytes = result.get("file_linear_bytes") or {}
        if file_bytes:
            lines += ["", "The GGUF file's own bytes for the same layers (what llama.cpp's kernels read per token): "
                      + ", ".join(f"{t} {b / 1e6:.0f} MB" for t, b in file_bytes.items())
                      + f"; {sum(file_bytes.values()) / 1e6:.0f} MB in all."]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    # 1. Validate before loading.
    from lab.models.loading import is_gguf_model

    if not is_gguf_model(args.model):
        raise ValueError(f"--model {args.model!r}: bench-weights compares a GGUF profile's own codes; "
                         "use smollm2, gemma3-270m, qwen2.5-coder or qwen2.5-coder-0.5b")
    if args.gamma < 1 or args.repeats < 1 or args.steps < 1 or args.problems < 0:
        raise ValueError(f"--gamma={args.gamma}, --repeats={args.repeats}, --steps={args.steps} must be >= 1 and "
                         f"--problems={args.problems} >= 0")
    if args.problems == 0 and not args.text:
        raise ValueError("--problems=0 needs at least one --text for the numerics")
    device = check_model_args(args)
    if device.type != "cpu":
        raise ValueError(f"--device {device}: the quantized kernels run on the CPU only")

    # 2. Kernels, on the float32 model.
    import dataclasses

    import torch

    from lab.bench.prompt_split import humaneval_prompts
    from lab.bench.weights import FAMILIES, file_linear_bytes, kernel_times, numerics, step_profile
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
    file_bytes = file_linear_bytes(model, gguf_path(PROFILES[args.model]))
    if not args.skip_kernels:
        with err.status("timing the kernels"), load_log.around("kernels"):
            kernels = kernel_times(model, gguf_path(PROFILES[args.model]), gamma=args.gamma, repeats=args.repeats)
    del model

    # 3. Numerics, one representation at a time.
    texts = [text for _, text in humaneval_prompts("held-back", args.problems)] if args.problems else []
    texts += args.text or []
    batches = [tokenizer(t, return_tensors="pt").input_ids for t in texts]
    profiles = []

    def profile_step(weights: str, model) -> None:  # the first text is the prefill
        if not args.skip_kernels:
            with load_log.around(f"step profile {weights}"):
                profiles.append(step_profile(model, batches[0], steps=args.steps, weights=weights))

    with err.status("numerics against float32, and a decode step profiled per representation"), \
            load_log.around("numerics"):
        rows = numerics(lambda w: load_model(args.model, device="cpu", weights=w)[0], batches,
                        [w for w in WEIGHTS if w != "float32"], on_model=profile_step)
    result = {"kind": "bench-weights", "model": args.model, "gamma": args.gamma, "repeats": args.repeats,
              "texts": len(texts), "kernels": [dict(dataclasses.asdict(k)) for k in kernels],
              "numerics": [dataclasses.asdict(r) for r in rows], "torch_threads": torch.get_num_threads(),
              "steps": args.steps, "step_context": int(batches[0].shape[1]), "file_linear_bytes": file_bytes,
              "step_profiles": [dict(dataclasses.asdict(p), gb_per_s={f: p.gb_per_s(f) for f in FAMILIES})
                                for p in profiles],
              "machine_load": load_log.summary(), "environment": env}
    summary = _markdown(result)
    with report_dir(args.out, "bench-weights", args.model) as rd:
        rd.write_json("report.json", result)
        rd.write_text("summary.md", summary)
    stdout_console().print(summary, markup=False, highlight=False, soft_wrap=True)
    stdout_console().print(f"report: {rd.final}", markup=False, highlight=False, soft_wrap=True)
    return 0
