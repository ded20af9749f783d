"""``lab speculate PROMPT``: speculative decoding with a replay of who produced each token.

Every argument is validated before the model loads (a bad one exits 2 and writes no
report). The report directory ``<out>/<timestamp>-speculate-<slug>/`` holds
``report.json``, ``rounds.csv``, ``summary.md`` and ``accepted_length.png`` and
appears only when all four are written.
"""

from __future__ import annotations

import argparse
import random

from lab.commands.common import add_draft_weights_arg, MAX_GAMMA, add_model_args, add_out_arg, add_prompt_args, check_model_args, parse_adaptive


def register(subparsers: argparse._SubParsersAction) -> None:
    from lab.speculative.draft_dtypes import DRAFT_DTYPE_CHOICES, PER_PASS_ALIAS, PER_PASS_SPEC

    p = subparsers.add_parser(
        "speculate", help="speculative decoding: replay accepted drafts, corrections and bonus tokens",
        description="Generate with speculative decoding (a draft proposes gamma tokens, the target verifies them in "
                    "one pass); show each token's origin, a per-round table and the acceptance figures; write a report.",
    )
    add_prompt_args(p)
    add_model_args(p)
    add_draft_weights_arg(p)
    p.add_argument("--draft", default=None,
                   help="early-exit:N (the target's first N layers), prompt-lookup, or a model name/path "
                        "(default: the profile's draft, early-exit:24 for smollm2)")
    p.add_argument("--gamma", type=int, default=None,
                   help=f"draft tokens per round, 1..{MAX_GAMMA} (default: the tuned or documented set-up, else 4)")
    p.add_argument("--draft-dtype", default=None, choices=DRAFT_DTYPE_CHOICES,
                   help=f"a draft model's dtype ({PER_PASS_ALIAS} = {PER_PASS_SPEC}: the prompt's pass in float32, "
                        "one-token steps in bfloat16; lab.speculative.per_pass) (default: the tuned or documented "
                        "set-up, else the target's dtype)")
    p.add_argument("--adaptive", default=None,
                   help="stop drafting early: entropy:X (draft normalized entropy above X) or pmin:X (draft top "
                        "probability below X) (default: the tuned or documented set-up, else off)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="stop after this many new tokens (default: 64)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default); > 0 samples")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus mass in (0, 1] when sampling (default: 1 = off)")
    p.add_argument("--top-k", type=int, default=None, help="keep the k most likely tokens when sampling (default: off)")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: a fresh one, recorded in the report)")
    add_out_arg(p)
    p.set_defaults(func=run)


def resolve_draft_spec(args: argparse.Namespace) -> str:
    """``--draft`` as typed, else the ``--model`` profile's draft (``lab speculate`` and ``lab bench``).

    Raises:
        ValueError: no ``--draft`` and a model without a profile draft.
    """
    from lab.models.profiles import PROFILES

    if args.draft:
        return args.draft
    profile = PROFILES.get(args.model)
    if profile is None or profile.draft is None:
        raise ValueError(f"--model {args.model!r} has no default draft; pass --draft")
    return profile.draft


def choose_setup(args: argparse.Namespace, draft_spec: str, threads: int):
    """The draft set-up ``lab speculate`` runs and where each part came from
    (:func:`lab.speculative.setups.resolve_setup`): the flags typed, else the set-up
    ``lab bench --tune`` measured best for this model, draft and machine (:mod:`lab.tuning`;
    a foreign, stale or corrupt file is ignored with a note), else the documented set-up
    for the profile's own draft, else the fallback.

    Args:
        args: The parsed flags (``--model``, ``--draft-dtype``, ``--gamma``, ``--adaptive``).
        draft_spec: The draft in force.
        threads: torch's thread count for this run (part of the tuning file's machine key).

    Returns:
        A :class:`lab.speculative.setups.ResolvedSetup`.

    Raises:
        ValueError: ``--draft-dtype`` for a draft without weights of its own.
    """
    from lab.models.profiles import PROFILES
    from lab.speculative.draft_specs import check_draft_spec
    from lab.speculative.setups import default_setup, resolve_setup
    from lab.tuning import machine_key, read_tuned

    has_weights = check_draft_spec(draft_spec) == "model"
    profile = PROFILES.get(args.model)
    own_draft = profile is not None and profile.draft == draft_spec
    tuned = read_tuned(args.model, draft_spec, machine_key(threads))
    if tuned.setup is not None:
        base, source = tuned.setup, f"tuned: {tuned.path}"
    else:
        base, source = default_setup(args.model if own_draft else None, has_weights)
    flags = {"draft_dtype": args.draft_dtype, "gamma": args.gamma, "adaptive": args.adaptive, "dynamic": None}
    return resolve_setup(flags, base=base, base_source=source, has_weights=has_weights,
                         notes=(tuned.note,) if tuned.note else ())


