"""The lab's one context health: the packaged choice of candidate applied to a prefill's inputs.

:mod:`lab.health.measures` holds the candidates (pure math); :mod:`lab.health.choice` reads
which one the calibration chose (``lab/health/chosen.json``); this module joins the two, so
the math imports no file I/O.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from lab.health.choice import load_chosen
from lab.health.measures import CANDIDATES, FOR_LENGTH, HealthInputs, LengthReference
from lab.health.references import load_references, reference_path
from lab.models.source import model_source


def chosen_measure() -> Callable[[HealthInputs], float]:
    """The candidate the packaged choice names (:func:`lab.health.choice.load_chosen`).

    Raises:
        ValueError: the packaged choice names no candidate of :data:`CANDIDATES`, or cannot be read.
    """
    name = load_chosen()
    if name not in CANDIDATES:
        raise ValueError(f"the packaged context-health choice {name!r} is not one of {', '.join(CANDIDATES)}")
    return CANDIDATES[name]


def graded_health(h: HealthInputs, measure: str | None = None) -> float:
    """The lab's one context health: the calibrated candidate on 0..10, ``NaN`` if not measurable.

    Args:
        h: One prefill's inputs.
        measure: The candidate's name (a key of :data:`CANDIDATES`); ``None`` (default): the
            packaged choice (:func:`chosen_measure`). A caller that records which measure it
            used reads the choice once and passes it here.

    Not measurable: no content position is observed by enough queries to be judged
    (an empty message, or one whose every token lies in the tail), so there is no
    content whose attention could be pooled away. ``lab sinks``, the study and the
    calibrations all report this value, so their figures compare.

    Raises:
        ValueError: the packaged choice cannot be read, or ``measure`` (or the choice) names no candidate.
    """
    if measure is not None and measure not in CANDIDATES:
        raise ValueError(f"measure={measure!r} is not one of {', '.join(CANDIDATES)}")
    if not bool((h.content & h.observed).any()):
        return math.nan
    return (chosen_measure() if measure is None else CANDIDATES[measure])(h)


def candidate_values(h: HealthInputs) -> dict[str, float]:
    """Every candidate of :data:`CANDIDATES` on one prefill, by name, each on 0..10; all ``NaN`` if not measurable.

    The study records these beside :func:`graded_health` so that a long run can be read
    again with another candidate (or one referenced to length) without running it again.
    Not measurable as in :func:`graded_health`.
    """
    if not bool((h.content & h.observed).any()):
        return {name: math.nan for name in CANDIDATES}
    return {name: float(measure(h)) for name, measure in CANDIDATES.items()}


@dataclass(frozen=True)
class ModelLengthReference:
    """The clean length references a model's context health reads, and the file they came from.

    Attributes:
        references: By base name (:func:`lab.health.references.load_references`); ``None``
            when the model's profile has none (or the model has no profile).
        path: The file they were read from (the user's or the packaged one); ``None`` with them.
    """

    references: dict[str, LengthReference] | None
    path: str | None


def model_length_reference(model: Any, measure: str | None = None) -> ModelLengthReference:
    """The clean length references of ``model``'s profile (:func:`lab.health.references.load_references`).

    When the measure (``measure``; ``None``: the chosen one, :func:`lab.health.choice.load_chosen`)
    reads a reference (a ``*_for_length`` candidate) and the model has none, one warning per
    model says that its context health is not measurable (NaN) and how to make one.

    Returns:
        :class:`ModelLengthReference`: the references and the file read.

    Raises:
        ValueError: the model's reference file exists but cannot be read.
    """
    info = source.as_dict() if (source := model_source(model, default=None)) is not None else {}
    profile = info.get("profile")
    refs = load_references(profile)
    name = load_chosen() if measure is None else measure
    if name.endswith(FOR_LENGTH) and (refs is None or name[: -len(FOR_LENGTH)] not in refs):
        _warn_no_reference(str(profile or info.get("model") or type(model).__name__), name)
    path = reference_path(profile) if refs is not None else None
    return ModelLengthReference(references=refs, path=None if path is None else str(path))


@functools.lru_cache(maxsize=32)
def _warn_no_reference(model: str, measure: str) -> None:
    warnings.warn(f"context health ({measure}) is read against clean prompts of the same length on the same model, "
                  f"and {model!r} has no length reference: health is NaN (not measurable); make one with "
                  f"`lab calibrate-health --model {model} --save`", UserWarning, stacklevel=4)
