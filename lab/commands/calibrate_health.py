"""``lab calibrate-health``: evaluate the graded context-health candidates and apply the choice rule.

For every calibration prompt (default: ``lab/data/calibration_prompts.jsonl``), one
poisoned variant of each (distractors from the study's prompt set) and one neutral
variant of the same added length (``lab/data/calibration_neutral.jsonl``), one
streaming prefill gives every candidate and control of :mod:`lab.health.measures`;
the rule of :mod:`lab.health.measures` picks one and must reject the controls. Writes ``<out>/<timestamp>-calibrate-health-<model>/``
with ``calibration.json``, ``prompts.csv`` and ``summary.md``; with ``--save`` the
rule's choice then goes, atomically, to ``health/chosen.json`` in the user's calibration
folder (``$LAB_CALIBRATION_DIR``, default ``~/.cache/lab/calibrations``; never the installed
package), which :func:`lab.health.graded.graded_health` reads before the packaged
``lab/health/chosen.json`` (:mod:`lab.health.choice`).
Re-run it after a change to the sink detector (:mod:`lab.sinks.scores`,
:mod:`lab.sinks.prefill`).
"""

from __future__ import annotations

import argparse
from importlib import resources

from lab.commands.common import add_model_args, add_out_arg, check_model_args


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "calibrate-health", help="evaluate the context-health candidates on the calibration prompts and choose one",
        description="Score the graded context-health candidates on clean calibration prompts, poisoned variants "
                    "of them and neutral variants of the same length; choose by the rule stated in "
                    "lab.health.measures (a length-only control must be rejected); write a report directory.",
    )
    p.add_argument("--prompts", default=None,
                   help="calibration JSONL, one {\"id\", \"prompt\", \"system\"?} per line "
                        "(default: the packaged lab/data/calibration_prompts.jsonl)")
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
    add_model_args(p)
    add_out_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lab.health import measures as health
    from lab.health.choice import chosen_path, load_chosen, user_path, write_chosen
    from lab.sinks.calibration import load_prompts
    from lab.health.calibration import (calibrate, distractor_texts, fit_length_references, neutral_variants,
                                        poisoned_variants, score_candidates, study_set_figures)
    from lab.health.references import REFERENCE_PROMPTS, reference_record, write_references
    from lab.models.loading import load_model
    from lab.prompts import load_prompts as load_study_prompts
    from lab.render.console import stderr_console, stdout_console
    from lab.sinks.prefill import analyze_prefill
    from lab.render.health import calibration_markdown, candidates_table
    from lab.reports import ReportWriteError, environment, report_dir

    # 1. Validate before loading.
    clean = load_prompts(args.prompts)
    references = load_prompts(args.reference_prompts if args.reference_prompts is not None else
                              str(resources.files("lab").joinpath(REFERENCE_PROMPTS)))
    shared = sorted({p.prompt for p in clean} & {p.prompt for p in references})
    if shared:
        raise ValueError(f"--reference-prompts shares {len(shared)} prompt(s) with the calibration prompts "
                         f"(e.g. {shared[0][:60]!r}): the reference must be fitted on other prompts")
    study_prompts = load_study_prompts(args.distractors)
    poisoned = poisoned_variants(clean, distractor_texts(study_prompts))
    neutral = neutral_variants(clean, args.neutral)
    device = check_model_args(args)

    # 2. One prefill per prompt (progress on stderr).
    err = stderr_console()
    with err.status(f"loading {args.model} on {device}"):
        model, tokenizer = load_model(args.model, device=device, dtype=args.dtype, weights=args.weights)
    prompts = clean + poisoned + neutral

    def analyze(messages):
        return analyze_prefill(model, tokenizer, messages)

    inputs: dict = {}  # each prompt's HealthInputs: the properties are checked on this model's prefills too
    with err.status("scoring prompts") as status:
        # the clean length reference first: the *_for_length candidates read it on the calibration prompts
        ref_values = score_candidates(analyze, references, progress=lambda i, n, pid: status.update(
            f"length-reference prompt {i + 1}/{n}: {pid}"))
        refs, ref_figures = fit_length_references(ref_values)
        values = score_candidates(analyze, prompts, keep_inputs=inputs, length_reference=refs,
                                  progress=lambda i, n, pid: status.update(f"prompt {i + 1}/{n}: {pid}"))

        study_values = {}
        if args.study_set:
            study_values = score_candidates(analyze, study_prompts, length_reference=refs,
                                            progress=lambda i, n, pid: status.update(
                f"study prompt {i + 1}/{n}: {pid}"))

    # 3. Figures and the rule's choice.
    current = load_chosen()
    data = calibrate(values, clean, poisoned, neutral, inputs)
    if study_values:
        data["study_set"] = {name: study_set_figures({k: v[name] for k, v in study_values.items()}, study_prompts)
                             for name in {**health.CANDIDATES, **health.CONTROLS}}
        data["study_set_file"] = args.distractors or "lab/data/prompts.jsonl"
    info = dict(model.lab_source)
    profile = info.get("profile") or info["model"]
    ref_record = reference_record(profile, info["model"], refs, n_content=[int(v["n_content"]) for v in
                                                                           ref_values.values()],
                                  prompts_file=args.reference_prompts or "lab/data/length_reference.jsonl",
                                  fitted_at=None)
    data.update({"length_reference": {**ref_record, **ref_figures}, "kind": "calibrate-health", "model": info, "environment": environment(model),
                 "prompts_file": args.prompts or "lab/data/calibration_prompts.jsonl",
                 "distractors_file": args.distractors or "lab/data/prompts.jsonl",
                 "n_clean": len(clean), "current_chosen": current, "current_chosen_file": str(chosen_path()),
                 "saved_to": str(user_path()) if args.save and data["chosen"] is not None else None})
    if data["chosen"] is None:
        err.print(f"calibrate-health: the rule chooses no measure on {info['model']}: {data['decided_by']}"
                  + ("; nothing saved" if args.save else ""), markup=False, highlight=False)
    elif not args.save and data["chosen"] != current:
        err.print(f"calibrate-health: the rule chooses {data['chosen']!r} but the current choice "
                  f"({chosen_path()}) is {current!r}; run with --save to write it", markup=False, highlight=False)
    if data["chosen"] is not None and not data["chosen_holds_on_prompts"]:
        failed = [k for k, v in data["properties_on_prompts"][data["chosen"]].items() if v is False]
        err.print(f"calibrate-health: the chosen measure {data['chosen']!r} fails {', '.join(failed)} on "
                  f"{info['model']}'s own prompts (see summary.md)", markup=False, highlight=False)

    # 4. Show and write.
    stdout_console().print(candidates_table(data))
    with report_dir(args.out, "calibrate-health", info["model"]) as rd:
        rd.write_json("calibration.json", data)
        rd.write_csv("prompts.csv", data["prompts"])
        rd.write_text("summary.md", calibration_markdown(data))
    stdout_console().print(f"report: {rd.final}", markup=False, highlight=False, soft_wrap=True)

    # 5. Save the choice (after the report: a failure leaves neither half-written).
    if args.save and data["chosen"] is not None:
        try:
            ref_path = write_references({**ref_record, "fitted_at": data["environment"].get("created")})
            path = write_chosen(data["chosen"], decided_by=data["decided_by"], model=info["model"],
                                chosen_at=data["environment"].get("created"))
        except OSError as exc:
            raise ReportWriteError(f"the report is complete in {str(rd.final)!r}, but the choice could not be "
                                   f"saved to {str(user_path())!r} ({exc.strerror or exc}); set LAB_CALIBRATION_DIR "
                                   "to a writable folder and re-run") from exc
        err.print(f"context-health choice written: {path} ({data['chosen']}); length reference of {profile}: "
                  f"{ref_path}", markup=False, highlight=False)
    return 2 if data["chosen"] is None and args.save else 0
