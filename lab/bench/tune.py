"""``lab bench --tune``: measure the candidate draft set-ups here and choose the fastest.

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
from typing import Any

from lab.bench.run import BenchConfig
from lab.sampling import SamplingConfig
from lab.speculative.draft_dtypes import PER_PASS_ALIAS
from lab.speculative.setups import DraftSetup

TUNE_GAMMAS = (3, 4, 5)
TUNE_ADAPTIVE = ("pmin:0.6",)  # llama.cpp's draft-confidence stop at the bench's usual threshold
TUNE_DYNAMIC = ("dynamic:4:12",)  # the bench's --levers policy
TUNE_DTYPES = ("bfloat16", PER_PASS_ALIAS)  # beside the draft's own dtype (a separate draft model only)
TUNE_SAMPLING = SamplingConfig(temperature=0.7, top_p=0.9)  # the seed's sampling mode
TUNE_MAX_NEW_TOKENS, TUNE_REPEATS = 48, 2
TUNE_HUMANEVAL = "tuning:2"
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


def setup_of(name: str, method: dict[str, Any]) -> DraftSetup | None:
    """The :class:`DraftSetup` a bench method ran, or None for a method that is not a candidate
    (the target alone, transformers, prompt lookup, the no-cache loop)."""
    if not name.startswith("speculative ") or "no-cache" in name or "gamma" not in method:
        return None
    dtype = re.search(r"draft=(\S+)", name)
    policy = method.get("gamma_policy")
    return DraftSetup(draft_dtype=dtype.group(1) if dtype else None, gamma=int(method["gamma"]),
                      adaptive=method.get("adaptive"),
                      dynamic=policy if policy and policy.startswith("dynamic") else None)


def _median(method: dict[str, Any], figure: str) -> float:
    value = ((method.get("per_repeat") or {}).get(figure) or {}).get("median")
    return float(value) if value is not None else float("nan")


def choose(benches: dict[str, dict[str, Any]]) -> tuple[DraftSetup, dict[str, Any]]:
    """The winning set-up and the figures behind the choice.

    Args:
        benches: ``{"greedy": bench, "sampling": bench}``, JSON-ready :func:`lab.bench.run.run_bench`
            results of :func:`tune_configs`.

    Returns:
        ``(setup, measured)``: ``measured`` has ``rule``, ``winner`` (method name) and per
        candidate its median end-to-end and decode-only speedups per mode and its ``score``.

    Raises:
        ValueError: no candidate has a finite speedup in every mode.
    """
    modes = list(benches)
    names = [n for n, m in benches[modes[0]]["methods"].items() if setup_of(n, m) is not None]
    candidates: dict[str, dict[str, Any]] = {}
    for name in names:
        row: dict[str, Any] = {"setup": setup_of(name, benches[modes[0]]["methods"][name]).as_dict()}
        speedups = []
        for mode in modes:
            m = benches[mode]["methods"].get(name, {})
            row[f"{mode}_e2e_speedup"] = _median(m, "e2e_speedup")
            row[f"{mode}_decode_speedup"] = _median(m, "decode_speedup")
            row[f"{mode}_alpha"] = m.get("alpha")
            speedups.append(row[f"{mode}_e2e_speedup"])
        ok = all(math.isfinite(s) and s > 0 for s in speedups)
        row["score"] = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if ok else float("nan")
        candidates[name] = row
    ranked = sorted((n for n in candidates if math.isfinite(candidates[n]["score"])),
                    key=lambda n: candidates[n]["score"], reverse=True)
    if not ranked:
        raise ValueError("no candidate set-up has a finite speedup in both modes; nothing to choose")
    winner = ranked[0]
    return (setup_of(winner, benches[modes[0]]["methods"][winner]),
            {"rule": SCORE_RULE, "winner": winner, "score": candidates[winner]["score"],
             "beats_target_alone": candidates[winner]["score"] > 1.0, "ranking": ranked, "candidates": candidates})
