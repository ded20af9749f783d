"""``lab bench-tune`` and ``lab bench-tune-runtime``: measure the candidates on this machine and write the fastest
to the lab's cache, where the other commands find it (:mod:`lab.tuning`).

- ``bench-tune``: the draft set-ups (draft dtype, gamma, the pmin stop, a dynamic gamma), greedy and
  sampling, on the tuning prompts; ``lab speculate`` runs the winner (:mod:`lab.bench.tune`).
- ``bench-tune-runtime``: a GGUF profile's target alone on torch (float32 and q4 weights) and on llama.cpp,
  alternating, end to end; ``lab entropy``, ``speculate`` and ``bench`` run the winner when ``--runtime``
  is not typed (:mod:`lab.bench.runtime_tune`).

Each writes ``<out>/<timestamp>-bench-tune[-runtime]-<model>/`` with ``report.json`` and ``summary.md``, then
the tuning file; one that cannot be written keeps the report.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.commands.common import (add_draft_weights_arg, add_model_args, add_out_arg, add_ranged_arg, add_threads_arg,
                                 check_model_args, command_parser, range_text, save_after_report)
from lab.commands.runtime_choice import load_on
from lab.kinds.bench import KIND as BENCH, RuntimeTuneReport, with_kind

TUNE, TUNE_RUNTIME = "bench-tune", "bench-tune-runtime"
# Each command's --help, in the form of a command module's docstring (common.command_parser): two commands here.
TUNE_DOC = """``lab bench-tune``: measure the draft set-ups here and write the fastest, which lab speculate then runs.

Measure the candidate draft set-ups (draft dtype, gamma, pmin stop, dynamic gamma), greedy and sampling, on tuning
prompts only (never the held-back split), and write the fastest for this machine to the lab's cache, where lab
speculate finds it.
"""
TUNE_RUNTIME_DOC = """``lab bench-tune-runtime``: time a GGUF profile on torch and on llama.cpp here and write the
fastest, which the commands then run.

Time a GGUF profile's target alone on torch (float32 and q4 weights) and on llama.cpp (the file's own, built by make
peer), alternating, end to end, greedy, on tuning prompts only, and write the fastest for this machine to the lab's
cache: lab entropy, speculate and bench then run it when --runtime is not typed.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = command_parser(subparsers, TUNE, run_tune, TUNE_DOC)
    from lab.bench.prompt_split import TUNE_MAX_NEW_TOKENS, TUNE_REPEATS
    from lab.bench.runtime_tune import RUNTIME_TUNE_MAX_NEW_TOKENS, RUNTIME_TUNE_REPEATS

    add_model_args(p)
    add_draft_weights_arg(p)
    p.add_argument("--draft", default=None, help="early-exit:N or a model name/path (default: the profile's draft)")
    p.add_argument("--gammas", default=None,
                   help=f"comma-separated draft lengths to sweep, each {range_text(TUNE, 'gamma')} (default: 3,4,5)")
    add_ranged_arg(p, TUNE, "--seed", 0, "the sampling mode's seed, ", " (default: 0)")
    _add_timing_args(p, TUNE, max_new=TUNE_MAX_NEW_TOKENS, repeats=f"{TUNE_REPEATS} per mode")

    p = command_parser(subparsers, TUNE_RUNTIME, run_tune_runtime, TUNE_RUNTIME_DOC)
    from lab.models.profiles import DEFAULT_PROFILE, PROFILES

    gguf = [name for name, profile in PROFILES.items() if profile.source != "hub"]
    p.add_argument("--model", default=DEFAULT_PROFILE, help=f"a GGUF profile ({', '.join(gguf)}) (default: {DEFAULT_PROFILE})")
    _add_timing_args(p, TUNE_RUNTIME, max_new=RUNTIME_TUNE_MAX_NEW_TOKENS, repeats=str(RUNTIME_TUNE_REPEATS))
    p.set_defaults(device="cpu", dtype=None)


