"""``lab calibrate-sinks``: sweep the sink threshold over a prompt set and write the calibration report.

For every prompt (default: the packaged ``lab/data/calibration_prompts.jsonl``) and
for long uniform prompts built from the same text (``--long-lengths``, default 2048
tokens) one streaming prefill gives every candidate statistic's scores; the sweep counts, per threshold,
the prompts whose position 0 is flagged and the content tokens flagged, short and
long prompts apart (both must meet the criteria). The report
``<out>/<timestamp>-calibrate-sinks-<model>/`` holds ``calibration.json`` (criteria,
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

from lab.commands.common import check_model_args, add_model_args, add_out_arg


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "calibrate-sinks", help="calibrate the attention-sink threshold on a prompt set and write a report",
        description="Sweep the sink threshold of every candidate statistic over a prompt set: position 0 must be "
                    "flagged on >= 95% of prompts "
                    "and < 1% of content tokens flagged; report the feasible range and its middle.",
    )
    p.add_argument("--prompts", default=None,
                   help="JSONL prompt set, one {\"id\", \"prompt\", \"system\"?} per line "
                        "(default: the packaged lab/data/calibration_prompts.jsonl)")
    p.add_argument("--held-out", default=None,
                   help="JSONL prompt set the chosen threshold is checked on, with its long prompts too "
                        "(default: the packaged lab/data/sinks_held_out.jsonl; 'none' to skip)")
    p.add_argument("--long-lengths", default="2048",
                   help="comma-separated token lengths of long uniform prompts built from the set's text, scored "
                        "too (default: 2048; 'none' to skip)")
    p.add_argument("--no-save", dest="save", action="store_false",
                   help="do not write the profile's calibration <profile>.json nor the cross-profile choice.json "
                        "into $LAB_CALIBRATION_DIR/sinks/ (default ~/.cache/lab/calibrations/sinks/), which "
                        "commands read before the packaged files (default: write them, after the report, when "
                        "--model is a named profile and --prompts is the packaged set)")
    add_model_args(p)
    add_out_arg(p)
    p.set_defaults(func=run)


def _long_lengths(text: str) -> tuple[int, ...]:
    if text.strip().lower() in ("", "none", "0"):
        return ()
    try:
        lengths = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--long-lengths={text!r} must be comma-separated integers or 'none'") from None
    if any(n < 64 for n in lengths):
        raise ValueError(f"--long-lengths={text!r}: each length must be >= 64 tokens")
    return lengths


def _candidate_figures(res: dict, scores, long_scores, held, held_long) -> dict:
    """Every candidate's feasible range, chosen threshold and counts there (calibration and held-out)."""
    from lab.sinks.calibration import evaluate

    out = {}
    for name, r in res.items():
        t = r["chosen"]
        counts = {} if t is None else {
            label: evaluate([s.using(name) for s in sc], t)
            for label, sc in (("calibration", scores), ("calibration_long", long_scores), ("held_out", held),
                              ("held_out_long", held_long)) if sc}
        out[name] = {"feasible": [min(r["feasible"]), max(r["feasible"])] if r["feasible"] else None,
                     "feasible_thresholds": r["feasible"], "chosen": t, "counts": counts,
                     "position0_lowest": min(s.using(name).position0_score for s in scores),
                     "content_highest": max((float(s.using(name).candidate_content_scores.max()) for s in scores
                                             if s.using(name).candidate_content_scores.numel()), default=None)}
    return out


def _cross_model(err, feasible: dict, packaged) -> dict | None:
    """The statistic rule over every calibrated profile's recorded figures (None until one exists).

    ``feasible`` is :func:`lab.sinks.profiles.recorded_feasible` with this run's profile in it
    when it is saved; nothing is written here (see :func:`_save`).
    """
    from lab.sinks.calibration import choose_statistic

    if not feasible:
        return None
    try:
        chosen, default = choose_statistic(feasible)
    except ValueError as exc:
        err.print(f"calibrate-sinks: {exc}", markup=False, highlight=False)
        return {"profiles": sorted(feasible), "chosen": None, "default_threshold": None}
    return {"profiles": sorted(feasible), "chosen": chosen, "default_threshold": default,
            "moves_from": None if (chosen, default) == (packaged.statistic, packaged.default_threshold)
            else {"statistic": packaged.statistic, "default_threshold": packaged.default_threshold,
                  "path": packaged.path}}


