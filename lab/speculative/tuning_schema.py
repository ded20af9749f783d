"""The schemas of the tuned files :mod:`lab.tuning` writes and reads: one envelope, one payload per kind.

Every tuned file holds ``format``, the target ``profile`` it was measured for, the ``machine`` key it
was measured on (``cpu_model``, ``cpu_flags``, ``torch``, ``threads``; the runtime file adds the
llama.cpp build), the ``measured`` figures and when it was ``written``; a kind
(:class:`TunedSchema`) declares only its payload:

* :data:`DRAFT_SETUP` (``draft-setup-<profile>.json``, ``lab bench-tune``): the ``draft`` it was
  measured with and the winning ``setup`` (a :class:`lab.speculative.setups.DraftSetup`), every
  field held to what the command line accepts for the same flag: a draft dtype of
  :data:`lab.speculative.draft_dtypes.DRAFT_DTYPE_CHOICES`, a gamma in :data:`lab.ranges.GAMMA`, an
  ``adaptive`` stop that :meth:`lab.speculative.drafts.AdaptiveDraftLength.parse` takes and a
  ``dynamic`` policy that :func:`lab.speculative.setups.parse_dynamic` takes;
* :data:`RUNTIME` (``runtime-<profile>.json``, ``lab bench-tune-runtime``): the ``runtime`` and
  ``weights`` that ran the profile's target fastest here, end to end, and the ``report`` that
  measured them.

A file that fails :func:`load` is ignored with a note naming it (:func:`lab.tuning.read_tuned`); the
run goes on without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from lab import schemas
from lab.models.weights import WEIGHTS
from lab.ranges import GAMMA, THREADS
from lab.schemas import FileSchemaError
from lab.speculative.draft_dtypes import DRAFT_DTYPE_CHOICES
from lab.speculative.setups import ADAPTIVE_STOPS, parse_dynamic

# A name the lab prints in a note: one line, so no control characters (a newline would split it).
_TEXT = {"type": "string", "pattern": r"^[^\x00-\x1f\x7f]*$"}
_NAME = {**_TEXT, "minLength": 1}
MAX_THREADS = 4096  # more torch threads than any machine the lab meets has cores: a hand-edited number
MACHINE = {
    "type": "object",
    "required": ["cpu_model", "cpu_flags", "torch", "threads"],
    "properties": {
        "cpu_model": _TEXT,
        "cpu_flags": {"type": "array", "items": _NAME},
        "torch": _NAME,
        "threads": THREADS.schema(most=MAX_THREADS),
    },
}


@dataclass(frozen=True)
class TunedSchema:
    """One kind of tuned file, by its payload (the envelope is every kind's).

    Attributes:
        kind: What the file is called in an error and a note (``"tuning file"``).
        format: The ``format`` a file of this kind holds.
        payload: The payload's fields and their schemas, in the file's order.
        required: The payload's fields a file must have.
        after_measured: Payload fields the file holds after ``measured``, not before ``machine``
            (the runtime file's ``report``): the order of the files already written.
        whole: Payload fields, ``"a/b"`` paths, whose numbers must be written as whole numbers.
        rules: JSON Schema ``allOf`` entries relating the payload's fields.
        check: What a schema cannot state (a spec parsed as the command line parses it), or None;
            raises :class:`~lab.schemas.FileSchemaError`.
    """

    kind: str
    format: int
    payload: dict[str, Any]
    required: tuple[str, ...]
    after_measured: tuple[str, ...] = ()
    whole: tuple[str, ...] = ()
    rules: tuple[dict[str, Any], ...] = ()
    check: Callable[[dict, "str | Path"], None] | None = field(default=None, compare=False)

    @property
    def schema(self) -> dict[str, Any]:
        """The whole file's JSON Schema: the envelope around :attr:`payload`."""
        before = {k: v for k, v in self.payload.items() if k not in self.after_measured}
        after = {k: self.payload[k] for k in self.after_measured}
        schema = {"type": "object", "required": ["format", "profile", *self.required, "machine"],
                  "properties": {"format": {"const": self.format}, "profile": _NAME, **before, "machine": MACHINE,
                                 "measured": {"type": "object"}, **after, "written": {"type": ["string", "null"]}}}
        return {**schema, "allOf": list(self.rules)} if self.rules else schema


def _at(data: dict, where: str) -> Any:
    for key in where.split("/"):
        data = data[key]
    return data


def load(kind: TunedSchema, path: str | Path) -> dict:
    """A tuned file of ``kind``, validated by shape and range (:attr:`TunedSchema.schema`), whole numbers
    written as such (JSON Schema counts ``4.0`` as an integer; the lab does not) and ``kind.check``.

    Raises:
        FileSchemaError: unreadable, not JSON, or invalid (one line naming the file and the field).
    """
    data = schemas.load(path, kind.schema, kind.kind)
    for where in (*kind.whole, "machine/threads"):
        if not isinstance(_at(data, where), int):
            raise FileSchemaError(path, kind.kind, f"{where}: {_at(data, where)!r} is not a whole number")
    if kind.check is not None:
        kind.check(data, path)
    return data


def _check_setup(data: dict, path: str | Path) -> None:
    """The set-up's ``adaptive`` and ``dynamic`` specs parsed as the command line parses them."""
    from lab.speculative.drafts import AdaptiveDraftLength

    for name, parse in (("adaptive", AdaptiveDraftLength.parse), ("dynamic", parse_dynamic)):
        value = data["setup"][name]
        try:
            if value is not None:
                parse(value)
        except ValueError as exc:
            raise FileSchemaError(path, DRAFT_SETUP.kind, f"setup/{name}: {value!r}: {exc}") from None


DRAFT_SETUP = TunedSchema(
    kind="tuning file", format=1, required=("draft", "setup"), whole=("setup/gamma",), check=_check_setup,
    payload={
        "draft": _NAME,
        "setup": {
            "type": "object",
            "required": ["draft_dtype", "gamma", "adaptive", "dynamic"],
            "additionalProperties": False,
            "properties": {
                "draft_dtype": {"enum": [None, *DRAFT_DTYPE_CHOICES]},
                "gamma": GAMMA.schema(),
                "adaptive": {"oneOf": [{"type": "null"},
                                       {**_TEXT, "pattern": rf"^({'|'.join(ADAPTIVE_STOPS)}):[^\x00-\x1f\x7f]+$"}]},
                "dynamic": {"oneOf": [{"type": "null"}, {"type": "string", "pattern": r"^dynamic(:[0-9]{1,6}){0,2}$"}]},
            },
        },
    })

RUNTIMES = ("torch", "llama.cpp")
RUNTIME = TunedSchema(
    kind="runtime tuning file", format=1, required=("runtime", "weights"), after_measured=("report",),
    payload={"runtime": {"enum": list(RUNTIMES)}, "weights": _NAME, "report": {"type": ["string", "null"]}},
    # The weights are checked against a runtime the file names (and only then): a runtime that is none of
    # RUNTIMES is named itself, not blamed on the weights that would suit another.
    rules=({"if": {"required": ["runtime"], "properties": {"runtime": {"const": "llama.cpp"}}},
            "then": {"properties": {"weights": {"const": "gguf"}}}},
           {"if": {"required": ["runtime"], "properties": {"runtime": {"const": "torch"}}},
            "then": {"properties": {"weights": {"enum": list(WEIGHTS)}}}}))
