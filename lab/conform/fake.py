"""A fake engine that draws next tokens through a declared chain, and the defects planted in it.

The conformance tests need an engine whose law is known exactly: :class:`FakeEngine` is
given a step's logits (and, for speculative decoding, a draft's logits) and draws ``n``
tokens from a seeded ``numpy.random.Generator``, through the chain it claims
(:mod:`lab.conform.chains`). Correct, it draws from that chain's law, with or without a
draft. With one of :data:`DEFECTS` it draws from another law, as a buggy engine would;
the suite must catch each at its stated sample size, and a later proxy in front of a real engine will
plant the same four:

* ``top_p_before_temperature`` (a): top-p moved to the other side of the temperature
  from where the claimed chain has it (before it for the lab's order, after it for
  llama.cpp's), so the nucleus is decided on the wrong scale. Seen only with T != 1 and
  top-p on.
* ``top_k_plus_one`` (b): top-k keeps k + 1 tokens. Seen where the (k+1)-th token has
  mass: it is a token the reference drops, so one draw of it rejects exactly.
* ``draft_ignores_temperature`` (c): with a draft on, target and draft are both filtered
  at temperature 1. Seen only with T != 1 and a draft.
* ``accept_if_q_ge_p`` (d): a draft token x is accepted when q(x) >= p(x), deterministically,
  instead of with probability min(1, p(x)/q(x)); a rejection still resamples the
  residual. The emitted law puts q(x) on every x with q >= p, so it is off by at least
  TV(p, q): seen with a draft whose q differs from p.

Speculative decoding (Leviathan et al. 2023, Algorithm 1; p = target, q = draft, both
through the same chain and settings, as "the same sampling method" requires): the draft
proposes one token x ~ q (gamma = 1; the first emitted token of a longer round has the
same law), it is kept when ``u * q(x) < p(x)`` with u ~ U[0, 1) (the test of
:func:`lab.speculative.verify.verify`), else the token comes from
:func:`lab.speculative.verify.residual_probs`. Correct, the emitted law is p
(Leviathan et al., Theorem 3.5); :func:`FakeEngine.emitted_law` gives it in closed form
for every defect. llama.cpp verifies otherwise, to the same end: its
``common_sampler_sample_and_accept_n`` (``common/sampling.cpp``) samples the target's
own token at each drafted position through the whole chain and keeps the draft while
the two agree, so what it emits is the target chain's law whatever the draft; the fake
runs the ratio test because that is the rule whose faults (d) stands for.

Shapes: V = vocabulary size, n = draws.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from lab.conform.chains import Chain, Settings, chain_probs

DEFECTS = ("top_p_before_temperature", "top_k_plus_one", "draft_ignores_temperature", "accept_if_q_ge_p")


def _top_p_across_temperature(order: tuple[str, ...]) -> tuple[str, ...]:
    """``order`` with top-p moved to the other side of the temperature, next to it."""
    steps = [step for step in order if step != "top_p"]
    at = steps.index("temperature")
    steps.insert(at + 1 if order.index("top_p") < order.index("temperature") else at, "top_p")
    return tuple(steps)


def _draw(law: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` token ids drawn from ``law`` by the inverse CDF; never a token of probability 0."""
    cdf = np.cumsum(law)
    u = rng.random(n) * cdf[-1]
    return np.minimum(np.searchsorted(cdf, u, side="right"), law.size - 1).astype(np.int64)


def _residual(target_probs: np.ndarray, draft_probs: np.ndarray) -> np.ndarray:
    import torch

    from lab.speculative.verify import residual_probs

    return residual_probs(torch.from_numpy(target_probs), torch.from_numpy(draft_probs)).numpy()


