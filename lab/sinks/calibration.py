"""Calibrating the sink threshold on a prompt set (model-facing; no rendering).

Criteria: at the chosen threshold, position 0
is flagged on at least 95 % of prompts and fewer than 1 % of content tokens are
flagged, both on the short prompt set and on long prompts (:func:`long_prompts`: the
set's text repeated to a few thousand tokens, where a baseline blind to the number of
observing queries flags the trailing positions). The sweep keeps raw counts per
threshold (flagged prompts, flagged content tokens and their totals, short and long
apart); rates are derived from them. :func:`choose_threshold` takes the middle of
the feasible range of grid values (those meeting both criteria), which leaves the
largest margin to both criteria on prompts unlike the calibration set.

Every candidate statistic of :data:`lab.sinks.candidates.STATISTICS` is swept on the same
prefills (each on its own grid, :data:`GRIDS`), so each model's report holds every
candidate's counts. :func:`choose_statistic` is the rule that picks the detector's
statistic across models, stated before the four profiles' figures were all in:
**the first candidate, in the order of** :data:`lab.sinks.candidates.STATISTICS` **(least
departure from the SmolLM2-calibrated detector first), that has a feasible threshold
on the calibration prompts (short and long) of every calibrated profile**; its
per-model thresholds go to ``lab/sinks/calibrations/<profile>.json`` and the middle of
the thresholds feasible on all of them (else the smallest per-model threshold)
becomes the default for uncalibrated models. ``lab calibrate-sinks`` writes the
choice and the default to ``lab/sinks/calibrations/choice.json``; the layout of both
files and their one loader are in :mod:`lab.sinks.profiles`.
Held-out prompts never enter the choice: they check it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from lab.files import MAX_PROMPT_SET_BYTES, read_text
from lab.prompts import CalibrationPrompt, jsonl_lines
from lab.ranges import LONG_LENGTH
from lab.sinks.candidates import STATISTICS
from lab.sinks.capture import capture_received
from lab.sinks.prefill import MIN_OBSERVING_QUERIES, candidate_scores
from lab.sinks.profiles import load_choice
from lab.sinks.structure import ROLE_CONTENT, analyze_structure

logger = logging.getLogger(__name__)

# The detector's purpose: position 0, the sink every model has, must not be missed, while
# content tokens are rarely flagged.
POSITION0_MIN_RATE = 0.95   # position 0 flagged on >= 95 % of prompts
CONTENT_MAX_RATE = 0.01     # < 1 % of content tokens flagged
THRESHOLD_GRID = tuple(x / 4 for x in range(4, 81))  # 1.0 .. 20.0, step 0.25
RATE_GRID = tuple(x / 100 for x in range(1, 100))  # sink rate: 0.01 .. 0.99, step 0.01
GRIDS = {name: (RATE_GRID if name == "sink_rate" else THRESHOLD_GRID) for name in STATISTICS}
GRID_STEP = {name: grid[1] - grid[0] for name, grid in GRIDS.items()}
# Packaged prompt sets: the calibration set, and a held-out set the threshold is checked
# on (also the statistical tier's set, tests/statistical/test_sinks_real.py).
CALIBRATION_SET = "calibration_prompts.jsonl"
HELD_OUT_SET = "sinks_held_out.jsonl"
# Long calibration prompts: 2,048 tokens is long enough for the recency artifact to show
# on SmolLM2 (a baseline blind to the number of observers flags 22 trailing positions)
# while one prefill still takes about a minute on 2 CPU cores.
LONG_LENGTHS = (2048,)
# "Trailing" positions, for the report: those seen by fewer than this share of the queries.
TRAILING_FRACTION = 0.1


def _json_kind(value: Any) -> str:
    """``value``'s JSON type in words (``"a list"``), for an error that must not echo a huge value."""
    kinds = ((bool, "true/false"), (str, "a string"), ((int, float), "a number"), (list, "a list"),
             (dict, "an object"))
    return "null" if value is None else next((k for t, k in kinds if isinstance(value, t)), type(value).__name__)


