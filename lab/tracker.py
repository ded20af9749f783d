"""Entropy tracker: per-step uncertainty of a decode, raw and as sampled.

At every decode step the tracker records, from the one logits row the model
already produced:

* the Shannon entropy of the model's own next-token distribution (raw logits,
  temperature 1), its normalized entropy ``H / log2 V`` and its varentropy;
* the entropy of the distribution the token was actually drawn from, after the
  temperature, top-k and top-p warpers (0 for greedy decoding, which draws from a
  point mass on the argmax);
* the top-k alternatives under the raw distribution with their probabilities, and
  the chosen token with its raw probability.

The per-step numbers come from :func:`row_statistics`, one ``log_softmax`` per row
with the formulas of :mod:`lab.entropy` (the unit tests check the two agree);
:mod:`lab.entropy` itself validates its input with several passes and host syncs,
too costly for every step of a decode.

Why an own decode loop instead of a ``LogitsProcessor`` inside ``generate``:
in transformers 5.24, ``generate`` builds its processor list in
``GenerationMixin._get_logits_processor`` with the sampling warpers last
(temperature, then top-k, then top-p) and merges user processors into that list,
so what a custom processor sees depends on where the merge puts it and on which
built-in processors the model's ``generation_config`` switches on (repetition
penalties, forced tokens, ``min_new_tokens`` ...). The label "raw" would then be
true only for some models. Here the loop is explicit, in the style of gpt-fast:
one prefill (:func:`prefill`), then one-token decodes (:func:`decode_one`) with a
``transformers.DynamicCache``; the warpers are transformers'
``TemperatureLogitsWarper`` -> ``TopKLogitsWarper`` -> ``TopPLogitsWarper`` (the
order ``generate`` applies them) in a ``LogitsProcessorList`` built by
:func:`build_warpers`. So ``logits`` in the loop are exactly the model's output
and ``warped`` exactly what ``torch.multinomial`` samples from. Nothing else from
``generation_config`` is applied: the numbers describe the model, not a
model-specific decoding recipe.

Cost: the statistics are computed on the logits row already on the device and
kept as 0-d tensors; they are moved to the host once, after the loop (where NaN
logits are detected and raised), and token texts are decoded after the loop too.
The only per-step host sync is the one the untracked loop also needs (the EOS
check). ``lab bench-tracker`` measures the overhead.

References: Shannon (1948) for entropy; varentropy as the variance of the
surprisal (Kontoyiannis & Verdu 2013), used per token by entropix-style samplers;
top-k sampling (Fan et al. 2018); nucleus / top-p sampling (Holtzman et al. 2020).

Shapes: B = batch (must be 1), S = prompt length, V = vocabulary size.
"""

from __future__ import annotations

import logging
import math
import secrets
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch


logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecodeSettings:
    """How to decode; validated on construction.

    Attributes:
        max_new_tokens: Stop after this many generated tokens (>= 1).
        temperature: 0 means greedy (argmax, deterministic); > 0 samples from
            ``softmax(logits / temperature)`` after top-k / top-p.
        top_p: Nucleus mass in (0, 1]; 1 disables the filter (sampling only).
        top_k: Keep the k most likely tokens (ties at the k-th logit kept, as in
            transformers); ``None`` disables the filter (sampling only).
        seed: Seed of the ``torch.Generator`` used for sampling; ``None`` draws a
            fresh one, recorded in :attr:`TrackResult.seed`.
        top_alternatives: How many raw-distribution alternatives each step keeps.

    Raises:
        ValueError: any field out of range, naming the field and echoing the value.
    """

    max_new_tokens: int = 64
    temperature: float = 0.0  # greedy by default: a tracker run is then reproducible
    top_p: float = 1.0
    top_k: int | None = None
    seed: int | None = None
    top_alternatives: int = 5

    def __post_init__(self) -> None:
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens!r} must be an integer >= 1")
        if not isinstance(self.temperature, (int, float)) or not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature={self.temperature!r} must be a finite number >= 0 (0 = greedy)")
        if not isinstance(self.top_p, (int, float)) or not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p={self.top_p!r} must be in (0, 1]")
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1):
            raise ValueError(f"top_k={self.top_k!r} must be an integer >= 1 or None")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0):
            raise ValueError(f"seed={self.seed!r} must be a non-negative integer or None")
        if isinstance(self.top_alternatives, bool) or not isinstance(self.top_alternatives, int) or self.top_alternatives < 1:
            raise ValueError(f"top_alternatives={self.top_alternatives!r} must be an integer >= 1")

    @property
    def do_sample(self) -> bool:
        """True when tokens are drawn at random (temperature > 0), False for greedy."""
        return self.temperature > 0


