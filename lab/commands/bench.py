"""``lab bench``: benchmark speculative decoding against target-only and transformers' assisted generation.

Alternate target-only decoding, speculative decoding over a gamma sweep and adaptive draft lengths, and
transformers' assisted generation; report tokens/s, speedups, alpha, tau, the theoretical speedups, overhead and
breakeven alpha.

Runs target-only decoding (the lab's loop and transformers ``generate``),
speculative decoding over a gamma sweep and adaptive lengths, and transformers'
assisted generation with the same draft, alternating in one process; see
:mod:`lab.bench.run`. Writes ``<out>/<timestamp>-bench-<draft>/`` with
``report.json``, ``summary.md`` and ``bench.png``. The bench's other schedules are commands of
their own: ``lab bench-seed-tables`` (:mod:`lab.commands.bench_seed_tables`), ``lab bench-tune`` and
``lab bench-tune-runtime`` (:mod:`lab.commands.bench_tune`).
"""

from __future__ import annotations

import argparse
import dataclasses

from lab.kinds.bench import KIND as BENCH
from lab.bench.peer.cli import add_peer_args, check_peer_args, peer_for
from lab.commands.common import (add_draft_weights_arg, add_model_args, add_out_arg, add_ranged_arg, add_sampling_args,
                                 add_threads_arg, check_adaptive_draft, check_model_args, command_parser, draft_cost,
                                 flag_range, parse_adaptive, parse_lengths, range_text)
from lab.commands.runtime_choice import (RuntimeChoice, RuntimeSource, add_runtime_arg, load_on, load_target_and_draft,
                                         print_runtime_line, resolve_runtime, runtime_for_draft, torch_unless_typed)
from lab.models.source import model_source
from lab.safe_text import clipped
from lab.speculative.setups import parse_dynamic


DEFAULT_GAMMAS = "1,2,4,6"
LEVER_DTYPE = "bfloat16"  # the cheaper draft --levers adds: half the bytes a memory-bound draft step reads


def register(subparsers: argparse._SubParsersAction) -> None:
    p = command_parser(subparsers, "bench", run, __doc__)
    add_model_args(p)
    add_draft_weights_arg(p)
    _add_method_args(p)
    _add_sampling_args(p)
    _add_schedule_args(p)
    add_peer_args(p)
    add_runtime_arg(p)
    add_out_arg(p)


def _add_method_args(p: argparse.ArgumentParser) -> None:
    """What the schedule times: the draft, its sweep, the prompts and lengths, the levers."""
    from lab.speculative.draft_dtypes import DRAFT_DTYPE_HELP

    p.add_argument("--draft", default=None, help="early-exit:N, prompt-lookup or a model name/path "
                                                 "(default: the profile's draft)")
    p.add_argument("--gammas", default=None,
                   help=f"comma-separated draft lengths to sweep, each {range_text('bench', 'gamma')} (default: "
                        f"{DEFAULT_GAMMAS})")
    p.add_argument("--adaptive", action="append", default=None,
                   help="adaptive spec entropy:X or pmin:X, run at the largest gamma; repeatable "
                        "(default: entropy:0.3; 'none' to skip)")
    add_ranged_arg(p, "bench", "--max-new-tokens", 64, "new tokens per generation, ", " (default: 64)")
    add_ranged_arg(p, "bench", "--repeats", 3, "timed repeats of the whole schedule, ", " (default: 3)")
    p.add_argument("--prompts", nargs="+", default=None,
                   help="prompts to generate from, or @FILE with one prompt per line, or 'none' (only the "
                        "--humaneval and --grounded prompts) (default: three built-in)")
    p.add_argument("--no-assisted", action="store_true",
                   help="skip transformers' assisted generation")
    add_threads_arg(p)
    p.add_argument("--dynamic", action="append", default=None,
                   help="dynamic draft length dynamic:START:MAX (grow by 2 on full acceptance, shrink by 1 on a "
                        "rejection); repeatable (default: off; --levers adds dynamic:4:12)")
    p.add_argument("--draft-dtype", action="append", default=None,
                   help=f"also run the model draft cast to {DRAFT_DTYPE_HELP}; each also runs with every "
                        f"--adaptive stop and --dynamic policy; repeatable (default: off; --levers adds {LEVER_DTYPE})")
    p.add_argument("--humaneval", default=None, metavar="SPLIT[:N]",
                   help="add the first N HumanEval problems of a fixed split (tuning or held-back; "
                        "lab.bench.prompt_split) beside the short prompts, reported as their own group; "
                        "'none' to skip (default: tuning:2 with --levers and no --prompts, else none)")
    p.add_argument("--grounded", default=None, metavar="SPLIT[:N]",
                   help="add the first N input-grounded tasks of a fixed split (tuning or held-back: renames and "
                        "quoted docstrings of real functions, whose answers copy the prompt; lab.bench.prompt_split) "
                        "beside the other prompts, reported as their own group (default: none)")
    p.add_argument("--methods", default=None,
                   help="comma-separated substrings: run only the methods whose name contains one (the lab's "
                        "target-only loop, the baseline, always runs), e.g. 'generate,assisted gamma=5,"
                        "adaptive=pmin:0.6 draft=bfloat16' (default: all)")
    p.add_argument("--prompt-lookup", action="store_true", help="also run prompt lookup (no draft model)")