def _prompt_row_problem(row: Any) -> str | None:
    """What is wrong with one parsed line of a prompt set, or None: the fields every reader relies on."""
    if not isinstance(row, dict):
        return f"is not a JSON object (it is {_json_kind(row)})"
    for key in ("id", "prompt"):
        if not isinstance(row.get(key), str) or not row[key]:
            got = "missing" if key not in row else "empty" if row[key] == "" else _json_kind(row[key])
            return f"needs a non-empty string {key!r}, got {got}"
    if not isinstance(row.get("system"), (str, type(None))):
        return f"needs a string or null 'system', got {_json_kind(row['system'])}"
    return None


def load_prompts(path: str | Path | None = None, *, packaged: str = CALIBRATION_SET,
                 arg: str = "prompts") -> list[CalibrationPrompt]:
    """Read a JSONL prompt set (``{"id", "prompt", "system"?}`` per line); default: the packaged ``packaged`` set.

    ``arg`` names the argument ``path`` came from in a read error (``held_out``: the CLI says ``--held-out``).

    Raises:
        ValueError: the file is refused (:func:`lab.files.read_text`: no such file, not a regular file,
            larger than :data:`lab.files.MAX_PROMPT_SET_BYTES`, not UTF-8, naming it and the line); a line
            is not valid JSON (a number past Python's digit limit included), is not an object, or its
            ``id``/``prompt`` is not a non-empty string or its ``system`` not a string or null (naming the
            line and the field); ids repeat; the file is empty.
    """
    if path is None:
        text = resources.files("lab").joinpath(f"data/{packaged}").read_text(encoding="utf-8")
        where = f"lab/data/{packaged}"
    else:
        where = str(path)
        text = read_text(path, MAX_PROMPT_SET_BYTES, f"{arg}={where!r}")
    out, seen = [], set()
    for n, line in enumerate(jsonl_lines(text), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as exc:  # a JSONDecodeError, an int past the digit limit, deep nesting
            raise ValueError(f"{where}:{n} is not valid JSON: {exc}") from None
        problem = _prompt_row_problem(row)
        if problem is not None:
            raise ValueError(f"{where}:{n} {problem}")
        if row["id"] in seen:
            raise ValueError(f"{where}:{n} repeats id {row['id']!r}")
        seen.add(row["id"])
        out.append(CalibrationPrompt(id=row["id"], prompt=row["prompt"], system=row.get("system")))
    if not out:
        raise ValueError(f"{where} holds no prompts")
    return out


def long_prompts(tokenizer: Any, lengths: Sequence[int] = LONG_LENGTHS,
                 prompts: Sequence[CalibrationPrompt] | None = None) -> list[CalibrationPrompt]:
    """Long, uniform prompts: the prompt set's text joined and repeated to about ``length`` tokens each.

    Raises:
        ValueError: a length below 64 tokens (:data:`lab.ranges.LONG_LENGTH`).
    """
    if any(n < LONG_LENGTH.lo for n in lengths):
        raise ValueError(f"long lengths={list(lengths)!r} must each be >= {LONG_LENGTH.lo} tokens")
    text = " ".join(p.prompt for p in (prompts or load_prompts()))
    piece = tokenizer(text, add_special_tokens=False)["input_ids"]
    out = []
    for n in lengths:
        ids = (piece * (n // len(piece) + 1))[:n]
        out.append(CalibrationPrompt(id=f"long-{n}", prompt=tokenizer.decode(ids)))
    return out


@dataclass(frozen=True)
class PromptScores:
    """Threshold-independent scores of one prompt, for every candidate statistic.

    Attributes:
        id: Prompt id.
        scores: ``{statistic: float32 [S]}`` (:func:`lab.sinks.prefill.candidate_scores`).
        observed: Bool ``[S]``.
        content: Bool ``[S]``: content positions.
        statistic: The statistic the properties below read (default: the packaged
            choice, :func:`lab.sinks.profiles.load_choice`).
    """

    id: str
    scores: dict[str, torch.Tensor]
    observed: torch.Tensor
    content: torch.Tensor
    statistic: str = field(default_factory=lambda: load_choice().statistic)

    def using(self, statistic: str) -> "PromptScores":
        """The same prompt read through another statistic."""
        if statistic not in self.scores:
            raise ValueError(f"statistic={statistic!r} was not scored (have {', '.join(self.scores)})")
        return PromptScores(self.id, self.scores, self.observed, self.content, statistic)

    @property
    def score(self) -> torch.Tensor:
        """Float32 ``[S]``: the scores of ``statistic``."""
        return self.scores[self.statistic]

    @property
    def position0_score(self) -> float:
        return float(self.score[0])

    @property
    def candidate_content_scores(self) -> torch.Tensor:
        """Scores of content positions that may be flagged (observed)."""
        return self.score[self.content & self.observed]

    def trailing_flagged(self, threshold: float) -> int:
        """Observed content positions seen by < TRAILING_FRACTION of the queries with a score > threshold."""
        s = self.score.numel()
        trailing = torch.arange(s, 0, -1) < TRAILING_FRACTION * s
        return int((self.content & self.observed & trailing & (self.score > threshold)).sum())


def score_prompts(model: Any, tokenizer: Any, prompts: Sequence[CalibrationPrompt], *,
                  min_observers: int = MIN_OBSERVING_QUERIES,
                  progress: Callable[[int, int, str], None] | None = None) -> list[PromptScores]:
    """Run the streaming capture on every prompt and keep every candidate's scores.

    Each :class:`PromptScores` reads the packaged choice's statistic (:func:`lab.sinks.profiles.load_choice`).
    """
    statistic = load_choice().statistic
    out = []
    for i, p in enumerate(prompts):
        if progress is not None:
            progress(i, len(prompts), p.id)
        structure = analyze_structure(tokenizer, p.messages())
        per_head = capture_received(model, structure.input_ids).per_head
        cands = candidate_scores(per_head, structure.roles, min_observers=min_observers)
        s = len(structure.roles)
        content = torch.tensor([r == ROLE_CONTENT for r in structure.roles])
        out.append(PromptScores(id=p.id, scores={k: cands[k] for k in STATISTICS}, statistic=statistic,
                                observed=torch.arange(s, 0, -1) >= min(min_observers, s), content=content))
    return out


@dataclass(frozen=True)
class SweepRow:
    """Raw counts at one threshold (``long_*``: the long prompts, 0 when none were scored)."""

    threshold: float
    position0_flagged: int
    n_prompts: int
    content_flagged: int
    n_content: int
    long_position0_flagged: int = 0
    long_n_prompts: int = 0
    long_content_flagged: int = 0
    long_n_content: int = 0

    @property
    def position0_rate(self) -> float:
        """Share of the prompts whose position 0 is flagged."""
        return self.position0_flagged / self.n_prompts

    @property
    def content_rate(self) -> float:
        """Share of the observed content tokens flagged (0 when none was observed)."""
        return self.content_flagged / self.n_content if self.n_content else 0.0

    @property
    def long_position0_rate(self) -> float:
        """:attr:`position0_rate` on the long prompts (0 when none was scored)."""
        return self.long_position0_flagged / self.long_n_prompts if self.long_n_prompts else 0.0

    @property
    def long_content_rate(self) -> float:
        """:attr:`content_rate` on the long prompts (0 when none was observed)."""
        return self.long_content_flagged / self.long_n_content if self.long_n_content else 0.0

    @property
    def feasible(self) -> bool:
        short = self.position0_rate >= POSITION0_MIN_RATE and self.content_rate < CONTENT_MAX_RATE
        if not self.long_n_prompts:
            return short
        return (short and self.long_position0_rate >= POSITION0_MIN_RATE
                and self.long_content_rate < CONTENT_MAX_RATE)


def sweep(scores: Sequence[PromptScores], thresholds: Sequence[float] = THRESHOLD_GRID,
          long_scores: Sequence[PromptScores] = ()) -> list[SweepRow]:
    """Counts of flagged position-0s and content tokens at each threshold, short and long prompts apart.

    Raises:
        ValueError: no scores or no thresholds.
    """
    if not scores or not thresholds:
        raise ValueError("sweep needs at least one prompt's scores and one threshold")
    pos0 = torch.tensor([s.position0_score for s in scores])
    content = torch.cat([s.candidate_content_scores for s in scores])
    long_pos0 = torch.tensor([s.position0_score for s in long_scores])
    long_content = torch.cat([s.candidate_content_scores for s in long_scores]) if long_scores else torch.empty(0)
    return [SweepRow(threshold=float(t), position0_flagged=int((pos0 > t).sum()), n_prompts=len(scores),
                     content_flagged=int((content > t).sum()), n_content=int(content.numel()),
                     long_position0_flagged=int((long_pos0 > t).sum()), long_n_prompts=len(long_scores),
                     long_content_flagged=int((long_content > t).sum()), long_n_content=int(long_content.numel()))
            for t in thresholds]


def evaluate(scores: Sequence[PromptScores], threshold: float) -> dict[str, int]:
    """Raw counts at one threshold: position 0 flagged, content flagged, trailing content flagged."""
    content = [s.candidate_content_scores for s in scores]
    return {"position0_flagged": sum(int(s.position0_score > threshold) for s in scores), "n_prompts": len(scores),
            "content_flagged": sum(int((c > threshold).sum()) for c in content),
            "n_content": sum(int(c.numel()) for c in content),
            "trailing_flagged": sum(s.trailing_flagged(threshold) for s in scores)}


def _middle(values: Sequence[float], step: float) -> float:
    """Middle of ``[min, max]`` rounded to the grid ``step``."""
    return round((min(values) + max(values)) / 2 / step) * step


def choose_threshold(rows: Sequence[SweepRow], step: float = 0.25) -> float:
    """Middle of the feasible threshold range, rounded to the grid ``step`` (0.25 for z, 0.01 for a rate).

    Raises:
        ValueError: no threshold on the grid meets both criteria.
    """
    feasible = [r.threshold for r in rows if r.feasible]
    if not feasible:
        raise ValueError("no threshold meets both criteria (position 0 >= 95 %, content < 1 %); "
                         "the detector cannot separate sinks on this prompt set")
    return round(_middle(feasible, step), 6)


def sweep_candidates(scores: Sequence[PromptScores], long_scores: Sequence[PromptScores] = ()) -> dict[str, dict]:
    """Per candidate statistic: its sweep rows, feasible thresholds and chosen threshold (None if infeasible)."""
    out = {}
    for name in STATISTICS:
        rows = sweep([s.using(name) for s in scores], GRIDS[name], [s.using(name) for s in long_scores])
        feasible = [r.threshold for r in rows if r.feasible]
        out[name] = {"rows": rows, "feasible": feasible,
                     "chosen": choose_threshold(rows, GRID_STEP[name]) if feasible else None}
    return out


def choose_statistic(feasible: dict[str, dict[str, Sequence[float]]]) -> tuple[str, float | None]:
    """The rule of the module docstring across models: ``(statistic, default threshold or None)``.

    Args:
        feasible: ``{model: {statistic: feasible thresholds on its calibration prompts}}``.

    Returns:
        The first statistic of :data:`lab.sinks.candidates.STATISTICS` feasible on every model, and
        the default threshold for uncalibrated models: the middle of the thresholds
        feasible on all of them, or, when no single threshold is, the smallest of the
        models' own thresholds (the middle of each one's range): missing position 0 is
        the failure this detector exists to avoid, so an uncalibrated model errs toward
        flagging (and says it is not calibrated).

    Raises:
        ValueError: no model given, or no statistic is feasible on every model.
    """
    if not feasible:
        raise ValueError("choose_statistic needs at least one model's calibration")
    for name in STATISTICS:
        per_model = [set(f.get(name) or ()) for f in feasible.values()]
        if all(per_model):
            common = set.intersection(*per_model)
            if common:
                return name, round(_middle(sorted(common), GRID_STEP[name]), 6)
            return name, round(min(_middle(sorted(f), GRID_STEP[name]) for f in per_model), 6)
    raise ValueError(f"no candidate statistic is feasible on every model ({', '.join(feasible)})")
