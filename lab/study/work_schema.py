"""The study work directory's own files (its outcome files: :mod:`lab.study.outcome_schema`).

* ``settings.json`` (:data:`SETTINGS_SCHEMA`): everything that changes the numbers, written by
  :func:`lab.study.work._plan` when the study starts; it marks the directory. Read by
  ``--resume`` and ``--merge``; a bad one refuses the command in one line naming the file.
  Its ranges are :class:`lab.study.config.StudyConfig`'s. Only ``weights`` and
  ``draft_weights`` may be absent: a directory written before they were recorded ran float32.
* ``runner.json`` (:data:`RUNNER_SCHEMA`): the runner's description of the models, copied into
  the report's ``report.json``. A bad one is ignored with a note; the report then lacks it.
* ``prompts.json`` (:data:`PROMPTS_SCHEMA`): the selected prompt set, one prompt-file record
  each (their fields are checked by :func:`lab.prompts.parse_prompts`, their sum by the sha256
  in ``settings.json``). A bad one refuses the command, naming the file.
"""

from __future__ import annotations

from lab.models.weights import WEIGHTS
from lab.ranges import GAMMA, LIMIT, SAMPLED_TEMPERATURE, SEED, TOKENS
from lab.schemas import MAX_COUNT, MAX_SECONDS
from lab.speculative.draft_dtypes import DRAFT_DTYPE_CHOICES

SETTINGS_KIND = "study settings file"
RUNNER_KIND = "study runner description"
PROMPTS_KIND = "stored prompt set"

_NAME = {"type": "string", "minLength": 1}
_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
# Every number bounded (lab.schemas): the ranges are the study's (lab.ranges, read by StudyConfig), the counts'
# open upper ends bounded by MAX_COUNT, the seed by what torch's generator takes, a temperature by a magnitude far
# past the flag's own limit (the draw is near uniform above 100).
MAX_TEMPERATURE_MAGNITUDE = 1e6
_TEMPERATURE = SAMPLED_TEMPERATURE.schema(most=MAX_TEMPERATURE_MAGNITUDE)

SETTINGS_SCHEMA = {
    "type": "object",
    "required": ["format", "model", "draft", "device", "dtype", "prompts_file", "prompts_sha256", "n_prompts",
                 "limit", "max_new_tokens", "gamma", "seed", "temperature", "design_temperatures",
                 "temperature_subset", "draft_dtype", "draft_dtype_flag"],
    "properties": {
        "format": {"type": "integer", "minimum": 0, "maximum": MAX_COUNT},
        "model": _NAME, "draft": _NAME, "device": _NAME, "dtype": _NAME,
        "prompts_file": {"type": ["string", "null"], "minLength": 1},
        "prompts_sha256": _SHA256,
        "n_prompts": {"type": "integer", "minimum": 1, "maximum": MAX_COUNT},
        "limit": LIMIT.schema(most=MAX_COUNT),
        "max_new_tokens": TOKENS.schema(most=MAX_COUNT), "gamma": GAMMA.schema(most=MAX_COUNT), "seed": SEED.schema(),
        "temperature": _TEMPERATURE,
        "design_temperatures": {"type": "array", "items": _TEMPERATURE},
        "temperature_subset": {"type": "array", "items": {"type": "string"}},
        "draft_dtype": {"type": ["string", "null"], "minLength": 1},
        "draft_dtype_flag": {"enum": [*DRAFT_DTYPE_CHOICES, None]},
        "health_measure": _NAME,
        "length_reference_sha256": {"anyOf": [_SHA256, {"type": "null"}]},
        "context_measure_sha256": {"anyOf": [_SHA256, {"type": "null"}]},
        "weights": {"enum": list(WEIGHTS)}, "draft_weights": {"enum": list(WEIGHTS)},
    },
}

_TEXT_OR_NULL = {"type": ["string", "null"]}
RUNNER_SCHEMA = {  # what lab.study.runner.ModelRunner.load (or a fake runner, or the Ray executor) reports
    "type": "object",
    "properties": {
        "model": {"type": "object"}, "draft": {"type": "string"}, "draft_name": {"type": "string"},
        "cluster": {"type": "object"},
        "load_s": {"type": ["number", "null"], "minimum": 0, "maximum": MAX_SECONDS, "finite": True},
        "weights": {"enum": list(WEIGHTS)}, "draft_weights": {"enum": list(WEIGHTS)},
        "target_dtype": _TEXT_OR_NULL, "draft_dtype": _TEXT_OR_NULL, "draft_dtype_source": _TEXT_OR_NULL,
        "pipeline": _TEXT_OR_NULL,
    },
}

PROMPTS_SCHEMA = {"type": "array", "minItems": 1, "items": {"type": "object"}}
