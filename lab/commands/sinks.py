"""``lab sinks PROMPT``: find attention sinks in a prompt's prefill and score the context's health.

Run one streaming prefill (no S x S attention matrices kept), score how much attention each position receives, flag
sinks, and write a report directory.

Arguments are validated before the model loads; a bad one (or a prompt longer than
the context, or a model whose attention cannot be captured) exits 2 and writes no
report. The report directory ``<out>/<timestamp>-sinks-<slug>/`` holds
``report.json``, ``positions.csv``, ``summary.md`` and ``heatmap.png``.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from lab.commands.common import (add_context_args, add_model_args, add_out_arg, check_context_room, check_model_args,
                                 command_parser, context_fields, context_messages, load_model_step, read_context_step)
from lab.commands.runtime_choice import add_runtime_arg, refuse_runtime
from lab.kinds.sinks import KIND as SINKS
from lab.files import MAX_TEXT_BYTES, read_text
from lab.models.source import model_source


def register(subparsers: argparse._SubParsersAction) -> None:
    from lab.sinks.profiles import load_choice

    try:
        choice = load_choice()
        what = f"{choice.label} ({choice.statistic}) above which a position is a sink" + (
            ", in (0, 1)" if choice.statistic == "sink_rate" else ", above 0")
    except ValueError:  # a damaged user choice.json: the commands that read it say so; the parser still builds
        what = "the chosen statistic's value above which a position is a sink"

    p = command_parser(subparsers, "sinks", run, __doc__)
    p.add_argument("prompt", nargs="?", default=None, help="the user message (or use --prompt-file)")
    p.add_argument("--prompt-file", default=None, help="read the user message from this UTF-8 text file")
    p.add_argument("--system", default=None, help="system prompt (default: the template's own, if any)")
    add_context_args(p)
    add_model_args(p)
    p.add_argument("--threshold", type=float, default=None,
                   help=what
                        + " (default: the model's own calibration: the one `lab calibrate-sinks` wrote into "
                          "$LAB_CALIBRATION_DIR/sinks/ (~/.cache/lab/calibrations/sinks/), else the packaged "
                          "lab/sinks/calibrations/<profile>.json; a model without one runs with the uncalibrated "
                          "default and says so)")
    p.add_argument("--calibration", default=None, metavar="FILE",
                   help="read the threshold from this calibration file (a <profile>.json written by `lab "
                        "calibrate-sinks`) instead of the model's own (default: the model's own)")
    add_runtime_arg(p, torch_only="the sink detector and context health")
    add_out_arg(p)


def read_prompt(prompt: str | None, prompt_file: str | None) -> str:
    """The prompt from the positional argument or ``--prompt-file`` (exactly one).

    Raises:
        ValueError: both or neither given, the file is refused (:func:`lab.files.read_text`), or the prompt is
            empty.
    """
    if (prompt is None) == (prompt_file is None):
        raise ValueError(f"give exactly one of PROMPT or --prompt-file (got prompt={prompt!r}, "
                         f"prompt_file={prompt_file!r})")
    if prompt_file is not None:
        prompt = read_text(prompt_file, MAX_TEXT_BYTES, f"--prompt-file {prompt_file}")
    if not prompt.strip():
        if prompt_file is not None:
            raise ValueError(f"--prompt-file={prompt_file!r} holds no prompt (it is empty or only whitespace)")
        raise ValueError(f"PROMPT {prompt[:40]!r} is empty")
    return prompt


def run(args: argparse.Namespace) -> int:
    from lab.models.chat import build_messages
    from lab.sinks.prefill import analyze_prefill
    from lab.render.console import print_report, stderr_console, stdout_console
    from lab.render.context import context_markdown, print_context_reading
    from lab.render.sinks import plot_heatmap, position_rows, render_analysis, report_data, summary_markdown
    from lab.reports import environment
    from lab.views.publish import report_folder

    refuse_runtime(args, "sinks")

    # 1. Validate everything before loading anything.
    prompt = read_prompt(args.prompt, args.prompt_file)
    check_threshold_args(args)
    question = build_messages(prompt, args.system)
    context, question, messages = context_messages(args, question)
    prompt = question[-1]["content"]  # recorded as the model was given it (a context strips its leading blank lines)
    device = check_model_args(args)

    # 2. Load and run one streaming prefill (progress on stderr).
    err = stderr_console()
    model, tokenizer = load_model_step(err, args, device)
    check_context_room(model, tokenizer, messages, context)  # before the prefill: the reading's 24 tokens fit
    with err.status("prefill with streaming attention capture"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the uncalibrated notice is printed below, once
        analysis = analyze_prefill(model, tokenizer, messages, threshold=args.threshold, calibration=args.calibration)
    if analysis.threshold_source not in ("calibrated", "given"):
        err.print(f"warning: the sink threshold is not calibrated for {args.model!r}; using the default "
                  f"{analysis.threshold:g} (run `lab calibrate-sinks --model PROFILE` for a named profile)",
                  style="bold yellow", markup=False, highlight=False)

    reading = read_context_step(err, model, tokenizer, args.model, question, context)

    # 3. Show the result on stdout.
    info = model_source(model).as_dict()
    out = stdout_console()
    render_analysis(analysis, out, model_name=f"{info['model']} ({info['device']}, {info['dtype']})")
    print_context_reading(out, reading)

    # 4. Write the report atomically.
    slug = args.prompt if args.prompt is not None else Path(args.prompt_file).stem
    with report_folder(args.out, SINKS, slug) as rd:
        rd.write_report({
            "kind": "sinks",
            "prompt": prompt,
            "system": args.system,
            "messages": messages,
            "model": info,
            "environment": environment(model),
            "analysis": report_data(analysis),
            **context_fields(context, reading),
        })
        rd.write_csv("positions.csv", position_rows(analysis))
        rd.write_text("summary.md", summary_markdown(analysis, prompt=prompt, system=args.system, model_info=info)
                      + context_markdown(reading))
        plot_heatmap(analysis, rd.file("heatmap.png"))
    print_report(out, rd.final)
    return 0


def check_threshold_args(args: argparse.Namespace) -> None:
    """``--threshold`` in the chosen statistic's range and not beside ``--calibration``, and the calibration
    files the run would read, before the model loads.

    Raises:
        ValueError: one line naming the flag or the file.
    """
    from lab.sinks.prefill import check_calibration_files
    from lab.sinks.profiles import check_threshold, load_choice

    if args.threshold is not None:
        check_threshold(load_choice().statistic, args.threshold, "--threshold")
        if args.calibration is not None:
            raise ValueError(f"--threshold={args.threshold!r} and --calibration={args.calibration!r}: give one")
    check_calibration_files(args.model, threshold=args.threshold, calibration=args.calibration)  # before it loads