@dataclass(frozen=True)
class FakeEngine:
    """An engine that claims ``chain`` and draws through it, or through ``defect``'s law.

    Attributes:
        chain: The chain the engine claims (the reference tests it against this one).
        defect: One of :data:`DEFECTS`, or None for a correct engine.

    Raises:
        ValueError: an unknown ``defect``.
    """

    chain: Chain
    defect: str | None = None

    def __post_init__(self) -> None:
        if self.defect is not None and self.defect not in DEFECTS:
            raise ValueError(f"defect={self.defect!r} must be None or one of {DEFECTS}")

    def effective(self, settings: Settings, *, draft: bool) -> tuple[Chain, Settings]:
        """The chain and settings the engine really filters with (both sides of a draft alike).

        Examples:
            >>> from lab.conform.chains import TRANSFORMERS
            >>> FakeEngine(TRANSFORMERS, "top_p_before_temperature").effective(Settings(), draft=False)[0].order
            ('top_p', 'temperature', 'top_k', 'min_p')
        """
        chain = self.chain
        if self.defect == "top_p_before_temperature":
            chain = Chain(f"{chain.engine} (top-p across temperature)", _top_p_across_temperature(chain.order))
        elif self.defect == "top_k_plus_one" and settings.top_k is not None:
            settings = replace(settings, top_k=settings.top_k + 1)
        elif self.defect == "draft_ignores_temperature" and draft and not settings.greedy:
            settings = replace(settings, temperature=1.0)
        return chain, settings

    def _laws(self, logits, settings: Settings, draft_logits) -> tuple[np.ndarray, np.ndarray | None]:
        chain, used = self.effective(settings, draft=draft_logits is not None)
        target = chain_probs(logits, chain, used)
        if draft_logits is None:
            return target, None
        draft = chain_probs(draft_logits, chain, used)
        if draft.shape != target.shape:
            raise ValueError(f"draft_logits has V = {draft.size}, the target's logits V = {target.size}")
        return target, draft

    def _accepts(self, u: np.ndarray, target_at: np.ndarray, draft_at: np.ndarray) -> np.ndarray:
        if self.defect == "accept_if_q_ge_p":
            return draft_at >= target_at
        return u * draft_at < target_at  # verify's test: u < p / q without dividing; p = 0 never accepted

    def sample(self, logits, settings: Settings, n: int, rng: np.random.Generator, *,
               draft_logits=None) -> np.ndarray:
        """Draw the next token ``n`` times, each independently, as the engine would.

        Args:
            logits: float ``[V]`` target logits of the step (as :func:`~lab.conform.chains.chain_probs` takes them).
            settings: The request's sampling parameters.
            n: Draws (>= 1).
            rng: The seeded generator every draw comes from.
            draft_logits: float ``[V]`` draft logits: speculative decoding with one drafted
                token per draw (module docstring); None = no draft.

        Returns:
            int64 ``[n]`` token ids.

        Raises:
            ValueError: ``n`` < 1; logits the chain refuses; draft and target of different V.

        Examples:
            >>> from lab.conform.chains import LLAMA_CPP
            >>> engine = FakeEngine(LLAMA_CPP)
            >>> engine.sample([0.0, 9.0, -9.0], Settings(temperature=0.0), 3, np.random.default_rng(0)).tolist()
            [1, 1, 1]
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n={n!r} must be a positive integer")
        target, draft = self._laws(logits, settings, draft_logits)
        if draft is None:
            return _draw(target, n, rng)
        # 1. draft: one token per draw from q
        proposed = _draw(draft, n, rng)
        # 2. verify: the ratio test (or the planted rule)
        kept = self._accepts(rng.random(n), target[proposed], draft[proposed])
        # 3. a rejection takes its token from the residual
        out = proposed.copy()
        out[~kept] = _draw(_residual(target, draft), int((~kept).sum()), rng)
        return out

    def emitted_law(self, logits, settings: Settings, *, draft_logits=None) -> np.ndarray:
        """The law :meth:`sample` draws from, in closed form (float64 ``[V]``).

        Without a draft, the effective chain's law; with one, ``q(x) a(x) + (1 - sum_y q(y)
        a(y)) r(x)`` with a the acceptance probability (min(1, p/q), or 1 where q >= p under
        ``accept_if_q_ge_p``) and r the residual.

        Examples:
            >>> from lab.conform.chains import TRANSFORMERS
            >>> x, d = np.log([0.6, 0.3, 0.1]), np.log([0.2, 0.5, 0.3])
            >>> FakeEngine(TRANSFORMERS).emitted_law(x, Settings(), draft_logits=d).round(4).tolist()
            [0.6, 0.3, 0.1]
            >>> FakeEngine(TRANSFORMERS, "accept_if_q_ge_p").emitted_law(x, Settings(), draft_logits=d).round(4).tolist()
            [0.2, 0.5, 0.3]
        """
        target, draft = self._laws(logits, settings, draft_logits)
        if draft is None:
            return target
        if self.defect == "accept_if_q_ge_p":
            accept = (draft >= target).astype(np.float64)
        else:
            accept = np.minimum(1.0, np.divide(target, draft, out=np.ones_like(target), where=draft > 0))
        kept = draft * accept
        return kept + (1.0 - kept.sum()) * _residual(target, draft)
