"""``lab calibrate-health``: evaluate the context-health candidates on the calibration prompts and choose one.

Score the graded context-health candidates on clean calibration prompts, poisoned variants of them and neutral
variants of the same length; choose by the rule stated in lab.health.measures (a length-only control must be
rejected); write a report directory.

For every calibration prompt (default: ``lab/data/calibration_prompts.jsonl``), one
poisoned variant of each (distractors from the study's prompt set) and one neutral
variant of the same added length (``lab/data/calibration_neutral.jsonl``), one
streaming prefill gives every candidate and control of :mod:`lab.health.measures`;
the rule of :mod:`lab.health.measures` picks one and must reject the controls. Writes ``<out>/<timestamp>-calibrate-health-<model>/``
with ``report.json``, ``prompts.csv`` and ``summary.md``; with ``--save`` the
rule's choice then goes, atomically, to ``health/chosen.json`` in the user's calibration
folder (``$LAB_CALIBRATION_DIR``, default ``~/.cache/lab/calibrations``; never the installed
package), which :func:`lab.health.graded.graded_health` reads before the packaged
``lab/health/chosen.json`` (:mod:`lab.health.choice`).
Re-run it after a change to the sink detector (:mod:`lab.sinks.scores`,
:mod:`lab.sinks.prefill`).
"""

from __future__ import annotations

import argparse
import functools
from importlib import resources

from lab.commands.common import (add_calibration_prompts_arg, add_model_args, add_out_arg, check_model_args,
                                 command_parser)
from lab.kinds.calibrate_health import KIND as CALIBRATE_HEALTH
from lab.kinds.calibrate_health_validate import KIND as CALIBRATE_HEALTH_VALIDATE
from lab.models.source import model_source


def register(subparsers: argparse._SubParsersAction) -> None:
    p = command_parser(subparsers, "calibrate-health", run, __doc__)
    add_calibration_prompts_arg(p, "calibration JSONL")
    p.add_argument("--distractors", default=None,
                   help="study prompt file whose poisoned twins supply the distractor texts "
                        "(default: the embedded lab/data/prompts.jsonl)")
    p.add_argument("--neutral", default=None,
                   help="JSONL of neutral variants, one {\"twin_of\", \"added\"} per calibration prompt "
                        "(default: the packaged lab/data/calibration_neutral.jsonl)")
    p.add_argument("--reference-prompts", default=None,
                   help="clean length-reference JSONL, one {\"id\", \"prompt\"} per line, that each *_for_length "
                        "candidate's line of value on ln N is fitted on first (default: the packaged "
                        "lab/data/length_reference.jsonl; it shares no question with the calibration prompts)")
    p.add_argument("--study-set", action="store_true",
                   help="also score the chosen measure on the study prompts (--distractors file; prefill only) and "
                        "report the ranking targets there: no value shared by > 10%% of clean prompts, no tied twins")
    p.add_argument("--save", action="store_true",
                   help="after the report, write the rule's choice to $LAB_CALIBRATION_DIR/health/chosen.json "
                        "and the model's length reference to $LAB_CALIBRATION_DIR/health/length/<profile>.json "
                        "(default folder ~/.cache/lab/calibrations), which every command's context health then "
                        "reads before the packaged lab/health/ files (default: report only)")
    p.add_argument("--validate", nargs="?", const="", default=None, metavar="FILE",
                   help="instead of calibrating, score the current context health on independent clean text and "
                        "report the size of Spearman rho(health, N) and the share at the ends of the scale (bars 0.2 and 5%%); "
                        "FILE: a JSONL of {\"id\", \"prompt\", \"source\"?} (default: the packaged "
                        "lab/data/health_validation.jsonl)")
    add_model_args(p)
    add_out_arg(p)


