"""Hypothesis strategies shared by the property tests, named after what they produce.

Floats are bounded and never subnormal (subnormal logits test the FPU, not the
lab), NaN and infinities are drawn only where a strategy's name says so.
"""

from __future__ import annotations

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