def _add_sampling_args(p: argparse.ArgumentParser) -> None:
    """How every method draws: temperature, the filters and the seed."""
    add_sampling_args(p, "bench", more=": every method (the lab's loops, transformers generate and assisted "
                                       "generation) draws through the same temperature / top-k / top-p filter")
    add_ranged_arg(p, "bench", "--seed", 0, "sampling seed, ",
                   "; each repeat and prompt gets one derived from it, the same for every method, recorded per run "
                   "(default: 0)")


def _add_schedule_args(p: argparse.ArgumentParser) -> None:
    """The sides and the levers; the flags of the schedules that became commands of their own, each answering
    with its command in one line."""
    p.add_argument("--also-runtime", action="append", default=None, metavar="RUNTIME",
                   help="also time the same methods on another runtime or weights in the same alternating schedule, "
                        "summarized apart against its own target alone: torch:float32, torch:bfloat16, torch:int8, "
                        "torch:q4 (target and a GGUF draft model in those weights) or llama.cpp (a GGUF profile's own "
                        "files); repeatable; no assisted generation or draft casts on a side")
    p.add_argument("--levers", action="store_true",
                   help=f"all speed levers: --dynamic dynamic:4:12 --draft-dtype {LEVER_DTYPE} --prompt-lookup, and code "
                        "prompts (one a code-editing prompt) and two HumanEval tuning problems unless --prompts "
                        "is given")
    for flag in MOVED:  # nargs="?": --tune=3 is answered the same way
        p.add_argument(flag, nargs="?", action=_Moved, default=None, help=argparse.SUPPRESS)


# lab bench's former schedule flags -> the commands that run them now.
MOVED = {"--seed-tables": "bench-seed-tables", "--tune": "bench-tune", "--tune-runtime": "bench-tune-runtime"}


class _Moved(argparse.Action):
    """A flag whose schedule is a command of its own now: refused in one line naming that command."""

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: D102 - argparse's
        command = MOVED[option_string]
        parser.error(f"{option_string} is a command of its own now: lab {command} (see lab {command} --help)")


def parse_gammas(text: str) -> tuple[int, ...]:
    """``--gammas`` as distinct draft lengths, each in gamma's range.

    Raises:
        ValueError: a bad item (:func:`lab.commands.common.parse_lengths`) or a length given twice.
    """
    gammas = parse_lengths(text, "--gammas", flag_range("bench", "gamma"))
    twice = sorted({g for g in gammas if gammas.count(g) > 1})
    if twice:
        raise ValueError(f"--gammas={clipped(text)} names gamma {twice[0]} twice: each length is one method of the sweep")
    return gammas


def _check_dynamic(specs: tuple[str, ...]) -> None:
    """Each ``--dynamic`` policy parsed, its MAX within gamma's range (:func:`lab.speculative.setups.parse_dynamic`)."""
    for spec in specs:
        try:
            parse_dynamic(spec)
        except ValueError as exc:
            raise ValueError(f"--dynamic {clipped(spec)}: {exc}") from None


def _typed_adaptive(args: argparse.Namespace) -> tuple[str, ...]:
    """The ``--adaptive`` stops typed, ``none`` left out."""
    return tuple(a for a in args.adaptive or [] if a != "none")


def _prompts(values: list[str] | None, code: bool = False) -> list[str]:
    from lab.bench.run import DEFAULT_PROMPTS
    from lab.bench.levers import CODE_PROMPTS
    from lab.files import MAX_PROMPT_SET_BYTES, read_text
    from lab.prompts import jsonl_lines

    if not values:
        return list(CODE_PROMPTS if code else DEFAULT_PROMPTS)
    out: list[str] = []
    for v in values:
        if v.startswith("@"):
            text = read_text(v[1:], MAX_PROMPT_SET_BYTES, f"--prompts {v!r}")
            out += [line.strip() for line in jsonl_lines(text) if line.strip()]
        elif v.strip():
            out.append(v)
    if not out:
        raise ValueError(f"--prompts={values!r} holds no prompt")
    return out