@dataclass(frozen=True)
class StepRecord:
    """What the tracker saw at one decode step.

    Attributes:
        position: Index of the generated token in the full sequence (prompt length
            + step number), the position its logits were predicted *for*.
        token_id: The chosen token.
        token_text: Its text as it appears in the decoded output (special tokens
            kept, e.g. ``<|im_end|>``).
        entropy_bits: Entropy of the raw distribution ``softmax(logits)`` (T = 1), bits.
        normalized_entropy: ``entropy_bits / log2 V`` in [0, 1].
        varentropy_bits2: Variance of the raw surprisal, bits^2.
        sampled_entropy_bits: Entropy of the distribution actually sampled from
            (after temperature, top-k, top-p), bits; 0 for greedy.
        sampled_normalized_entropy: The same divided by ``log2 V``.
        chosen_prob: Probability of ``token_id`` under the raw distribution.
        alternatives: ``(token_id, token_text, prob)`` of the raw top-k, most likely
            first; probabilities under the raw distribution.
    """

    position: int
    token_id: int
    token_text: str
    entropy_bits: float
    normalized_entropy: float
    varentropy_bits2: float
    sampled_entropy_bits: float
    sampled_normalized_entropy: float
    chosen_prob: float
    alternatives: list[tuple[int, str, float]] = field(default_factory=list)


@dataclass
class TrackResult:
    """A tracked decode.

    Attributes:
        steps: One :class:`StepRecord` per generated token.
        prompt_ids: ``[1, S]`` int64 prompt, on the CPU.
        new_token_ids: Generated ids, EOS included when generation stopped on it.
        text: Decoded generated text, special tokens skipped.
        settings: The :class:`DecodeSettings` used.
        stop_reason: ``"eos"`` or ``"max_new_tokens"``.
        elapsed_s: Wall time of prefill + decode + statistics (excludes text decoding).
        seed: The sampling seed actually used (``None`` for greedy).
        vocab_size: V, the size of the logits row (sets the normalized-entropy scale).
    """

    steps: list[StepRecord]
    prompt_ids: torch.Tensor
    new_token_ids: list[int]
    text: str
    settings: DecodeSettings
    stop_reason: str
    elapsed_s: float
    seed: int | None = None
    vocab_size: int = 0

    def _entropies(self) -> list[float]:
        return [s.entropy_bits for s in self.steps]

    @property
    def mean_entropy_bits(self) -> float:
        """Mean raw entropy over steps (bits); NaN when there are no steps."""
        return statistics.fmean(self._entropies()) if self.steps else math.nan

    @property
    def max_entropy_bits(self) -> float:
        """Largest raw entropy of any step (bits); NaN when there are no steps."""
        return max(self._entropies()) if self.steps else math.nan

    @property
    def var_entropy_bits(self) -> float:
        """Population variance of the raw entropy over steps (bits^2): how much the
        uncertainty moves during the decode. 0 for a single step."""
        return statistics.pvariance(self._entropies()) if self.steps else math.nan

    @property
    def mean_varentropy_bits2(self) -> float:
        """Mean per-step varentropy (bits^2); NaN when there are no steps."""
        return statistics.fmean(s.varentropy_bits2 for s in self.steps) if self.steps else math.nan

    @property
    def mean_sampled_entropy_bits(self) -> float:
        """Mean entropy of the sampled-from distributions (bits); 0 for greedy."""
        return statistics.fmean(s.sampled_entropy_bits for s in self.steps) if self.steps else math.nan

    def most_uncertain(self, n: int = 5) -> list[StepRecord]:
        """The ``n`` steps with the highest raw entropy, highest first."""
        return sorted(self.steps, key=lambda s: s.entropy_bits, reverse=True)[:n]

    def summary(self) -> dict[str, Any]:
        """Summary statistics as plain numbers (for reports)."""
        return {
            "n_steps": len(self.steps),
            "stop_reason": self.stop_reason,
            "mean_entropy_bits": self.mean_entropy_bits,
            "max_entropy_bits": self.max_entropy_bits,
            "var_entropy_bits": self.var_entropy_bits,
            "mean_varentropy_bits2": self.mean_varentropy_bits2,
            "mean_sampled_entropy_bits": self.mean_sampled_entropy_bits,
            "elapsed_s": self.elapsed_s,
            "tokens_per_s": len(self.steps) / self.elapsed_s if self.elapsed_s > 0 else math.nan,
        }


