"""``lab stream``: KV-cache eviction and attention sinks: perplexity and acceptance per retention policy.

Score a long text under KV-cache retention policies (dense, window:W, sinks:K+W, detected:K+W, recompute:W) with one
masked forward pass each, test window vs sinks, measure speculative acceptance with an evicting draft, and write a
report (StreamingLLM, Xiao et al. 2023).

Scores a long text under each retention policy in one masked forward pass per
policy, tests window vs sinks as stated in advance, measures draft acceptance
when the draft's cache is evicted, and writes ``<out>/<timestamp>-stream-<slug>/``
(``report.json``, ``policies.csv``, ``tokens.csv``, ``summary.md``,
``rolling_nll.png``), which appears only when all are written. Every flag is
checked before the model loads; the text's length against the model's context as
soon as it is loaded (a bad value exits 2 with one line and writes no report).
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

from lab.commands.common import (add_draft_weights_arg, add_model_args, add_out_arg, add_ranged_arg, check_model_args,
                                 command_parser)
from lab.commands.runtime_choice import add_runtime_arg, refuse_runtime
from lab.kinds.stream import KIND as STREAM
from lab.files import MAX_TEXT_BYTES, read_text
from lab.models.source import model_source


def register(subparsers: argparse._SubParsersAction) -> None:
    from lab.stream.policies import DEFAULT_POLICIES

    p = command_parser(subparsers, "stream", run, __doc__)
    add_model_args(p)
    p.add_argument("--text-file", default=None,
                   help="UTF-8 text to score (default: CPython's pydoc_data.topics, the help() topics)")
    add_ranged_arg(p, "stream", "--tokens", 4096, "score the text's first N tokens, ", " (default: 4096)")
    p.add_argument("--policies", default=DEFAULT_POLICIES, help=f"comma-separated policies (default: {DEFAULT_POLICIES})")
    add_ranged_arg(p, "stream", "--chunk-tokens", 128, "targets per chunk, the unit of the bootstrap and the paired "
                   "test, ", " (default: 128)")
    add_ranged_arg(p, "stream", "--detect-tokens", 512, "the first chunk the sink detector analyses for detected:K+W, ",
                   " (default: 512)")
    p.add_argument("--calibration", default=None, metavar="FILE",
                   help="the sink calibration file detected:K+W reads its threshold from (a <profile>.json written "
                        "by `lab calibrate-sinks`) (default: the model's own, the user's before the packaged one)")
    add_ranged_arg(p, "stream", "--recompute-every", None, "the recompute oracle scores every N-th target, each "
                   "exactly, ", " (default: 16; only with a recompute:W policy)")
    add_ranged_arg(p, "stream", "--recompute-batch", None, "oracle windows per forward pass, ",
                   " (default: 16; only with a recompute:W policy)")
    p.add_argument("--no-acceptance", action="store_true", help="skip the speculative-decoding acceptance runs")
    add_ranged_arg(p, "stream", "--prompt-tokens", None, "acceptance runs (so not with --no-acceptance): prompt = the "
                   "text's first N tokens, ", " (default: 1024)")
    add_ranged_arg(p, "stream", "--max-new-tokens", None, "acceptance runs: new tokens, ", " (default: 32)")
    add_ranged_arg(p, "stream", "--gamma", None, "acceptance runs: draft tokens per round, ", " (default: 4)")
    add_ranged_arg(p, "stream", "--temperature", None, "acceptance runs: temperature of the sampled run, ",
                   "; a greedy run is always made (default: 1)")
    add_ranged_arg(p, "stream", "--seed", 0, "seed of the sampled run and the bootstrap, ", " (default: 0)")
    p.add_argument("--draft", default=None,
                   help="acceptance runs: early-exit:N or a draft model (default: the profile's, early-exit:24 for smollm2)")
    add_draft_weights_arg(p)
    add_runtime_arg(p, torch_only="the eviction policies' attention scores")
    add_out_arg(p)


def _read_text(path: str | None) -> tuple[str, str, str]:
    """``(text, description, slug)``; the default text when ``path`` is None."""
    from lab.stream.experiment import default_text

    if path is None:
        text, source = default_text()
        return text, source, "pydoc-topics"
    text = read_text(path, MAX_TEXT_BYTES, f"--text-file {path}")
    if not text.strip():
        raise ValueError(f"--text-file={path!r} is empty")
    return text, f"--text-file {path}", Path(path).stem


def _draft_spec(args: argparse.Namespace) -> str | None:
    from lab.models.profiles import PROFILES
    from lab.speculative.draft_specs import check_draft, check_draft_spec

    if args.no_acceptance:
        if args.draft_weights != "float32":
            raise ValueError(f"--draft-weights={args.draft_weights!r} with --no-acceptance: no draft runs")
        return None
    spec = args.draft
    if spec is None:
        profile = PROFILES.get(args.model)
        if profile is None or profile.draft is None:
            raise ValueError(f"--model {args.model!r} has no default draft; pass --draft or --no-acceptance")
        spec = profile.draft
    if check_draft_spec(spec) == "prompt-lookup":
        raise ValueError("--draft='prompt-lookup' has no KV cache to evict; use early-exit:N or a draft model")
    check_draft(spec, args.draft_weights)
    return spec


# Flags (dests) read only by the acceptance runs, and only by a recompute:W policy.
ACCEPTANCE_ONLY = ("prompt_tokens", "max_new_tokens", "gamma", "temperature", "draft")
RECOMPUTE_ONLY = ("recompute_every", "recompute_batch")


def stream_config(args: argparse.Namespace):
    """The :class:`lab.stream.experiment.StreamConfig` of the flags, the flags left at None filled with its
    defaults.

    Raises:
        ValueError: a flag that the run would not read (an acceptance flag with ``--no-acceptance``,
            a recompute flag without a ``recompute:W`` policy), or a bad value, naming the flag.
    """
    from lab.stream.experiment import StreamConfig
    from lab.stream.policies import parse_policies

    policies = parse_policies(args.policies)
    unread = {"--no-acceptance skips the acceptance runs": ACCEPTANCE_ONLY if args.no_acceptance else (),
              f"--policies {args.policies!r} has no recompute:W policy":
                  () if any(p.kind == "recompute" for p in policies) else RECOMPUTE_ONLY}
    for why, dests in unread.items():
        typed = [f"--{d.replace('_', '-')}" for d in dests if getattr(args, d) is not None]
        if typed:
            raise ValueError(f"{', '.join(typed)} would have no effect: {why}; drop {'them' if len(typed) > 1 else 'it'}")
    given = {d: getattr(args, d) for d in (*ACCEPTANCE_ONLY, *RECOMPUTE_ONLY)
             if d != "draft" and getattr(args, d) is not None}  # the rest: StreamConfig's defaults
    return StreamConfig(policies=policies, n_tokens=args.tokens, chunk_tokens=args.chunk_tokens,
                        detect_tokens=args.detect_tokens, acceptance=not args.no_acceptance, seed=args.seed,
                        draft=_draft_spec(args), draft_weights=args.draft_weights, calibration=args.calibration,
                        **given)


def run(args: argparse.Namespace) -> int:
    from lab.models.loading import load_model
    from lab.render.console import print_report, stderr_console, stdout_console
    from lab.render.stream import plot_rolling, policy_rows, render_stream, summary_markdown, token_rows
    from lab.reports import environment
    from lab.views.publish import report_folder
    from lab.stream.experiment import run_stream

    refuse_runtime(args, "stream")

    # 1. Validate everything before loading anything.
    cfg = stream_config(args)
    if args.calibration is not None:
        from lab.sinks.profiles import load_calibration

        load_calibration(None, args.calibration)  # a bad file is named before the model loads
    text, source, slug = _read_text(args.text_file)
    device = check_model_args(args)

    # 2. Load and run (progress on stderr).
    err = stderr_console()
    with err.status(f"loading {args.model} on {device}") as status:
        model, tokenizer = load_model(args.model, device=device, dtype=args.dtype, weights=args.weights)
        result = run_stream(model, tokenizer, text, cfg, progress=lambda msg: status.update(msg))

    # 3. Show the result on stdout.
    out = stdout_console()
    render_stream(result, out)

    # 4. Write the report atomically.
    info = model_source(model).as_dict()
    det = result.detection
    with report_folder(args.out, STREAM, slug) as rd:
        rd.write_report({
            "kind": "stream", "model": info, "environment": environment(model),
            "text": {"source": source, "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                     "n_tokens": len(result.input_ids), "input_ids": result.input_ids},
            "settings": {**{k: v for k, v in vars(cfg).items() if k != "policies"},
                         "policies": [p.spec for p in cfg.policies], "eval_start": cfg.eval_start},
            "detection": None if det is None else {"n_tokens": det.n_tokens, "threshold": det.threshold,
                                                   "calibration_file": det.calibration_file,
                                                   "flagged": det.flagged, "ranked": det.ranked[:32],
                                                   "score_first_32": det.score[:32]},
            "policies": result.summary, "tests": result.tests, "recompute_check": result.recompute_check,
            "acceptance": result.acceptance, "benchmark": result.bench,
        })
        rd.write_csv("policies.csv", policy_rows(result))
        rd.write_csv("tokens.csv", token_rows(result, tokenizer))
        plot_rolling(result, rd.file("rolling_nll.png"))
        rd.write_text("summary.md", summary_markdown(result, model_info=info, text_source=source))
    print_report(out, rd.final)
    return 0
