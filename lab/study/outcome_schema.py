"""A study prompt's outcome work file: ``<work dir>/outcomes/<stem>-<digest>.json``.

Written by :func:`lab.study.work.save_finished` once a prompt is measured, read back by
``lab study --resume`` and ``--merge``. Layout::

    {"key": settings key, "prompt": the prompt as in the prompt file,
     "row": PromptRow.as_columns(), "tokens": [TOKEN_KEYS of each drafted token],
     "decode": {"entropy_bits": [...], "word": [...]} or {}}

:data:`SCHEMA` fixes the shape and every value's range; :func:`check` the relations between
fields, above all the file's own counts: alpha = n_accepted / n_drafted_tested (NaN exactly
when nothing was tested), n_accepted <= n_drafted_tested <= n_drafted, and stored drafted
tokens that add up to those counts. Entropies are in bits, in [0, log2 V]; the vocabulary
size V is not in the work directory, so :data:`MAX_ENTROPY_BITS` stands for log2 V.

NaN means measured but undefined and is accepted where the pipeline writes it: health,
sink rates and shares of a prompt without the positions they need, the decode's entropy
statistics of a decode without steps, alpha (the row's and H6's) when no drafted token was
tested, tau when no round ran. ``null`` is a field a runner may leave out. Infinities never
pass. A file that fails is named in one line (:class:`lab.schemas.FileSchemaError`); a
resume redoes its prompt, a merge leaves it out and marks the report incomplete.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from lab.analysis.claims import H6_COLUMNS
from lab.schemas import (MAX_COUNT, MAX_ENTROPY_BITS, MAX_SECONDS, MAX_VARENTROPY_BITS2, RANGE_TOLERANCE,
                         FileSchemaError, load as load_json)
from lab.schemas.health import MAX_LINE
from lab.study.outcome import HEALTH_CANDIDATE_COLUMNS, OPTIONAL_COLUMNS, REQUIRED_COLUMNS, TOKEN_KEYS

KIND = "study outcome file"
# alpha is stored as the float quotient of the two stored counts and JSON round-trips floats
# exactly; the slack admits a writer that keeps 12 significant digits, and nothing near a real error.
ALPHA_TOLERANCE = 1e-9
# Per-step entropies lie in [0, MAX_ENTROPY_BITS], so their variance is at most (MAX_ENTROPY_BITS / 2)**2.
MAX_ENTROPY_VARIANCE = (MAX_ENTROPY_BITS / 2) ** 2
MAX_LOOKBACK_HEADS = 23 * MAX_LINE + 1  # |lookback_heads| for any reference the schema admits
WORD_POSITIONS = ("initial", "continuation", "")  # lab.analysis.claims.word_positions

COUNT_COLUMNS = ("n_prompt_tokens", "n_content_tokens", "n_context_tokens", "n_content_sinks", "n_new_tokens", "n_drafted",
                 "n_drafted_tested", "n_accepted", "n_rounds", "n_multi_token_words")
_UNIT = ("alpha", "sink_rate_pos0", "sink_rate_content_mean", "position0_share", *H6_COLUMNS)  # [0, 1]
_HEALTH = ("context_health", "content_sink_health", *HEALTH_CANDIDATE_COLUMNS)  # [0, 10]
_ENTROPY = ("mean_entropy_bits", "max_entropy_bits", "initial_entropy_bits", "continuation_entropy_bits")
_SECONDS = ("prefill_s", "speculative_s", "wall_s", "temperature_s", "decode_s")  # measured: never NaN
_TEXT = ("id", "category", "variant", "text")


def _number(lo: float, hi: float | None = None, *, finite: bool = False, slack: float = RANGE_TOLERANCE) -> dict:
    schema: dict[str, Any] = {"type": "number", "minimum": lo - slack}
    if hi is not None:
        schema["maximum"] = hi + slack
    if finite:
        schema["finite"] = True
    return schema


_COUNT = {"type": "integer", "minimum": 0, "maximum": MAX_COUNT}


def _column_schemas() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {c: {"type": "string"} for c in _TEXT}
    out["twin_of"] = {"type": "string"}
    out.update({c: _COUNT for c in COUNT_COLUMNS})
    out["var_entropy_bits"] = _number(0.0, MAX_ENTROPY_VARIANCE)
    out.update({c: _number(0.0, 1.0) for c in _UNIT})
    out.update({c: _number(0.0, 10.0) for c in _HEALTH})
    out.update({c: _number(0.0, MAX_ENTROPY_BITS) for c in _ENTROPY})
    out["mean_varentropy_bits2"] = _number(0.0, MAX_VARENTROPY_BITS2)
    out["tau"] = _number(0.0, MAX_COUNT)  # and by the row's n_new_tokens (check)
    # a ratio in [0, 1] less a fitted line a + b ln(n), |a|, |b| <= MAX_LINE (lab.schemas.health) and ln n < 22;
    # NaN = no context span
    out["lookback_heads"] = _number(-MAX_LOOKBACK_HEADS, MAX_LOOKBACK_HEADS)
    out.update({c: _number(0.0, MAX_SECONDS, finite=True, slack=0.0) for c in _SECONDS})
    for c in (*OPTIONAL_COLUMNS, "twin_of", "wall_s"):  # None where a runner (or a plain runner call) leaves it
        out[c] = {**out[c], "type": [out[c]["type"], "null"]}
    return out


ROW_SCHEMA = {"type": "object", "required": list(REQUIRED_COLUMNS), "properties": _column_schemas()}
TOKEN_SCHEMA = {
    "type": "object", "required": list(TOKEN_KEYS),
    "properties": {"round": _COUNT, "index": _COUNT,
                   "draft_entropy_bits": _number(0.0, MAX_ENTROPY_BITS, finite=True),
                   "draft_normalized_entropy": _number(0.0, 1.0, finite=True),
                   "accepted": {"type": "boolean"}, "tested": {"type": "boolean"}},
}
DECODE_SCHEMA = {  # {} when the runner reports no tracked decode
    "type": "object", "dependentRequired": {"entropy_bits": ["word"], "word": ["entropy_bits"]},
    "properties": {"entropy_bits": {"type": "array", "items": _number(0.0, MAX_ENTROPY_BITS, finite=True)},
                   "word": {"type": "array", "items": {"enum": list(WORD_POSITIONS)}}},
}
SCHEMA = {
    "type": "object", "required": ["key", "prompt", "row", "tokens", "decode"],
    "properties": {"key": {"type": "string", "pattern": "^[0-9a-f]{16}$"}, "prompt": {"type": "object"},
                   "row": ROW_SCHEMA, "tokens": {"type": "array", "items": TOKEN_SCHEMA}, "decode": DECODE_SCHEMA},
}


def _nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _row_problem(row: Mapping[str, Any]) -> str | None:
    """What breaks a relation between a row's own fields, or None (the row already meets :data:`ROW_SCHEMA`)."""
    for c in COUNT_COLUMNS:  # JSON Schema's "integer" takes 4.0
        if isinstance(row.get(c), float):
            return f"row/{c}: {row[c]!r} is not a whole count"
    for c, v in row.items():
        if c in ROW_SCHEMA["properties"] and isinstance(v, float) and math.isinf(v):
            return f"row/{c}: {v!r} is not a finite number"
    n_acc, n_tested, n_drafted, n_rounds = (row[c] for c in ("n_accepted", "n_drafted_tested", "n_drafted", "n_rounds"))
    if not n_acc <= n_tested <= n_drafted:
        return f"n_accepted {n_acc} <= n_drafted_tested {n_tested} <= n_drafted {n_drafted} does not hold"
    alpha = row["alpha"]
    if n_tested == 0 and not _nan(alpha):
        return f"alpha is {alpha!r} where no drafted token was tested (NaN expected)"
    if n_tested and not (abs(alpha - n_acc / n_tested) <= ALPHA_TOLERANCE):  # NaN fails too
        return f"alpha {alpha!r} is not n_accepted / n_drafted_tested = {n_acc}/{n_tested}"
    if (n_rounds == 0) != _nan(row["tau"]) or (n_rounds == 0 and n_drafted):
        return f"tau {row['tau']!r} with n_rounds {n_rounds} and n_drafted {n_drafted} (NaN exactly when no round ran)"
    if row["tau"] > row["n_new_tokens"] + RANGE_TOLERANCE:  # a round commits at most every new token
        return f"tau {row['tau']!r} exceeds n_new_tokens {row['n_new_tokens']}"
    sinks, content, prompt = row["n_content_sinks"], row.get("n_content_tokens"), row["n_prompt_tokens"]
    if content is not None and not sinks <= content <= prompt:
        return f"n_content_sinks {sinks} <= n_content_tokens {content} <= n_prompt_tokens {prompt} does not hold"
    if row["mean_entropy_bits"] > row["max_entropy_bits"] + RANGE_TOLERANCE:  # False with a NaN
        return f"mean_entropy_bits {row['mean_entropy_bits']!r} exceeds max_entropy_bits {row['max_entropy_bits']!r}"
    return None