# --------------------------------------------------------------------------- decode loop


def build_warpers(settings: DecodeSettings):
    """The sampling warpers, in the order ``generate`` applies them.

    Returns:
        A ``transformers.LogitsProcessorList`` (empty for greedy): temperature, then
        top-k (if set), then top-p (if < 1). Masked entries become ``-inf``.
    """
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    warpers = LogitsProcessorList()
    if not settings.do_sample:
        return warpers
    warpers.append(TemperatureLogitsWarper(float(settings.temperature)))
    if settings.top_k is not None:
        warpers.append(TopKLogitsWarper(top_k=settings.top_k))
    if settings.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=float(settings.top_p)))
    return warpers


@torch.inference_mode()
def prefill(model: Any, input_ids: torch.Tensor, cache: Any) -> torch.Tensor:
    """Run the prompt through the model once, filling ``cache``.

    Args:
        input_ids: ``[1, S]`` int64 on the model's device.
        cache: An empty ``transformers.DynamicCache``; filled in place (its owner is
            the decode loop).

    Returns:
        Float logits ``[1, V]`` for the position after the prompt.
    """
    out = model(input_ids=input_ids, cache=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1, :]  # [1, 1, V] -> [1, V]


@torch.inference_mode()
def decode_one(model: Any, token: torch.Tensor, cache: Any) -> torch.Tensor:
    """One decode step: feed one token ``[1, 1]``, extend ``cache``, return logits ``[1, V]``."""
    out = model(input_ids=token, cache=cache, use_cache=True)
    return out.logits[:, -1, :]


# exp(-1e4) is exactly 0 in float32 and float64, so clamping log-probs at this floor
# changes no probability; it turns the -inf of masked entries into a finite number
# so that p * log p is 0 * finite = 0 instead of 0 * inf = NaN, without a mask pass.
LOG_PROB_FLOOR = -1.0e4


