"""``lab calibrate-sinks``: calibrate the attention-sink threshold on a prompt set and write a report.

Sweep the sink threshold of every candidate statistic over a prompt set: position 0 must be flagged on >= 95% of
prompts and < 1% of content tokens flagged; report the feasible range and its middle.

For every prompt (default: the packaged ``lab/data/calibration_prompts.jsonl``) and
for long uniform prompts built from the same text (``--long-lengths``, default 2048
tokens) one streaming prefill gives every candidate statistic's scores; the sweep counts, per threshold,
the prompts whose position 0 is flagged and the content tokens flagged, short and
long prompts apart (both must meet the criteria). The report
``<out>/<timestamp>-calibrate-sinks-<model>/`` holds ``report.json`` (criteria,
chosen threshold, sweep counts, per-prompt scores), ``sweep.csv``, ``prompts.csv``,
``summary.md`` and ``sweep.png``.

Every candidate statistic of :data:`lab.sinks.candidates.STATISTICS` is swept on the same
prefills; for a named profile the per-candidate thresholds and counts are written to
``<profile>.json`` in the user's calibration folder (``$LAB_CALIBRATION_DIR/sinks``, default
``~/.cache/lab/calibrations/sinks``; ``--no-save`` to skip), which every command then reads
before the packaged ``lab/sinks/calibrations/<profile>.json``. The statistic rule
(:func:`lab.sinks.calibration.choose_statistic`) is applied over the recorded figures of all
the profiles calibrated so far, and its choice and default threshold go to ``choice.json``
beside it; when it chooses another statistic than the packaged one, every profile file's
``statistic`` field is migrated to it (:func:`lab.sinks.profiles.migrate_statistic`). These
files are written after the report, each atomically, never into the installed package. The
layout of both files is in :mod:`lab.sinks.profiles`.
"""

from __future__ import annotations

import argparse
import functools

from lab.commands.common import (add_calibration_prompts_arg, add_model_args, add_out_arg, check_model_args,
                                 command_parser, load_model_step, parse_lengths, save_after_report)
from lab.kinds.calibrate_sinks import KIND as CALIBRATE_SINKS
from lab.models.source import model_source
from lab.ranges import LONG_LENGTH  # the model's own context is checked too where it is known


def register(subparsers: argparse._SubParsersAction) -> None:
    p = command_parser(subparsers, "calibrate-sinks", run, __doc__)
    add_calibration_prompts_arg(p, "JSONL prompt set")
    p.add_argument("--held-out", default=None,
                   help="JSONL prompt set the chosen threshold is checked on, with its long prompts too "
                        "(default: the packaged lab/data/sinks_held_out.jsonl; 'none' to skip)")
    p.add_argument("--long-lengths", default="2048",
                   help=f"comma-separated token lengths of long uniform prompts built from the set's text, scored "
                        f"too, each in {LONG_LENGTH.text} (default: 2048; 'none' to skip)")
    p.add_argument("--no-save", dest="save", action="store_false",
                   help="do not write the profile's calibration <profile>.json nor the cross-profile choice.json "
                        "into $LAB_CALIBRATION_DIR/sinks/ (default ~/.cache/lab/calibrations/sinks/), which "
                        "commands read before the packaged files (default: write them, after the report, when "
                        "--model is a named profile and --prompts is the packaged set)")
    add_model_args(p)
    add_out_arg(p)


def _long_lengths(text: str) -> tuple[int, ...]:
    if text.strip().lower() == "none":
        return ()
    return parse_lengths(text, "--long-lengths", LONG_LENGTH)


def _checked(args: argparse.Namespace) -> tuple[list, list, tuple[int, ...], str]:
    """The calibration prompts, the held-out prompts, the long lengths and the device, checked before any
    model loads."""
    from lab.models.loading import known_context_length
    from lab.sinks.calibration import HELD_OUT_SET, load_prompts
    from lab.user_dirs import check_calibration_dir

    if args.save:
        check_calibration_dir()  # a folder that cannot be written, found before minutes of scoring
    prompts = load_prompts(args.prompts)
    lengths = _long_lengths(args.long_lengths)
    skip_held = args.held_out is not None and args.held_out.strip().lower() == "none"
    held = [] if skip_held else load_prompts(args.held_out, packaged=HELD_OUT_SET, arg="held_out")
    device = check_model_args(args)
    context = known_context_length(args.model)  # a long prompt past it failed only after the model loaded
    if lengths and context is not None and max(lengths) > context:
        raise ValueError(f"--long-lengths={args.long_lengths!r}: {max(lengths)} tokens exceed the model's context "
                         f"of {context}")
    return prompts, held, lengths, device


