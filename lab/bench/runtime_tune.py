"""``lab bench-tune-runtime``: which runtime and weights run a GGUF profile's target fastest on this machine.

The candidates (:data:`CANDIDATES`) are the target alone, on the lab's own decode loop
(:func:`lab.speculative.loop.target_generate`), greedy: torch with float32 weights (the
reference), torch with the GGUF file's 4-bit codes (``q4``), and the GGUF file itself on
llama.cpp's kernels (:mod:`lab.runtime.ggml`). They run alternating in one process, the order
rotated every repeat so that a drift in machine load falls on each alike, on the tuning prompts
(:func:`lab.bench.tune.tune_prompts`; the held-back split certifies, it is never tuned on),
with the machine's load sampled around every run (:class:`lab.machine.LoadLog`).

The winner (:func:`choose_runtime`) has the highest median over repeats of its **end-to-end**
tokens/s (new tokens over prefill plus decode time, summed over the prompts of a repeat):
end to end, because that is what a user waits for; a runtime with the faster decode and a slow
prompt pass does not win on its decode alone. :func:`lab.tuning.write_tuned` writes it
for this machine; commands run it when ``--runtime`` is not typed
(:func:`lab.commands.runtime_choice.resolve_runtime`). Each candidate decodes the same greedy path of
its own weights, so the tokens of different weights may differ; they are recorded, not compared.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from lab.bench.results import Spread
from lab.provenance import MachineLoad
from lab.ranges import REPEATS

SCORE_RULE = ("the highest median over repeats of end-to-end tokens/s (new tokens over prefill + decode time, "
              "summed over the tuning prompts), the target alone on the lab's loop, greedy")
RUNTIME_TUNE_MAX_NEW_TOKENS, RUNTIME_TUNE_REPEATS = 48, 3


@dataclass(frozen=True)
class RuntimeCandidate:
    """One way to run the target: ``runtime`` (``"torch"`` / ``"llama.cpp"``) and ``weights``
    (:data:`lab.models.weights.WEIGHTS` on torch, ``"gguf"`` on llama.cpp: the file's own)."""

    runtime: str
    weights: str

    @property
    def label(self) -> str:
        return f"{self.runtime} ({self.weights})"


CANDIDATES = (RuntimeCandidate("torch", "float32"), RuntimeCandidate("torch", "q4"),
              RuntimeCandidate("llama.cpp", "gguf"))


@dataclass(frozen=True)
class RuntimeRun:
    """One timed target-alone generation.

    Attributes:
        candidate: :attr:`RuntimeCandidate.label`.
        repeat, prompt: Indices (0-based).
        n_prompt: Prompt tokens.
        n_new: New tokens (stops at an end-of-sequence id).
        total_s: Wall seconds, prefill + decode.
        prefill_s: Wall seconds of the prompt's pass (it yields the first new token).
        tokens: The new token ids.
    """

    candidate: str
    repeat: int
    prompt: int
    n_prompt: int
    n_new: int
    total_s: float
    prefill_s: float
    tokens: list[int] = field(repr=False)


@dataclass(frozen=True)
class CandidateFigures:
    """One candidate's figures: per repeat and the medians over repeats.

    Attributes:
        candidate: The label.
        end_to_end_tok_s: Per repeat, new tokens / (prefill + decode seconds), summed over the prompts.
        decode_tok_s: Per repeat, (new tokens - 1 per prompt) / decode seconds (the first token is the prefill's).
        prefill_s: Per repeat, the prompts' prefill seconds summed.
        median_end_to_end, median_decode: Medians over repeats (NaN-free: every repeat has every prompt).
    """

    candidate: str
    end_to_end_tok_s: list[float]
    decode_tok_s: list[float]
    prefill_s: list[float]
    median_end_to_end: float
    median_decode: float

    @property
    def median_prefill_s(self) -> float:
        """The middle repeat's prefill seconds; of an even count of repeats, the upper of the two middle ones."""
        return sorted(self.prefill_s)[len(self.prefill_s) // 2]


def candidate_figures(runs: Sequence[RuntimeRun]) -> dict[str, CandidateFigures]:
    """Per candidate (in first-seen order), :class:`CandidateFigures` from its runs.

    Raises:
        ValueError: no runs, or a repeat whose time is zero (nothing was timed).
    """
    if not runs:
        raise ValueError("runs=[] is empty: nothing was timed")
    out: dict[str, CandidateFigures] = {}
    for label in dict.fromkeys(r.candidate for r in runs):
        mine = [r for r in runs if r.candidate == label]
        e2e, dec, pre = [], [], []
        for rep in sorted({r.repeat for r in mine}):
            group = [r for r in mine if r.repeat == rep]
            total = sum(r.total_s for r in group)
            decode_s = sum(r.total_s - r.prefill_s for r in group)
            if total <= 0:
                raise ValueError(f"{label}, repeat {rep}: {total} s in all; nothing was timed")
            e2e.append(sum(r.n_new for r in group) / total)
            dec.append(sum(max(r.n_new - 1, 0) for r in group) / decode_s if decode_s > 0 else float("nan"))
            pre.append(sum(r.prefill_s for r in group))
        out[label] = CandidateFigures(label, e2e, dec, pre, Spread.of(e2e).median, Spread.of(dec).median)
    return out


def choose_runtime(figures: dict[str, CandidateFigures]) -> str:
    """The label with the highest median end-to-end tokens/s (:data:`SCORE_RULE`); the first listed wins a tie.

    Raises:
        ValueError: no candidates.
    """
    if not figures:
        raise ValueError("no candidates to choose from")
    return max(figures, key=lambda label: (figures[label].median_end_to_end, -list(figures).index(label)))


def alternating_order(n: int, repeat: int) -> list[int]:
    """The candidates' order in ``repeat``: ``0..n-1`` rotated by ``repeat`` (each leads once every n repeats)."""
    return [(i + repeat) % n for i in range(n)]


@dataclass(frozen=True)
class RuntimeTuneResult:
    """What ``lab bench-tune-runtime`` measured and chose.

    Attributes:
        candidates: Labels in schedule order.
        runs: Every timed run.
        figures: Per candidate, :class:`CandidateFigures`.
        winner: The chosen label; ``winner_runtime`` / ``winner_weights`` spell it out.
        rule: :data:`SCORE_RULE`.
        load: :meth:`lab.machine.LoadLog.record`.
    """

    candidates: list[str]
    runs: list[RuntimeRun]
    figures: dict[str, CandidateFigures]
    winner: str
    winner_runtime: str
    winner_weights: str
    rule: str
    load: MachineLoad

    def measured(self) -> dict[str, Any]:
        """What the tuning file keeps: each candidate's medians and per-repeat figures."""
        return {label: {k: v for k, v in asdict(f).items() if k != "candidate"} for label, f in self.figures.items()}

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_runtime_tune(generators: dict[RuntimeCandidate, Callable[[int], tuple[int, int, float, float, list[int]]]],
                     n_prompts: int, *, repeats: int, load_log: Any,
                     progress: Callable[[str], None] = lambda _: None) -> RuntimeTuneResult:
    """Time every candidate on every prompt, alternating, and choose.

    Args:
        generators: Per candidate, ``fn(prompt_index) -> (n_prompt, n_new, total_s, prefill_s, tokens)``: one
            greedy target-alone generation (warmed up by the caller).
        n_prompts: Prompts per repeat.
        repeats: Repetitions of the schedule (>= 1).
        load_log: A :class:`lab.machine.LoadLog` (samples around every run).
        progress: Called with a short text before each run.

    Raises:
        ValueError: no candidates, ``n_prompts`` or ``repeats`` below 1.
    """
    if not generators:
        raise ValueError("no candidates to time")
    if n_prompts < 1 or repeats < REPEATS.lo:  # REPEATS.lo is 1
        raise ValueError(f"n_prompts={n_prompts} and repeats={repeats} must be >= 1")
    cands = list(generators)
    runs: list[RuntimeRun] = []
    for rep in range(repeats):
        for p in range(n_prompts):
            for i in alternating_order(len(cands), rep):
                cand = cands[i]
                progress(f"repeat {rep + 1}/{repeats}, prompt {p + 1}/{n_prompts}: {cand.label}")
                with load_log.around(cand.label):
                    n_prompt, n_new, total_s, prefill_s, tokens = generators[cand](p)
                runs.append(RuntimeRun(cand.label, rep, p, n_prompt, n_new, total_s, prefill_s, tokens))
    figures = candidate_figures(runs)
    winner = choose_runtime(figures)
    chosen = next(c for c in cands if c.label == winner)
    return RuntimeTuneResult([c.label for c in cands], runs, figures, winner, chosen.runtime, chosen.weights,
                             SCORE_RULE, load_log.record())


def timed_target(model: Any, ids: Sequence[Any], max_new_tokens: int, eos: Sequence[int]):
    """``fn(prompt_index)`` for :func:`run_runtime_tune`: the lab's target-alone loop, greedy, on ``model``."""
    from lab.speculative.loop import target_generate

    def fn(p: int) -> tuple[int, int, float, float, list[int]]:
        r = target_generate(model, ids[p], max_new_tokens=max_new_tokens, eos_token_ids=eos)
        return int(ids[p].shape[1]), len(r.tokens), r.total_time_s, r.prefill_time_s, list(r.tokens)

    return fn
