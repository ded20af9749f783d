"""Hypothesis strategies shared by the property tests, named after what they produce.

Floats are bounded and never subnormal (subnormal logits test the FPU, not the
lab), NaN and infinities are drawn only where a strategy's name says so.
"""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

# Logits of real models sit within a few tens of units of each other; +-50 keeps
# exp() well inside float32 range after the max-shift in log_softmax while still
# producing distributions from near-uniform to near-one-hot.
LOGIT_BOUND = 50.0
MAX_VOCAB = 64


def finite_floats(bound: float = LOGIT_BOUND):
    return st.floats(min_value=-bound, max_value=bound, allow_nan=False, allow_infinity=False,
                     allow_subnormal=False, width=32)


@st.composite
def logit_vectors(draw, min_size: int = 1, max_size: int = MAX_VOCAB, bound: float = LOGIT_BOUND) -> torch.Tensor:
    """A float32 logits vector ``[V]`` of finite values, V in [min_size, max_size]."""
    values = draw(st.lists(finite_floats(bound), min_size=min_size, max_size=max_size))
    return torch.tensor(values, dtype=torch.float32)


@st.composite
def masked_logit_vectors(draw, max_size: int = MAX_VOCAB) -> torch.Tensor:
    """A float32 logits vector ``[V]`` with some (not all) entries ``-inf``."""
    x = draw(logit_vectors(min_size=2, max_size=max_size))
    mask = draw(st.lists(st.booleans(), min_size=len(x), max_size=len(x)))
    keep = draw(st.integers(0, len(x) - 1))  # at least one finite entry
    mask[keep] = False
    return x.masked_fill(torch.tensor(mask), float("-inf"))


@st.composite
def logit_batches(draw, max_dims: int = 3, max_side: int = 4, max_vocab: int = 16) -> torch.Tensor:
    """A float32 logits tensor ``[*lead, V]`` with 0 to ``max_dims - 1`` leading dims."""
    n_lead = draw(st.integers(0, max_dims - 1))
    shape = [draw(st.integers(1, max_side)) for _ in range(n_lead)] + [draw(st.integers(1, max_vocab))]
    n = 1
    for s in shape:
        n *= s
    values = draw(st.lists(finite_floats(), min_size=n, max_size=n))
    return torch.tensor(values, dtype=torch.float32).reshape(shape)


def vocab_sizes(max_size: int = 4096):
    """A vocabulary size V >= 1."""
    return st.integers(min_value=1, max_value=max_size)


def half_dtypes():
    """``torch.float16`` or ``torch.bfloat16``."""
    return st.sampled_from([torch.float16, torch.bfloat16])


def fp16_extreme_logit_vectors(max_size: int = MAX_VOCAB):
    """A float16 logits vector mixing ordinary values with the fp16 extremes +-65504."""
    fp16_max = float(torch.finfo(torch.float16).max)
    element = st.one_of(st.sampled_from([fp16_max, -fp16_max]),
                        st.floats(-100, 100, allow_nan=False, allow_subnormal=False, width=16))
    return st.lists(element, min_size=1, max_size=max_size).map(
        lambda v: torch.tensor(v, dtype=torch.float16))


# --------------------------------------------------------------------------- lab stream

MAX_STREAM_POSITIONS = 64


@st.composite
def retention_policies(draw, max_window: int = 24, max_keep: int = 6):
    """A parsed non-dense policy spec (window, sinks, detected or recompute) with small W and K."""
    from lab.stream.policies import parse_policy

    kind = draw(st.sampled_from(["window", "sinks", "detected", "recompute"]))
    w = draw(st.integers(1, max_window))
    if kind in ("window", "recompute"):
        return parse_policy(f"{kind}:{w}")
    return parse_policy(f"{kind}:{draw(st.integers(1, max_keep))}+{w}")


@st.composite
def detector_rankings(draw, max_flagged: int = 8, max_position: int = MAX_STREAM_POSITIONS):
    """0 to ``max_flagged`` distinct flagged positions, best first, as ``rank_detected`` returns them."""
    return tuple(draw(st.lists(st.integers(0, max_position - 1), max_size=max_flagged, unique=True)))


def sequence_lengths(max_size: int = MAX_STREAM_POSITIONS):
    """A text length S >= 1 in tokens."""
    return st.integers(min_value=1, max_value=max_size)


# --------------------------------------------------------------------------- speculative verification

# Weights that make exact zeros, exact ties and exactly representable ratios likely,
# mixed with arbitrary ones; normalized in float64 by the strategies below.
_BOUNDARY_WEIGHTS = st.one_of(st.sampled_from([0.0, 0.0, 0.25, 0.5, 1.0, 2.0]),
                              st.floats(1e-3, 1.0, allow_nan=False, allow_subnormal=False))


@st.composite
def probability_rows(draw, n_rows: int, vocab: int) -> torch.Tensor:
    """A float64 ``[n_rows, V]`` tensor of probability rows (each sums to 1), often with exact zeros."""
    rows = []
    for _ in range(n_rows):
        w = draw(st.lists(_BOUNDARY_WEIGHTS, min_size=vocab, max_size=vocab))
        w[draw(st.integers(0, vocab - 1))] += 1.0  # at least one positive entry
        rows.append(w)
    t = torch.tensor(rows, dtype=torch.float64)
    return t / t.sum(dim=-1, keepdim=True)


