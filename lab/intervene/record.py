"""One finished triple of ``lab intervene`` on disk: its JSON form, its schema, and its summary.

A triple's record holds the clean prompt's greedy continuation (the tokens every arm scores)
and, for each twin (``"P"`` poisoned, ``"N"`` neutral), the per-position outcomes of every arm
(:class:`lab.intervene.score.TwinOutcome`). The work directory keeps one record per triple,
written atomically; a record read back is checked against :data:`RECORD_SCHEMA` and against its
own settings (the arms, the decode length), so a hand-edited or truncated file is redone on
resume instead of entering the analysis.

What a record may hold follows from the math: an entropy over V tokens lies in [0, log2 V] bits
(V the target's vocabulary, recorded as ``vocab_size``; a record without it is bounded by
:data:`lab.schemas.MAX_ENTROPY_BITS`), beta and the attention masses in [0, 1], the empty arm's
control is the largest gap between its entropies and A0's (recomputed from them), seconds are
finite and non-negative, counts and token ids bounded integers (a token id below V). Its labels
(``category``, ``distractor``) and its twins' prompt ids must be the triple file's
(:class:`TripleLabels`): a twin copied from another triple, or an edited label, would enter the
analysis under another cluster. A record that fails is named in a note and scored again (on
resume, and in the run without ``--shard`` that reads the shards' records).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from lab.analysis.intervention import TripleSummary
from lab.intervene.masks import ARMS, AddedSpan
from lab.intervene.score import ArmOutcome, TwinOutcome
from lab.kinds.intervene import DESIGN
from lab.schemas import MAX_COUNT, MAX_ENTROPY_BITS, MAX_SECONDS, RANGE_TOLERANCE, FileSchemaError, load

FORMAT = DESIGN  # a record of another design version lacks or misreads arms: it is redone
KIND = "intervention record"
TWIN_KEYS = {"P": "poisoned", "N": "neutral"}  # the analysis' variant name -> the prompt file's

# float32 logits: an entropy near log2 V carries rounding of about 1e-6 of it (~1e-5 bits at V = 2**18).
ENTROPY_SLACK_BITS = 1e-4
# empty_max_diff_bits is computed from the stored entropies, which JSON round-trips exactly.
CONTROL_TOLERANCE = 1e-12

_BITS = {"type": "number", "minimum": -RANGE_TOLERANCE, "maximum": MAX_ENTROPY_BITS, "finite": True}
_UNIT = {"type": "number", "minimum": 0, "maximum": 1 + RANGE_TOLERANCE, "finite": True}
_COUNT = {"type": "integer", "minimum": 0, "maximum": MAX_COUNT}
_ARM = {
    "type": "object", "required": ["entropy_bits", "beta", "span_mass", "sink_mass"],
    "properties": {"entropy_bits": {"type": "array", "minItems": 1, "items": _BITS},
                   "beta": {"type": "array", "minItems": 1, "items": _UNIT},
                   "span_mass": _UNIT, "sink_mass": _UNIT},
}
_TWIN = {
    "type": "object",
    "required": ["prompt_id", "variant", "n_prompt", "span", "n_decode", "arms", "empty_max_diff_bits"],
    "properties": {
        "prompt_id": {"type": "string", "minLength": 1}, "variant": {"enum": list(TWIN_KEYS.values())},
        "n_prompt": {**_COUNT, "minimum": 2},
        "span": {"type": "array", "prefixItems": [{**_COUNT, "minimum": 1}, _COUNT], "minItems": 2, "maxItems": 2},
        "n_decode": {**_COUNT, "minimum": 1},
        "arms": {"type": "object", "required": list(ARMS), "additionalProperties": _ARM},
        "empty_max_diff_bits": {**_BITS, "minimum": 0},
    },
}
RECORD_SCHEMA = {
    "type": "object",
    "required": ["format", "question_id", "category", "distractor", "continuation", "twins", "seconds"],
    "properties": {
        "format": {"const": FORMAT},
        "question_id": {"type": "string", "minLength": 1}, "category": {"type": "string"},
        "distractor": {"type": "string"},
        "continuation": {"type": "array", "minItems": 1, "items": _COUNT},
        "twins": {"type": "object", "required": list(TWIN_KEYS), "additionalProperties": False,
                  "properties": {k: _TWIN for k in TWIN_KEYS}},
        "seconds": {"type": "number", "minimum": 0, "maximum": MAX_SECONDS, "finite": True},
        "vocab_size": {**_COUNT, "minimum": 2},
    },
}


@dataclass(frozen=True)
class TripleLabels:
    """What the triple file says a triple's record must carry.

    Attributes:
        question_id / category: The clean prompt's id and category.
        distractor: The poisoned twin's distractor label.
        twin_ids: ``{"P": poisoned twin's id, "N": neutral twin's id}``.
    """

    question_id: str
    category: str
    distractor: str
    twin_ids: Mapping[str, str]


@dataclass(frozen=True)
class TripleRecord:
    """A finished triple: the continuation scored and both twins' outcomes.

    Attributes:
        question_id / category / distractor: The clean prompt's id and category, the poisoned twin's
            distractor label.
        continuation: The target's greedy continuation of the clean prompt (token ids), ``T`` long.
        twins: ``{"P": TwinOutcome, "N": TwinOutcome}``.
        seconds: Wall time the triple took (its passes, both models).
        vocab_size: V, the width of the target's logits (bounds every entropy by log2 V); None in a
            record written before it was kept.
    """

    question_id: str
    category: str
    distractor: str
    continuation: tuple[int, ...]
    twins: Mapping[str, TwinOutcome]
    seconds: float
    vocab_size: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as the work directory stores it (plain JSON types)."""
        return {"format": FORMAT, "question_id": self.question_id, "category": self.category,
                "distractor": self.distractor, "continuation": list(self.continuation), "seconds": self.seconds,
                **({"vocab_size": self.vocab_size} if self.vocab_size is not None else {}),
                "twins": {k: _twin_json(t) for k, t in self.twins.items()}}

    def summary(self) -> TripleSummary:
        """The per-twin, per-arm means the analysis reads (:class:`lab.analysis.intervention.TripleSummary`)."""
        def table(read) -> dict[tuple[str, str], float]:
            return {(v, arm): read(t.arms[arm]) for v, t in self.twins.items() for arm in ARMS}

        return TripleSummary(
            question_id=self.question_id, category=self.category, distractor=self.distractor,
            entropy=table(lambda a: a.mean_entropy), beta=table(lambda a: a.mean_beta),
            span_mass=table(lambda a: a.span_mass), sink_mass=table(lambda a: a.sink_mass),
            empty_max_diff_bits=max(t.empty_max_diff_bits for t in self.twins.values()))


