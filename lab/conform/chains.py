"""The reference law of one next-token step under an engine's declared filter chain.

Engines apply the same four filters in different orders, and the order changes the law.
transformers' ``generate`` builds its warpers as temperature -> top-k -> top-p -> min-p
(``transformers/generation/utils.py``, ``_get_logits_processor``, 5.24.0), and the lab's
one filter, :func:`lab.sampling.filter_logits`, is its first three; llama.cpp's default
sampler chain (``common/common.h``, ``common_params_sampling::samplers``) is penalties,
DRY, top-n-sigma, top-k, typical-p, top-p, min-p, XTC, temperature, then ``dist`` draws
(``common/sampling.cpp``, ``common_sampler_init``): top-k, top-p and min-p see the
UNSCALED logits and the temperature comes last. So a :class:`Chain` is an order of the
four steps, an engine is checked against the law of ITS declared chain, and a report
names the chain it assumed (:meth:`Chain.describe`). Temperature and top-k commute
(scaling keeps the order of the logits); top-p and min-p do not: at temperature T != 1
the nucleus of the scaled law differs from the raw one's, and min-p's cut, a logit gap
of -log(min_p) below the maximum on the scaled logits, is a gap of -T log(min_p) on
the raw ones.

Each step, on float64 logits with ``-inf`` at dropped tokens:

* temperature T > 0: the logits divided by T (after a shift by their maximum, which
  leaves the law unchanged and cannot overflow); T = 0 anywhere in the chain means
  greedy, one-hot at the first maximal logit. llama.cpp divides the same way
  (``llama_sampler_temp_impl`` in ``src/llama-sampling.cpp``; T <= 0 keeps only the
  maximum).
* top-k: every token whose logit is >= the k-th largest (ties at the k-th are all kept,
  as :func:`lab.sampling.filter_logits` and transformers keep them). llama.cpp keeps
  exactly k after a partial sort (``llama_sampler_top_k_impl``), so with ties at the
  k-th logit which of them it keeps is its sort's choice; on real logits such ties are
  rare, and where they occur the reference keeps them all. ``top_k=None`` is off
  (llama.cpp's 0).
* top-p: a token is dropped when the mass of it and of every less likely token (an
  ascending cumulative sum of the law of the current logits) is <= 1 - top_p; the most
  likely token is always kept. This is transformers' ``TopPLogitsWarper``, which
  :func:`lab.sampling.filter_logits` copies. In exact arithmetic it keeps a token iff the
  mass strictly above it is < top_p, so the token that crosses top_p is kept: llama.cpp's
  rule (``llama_sampler_top_p_apply``: a descending running sum, stopping at the first
  token whose sum reaches top_p, that token kept). The two differ only where a
  cumulative sum lies within rounding of the boundary, and in which of several tokens
  of equal probability at the boundary is kept: here, as with transformers' ascending
  sort, the higher token id; llama.cpp's partial sort leaves it unspecified. 1.0 is off.
* min-p: keep a token whose probability is >= min_p times the most likely token's,
  i.e. whose logit is >= max + log(min_p): transformers' ``MinPLogitsWarper`` (removes
  ``probs < min_p * max``) and llama.cpp's ``llama_sampler_min_p_apply`` (keeps
  ``logit >= max_logit + logf(p)``) agree. 0.0 is off.

llama.cpp's ``min_keep`` (0 by default) is not modelled, and the other samplers of its
chain must be at their identity settings for the reference to hold: repeat penalty 1,
DRY multiplier 0, top-n-sigma -1, typical-p 1, XTC probability 0, mirostat 0,
dynamic-temperature range 0; its server's own defaults (top_k 40, top_p 0.95, min_p
0.05, temperature 0.8) apply to every field a request leaves out, so a client sends all
of them. Sources read: ggml-org/llama.cpp ``common/common.h`` (its defaults and
``samplers``), ``common/sampling.cpp`` (commit 00efb3e1) and ``src/llama-sampling.cpp``
(commit 0344068c), as the search index stores them, not the lab's pinned build
(llama-cpp-python 0.3.36's vendored copy); an older ``common.h`` read, from before
top-n-sigma joined the chain, has top-k, top-p, min-p and temperature in the same
relative order.

This module holds the filter once more, in float64 numpy and in any order, because the
reference must not round like the engine under test and must follow another engine's
order; ``tests/unit/test_conform.py`` checks that the transformers order equals
:func:`lab.sampling.sampling_probs` away from rounding boundaries.

Shapes: V = vocabulary size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

STEPS = ("temperature", "top_k", "top_p", "min_p")


@dataclass(frozen=True)
class Settings:
    """The sampling parameters of one request, as a client sends them to any engine.

    Attributes:
        temperature: 0 for greedy, else > 0 (finite); logits are divided by it.
        top_k: Keep the k most likely tokens (ties at the k-th kept); None = off.
        top_p: Keep the most likely tokens while the mass above a token is < top_p;
            1.0 = off. In (0, 1].
        min_p: Keep tokens of probability >= min_p times the largest; 0.0 = off. In [0, 1].

    Raises:
        ValueError: a value outside its range, naming the field.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0
    min_p: float = 0.0

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not (math.isfinite(t) and t >= 0):
            raise ValueError(f"temperature={t!r} must be a finite number >= 0 (0 = greedy)")
        k = self.top_k
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"top_k={k!r} must be a positive integer or None (off)")
        p = self.top_p
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
            raise ValueError(f"top_p={p!r} must be in (0, 1] (1 = off)")
        m = self.min_p
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0.0 <= m <= 1.0:
            raise ValueError(f"min_p={m!r} must be in [0, 1] (0 = off)")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class Chain:
    """An engine's declared filter chain: the order in which it applies the four steps.

    Attributes:
        engine: Whose order this is ("transformers", "llama.cpp", or a test's name).
        order: Each of :data:`STEPS` exactly once, first applied first.

    Raises:
        ValueError: ``order`` is not a permutation of :data:`STEPS`.
    """

    engine: str
    order: tuple[str, ...]

    def __post_init__(self) -> None:
        if sorted(self.order) != sorted(STEPS):
            raise ValueError(f"order={self.order!r} must name each of {STEPS} exactly once")

    def describe(self, settings: Settings) -> str:
        """The chain as a report states it, steps that are off left out.

        Examples:
            >>> LLAMA_CPP.describe(Settings(temperature=0.8, top_k=40, top_p=0.95))
            'llama.cpp: top_k=40 -> top_p=0.95 -> temperature=0.8'
            >>> TRANSFORMERS.describe(Settings())
            'transformers: (no filter, temperature 1)'
        """
        active = [f"{step}={getattr(settings, step)}" for step in self.order if _active(step, settings)]
        return f"{self.engine}: " + (" -> ".join(active) if active else "(no filter, temperature 1)")


