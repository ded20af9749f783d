"""Forward hooks on a model's decoder layers: where the lab reads what a layer computed during a pass.

One home for the hooks, as TransformerLens keeps its hook points in one module (``hook_points.py``):
:func:`decoder_layers` finds the layers, :func:`attention_modules` their attention modules, and
:func:`forward_hooks` registers a hook on each module while a ``with`` block runs and removes every
one of them on the way out, error or not (a hook left behind would run on every later pass).

Readers: :mod:`lab.intervene.score` (span and sink masses; an early-exit draft's logits from the
target's layer L) and :mod:`lab.health.reliance` (lookback ratios). Shapes are each hook's own.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator


def decoder_layers(model: Any) -> Any:
    """``model.model.layers`` (the decoder layers whose attention modules the hooks read).

    Raises:
        ValueError: the model has none there.
    """
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__} has no decoder layers at .model.layers; cannot read its attention")
    return layers


def attention_modules(model: Any) -> list[Any]:
    """Each decoder layer's attention module (``layer.self_attn``), first layer first.

    Raises:
        ValueError: the model has no decoder layers (:func:`decoder_layers`).
    """
    return [layer.self_attn for layer in decoder_layers(model)]


@contextmanager
def forward_hooks(modules: Iterable[Any], hook: Callable[[Any, Any, Any], None]) -> Iterator[None]:
    """While open, ``hook(module, args, output)`` runs after each forward of each of ``modules``.

    Every hook registered is removed on exit, error or not (one that failed to register included
    the ones before it).

    Args:
        modules: ``torch.nn.Module`` s (:func:`attention_modules`, or one layer in a list).
        hook: A forward hook, as :meth:`torch.nn.Module.register_forward_hook` takes it; its
            return value is ignored by the readers here (they return None, leaving the output).

    Examples:
        >>> import torch
        >>> seen = []
        >>> layer = torch.nn.Identity()
        >>> with forward_hooks([layer], lambda module, args, output: seen.append(float(output))):
        ...     _ = layer(torch.tensor(2.0))
        >>> _ = layer(torch.tensor(3.0))  # removed: not seen
        >>> seen
        [2.0]
    """
    handles = []
    try:
        for module in modules:
            handles.append(module.register_forward_hook(hook))
        yield
    finally:
        for handle in handles:
            handle.remove()
