"""``lab bench-sinks``: time and peak memory of the streaming sink capture against plain prefill.

Each measurement runs in its own subprocess so peaks never mix (:func:`measure`): the worker
(:func:`measure_here`) loads the model, records its resident memory, resets the kernel's
peak-RSS counter (``/proc/self/clear_refs``, value 5; if that is refused the peak since start is
used and the report says so), runs one prefill, and reports wall time and
``VmHWM - VmRSS_after_load`` (peak memory beyond the loaded model) from ``/proc/self/status``.
Linux only.

Measurements (:func:`plan`): plain SDPA prefill and streaming capture at each length; eager
``output_attentions=True`` at one length. Every prefill computes only the last position's logits
(``logits_to_keep=1``, as generation does), so the ``[S, V]`` logits do not dominate the memory.
Targets (what makes the capture usable on a laptop): capture at 8,192 tokens under 2 GB beyond
the model and at most 3x the plain prefill's time; the report states the measured ratio and
memory (:func:`compare_capture`; no pass/fail).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, ContextManager, Sequence

# The report's type is its kind's (lab.kinds): the command writes it, the terminal, summary.md and the page read it.
from lab.kinds.bench_sinks import Comparison
from lab.kinds.bench_sinks import Report as SinksBenchReport
from lab.provenance import Environment

MODES = ("sdpa", "capture", "eager")
WORKER_TIMEOUT_S = 1200
CSV_FIELDS = ["mode", "length", "seconds", "extra_bytes", "rss_after_load_kib", "peak_kib", "peak_reset", "threads",
              "error"]
CLEAR_REFS_RESET_PEAK = "5"  # /proc/self/clear_refs: 5 resets the peak RSS (VmHWM) to the current RSS


def _proc_status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write(CLEAR_REFS_RESET_PEAK)
        return True
    except OSError:
        return False


def bench_ids(tokenizer: Any, length: int):
    """``[1, length]`` ids of varied natural text (the calibration prompts, repeated), BOS first."""
    import torch

    from lab.sinks.calibration import load_prompts

    text = " ".join(p.prompt for p in load_prompts())
    piece = tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = (piece * (length // len(piece) + 1))[: length - 1]
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else piece[0]
    return torch.tensor([[bos, *ids]], dtype=torch.long)


def measure_here(model_name: str, mode: str, length: int, *, device: Any, dtype: Any, weights: Any,
                 threads: int | None) -> dict[str, Any]:
    """One measurement in this process (the worker): seconds and peak memory beyond the loaded model.

    Raises:
        ValueError: ``mode`` not one of :data:`MODES`.
    """
    import torch

    from lab.machine import set_threads
    from lab.models.loading import load_model
    from lab.sinks.capture import capture_received, eager_received
    from lab.sinks.prefill import score_positions

    set_threads(threads)
    model, tokenizer = load_model(model_name, device=device, dtype=dtype, weights=weights)
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
    return {"mode": mode, "length": length, "seconds": seconds, "rss_after_load_kib": rss,
            "peak_kib": peak, "extra_bytes": max(0, peak - rss) * 1024, "peak_reset": reset,
            "threads": torch.get_num_threads()}


def measure(model_name: str, mode: str, length: int, *, device: Any, dtype: Any, threads: int | None) -> dict[str, Any]:
    """One measurement in its own ``lab bench-sinks --worker`` subprocess; ``{"mode", "length", "error"}``
    when it fails (the last line of its stderr)."""
    cmd = [sys.executable, "-m", "lab.cli", "bench-sinks", "--model", model_name, "--worker", mode, str(length)]
    for flag, value in (("--device", device), ("--dtype", dtype), ("--threads", threads)):
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


def plan(lengths: Sequence[int], eager_length: int) -> list[tuple[str, int]]:
    """``(mode, length)`` in run order: plain and capture at each length, then eager (0 = none)."""
    out = [(m, n) for n in lengths for m in ("sdpa", "capture")]
    if eager_length:
        out.append(("eager", eager_length))
    return out


def compare_capture(results: Sequence[dict[str, Any]], lengths: Sequence[int]) -> Comparison | None:
    """Capture against plain prefill at the longest length, as measured; None when either failed."""
    by = {(r["mode"], r["length"]): r for r in results if "error" not in r}
    longest = max(lengths)
    cap, plain = by.get(("capture", longest)), by.get(("sdpa", longest))
    if not (cap and plain):
        return None
    return Comparison(length=longest, time_ratio=cap["seconds"] / plain["seconds"],
                      capture_extra_bytes=cap["extra_bytes"], plain_extra_bytes=plain["extra_bytes"])


def bench_sinks(model_name: str, lengths: Sequence[int], eager_length: int, *, device: Any, dtype: Any,
                threads: int | None, environment: Environment, torch_threads: int, load_log: Any,
                status: Callable[[str], ContextManager[Any]]) -> SinksBenchReport:
    """Every measurement of :func:`plan`, one subprocess each, sampled by ``load_log``.

    Args:
        model_name / device / dtype / threads: What each worker loads and runs with.
        lengths / eager_length: Prompt lengths, tokens (:func:`plan`).
        environment / torch_threads: Recorded in the report (:func:`lab.reports.environment_record`).
        load_log: A :class:`lab.machine.LoadLog`.
        status: ``status(text)`` gives a context that shows ``text`` while one measurement runs.
    """
    results = []
    for mode, n in plan(lengths, eager_length):
        with status(f"measuring {mode} at {n} tokens"), load_log.around(f"{mode} at {n} tokens"):
            results.append(measure(model_name, mode, n, device=device, dtype=dtype, threads=threads))
    return SinksBenchReport(model=model_name, environment=environment, torch_threads=torch_threads, results=results,
                            comparison=compare_capture(results, lengths), machine_load=load_log.record())
