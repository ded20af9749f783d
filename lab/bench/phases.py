"""End-to-end and decode-only speedups, per prompt group, from timed runs.

Every method of ``lab bench`` is timed end to end (prefill included) and at the
moment its first new token(s) exist, so each run splits into two phases:

* **prefill phase**: from the call to the first committed new token(s). For the
  target alone that is the prompt's forward (its logits give token 1); for the
  lab's speculative loop it is the target's prefill plus the first round (the
  draft's own prefill, its first draft, the first verify), which commits
  ``n_first`` >= 1 tokens at once; for transformers' ``generate`` (alone or
  assisted) it is the time of the streamer's first ``put`` after the prompt
  (:class:`FirstTokenClock`), with the tokens that ``put`` carried.
* **decode phase**: the rest, ``time_s - first_token_s`` seconds for
  ``n_tokens - n_first`` tokens.

End-to-end speedup of a method over the baseline = (sum of its tokens / sum of its
times) / (the same for the baseline), over the runs of a group; decode-only
speedup = the same ratio of decode-phase tokens/s. Pure functions over plain
records, no model code.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Mapping, Sequence

from lab.bench.results import Spread


class FirstTokenClock:
    """A transformers streamer that records when the first new tokens arrive.

    ``generate(streamer=clock)`` calls :meth:`put` once with the prompt ids and then
    once per emitted chunk (one token per step alone; the accepted tokens of a round
    in assisted generation). Make the clock right before ``generate``: it starts then.

    Attributes:
        first_token_s: Seconds from the clock's making to the first new-token ``put``; None before it.
        n_first: Tokens in that first chunk.
    """

    def __init__(self) -> None:
        self._t0 = time.perf_counter()
        self._puts = 0
        self.first_token_s: float | None = None
        self.n_first = 0

    def elapsed(self) -> float:
        """Seconds since the clock was made."""
        return time.perf_counter() - self._t0

    def first(self, n: int) -> None:
        """Mark ``n`` tokens committed now, if none were before (a loop's round callback, not a streamer)."""
        if self.first_token_s is None:
            self.first_token_s, self.n_first = self.elapsed(), n

    def put(self, value: Any) -> None:
        self._puts += 1
        if self._puts == 2:  # the first put is the prompt
            self.first_token_s, self.n_first = self.elapsed(), int(value.numel())  # batch size 1: [1, k] or [k]

    def end(self) -> None:
        pass


def phase_totals(runs: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Summed tokens and seconds of both phases over runs with keys ``n_tokens``,
    ``time_s``, ``first_token_s`` and ``n_first`` (runs with ``first_token_s`` None count
    end to end only).

    Raises:
        ValueError: a run whose first-token time exceeds its total time or whose
            ``n_first`` exceeds its tokens (a timing bug, never a result).
    """
    tot = {"tokens": 0.0, "time_s": 0.0, "decode_tokens": 0.0, "decode_s": 0.0, "n_phased": 0.0}
    for r in runs:
        tot["tokens"] += r["n_tokens"]
        tot["time_s"] += r["time_s"]
        first = r.get("first_token_s")
        if first is None:
            continue
        if not 0.0 <= first <= r["time_s"] or not 0 <= r["n_first"] <= r["n_tokens"]:
            raise ValueError(f"run {dict(r)!r}: first_token_s / n_first outside [0, time_s] / [0, n_tokens]")
        tot["decode_tokens"] += r["n_tokens"] - r["n_first"]
        tot["decode_s"] += r["time_s"] - first
        tot["n_phased"] += 1
    return tot


def _rate(tokens: float, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else float("nan")


def group_speedups(runs: Sequence[Mapping[str, Any]], baseline: str) -> dict[str, dict[str, dict[str, float]]]:
    """End-to-end and decode-only tokens/s and speedups per prompt group and method.

    Args:
        runs: Records with ``method``, ``group``, ``n_tokens``, ``time_s``,
            ``first_token_s`` (seconds, None = not measured) and ``n_first``.
        baseline: The method every speedup divides by (``"target-only (lab loop)"``).

    Returns:
        ``{group: {method: {"e2e_tokens_per_s", "decode_tokens_per_s", "e2e_speedup",
        "decode_speedup", "prefill_phase_s" (mean per run), "n_runs"}}}``, and a group
        ``"all"`` over every run. A figure that cannot be formed (no phase times, no
        baseline run in the group) is NaN.
    """
    groups = ["all"] + list(dict.fromkeys(r["group"] for r in runs))
    out: dict[str, dict[str, dict[str, float]]] = {}
    for g in groups:
        sel = [r for r in runs if g == "all" or r["group"] == g]
        methods = list(dict.fromkeys(r["method"] for r in sel))
        tots = {m: phase_totals(r for r in sel if r["method"] == m) for m in methods}
        base = tots.get(baseline)
        base_e2e = _rate(base["tokens"], base["time_s"]) if base else float("nan")
        base_dec = _rate(base["decode_tokens"], base["decode_s"]) if base and base["n_phased"] else float("nan")
        rows = {}
        for m, t in tots.items():
            n_runs = sum(1 for r in sel if r["method"] == m)
            e2e = _rate(t["tokens"], t["time_s"])
            dec = _rate(t["decode_tokens"], t["decode_s"]) if t["n_phased"] == n_runs else float("nan")
            prefill = (t["time_s"] - t["decode_s"]) / n_runs if t["n_phased"] == n_runs else float("nan")
            rows[m] = {"e2e_tokens_per_s": e2e, "decode_tokens_per_s": dec, "e2e_speedup": e2e / base_e2e,
                       "decode_speedup": dec / base_dec, "prefill_phase_s": prefill, "n_runs": n_runs}
        out[g] = rows
    return out


REPEAT_FIGURES = ("e2e_tokens_per_s", "decode_tokens_per_s", "e2e_speedup", "decode_speedup")


def repeat_spread(runs: Sequence[Mapping[str, Any]], baseline: str) -> dict[str, dict[str, dict[str, float]]]:
    """Per method, min / median / max over repeats of each figure of :data:`REPEAT_FIGURES`.

    Each repeat's figures are :func:`group_speedups` over that repeat's runs (all prompts
    pooled), so a speedup divides by the baseline's figure of the same repeat (the same
    prompts, seeds and machine load). As the seed's tables report their runs.

    Args:
        runs: Records as :func:`group_speedups` takes, plus ``repeat`` (int).
        baseline: The method every speedup divides by.

    Returns:
        ``{method: {figure: {"min", "median", "max"}}}``.
    """
    per_method: dict[str, dict[str, list[float]]] = {}
    for rep in sorted({r["repeat"] for r in runs}):
        rows = group_speedups([r for r in runs if r["repeat"] == rep], baseline)["all"]
        for method, row in rows.items():
            figs = per_method.setdefault(method, {f: [] for f in REPEAT_FIGURES})
            for f in REPEAT_FIGURES:
                figs[f].append(row[f])
    return {m: {f: Spread.of(v).as_dict() for f, v in figs.items()} for m, figs in per_method.items()}