def _twin_json(t: TwinOutcome) -> dict[str, Any]:
    return {"prompt_id": t.prompt_id, "variant": t.variant, "n_prompt": t.n_prompt,
            "span": [t.span.start, t.span.end], "n_decode": t.n_decode,
            "empty_max_diff_bits": t.empty_max_diff_bits,
            "arms": {name: {"entropy_bits": list(a.entropy_bits), "beta": list(a.beta),
                            "span_mass": a.span_mass, "sink_mass": a.sink_mass} for name, a in t.arms.items()}}


def _twin(data: dict[str, Any]) -> TwinOutcome:
    """A checked twin's outcome; counts as ints (JSON Schema's "integer" takes 4.0)."""
    arms = {name: ArmOutcome(entropy_bits=tuple(a["entropy_bits"]), beta=tuple(a["beta"]),
                             span_mass=a["span_mass"], sink_mass=a["sink_mass"]) for name, a in data["arms"].items()}
    return TwinOutcome(prompt_id=data["prompt_id"], variant=data["variant"], n_prompt=int(data["n_prompt"]),
                       span=AddedSpan(*map(int, data["span"])), n_decode=int(data["n_decode"]), arms=arms,
                       empty_max_diff_bits=data["empty_max_diff_bits"])


def _labels_problem(data: Mapping[str, Any], labels: TripleLabels) -> str | None:
    """A label or twin id other than the triple file's, or None."""
    if data["question_id"] != labels.question_id:
        return f"it belongs to {data['question_id']!r}, not {labels.question_id!r}"
    for field, want in (("category", labels.category), ("distractor", labels.distractor)):
        if data[field] != want:
            return f"{field} {data[field]!r} is not the triple file's {want!r}"
    for key, twin in data["twins"].items():
        if twin["prompt_id"] != labels.twin_ids[key]:
            return (f"twin {key} is prompt {twin['prompt_id']!r}, not the triple file's {TWIN_KEYS[key]} twin "
                    f"{labels.twin_ids[key]!r}")
    return None


