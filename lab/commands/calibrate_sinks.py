"""``lab calibrate-sinks``: sweep the sink threshold over a prompt set and write the calibration report.

For every prompt (default: the packaged ``lab/data/calibration_prompts.jsonl``) and
for long uniform prompts built from the same text (``--long-lengths``, default 2048
tokens) one streaming prefill gives the z-scores; the sweep counts, per threshold,
the prompts whose position 0 is flagged and the content tokens flagged, short and
long prompts apart (both must meet the criteria). The report
``<out>/<timestamp>-calibrate-sinks-<model>/`` holds ``calibration.json`` (criteria,
chosen threshold, sweep counts, per-prompt scores), ``sweep.csv``, ``prompts.csv``,
``summary.md`` and ``sweep.png``.
"""

from __future__ import annotations

import argparse

from lab.commands.common import check_model_args, add_model_args, add_out_arg


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "calibrate-sinks", help="calibrate the attention-sink threshold on a prompt set and write a report",
        description="Sweep the sink z-threshold over a prompt set: position 0 must be flagged on >= 95% of prompts "
                    "and < 1% of content tokens flagged; report the feasible range and its middle.",
    )
    p.add_argument("--prompts", default=None,
                   help="JSONL prompt set, one {\"id\", \"prompt\", \"system\"?} per line "
                        "(default: the packaged lab/data/calibration_prompts.jsonl)")
    p.add_argument("--held-out", default=None,
                   help="JSONL prompt set the chosen threshold is checked on, with its long prompts too "
                        "(default: the packaged lab/data/sinks_held_out.jsonl; 'none' to skip)")
    p.add_argument("--long-lengths", default="2048",
                   help="comma-separated token lengths of long uniform prompts built from the set's text, scored "
                        "too (default: 2048; 'none' to skip)")
    add_model_args(p)
    add_out_arg(p)
    p.set_defaults(func=run)


def _long_lengths(text: str) -> tuple[int, ...]:
    if text.strip().lower() in ("", "none", "0"):
        return ()
    try:
        lengths = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--long-lengths={text!r} must be comma-separated integers or 'none'") from None
    if any(n < 64 for n in lengths):
        raise ValueError(f"--long-lengths={text!r}: each length must be >= 64 tokens")
    return lengths


