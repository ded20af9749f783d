"""What a loaded model is and where it came from: :class:`ModelSource`, looked up explicitly.

:func:`lab.models.loading.load_model` records one :class:`ModelSource` per model it returns
(:func:`register_source`); everyone else asks :func:`model_source`. The record lives in a
registry keyed weakly by the model object, not on the model: a transformers model is a foreign
object, and an attribute set on it is invisible to type checkers, copied or lost by whoever
wraps or copies the model, and read back only through ``getattr`` probes.

The record itself is declared in :mod:`lab.provenance` (a ground-floor module, so that every kind of report
can name it as the type of its ``"model"``) and re-exported here: :meth:`ModelSource.as_dict` gives the dict
written under ``"model"`` in every ``report.json`` (and in :func:`lab.reports.environment`).
"""

from __future__ import annotations

import weakref
from typing import Any, TypeVar, overload

from lab.provenance import ModelSource

__all__ = ["ModelSource", "model_source", "register_source"]

_T = TypeVar("_T")
_MISSING: Any = object()  # "no default given": absence raises; ``None`` is a valid default


# model object -> its record; an entry goes when its model is garbage collected
_SOURCES: weakref.WeakKeyDictionary[Any, ModelSource] = weakref.WeakKeyDictionary()


def register_source(model: Any, source: ModelSource) -> None:
    """Record where ``model`` came from, replacing any earlier record.

    Called by :func:`lab.models.loading.load_model`, by the early-exit draft for its shell, and by
    tests for models built in memory.

    Args:
        model: The model object (any object that can be weakly referenced; an ``nn.Module`` can).
        source: Its record.

    Raises:
        TypeError: ``source`` is not a :class:`ModelSource`, or ``model`` cannot be weakly referenced.
    """
    if not isinstance(source, ModelSource):
        raise TypeError(f"source must be a ModelSource, got {type(source).__name__}")
    _SOURCES[model] = source


@overload
def model_source(model: Any) -> ModelSource: ...
@overload
def model_source(model: Any, default: _T) -> ModelSource | _T: ...


def model_source(model: Any, default: Any = _MISSING) -> Any:
    """The record :func:`register_source` kept for ``model``.

    Args:
        model: A model returned by :func:`lab.models.loading.load_model` (or registered by hand).
        default: Returned when ``model`` has no record; without it, absence raises. Pass
            ``default=None`` where a model built in memory (a test's tiny model) is acceptable.

    Returns:
        The model's :class:`ModelSource`, or ``default`` when it has none.

    Raises:
        LookupError: ``model`` has no record and no ``default`` was given.
    """
    try:
        return _SOURCES[model]
    except (KeyError, TypeError):  # TypeError: an object that cannot be weakly referenced has no record
        if default is not _MISSING:
            return default
        raise LookupError(f"no model source recorded for this {type(model).__name__}: load it with "
                          "lab.models.loading.load_model or record one with lab.models.source.register_source") from None