def _add_timing_args(p: argparse.ArgumentParser, command: str, *, max_new: int, repeats: str) -> None:
    """``--max-new-tokens``, ``--repeats``, ``--humaneval`` (tuning split only), ``--threads`` and ``--out``."""
    from lab.bench.prompt_split import TUNE_HUMANEVAL

    add_ranged_arg(p, command, "--max-new-tokens", None, "new tokens per generation, ", f" (default: {max_new})")
    add_ranged_arg(p, command, "--repeats", None, "timed repeats of the whole schedule, ", f" (default: {repeats})")
    p.add_argument("--humaneval", default=None, metavar="tuning:N",
                   help="time on the first N HumanEval problems of the tuning split beside the code prompts (the "
                        "held-back problems certify a choice and are never tuned on; lab.bench.prompt_split) "
                        f"(default: {TUNE_HUMANEVAL})")
    add_threads_arg(p)
    add_out_arg(p)


def _tuning_prompts(args: argparse.Namespace):
    """The tuning prompts of ``--humaneval`` (:func:`lab.bench.tune.tune_prompts`, which refuses the held-back
    split in one line); an empty one is refused, not read as the default."""
    from lab.bench.prompt_split import TUNE_HUMANEVAL
    from lab.bench.tune import tune_prompts

    if args.humaneval is not None and not args.humaneval.strip():
        raise ValueError("--humaneval '' is empty: give tuning:N, or drop it for the default " + TUNE_HUMANEVAL)
    return tune_prompts(args.humaneval or TUNE_HUMANEVAL)


def run_tune(args: argparse.Namespace) -> int:
    """Measure the candidate set-ups greedy and sampling, write the winner for this machine
    (:func:`lab.bench.tune.tune`).

    Raises:
        ValueError: ``--humaneval`` outside the tuning split, or a draft without a model.
    """
    import torch

    from lab.bench.tune import (TUNE_GAMMAS, TUNE_MAX_NEW_TOKENS, TUNE_REPEATS, save_tuned, tune, tune_configs,
                                tune_report)
    from lab.commands.bench import model_draft_args, parse_gammas, run_draft_schedules, show_and_write
    from lab.models.source import model_source
    from lab.render.tune import tune_summary_markdown
    from lab.reports import environment_record

    # 1. Validate before loading.
    prompts = _tuning_prompts(args)
    gammas = parse_gammas(args.gammas) if args.gammas is not None else TUNE_GAMMAS
    device, threads, draft_spec, kind = model_draft_args(
        args, no_model="it chooses a draft model's set-up; --draft {} has none to tune")
    configs = tune_configs(model_draft=kind == "model", gammas=gammas,
                           max_new_tokens=TUNE_MAX_NEW_TOKENS if args.max_new_tokens is None else args.max_new_tokens,
                           repeats=TUNE_REPEATS if args.repeats is None else args.repeats, seed=args.seed)

    # 2. Load and run both modes (progress on stderr), then choose and write the winner.
    model, _, benches = run_draft_schedules(args, device, draft_spec, prompts.texts, configs, threads, "tuning",
                                            list(prompts.groups))
    outcome = tune(benches, model=args.model, threads=threads)

    # 3. The report (atomically), and show both.
    report = tune_report(model=model_source(model), draft=draft_spec, prompts=prompts,
                         torch_threads=torch.get_num_threads(), environment=environment_record(model), configs=configs,
                         outcome=outcome, benches=benches)
    out, folder = show_and_write(args.out, f"tune-{args.model}", with_kind(report), tune_summary_markdown(report))
    path = _save_tuning(outcome.path, folder, lambda: save_tuned(outcome, model=args.model, draft=draft_spec))
    out.print(f"tuned set-up: {outcome.setup.describe()} -> {path}", markup=False, highlight=False, soft_wrap=True)
    return 0