def _bench_config(args: argparse.Namespace):
    """``lab bench``'s flags as ``(BenchConfig, PromptSet)``, each checked before any model loads.

    Raises:
        ValueError: a bad flag, named as typed.
    """
    from lab.bench.prompt_split import PromptSet
    from lab.bench.run import BenchConfig
    from lab.sampling import SamplingConfig
    from lab.speculative.per_pass import parse_draft_dtype

    adaptive = _typed_adaptive(args) if args.adaptive else BenchConfig.adaptive  # 'none' alone: no stop
    for spec in adaptive:
        parse_adaptive(spec)  # errors name --adaptive as typed
    dynamic = tuple(args.dynamic or (["dynamic:4:12"] if args.levers else []))
    _check_dynamic(dynamic)
    dtypes = tuple(args.draft_dtype or ([LEVER_DTYPE] if args.levers else []))
    for dtype in dtypes:
        parse_draft_dtype(dtype)  # errors name --draft-dtype as typed
    wanted = tuple(w.strip() for w in args.methods.split(",")) if args.methods is not None else ()
    sampling = SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)  # lab.cli.as_typed
    config = BenchConfig(gammas=parse_gammas(args.gammas or DEFAULT_GAMMAS), adaptive=adaptive,
                         max_new_tokens=args.max_new_tokens, repeats=args.repeats, assisted=not args.no_assisted,
                         dynamic=dynamic, draft_dtypes=dtypes, prompt_lookup=args.prompt_lookup or args.levers,
                         methods=wanted, sampling=sampling, seed=args.seed)
    short = [] if args.prompts == ["none"] else _prompts(args.prompts, code=args.levers)
    return config, PromptSet.of(short, args.humaneval or ("tuning:2" if args.levers and not args.prompts else "none"),
                                args.grounded or "none")


def run(args: argparse.Namespace) -> int:
    import torch

    from lab.bench.results import BenchReport
    from lab.bench.run import encode_prompts, run_bench
    from lab.machine import LoadLog
    from lab.models.chat import eos_token_ids
    from lab.render.bench import bench_report_markdown, peer_markdown, plot_bench, render_bench
    from lab.render.console import print_report, stderr_console, stdout_console
    from lab.reports import environment
    from lab.views.publish import report_folder

    # 1. Validate before loading.
    config, prompts = _bench_config(args)
    device, threads, draft_spec, _ = model_draft_args(args, config)
    runtime, config = _bench_runtime(args, config, draft_spec)
    side_specs = check_sides(args, runtime, draft_spec, config.methods)
    peer_setup = check_peer_args(args, draft_spec)  # binaries and GGUF files, before any model loads

    # 2. Load and run, the peer's methods in the same schedule (progress on stderr).
    err = stderr_console()
    print_runtime_line(err, runtime)
    model, tokenizer, draft = load_target_and_draft(args, device, draft_spec, err, runtime)
    sides = [_load_side(args, label, side_runtime, weights, draft_spec, err, threads)
             for label, side_runtime, weights in side_specs]
    cost = draft_cost(err, draft, draft_spec)
    ids = encode_prompts(model, tokenizer, prompts.texts, config.max_new_tokens, device)  # before any decoding
    with peer_for(peer_setup, tokenizer, prompts.texts, ids, threads=threads, gammas=config.gammas,
                  max_new_tokens=config.max_new_tokens) as peer, err.status("benchmarking") as status:
        bench = run_bench(model, draft, ids, config, eos_token_ids=sorted(eos_token_ids(model, tokenizer)),
                          progress=status.update, load_log=LoadLog(threads=threads),
                          prompt_groups=list(prompts.groups), peer=peer, sides=sides)

    # 3. Show, then 4. write the report atomically.
    out = stdout_console()
    render_bench(bench, out)
    if bench.peer is not None:
        out.print(peer_markdown(bench.peer), markup=False, highlight=False, soft_wrap=True)
    report = BenchReport(model=model_source(model).as_dict(), draft_spec=draft_spec, prompts=prompts,
                         torch_threads=torch.get_num_threads(), environment=environment(model), draft_cost=cost,
                         bench=bench, side_models={side.label: model_source(side.target).as_dict() for side in sides})
    with report_folder(args.out, BENCH, draft_spec) as rd:
        rd.write_report(report.to_json())
        plot_bench(bench, rd.file("bench.png"))
        rd.write_text("summary.md", bench_report_markdown(report))
    print_report(out, rd.final)
    return 0


