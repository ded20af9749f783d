"""``lab bench-tune``: measure the candidate draft set-ups here and choose the fastest.

The candidates are the bench's levers combined (:func:`tune_configs`): the draft in its
own dtype and, for a separate draft model, cast to bfloat16 and per pass
(``float32:bfloat16``), each at every gamma of the sweep; the ``pmin`` draft-confidence
stop and a dynamic draft length at the largest gamma, with every dtype. Each runs in
**greedy** and in **sampling** mode (the seed's temperature 0.7, top-p 0.9), on the bench's
**tuning** prompts only (code prompts and HumanEval problems of the tuning split,
:mod:`lab.bench.prompt_split`; the held-back split certifies a choice and is never tuned on).

The winner (:func:`choose`) has the highest geometric mean, over the two modes, of its
median end-to-end speedup over the lab's target-only loop (median over repeats,
:func:`lab.bench.phases.repeat_spread`): end to end, because that is what a user waits
for (prefill and the draft's prefill included); both modes, because users run both.
:mod:`lab.tuning` writes it for this machine; ``lab speculate`` reads it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from lab.bench.levers import CODE_PROMPTS
from lab.bench.prompt_split import TUNE_HUMANEVAL, TUNE_MAX_NEW_TOKENS, TUNE_REPEATS, PromptSet, parse_humaneval
from lab.bench.results import BenchResult, MethodFigures
from lab.bench.run import BenchConfig
from lab.kinds.bench import Bench, Config, TuneReport
from lab.provenance import Environment, ModelSource
from lab.reports import to_jsonable
from lab.sampling import SamplingConfig
from lab.speculative.draft_dtypes import PER_PASS_ALIAS
from lab.speculative.setups import DraftSetup
from lab.tuning import DRAFT_SETUP, machine_key, write_tuned
from lab.typed import from_json

TUNE_GAMMAS = (3, 4, 5)
TUNE_ADAPTIVE = ("pmin:0.6",)  # llama.cpp's draft-confidence stop at the bench's usual threshold
TUNE_DYNAMIC = ("dynamic:4:12",)  # the bench's --levers policy
TUNE_DTYPES = ("bfloat16", PER_PASS_ALIAS)  # beside the draft's own dtype (a separate draft model only)
TUNE_SAMPLING = SamplingConfig(temperature=0.7, top_p=0.9)  # the seed's sampling mode
SCORE_RULE = ("the highest geometric mean over greedy and sampling of the median (over repeats) end-to-end "
              "speedup over the lab's target-only loop, on the tuning prompts")


def tune_configs(*, model_draft: bool, gammas: tuple[int, ...] = TUNE_GAMMAS,
                 max_new_tokens: int = TUNE_MAX_NEW_TOKENS, repeats: int = TUNE_REPEATS,
                 seed: int = 0) -> dict[str, BenchConfig]:
    """The two schedules, ``{"greedy": ..., "sampling": ...}``, with the same candidates.

    Args:
        model_draft: Whether the draft is a separate model (only then are dtypes candidates).
        gammas, max_new_tokens, repeats, seed: as :class:`~lab.bench.run.BenchConfig`.
    """
    common = dict(gammas=tuple(gammas), adaptive=TUNE_ADAPTIVE, dynamic=TUNE_DYNAMIC,
                  draft_dtypes=TUNE_DTYPES if model_draft else (), dtype_sweep=True, assisted=False,
                  max_new_tokens=max_new_tokens, repeats=repeats, seed=seed)
    return {"greedy": BenchConfig(**common), "sampling": BenchConfig(**common, sampling=TUNE_SAMPLING)}


def setup_of(name: str, method: MethodFigures | None) -> DraftSetup | None:
    """The :class:`DraftSetup` a bench method ran, or None for a method that is not a candidate
    (the target alone, transformers, prompt lookup, the no-cache loop)."""
    spec = method.speculative if method is not None else None
    if not name.startswith("speculative ") or "no-cache" in name or spec is None:
        return None
    dtype = re.search(r"draft=(\S+)", name)
    policy = spec.gamma_policy
    return DraftSetup(draft_dtype=dtype.group(1) if dtype else None, gamma=int(spec.gamma),
                      adaptive=spec.adaptive,
                      dynamic=policy if policy and policy.startswith("dynamic") else None)


def _median(method: MethodFigures | None, figure: str) -> float:
    """The median over repeats of ``figure`` (a ``per_repeat`` key); NaN when missing or not finite."""
    spread = method.per_repeat.get(figure) if method is not None else None
    return float(spread.median) if spread is not None and math.isfinite(spread.median) else float("nan")


def _alpha(method: MethodFigures | None) -> float | None:
    """A method's pooled alpha, None for one that does not draft or whose alpha is not finite."""
    if method is None or method.speculative is None or not math.isfinite(method.speculative.alpha):
        return None
    return method.speculative.alpha


