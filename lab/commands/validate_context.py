"""``lab validate-context``: check on labelled documentation that the context measure reads the context.

Score paired prompts (a question after the function's own docstring, and after another docstring of the same length)
with the context-reliance measures and today's context health; judge the chosen measure against the bar (paired
AUROC >= 0.75, length-only and placebo near 0.5, |rho(length)| <= 0.2); write a report directory.

Scores each pair of a paired set (:mod:`lab.health.context_items`: one question per documented
function, asked after its own docstring and after another function's docstring of the same
length) with the reliance measures of :mod:`lab.health.reliance` and today's context health,
then judges the chosen measure (:data:`lab.health.context_validity.CHOSEN_RULE`) against the bar
(:data:`lab.health.context_validity.BAR`), the raw candidates, today's health and a length-only
control beside it. ``--set selection`` fits the chosen measure's heads and length line on the
lab's own pairs (``--save`` keeps them for the model); the validation and held-back sets are
judged with the fitted measure (``--save`` keeps the verdict beside it, where ``lab study`` reads it). Writes ``<out>/<timestamp>-validate-context-<model>/``.
"""

from __future__ import annotations

import argparse
from importlib import resources

from lab.commands.common import (add_model_args, add_out_arg, add_ranged_arg, check_model_args, command_parser,
                                 load_model_step, saved_line)
from lab.kinds.validate_context import KIND as VALIDATE_CONTEXT

SETS = {"selection": "context_selection.jsonl", "validation": "context_validation.jsonl",
        "heldback": "context_heldback.jsonl"}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = command_parser(subparsers, "validate-context", run, __doc__)
    p.add_argument("--set", default=None, choices=tuple(SETS), dest="pair_set",
                   help="the packaged paired set: selection (the lab's own, CPython docstrings: fits the measure), "
                        "validation (160 pairs of five third-party packages) or heldback (80 pairs of seven "
                        "others) (default: validation)")
    p.add_argument("--pairs", default=None, metavar="FILE",
                   help="your own paired JSONL instead of --set, one {\"id\", \"package\", \"object\", \"question\", "
                        "\"relevant\", \"irrelevant\"} per line (judged as --set validation)")
    add_ranged_arg(p, "validate-context", "--new-tokens", 24, "tokens of each prompt's greedy continuation, "
                   "teacher-forced for the measures, ", " (default: 24)")
    add_ranged_arg(p, "validate-context", "--limit", None, "score only the first N pairs, ", " (default: all)")
    p.add_argument("--save", action="store_true",
                   help="with --set selection: keep the fitted measure for this model profile in "
                        "$LAB_CALIBRATION_DIR/health/context/<profile>.json, read before the packaged one; with "
                        "--set validation or heldback: keep the verdict beside the measure it judged (the study "
                        "tests H1 only where the validation verdict passes)")
    add_model_args(p)
    add_out_arg(p)


def _inputs(args: argparse.Namespace):
    """The pairs, the set's name and the fitted measure to judge with (None: fit it here), before any model loads."""
    from lab.health.context_items import load_items
    from lab.health.context_validity import load_context_measure
    from lab.models.profiles import PROFILES

    if args.pairs is not None and args.pair_set is not None:
        raise ValueError(f"--set {args.pair_set} has no effect with --pairs (a pairs file is judged as --set "
                         "validation); drop one of them")
    if args.pairs is not None and not args.pairs.strip():
        raise ValueError("--pairs '' names no file")
    pair_set = args.pair_set or "validation"
    fitting = args.pairs is None and pair_set == "selection"
    if args.save and args.pairs is not None:
        raise ValueError("--save keeps a measure fitted on --set selection, or its verdict on --set validation or "
                         "heldback; a pairs file's figures stay in its report: drop --save")
    if args.save and args.limit is not None:
        raise ValueError(f"--save with --limit: a {'measure fitted' if fitting else 'verdict'} on part of the "
                         f"{pair_set} set is not kept; drop --limit (or --save)")
    if args.model not in PROFILES and (args.save or not fitting):
        raise ValueError(f"--model {args.model!r} is not one of the model profiles ({', '.join(PROFILES)}), and only a "
                         f"profile keeps a fitted context measure: " + ("drop --save" if args.save else
                         "--set selection fits and judges it in one run"))
    path = args.pairs or str(resources.files("lab") / "data" / SETS[pair_set])
    items = load_items(path, args.limit, flag="--pairs" if args.pairs is not None else None)
    if len(items) < 3:
        raise ValueError(f"{path}: {len(items)} pair(s) (after --limit); the figures need at least 3")
    measure = None
    if not fitting:
        measure = load_context_measure(args.model)
        if measure is None:
            raise ValueError(f"no fitted context measure for {args.model!r}: run lab validate-context --set selection "
                             f"--model {args.model} --save first")
    return items, path, ("pairs file" if args.pairs else pair_set), measure


