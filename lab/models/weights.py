"""The vocabulary of weight representations (torch-free, so ``lab --help`` can list it).

One list drives ``--weights`` / ``--draft-weights`` on every command, the ``weights=`` argument
of :func:`lab.models.loading.load_model` and what reports record; the layers themselves are
built by :mod:`lab.models.quantize`.
"""

from __future__ import annotations

WEIGHTS = ("float32", "bfloat16", "int8", "q4")
# Under ``q4``, the representation of a GGUF type that is not a 4-bit group-of-32 code. Chosen from
# the per-type numerics and kernel times in docs/results.md (quantized weights).
Q4_FALLBACK = {"Q6_K": "int8", "Q8_0": "int8", "Q5_0": "int8", "Q5_1": "int8", "F16": "bfloat16",
               "BF16": "bfloat16", "F32": "float32"}


def check_weights(weights: str) -> str:
    """Return ``weights`` if it names a representation.

    Raises:
        ValueError: naming the value and the choices.
    """
    if weights not in WEIGHTS:
        raise ValueError(f"weights={weights!r} is not one of {', '.join(WEIGHTS)}")
    return weights
