"""``lab speculate PROMPT``: speculative decoding: replay accepted drafts, corrections and bonus tokens.

Generate with speculative decoding (a draft proposes gamma tokens, the target verifies them in one pass); show each
token's origin, a per-round table and the acceptance figures; write a report.

Every argument is validated before the model loads (a bad one exits 2 and writes no
report). The report directory ``<out>/<timestamp>-speculate-<slug>/`` holds
``report.json``, ``rounds.csv``, ``summary.md`` and ``accepted_length.png`` and
appears only when all four are written.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
from typing import TYPE_CHECKING

from lab.commands.common import (add_decode_args, add_draft_weights_arg, add_model_args, add_out_arg, add_prompt_args,
                                 add_ranged_arg, check_adaptive_draft, check_model_args, command_parser, draft_cost,
                                 parse_adaptive)
from lab.commands.runtime_choice import (RuntimeChoice, add_runtime_arg, load_target_and_draft, resolve_runtime,
                                         runtime_for_draft)
from lab.kinds.speculate import KIND as SPECULATE
from lab.models.source import model_source

if TYPE_CHECKING:
    from lab.speculative.report import SpeculateConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    from lab.speculative.draft_dtypes import DRAFT_DTYPE_CHOICES, PER_PASS_ALIAS, PER_PASS_SPEC

    p = command_parser(subparsers, "speculate", run, __doc__)
    add_prompt_args(p)
    add_model_args(p)
    add_draft_weights_arg(p)
    p.add_argument("--draft", default=None,
                   help="auto (per round: no draft or prompt lookup, by the costs measured as it runs), auto:M (the "
                        "same, and the draft model M), early-exit:N (the target's first N layers), prompt-lookup, or "
                        "a model name/path (default: auto:<the profile's draft model> where the profile has one, "
                        "else auto)")
    add_ranged_arg(p, "speculate", "--gamma", None, "draft tokens per round, ",
                   "; with auto the most in a round (default: auto 16; else the tuned or documented set-up, else 4)")
    p.add_argument("--draft-dtype", default=None, choices=DRAFT_DTYPE_CHOICES,
                   help=f"a draft model's dtype ({PER_PASS_ALIAS} = {PER_PASS_SPEC}: the prompt's pass in float32, "
                        "one-token steps in bfloat16; lab.speculative.per_pass) (default: the tuned or documented "
                        "set-up, else the target's dtype)")
    p.add_argument("--adaptive", default=None,
                   help="stop drafting early: entropy:X (draft normalized entropy above X) or pmin:X (draft top "
                        "probability below X) (default: the tuned or documented set-up, else off; not with "
                        "prompt-lookup or auto)")
    add_decode_args(p, "speculate")
    add_runtime_arg(p)
    add_out_arg(p)


def speculate_config(args: argparse.Namespace, threads: int) -> tuple["SpeculateConfig", str, RuntimeChoice]:
    """Check the flags and resolve the run (draft, set-up, settings, seed) before any model loads.

    The numeric ranges (``--gamma``, ``--max-new-tokens`` ...) are :func:`lab.commands.common.check_bounds`'s,
    which :mod:`lab.cli` runs before any command.

    Args:
        args: The parsed flags.
        threads: torch's thread count for this run (part of the tuning file's machine key).

    Returns:
        ``(config, device, runtime)``: the :class:`lab.speculative.report.SpeculateConfig`, the device to load on
        and the runtime (with the target's weights) to load on.

    Raises:
        ValueError: a bad flag, naming it as typed (the CLI exits 2); so is ``--adaptive`` with a draft
            that ignores it (prompt lookup).
        lab.models.loading.ModelUnavailableError: a draft model that cannot be loaded.
    """
    from lab.models.chat import build_messages
    from lab.sampling import SamplingConfig
    from lab.speculative.draft_specs import check_draft, check_draft_spec
    from lab.speculative.report import SpeculateConfig
    from lab.speculative.settings import SpeculativeSettings

    sampling = SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    if args.adaptive:
        parse_adaptive(args.adaptive)  # errors name --adaptive as typed
    messages = build_messages(args.prompt, args.system)
    device = check_model_args(args)
    draft_spec, runtime = speculate_draft(args)
    kind = check_draft_spec(draft_spec)
    if args.adaptive:
        check_adaptive_draft(args.adaptive, kind)
    chosen = speculate_setup(args, draft_spec, kind, runtime.runtime, threads)
    settings = SpeculativeSettings.from_setup(chosen.setup, max_new_tokens=args.max_new_tokens, sampling=sampling)
    check_draft(draft_spec, args.draft_weights)  # syntax, weights and model, before the target loads
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    return SpeculateConfig(args.prompt, args.system, messages, draft_spec, chosen, settings, seed, runtime.runtime,
                           runtime.said), device, runtime


def speculate_draft(args: argparse.Namespace) -> tuple[str, RuntimeChoice]:
    """The draft spec in force and the runtime it runs on, before any model loads.

    ``--draft`` as typed; untyped, ``auto:<the profile's draft>`` where that draft is a separate model the runtime
    can run (a GGUF profile on llama.cpp), else plain ``auto`` (prompt lookup or nothing, per round): the lab's
    default drafts only where its measured costs say drafting pays (:class:`lab.speculative.auto.AutoDraft`).
    """
    from lab.models.loading import is_gguf_model
    from lab.models.profiles import PROFILES
    from lab.speculative.draft_specs import check_draft_spec

    if args.draft:
        kind = check_draft_spec(args.draft)
        return args.draft, runtime_for_draft(resolve_runtime(args), args.draft, kind)
    runtime = resolve_runtime(args)
    profile = PROFILES.get(args.model)
    own = profile.draft if profile is not None else None
    if own is None or check_draft_spec(own) != "model" or (runtime.runtime == "llama.cpp" and not is_gguf_model(own)):
        return "auto", runtime
    return f"auto:{own}", runtime


def speculate_setup(args: argparse.Namespace, draft_spec: str, kind: str, runtime: str, threads: int):
    """The draft set-up (:class:`lab.speculative.setups.ResolvedSetup`): :func:`lab.tuning.choose_setup`'s; for
    auto, gamma is the most it drafts in a round (``--gamma``, else :data:`lab.speculative.auto.AUTO_MAX_GAMMA`)
    and its draft model's dtype is chosen as for that model."""
    from lab.speculative.auto import AUTO_MAX_GAMMA
    from lab.speculative.draft_specs import auto_model
    from lab.speculative.setups import ResolvedSetup
    from lab.tuning import choose_setup

    flags = {"draft_dtype": args.draft_dtype, "gamma": args.gamma, "adaptive": args.adaptive}
    if kind != "auto":
        return choose_setup(args.model, draft_spec, flags, threads=threads,
                            has_weights=kind == "model" and runtime == "torch", runtime=runtime)
    inner = auto_model(draft_spec)
    if args.draft_dtype is not None and inner is None:
        raise ValueError(f"--draft-dtype {args.draft_dtype}: the draft {draft_spec!r} runs no model (auto:M takes one)")
    chosen = choose_setup(args.model, inner or "prompt-lookup", {**flags, "gamma": None}, threads=threads,
                          has_weights=inner is not None and runtime == "torch", runtime=runtime)
    gamma_source = "--gamma" if args.gamma is not None else (
        f"default: auto drafts 0 to {AUTO_MAX_GAMMA} tokens a round, chosen by the costs it measures")
    per_round = "auto: chosen per round"
    return ResolvedSetup(dataclasses.replace(chosen.setup, gamma=args.gamma or AUTO_MAX_GAMMA, adaptive=None,
                                             dynamic=None),
                         {**chosen.sources, "gamma": gamma_source, "adaptive": per_round, "dynamic": per_round},
                         chosen.notes)


def run(args: argparse.Namespace) -> int:
    import torch

    from lab.decode import check_context
    from lab.models.chat import encode_chat, eos_token_ids
    from lab.render.console import print_report, stderr_console, stdout_console
    from lab.render.speculative import (answer_text, plot_histogram, render_speculation, round_rows, summary_markdown,
                                       token_texts)
    from lab.reports import environment
    from lab.views.publish import report_folder
    from lab.speculative.loop import speculative_generate

    # 1. Validate everything before loading anything.
    cfg, device, runtime = speculate_config(args, torch.get_num_threads())

    # 2. Load, build the draft, decode (progress on stderr).
    err = stderr_console()
    model, tokenizer, draft = load_target_and_draft(args, device, cfg.draft_spec, err, runtime,
                                                    draft_dtype=cfg.chosen.setup.draft_dtype)
    for line, style in cfg.setup_lines():  # the set-up in force, once the draft is admitted
        err.print(line, style=style, markup=False, highlight=False, soft_wrap=True)
    cost = draft_cost(err, draft, cfg.draft_spec)
    input_ids = encode_chat(tokenizer, cfg.messages).to(device)
    check_context(model, input_ids.shape[1], args.max_new_tokens, arg="--max-new-tokens")  # before any decoding
    settings = dataclasses.replace(cfg.settings, eos_token_ids=eos_token_ids(model, tokenizer))
    with err.status(f"speculating up to {args.max_new_tokens} tokens ({cfg.chosen.setup.describe()}, "
                    f"draft {cfg.draft_spec})"):
        result = speculative_generate(model, draft, input_ids, settings,
                                      generator=torch.Generator(device=device).manual_seed(cfg.seed))

    # 3. Show the result on stdout.
    out = stdout_console()
    render_speculation(result, tokenizer, out)

    # 4. Write the report atomically.
    info = model_source(model).as_dict()
    with report_folder(args.out, SPECULATE, args.prompt) as rd:
        rd.write_report(cfg.report(result, prompt_ids=input_ids[0].tolist(), model_info=info,
                                                environment=environment(model),
                                                text=answer_text(tokenizer, result.tokens), cost=cost,
                                                token_texts=token_texts(tokenizer, result)))
        rd.write_csv("rounds.csv", round_rows(result, tokenizer))
        plot_histogram(result, rd.file("accepted_length.png"))
        rd.write_text("summary.md", summary_markdown(result, tokenizer, prompt=args.prompt, model_info=info,
                                                     seed=cfg.seed) + cfg.summary_notes(cost))
    print_report(out, rd.final)
    return 0