def run(args: argparse.Namespace) -> int:
    import torch

    from lab.decode import check_context
    from lab.models.loading import ModelUnavailableError, as_draft_error, load_model
    from lab.models.chat import build_messages, encode_chat, eos_token_ids
    from lab.render.console import stderr_console, stdout_console
    from lab.render.speculative import (acceptance_summary, answer_text, plot_histogram, render_speculation,
                                        round_rows, summary_markdown)
    from lab.reports import environment, report_dir
    from lab.sampling import SamplingConfig
    from lab.speculative.draft_specs import check_draft, make_draft  # at call time: tests stand in for make_draft
    from lab.speculative.loop import speculative_generate
    from lab.speculative.policies import DynamicGamma

    # 1. Validate everything before loading anything.
    if args.gamma is not None and args.gamma < 1:
        raise ValueError(f"--gamma={args.gamma} must be >= 1")
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens={args.max_new_tokens} must be >= 1")
    sampling = SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    if args.adaptive:
        parse_adaptive(args.adaptive)  # errors name --adaptive as typed
    messages = build_messages(args.prompt, args.system)
    device = check_model_args(args)
    draft_spec = resolve_draft_spec(args)
    chosen = choose_setup(args, draft_spec, torch.get_num_threads())
    setup = chosen.setup
    adaptive = parse_adaptive(setup.adaptive) if setup.adaptive else None
    policy = DynamicGamma.parse(setup.dynamic) if setup.dynamic else None
    gamma = policy.max_gamma if policy is not None else setup.gamma
    check_draft(draft_spec, args.draft_weights)  # syntax, weights and model, before the target loads
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)

    # 2. Load, build the draft, decode (progress on stderr).
    err = stderr_console()
    with err.status(f"loading {args.model} on {device}"):
        model, tokenizer = load_model(args.model, device=device, dtype=args.dtype, weights=args.weights)
        try:
            draft = make_draft(model, draft_spec, target_tokenizer=tokenizer, weights=args.draft_weights,
                               dtype=setup.draft_dtype)
        except ModelUnavailableError as exc:  # the draft model, not --model, is what failed to load
            raise as_draft_error(exc, draft_spec) from None
    # the set-up in force, once the draft is admitted (a refused draft stays a one-line error)
    for note in chosen.notes:
        err.print(f"note: {note}", style="yellow", markup=False, highlight=False, soft_wrap=True)
    err.print(chosen.summary_line(), markup=False, highlight=False, soft_wrap=True)
    cost = draft.cost
    if cost is not None and cost.note:
        err.print(f"warning: --draft {draft_spec}: {cost.note}", style="yellow", markup=False, highlight=False)
    input_ids = encode_chat(tokenizer, messages).to(device)
    check_context(model, input_ids.shape[1], args.max_new_tokens, arg="--max-new-tokens")  # before any decoding
    generator = torch.Generator(device=device).manual_seed(seed)
    with err.status(f"speculating up to {args.max_new_tokens} tokens ({setup.describe()}, draft {draft_spec})"):
        result = speculative_generate(model, draft, input_ids, gamma=gamma, max_new_tokens=args.max_new_tokens,
                                      sampling=sampling, generator=generator, adaptive=adaptive, gamma_policy=policy,
                                      eos_token_ids=eos_token_ids(model, tokenizer))

    # 3. Show the result on stdout.
    out = stdout_console()
    render_speculation(result, tokenizer, out)

    # 4. Write the report atomically.
    info = dict(model.lab_source)
    with report_dir(args.out, "speculate", args.prompt) as rd:
        rd.write_json("report.json", {
            "kind": "speculate",
            "prompt": args.prompt, "system": args.system, "messages": messages,
            "prompt_ids": input_ids[0].tolist(),
            "settings": {"draft": draft_spec, "gamma": gamma, "adaptive": setup.adaptive,
                         "draft_dtype": setup.draft_dtype, "dynamic": setup.dynamic, "draft_setup": chosen.as_dict(),
                         "max_new_tokens": args.max_new_tokens, "sampling": sampling, "seed": seed},
            "model": info, "environment": environment(model),
            "acceptance": acceptance_summary(result), "draft_cost": cost,
            "text": answer_text(tokenizer, result.tokens), "new_token_ids": result.tokens,
            "rounds": result.rounds, "per_token": result.per_token(),
        })
        rd.write_csv("rounds.csv", round_rows(result, tokenizer))
        plot_histogram(result, rd.file("accepted_length.png"))
        summary = summary_markdown(result, tokenizer, prompt=args.prompt, model_info=info, seed=seed)
        summary += f"\n**Draft set-up.** {chosen.summary_line().removeprefix('draft set-up: ')}.\n"
        summary += "".join(f"\n{note}\n" for note in chosen.notes)
        if cost is not None and cost.note:
            summary += f"\n**Draft cost.** {cost.note}.\n"
        rd.write_text("summary.md", summary)
    out.print(f"report: {rd.final}", markup=False, highlight=False, soft_wrap=True)
    return 0