@st.composite
def speculative_rounds(draw, max_gamma: int = 4, max_vocab: int = 8):
    """``(draft_tokens int64 [gamma], draft_probs [gamma, V], target_probs [gamma + 1, V])``.

    Float64 probability rows; each draft token lies in its own q's support; a target
    row sometimes equals its draft row (p = q: acceptance ratio 1, residual all zero)
    and a target row sometimes gives the draft token p = 0.
    """
    gamma = draw(st.integers(1, max_gamma))
    vocab = draw(st.integers(2, max_vocab))
    q = draw(probability_rows(gamma, vocab))
    p = draw(probability_rows(gamma + 1, vocab))
    tokens = []
    for i in range(gamma):
        support = q[i].nonzero().flatten().tolist()
        tokens.append(draw(st.sampled_from(support)))
        kind = draw(st.sampled_from(["free", "equal", "zero"]))
        if kind == "equal":
            p[i] = q[i]
        elif kind == "zero" and float(p[i, tokens[-1]]) < 1.0:
            p[i, tokens[-1]] = 0.0
            p[i] = p[i] / p[i].sum()
    return torch.tensor(tokens, dtype=torch.int64), q, p


@st.composite
def uniforms_around(draw, ratio: float) -> float:
    """A float64 uniform in [0, 1): 0, the largest float below 1, ``ratio`` itself or one of
    its float neighbours (when in range), or an arbitrary value."""
    largest = math.nextafter(1.0, 0.0)
    candidates = [0.0, largest]
    for r in (ratio, math.nextafter(ratio, 0.0), math.nextafter(ratio, 2.0)):
        if 0.0 <= r < 1.0:
            candidates.append(r)
    return draw(st.one_of(st.sampled_from(candidates),
                          st.floats(0.0, largest, allow_nan=False, allow_subnormal=False)))


@st.composite
def tied_logit_rows(draw, n_rows: int, max_vocab: int = 8) -> torch.Tensor:
    """A float32 ``[n_rows, V]`` logits tensor whose row maxima are often tied (2+ entries)."""
    vocab = draw(st.integers(2, max_vocab))
    rows = []
    for _ in range(n_rows):
        row = draw(st.lists(st.sampled_from([-1.0, 0.0, 1.5, 3.0]), min_size=vocab, max_size=vocab))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float32)


def overflowing_temperatures():
    """Positive float temperatures so small that finite logits of a few units divided by them overflow
    float32 (max ~3.4e38): from the smallest float64 subnormal up to 1e-38. Subnormals are drawn on
    purpose here: a user can type ``--temperature 5e-324``."""
    return st.one_of(st.sampled_from([5e-324, 1e-45, 1e-40, 1e-38]),
                     st.floats(min_value=5e-324, max_value=1e-38, allow_nan=False, allow_subnormal=True))


# --------------------------------------------------------------------------- typed reports (lab.typed, lab.kinds)

JSON_SCALARS = (st.none() | st.booleans() | st.integers(-10**9, 10**9)
                | st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=False) | st.text(max_size=6))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=2)
                           | st.dictionaries(st.text(max_size=4), inner, max_size=2), max_leaves=4)


def typed_values(hint):
    """Values of a type ``lab.typed`` reads (a typed report, or any of its fields' hints): finite floats, JSON
    values for ``Any``, short containers."""
    import dataclasses
    import types
    import typing

    origin = typing.get_origin(hint)
    if hint is typing.Any:
        return JSON_VALUES
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return st.builds(hint, **{f.name: typed_values(hints[f.name]) for f in dataclasses.fields(hint) if f.init})
    if origin in (typing.Union, types.UnionType):
        return st.one_of([typed_values(a) for a in typing.get_args(hint)])
    if origin is typing.Literal:
        return st.sampled_from(typing.get_args(hint))
    if origin in (list, tuple):
        items = st.lists(typed_values(typing.get_args(hint)[0]), max_size=2)
        return items if origin is list else items.map(tuple)
    if origin is dict:
        return st.dictionaries(st.text(max_size=4), typed_values(typing.get_args(hint)[1]), max_size=2)
    return {type(None): st.none(), bool: st.booleans(), int: st.integers(-10**9, 10**9),
            float: st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=False),
            str: st.text(max_size=8)}[hint]


# --------------------------------------------------------------------------- conformance (lab.conform)


@st.composite
def conform_settings(draw, max_k: int = MAX_VOCAB):
    """A non-greedy ``lab.conform.chains.Settings``: temperature in [0.2, 3], each filter on or off."""
    from lab.conform.chains import Settings

    return Settings(
        temperature=draw(st.one_of(st.just(1.0), st.floats(0.2, 3.0, allow_nan=False, allow_subnormal=False))),
        top_k=draw(st.one_of(st.none(), st.integers(1, max_k))),
        top_p=draw(st.one_of(st.just(1.0), st.floats(0.05, 1.0, allow_nan=False, allow_subnormal=False))),
        min_p=draw(st.one_of(st.just(0.0), st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=False))),
    )
