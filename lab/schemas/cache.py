"""The model caches' two files: the manifest ``lab-cache.json`` and a converted cache's ``layers.json``.

* The **manifest** (:data:`SCHEMA`), written with every cache by :mod:`lab.models.cache`: its
  ``format`` (:data:`MANIFEST_FORMAT`), the ``source`` the cache was made from (a GGUF file's
  record or a label) and, for every file of the cache, its ``size``, ``sha256``, ``mtime_ns``
  and, from format 3, ``sampled``: the sha256 of a few fixed windows of it (``stride``,
  ``window``). A manifest that fails is a damaged cache: it is named in a warning and the
  cache is rebuilt.
* The **layers file** (:data:`LAYERS_SCHEMA`) of a converted-weights cache
  (:mod:`lab.models.quantize`): each converted module's representation, the conversion summary
  and the conversion version. Its counts must agree with its layers (:func:`check_layers`);
  one that fails is a damaged cache too.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from lab import schemas
from lab.schemas import FileSchemaError

MANIFEST = "lab-cache.json"  # the manifest's name in every cache folder
KIND = "model-cache manifest"
LAYERS_KIND = "converted-weights layers file"
# 1 recorded the source by name only; 2 by name, size, sha256 and mtime; 3 adds each file's sampled sha256
MANIFEST_FORMAT = 3
# No cached file comes near this (the largest, Qwen2.5-Coder-1.5B in float32, is 7.1 GB): a size
# past it is garbage, not a file.
MAX_FILE_BYTES = 2**40
# A manifest lists a handful of files in about a kilobyte; one past this is not a manifest and is
# not read into memory.
MAX_MANIFEST_BYTES = 1 << 20
# Sampling windows (the writer's choice is lab.models.cache.SAMPLE_WINDOW / SAMPLE_STRIDE; these bound
# what a reader accepts): at least 64 KiB apart, so a 7 GB file takes at most ~100,000 reads, no wider
# than their stride, so no more than the whole file is read; at most 1 MiB wide and 1 GiB apart.
MIN_SAMPLE_STRIDE = 1 << 16
MAX_SAMPLE_STRIDE = 1 << 30
MAX_SAMPLE_WINDOW = 1 << 20
CONVERTED_KINDS = ("q4", "int8", "bfloat16")  # what a converted cache holds per layer (float32 layers are not stored)

_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_BYTES = {"type": "integer", "minimum": 0, "maximum": MAX_FILE_BYTES}
_MTIME = {"type": "integer", "minimum": 0}
# A file of the cache folder itself (checked by check(), whose message says so): no separators, not
# "." or "..", no control characters, not the manifest.
_FILE_NAME = re.compile(r"(?!\.{1,2}$)[^/\\\x00-\x1f]{1,255}")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["format", "source", "files"],
    "properties": {
        "format": {"type": "integer", "minimum": 1, "maximum": MANIFEST_FORMAT},
        "source": {"oneOf": [
            {"type": "string", "minLength": 1},  # format 1's GGUF name, or a label (a converted cache of a directory)
            {"type": "object", "required": ["name", "size", "sha256"],
             "properties": {"name": {"type": "string", "minLength": 1}, "size": _BYTES, "sha256": _SHA256,
                            "mtime_ns": _MTIME}},
        ]},
        "files": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {
                "type": "object",
                "required": ["size", "sha256", "mtime_ns"],
                "properties": {
                    "size": _BYTES,
                    "sha256": _SHA256,
                    "mtime_ns": _MTIME,
                    "sampled": {
                        "type": "object",
                        "required": ["stride", "window", "sha256"],
                        "additionalProperties": False,
                        "properties": {
                            "stride": {"type": "integer", "minimum": MIN_SAMPLE_STRIDE, "maximum": MAX_SAMPLE_STRIDE},
                            "window": {"type": "integer", "minimum": 1, "maximum": MAX_SAMPLE_WINDOW},
                            "sha256": _SHA256,
                        },
                    },
                },
            },
        },
    },
}

_COUNTS = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}

LAYERS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["layers", "summary"],  # no "conversion": written by conversion version 1
    "properties": {
        "layers": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"type": "string", "pattern": r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$"},
            "additionalProperties": {"enum": list(CONVERTED_KINDS)},
        },
        "summary": {
            "type": "object",
            "required": ["weights", "layers", "by_gguf_type"],
            "properties": {
                "weights": {"enum": list(CONVERTED_KINDS)},
                "layers": _COUNTS,
                "by_gguf_type": {"type": "object", "additionalProperties": _COUNTS},
            },
        },
        "conversion": {"type": "integer", "minimum": 1},
    },
}


def check(data: dict, path: str | Path) -> dict:
    """What :data:`SCHEMA` cannot state (or not in words): each file is named as a file of the cache
    folder (no path, not the manifest), and its sampling window fits its stride.

    Raises:
        FileSchemaError: naming the file entry.
    """
    for name, rec in data["files"].items():
        if not _FILE_NAME.fullmatch(name) or name == MANIFEST:
            raise FileSchemaError(path, KIND, f"files: {name[:60]!r} is not the name of a file of the cache")
        sampled = rec.get("sampled")
        if sampled is not None and sampled["window"] > sampled["stride"]:
            raise FileSchemaError(path, KIND, f"files/{name}/sampled: window {sampled['window']} is wider than "
                                              f"its stride {sampled['stride']}")
    return data


def check_layers(data: dict, path: str | Path) -> dict:
    """The relations :data:`LAYERS_SCHEMA` cannot state: the summary counts the layers listed.

    Each stored representation's count in ``summary.layers`` equals the number of layers the file
    lists with it, and ``int8`` / ``bfloat16`` caches hold only their own representation.

    Raises:
        FileSchemaError: naming the representation whose counts disagree.
    """
    listed = Counter(data["layers"].values())
    counted = data["summary"]["layers"]
    for kind in CONVERTED_KINDS:
        if counted.get(kind, 0) != listed[kind]:
            raise FileSchemaError(path, LAYERS_KIND, f"summary/layers/{kind} is {counted.get(kind, 0)}, but "
                                                     f"{listed[kind]} layers are listed as {kind}")
    weights = data["summary"]["weights"]
    if weights != "q4" and set(listed) != {weights}:
        raise FileSchemaError(path, LAYERS_KIND, f"a {weights} cache lists layers as {', '.join(sorted(listed))}")
    return data


def load_manifest(path: str | Path) -> dict:
    """A cache's manifest, validated by shape, range (:data:`SCHEMA`) and :func:`check`.

    Raises:
        FileSchemaError: refused by :func:`lab.files.read_bounded` (not a regular file, unreadable, larger
            than :data:`MAX_MANIFEST_BYTES`), not JSON, or invalid.
    """
    return check(schemas.load(path, SCHEMA, KIND, MAX_MANIFEST_BYTES), path)


def load_layers(path: str | Path) -> dict:
    """A converted cache's layers file, validated by :data:`LAYERS_SCHEMA` and :func:`check_layers`.

    Raises:
        FileSchemaError: unreadable, not JSON, or invalid.
    """
    return check_layers(schemas.load(path, LAYERS_SCHEMA, LAYERS_KIND), path)
