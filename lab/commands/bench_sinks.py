"""``lab bench-sinks``: time and peak memory of the streaming sink capture against plain prefill.

Each measurement runs in its own subprocess so peaks never mix: the worker loads
the model, records its resident memory, resets the kernel's peak-RSS counter
(``/proc/self/clear_refs``, value 5; if that is refused the peak since start is
used and the report says so), runs one prefill, and reports wall time and
``VmHWM - VmRSS_after_load`` (peak memory beyond the loaded model) from
``/proc/self/status``. Linux only.

Measurements (defaults): plain SDPA prefill and streaming capture at 2,048 and
8,192 tokens; eager ``output_attentions=True`` at 2,048 tokens. Every prefill
computes only the last position's logits (``logits_to_keep=1``, as generation
does), so the ``[S, V]`` logits do not dominate the memory. Targets (what makes the capture usable on a laptop):
capture at 8,192 tokens under 2 GB beyond the model and at most 3x the plain
prefill's time; the report states the measured ratio and memory (no pass/fail).
The load average and torch threads are sampled before and after each subprocess
(:mod:`lab.machine`) and a busy machine is flagged. The report ``<out>/<timestamp>-bench-sinks-<model>/`` holds
``bench.json``, ``bench.csv`` and ``summary.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from lab.commands.common import add_model_args, add_out_arg, add_threads_arg, check_model_args

MODES = ("sdpa", "capture", "eager")
WORKER_TIMEOUT_S = 1200


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench-sinks", help="benchmark the streaming sink capture (time, peak memory) against plain and eager prefill",
        description="Time and peak memory (beyond the loaded model) of a plain SDPA prefill, the streaming sink "
                    "capture, and eager output_attentions=True; each in its own subprocess.",
    )
    add_model_args(p)
    p.add_argument("--lengths", default="2048,8192",
                   help="comma-separated prompt lengths in tokens for plain and capture runs (default: 2048,8192)")
    p.add_argument("--eager-length", type=int, default=2048,
                   help="prompt length for the eager output_attentions=True comparison; 0 skips it (default: 2048)")
    add_threads_arg(p)
    add_out_arg(p)
    p.add_argument("--worker", nargs=2, metavar=("MODE", "LENGTH"), default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def _proc_status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def bench_ids(tokenizer, length: int):
    """``[1, length]`` ids of varied natural text (the calibration prompts, repeated), BOS first."""
    import torch

    from lab.sinks.calibration import load_prompts

    text = " ".join(p.prompt for p in load_prompts())
    piece = tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = (piece * (length // len(piece) + 1))[: length - 1]
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else piece[0]
    return torch.tensor([[bos, *ids]], dtype=torch.long)


def _worker(args: argparse.Namespace) -> int:
    """One measurement; prints one JSON line on stdout."""
    import time

    import torch

    from lab.sinks.capture import capture_received, eager_received
    from lab.models.loading import load_model
    from lab.sinks.prefill import score_positions

    from lab.machine import set_threads

    mode, length = args.worker[0], int(args.worker[1])
    set_threads(args.threads)
    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype, weights=args.weights)
    ids = bench_ids(tokenizer, length)
    with torch.no_grad():  # warm-up at a short length: first-call allocations are not the method's cost
        model(ids[:, :16], use_cache=False, logits_to_keep=1)
    rss = _proc_status_kib("VmRSS")
    reset = _reset_peak()
    start = time.perf_counter()
    if mode == "sdpa":
        with torch.no_grad():
            model(ids, use_cache=False, logits_to_keep=1)
    elif mode == "capture":
        per_head = capture_received(model, ids).per_head
        score_positions(per_head, ["content"] * length)
    elif mode == "eager":
        eager_received(model, ids)
    else:
        raise ValueError(f"mode={mode!r} is not one of {MODES}")
    seconds = time.perf_counter() - start
    peak = _proc_status_kib("VmHWM")
    print(json.dumps({"mode": mode, "length": length, "seconds": seconds, "rss_after_load_kib": rss,
                      "peak_kib": peak, "extra_bytes": max(0, peak - rss) * 1024, "peak_reset": reset,
                      "threads": torch.get_num_threads()}))
    return 0


def _measure(args: argparse.Namespace, mode: str, length: int) -> dict:
    cmd = [sys.executable, "-m", "lab.cli", "bench-sinks", "--model", args.model, "--worker", mode, str(length)]
    for flag, value in (("--device", args.device), ("--dtype", args.dtype), ("--threads", args.threads)):
        if value is not None:
            cmd += [flag, str(value)]
    # The worker must import this very `lab` package, whatever is installed in the environment.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                         os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"mode": mode, "length": length, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


def run(args: argparse.Namespace) -> int:
    if args.worker is not None:
        return _worker(args)
    from lab.models.loading import load_model
    from lab.render.console import stderr_console, stdout_console
    from lab.render.sinks import bench_markdown, bench_table
    from lab.machine import LoadLog, busy_warning, set_threads
    from lab.reports import environment, report_dir

    # 1. Validate before running anything.
    try:
        lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
    except ValueError as exc:
        raise ValueError(f"--lengths={args.lengths!r} must be comma-separated integers") from exc
    if not lengths or min(lengths) < 16:
        raise ValueError(f"--lengths={args.lengths!r} needs at least one length >= 16")
    if args.eager_length < 0:
        raise ValueError(f"--eager-length={args.eager_length!r} must be >= 0")
    device = check_model_args(args)
    threads = set_threads(args.threads)  # the workers use the same (torch's default is the same in each)
    model, _ = load_model(args.model, device=device, dtype=args.dtype, weights=args.weights)
    limit = model.config.max_position_embeddings
    if max(lengths + [args.eager_length]) > limit:
        raise ValueError(f"--lengths={args.lengths!r} / --eager-length exceed the model's context of {limit}")
    env = environment(model)
    del model

    # 2. One subprocess per measurement.
    plan = [(m, n) for n in lengths for m in ("sdpa", "capture")]
    if args.eager_length:
        plan.append(("eager", args.eager_length))
    err = stderr_console()
    results = []
    load_log = LoadLog(threads=threads)
    for mode, n in plan:
        with err.status(f"measuring {mode} at {n} tokens"), load_log.around(f"{mode} at {n} tokens"):
            results.append(_measure(args, mode, n))
    # 3. Capture against plain prefill at the longest length, stated as measured.
    by = {(r["mode"], r["length"]): r for r in results if "error" not in r}
    longest = max(lengths)
    cap, plain = by.get(("capture", longest)), by.get(("sdpa", longest))
    comparison = None
    if cap and plain:
        comparison = {"length": longest, "time_ratio": cap["seconds"] / plain["seconds"],
                      "capture_extra_bytes": cap["extra_bytes"], "plain_extra_bytes": plain["extra_bytes"]}
    data = {"kind": "bench-sinks", "model": args.model, "environment": env, "torch_threads": threads,
            "results": results, "comparison": comparison, "machine_load": load_log.summary()}
    out = stdout_console()
    out.print(bench_table(data))
    warning = busy_warning(data["machine_load"])
    if warning:
        from rich.text import Text

        out.print(Text(warning, style="bold yellow"))
    with report_dir(args.out, "bench-sinks", args.model) as rd:
        rd.write_json("bench.json", data)
        rd.write_csv("bench.csv", results, fieldnames=["mode", "length", "seconds", "extra_bytes", "rss_after_load_kib",
                                                      "peak_kib", "peak_reset", "threads", "error"])
        rd.write_text("summary.md", bench_markdown(data))
    out.print(f"report: {rd.final}", markup=False, highlight=False, soft_wrap=True)
    return 0