TRANSFORMERS = Chain("transformers", ("temperature", "top_k", "top_p", "min_p"))  # and the lab's own
LLAMA_CPP = Chain("llama.cpp", ("top_k", "top_p", "min_p", "temperature"))
CHAINS = {chain.engine: chain for chain in (TRANSFORMERS, LLAMA_CPP)}


def _active(step: str, settings: Settings) -> bool:
    if step == "temperature":
        return settings.temperature != 1
    if step == "top_k":
        return settings.top_k is not None
    return settings.top_p < 1 if step == "top_p" else settings.min_p > 0


def _as_logits(logits) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"logits must be a non-empty vector [V], got shape {x.shape}")
    if np.isnan(x).any() or np.isposinf(x).any() or not np.isfinite(x).any():
        raise ValueError("logits must hold no NaN and no +inf, and at least one finite value (-inf = masked)")
    return x


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())  # -inf -> 0
    return e / e.sum()


def _temperature(x: np.ndarray, t: float) -> np.ndarray:
    if t == 1:
        return x
    return (x - x.max()) / t  # the shift leaves the law unchanged and keeps x / t finite for any t > 0


def _top_k(x: np.ndarray, k: int | None) -> np.ndarray:
    if k is None or k >= x.size:
        return x
    kth = np.partition(x, x.size - k)[x.size - k]  # the k-th largest logit
    return np.where(x >= kth, x, -np.inf)


