"""The real per-prompt runner: one target prefill (the attention capture's) and one target decode.

Per prompt: the prefill analysis fills the target's KV cache while it captures the
attention; the speculative decode goes on from that cache, and the entropy
tracker's statistics are read off its verify passes at every committed position
(:func:`lab.tracker.speculative.track_speculative`), so the target prefills and
decodes each prompt once. The statistics equal those of a separate tracked
target-only decode (greedy: to float tolerance; sampling: the same distribution;
both tested). A prompt of the H6 subset runs again at the other
design temperatures from a copy of the same prefill (:meth:`ModelRunner.alpha_at`).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from lab.models import loading as lab_models
from lab.models.chat import encode_chat, eos_token_ids
from lab.models.source import model_source
from lab.study.config import StudyConfig, prompt_seed
from lab.study.outcome import TOKEN_KEYS, DraftedToken, PromptOutcome, PromptRow, TrackedDecode
from lab.prompts import StudyPrompt
from lab.speculative.drafts import Drafter

logger = logging.getLogger(__name__)


def _count(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return int(value.bool().sum()) if value.dtype == torch.bool else int(value.numel())
    return len(value) if value is not None else 0


PIPELINE = ("one target prefill (the attention capture's, which fills the KV cache) and one target decode "
            "(speculative; the tracker's statistics read off its verify passes: lab.tracker.track_speculative); "
            "a twin also a 24-token greedy continuation and one teacher-forced pass with eager attention for its "
            "context measure (lookback_heads, H1)")


def model_dtypes(target: Any, draft: Drafter, draft_dtype_source: str) -> dict[str, Any]:
    """Each model's dtype for the report (a per-pass draft's as PREFILL:STEP), and where the draft's came from.

    A draft without weights of its own (prompt lookup, early exit) is reported in the target's dtype.
    """
    target_dtype = str(next(target.parameters()).dtype).removeprefix("torch.")
    return {"target_dtype": target_dtype, "draft_dtype": draft.facts().weight_dtype or target_dtype,
            "draft_dtype_source": draft_dtype_source, "pipeline": PIPELINE}


def context_measure_inputs(config: StudyConfig) -> tuple[Any, dict[str, StudyPrompt]]:
    """The model's fitted context measure (:func:`lab.health.context_validity.load_context_measure`; None for a
    model that is not a profile or has none) and the prompt file's clean prompts by id, for the twins' spans.

    Raises:
        FileSchemaError: the measure's file is bad (one line naming it).
    """
    from lab.health.context_validity import load_context_measure
    from lab.models.profiles import PROFILES
    from lab.prompts import default_prompts_path
    from lab.sources import load_prompt_set

    found = load_context_measure(config.model) if config.model in PROFILES else None
    # the study's own loader: a file or a named source (humaneval, pydoc-topics, ...), as plan_study reads it
    clean = {p.id: p for p in load_prompt_set(config.prompts or default_prompts_path()) if p.variant == "clean"}
    return (None if found is None else found.reference), clean


def twin_context_measure(runner: "ModelRunner", prompt: StudyPrompt) -> tuple[float | None, int | None]:
    """``(lookback_heads, span tokens)`` of a twin (:func:`lab.health.context_items.twin_lookback`); ``(None, None)``
    (not measured) for a clean prompt, a twin whose clean prompt is not in the file, or a model without a fitted
    measure."""
    from lab.health.context_items import twin_lookback
    from lab.health.context_validity import NEW_TOKENS

    clean = runner.clean_prompts.get(prompt.twin_of or "")
    if prompt.variant == "clean" or clean is None or runner.context_reference is None:
        return None, None
    eos = frozenset(eos_token_ids(runner.target, runner.tokenizer))
    value, n_context = twin_lookback(runner.target, runner.tokenizer, eos, prompt, clean, runner.context_reference,
                                     NEW_TOKENS)
    return value, n_context


class ModelRunner:
    """The real per-prompt runner: target, tokenizer and draft, loaded once.

    Args:
        target: The target causal LM (eval mode).
        tokenizer: Its tokenizer.
        draft: A drafter from :func:`lab.speculative.draft_specs.make_draft`.
        config: The study settings (decode budget, gamma, temperature, seed).
        info: Description of the models for the report.
    """

    def __init__(self, target: Any, tokenizer: Any, draft: Drafter, config: StudyConfig, info: dict[str, Any],
                 context_reference: Any = None, clean_prompts: dict[str, StudyPrompt] | None = None):
        self.target, self.tokenizer, self.draft, self.config, self.info = target, tokenizer, draft, config, info
        self._prefilled: tuple[str | None, Any] = (None, None)  # (prompt id, its capture cache) for alpha_at
        # H1's context measure: the model's fitted lookback_heads and the clean prompts its twins' spans are
        # located against; without either a twin's lookback_heads is NaN
        self.context_reference, self.clean_prompts = context_reference, clean_prompts or {}

    @classmethod
    def load(cls, config: StudyConfig) -> "ModelRunner":
        """Load the target (``lab.models.loading.load_model``) and build the profile's draft.

        Raises:
            ValueError, lab.models.loading.ModelUnavailableError: as the loaders do.
        """
        from lab.speculative.draft_specs import check_draft_spec, make_draft

        spec = config.draft_spec()
        dtype, source = config.draft_dtype_choice()
        if check_draft_spec(spec) != "model":  # early-exit / prompt lookup: no weights of their own
            dtype, source = None, "the target's (the draft shares its weights or has none)"
        t0 = time.perf_counter()
        target, tokenizer = lab_models.load_model(config.model, device=config.device, dtype=config.dtype,
                                                  weights=config.weights)
        draft = make_draft(target, spec, target_tokenizer=tokenizer, dtype=dtype, weights=config.draft_weights)
        info = {"model": model_source(target).as_dict(),
                "draft": spec, "draft_name": draft.name,
                "load_s": time.perf_counter() - t0, "weights": config.weights, "draft_weights": config.draft_weights,
                **model_dtypes(target, draft, source)}
        return cls(target, tokenizer, draft, config, info, *context_measure_inputs(config))

    def _speculative(self, input_ids: Any, temperature: float, seed: int, target_cache: Any = None) -> Any:
        """One seeded speculative decode of the prompt (:func:`lab.speculative.loop.speculative_generate`)."""
        import torch

        from lab.sampling import SamplingConfig
        from lab.speculative.loop import speculative_generate
        from lab.speculative.settings import SpeculativeSettings

        device = next(self.target.parameters()).device
        gen = torch.Generator(device=device if device.type != "mps" else "cpu").manual_seed(seed)
        settings = SpeculativeSettings(max_new_tokens=self.config.max_new_tokens, gamma=self.config.gamma,
                                       sampling=SamplingConfig(temperature=temperature),
                                       eos_token_ids=eos_token_ids(self.target, self.tokenizer))
        return speculative_generate(self.target, self.draft, input_ids.to(device), settings, generator=gen,
                                    target_cache=target_cache)

    def alpha_at(self, prompt: StudyPrompt, temperature: float) -> float:
        """alpha of the prompt's speculative decode at another temperature (H6), same seed and budget.

        The prompt's KV cache does not depend on the temperature: right after the prompt's own
        run (:meth:`__call__`) a copy of its capture prefill is decoded from, so H6 adds no prefill.
        """
        import copy

        input_ids = encode_chat(self.tokenizer, [dict(m) for m in prompt.messages])
        stored_id, stored = self._prefilled
        cache = copy.deepcopy(stored) if stored_id == prompt.id else None  # the decode crops and extends its cache
        return float(self._speculative(input_ids, temperature, prompt_seed(self.config.seed, prompt.id), cache).alpha)

    def __call__(self, prompt: StudyPrompt) -> PromptOutcome:
        import copy

        import torch

        from lab.analysis.claims import word_positions
        from lab.decode import enable_rollback, new_cache
        from lab.sinks.prefill import analyze_prefill
        from lab.tracker.results import DecodeSettings
        from lab.tracker.speculative import track_speculative

        cfg = self.config
        seed = prompt_seed(cfg.seed, prompt.id)
        messages = [dict(m) for m in prompt.messages]
        input_ids = encode_chat(self.tokenizer, messages)
        t_start = time.perf_counter()

        # 1. prefill, once: where attention goes and how healthy the context is; the capture
        #    fills the target's KV cache (past recording on, so the decode can crop it)
        cache = new_cache(self.target)
        enable_rollback(cache)
        pre = analyze_prefill(self.target, self.tokenizer, messages, cache=cache)
        if not torch.equal(pre.input_ids.cpu(), input_ids[0].cpu()):  # the capture tokenized differently
            logger.warning("prompt %s: the prefill's tokens differ from the chat encoding; prefilling again", prompt.id)
            cache = None
        # the prefilled prompt, kept for this prompt's H6 runs at other temperatures (alpha_at); a
        # few MB at the study's prompt lengths, replaced by the next prompt's
        self._prefilled = (prompt.id, copy.deepcopy(cache) if cache is not None else None)
        t_pre = time.perf_counter()
        rates = [float(v) for v in torch.as_tensor(pre.sink_rate).reshape(-1).tolist()]
        content = [r for r, role in zip(rates, pre.roles) if role == "content"]

        # 2. one target decode: speculative (same sampling, seeded), with the tracker's per-step
        #    statistics read off the verify passes at every committed position
        decode = DecodeSettings(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, seed=seed)
        track, spec = track_speculative(self.target, self.draft, self.tokenizer, input_ids, decode, gamma=cfg.gamma,
                                        target_cache=cache)
        t_spec = time.perf_counter()
        lookback, n_context = twin_context_measure(self, prompt)  # H1's measure: twins only, after the decode

        # 3. word positions (H5) from the tokenizer, per generated token
        entropies = [float(s.entropy_bits) for s in track.steps]
        pieces = [self.tokenizer.decode([int(t)]) for t in track.new_token_ids[:len(entropies)]]
        words = word_positions(pieces)
        initial = [h for h, w in zip(entropies, words) if w == "initial"]
        continuation = [h for h, w in zip(entropies, words) if w == "continuation"]

        row = PromptRow(
            n_prompt_tokens=int(input_ids.shape[1]),
            context_health=float(pre.context_health),  # graded (lab.health.measures), NaN = not measurable
            content_sink_health=float(pre.content_sink_health),
            n_content_tokens=int(sum(role == "content" for role in pre.roles)),
            **{f"health_{name}": float(v) for name, v in pre.health_candidates.items()},
            sink_rate_pos0=rates[0] if rates else math.nan,
            sink_rate_content_mean=sum(content) / len(content) if content else math.nan,
            position0_share=float(pre.position0_share),
            n_content_sinks=_count(pre.content_sinks),
            mean_entropy_bits=track.mean_entropy_bits,
            max_entropy_bits=track.max_entropy_bits,
            var_entropy_bits=track.var_entropy_bits,
            mean_varentropy_bits2=track.mean_varentropy_bits2,
            n_new_tokens=len(track.new_token_ids),
            initial_entropy_bits=sum(initial) / len(initial) if initial else math.nan,
            continuation_entropy_bits=sum(continuation) / len(continuation) if continuation else math.nan,
            n_multi_token_words=len(initial),
            alpha=spec.alpha,
            tau=spec.tau,
            n_drafted=spec.n_drafted,
            n_drafted_tested=spec.n_drafted_tested,
            n_accepted=spec.n_accepted,
            n_rounds=len(spec.rounds),
            prefill_s=t_pre - t_start,
            speculative_s=t_spec - t_pre,
            lookback_heads=lookback,
            n_context_tokens=n_context,
            text=track.text,
        )
        tokens = tuple(DraftedToken(**{k: t[k] for k in TOKEN_KEYS}) for t in spec.per_token())
        return PromptOutcome(row=row, tokens=tokens, decode=TrackedDecode(tuple(entropies), tuple(words)))
