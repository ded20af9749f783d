"""One finished triple of ``lab intervene`` on disk: its JSON form, its schema, and its summary.

A triple's record holds the clean prompt's greedy continuation (the tokens every arm scores)
and, for each twin (``"P"`` poisoned, ``"N"`` neutral), the per-position outcomes of every arm
(:class:`lab.intervene.score.TwinOutcome`). The work directory keeps one record per triple,
written atomically; a record read back is checked against :data:`RECORD_SCHEMA` and against its
own settings (the arms, the decode length), so a hand-edited or truncated file is redone on
resume instead of entering the analysis.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from lab.analysis.intervention import DESIGN, TripleSummary
from lab.intervene.masks import ARMS, AddedSpan
from lab.intervene.score import ArmOutcome, TwinOutcome
from lab.schemas import FileSchemaError, load

FORMAT = DESIGN  # a record of another design version lacks or misreads arms: it is redone
KIND = "intervention record"
TWIN_KEYS = {"P": "poisoned", "N": "neutral"}  # the analysis' variant name -> the prompt file's

_FINITE = {"type": "number", "finite": True}
_UNIT = {"type": "number", "minimum": 0, "maximum": 1.000001, "finite": True}
_ARM = {
    "type": "object", "required": ["entropy_bits", "beta", "span_mass", "sink_mass"],
    "properties": {"entropy_bits": {"type": "array", "minItems": 1, "items": _FINITE},
                   "beta": {"type": "array", "minItems": 1, "items": _UNIT},
                   "span_mass": _UNIT, "sink_mass": _UNIT},
}
_TWIN = {
    "type": "object",
    "required": ["prompt_id", "variant", "n_prompt", "span", "n_decode", "arms", "empty_max_diff_bits"],
    "properties": {
        "prompt_id": {"type": "string", "minLength": 1}, "variant": {"enum": list(TWIN_KEYS.values())},
        "n_prompt": {"type": "integer", "minimum": 2},
        "span": {"type": "array", "prefixItems": [{"type": "integer", "minimum": 1}, {"type": "integer"}],
                 "minItems": 2, "maxItems": 2},
        "n_decode": {"type": "integer", "minimum": 1},
        "arms": {"type": "object", "required": list(ARMS), "additionalProperties": _ARM},
        "empty_max_diff_bits": {**_FINITE, "minimum": 0},
    },
}
RECORD_SCHEMA = {
    "type": "object",
    "required": ["format", "question_id", "category", "distractor", "continuation", "twins", "seconds"],
    "properties": {
        "format": {"const": FORMAT},
        "question_id": {"type": "string", "minLength": 1}, "category": {"type": "string"},
        "distractor": {"type": "string"},
        "continuation": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
        "twins": {"type": "object", "required": list(TWIN_KEYS), "additionalProperties": False,
                  "properties": {k: _TWIN for k in TWIN_KEYS}},
        "seconds": {**_FINITE, "minimum": 0},
    },
}


@dataclass(frozen=True)
class TripleRecord:
    """A finished triple: the continuation scored and both twins' outcomes.

    Attributes:
        question_id / category / distractor: The clean prompt's id and category, the poisoned twin's
            distractor label.
        continuation: The target's greedy continuation of the clean prompt (token ids), ``T`` long.
        twins: ``{"P": TwinOutcome, "N": TwinOutcome}``.
        seconds: Wall time the triple took (its passes, both models).
    """

    question_id: str
    category: str
    distractor: str
    continuation: tuple[int, ...]
    twins: Mapping[str, TwinOutcome]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        """The record as the work directory stores it (plain JSON types)."""
        return {"format": FORMAT, "question_id": self.question_id, "category": self.category,
                "distractor": self.distractor, "continuation": list(self.continuation), "seconds": self.seconds,
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
    arms = {name: ArmOutcome(entropy_bits=tuple(a["entropy_bits"]), beta=tuple(a["beta"]),
                             span_mass=a["span_mass"], sink_mass=a["sink_mass"]) for name, a in data["arms"].items()}
    return TwinOutcome(prompt_id=data["prompt_id"], variant=data["variant"], n_prompt=data["n_prompt"],
                       span=AddedSpan(*data["span"]), n_decode=data["n_decode"], arms=arms,
                       empty_max_diff_bits=data["empty_max_diff_bits"])


def load_record(path: str | Path, question_id: str) -> TripleRecord:
    """Read a triple's record back, checked.

    Args:
        path: The record file.
        question_id: The clean prompt it must belong to.

    Returns:
        The :class:`TripleRecord`.

    Raises:
        FileSchemaError: unreadable, outside :data:`RECORD_SCHEMA`, of another question, or
            inconsistent in itself (an arm whose per-position lists are not ``n_decode`` long, a
            decode length other than the continuation's, a span outside its prompt, an unknown arm).
    """
    data = load(path, RECORD_SCHEMA, KIND)
    if data["question_id"] != question_id:
        raise FileSchemaError(path, KIND, f"it belongs to {data['question_id']!r}, not {question_id!r}")
    n = len(data["continuation"])
    for key, twin in data["twins"].items():
        start, end = twin["span"]
        if not start < end <= twin["n_prompt"]:
            raise FileSchemaError(path, KIND, f"twin {key}: span {twin['span']} is not inside its "
                                              f"{twin['n_prompt']}-token prompt")
        if twin["n_decode"] != n:
            raise FileSchemaError(path, KIND, f"twin {key}: {twin['n_decode']} decode positions for a "
                                              f"{n}-token continuation")
        if twin["variant"] != TWIN_KEYS[key]:
            raise FileSchemaError(path, KIND, f"twin {key} is a {twin['variant']} prompt")
        extra = sorted(set(twin["arms"]) - set(ARMS))
        if extra:
            raise FileSchemaError(path, KIND, f"twin {key}: unknown arm {extra[0]!r}")
        for name, arm in twin["arms"].items():
            if len(arm["entropy_bits"]) != n or len(arm["beta"]) != n:
                raise FileSchemaError(path, KIND, f"twin {key}, arm {name}: per-position lists are not {n} long")
    return TripleRecord(question_id=data["question_id"], category=data["category"], distractor=data["distractor"],
                        continuation=tuple(data["continuation"]), seconds=data["seconds"],
                        twins={k: _twin(t) for k, t in data["twins"].items()})