def _notes(err, calibration, args: argparse.Namespace, named: bool, save: bool) -> None:
    """The run's warnings on stderr: no feasible threshold, an unsaved run, the rule's refusal or move."""
    say = functools.partial(err.print, markup=False, highlight=False)
    report = calibration.report
    if report.chosen_threshold is None:
        say(f"calibration: no threshold of {report.statistic} meets both criteria on this prompt set")
    if args.save and not named:
        say(f"calibrate-sinks: {args.model!r} is not a named profile; its calibration stays in the report "
            "(commands run it with the default threshold)")
    cross = report.cross_model
    if calibration.refused is not None:
        say(f"calibrate-sinks: {calibration.refused}")
    elif cross is not None and cross.moves_from is not None and not save:
        was = cross.moves_from
        say(f"calibrate-sinks: over the calibrated profiles ({', '.join(cross.profiles)}) the rule chooses "
            f"{cross.chosen!r} (default {cross.default_threshold:g}) but {was.path} holds "
            f"{was.statistic!r} (default {was.default_threshold:g}); run with the packaged prompts and "
            "without --no-save to write it")


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from lab.models.profiles import PROFILES
    from lab.render.console import print_report, stderr_console, stdout_console
    from lab.render.sink_calibration import calibration_markdown, calibration_table, candidates_markdown, plot_sweep
    from lab.reports import environment_record
    from lab.views.publish import report_folder
    from lab.sinks.calibration import HELD_OUT_SET
    from lab.sinks.calibration_report import CalibrationRun, calibration_report, save_calibration, score_sets
    from lab.sinks.profiles import load_choice, recorded_feasible, user_dir

    # 1. Validate before loading.
    prompts, held, lengths, device = _checked(args)
    save = args.save and args.model in PROFILES and args.prompts is None

    # 2. Score every prompt set (progress on stderr).
    err = stderr_console()
    model, tokenizer = load_model_step(err, args, device)
    with err.status("scoring prompts") as status:
        scored = score_sets(model, tokenizer, prompts, held, lengths, progress=lambda label, i, n, pid: status.update(
            f"{label} {i + 1}/{n}" + ("" if label == "held-out long prompt" else f": {pid}")))

    # 3. Sweep every candidate, choose, check on the held-out sets, apply the rule across profiles.
    choice = load_choice()
    calibration = calibration_report(scored, CalibrationRun(
        model=model_source(model), environment=environment_record(model), choice=choice,
        held_out_file=args.held_out or f"lab/data/{HELD_OUT_SET}", long_lengths=lengths,
        recorded=recorded_feasible(PROFILES), save_as=args.model if save else None,
        saved_to=str(user_dir()) if save else None))
    _notes(err, calibration, args, named=args.model in PROFILES, save=save)

    # 4. Show and write.
    report = calibration.report
    stdout_console().print(calibration_table(calibration))
    with report_folder(args.out, CALIBRATE_SINKS, report.model.model) as rd:
        rd.write_report(report)
        rd.write_csv("sweep.csv", [asdict(r) for r in report.sweep])
        rd.write_csv("prompts.csv", list(report.prompts))
        rd.write_text("summary.md", calibration_markdown(report) + candidates_markdown(report))
        plot_sweep(calibration, rd.file("sweep.png"))
    print_report(stdout_console(), rd.final)

    # 5. Save the calibration for the commands that read it (the user's folder, never the package), after
    #    the report, so a run that fails leaves neither half-written.
    if save:
        save_after_report(rd.final, f"the calibration could not be saved under {str(user_dir())!r}",
                          lambda: save_calibration(calibration, args.model, packaged_statistic=choice.statistic,
                                                   note=lambda text: err.print(text, markup=False, highlight=False)))
    return 0
