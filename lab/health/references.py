"""Clean length references: how each entropy candidate falls with content length, per model.

A candidate such as ``content_entropy`` (normalized by ``log N``) falls as the content
grows even when nothing in the context is wrong, and by how much depends on the model
(on SmolLM2-135M about -0.11 per unit of ``ln N``, on Qwen2.5-Coder-1.5B about -0.17).
The ``*_for_length`` candidates of :mod:`lab.health.measures` read a prompt's value
against what clean prompts *of the same length* get on the same model
(:func:`lab.health.measures.for_length`), so length alone no longer moves them. This
module fits that reference (:func:`fit_reference`) on the clean length-reference prompts
(``lab/data/length_reference.jsonl``, :mod:`tools.datagen.make_length_reference`: 24
held-out questions, each alone and after 4 passages of graded length; no question shared
with the calibration or study sets) and stores it per profile.

Fit: Theil-Sen line of the value on ``ln N`` (``scipy.stats.theilslopes``: the median of
pairwise slopes, robust to a few odd prompts; Sen 1968, Theil 1950) and the residuals'
robust SD (``scipy.stats.median_abs_deviation(scale="normal")``, floored at
:data:`SCALE_FLOOR`).

Files (one JSON object per profile): packaged ``lab/health/length/<profile>.json``;
``lab calibrate-health --save`` writes the user's ``health/length/<profile>.json`` in
``$LAB_CALIBRATION_DIR`` (default ``~/.cache/lab/calibrations``), which is read first.
Layout: ``profile``, ``model``, ``prompts_file``, ``n_prompts``, ``n_content_range``,
``fitted_at``, ``references`` = ``{base: {"intercept", "slope", "scale"}}``, read through its
schema (:data:`lab.schemas.health.REFERENCE_SCHEMA`); a file that fails, the user's or the
package's, is refused with one line naming it (the command exits 2), never skipped for another.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from lab.health.measures import REFERENCED_BASES, LengthReference
from lab.schemas import FileSchemaError
from lab.schemas.health import load_reference_file
from lab.runs.files import write_text_atomic
from lab.user_dirs import found_first, packaged_file, user_file, way_out

LENGTH_DIR = "health/length"  # inside the lab package, and inside the user's calibration folder
REFERENCE_PROMPTS = "data/length_reference.jsonl"
SCALE_FLOOR = 0.01  # values are reported to 0.01 on the 0..10 scale: a smaller SD is rounding
MIN_PROMPTS = 10  # a line through fewer clean prompts is not a reference


def packaged_path(profile: str) -> Path:
    """The packaged reference of ``profile`` (read only)."""
    return packaged_file(f"{LENGTH_DIR}/{profile}.json")


def user_path(profile: str) -> Path:
    """Where ``lab calibrate-health --save`` writes the user's reference of ``profile``."""
    return user_file(f"{LENGTH_DIR}/{profile}.json")


def reference_path(profile: str) -> Path | None:
    """The file :func:`load_references` reads for ``profile``: the user's, else the packaged one, else None."""
    return found_first(user_path(profile), packaged_path(profile))  # a folder or FIFO there is refused by name


def fit_reference(base: str, values: Sequence[float], n_content: Sequence[int]) -> LengthReference:
    """Theil-Sen line of ``values`` on ``ln n_content`` and the residuals' robust SD.

    Args:
        base: The candidate the values are of.
        values: Its value (0..10) per clean reference prompt; NaN (not measurable) prompts are dropped.
        n_content: Content tokens N per prompt (>= 1), aligned with ``values``.

    Raises:
        ValueError: misaligned inputs, fewer than :data:`MIN_PROMPTS` measurable prompts,
            or a single length (no slope to fit).
    """
    import numpy as np
    from scipy import stats

    if len(values) != len(n_content):
        raise ValueError(f"{len(values)} values and {len(n_content)} lengths do not align")
    pairs = [(float(v), int(n)) for v, n in zip(values, n_content) if math.isfinite(float(v))]
    if len(pairs) < MIN_PROMPTS:
        raise ValueError(f"a length reference for {base!r} needs >= {MIN_PROMPTS} measurable clean prompts, "
                         f"got {len(pairs)}")
    y = np.array([v for v, _ in pairs])
    n = np.array([n for _, n in pairs])
    if (n < 1).any():
        raise ValueError("content lengths must be >= 1")
    x = np.log(n)
    if np.ptp(x) == 0:
        raise ValueError(f"every reference prompt has N = {int(n[0])}: no slope to fit")
    fit = stats.theilslopes(y, x)
    resid = y - (fit.intercept + fit.slope * x)
    scale = max(float(stats.median_abs_deviation(resid, scale="normal")), SCALE_FLOOR)
    return LengthReference(base=base, intercept=float(fit.intercept), slope=float(fit.slope), scale=scale)


def load_references(profile: str | None) -> dict[str, LengthReference] | None:
    """The length references of ``profile`` by base name (the user's file, else the packaged one); None if none.

    Raises:
        ValueError: the file exists but fails :data:`lab.schemas.health.REFERENCE_SCHEMA` (a
            reference without a finite intercept and slope and a positive scale among them) or
            names another profile, in one line naming it.
    """
    if not profile:
        return None
    path = reference_path(profile)
    if path is None:
        return None
    fix = way_out(path, packaged_path(profile), "reference", f"lab calibrate-health --model {profile} --save")
    try:
        data = load_reference_file(path, REFERENCED_BASES)
    except FileSchemaError as exc:
        raise ValueError(f"{exc}; {fix}") from None
    if data["profile"] != profile:
        raise ValueError(f"length reference {path} is not a reference of profile {profile!r}; {fix}")
    return {base: LengthReference(base=base, intercept=float(r["intercept"]), slope=float(r["slope"]),
                                  scale=float(r["scale"])) for base, r in data["references"].items()}


def reference_record(profile: str, model: str, refs: Mapping[str, LengthReference], *, prompts_file: str,
                     n_content: Sequence[int], fitted_at: str | None) -> dict[str, Any]:
    """The JSON object :func:`load_references` reads."""
    return {"profile": profile, "model": model, "prompts_file": prompts_file, "n_prompts": len(n_content),
            "n_content_range": [int(min(n_content)), int(max(n_content))], "fitted_at": fitted_at,
            "fit": "Theil-Sen of value on ln N; scale = 1.4826 MAD of residuals (floor 0.01)",
            "references": {b: {"intercept": r.intercept, "slope": r.slope, "scale": r.scale} for b, r in refs.items()}}


def write_references(record: dict[str, Any]) -> Path:
    """Write the user's reference of ``record["profile"]`` atomically; returns its path.

    Raises:
        OSError: the user's calibration folder cannot be written.
    """
    return write_text_atomic(user_path(record["profile"]), json.dumps(record, indent=1) + "\n")