def _top_p(x: np.ndarray, p: float) -> np.ndarray:
    if p >= 1.0:
        return x
    order = np.argsort(x, kind="stable")  # least likely first; of equal logits the lower id first
    drop_sorted = np.cumsum(_softmax(x)[order]) <= 1.0 - p  # the low tail whose mass stays within 1 - top_p
    drop_sorted[-1] = False  # the most likely token always stays
    drop = np.empty(x.size, dtype=bool)
    drop[order] = drop_sorted
    return np.where(drop, -np.inf, x)


def _min_p(x: np.ndarray, m: float) -> np.ndarray:
    if m <= 0.0:
        return x
    return np.where(x >= x.max() + math.log(m), x, -np.inf)


def chain_logits(logits, chain: Chain, settings: Settings) -> np.ndarray:
    """The logits after each step of ``chain`` in its order (module docstring).

    Args:
        logits: float ``[V]`` logits of one step (numpy array, CPU tensor or sequence;
            float32 from a model is read as float64); ``-inf`` marks a masked token.
        chain: The engine's declared order (:data:`TRANSFORMERS`, :data:`LLAMA_CPP`).
        settings: The request's sampling parameters; must not be greedy.

    Returns:
        float64 ``[V]``: the filtered, temperature-scaled logits (shifted so that the
        largest is 0 where a temperature other than 1 ran), ``-inf`` at every dropped token; at
        least one is finite. The input is not modified.

    Raises:
        ValueError: ``logits`` not a non-empty vector, holding NaN or +inf or nothing
            finite; ``settings`` greedy (the law is one-hot: :func:`chain_probs`).

    Examples:
        >>> x = np.log([0.5, 0.3, 0.15, 0.05])
        >>> chain_logits(x, TRANSFORMERS, Settings(top_k=2)).round(3).tolist()
        [-0.693, -1.204, -inf, -inf]
    """
    if settings.greedy:
        raise ValueError("chain_logits needs temperature > 0; a greedy step's law is one-hot (chain_probs)")
    x = _as_logits(logits)
    for step in chain.order:
        if step == "temperature":
            x = _temperature(x, settings.temperature)
        elif step == "top_k":
            x = _top_k(x, settings.top_k)
        elif step == "top_p":
            x = _top_p(x, settings.top_p)
        else:
            x = _min_p(x, settings.min_p)
    return x


def chain_probs(logits, chain: Chain, settings: Settings) -> np.ndarray:
    """The law an engine with ``chain`` draws its next token from.

    Args:
        logits: float ``[V]`` logits of one step, as :func:`chain_logits` takes them.
        chain: The engine's declared order.
        settings: The request's sampling parameters; temperature 0 is greedy.

    Returns:
        float64 ``[V]`` probabilities summing to 1, exactly 0 at every dropped token;
        one-hot at the first maximal logit when greedy. The input is not modified.

    Raises:
        ValueError: as :func:`chain_logits`, for the logits.

    Examples:
        At temperature 2 with top-p 0.7, the lab's order scales first (the law becomes
        0.379, 0.294, 0.208, 0.120; the mass above the third token, 0.673, is < 0.7, so
        three are kept), while llama.cpp's decides the nucleus on the raw law (the mass
        above the third token is 0.8) and scales the two that are left:

        >>> x = np.log([0.5, 0.3, 0.15, 0.05])
        >>> settings = Settings(temperature=2.0, top_p=0.7)
        >>> chain_probs(x, TRANSFORMERS, settings).round(4).tolist()
        [0.4306, 0.3335, 0.2359, 0.0]
        >>> chain_probs(x, LLAMA_CPP, settings).round(4).tolist()
        [0.5635, 0.4365, 0.0, 0.0]
        >>> chain_probs(x, LLAMA_CPP, Settings(temperature=0.0)).tolist()
        [1.0, 0.0, 0.0, 0.0]
    """
    if settings.greedy:
        x = _as_logits(logits)
        return np.eye(x.size, dtype=np.float64)[int(np.argmax(x))]
    return _softmax(chain_logits(logits, chain, settings))
