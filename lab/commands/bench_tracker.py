"""``lab bench-tracker``: how much the entropy tracker slows decoding down.

Method: the same decode loop (:func:`lab.tracker.run_decode` on the decode core
:func:`lab.decode.generate`: prefill, then one-token decodes with a KV cache) runs with the tracker off and on, on the same
prompt, for exactly ``--max-new-tokens`` tokens (EOS ignored, so both do the same
work). After one warm-up run of each, ``--repeats`` pairs run in alternating order
(off-on, on-off, ...) so that drift in machine load hits both arms alike. Reported:
min / median / max wall time per arm, the overhead of the medians and of the
minima (the minimum is the least noise-inflated estimate on a shared machine), the
median of the per-pair ratios, and, separately, the tracker's statistics alone
timed on a logits row of the model's vocabulary size (no model, so no noise from
the forward pass). Both arms must produce the same tokens; the report says so.

Writes ``<out>/<timestamp>-bench-tracker/`` with ``report.json`` (every raw time)
and ``summary.md``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from lab.commands.common import add_model_args, add_out_arg, add_threads_arg, check_model_args

DEFAULT_PROMPT = "Explain in a few sentences why the sky is blue."


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench-tracker", help="measure the entropy tracker's overhead on decode time",
        description="Decode with the entropy tracker off and on (same loop, alternating repeats) and report "
                    "the overhead; writes <out>/<timestamp>-bench-tracker/.",
    )
    add_model_args(p)
    p.add_argument("--prompt", default=DEFAULT_PROMPT, help=f"prompt to decode from (default: {DEFAULT_PROMPT!r})")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens per run, EOS ignored (default: 64)")
    p.add_argument("--repeats", type=int, default=5, help="timed off/on pairs after one warm-up pair (default: 5)")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="0 = greedy (default); > 0 samples (seeded), adding the sampled-entropy statistics")
    p.add_argument("--top-k", type=int, default=None, help="top-k filter when sampling (default: off)")
    p.add_argument("--top-p", type=float, default=1.0, help="top-p filter when sampling (default: 1 = off)")
    p.add_argument("--stats-iterations", type=int, default=200,
                   help="iterations of the statistics-only timing on one logits row (default: 200)")
    add_threads_arg(p)
    add_out_arg(p)
    p.set_defaults(func=run)


def _spread(times: list[float]) -> dict[str, float]:
    return {"min": min(times), "median": statistics.median(times), "max": max(times)}


def _pct(on: float, off: float) -> float:
    return (on - off) / off * 100.0


def _time_statistics(vocab_size: int, device, top_alternatives: int, do_sample: bool, iterations: int) -> float:
    """Seconds per step of the tracker's statistics alone, on a random logits row ``[1, V]``."""
    import torch

    from lab.tracker.stats import StepRecorder

    gen = torch.Generator(device="cpu").manual_seed(0)
    logits = (3.0 * torch.randn(1, vocab_size, generator=gen)).to(device)  # [1, V], realistic spread
    chosen = logits.argmax(dim=-1, keepdim=True)
    recorder = StepRecorder(top_alternatives, do_sample)
    for _ in range(10):  # warm-up
        recorder.record(logits, logits, chosen)
    recorder = StepRecorder(top_alternatives, do_sample)
    start = time.perf_counter()
    for _ in range(iterations):
        recorder.record(logits, logits, chosen)
    recorder.finish()  # includes the one device -> host copy
    return (time.perf_counter() - start) / iterations


def run(args: argparse.Namespace) -> int:
    from lab.models.chat import build_messages, encode_chat
    from lab.models.loading import load_model
    from lab.render.console import stderr_console, stdout_console
    from lab.render.entropy import bench_markdown, render_bench
    from lab.reports import environment, report_dir
    from lab.decode import check_context
    from lab.tracker.results import DecodeSettings
    from lab.tracker.loop import run_decode

    # 1. Validate before loading.
    settings = DecodeSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                              top_k=args.top_k, top_p=args.top_p, seed=0)
    if isinstance(args.repeats, bool) or args.repeats < 1:
        raise ValueError(f"repeats={args.repeats!r} must be >= 1")
    if args.stats_iterations < 1:
        raise ValueError(f"stats_iterations={args.stats_iterations!r} must be >= 1")
    messages = build_messages(args.prompt)
    device = check_model_args(args)

    # 2. Load.
    import torch

    from lab.machine import LoadLog, set_threads

    load_log = LoadLog(threads=set_threads(args.threads))
    err = stderr_console()
    with err.status(f"loading {args.model} on {device}"):
        model, tokenizer = load_model(args.model, device=device, dtype=args.dtype, weights=args.weights)
    input_ids = encode_chat(tokenizer, messages)
    check_context(model, input_ids.shape[1], settings.max_new_tokens, arg="--max-new-tokens")  # before any decoding

    # 3. Warm up both arms, then time alternating pairs.
    def one(record: bool):
        return run_decode(model, input_ids, settings, eos_ids=set(), record=record, seed=0)

    one(False), one(True)
    times: dict[str, list[float]] = {"off": [], "on": []}
    outputs: list[list[int]] = []
    with err.status("timing") as status:
        for r in range(args.repeats):
            order = (False, True) if r % 2 == 0 else (True, False)
            for record in order:
                arm = "on" if record else "off"
                status.update(f"pair {r + 1}/{args.repeats}, tracker {arm}")
                with load_log.around(f"tracker {arm}"):
                    run_result = one(record)
                times[arm].append(run_result.elapsed_s)
                outputs.append(run_result.new_token_ids)
    identical = all(o == outputs[0] for o in outputs)
    n_tokens = settings.max_new_tokens

    # 4. The statistics alone, on a row of the model's vocabulary size.
    vocab_size = int(model.get_output_embeddings().weight.shape[0])
    stats_s = _time_statistics(vocab_size, device, settings.top_alternatives, settings.do_sample,
                               args.stats_iterations)

    off, on = _spread(times["off"]), _spread(times["on"])
    ratios = [b / a for a, b in zip(times["off"], times["on"])]
    per_token_off = off["median"] / n_tokens
    result = {
        "kind": "bench-tracker",
        "prompt": args.prompt,
        "settings": settings,
        "repeats": args.repeats,
        "tokens_per_run": n_tokens,
        "prompt_tokens": int(input_ids.shape[1]),
        "vocab_size": vocab_size,
        "model": dict(model.lab_source),
        "environment": environment(model),
        "times_s": times,
        "off_s": off,
        "on_s": on,
        "overhead_pct_median": _pct(on["median"], off["median"]),
        "overhead_pct_min": _pct(on["min"], off["min"]),
        "overhead_pct_paired_median": (statistics.median(ratios) - 1.0) * 100.0,
        "per_token_ms_off": per_token_off * 1e3,
        "statistics_us_per_step": stats_s * 1e6,
        "statistics_pct_of_decode_step": stats_s / per_token_off * 100.0,
        "identical_tokens": identical,
        "torch_threads": torch.get_num_threads(),
        "machine_load": load_log.summary(),
    }
    render_bench(result, stdout_console())
    with report_dir(args.out, "bench-tracker") as rd:
        rd.write_json("report.json", result)
        rd.write_text("summary.md", bench_markdown(result))
    stdout_console().print(f"report: {rd.final}", markup=False, highlight=False, soft_wrap=True)
    return 0
