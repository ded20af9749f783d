"""Rendering ``lab bench-weights``: ``summary.md`` (kernel times, numerics, step profiles).

Consumes the kind's typed report (:class:`lab.kinds.bench_weights.Report`); computes nothing new except the
megabytes of a table cell.
"""

from __future__ import annotations

from lab.bench.weights import FAMILIES
from lab.kinds.bench_weights import Report
from lab.render.markdown import md_row, md_table


def _load_line(result: Report) -> str:
    load = result.machine_load
    busy = " **BUSY: timings are not a quiet machine's**" if load.busy else ""
    return (f"torch threads {result.torch_threads}; highest 1-minute load average "
            f"{load.max_load_1m or float('nan'):.2f} on {load.cpu_count} CPUs{busy}. Profiled "
            "figures carry the profiler's own cost; the step column is timed without it.")


def weights_markdown(result: Report) -> str:
    """``summary.md`` of ``lab bench-weights``."""
    lines = [f"# Weight representations on {result.model}", "",
             _load_line(result), "",
             "## Kernel time per GGUF type (summed over its layers)", "",
             *md_table(f"GGUF type | representation | layers | M = 1 (ms) | M = {result.gamma + 1} (ms) | "
                       "verify in steps",
                       [(r.gguf_type, r.representation, r.layers, f"{r.step_ms:.1f}", f"{r.verify_ms:.1f}",
                         f"{r.verify_in_steps:.2f}") for r in result.kernels]),
             "", "## Against float32 on held-out text", "",
             *md_table("weights | positions | top-1 agree | mean KL (nats) | max KL | "
                       "mean abs entropy shift (bits) | max",
                       [(r.representation, r.positions, r.top1_agree, f"{r.mean_kl_nats:.2e}", f"{r.max_kl_nats:.2e}",
                         f"{r.mean_abs_entropy_shift_bits:.3f}", f"{r.max_abs_entropy_shift_bits:.3f}")
                        for r in result.numerics])]
    if result.step_profiles:
        lines += ["", f"## A decode step in the model, by kernel family ({result.step_context} positions cached, "
                      f"median of {result.steps} steps; profiled ms per step)", "",
                  *md_table(("weights", "step (ms)", *FAMILIES, "weights read (MB)", "GB/s in int4 / int8 / dense"))]
        for p in result.step_profiles:
            rates = " / ".join("-" if p.gb_per_s[f] is None else f"{p.gb_per_s[f]:.1f}"
                               for f in ("int4", "int8", "dense"))
            lines.append(md_row((p.weights, f"{p.step_ms:.1f}", *(f"{p.family_ms.get(f, 0.0):.1f}" for f in FAMILIES),
                                 f"{sum(p.family_bytes.values()) / 1e6:.0f}", rates)))
        file_bytes = result.file_linear_bytes or {}
        if file_bytes:
            lines += ["", "The GGUF file's own bytes for the same layers (what llama.cpp's kernels read per token): "
                      + ", ".join(f"{t} {b / 1e6:.0f} MB" for t, b in file_bytes.items())
                      + f"; {sum(file_bytes.values()) / 1e6:.0f} MB in all."]
    return "\n".join(lines) + "\n"