def _notes(err, report, save: bool) -> None:
    """The run's warnings on stderr: no choice, an unsaved new choice, a choice failing on the model's prompts."""
    say = functools.partial(err.print, markup=False, highlight=False)
    model = report.model.model
    if report.chosen is None:
        say(f"calibrate-health: the rule chooses no measure on {model}: {report.decided_by}"
            + ("; nothing saved" if save else ""))
    elif not save and report.chosen != report.current_chosen:
        say(f"calibrate-health: the rule chooses {report.chosen!r} but the current choice "
            f"({report.current_chosen_file}) is {report.current_chosen!r}; run with --save to write it")
    if report.chosen is not None and not report.chosen_holds_on_prompts:
        failed = [k for k, v in report.properties_on_prompts[report.chosen].items() if v is False]
        say(f"calibrate-health: the chosen measure {report.chosen!r} fails {', '.join(failed)} on "
            f"{model}'s own prompts (see summary.md)")


def _validation_set(args: argparse.Namespace):
    """``--validate``'s file read and checked, and ``--save``'s preconditions, before any model loads."""
    from lab.health.validation import MIN_MEASURABLE, PACKAGED_VALIDATION, VALIDATION_PROMPTS, validation_set
    from lab.models.profiles import PROFILES
    from lab.files import MAX_PROMPT_SET_BYTES, read_text
    from lab.sinks.calibration import load_prompts

    path = args.validate or str(resources.files("lab").joinpath(VALIDATION_PROMPTS))
    prompts = load_prompts(path, arg="validate")
    text = read_text(path, MAX_PROMPT_SET_BYTES, f"validate={path!r}")
    vset = validation_set(prompts, text, args.validate or PACKAGED_VALIDATION)
    if args.save and args.model not in PROFILES:
        raise ValueError(f"--save keeps the verdict of a model profile ({', '.join(PROFILES)}); "
                         f"--model {args.model!r} is not one (drop --save)")
    if args.save and len(vset.prompts) < MIN_MEASURABLE:
        raise ValueError(f"--save: --validate {vset.file!r} holds {len(vset.prompts)} prompt(s), and a verdict needs "
                         f"Spearman rho over at least {MIN_MEASURABLE}: none could be saved (drop --save, or add prompts)")
    return vset


def _save_verdict(report, profile: str, folder) -> str:
    """``--validate --save``: the verdict to the user's calibration folder; returns the line saying where, and what
    it replaces. A verdict the study would refuse raises ``ValueError`` (nothing saved; the report stays)."""
    from lab.commands.common import saved_line
    from lab.health.validation import save_validity, validity_of, validity_path

    user, packaged = validity_path(profile, packaged=False), validity_path(profile, packaged=True)
    replaces = ("your earlier verdict" if user.is_file() or user.is_symlink() else
                f"the packaged verdict {packaged}" if packaged.is_file() else None)
    return saved_line(folder, f"the verdict could not be saved to {str(user)!r}",
                      lambda: save_validity(validity_of(report.to_json(), profile, folder.name)), replaces, profile,
                      " (delete it to read the packaged one again)" if packaged.is_file() else "")


