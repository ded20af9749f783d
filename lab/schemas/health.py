"""The context-health calibration files: the chosen measure ``chosen.json`` and a profile's length reference.

Both are written by ``lab calibrate-health --save``, shipped under ``lab/health/`` and read
back from the user's folder first:

* The **context-health choice** (:data:`CHOSEN_SCHEMA`, :mod:`lab.health.choice`): the
  ``measure`` the rule chose, a key of :data:`lab.health.measures.CANDIDATES` (checked by the loader), and the
  ``rule``, ``decided_by``, ``model`` and ``chosen_at`` that record how.
* A **length reference** (:data:`REFERENCE_SCHEMA`, :mod:`lab.health.references`): the
  ``profile`` it is for, its provenance (``model``, ``prompts_file``, ``n_prompts``,
  ``n_content_range``, ``fitted_at``, ``fit``) and ``references``: for one or more of
  :data:`lab.health.measures.REFERENCED_BASES`, the line (``intercept``, ``slope``, both finite)
  and the residuals' robust SD (``scale``, above 0: a health reading divides by it).

A file that fails is refused (the command exits 2 naming it): a measure or a reference
read silently from elsewhere would change every context-health figure of the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from lab import schemas
from lab.schemas import MAX_COUNT

CHOSEN_KIND = "context-health choice"
# A length reference's residual SD is in the base measure's units (entropies normalized to [0, 1],
# so well under 1); above this every health reading would sit at 5 / 10 whatever the context.
MAX_SCALE = 10.0
REFERENCE_KIND = "length reference"
# The magnitude of a length reference's intercept and slope: a line through values in [0, 1] on ln N
# (N at most 2**31 tokens, ln N < 22) needs nothing near it; a 400-digit number overflows a float.
MAX_LINE = 1e6

_TEXT = {"type": "string", "pattern": r"^[^\x00-\x1f\x7f]*$"}  # printed in a line: no newlines
_NUMBER = {"type": "number", "finite": True}
_LINE = {"type": "number", "finite": MAX_LINE}
_COUNT = {"type": "integer", "minimum": 0, "maximum": MAX_COUNT}
_WHEN = {"type": ["string", "null"]}

CHOSEN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["measure"],
    "properties": {
        "measure": {**_TEXT, "minLength": 1},  # one of the candidates: load_chosen_file
        "rule": {"type": "string"},
        "decided_by": {"type": "string"},
        "model": {"type": "string"},
        "chosen_at": _WHEN,
    },
}

REFERENCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["profile", "references"],
    "properties": {
        "profile": {**_TEXT, "minLength": 1},
        "model": {"type": "string"},
        "prompts_file": {"type": "string"},
        "n_prompts": _COUNT,
        "n_content_range": {"type": "array", "minItems": 2, "maxItems": 2, "items": {**_COUNT, "minimum": 1}},
        "fitted_at": _WHEN,
        "fit": {"type": "string"},
        "references": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"minLength": 1},  # the referenced bases: load_reference_file
            "additionalProperties": {
                "type": "object",
                "required": ["intercept", "slope", "scale"],
                "properties": {"intercept": _LINE, "slope": _LINE, "scale": {**_NUMBER, "exclusiveMinimum": 0, "maximum": MAX_SCALE}},
            },
        },
    },
}


VALIDITY_KIND = "context-health validity record"
VALIDITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["profile", "measure", "valid", "rho", "p", "saturated_share", "n", "prompts_file", "report"],
    "properties": {
        "profile": {**_TEXT, "minLength": 1},
        "measure": {**_TEXT, "minLength": 1},
        "valid": {"type": "boolean"},
        "rho": {**_NUMBER, "minimum": -1, "maximum": 1},
        "p": {**_NUMBER, "minimum": 0, "maximum": 1},
        "saturated_share": {**_NUMBER, "minimum": 0, "maximum": 1},
        "n": {**_COUNT, "minimum": 1},
        "prompts_file": _TEXT,
        "report": _TEXT,
    },
}


def load_chosen_file(path: str | Path, measures: Iterable[str]) -> dict:
    """A context-health choice, validated by :data:`CHOSEN_SCHEMA` with ``measure`` one of ``measures``
    (:data:`lab.health.measures.CANDIDATES`; passed in, so this package imports no part it validates for).

    Raises:
        FileSchemaError: unreadable, not JSON, or invalid (one line naming the file).
    """
    schema = {**CHOSEN_SCHEMA, "properties": {**CHOSEN_SCHEMA["properties"], "measure": {"enum": sorted(measures)}}}
    return schemas.load(path, schema, CHOSEN_KIND)


def load_reference_file(path: str | Path, bases: Iterable[str]) -> dict:
    """A length reference, validated by :data:`REFERENCE_SCHEMA` with every base one of ``bases``
    (:data:`lab.health.measures.REFERENCED_BASES`).

    Raises:
        FileSchemaError: unreadable, not JSON, or invalid (one line naming the file).
    """
    references = {**REFERENCE_SCHEMA["properties"]["references"], "propertyNames": {"enum": sorted(bases)}}
    schema = {**REFERENCE_SCHEMA, "properties": {**REFERENCE_SCHEMA["properties"], "references": references}}
    data = schemas.load(path, schema, REFERENCE_KIND)
    low_high = data.get("n_content_range")
    if low_high is not None and low_high[0] > low_high[1]:
        raise schemas.FileSchemaError(path, REFERENCE_KIND, f"n_content_range {low_high} runs backwards")
    return data


def load_validity_file(path: str | Path) -> dict:
    """A context-health validity record (:mod:`lab.health.validation`), validated by :data:`VALIDITY_SCHEMA`.

    Raises:
        FileSchemaError: unreadable, not JSON, or invalid (one line naming the file).
    """
    return schemas.load(path, VALIDITY_SCHEMA, VALIDITY_KIND)


CONTEXT_REFERENCE_KIND = "context-measure reference"
MAX_HEADS = 1 << 16  # layers and heads per layer: far above any model here
CONTEXT_REFERENCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["profile", "measure", "heads", "intercept", "slope", "n_pairs", "loo_auroc", "selection_file",
                 "report"],
    "properties": {
        "profile": {**_TEXT, "minLength": 1},
        "measure": {"const": "lookback_heads"},
        "heads": {"type": "array", "minItems": 1, "maxItems": 4096,
                  "items": {"type": "array", "minItems": 2, "maxItems": 2,
                            "items": {"type": "integer", "minimum": 0, "maximum": MAX_HEADS}}},
        "intercept": {"type": "number", "finite": 1e6},
        "slope": {"type": "number", "finite": 1e6},
        "n_pairs": {**_COUNT, "minimum": 3},
        "loo_auroc": {"type": "number", "minimum": 0, "maximum": 1},
        "selection_file": _TEXT,
        "report": _TEXT,
        "validation": {"$ref": "#/$defs/verdict"},
        "heldback": {"$ref": "#/$defs/verdict"},
    },
    # A judged set's figures (lab.health.context_validity.ContextVerdict), written by
    # `lab validate-context --set validation|heldback --save` beside the measure they judged.
    "$defs": {"verdict": {
        "type": "object",
        "required": ["items_file", "report", "n_pairs", "auroc", "ci_low", "ci_high", "length_auroc",
                     "placebo_auroc", "length_rho", "end_share", "failed"],
        "additionalProperties": False,
        "properties": {
            "items_file": _TEXT,
            "report": _TEXT,
            "n_pairs": {**_COUNT, "minimum": 3},
            **{k: {"type": "number", "minimum": 0, "maximum": 1}
               for k in ("auroc", "ci_low", "ci_high", "length_auroc", "placebo_auroc", "end_share")},
            "length_rho": {"type": ["number", "null"], "minimum": -1, "maximum": 1},
            "failed": {"type": "array", "maxItems": 16, "items": _TEXT},
        },
    }},
}


def load_context_reference_file(path: str | Path) -> dict:
    """A model's fitted context measure (:class:`lab.health.context_validity.HeadReference` and where it came
    from), validated by :data:`CONTEXT_REFERENCE_SCHEMA`.

    Raises:
        FileSchemaError: unreadable, not JSON, or invalid (one line naming the file).
    """
    return schemas.load(path, CONTEXT_REFERENCE_SCHEMA, CONTEXT_REFERENCE_KIND)