def run(args: argparse.Namespace) -> int:
    import torch

    from lab.calibration import (CONTENT_MAX_RATE, HELD_OUT_SET, POSITION0_MIN_RATE, TRAILING_FRACTION,
                                 choose_threshold, evaluate, load_prompts, long_prompts, score_prompts, sweep)
    from lab.models import known_context_length, load_model
    from lab.prefill import DEFAULT_THRESHOLD, MIN_OBSERVING_QUERIES
    from lab.render.console import stderr_console, stdout_console
    from lab.render.sinks import calibration_markdown, calibration_table, plot_sweep
    from lab.reports import environment, report_dir

    # 1. Validate before loading.
    prompts = load_prompts(args.prompts)
    lengths = _long_lengths(args.long_lengths)
    skip_held = args.held_out is not None and args.held_out.strip().lower() == "none"
    held = [] if skip_held else load_prompts(args.held_out, packaged=HELD_OUT_SET)
    device = check_model_args(args)
    context = known_context_length(args.model)  # a long prompt past it failed only after the model loaded
    if lengths and context is not None and max(lengths) > context:
        raise ValueError(f"--long-lengths={args.long_lengths!r}: {max(lengths)} tokens exceed the model's context "
                         f"of {context}")

    # 2. Score every prompt (progress on stderr).
    err = stderr_console()
    with err.status(f"loading {args.model} on {device}"):
        model, tokenizer = load_model(args.model, device=device, dtype=args.dtype)
    with err.status("scoring prompts") as status:
        scores = score_prompts(model, tokenizer, prompts,
                               progress=lambda i, n, pid: status.update(f"prompt {i + 1}/{n}: {pid}"))
        long_scores = score_prompts(model, tokenizer, long_prompts(tokenizer, lengths, prompts),
                                    progress=lambda i, n, pid: status.update(f"long prompt {i + 1}/{n}: {pid}"))
        held_scores = score_prompts(model, tokenizer, held,
                                    progress=lambda i, n, pid: status.update(f"held-out prompt {i + 1}/{n}: {pid}"))
        held_long = score_prompts(model, tokenizer, long_prompts(tokenizer, lengths, held) if held else [],
                                  progress=lambda i, n, pid: status.update(f"held-out long prompt {i + 1}/{n}"))

    # 3. Sweep and choose; an infeasible set still gets its report (chosen = None).
    rows = sweep(scores, long_scores=long_scores)
    try:
        chosen = choose_threshold(rows)
    except ValueError as exc:
        chosen = None
        err.print(f"calibration: {exc}", markup=False, highlight=False)
    content_z = torch.cat([s.candidate_content_z for s in scores])
    info = dict(model.lab_source)
    data = {
        "kind": "calibrate-sinks",
        "model": info,
        "environment": environment(model),
        "criteria": {"position0_min_rate": POSITION0_MIN_RATE, "content_max_rate": CONTENT_MAX_RATE},
        "min_observers": MIN_OBSERVING_QUERIES,
        "chosen_threshold": chosen,
        "current_default_threshold": DEFAULT_THRESHOLD,
        "feasible_thresholds": [r.threshold for r in rows if r.feasible],
        "n_prompts": len(scores),
        "n_content_tokens": int(content_z.numel()),
        "position0_z_min": min(s.position0_z for s in scores),
        "content_z_max": float(content_z.max()) if content_z.numel() else None,
        "sweep": [{"threshold": r.threshold, "position0_flagged": r.position0_flagged, "n_prompts": r.n_prompts,
                   "content_flagged": r.content_flagged, "n_content": r.n_content,
                   "long_position0_flagged": r.long_position0_flagged, "long_n_prompts": r.long_n_prompts,
                   "long_content_flagged": r.long_content_flagged, "long_n_content": r.long_n_content,
                   "feasible": r.feasible} for r in rows],
        "trailing_fraction": TRAILING_FRACTION,
        "held_out": None if chosen is None or not held else {
            "prompts": args.held_out or f"lab/data/{HELD_OUT_SET}", "threshold": chosen,
            "short": evaluate(held_scores, chosen), "long": evaluate(held_long, chosen) if held_long else None,
            "long_n_tokens": [int(s.z.numel()) for s in held_long]},
        "long_prompts": [{"id": s.id, "n_tokens": int(s.z.numel()), "position0_z": s.position0_z,
                          "max_content_z": float(s.candidate_content_z.max()),
                          "n_content": int(s.candidate_content_z.numel()),
                          "content_flagged_at_chosen": (int((s.candidate_content_z > chosen).sum())
                                                        if chosen is not None else None),
                          "trailing_flagged_at_chosen": s.trailing_flagged(chosen) if chosen is not None else None}
                         for s in long_scores],
        "prompts": [{"id": s.id, "n_tokens": int(s.z.numel()), "position0_z": s.position0_z,
                     "max_content_z": float(s.candidate_content_z.max()) if s.candidate_content_z.numel() else None,
                     "n_content": int(s.candidate_content_z.numel())} for s in scores],
    }

    # 4. Show and write.
    stdout_console().print(calibration_table(data))
    with report_dir(args.out, "calibrate-sinks", info["model"]) as rd:
        rd.write_json("calibration.json", data)
        rd.write_csv("sweep.csv", data["sweep"])
        rd.write_csv("prompts.csv", data["prompts"])
        rd.write_text("summary.md", calibration_markdown(data))
        plot_sweep(data, rd.file("sweep.png"))
    stdout_console().print(f"report: {rd.final}", markup=False, highlight=False, soft_wrap=True)
    return 0