def _validate(args: argparse.Namespace) -> int:
    """``--validate``: the current context health on the validation set (:mod:`lab.health.validation`)."""
    from lab.commands.common import load_model_step
    from lab.decode import context_length
    from lab.health.calibration import score_candidates
    from lab.health.choice import load_chosen
    from lab.health.graded import model_length_reference
    from lab.health.validation import check_lengths, validation_report
    from lab.models.chat import encode_chat
    from lab.render.console import print_report, stderr_console, stdout_console
    from lab.render.health import validation_markdown, validation_table
    from lab.reports import environment_record
    from lab.views.publish import report_folder
    from lab.sinks.prefill import analyze_prefill

    vset = _validation_set(args)
    device = check_model_args(args)
    err = stderr_console()
    model, tokenizer = load_model_step(err, args, device)
    check_lengths(vset, lambda p: encode_chat(tokenizer, p.messages()).shape[-1], context_length(model))
    measure = load_chosen()
    with err.status("scoring validation prompts") as status:
        values = score_candidates(lambda messages: analyze_prefill(model, tokenizer, messages), vset.prompts,
                                  progress=lambda i, n, pid: status.update(f"validation prompt {i + 1}/{n}: {pid}"))
    source = model_source(model)
    report = validation_report(values, vset.prompts, vset.sources, measure=measure, model=source,
                               environment=environment_record(model), prompts_file=vset.file,
                               reference_file=model_length_reference(model, measure).path)
    if not report.valid:
        err.print(f"calibrate-health: context health ({measure}) fails on independent text on {source.model}: "
                  f"rho(N) {report.figures.rho:+.2f}, {report.figures.saturated_share:.0%} at the ends of the scale",
                  markup=False, highlight=False)
    stdout_console().print(validation_table(report))
    with report_folder(args.out, CALIBRATE_HEALTH_VALIDATE, source.model) as rd:
        rd.write_report(report.to_json())
        rd.write_csv("prompts.csv", list(report.prompts))
        rd.write_text("summary.md", validation_markdown(report))
    print_report(stdout_console(), rd.final)
    if args.save:  # the verdict the study reads (H1 untestable where it failed)
        stdout_console().print(_save_verdict(report, args.model, rd.final), markup=False, highlight=False,
                               soft_wrap=True)
    return 0


def run(args: argparse.Namespace) -> int:
    from lab.commands.common import load_model_step, save_after_report
    from lab.health.calibration_report import (HealthRun, health_prompt_sets, health_report, save_health_choice,
                                               score_health_sets)
    from lab.health.choice import chosen_path, load_chosen, user_path
    from lab.health.references import REFERENCE_PROMPTS
    from lab.render.console import print_report, stderr_console, stdout_console
    from lab.render.health import calibration_markdown, candidates_table
    from lab.reports import environment_record
    from lab.views.publish import report_folder
    from lab.sinks.calibration import load_prompts
    from lab.sinks.prefill import analyze_prefill

    if args.validate is not None:
        return _validate(args)
    # 1. Validate before loading.
    clean = load_prompts(args.prompts)
    references = load_prompts(args.reference_prompts if args.reference_prompts is not None else
                              str(resources.files("lab").joinpath(REFERENCE_PROMPTS)), arg="reference_prompts")
    sets = health_prompt_sets(clean, references, distractors=args.distractors,
                              neutral=args.neutral, prompts_file=args.prompts, reference_file=args.reference_prompts)
    device = check_model_args(args)

    # 2. One prefill per prompt (progress on stderr), the clean length reference first.
    err = stderr_console()
    model, tokenizer = load_model_step(err, args, device)
    with err.status("scoring prompts") as status:
        scores = score_health_sets(lambda messages: analyze_prefill(model, tokenizer, messages), sets,
                                   study_set=args.study_set,
                                   progress=lambda label, i, n, pid: status.update(f"{label} {i + 1}/{n}: {pid}"))

    # 3. Figures and the rule's choice.
    report = health_report(scores, sets, HealthRun(
        model=model_source(model), environment=environment_record(model), current_chosen=load_chosen(),
        current_chosen_file=str(chosen_path()), save_to=str(user_path()) if args.save else None))
    _notes(err, report, args.save)

    # 4. Show and write.
    stdout_console().print(candidates_table(report))
    with report_folder(args.out, CALIBRATE_HEALTH, report.model.model) as rd:
        rd.write_report(report)
        rd.write_csv("prompts.csv", list(report.prompts))
        rd.write_text("summary.md", calibration_markdown(report))
    print_report(stdout_console(), rd.final)

    # 5. Save the choice (after the report: a failure leaves neither half-written).
    if args.save and report.chosen is not None:
        ref_path, path = save_after_report(rd.final, f"the choice could not be saved to {str(user_path())!r}",
                                           lambda: save_health_choice(report))
        err.print(f"context-health choice written: {path} ({report.chosen}); length reference of "
                  f"{report.length_reference['profile']}: {ref_path}", markup=False, highlight=False)
    return 2 if report.chosen is None and args.save else 0
