"""``lab entropy PROMPT``: decode a prompt and track the entropy of every next-token distribution.

Decode a prompt, record per-step entropy (raw and as sampled), varentropy and the top alternatives; print a coloured
view and write a report directory.

Every argument is validated before the model loads (a bad one exits 2 and writes
nothing). The report directory ``<out>/<timestamp>-entropy-<slug>/`` holds
``report.json``, ``tokens.csv``, ``summary.md`` and ``entropy.png`` and appears
only when all four are written.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from lab.kinds.entropy import KIND as ENTROPY
from lab.commands.common import (add_context_args, add_decode_args, add_model_args, add_out_arg, add_prompt_args,
                                 add_ranged_arg, check_context_room, check_model_args, command_parser, context_fields,
                                 context_messages, read_context_step)
from lab.commands.runtime_choice import add_runtime_arg, load_target_step, resolve_runtime
from lab.models.source import model_source

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = command_parser(subparsers, "entropy", run, __doc__)
    add_prompt_args(p)
    add_context_args(p)
    add_model_args(p)
    add_decode_args(p, "entropy")
    add_ranged_arg(p, "entropy", "--top-alternatives", 5,
                   "alternatives recorded per step from the model's own distribution, ", " (default: 5)")
    add_runtime_arg(p)
    add_out_arg(p)


def run(args: argparse.Namespace) -> int:
    from lab.models.chat import build_messages, encode_chat
    from lab.render.console import print_report, stderr_console, stdout_console
    from lab.render.context import context_markdown, print_context_reading
    from lab.render.entropy import render_result, step_rows, summary_markdown, plot_entropy
    from lab.views.publish import report_folder
    from lab.decode import check_context
    from lab.tracker.results import DecodeSettings
    from lab.tracker.loop import track_generate

    # 1. Validate everything before loading anything.
    settings = DecodeSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                              top_k=args.top_k, seed=args.seed, top_alternatives=args.top_alternatives)
    question = build_messages(args.prompt, args.system)
    context, question, messages = context_messages(args, question)
    prompt = question[-1]["content"]  # recorded as the model was given it (a context strips its leading blank lines)
    device = check_model_args(args)
    runtime = resolve_runtime(args)

    # 2. Load and decode (progress on stderr).
    err = stderr_console()
    model, tokenizer = load_target_step(err, args, device, runtime)
    check_context_room(model, tokenizer, messages, context)  # before the prefill: the reading's 24 tokens fit
    input_ids = encode_chat(tokenizer, messages)
    check_context(model, input_ids.shape[1], settings.max_new_tokens, arg="--max-new-tokens")  # before any decoding
    with err.status(f"decoding up to {settings.max_new_tokens} tokens"):
        result = track_generate(model, tokenizer, input_ids, max_new_tokens=settings.max_new_tokens,
                                temperature=settings.temperature, top_p=settings.top_p, top_k=settings.top_k,
                                seed=settings.seed, top_alternatives=settings.top_alternatives)

    reading = read_context_step(err, model, tokenizer, args.model, question, context)

    # 3. Show the result on stdout.
    info = model_source(model).as_dict()
    render_result(result, stdout_console(), prompt=prompt, model_name=f"{info['model']} ({info['device']}, "
                                                                           f"{info['dtype']})",
                  special_ids=tokenizer.all_special_ids)
    print_context_reading(stdout_console(), reading)

    # 4. Write the report atomically.
    with report_folder(args.out, ENTROPY, args.prompt) as rd:
        rd.write_report({**report_data(args, prompt, messages, settings, result, info, runtime, model),
                                      **context_fields(context, reading)})
        rd.write_csv("tokens.csv", step_rows(result))
        plot_entropy(result, rd.file("entropy.png"))
        rd.write_text("summary.md", summary_markdown(result, prompt=prompt, system=args.system, model_info=info)
                      + context_markdown(reading))
    print_report(stdout_console(), rd.final)
    return 0


def report_data(args: argparse.Namespace, prompt: str, messages: list, settings: Any, result: Any, info: dict,
                runtime: Any, model: Any) -> dict[str, Any]:
    """report.json of one tracked decode (the ``--context`` fields are added beside it); ``prompt`` is the user
    message as the model was given it."""
    from lab.render.entropy import step_dicts
    from lab.reports import environment

    return {"kind": "entropy", "prompt": prompt, "system": args.system, "messages": messages,
            "prompt_ids": result.prompt_ids[0].tolist(), "settings": settings, "seed": result.seed,
            "model": info, "device": info["device"], "dtype": info["dtype"],
            "runtime": runtime.runtime, "runtime_source": runtime.said, "vocab_size": result.vocab_size,
            "environment": environment(model), "summary": result.summary(), "text": result.text,
            "new_token_ids": result.new_token_ids, "stop_reason": result.stop_reason,
            "steps": step_dicts(result.steps)}
