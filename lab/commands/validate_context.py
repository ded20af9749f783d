"""``lab validate-context``: does the context measure read the context? Paired validation on documentation.

Scores each pair of a paired set (:mod:`lab.health.context_items`: one question per documented
function, asked after its own docstring and after another function's docstring of the same
length) with the reliance measures of :mod:`lab.health.reliance` and today's context health,
then judges the chosen measure (:data:`lab.health.context_validity.CHOSEN_RULE`) against the bar
(:data:`lab.health.context_validity.BAR`), the raw candidates, today's health and a length-only
control beside it. ``--set selection`` fits the chosen measure's heads and length line on the
lab's own pairs (``--save`` keeps them for the model); the validation and held-back sets are
judged with the fitted measure. Writes ``<out>/<timestamp>-validate-context-<model>/``.
"""

from __future__ import annotations

import argparse
from importlib import resources

from lab.commands.common import add_model_args, add_out_arg, check_model_args, range_text

SETS = {"selection": "context_selection.jsonl", "validation": "context_validation.jsonl",
        "heldback": "context_heldback.jsonl"}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "validate-context", help="check on labelled documentation that the context measure reads the context",
        description="Score paired prompts (a question after the function's own docstring, and after another "
                    "docstring of the same length) with the context-reliance measures and today's context health; "
                    "judge the chosen measure against the bar (paired AUROC >= 0.75, length-only and placebo near "
                    "0.5, |rho(length)| <= 0.2); write a report directory.")
    p.add_argument("--set", default="validation", choices=tuple(SETS), dest="pair_set",
                   help="the packaged paired set: selection (the lab's own, CPython docstrings: fits the measure), "
                        "validation (160 pairs of five third-party packages) or heldback (80 pairs of seven "
                        "others) (default: validation)")
    p.add_argument("--pairs", default=None, metavar="FILE",
                   help="your own paired JSONL instead of --set, one {\"id\", \"package\", \"object\", \"question\", "
                        "\"relevant\", \"irrelevant\"} per line (judged as --set validation)")
    p.add_argument("--new-tokens", type=int, default=24,
                   help=f"tokens of each prompt's greedy continuation, teacher-forced for the measures, "
                        f"{range_text('validate-context', 'new_tokens')} (default: 24)")
    p.add_argument("--limit", type=int, default=None,
                   help=f"score only the first N pairs, {range_text('validate-context', 'limit')} (default: all)")
    p.add_argument("--save", action="store_true",
                   help="with --set selection: keep the fitted measure for this model profile in "
                        "$LAB_CALIBRATION_DIR/health/context/<profile>.json, read before the packaged one")
    add_model_args(p)
    add_out_arg(p)
    p.set_defaults(func=run)


def _inputs(args: argparse.Namespace):
    """The pairs, the set's name and the fitted measure to judge with (None: fit it here), before any model loads."""
    from lab.health.context_items import load_items
    from lab.health.context_validity import load_reference
    from lab.models.profiles import PROFILES

    fitting = args.pairs is None and args.pair_set == "selection"
    if args.save and not fitting:
        raise ValueError("--save keeps a measure fitted on --set selection; drop --save or use --set selection")
    if args.save and args.model not in PROFILES:
        raise ValueError(f"--save keeps the measure of a model profile ({', '.join(PROFILES)}); --model "
                         f"{args.model!r} is not one (drop --save)")
    path = args.pairs or str(resources.files("lab") / "data" / SETS[args.pair_set])
    items = load_items(path, args.limit)
    if len(items) < 3:
        raise ValueError(f"{path}: {len(items)} pair(s) (after --limit); the figures need at least 3")
    reference = None
    if not fitting:
        found = load_reference(args.model)
        if found is None:
            raise ValueError(f"no fitted context measure for {args.model!r}: run lab validate-context --set selection "
                             f"--model {args.model} --save first")
        reference = (found[0], str(found[1]))
    return items, path, ("pairs file" if args.pairs else args.pair_set), reference


def _score(args: argparse.Namespace, items, device, err):
    """Load the model (eager attention) and score every pair, the prefill's context health beside."""
    from lab.health.context_items import score_items
    from lab.health.graded import graded_health
    from lab.health.measures import HealthInputs
    from lab.models.chat import eos_token_ids
    from lab.models.loading import load_model
    from lab.sinks.prefill import analyze_prefill

    with err.status(f"loading {args.model} on {device}"):
        model, tokenizer = load_model(args.model, device=device, dtype=args.dtype, weights=args.weights,
                                      attn_implementation="eager")

    def health(messages):
        return graded_health(HealthInputs.from_prefill(analyze_prefill(model, tokenizer, messages)))

    with err.status("scoring pairs") as status:
        scores = score_items(model, tokenizer, frozenset(eos_token_ids(model, tokenizer)), items, args.new_tokens,
                             health=health, progress=lambda i, n, pid: status.update(f"pair {i + 1}/{n}: {pid}"))
    return model, scores


def run(args: argparse.Namespace) -> int:
    from lab.health.context_validity import context_validation, save_reference
    from lab.models.source import model_source
    from lab.render.console import stderr_console, stdout_console
    from lab.render.context import figures_table, summary_markdown
    from lab.reports import environment, report_dir

    # 1. Everything that can be checked before the model loads.
    items, path, set_name, reference = _inputs(args)
    device = check_model_args(args)
    err, out = stderr_console(), stdout_console()
    # 2. Score, then judge.
    model, scores = _score(args, items, device, err)
    info = model_source(model).as_dict()
    v = context_validation(scores, profile=args.model, set_name=set_name, items_file=path, reference=reference)
    out.print(figures_table(v))
    out.print(f"validate-context: {v.verdict()}", markup=False, highlight=False, soft_wrap=True)
    # 3. The report, then (--save) the fitted measure.
    with report_dir(args.out, "validate-context", info["model"]) as rd:
        rd.write_json("report.json", {"model": info, "environment": environment(model), "validation": v,
                                      "verdict": v.verdict()})
        rd.write_csv("pairs.csv", list(v.rows))
        rd.write_text("summary.md", summary_markdown(v))
    out.print(f"report: {rd.final}", markup=False, highlight=False, soft_wrap=True)
    if args.save:
        saved = save_reference(v.reference, args.model, path, rd.final.name)
        out.print(f"saved: {saved}", markup=False, highlight=False, soft_wrap=True)
    return 0