def model_draft_args(args: argparse.Namespace, config=None, no_model: str | None = None):
    """``(device, threads, draft spec, kind)``, the draft checked before any model loads.

    ``config``: the bench's, whose ``--draft-dtype`` needs a model draft and whose typed ``--adaptive`` a draft
    that reads its stop (:func:`check_adaptive_draft`); ``no_model`` (with ``{}`` for the spec): the error for
    a prompt-lookup draft in a mode that needs a draft of its own.
    """
    from lab.machine import set_threads
    from lab.speculative.draft_specs import check_draft, check_draft_spec, resolve_draft_spec

    device = check_model_args(args)
    threads = set_threads(args.threads)
    draft_spec = resolve_draft_spec(args.draft, args.model)
    if config is not None and config.draft_dtypes and draft_spec == "prompt-lookup":
        raise ValueError(f"--draft-dtype {config.draft_dtypes[0]} needs a model draft, not --draft {draft_spec}")
    typed_adaptive = _typed_adaptive(args) if config is not None else ()
    if typed_adaptive:
        check_adaptive_draft(typed_adaptive[0], check_draft_spec(draft_spec))
    if no_model is not None and check_draft_spec(draft_spec) == "prompt-lookup":
        raise ValueError(no_model.format(draft_spec))
    kind = check_draft(draft_spec, args.draft_weights)  # syntax, weights and model, before the target loads
    return device, threads, draft_spec, kind


def run_draft_schedules(args: argparse.Namespace, device, draft_spec: str, texts, configs: dict, threads: int,
                        label: str, groups: list[str] | None = None):
    """The target and draft loaded (:func:`load_target_and_draft`), ``texts`` encoded for the longest of ``configs``
    and every schedule run on them (:func:`lab.bench.run.run_schedules`, progress on stderr):
    ``(model, ids, {name: result})``; for lab bench-seed-tables and bench-tune."""
    from lab.bench.run import encode_prompts, run_schedules
    from lab.models.chat import eos_token_ids
    from lab.render.console import stderr_console

    err = stderr_console()
    model, tokenizer, draft = load_target_and_draft(args, device, draft_spec, err)
    ids = encode_prompts(model, tokenizer, texts, max(c.max_new_tokens for c in configs.values()), device)
    return model, ids, run_schedules(model, draft, ids, configs, eos=sorted(eos_token_ids(model, tokenizer)),
                                     threads=threads, status=err.status, label=label, groups=groups)


def show_and_write(root: str, slug: str, data, summary: str):
    """``summary`` on stdout, then a bench report ``<root>/<timestamp>-bench-<slug>/`` of ``report.json`` and
    ``summary.md``, written atomically: ``(stdout console, the report's folder)``."""
    from lab.render.console import print_report, stdout_console
    from lab.views.publish import report_folder

    out = stdout_console()
    out.print(summary, markup=False, highlight=False, soft_wrap=True)
    with report_folder(root, BENCH, slug) as rd:
        rd.write_report(data)
        rd.write_text("summary.md", summary)
    print_report(out, rd.final)
    return out, rd.final


SIDE_RUNTIMES = ("torch:float32", "torch:bfloat16", "torch:int8", "torch:q4", "llama.cpp")
# What parts of a --methods name say it asks for a method that runs on the main torch target only: transformers'
# assisted generation and the draft casts (a side times the lab's loops; transformers runs neither a GGUF file nor
# a cast draft on llama.cpp's kernels), and on llama.cpp transformers' generate too.
TORCH_MAIN_ONLY = {"assisted": "transformers' assisted generation", "draft=": "a cast draft"}
TORCH_ONLY = {**TORCH_MAIN_ONLY, "generate": "transformers' generate"}


def _torch_only_methods(wanted: tuple[str, ...], only: dict[str, str]) -> tuple[str, str] | None:
    """``(name, what)`` for the first ``--methods`` name that asks for one of ``only``'s methods, else None."""
    return next(((w, what) for w in wanted for part, what in only.items() if part in w), None)