def choose(benches: Mapping[str, BenchResult]) -> tuple[DraftSetup, dict[str, Any]]:
    """The winning set-up and the figures behind the choice.

    Args:
        benches: ``{"greedy": bench, "sampling": bench}``, :func:`lab.bench.run.run_bench` results of
            :func:`tune_configs`.

    Returns:
        ``(setup, measured)``: ``measured`` has ``rule``, ``winner`` (method name) and per
        candidate its median end-to-end and decode-only speedups per mode and its ``score``.

    Raises:
        ValueError: no candidate has a finite speedup in every mode.
    """
    modes = list(benches)
    first = benches[modes[0]].methods
    names = [n for n, m in first.items() if setup_of(n, m) is not None]
    candidates: dict[str, dict[str, Any]] = {}
    for name in names:
        row: dict[str, Any] = {"setup": setup_of(name, first[name]).as_dict()}
        speedups = []
        for mode in modes:
            m = benches[mode].methods.get(name)
            row[f"{mode}_e2e_speedup"] = _median(m, "e2e_speedup")
            row[f"{mode}_decode_speedup"] = _median(m, "decode_speedup")
            row[f"{mode}_alpha"] = _alpha(m)
            speedups.append(row[f"{mode}_e2e_speedup"])
        ok = all(math.isfinite(s) and s > 0 for s in speedups)
        row["score"] = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if ok else float("nan")
        candidates[name] = row
    ranked = sorted((n for n in candidates if math.isfinite(candidates[n]["score"])),
                    key=lambda n: candidates[n]["score"], reverse=True)
    if not ranked:
        raise ValueError("no candidate set-up has a finite speedup in both modes; nothing to choose")
    winner = ranked[0]
    return (setup_of(winner, first[winner]),
            {"rule": SCORE_RULE, "winner": winner, "score": candidates[winner]["score"],
             "beats_target_alone": candidates[winner]["score"] > 1.0, "ranking": ranked, "candidates": candidates})


def tune_prompts(humaneval: str = TUNE_HUMANEVAL) -> PromptSet:
    """The tuning prompts: the first code prompt, then the HumanEval problems of ``humaneval``.

    Raises:
        ValueError: a bad spec, or one outside the tuning split (the held-back problems certify
            a choice and are never tuned on).
    """
    if parse_humaneval(humaneval)[0] != "tuning":
        raise ValueError(f"--humaneval {humaneval!r}: tuning runs on the tuning split only (the held-back "
                         "problems certify a choice and are never tuned on)")
    return PromptSet.of(CODE_PROMPTS[:1], humaneval)


@dataclass(frozen=True)
class TuneOutcome:
    """What a tuning run chose and where it was written.

    Attributes:
        setup: The winning :class:`DraftSetup`.
        measured: :func:`choose`'s figures, with ``busy`` per mode (a busy machine's timings).
        machine: :func:`lab.tuning.machine_key` of this machine.
        path: The tuning file it goes to (:func:`save_tuned`).
    """

    setup: DraftSetup
    measured: dict[str, Any]
    machine: dict[str, Any]
    path: Path


def tune(benches: Mapping[str, BenchResult], *, model: str, threads: int) -> TuneOutcome:
    """Choose the winner of the two modes' benches for this machine; :func:`save_tuned` writes it (after the
    report, so that a tuning file that cannot be written loses no measurement).

    Args:
        benches: ``{"greedy": ..., "sampling": ...}`` of :func:`tune_configs`.
        model: The ``--model`` the set-up is for.
        threads: Torch threads (part of the machine's key).

    Raises:
        ValueError: no candidate has a finite speedup in every mode.
    """
    setup, measured = choose(benches)
    machine = machine_key(threads)
    measured["busy"] = {mode: b.machine_load is not None and b.machine_load.busy for mode, b in benches.items()}
    return TuneOutcome(setup=setup, measured=measured, machine=machine, path=DRAFT_SETUP.path(model))


def save_tuned(outcome: TuneOutcome, *, model: str, draft: str) -> Path:
    """Write ``outcome``'s set-up to its tuning file (``outcome.path``), replacing any earlier one.

    Raises:
        OSError: the tuning file cannot be written (a folder in its place, a full disk, no permission).
    """
    return write_tuned(DRAFT_SETUP, model, {"draft": draft, "setup": outcome.setup.as_dict()}, outcome.machine,
                       outcome.measured)


def tune_report(*, model: ModelSource, draft: str, prompts: PromptSet, torch_threads: int,
                environment: Environment, configs: Mapping[str, BenchConfig], outcome: TuneOutcome,
                benches: Mapping[str, BenchResult]) -> TuneReport:
    """``lab bench-tune``'s report (:class:`lab.kinds.bench.TuneReport`, what ``report.json`` holds).

    Args:
        model: The target's provenance.
        draft: The ``--draft`` spec.
        prompts: The :func:`tune_prompts` it ran on.
        torch_threads: Torch's intra-op threads.
        environment: :func:`lab.reports.environment_record` when the report is built.
        configs: :func:`tune_configs`.
        outcome: The choice and where it goes (:func:`tune`); ``measured`` kept as measured.
        benches: ``{"greedy": ..., "sampling": ...}``, each as the report holds a bench (its figures JSON-ready:
            non-finite as None).
    """
    return TuneReport(model=model, draft=draft, **prompts.as_report(), torch_threads=torch_threads,
                      machine=outcome.machine, environment=environment,
                      configs={mode: from_json(Config, to_jsonable(c)) for mode, c in configs.items()},
                      winner=outcome.setup.as_dict(), tuning_file=str(outcome.path), measured=outcome.measured,
                      **{mode: from_json(Bench, b.to_json()) for mode, b in benches.items()})
