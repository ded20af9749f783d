"""Acceptance under eviction: a draft that sees only a policy's visible positions.

The target verifies with its full KV cache; the draft keeps its own cache pruned
to what the retention policy lets its next query see (StreamingLLM, Xiao et al.
2023, applied to the draft side of speculative decoding, Leviathan et al. 2023).
The lab's question: does a draft that has lost its sinks get accepted less (lower
alpha), and does keeping the detector's positions help?

Draft cache invariant (tested): between rounds the draft cache holds, for every
layer, exactly the committed positions that the first position the next
``propose`` feeds may see under the policy (at least the last committed token is
still to be fed), each
computed when its token was fed, with RoPE applied at the text's own position.
Inside a round every forward also passes the policy's mask over the cache, so a
query never sees an entry its own window has left even before the commit-time
prune; entries beyond the window are dropped only at commit, when no rollback can
need them again (windows only move forward). Dropping a cache entry therefore
equals masking it, and the draft's q rows equal a masked one-pass forward (tested).

p = target, q = draft throughout. Batch size 1.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from lab.attention_mask import model_attention_mask
from lab.sampling import SamplingConfig
from lab.speculative.drafts import AdaptiveDraftLength, DraftFacts, Drafter, Proposal, draft_loop
from lab.stream.policies import Policy, kept_positions, policy_visibility, policy_window, visibility


class EvictingDraft:
    """A model draft whose KV cache follows a retention policy (a :class:`~lab.speculative.drafts.Drafter`).

    Args:
        base: A drafter that runs a model (``base.facts().model``: early-exit or a separate model);
            its model, vocabulary width, cost and weight dtype are used, its own cache is not.
        policy: The retention policy (``recompute`` is refused: it has no cache).
        detected: Flagged detector positions (best first), for ``detected`` policies.

    Raises:
        ValueError: a ``recompute`` policy.
    """

    def __init__(self, base: Drafter, policy: Policy, detected: tuple[int, ...] | None = None):
        if policy.kind == "recompute":
            raise ValueError(f"policy {policy.spec}: a recompute draft has no cache to evict; use window/sinks/detected")
        base_facts = base.facts()
        self.model = base_facts.model
        self.vocab_size = int(base.vocab_size)
        self.model_vocab = int(self.model.config.vocab_size)
        self.policy = policy
        self.keep = kept_positions(policy, detected)
        self.window = policy_window(policy, detected)
        self.name = f"{base.name}|{policy.spec}"
        self.device = next(self.model.parameters()).device
        # the base's model, cost and weights; no assistant model (transformers' assisted generation
        # cannot evict as the policy does) and its own (evicted) cache, so the loop may fuse the prefill
        self._facts = DraftFacts(model=self.model, cost=base_facts.cost, weight_dtype=base_facts.weight_dtype)
        self.reset()

    def facts(self) -> DraftFacts:
        """The base draft's model, cost and weight dtype; no assistant model; its own cache."""
        return self._facts

    def use_target_cache(self, cache: Any) -> None:
        """Ignored: this draft keeps its own, evicting cache."""

    def reset(self) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache()  # full layers only: the masks carry any sliding window
        self.positions = torch.zeros(0, dtype=torch.long)  # original position of each cache entry
        self._fed = 0  # positions 0.._fed-1 have been fed (some since evicted)
        self._committed_len = 0

    def _visible(self, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
        return visibility(query_pos, key_pos, self.window, self.keep)

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Feed ``ids`` ``[n]`` at positions ``_fed ..``; return the last position's logits ``[V]``."""
        pos = torch.arange(self._fed, self._fed + ids.numel())
        keys = torch.cat([self.positions, pos])
        mask = model_attention_mask(self.model, self._visible(pos, keys), pos, keys)
        out = self.model(input_ids=ids.reshape(1, -1).to(self.device), attention_mask=mask,
                         position_ids=pos[None].to(self.device), cache=self.cache, use_cache=True, logits_to_keep=1)
        self.positions, self._fed = keys, self._fed + ids.numel()
        logits = out.logits[0, -1]
        if self.model_vocab > self.vocab_size:
            logits = logits[: self.vocab_size]
        elif self.model_vocab < self.vocab_size:
            logits = torch.nn.functional.pad(logits, (0, self.vocab_size - self.model_vocab), value=float("-inf"))
        return logits

    def _select(self, index: torch.Tensor) -> None:
        """Keep only cache entries ``index`` (int64 into the cache order) in every layer."""
        idx = index.to(self.device)
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is not None and layer.keys.numel():
                layer.keys = layer.keys.index_select(-2, idx)
                layer.values = layer.values.index_select(-2, idx)
        self.positions = self.positions[index]

    def propose(self, prefix_ids: torch.Tensor, gamma: int, *, sampling: SamplingConfig,
                generator: torch.Generator | None = None, adaptive: AdaptiveDraftLength | None = None,
                eos_token_ids: frozenset[int] = frozenset()) -> Proposal:
        """Draft up to ``gamma`` tokens after ``prefix_ids`` (int64 ``[L]``); see ``Drafter``."""
        v = self.vocab_size
        if gamma < 1:
            z = torch.zeros(0)
            return Proposal(torch.zeros(0, dtype=torch.long), torch.zeros(0, v), z, z.clone(), "budget")
        self._committed_len = prefix_ids.shape[0]
        assert self._fed < self._committed_len, "draft cache must lack at least the last committed token"
        return draft_loop(self._forward, prefix_ids[self._fed:], gamma, v, self.device, sampling=sampling,
                          generator=generator, adaptive=adaptive, eos_token_ids=eos_token_ids)

    def commit(self, n_kept: int) -> None:
        """Roll back rejected tokens, then evict what the next query can no longer see."""
        self._fed = min(self._fed, self._committed_len + n_kept)
        alive = self.positions < self._fed  # 1. rollback: drop fed-but-rejected draft tokens
        # 2. eviction: keep what the next query (position _fed) may see; later queries see no more
        alive &= self._visible(torch.tensor([self._fed]), self.positions)[0]
        self._select(torch.nonzero(alive).flatten())

    @property
    def cache_size(self) -> int:
        """Entries per layer now held (at most the budget after a commit)."""
        return int(self.positions.numel())


def measure_acceptance(target: Any, tokenizer: Any, input_ids: torch.Tensor, cfg: Any,
                       detected: tuple[int, ...] | None, *, progress: Any = lambda msg: None) -> list[dict[str, Any]]:
    """alpha per policy: speculative decoding after a long prompt, greedy and sampled (seeded).

    The target sees everything; the draft (``cfg.draft``: early-exit or a separate
    model, built once by :func:`lab.speculative.draft_specs.make_draft`) sees only the policy's
    visible positions. ``recompute`` policies are skipped (no cache to evict).

    Args:
        target: The target causal LM.
        tokenizer: Its tokenizer (for a separate draft's vocabulary check, and EOS).
        input_ids: int64 ``[1, S]``; the prompt is its first ``cfg.prompt_tokens``.
        cfg: A :class:`lab.stream.experiment.StreamConfig` (prompt_tokens, gamma,
            max_new_tokens, temperature, seed, draft).
        detected: Ranked detector positions for ``detected`` policies.

    Returns:
        One dict per (policy, mode) with raw counts (``n_accepted``, ``n_tested``)
        and ``alpha`` = accepted / tested, ``tau``, the draft's cache size at the end.

    Raises:
        ValueError: a draft that is not a model (``prompt-lookup`` has no KV cache).
    """
    from lab.models.chat import eos_token_ids
    from lab.speculative.draft_specs import make_draft
    from lab.speculative.loop import speculative_generate
    from lab.speculative.settings import SpeculativeSettings

    base = make_draft(target, cfg.draft, target_tokenizer=tokenizer, weights=cfg.draft_weights)
    base_model = base.facts().model
    if base_model is None:
        raise ValueError(f"--draft={cfg.draft!r} has no KV cache to evict; use early-exit:N or a draft model")
    prompt = input_ids[:, : cfg.prompt_tokens]
    eos = eos_token_ids(target, tokenizer)
    rows = []
    for policy in [p for p in cfg.policies if p.kind != "recompute"]:
        for mode, temperature in (("greedy", 0.0), ("sampled", cfg.temperature)):
            progress(f"acceptance: draft under {policy.spec}, {mode}")
            draft = EvictingDraft(base, policy, detected)
            gen = torch.Generator(device=draft.device).manual_seed(cfg.seed)
            t0 = time.perf_counter()
            settings = SpeculativeSettings(max_new_tokens=cfg.max_new_tokens, gamma=cfg.gamma,
                                           sampling=SamplingConfig(temperature=temperature), eos_token_ids=eos)
            res = speculative_generate(target, draft, prompt.to(draft.device), settings, generator=gen)
            n_acc = sum(r.n_accepted for r in res.rounds)
            n_tested = sum(sum(r.tested_mask) for r in res.rounds)
            starts = [prompt.shape[1] + sum(len(q.emitted) for q in res.rounds[:i]) for i in range(len(res.rounds))]
            rows.append({"policy": policy.spec, "budget": policy.budget, "mode": mode, "temperature": temperature,
                         "alpha": n_acc / n_tested if n_tested else float("nan"), "n_accepted": n_acc,
                         "n_tested": n_tested, "n_rounds": len(res.rounds), "tau": res.tau,
                         "new_tokens": len(res.tokens), "draft_cache_size": draft.cache_size,
                         "wall_s": time.perf_counter() - t0, "tokens": list(res.tokens),
                         "rounds": [{"start": s, "proposed": list(r.proposed), "n_accepted": r.n_accepted,
                                     "n_tested": int(sum(r.tested_mask))} for s, r in zip(starts, res.rounds)]})
    _compare_greedy_rounds(rows)
    progress("acceptance: draft top-1 over the prompt, one masked pass per policy")
    top1 = draft_top1(target, base_model, prompt, [p for p in cfg.policies if p.kind != "recompute"], detected)
    for row in rows:
        row.update(top1[row["policy"]])
    return rows


def _compare_greedy_rounds(rows: list[dict[str, Any]]) -> None:
    """Add, to each greedy row, how its proposals differ from the dense draft's at the same committed prefix.

    Greedy runs commit the target's own tokens under every policy, so a round that
    starts at the same committed length drafts after the same prefix in both runs:
    ``rounds_compared`` such rounds, ``rounds_proposals_differ`` of them with any
    proposed token different, ``rounds_tested_differ`` with a different token among
    those the target tested (accepted ones plus the first rejected one),
    ``rounds_accepted_differ`` with a different accepted count. Rows stay
    unchanged when there is no greedy dense run.
    """
    dense = next((r for r in rows if r["policy"] == "dense" and r["mode"] == "greedy"), None)
    if dense is None:
        return
    by_start = {r["start"]: r for r in dense["rounds"]}
    for row in rows:
        if row["mode"] != "greedy":
            continue
        pairs = [(r, by_start[r["start"]]) for r in row["rounds"] if r["start"] in by_start]
        row["rounds_compared"] = len(pairs)
        row["rounds_proposals_differ"] = sum(a["proposed"] != b["proposed"] for a, b in pairs)
        row["rounds_tested_differ"] = sum(a["proposed"][: a["n_tested"]] != b["proposed"][: a["n_tested"]]
                                          for a, b in pairs)
        row["rounds_accepted_differ"] = sum(a["n_accepted"] != b["n_accepted"] for a, b in pairs)


@torch.inference_mode()
def draft_top1(target: Any, draft_model: Any, prompt: torch.Tensor, policies: list[Policy],
               detected: tuple[int, ...] | None) -> dict[str, dict[str, Any]]:
    """The draft's next-token prediction at every prompt position with a full budget, per policy.

    A large-sample companion to alpha (which rests on ``max_new_tokens`` tested tokens):
    one masked forward of the draft over the prompt per policy (equal to what the
    evicting draft's pruned cache computes, tested), scored at positions ``B - 1 ..
    S - 2`` where B is the largest budget (every evicting cache is full there).

    Args:
        target: The target causal LM (dense, unmasked).
        draft_model: The draft causal LM (same vocabulary).
        prompt: int64 ``[1, S]``.
        policies: Policies to score (no ``recompute``).
        detected: Ranked detector positions for ``detected`` policies.

    Returns:
        Per policy spec: ``top1_n`` positions; counts ``top1_agree_target`` (draft argmax =
        target argmax: a greedy draft token the target would accept) and
        ``top1_agree_dense_draft`` (= the dense draft's argmax; ``None`` without a
        ``dense`` policy); ``mean_overlap`` = mean over positions of sum_x min(p(x), q(x))
        at temperature 1 (the expected acceptance of one sampled draft token).
    """
    s = prompt.shape[1]
    start = max([p.budget for p in policies if p.budget is not None] or [1]) - 1
    if start >= s - 1:
        start = 0
    pos = torch.arange(s)
    dev = next(draft_model.parameters()).device
    ids = prompt.to(dev)
    p_t = target(input_ids=ids, use_cache=False).logits[0, start: s - 1].float().softmax(-1)  # [n, V]
    v = min(p_t.shape[-1], int(draft_model.config.vocab_size))
    t_arg = p_t.argmax(-1)
    out, dense_arg = {}, None
    for policy in sorted(policies, key=lambda p: p.kind != "dense"):  # dense first
        mask = model_attention_mask(draft_model, policy_visibility(policy, pos, pos, detected), pos, pos)
        logits = draft_model(input_ids=ids, attention_mask=mask, position_ids=pos[None].to(dev),
                             use_cache=False).logits[0, start: s - 1, :v].float()
        q = logits.softmax(-1)  # [n, v]
        arg = q.argmax(-1)
        if policy.kind == "dense":
            dense_arg = arg
        out[policy.spec] = {"top1_n": int(arg.numel()), "top1_agree_target": int((arg == t_arg).sum()),
                            "top1_agree_dense_draft": None if dense_arg is None else int((arg == dense_arg).sum()),
                            "mean_overlap": float(torch.minimum(q, p_t[:, :v]).sum(-1).mean())}
    return out
