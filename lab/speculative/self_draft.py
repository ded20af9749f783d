"""The early-exit draft on the target's own KV cache (self-speculative decoding).

An early-exit draft is the target's first N layers, final norm and LM head
(:func:`early_exit_model`). Its keys and values at layers
0..N-1 are, at every committed position, the ones the target computes there (the
same weights over the same inputs), so it needs no cache of its own: it borrows
the target's, as in self-speculative decoding (Zhang et al. 2023, "Draft & Verify",
arXiv:2309.08168) and LayerSkip (Elhoushi et al. 2024, arXiv:2404.16710, whose
draft reads the target's cache of its early layers). That saves, per decode,
the draft's own prefill of the prompt (N / L of a target prefill) and its own
cache's copies.

Cache contract (asserted by :func:`lab.speculative.loop.speculative_generate`, tested):
the loop lends its cache (:meth:`EarlyExitDraft.use_target_cache`) holding the
committed sequence except its last token, n - 1 positions, in every layer.
:meth:`EarlyExitDraft.propose` feeds the last committed token and the draft tokens
through layers 0..N-1 only, then crops those layers back to n - 1 positions, so the
cache leaves ``propose`` as it came (a crop is a slice: the kept tensors are the
same values). The verify pass then runs all L layers over the round's tokens as
with any draft, so p is computed exactly as before; the draft's q changes only by
float rounding (its prompt states now come from the target's prefill rather than
its own), and speculative sampling is lossless for any q it is honest about
(Leviathan et al. 2023, Theorem 1).

Departure from LayerSkip: the verify pass does not reuse the draft's layer 0..N-1
states of the drafted tokens (LayerSkip's "cache reuse"). At the study's gamma 2
it would spare layers 0..N-1 for one of the verify's three positions, while on a
CPU at one to three positions a layer's cost is its weight reads, not the
positions, so the saving would be small for a second code path through the
target's layers.

Without a lent cache (a caller that drives :meth:`propose` itself) the draft keeps
its own cache, exactly as :class:`~lab.speculative.drafts.ModelDraft`.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import torch

from lab.decode import rollback_cache
from lab.models.source import model_source, register_source
from lab.sampling import SamplingConfig
from lab.speculative.drafts import AdaptiveDraftLength, DraftFacts, ModelDraft, Proposal, draft_loop, empty_proposal


def early_exit_model(target: Any, num_layers: int) -> Any:
    """A causal LM made of the target's first ``num_layers`` layers, final norm and head.

    Shares the target's parameters (no copy, nothing downloaded): the shell is built
    on the meta device and its submodules replaced by the target's own. It is a
    regular transformers model, so it also serves as ``assistant_model`` for
    transformers' assisted generation.

    Raises:
        ValueError: ``num_layers`` not in [1, target layers].
    """
    total = int(target.config.num_hidden_layers)
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or not 1 <= num_layers <= total:
        raise ValueError(f"num_layers={num_layers!r} must be in [1, {total}] (the target has {total} layers)")
    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = num_layers
    if isinstance(getattr(cfg, "layer_types", None), list):
        cfg.layer_types = cfg.layer_types[:num_layers]
    with torch.device("meta"):
        shell = type(target)(cfg)
    for name, module in target.model.named_children():
        if name == "layers":
            shell.model.layers = torch.nn.ModuleList(list(target.model.layers[:num_layers]))
        else:
            setattr(shell.model, name, module)
    shell.lm_head = target.lm_head
    shell.generation_config = copy.deepcopy(target.generation_config)
    shell.eval()
    assert not any(p.is_meta for p in shell.parameters()), "early-exit shell kept a meta parameter"
    if (source := model_source(target, default=None)) is not None:  # a tiny test model may have none
        register_source(shell, dataclasses.replace(source, draft=f"early-exit:{num_layers}"))
    return shell


class EarlyExitDraft(ModelDraft):
    """The target's first ``num_layers`` layers as a draft, on the target's KV cache when lent one.

    Args:
        target: The target causal LM (its weights are shared, nothing is copied).
        num_layers: N, in [1, target layers].

    Raises:
        ValueError: ``num_layers`` out of range (from :func:`early_exit_model`).
    """

    def __init__(self, target: Any, num_layers: int):
        super().__init__(early_exit_model(target, num_layers), int(target.config.vocab_size),
                         f"early-exit:{num_layers}")
        self.num_layers = int(num_layers)

    def facts(self) -> DraftFacts:
        """As a model draft's, but no weights of its own (the target's, in the target's dtype) and it
        drafts on the target's cache when lent one, so the loop prefills the target first."""
        return dataclasses.replace(super().facts(), weight_dtype=None, drafts_on_target_cache=True)

    def reset(self) -> None:
        super().reset()
        self.lent_cache: Any = None

    def use_target_cache(self, cache: Any) -> None:
        """Draft on the target's ``cache`` (past recording on) until :meth:`reset`; see the module docstring.

        A caller that drives :meth:`propose` itself and lends nothing gets a draft on its own cache.
        """
        self.lent_cache = cache

    def _forward_lent(self, ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=ids.unsqueeze(0).to(self.device), cache=self.lent_cache, use_cache=True,
                         logits_to_keep=1)
        return out.logits[0, -1]  # [V]: the early-exit head has the target's vocabulary

    def propose(self, prefix_ids: torch.Tensor, gamma: int, *, sampling: SamplingConfig,
                generator: torch.Generator | None = None, adaptive: AdaptiveDraftLength | None = None,
                eos_token_ids: frozenset[int] = frozenset()) -> Proposal:
        """Draft up to ``gamma`` tokens on the lent cache, leaving it as it came; see :class:`Drafter`."""
        if self.lent_cache is None:
            return super().propose(prefix_ids, gamma, sampling=sampling, generator=generator, adaptive=adaptive,
                                   eos_token_ids=eos_token_ids)
        if gamma < 1:
            return empty_proposal(self.vocab_size, "budget", self.device)
        held = self.lent_cache.get_seq_length()
        assert held < prefix_ids.shape[0], "the lent cache must lack at least the last committed token"
        try:
            return draft_loop(self._forward_lent, prefix_ids[held:], gamma, self.vocab_size, self.device,
                              sampling=sampling, generator=generator, adaptive=adaptive, eos_token_ids=eos_token_ids)
        finally:  # the draft's positions go, in its layers only: the target's cache is as lent
            rollback_cache(self.lent_cache, held, num_layers=self.num_layers)

    def commit(self, n_kept: int) -> None:
        """Nothing to roll back on a lent cache (``propose`` left none of its positions); else as ModelDraft."""
        if self.lent_cache is None:
            super().commit(n_kept)