def run_tune_runtime(args: argparse.Namespace) -> int:
    """Time a GGUF profile's target alone on each runtime and weights, alternating, and write the fastest end to
    end for this machine (:mod:`lab.bench.runtime_tune`).

    Raises:
        ValueError: a model without a GGUF file, ``--humaneval`` outside the tuning split, or the llama.cpp
            runtime not built (naming ``make peer``).
    """
    from lab.bench.runtime_tune import RUNTIME_TUNE_MAX_NEW_TOKENS, RUNTIME_TUNE_REPEATS, run_runtime_tune
    from lab.machine import LoadLog, busy_warning
    from lab.render.console import print_report, stderr_console, stdout_console
    from lab.render.runtime_tune import runtime_tune_markdown
    from lab.reports import environment_record
    from lab.views.publish import report_folder
    from lab.tuning import RUNTIME, runtime_machine_key, write_tuned

    # 1. Validate before loading.
    prompts, threads = _check_tune_runtime(args)
    max_new = RUNTIME_TUNE_MAX_NEW_TOKENS if args.max_new_tokens is None else args.max_new_tokens
    repeats = RUNTIME_TUNE_REPEATS if args.repeats is None else args.repeats

    # 2. Load every candidate, warm each up, and time them alternating (progress on stderr).
    err = stderr_console()
    generators, sources, first = _warm_runtime_candidates(args, prompts.texts, max_new, threads, err)
    with err.status("timing") as status:
        result = run_runtime_tune(generators, len(prompts.texts), repeats=repeats, load_log=LoadLog(threads=threads),
                                  progress=status.update)

    # 3. The report (atomically), then the tuning file (one that cannot be written keeps the report), and show both.
    out = stdout_console()
    machine = runtime_machine_key(threads)
    report = RuntimeTuneReport(model=args.model, candidates=sources, torch_threads=threads, max_new_tokens=max_new,
                               repeats=repeats, prompts=list(prompts.texts), prompt_groups=list(prompts.groups),
                               humaneval=prompts.humaneval, environment=environment_record(first), result=result.as_dict(),
                               machine=machine, tuning_file=str(RUNTIME.path(args.model)))
    summary = runtime_tune_markdown(report, result)
    with report_folder(args.out, BENCH, f"tune-runtime-{args.model}") as rd:
        rd.write_report(with_kind(report))
        rd.write_text("summary.md", summary)
    out.print(summary, markup=False, highlight=False, soft_wrap=True)
    warning = busy_warning(result.load)
    if warning:
        err.print(warning, style="yellow", markup=False, highlight=False, soft_wrap=True)
    print_report(out, rd.final)
    choice = {"runtime": result.winner_runtime, "weights": result.winner_weights, "report": str(rd.final)}
    measured = {**result.measured(), "busy": result.load.busy}
    path = _save_tuning(RUNTIME.path(args.model), rd.final,
                        lambda: write_tuned(RUNTIME, args.model, choice, machine, measured))
    out.print(f"tuned runtime: {result.winner} -> {path}", markup=False, highlight=False, soft_wrap=True)
    return 0


def _save_tuning(path: Path, report: Path, write):
    """``write()``, a tuning file's writer, once the report is complete (:func:`save_after_report`)."""
    from lab.user_dirs import TUNING_ENV

    return save_after_report(report, f"the tuning file {str(path)!r} could not be written", write,
                             f"remove what is in its place or set {TUNING_ENV} to a writable folder, and re-run")


def _check_tune_runtime(args: argparse.Namespace):
    """``lab bench-tune-runtime``'s flags checked before any model loads: ``(tuning prompts, threads)``."""
    from lab.machine import set_threads
    from lab.models.loading import is_gguf_model
    from lab.runtime.ggml import binding

    if not is_gguf_model(args.model):
        raise ValueError(f"it compares runtimes on a GGUF profile's file; --model {args.model!r} has none")
    check_model_args(args)
    prompts = _tuning_prompts(args)
    binding()  # RuntimeUnavailableError (a ValueError): one line naming `make peer`
    return prompts, set_threads(args.threads)


def _warm_runtime_candidates(args: argparse.Namespace, texts, max_new: int, threads: int, err):
    """Each runtime candidate loaded, its timed target built on ``texts`` and warmed up once:
    ``(timing function per candidate, model source per label, the first model)``."""
    from lab.bench.run import encode_prompts
    from lab.bench.runtime_tune import CANDIDATES, timed_target
    from lab.models.chat import eos_token_ids
    from lab.models.source import model_source

    generators, sources, first = {}, {}, None
    for cand in CANDIDATES:
        with err.status(f"loading {args.model}: {cand.label}"):
            model, tokenizer = load_on(args.model, cand.runtime, cand.weights, threads=threads)
        first = first or model
        ids = encode_prompts(model, tokenizer, texts, max_new, "cpu")
        fn = timed_target(model, ids, max_new, sorted(eos_token_ids(model, tokenizer)))
        with err.status(f"warming up {cand.label}"):
            fn(0)
        generators[cand] = fn
        sources[cand.label] = model_source(model).as_dict()
    return generators, sources, first