def _check(items, path: str, reference, new_tokens: int, tokenizer, config: dict | None) -> None:
    """Refuse a pair the model cannot score, or a fitted measure whose heads the model lacks, before scoring:
    with the tokenizer and ``config.json`` before the model loads where they are known, else after it loads."""
    from lab.health.context_items import check_items

    config = (config or {}).get("text_config", config or {})
    context, layers, heads = (config.get(k) for k in ("max_position_embeddings", "num_hidden_layers",
                                                        "num_attention_heads"))
    check_items(tokenizer, items, path, new_tokens, context if isinstance(context, int) else None)
    if reference is not None and isinstance(layers, int) and isinstance(heads, int):
        try:
            reference[0].check_shape(layers, heads)
        except ValueError as exc:
            raise ValueError(f"{reference[1]}: {exc}") from None


def _score(args: argparse.Namespace, items, path: str, reference, checked: bool, device, err):
    """Load the model (eager attention) and score every pair, the prefill's context health beside."""
    from lab.health.context_items import score_items
    from lab.health.graded import graded_health
    from lab.health.measures import HealthInputs
    from lab.models.chat import eos_token_ids
    from lab.sinks.prefill import analyze_prefill

    model, tokenizer = load_model_step(err, args, device, attn_implementation="eager")
    if not checked:  # nothing was known before the model loaded: its own config, before any pair is scored
        _check(items, path, reference, args.new_tokens, tokenizer, model.config.to_dict())

    def health(messages):
        return graded_health(HealthInputs.from_prefill(analyze_prefill(model, tokenizer, messages)))

    with err.status("scoring pairs") as status:
        scores = score_items(model, tokenizer, frozenset(eos_token_ids(model, tokenizer)), items, args.new_tokens,
                             health=health, progress=lambda i, n, pid: status.update(f"pair {i + 1}/{n}: {pid}"))
    return model, scores


def run(args: argparse.Namespace) -> int:
    from lab.health.context_validity import context_validation
    from lab.models.source import model_source
    from lab.render.console import print_report, stderr_console, stdout_console
    from lab.render.context import figures_table, summary_markdown
    from lab.reports import environment
    from lab.views.publish import report_folder

    # 1. Everything that can be checked before the model loads.
    items, path, set_name, measure = _inputs(args)
    reference = None if measure is None else (measure.reference, str(measure.path))
    device = check_model_args(args)
    checked = _check_before_loading(args, items, path, reference)
    err, out = stderr_console(), stdout_console()
    # 2. Score, then judge.
    model, scores = _score(args, items, path, reference, checked, device, err)
    info = model_source(model).as_dict()
    v = context_validation(scores, profile=args.model, set_name=set_name, items_file=path, reference=reference)
    out.print(figures_table(v))
    out.print(f"validate-context: {v.verdict()}", markup=False, highlight=False, soft_wrap=True)
    # 3. The report, then (--save) the fitted measure.
    with report_folder(args.out, VALIDATE_CONTEXT, info["model"]) as rd:
        rd.write_report({"model": info, "environment": environment(model), "validation": v,
                                      "verdict": v.verdict()})
        rd.write_csv("pairs.csv", list(v.rows))
        rd.write_text("summary.md", summary_markdown(v))
    print_report(out, rd.final)
    if args.save:
        out.print(_save(v, measure, args.model, path, rd.final), markup=False, highlight=False, soft_wrap=True)
    return 0


def _check_before_loading(args: argparse.Namespace, items, path: str, reference) -> bool:
    """:func:`_check` with the tokenizer alone when the model's config is known without loading it; whether it ran."""
    from lab.models.loading import known_config, load_tokenizer

    config = known_config(args.model)
    if config is None:
        return False
    _check(items, path, reference, args.new_tokens, load_tokenizer(args.model), config)
    return True


def _save(v, measure, profile: str, path: str, folder) -> str:
    """``--save``: the fitted measure (``measure`` None: fitted here) or its verdict on this set (kept beside the
    measure it judged) to the user's calibration folder; the line saying where, and what it replaces.
    A file that cannot be written exits 1 naming it; the report stays."""
    from lab.health.context_validity import reference_path, save_reference, save_verdict

    user, packaged = reference_path(profile, packaged=False), reference_path(profile, packaged=True)
    replaces = ("your earlier fitted measure" if user.is_file() or user.is_symlink() else
                f"the packaged {packaged}" if packaged.is_file() else None)
    if measure is not None:
        replaces = f"its earlier {v.set_name} verdict" if v.set_name in measure.verdicts else None
    return saved_line(folder, f"the fitted measure could not be saved to {str(user)!r}",
                      lambda: (save_reference(v.reference, profile, path, folder.name) if measure is None else
                               save_verdict(measure, v, folder.name)), replaces, profile)