def _save(err, profile: str, calibration: dict, cross: dict | None, packaged_statistic: str, at: str | None) -> None:
    """Write the profile's calibration, then the rule's choice (and each profile file's ``statistic``
    when the choice moves), into the user's folder, each file atomically; never into the package."""
    from lab.sinks.profiles import migrate_statistic, write_calibration, write_choice

    path = write_calibration(profile, calibration)
    err.print(f"calibration written: {path}", markup=False, highlight=False)
    if cross is None or cross["chosen"] is None:
        return
    chosen, default = cross["chosen"], cross["default_threshold"]
    path = write_choice(chosen, default, cross["profiles"], chosen_at=at)
    err.print(f"detector choice written: {path} ({chosen}, default {default:g})", markup=False, highlight=False)
    if chosen != packaged_statistic:
        reason = (f"the cross-profile rule (lab.sinks.calibration.choose_statistic) chose {chosen} over the "
                  f"profiles' recorded feasible thresholds ({', '.join(cross['profiles'])}); this file's "
                  f"thresholds.{chosen} comes from the same sweep")
        for name in cross["profiles"]:
            migrate_statistic(name, chosen, reason=reason, at=at or "")


def run(args: argparse.Namespace) -> int:
    import json
    import os

    import torch

    from lab.models.loading import known_context_length, load_model
    from lab.models.profiles import PROFILES
    from lab.render.console import stderr_console, stdout_console
    from lab.render.sink_calibration import calibration_markdown, calibration_table, candidates_markdown, plot_sweep
    from lab.reports import environment, report_dir, to_jsonable
    from lab.sinks.calibration import (CONTENT_MAX_RATE, HELD_OUT_SET, POSITION0_MIN_RATE, TRAILING_FRACTION,
                                       evaluate, load_prompts, long_prompts, score_prompts, sweep_candidates)
    from lab.sinks.candidates import STATISTICS
    from lab.sinks.prefill import MIN_OBSERVING_QUERIES
    from lab.reports import ReportWriteError
    from lab.sinks.profiles import load_choice, recorded_feasible, user_dir

    # 1. Validate before loading.
    prompts = load_prompts(args.prompts)
    lengths = _long_lengths(args.long_lengths)
    skip_held = args.held_out is not None and args.held_out.strip().lower() == "none"
    held = [] if skip_held else load_prompts(args.held_out, packaged=HELD_OUT_SET)
    device = check_model_args(args)
    context = known_context_length(args.model)  # a long prompt past it failed only after the model loaded
    if lengths and context is not None and max(lengths) > context:
        raise ValueError(f"--long-lengths={args.long_lengths!r}: {max(lengths)} tokens exceed the model's context "
                         f"of {context}")
    save = args.save and args.model in PROFILES and args.prompts is None

    # 2. Score every prompt (progress on stderr).
    err = stderr_console()
    with err.status(f"loading {args.model} on {device}"):
        model, tokenizer = load_model(args.model, device=device, dtype=args.dtype, weights=args.weights)
    with err.status("scoring prompts") as status:
        scores = score_prompts(model, tokenizer, prompts,
                               progress=lambda i, n, pid: status.update(f"prompt {i + 1}/{n}: {pid}"))
        long_scores = score_prompts(model, tokenizer, long_prompts(tokenizer, lengths, prompts),
                                    progress=lambda i, n, pid: status.update(f"long prompt {i + 1}/{n}: {pid}"))
        held_scores = score_prompts(model, tokenizer, held,
                                    progress=lambda i, n, pid: status.update(f"held-out prompt {i + 1}/{n}: {pid}"))
        held_long = score_prompts(model, tokenizer, long_prompts(tokenizer, lengths, held) if held else [],
                                  progress=lambda i, n, pid: status.update(f"held-out long prompt {i + 1}/{n}"))

    # 3. Sweep every candidate and choose its threshold; the report's headline is the packaged
    #    choice's statistic (an infeasible set still gets its report, chosen = None).
    choice = load_choice()
    statistic = choice.statistic
    res = sweep_candidates(scores, long_scores)
    rows, chosen = res[statistic]["rows"], res[statistic]["chosen"]
    if chosen is None:
        err.print(f"calibration: no threshold of {statistic} meets both criteria on this prompt set",
                  markup=False, highlight=False)
    content_scores = torch.cat([s.candidate_content_scores for s in scores])
    info = dict(model.lab_source)
    candidates = _candidate_figures(res, scores, long_scores, held_scores, held_long)
    data = {
        "kind": "calibrate-sinks",
        "model": info,
        "environment": environment(model),
        "criteria": {"position0_min_rate": POSITION0_MIN_RATE, "content_max_rate": CONTENT_MAX_RATE},
        "min_observers": MIN_OBSERVING_QUERIES,
        "statistic": statistic,
        "statistics": list(STATISTICS),
        "candidates": candidates,
        "chosen_threshold": chosen,
        "current_default_threshold": choice.default_threshold,
        "feasible_thresholds": res[statistic]["feasible"],
        "n_prompts": len(scores),
        "n_content_tokens": int(content_scores.numel()),
        "position0_score_min": min(s.position0_score for s in scores),
        "content_score_max": float(content_scores.max()) if content_scores.numel() else None,
        "sweep": [{"threshold": r.threshold, "position0_flagged": r.position0_flagged, "n_prompts": r.n_prompts,
                   "content_flagged": r.content_flagged, "n_content": r.n_content,
                   "long_position0_flagged": r.long_position0_flagged, "long_n_prompts": r.long_n_prompts,
                   "long_content_flagged": r.long_content_flagged, "long_n_content": r.long_n_content,
                   "feasible": r.feasible} for r in rows],
        "trailing_fraction": TRAILING_FRACTION,
        "held_out": None if chosen is None or not held else {
            "prompts": args.held_out or f"lab/data/{HELD_OUT_SET}", "threshold": chosen,
            "short": evaluate(held_scores, chosen), "long": evaluate(held_long, chosen) if held_long else None,
            "long_n_tokens": [int(s.score.numel()) for s in held_long]},
        "long_prompts": [{"id": s.id, "n_tokens": int(s.score.numel()), "position0_score": s.position0_score,
                          "max_content_score": float(s.candidate_content_scores.max()),
                          "n_content": int(s.candidate_content_scores.numel()),
                          "content_flagged_at_chosen": (int((s.candidate_content_scores > chosen).sum())
                                                        if chosen is not None else None),
                          "trailing_flagged_at_chosen": s.trailing_flagged(chosen) if chosen is not None else None}
                         for s in long_scores],
        "prompts": [{"id": s.id, "n_tokens": int(s.score.numel()),
                     **{f"position0_{k}": float(s.scores[k][0]) for k in STATISTICS},
                     "max_content_score": (float(s.candidate_content_scores.max())
                                           if s.candidate_content_scores.numel() else None),
                     "n_content": int(s.candidate_content_scores.numel())} for s in scores],
    }

    # 4. The profile's calibration and the rule across profiles, computed here and written after
    #    the report (step 6), so a run that fails leaves neither half-written.
    profile_file = None
    feasible = recorded_feasible(PROFILES)
    if save:
        profile_file = {"profile": args.model, "model": info, "statistic": statistic,
                        "thresholds": {k: v["chosen"] for k, v in candidates.items()}, "candidates": candidates,
                        "criteria": data["criteria"], "n_prompts": len(scores), "n_held_out": len(held_scores),
                        "long_lengths": list(lengths), "calibrated_at": data["environment"].get("created"),
                        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
        profile_file = json.loads(json.dumps(to_jsonable(profile_file), allow_nan=False))
        feasible[args.model] = {k: list(v["feasible_thresholds"] or []) for k, v in candidates.items()}
    elif args.save and args.model not in PROFILES:
        err.print(f"calibrate-sinks: {args.model!r} is not a named profile; its calibration stays in the report "
                  "(commands run it with the default threshold)", markup=False, highlight=False)
    data["cross_model"] = cross = _cross_model(err, feasible, choice)
    data["saved_to"] = str(user_dir()) if save else None
    if cross is not None and cross.get("moves_from") and not save:
        err.print(f"calibrate-sinks: over the calibrated profiles ({', '.join(cross['profiles'])}) the rule chooses "
                  f"{cross['chosen']!r} (default {cross['default_threshold']:g}) but {choice.path} holds "
                  f"{choice.statistic!r} (default {choice.default_threshold:g}); run with the packaged prompts and "
                  "without --no-save to write it", markup=False, highlight=False)

    # 5. Show and write.
    stdout_console().print(calibration_table(data))
    with report_dir(args.out, "calibrate-sinks", info["model"]) as rd:
        rd.write_json("calibration.json", data)
        rd.write_csv("sweep.csv", data["sweep"])
        rd.write_csv("prompts.csv", data["prompts"])
        rd.write_text("summary.md", calibration_markdown(data) + candidates_markdown(data))
        plot_sweep(data, rd.file("sweep.png"))
    stdout_console().print(f"report: {rd.final}", markup=False, highlight=False, soft_wrap=True)

    # 6. Save the calibration for the commands that read it (the user's folder, never the package).
    if save:
        try:
            _save(err, args.model, profile_file, cross, choice.statistic, data["environment"].get("created"))
        except OSError as exc:
            raise ReportWriteError(f"the report is complete in {str(rd.final)!r}, but the calibration could not be "
                                   f"saved under {str(user_dir())!r} ({exc.strerror or exc}); set "
                                   "LAB_CALIBRATION_DIR to a writable folder and re-run") from exc
    return 0