def row_statistics(logits: torch.Tensor, *, with_varentropy: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Entropy and varentropy of one logits row from a single ``log_softmax``.

    The same quantities as :func:`lab.entropy.entropy` and :func:`lab.entropy.varentropy`
    (Shannon entropy; varentropy ``sum_i p_i (-log p_i - H)^2``), fused for the decode
    loop: one log-softmax, no input checks (each check is a pass over V and, on a GPU,
    a host sync per step). A NaN or +inf logit yields a NaN entropy, which
    :func:`track_generate` turns into an error after the loop.

    Args:
        logits: Float logits ``[V]`` (any float dtype; computed in float32, or float64
            for float64 input); ``-inf`` entries are masked tokens.
        with_varentropy: Skip the varentropy passes when ``False`` (returns 0 for it).

    Returns:
        ``(entropy_nats, varentropy_nats2, log_probs)``: two 0-d tensors and the
        ``[V]`` log-probabilities (floored at :data:`LOG_PROB_FLOOR`).
    """
    x = logits if logits.dtype == torch.float64 else logits.float()
    log_p = torch.log_softmax(x, dim=-1).clamp_min(LOG_PROB_FLOOR)  # [V]
    p = log_p.exp()
    h = -torch.dot(p, log_p)  # one fused multiply-add pass
    if not with_varentropy:
        return h, torch.zeros_like(h), log_p
    varent = torch.dot(p, (log_p + h).square())  # (-log p - H)^2 = (log p + H)^2
    return h, varent, log_p


class _Recorder:
    """Per-step statistics kept as device tensors until :meth:`finish`."""

    def __init__(self, top_alternatives: int, do_sample: bool):
        self.k = top_alternatives
        self.do_sample = do_sample
        self.rows: list[torch.Tensor] = []  # each [4]: H, varentropy, H_sampled (nats), log p(chosen)
        self.alt_ids: list[torch.Tensor] = []  # each [k]
        self.alt_log_probs: list[torch.Tensor] = []  # each [k]
        self.vocab_size = 0

    def record(self, logits: torch.Tensor, warped: torch.Tensor, chosen: torch.Tensor) -> None:
        # logits, warped: [1, V]; chosen: [1, 1] int64. Everything stays on the device;
        # unit conversions wait for finish(), so each step launches as few kernels as possible.
        row = logits[0]  # [V]
        self.vocab_size = row.shape[-1]
        h, varent, log_p = row_statistics(row)
        if self.do_sample:
            h_sampled = row_statistics(warped[0], with_varentropy=False)[0]
        else:
            h_sampled = torch.zeros_like(h)  # greedy draws from a point mass on the argmax
        top_log_p, top_ids = log_p.topk(min(self.k, self.vocab_size))  # [k], most likely first
        self.rows.append(torch.stack([h, varent, h_sampled, log_p[chosen[0, 0]]]))  # nats, nats^2, nats, log p
        self.alt_ids.append(top_ids)
        self.alt_log_probs.append(top_log_p)

    def finish(self) -> tuple[list[list[float]], list[list[int]], list[list[float]]]:
        """Move everything to the host once; rows become ``[H, H/log2 V, varentropy, H_sampled,
        p_chosen]`` in bits, bits^2 and probabilities."""
        if not self.rows:
            return [], [], []
        raw = torch.stack(self.rows).double().cpu()  # [n, 4]
        ln2 = math.log(2.0)
        norm = math.log(self.vocab_size) if self.vocab_size > 1 else math.inf  # V = 1: normalized 0
        rows = torch.stack([raw[:, 0] / ln2, raw[:, 0] / norm, raw[:, 1] / ln2**2, raw[:, 2] / ln2,
                            raw[:, 3].exp()], dim=1)  # [n, 5]
        return (rows.tolist(), torch.stack(self.alt_ids).cpu().tolist(),
                torch.stack(self.alt_log_probs).double().cpu().exp().tolist())


def _check_input_ids(input_ids: Any) -> torch.Tensor:
    if not isinstance(input_ids, torch.Tensor):
        raise ValueError(f"input_ids must be a torch.Tensor of token ids, got {type(input_ids).__name__}")
    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(0)  # [S] -> [1, S]
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must have shape [1, S], got {tuple(input_ids.shape)}")
    if input_ids.shape[0] != 1:
        raise ValueError(f"input_ids has batch size {input_ids.shape[0]} (shape {tuple(input_ids.shape)}); "
                         "the tracker decodes one sequence at a time, pass shape [1, S]")
    if input_ids.shape[1] == 0:
        raise ValueError(f"input_ids is empty (shape {tuple(input_ids.shape)}); give at least one prompt token")
    if input_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
    return input_ids.to(torch.long)


def _model_device(model: Any) -> torch.device:
    return next(model.parameters()).device


@dataclass
class DecodeRun:
    """Raw output of :func:`run_decode`.

    Attributes:
        new_token_ids: Generated ids.
        stop_reason: ``"eos"`` or ``"max_new_tokens"``.
        elapsed_s: Wall time of the loop (prefill, decode and, if on, the statistics).
        stats: Per step ``[H, H_norm, varentropy, H_sampled, p_chosen]`` (bits), or
            ``None`` when not recording.
        alt_ids, alt_probs: Per step the raw top-k ids and probabilities.
        vocab_size: V of the logits rows (0 when not recording).
    """

    new_token_ids: list[int]
    stop_reason: str
    elapsed_s: float
    stats: list[list[float]] | None = None
    alt_ids: list[list[int]] | None = None
    alt_probs: list[list[float]] | None = None
    vocab_size: int = 0


def run_decode(model: Any, input_ids: torch.Tensor, settings: DecodeSettings, *, eos_ids: set[int],
               record: bool, seed: int | None) -> DecodeRun:
    """The decode loop shared by :func:`track_generate` and ``lab bench-tracker``.

    Args:
        input_ids: ``[1, S]`` int64 (validated).
        settings: Decoding settings.
        eos_ids: Tokens that stop the decode; an empty set decodes exactly
            ``max_new_tokens`` tokens (the benchmark does this).
        record: Whether to run the tracker's statistics.
        seed: Seed for the sampling generator (ignored when greedy).

    Returns:
        A :class:`DecodeRun`.
    """
    from transformers import DynamicCache

    if settings.do_sample and seed is None:
        raise ValueError("seed=None: run_decode needs an explicit seed when sampling (track_generate draws one)")
    device = _model_device(model)
    ids = input_ids.to(device)
    warpers = build_warpers(settings)
    generator = None
    if settings.do_sample:
        generator = torch.Generator(device=device)
        generator.manual_seed(seed)
    recorder = _Recorder(settings.top_alternatives, settings.do_sample) if record else None
    cache = DynamicCache(config=model.config)
    new_ids: list[int] = []
    stop_reason = "max_new_tokens"
    start = time.perf_counter()
    with torch.inference_mode():
        # 1. Prefill: the prompt fills the KV cache; logits for the first new token.
        logits = prefill(model, ids, cache)  # [1, V]
        seq = ids
        for _ in range(settings.max_new_tokens):
            # 2. Choose: greedy argmax of the raw logits, or a draw from the warped ones.
            if settings.do_sample:
                warped = warpers(seq, logits.float())  # [1, V], -inf where filtered
                probs = torch.softmax(warped, dim=-1)
                token = torch.multinomial(probs, 1, generator=generator)  # [1, 1]
            else:
                warped = logits
                token = logits.argmax(dim=-1, keepdim=True)  # [1, 1]
            # 3. Record: statistics of this row, left on the device.
            if recorder is not None:
                recorder.record(logits, warped, token)
            # 4. Stop or decode the next position (one host sync, also without tracking).
            token_id = int(token.item())
            new_ids.append(token_id)
            if token_id in eos_ids:
                stop_reason = "eos"
                break
            if len(new_ids) == settings.max_new_tokens:
                break
            if warpers:  # only the warpers read the sequence; keep it only when needed
                seq = torch.cat([seq, token], dim=1)
            logits = decode_one(model, token, cache)
        # 5. Statistics to the host, once.
        stats = recorder.finish() if recorder is not None else (None, None, None)
    elapsed = time.perf_counter() - start
    return DecodeRun(new_ids, stop_reason, elapsed, *stats,
                     vocab_size=recorder.vocab_size if recorder is not None else 0)


def _token_pieces(tokenizer: Any, ids: list[int]) -> list[str]:
    """Text each generated token adds to the decoded output (specials kept).

    Decoding prefixes keeps multi-byte characters split over byte-level tokens
    whole: the piece of a token that completes a character carries it, the pieces
    before it are empty. Falls back to a single-token decode where a prefix's text
    is not a prefix of the next (tokenizers that rewrite whitespace).
    """
    pieces: list[str] = []
    prev = ""
    for i in range(len(ids)):
        text = tokenizer.decode(ids[: i + 1], skip_special_tokens=False)
        if text.startswith(prev) and not text.endswith("\ufffd"):
            pieces.append(text[len(prev):])
            prev = text
        elif text.endswith("\ufffd") and i + 1 < len(ids):
            pieces.append("")  # incomplete character; the next token completes it
        elif text.startswith(prev):
            pieces.append(text[len(prev):])  # the decode ended inside a character: show what is there
            prev = text
        else:
            pieces.append(tokenizer.decode([ids[i]], skip_special_tokens=False))
            prev = text
    return pieces


def track_generate(model: Any, tokenizer: Any, input_ids: torch.Tensor, *, max_new_tokens: int = 64,
                   temperature: float = 0.0, top_p: float = 1.0, top_k: int | None = None,
                   seed: int | None = None, top_alternatives: int = 5) -> TrackResult:
    """Decode from ``input_ids`` and record the entropy of every step.

    Args:
        model: A transformers causal LM in eval mode (any device).
        tokenizer: Its tokenizer (decodes token texts after the loop).
        input_ids: ``[1, S]`` (or ``[S]``) int64 prompt ids, e.g. from
            :func:`lab.models.encode_chat`.
        max_new_tokens, temperature, top_p, top_k, seed, top_alternatives: See
            :class:`DecodeSettings`. ``temperature=0`` is greedy; top-p/top-k then
            have no effect.

    Returns:
        A :class:`TrackResult`. Stops at an EOS id (:func:`lab.models.eos_token_ids`)
        or after ``max_new_tokens``.

    Raises:
        ValueError: empty prompt, batch size > 1, or a setting out of range (the
            message names the argument and echoes the value).
    """
    from lab.models import eos_token_ids

    settings = DecodeSettings(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                              top_k=top_k, seed=seed, top_alternatives=top_alternatives)
    ids = _check_input_ids(input_ids)
    if not settings.do_sample and (settings.top_k is not None or settings.top_p < 1.0):
        logger.info("temperature=0 decodes greedily; top_k=%s and top_p=%s have no effect",
                    settings.top_k, settings.top_p)
    used_seed = None
    if settings.do_sample:
        used_seed = settings.seed if settings.seed is not None else secrets.randbits(62)
    run = run_decode(model, ids, settings, eos_ids=eos_token_ids(model, tokenizer), record=True, seed=used_seed)
    new_ids, rows, alt_ids, alt_probs = run.new_token_ids, run.stats, run.alt_ids, run.alt_probs
    assert rows is not None and alt_ids is not None and alt_probs is not None
    assert len(rows) == len(new_ids), f"{len(rows)} records for {len(new_ids)} tokens"
    bad = [i for i, row in enumerate(rows) if not all(math.isfinite(x) for x in row)]
    if bad:
        raise RuntimeError(f"the model produced NaN or +inf logits at decode step(s) {bad[:10]}; "
                           "the entropy there is undefined (try float32: --dtype float32)")

    # Token texts are decoded once, after the loop.
    pieces = _token_pieces(tokenizer, new_ids)
    alt_text = {t: tokenizer.decode([t], skip_special_tokens=False) for t in {t for row in alt_ids for t in row}}
    vocab_size = run.vocab_size
    log2_v = math.log2(vocab_size) if vocab_size > 1 else math.nan
    prompt_len = ids.shape[1]
    steps = []
    for i, (tid, (h, h_norm, varent, h_sampled, p_chosen)) in enumerate(zip(new_ids, rows)):
        steps.append(StepRecord(
            position=prompt_len + i, token_id=tid, token_text=pieces[i], entropy_bits=h,
            normalized_entropy=h_norm, varentropy_bits2=varent, sampled_entropy_bits=h_sampled,
            sampled_normalized_entropy=h_sampled / log2_v if vocab_size > 1 else 0.0,
            chosen_prob=p_chosen,
            alternatives=[(a, alt_text[a], p) for a, p in zip(alt_ids[i], alt_probs[i])],
        ))
    return TrackResult(
        steps=steps, prompt_ids=ids.cpu(), new_token_ids=new_ids,
        text=tokenizer.decode(new_ids, skip_special_tokens=True), settings=settings,
        stop_reason=run.stop_reason, elapsed_s=run.elapsed_s, seed=used_seed, vocab_size=vocab_size,
    )