def _twin_problem(key: str, twin: Mapping[str, Any], n: int, max_bits: float) -> str | None:
    """A twin that disagrees with itself or with the record's continuation, or None."""
    start, end = twin["span"]
    if not start < end <= twin["n_prompt"]:
        return f"twin {key}: span {twin['span']} is not inside its {twin['n_prompt']}-token prompt"
    if twin["n_decode"] != n:
        return f"twin {key}: {twin['n_decode']} decode positions for a {n}-token continuation"
    if twin["variant"] != TWIN_KEYS[key]:
        return f"twin {key} is a {twin['variant']} prompt"
    extra = sorted(set(twin["arms"]) - set(ARMS))
    if extra:
        return f"twin {key}: unknown arm {extra[0]!r}"
    for name, arm in twin["arms"].items():
        if len(arm["entropy_bits"]) != n or len(arm["beta"]) != n:
            return f"twin {key}, arm {name}: per-position lists are not {n} long"
        if max(arm["entropy_bits"]) > max_bits:
            return (f"twin {key}, arm {name}: an entropy of {max(arm['entropy_bits'])!r} bits exceeds "
                    f"log2 V = {max_bits:.4f}")
    gap = max(abs(a - b) for a, b in zip(twin["arms"]["empty"]["entropy_bits"], twin["arms"]["A0"]["entropy_bits"]))
    if not abs(twin["empty_max_diff_bits"] - gap) <= CONTROL_TOLERANCE:
        return (f"twin {key}: empty_max_diff_bits {twin['empty_max_diff_bits']!r} is not the largest gap between "
                f"the empty arm's and A0's entropies ({gap!r})")
    return None


def record_problem(data: Mapping[str, Any], labels: TripleLabels) -> str | None:
    """What breaks a record that meets :data:`RECORD_SCHEMA`: its labels against the triple file's, the
    relations between its fields (spans, lengths, arms, the empty arm's control) and the bounds V sets
    (every entropy <= log2 V, every token id < V); None when it holds."""
    vocab = data.get("vocab_size")
    max_bits = MAX_ENTROPY_BITS if vocab is None else math.log2(vocab) + ENTROPY_SLACK_BITS
    if vocab is not None and max(data["continuation"]) >= vocab:
        return f"continuation token {max(data['continuation'])} is not below vocab_size {vocab}"
    problem = _labels_problem(data, labels)
    for key, twin in data["twins"].items():
        problem = problem or _twin_problem(key, twin, len(data["continuation"]), max_bits)
    return problem


def load_record(path: str | Path, labels: TripleLabels) -> TripleRecord:
    """Read a triple's record back, checked.

    Args:
        path: The record file.
        labels: The triple it must belong to, as the triple file says (:meth:`lab.intervene.run.Triple.labels`).

    Returns:
        The :class:`TripleRecord`.

    Raises:
        FileSchemaError: unreadable, not a regular file, outside :data:`RECORD_SCHEMA` (an entropy
            outside [0, 32] bits, a beta or mass outside [0, 1], seconds not finite, negative or past
            :data:`MAX_SECONDS`, a count or token id past 2**31 - 1), of another question, under another
            label or twin than the triple file's, or inconsistent in itself (:func:`record_problem`).
    """
    data = load(path, RECORD_SCHEMA, KIND)
    problem = record_problem(data, labels)
    if problem:
        raise FileSchemaError(path, KIND, problem)
    vocab = data.get("vocab_size")
    return TripleRecord(question_id=data["question_id"], category=data["category"], distractor=data["distractor"],
                        continuation=tuple(map(int, data["continuation"])), seconds=data["seconds"],
                        twins={k: _twin(t) for k, t in data["twins"].items()},
                        vocab_size=None if vocab is None else int(vocab))
