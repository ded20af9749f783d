"""Every file the lab reads back, validated by shape and range: one JSON Schema per file kind.

A file the lab wrote earlier (a tuning file, a converted-cache manifest, a calibration or
reference file, a study's work-directory outcome) may have been hand-edited, truncated,
overwritten with binary or written by another version. Each kind has one schema (its
``SCHEMA`` and, where a schema cannot say it, a ``check`` of the relations between fields),
read with :func:`load`. A file that fails raises :class:`FileSchemaError`, one line naming
the file and what is wrong; what happens next (the file ignored with a note, rebuilt or the
run refused) is the caller's and is documented with each kind.

This package is below every part (it imports none, only the ground floor's reader :mod:`lab.files`), so a kind's vocabulary that a part
defines is passed in by the part's loader. The kinds and where their schemas live:

* converted-cache manifests and ``layers.json``: :mod:`lab.schemas.cache` (rebuilt when bad);
* sink calibrations and the detector choice: :mod:`lab.schemas.calibration` (refused);
* the context-health choice, length references and validity records: :mod:`lab.schemas.health` (refused);
* the tuning file: :mod:`lab.speculative.tuning_schema` (ignored with a note), beside the
  draft set-up it records;
* a study's work directory (``settings.json``, ``runner.json``, ``prompts.json``, the
  per-prompt outcomes): :mod:`lab.study.work_schema` and :mod:`lab.study.outcome_schema`
  (refused, redone on resume, left out of a merge), built from the study's own record types;
* an intervention's per-triple record: :mod:`lab.intervene.record` (named in a note and scored again),
  checked against the triple file's labels too.

The schemas are JSON Schema (draft 2020-12, checked with :mod:`jsonschema`) plus one keyword
of the lab's, ``"finite"``: ``true`` says the number must be finite (Python's :mod:`json` reads
``NaN`` and ``Infinity``, which JSON Schema's ``"number"`` lets through) and a float would hold it
(an integer of 400 digits would end in ``OverflowError`` where the lab computes with it);
a number ``M`` says that and ``|x| <= M``, the magnitude the math allows. Every number a kind
reads back is bounded: by ``minimum`` and ``maximum``, or by a ``finite`` magnitude.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Mapping

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError, best_match

from lab.files import FileRefused, read_bounded
from lab.numbers import number_in_line

# No file the lab writes comes near this (a study outcome with its tokens is tens of kB, a converted
# cache's manifest a few kB): a bigger one is not the lab's, and reading it whole could exhaust memory.
MAX_FILE_BYTES = 64 * 2**20
MAX_PROBLEM_CHARS = 160  # a problem longer than this (a whole echoed container) is cut: the line stays one line


class FileSchemaError(ValueError):
    """A file the lab reads back is not what its kind says: unreadable, not JSON, or outside its schema.

    Attributes:
        path: The file.
        kind: Its kind in words (``"tuning file"``, ``"converted-cache manifest"``).
        problem: What is wrong, in one line.
    """

    def __init__(self, path: str | Path, kind: str, problem: str) -> None:
        self.path, self.kind, self.problem = Path(path), kind, _short(problem)
        super().__init__(f"{self.path} is not a valid {kind}: {self.problem}")


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_PROBLEM_CHARS else text[: MAX_PROBLEM_CHARS - 3] + "..."


# Counts and positions read back: no context or file the lab handles comes near 2**31 (int32 positions).
MAX_COUNT = 2**31 - 1
# log2 V bounds an entropy over V tokens; where V is not recorded, this stands for it: every
# vocabulary the lab loads (at most ~2**18 tokens) is far below 2**32.
MAX_ENTROPY_BITS = 32.0
# Float rounding at a bound of a computed value (a normalized entropy of 1 + 1e-7, a beta of 1 + 1e-7).
RANGE_TOLERANCE = 1e-6
# A wall time the lab measures and keeps (a prompt, a triple, a model load) takes seconds to hours;
# 1e7 s (116 days) is no measurement.
MAX_SECONDS = 1e7
# A surprisal -log2 p of any positive double is at most 1075 bits (the smallest is 2**-1074), so a
# varentropy (the variance of the surprisal) is at most 1075**2.
MAX_VARENTROPY_BITS2 = 1075.0**2


def _finite(validator: Any, wanted: bool | float, instance: Any, schema: Mapping[str, Any]):
    """``"finite": true``: a finite number a float holds; ``"finite": M``: also ``|x| <= M``."""
    if wanted is False or isinstance(instance, bool) or not isinstance(instance, (int, float)):
        return
    if isinstance(instance, float) and not math.isfinite(instance):
        yield ValidationError(f"{instance!r} is not a finite number")
    elif isinstance(instance, int) and abs(instance) > sys.float_info.max:  # float(x) raises OverflowError
        yield ValidationError(f"a {len(str(abs(instance)))}-digit integer is beyond any number a float holds")
    elif wanted is not True and abs(instance) > wanted:
        yield ValidationError(f"{number_in_line(instance)} is beyond the magnitude {wanted:g} this field allows")


Validator = validators.extend(Draft202012Validator, {"finite": _finite})


def read_json(path: str | Path, kind: str, limit: int | None = None) -> Any:
    """The JSON value in ``path``, read by :func:`lab.files.read_bounded`.

    Args:
        path: The file.
        kind: Its kind in words, for errors.
        limit: Most bytes read (default :data:`MAX_FILE_BYTES`; a kind with a smaller bound passes it).

    Raises:
        FileSchemaError: the file is refused (no such file, not a regular file, larger than ``limit``,
            unreadable), is not UTF-8 text, is not JSON (an integer past Python's digit limit included) or
            nests too deeply.
    """
    try:
        raw = read_bounded(path, MAX_FILE_BYTES if limit is None else limit)
    except FileRefused as exc:
        raise FileSchemaError(path, kind, exc.problem) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FileSchemaError(path, kind, "not UTF-8 text (a binary file?)") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FileSchemaError(path, kind, f"not JSON ({exc.msg}, line {exc.lineno})") from None
    except ValueError as exc:  # a number past Python's digit limit for int(), and the like
        raise FileSchemaError(path, kind, f"not JSON the lab reads ({exc})") from None
    except RecursionError:  # brackets nested past Python's recursion limit: no file the lab writes
        raise FileSchemaError(path, kind, "JSON nested too deeply to read") from None


def validate(data: Any, schema: Mapping[str, Any], *, path: str | Path, kind: str) -> Any:
    """``data`` unchanged if it meets ``schema``.

    Raises:
        FileSchemaError: the first (most relevant, :func:`jsonschema.exceptions.best_match`)
            violation, with where in the file it is (``gamma``, ``files/0/size``).
    """
    try:
        error = best_match(Validator(schema).iter_errors(data))
    except RecursionError:
        raise FileSchemaError(path, kind, "JSON nested too deeply to check") from None
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "top level"
        message = error.message
        if isinstance(error.instance, int) and not isinstance(error.instance, bool):  # 400 digits would fill the line
            message = message.replace(str(error.instance), number_in_line(error.instance))
        raise FileSchemaError(path, kind, f"{where}: {message}")
    return data


def load(path: str | Path, schema: Mapping[str, Any], kind: str, limit: int | None = None) -> Any:
    """:func:`read_json` (bounded by ``limit``) then :func:`validate`: the file's value, or :class:`FileSchemaError`."""
    return validate(read_json(path, kind, limit), schema, path=path, kind=kind)