def _bench_runtime(args: argparse.Namespace, config, draft_spec: str):
    """``(runtime, config)`` of the bench's main target, before any model loads: the draft and the ``--methods`` typed
    checked against a llama.cpp runtime (typed: refused, naming them; tuned: torch instead, saying why), and the
    config stripped of what llama.cpp does not run (assisted generation, draft casts)."""
    from lab.speculative.draft_specs import check_draft_spec

    runtime = runtime_for_draft(resolve_runtime(args), draft_spec, check_draft_spec(draft_spec))
    if runtime.runtime != "llama.cpp":
        return runtime, config
    asked = _torch_only_methods(config.methods, TORCH_ONLY)
    if asked is not None:
        runtime = torch_unless_typed(runtime, f"--methods {asked[0]} asks for {asked[1]}, which runs on torch only",
                                     f"--methods {asked[0]!r} asks for {asked[1]}, which runs on torch only; on "
                                     "--runtime llama.cpp drop it (or use --runtime torch)")
    elif "llama.cpp" in (args.also_runtime or []) and runtime.source is not RuntimeSource.TYPED:
        runtime = torch_unless_typed(runtime, "--also-runtime llama.cpp times llama.cpp beside it", "")
    if runtime.runtime == "llama.cpp":  # transformers runs neither the GGUF file nor a cast draft on llama.cpp's kernels
        config = dataclasses.replace(config, assisted=False, draft_dtypes=())
    return runtime, config


def check_sides(args: argparse.Namespace, runtime: RuntimeChoice, draft_spec: str,
                methods: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """``--also-runtime`` checked before any model loads: ``[(label, runtime, weights)]``.

    ``methods``: the ``--methods`` names, each of which must be one a side can run (a side times the lab's loops:
    no assisted generation, no draft casts, and on llama.cpp no transformers generate).

    Raises:
        ValueError: an unknown spec, one equal to the main set-up or given twice, a side off the CPU, llama.cpp
            for a model without a GGUF file, with an early-exit draft or before ``make peer``, q4 weights a
            model or draft without a GGUF file cannot take, or a ``--methods`` name no side runs.
    """
    from lab.models.loading import is_gguf_model
    from lab.speculative.draft_specs import check_draft, check_draft_spec

    specs = args.also_runtime or []
    main = "llama.cpp" if runtime.runtime == "llama.cpp" else f"torch:{runtime.weights}"
    out: list[tuple[str, str, str]] = []
    if specs and str(check_model_args(args)) != "cpu":
        raise ValueError("--also-runtime: the sides run on the CPU; --device is not the CPU")
    for i, spec in enumerate(specs):
        if spec not in SIDE_RUNTIMES:
            raise ValueError(f"--also-runtime {spec!r} is not one of {', '.join(SIDE_RUNTIMES)}")
        asked = _torch_only_methods(methods, TORCH_ONLY if spec == "llama.cpp" else TORCH_MAIN_ONLY)
        if asked is not None:
            raise ValueError(f"--also-runtime {spec}: --methods {asked[0]!r} asks for {asked[1]}, which a side does "
                             "not run (it times the lab's loops); drop one of them")
        if spec == main or spec in specs[:i]:
            raise ValueError(f"--also-runtime {spec} is already in the schedule "
                             f"({'the main set-up' if spec == main else 'given twice'})")
        kind = check_draft_spec(draft_spec)
        if spec == "llama.cpp":
            if not is_gguf_model(args.model):
                raise ValueError(f"--also-runtime llama.cpp runs a GGUF profile's own file; {args.model!r} has none")
            if kind == "early-exit":
                raise ValueError(f"--also-runtime llama.cpp: --draft {draft_spec} runs the target's torch layers; use "
                                 "a GGUF draft model or prompt-lookup")
            from lab.runtime.ggml import binding

            binding()  # RuntimeUnavailableError (a ValueError): one line naming `make peer`
            out.append((spec, "llama.cpp", "gguf"))
            continue
        weights = spec.split(":", 1)[1]
        if weights == "q4" and not is_gguf_model(args.model):
            raise ValueError(f"--also-runtime torch:q4 keeps a GGUF file's own codes; {args.model!r} has none")
        if kind == "model":
            check_draft(draft_spec, weights)
        out.append((spec.replace(":", " "), "torch", weights))
    return out


def _load_side(args: argparse.Namespace, label: str, runtime: str, weights: str, draft_spec: str, err, threads: int):
    """A :class:`lab.bench.run.BenchSide`: the target in ``weights`` on ``runtime`` and the same draft spec (a draft
    model in the same weights)."""
    from lab.bench.run import BenchSide
    from lab.models.loading import ModelUnavailableError, as_draft_error
    from lab.speculative.draft_specs import check_draft_spec, make_draft

    with err.status(f"loading {args.model} on {label}"):
        model, tokenizer = load_on(args.model, runtime, weights, threads=threads)
        try:
            draft = make_draft(model, draft_spec, target_tokenizer=tokenizer,
                               weights=weights if runtime == "torch" and check_draft_spec(draft_spec) == "model"
                               else "float32")
        except ModelUnavailableError as exc:
            raise as_draft_error(exc, draft_spec) from None
    return BenchSide(label, model, draft)
