"""The tuning file ``draft-setup-<profile>.json`` that ``lab bench --tune`` writes and ``lab speculate`` reads.

Written by :func:`lab.tuning.write_tuned`: ``format`` (:data:`TUNING_FORMAT`), the target
``profile`` and ``draft`` it was measured for, the winning ``setup`` (a
:class:`lab.speculative.setups.DraftSetup`: ``draft_dtype``, ``gamma``, ``adaptive``,
``dynamic``), the ``machine`` key it was measured on (``cpu_model``, ``cpu_flags``, ``torch``,
``threads``), the ``measured`` figures and when it was ``written``.

Every field of the set-up is held to what the command line accepts for the same flag
(:data:`SCHEMA` and :func:`check`): a draft dtype of
:data:`lab.speculative.draft_dtypes.DRAFT_DTYPE_CHOICES`, a gamma in [1,
:data:`lab.speculative.setups.MAX_GAMMA`], an ``adaptive`` stop that
:meth:`lab.speculative.drafts.AdaptiveDraftLength.parse` takes and a ``dynamic`` policy that
:meth:`lab.speculative.policies.DynamicGamma.parse` takes with its MAX within the same bound.
A file that fails is ignored with a note naming it (:func:`lab.tuning.read_tuned`); the run
goes on with the documented set-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab import schemas
from lab.speculative.setups import ADAPTIVE_STOPS, MAX_GAMMA, MIN_GAMMA, parse_dynamic
from lab.schemas import FileSchemaError
from lab.models.weights import WEIGHTS
from lab.speculative.draft_dtypes import DRAFT_DTYPE_CHOICES

KIND = "tuning file"
TUNING_FORMAT = 1
# A name the lab prints in a note: one line, so no control characters (a newline would split it).
_TEXT = {"type": "string", "pattern": r"^[^\x00-\x1f\x7f]*$"}
_NAME = {**_TEXT, "minLength": 1}
_WHOLE = {"type": "integer", "minimum": 1}
MAX_THREADS = 4096  # more torch threads than any machine the lab meets has cores: a hand-edited number

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["format", "profile", "draft", "setup", "machine"],
    "properties": {
        "format": {"const": TUNING_FORMAT},
        "profile": _NAME,
        "draft": _NAME,
        "setup": {
            "type": "object",
            "required": ["draft_dtype", "gamma", "adaptive", "dynamic"],
            "additionalProperties": False,
            "properties": {
                "draft_dtype": {"enum": [None, *DRAFT_DTYPE_CHOICES]},
                "gamma": {"type": "integer", "minimum": MIN_GAMMA, "maximum": MAX_GAMMA},
                "adaptive": {"oneOf": [{"type": "null"},
                                       {**_TEXT, "pattern": rf"^({'|'.join(ADAPTIVE_STOPS)}):[^\x00-\x1f\x7f]+$"}]},
                "dynamic": {"oneOf": [{"type": "null"}, {"type": "string", "pattern": r"^dynamic(:[0-9]{1,6}){0,2}$"}]},
            },
        },
        "machine": {
            "type": "object",
            "required": ["cpu_model", "cpu_flags", "torch", "threads"],
            "properties": {
                "cpu_model": _TEXT,
                "cpu_flags": {"type": "array", "items": _NAME},
                "torch": _NAME,
                "threads": {**_WHOLE, "maximum": MAX_THREADS},
            },
        },
        "measured": {"type": "object"},
        "written": {"type": ["string", "null"]},
    },
}


def _problem(where: str, value: Any, exc: Exception) -> str:
    return f"{where}: {value!r}: {exc}"


def check(data: dict, path: str | Path) -> dict:
    """What :data:`SCHEMA` cannot state: whole numbers written as such, and the set-up's specs parsed
    as the command line parses them.

    JSON Schema counts ``4.0`` as an integer; :class:`~lab.speculative.setups.DraftSetup` does not.

    Raises:
        FileSchemaError: naming the field and its value.
    """
    from lab.speculative.drafts import AdaptiveDraftLength

    setup, machine = data["setup"], data["machine"]
    for where, value in (("setup/gamma", setup["gamma"]), ("machine/threads", machine["threads"])):
        if not isinstance(value, int):
            raise FileSchemaError(path, KIND, f"{where}: {value!r} is not a whole number")
    if setup["adaptive"] is not None:
        try:
            AdaptiveDraftLength.parse(setup["adaptive"])
        except ValueError as exc:
            raise FileSchemaError(path, KIND, _problem("setup/adaptive", setup["adaptive"], exc)) from None
    if setup["dynamic"] is not None:
        try:
            parse_dynamic(setup["dynamic"])
        except ValueError as exc:
            raise FileSchemaError(path, KIND, _problem("setup/dynamic", setup["dynamic"], exc)) from None
    return data


def load_tuning(path: str | Path) -> dict:
    """A tuning file, validated by shape, range (:data:`SCHEMA`) and :func:`check`.

    Raises:
        FileSchemaError: unreadable, not JSON, or invalid (one line naming the file).
    """
    return check(schemas.load(path, SCHEMA, KIND), path)


# ``runtime-<profile>.json``, written by ``lab bench --tune-runtime`` (:func:`lab.tuning.write_tuned_runtime`):
# the runtime and weights that ran the profile's target fastest here, end to end.
RUNTIME_KIND = "runtime tuning file"
RUNTIME_TUNING_FORMAT = 1
RUNTIMES = ("torch", "llama.cpp")
RUNTIME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["format", "profile", "runtime", "weights", "machine"],
    "properties": {
        "format": {"const": RUNTIME_TUNING_FORMAT},
        "profile": _NAME,
        "runtime": {"enum": list(RUNTIMES)},
        "weights": _NAME,
        "machine": SCHEMA["properties"]["machine"],
        "measured": {"type": "object"},
        "report": {"type": ["string", "null"]},
        "written": {"type": ["string", "null"]},
    },
    "allOf": [{"if": {"properties": {"runtime": {"const": "llama.cpp"}}},
               "then": {"properties": {"weights": {"const": "gguf"}}},
               "else": {"properties": {"weights": {"enum": list(WEIGHTS)}}}}],
}


def load_runtime_tuning(path: str | Path) -> dict:
    """A runtime tuning file, validated by :data:`RUNTIME_SCHEMA` (threads a whole number).

    Raises:
        FileSchemaError: unreadable, not JSON, or invalid (one line naming the file).
    """
    data = schemas.load(path, RUNTIME_SCHEMA, RUNTIME_KIND)
    if not isinstance(data["machine"]["threads"], int):
        raise FileSchemaError(path, RUNTIME_KIND, f"machine/threads: {data['machine']['threads']!r} is not a whole number")
    return data