def _tokens_problem(row: Mapping[str, Any], tokens: list[Mapping[str, Any]]) -> str | None:
    """Stored drafted tokens that do not add up to the row's counts, or None (none stored passes)."""
    if not tokens:
        return None
    counts = {"n_drafted": len(tokens), "n_drafted_tested": sum(t["tested"] for t in tokens),
              "n_accepted": sum(t["accepted"] for t in tokens)}
    for c, n in counts.items():
        if n != row[c]:
            return f"tokens: {n} of them count toward {c}, the row says {row[c]}"
    for i, t in enumerate(tokens):
        if t["accepted"] and not t["tested"]:
            return f"tokens/{i}: accepted but not tested"
        if t["round"] >= row["n_rounds"]:
            return f"tokens/{i}: round {t['round']} of a decode of {row['n_rounds']} rounds"
    return None


def _decode_problem(row: Mapping[str, Any], decode: Mapping[str, Any]) -> str | None:
    """A tracked decode that disagrees with itself or with the row, or None (an empty one passes)."""
    if "entropy_bits" not in decode:
        return None
    entropies, words = decode["entropy_bits"], decode["word"]
    if len(entropies) != len(words):
        return f"decode: {len(entropies)} entropies for {len(words)} word positions"
    if entropies and max(entropies) > row["max_entropy_bits"] + RANGE_TOLERANCE:
        return f"decode: an entropy of {max(entropies)!r} exceeds max_entropy_bits {row['max_entropy_bits']!r}"
    multi = row.get("n_multi_token_words")
    if multi is not None and multi != words.count("initial"):
        return f"n_multi_token_words {multi} but the decode has {words.count('initial')} word-initial tokens"
    return None


def check(data: Mapping[str, Any], *, path: str | Path) -> Mapping[str, Any]:
    """``data`` unchanged if its fields agree with each other.

    Args:
        data: A work file's value that meets :data:`SCHEMA`.
        path: The file, for the error.

    Raises:
        FileSchemaError: the first relation that fails (alpha against the counts, tokens
            against the counts, the decode against the row).
    """
    row = data["row"]
    problem = _row_problem(row) or _tokens_problem(row, data["tokens"]) or _decode_problem(row, data["decode"])
    if problem:
        raise FileSchemaError(path, KIND, problem)
    return data


def load(path: str | Path) -> Mapping[str, Any]:
    """The outcome work file at ``path``, read, validated against :data:`SCHEMA` and :func:`check`.

    Raises:
        FileSchemaError: unreadable, not JSON, outside the schema or inconsistent with its own counts.
    """
    return check(load_json(path, SCHEMA, KIND), path=path)
