"""``lab stream`` as a library call: NLL per policy, statistics, acceptance, benchmark figures.

Model-facing orchestration over :mod:`lab.stream.perplexity` (one masked pass per
policy, the recompute oracle), :mod:`lab.stream.detect` (the sink detector on the
first chunk), :mod:`lab.stream.acceptance` (speculative decoding with an evicting
draft) and :mod:`lab.stream.analysis` (bootstrap CIs, the pre-stated test). The
evaluation region starts at the largest policy budget B: from target B on, every
evicting policy's cache is full, which is the regime StreamingLLM's Table 1
measures; PPL over all targets is reported too.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from lab.ranges import DETECT_TOKENS, GAMMA, RECOMPUTE_BATCH, SAMPLED_TEMPERATURE, SEED, TOKENS, check_value
from lab.stream import analysis
from lab.stream.detect import Detection, detect_sinks
from lab.stream.perplexity import check_fits, masked_nll, perplexity, recompute_nll, recompute_targets
from lab.stream.policies import DEFAULT_POLICIES, Policy, parse_policies

logger = logging.getLogger(__name__)

# Tokens per rolling-mean point in the plot.
ROLLING_WIDTH = 64
# Scored points per rolling-mean point of the sparse recompute oracle.
RECOMPUTE_ROLLING_POINTS = 16


@dataclass(frozen=True)
class StreamConfig:
    """Settings of one ``lab stream`` run (the CLI flags map one to one)."""

    policies: tuple[Policy, ...] = field(default_factory=lambda: parse_policies(DEFAULT_POLICIES))
    n_tokens: int = 4096  # the first 4,096 tokens of the text, as the issue states
    chunk_tokens: int = 128  # ~30 chunks over 4,096 tokens: enough pairs for the Wilcoxon test
    detect_tokens: int = 512  # the "first chunk" the sink detector sees
    recompute_every: int = 16  # the oracle scores every 16th target: ~W/16 forwards per token scored
    recompute_batch: int = 16  # windows per forward of the oracle
    acceptance: bool = True
    prompt_tokens: int = 1024  # the long prompt of the acceptance runs (> every budget)
    max_new_tokens: int = 32
    gamma: int = 4
    temperature: float = 1.0  # of the sampled acceptance run (the greedy run uses 0)
    seed: int = 0
    draft: str | None = None  # None: the profile's draft
    draft_weights: str = "float32"  # a draft model's linear layers (lab.models.weights)
    calibration: str | None = None  # a sink calibration file for detected:K+W; None: the model's own

    def __post_init__(self) -> None:
        for name, rng in (("n_tokens", TOKENS), ("chunk_tokens", TOKENS), ("detect_tokens", TOKENS),
                          ("recompute_every", TOKENS), ("recompute_batch", RECOMPUTE_BATCH),
                          ("prompt_tokens", TOKENS), ("max_new_tokens", TOKENS), ("gamma", GAMMA)):
            flag = "--tokens" if name == "n_tokens" else "--" + name.replace("_", "-")
            check_value(flag, getattr(self, name), rng, "must be a positive integer")
        from lab.models.weights import WEIGHTS

        if self.draft_weights not in WEIGHTS:
            raise ValueError(f"--draft-weights={self.draft_weights!r} must be one of {', '.join(WEIGHTS)}")
        check_value("--seed", self.seed, SEED)
        check_value("--detect-tokens", self.detect_tokens, DETECT_TOKENS, f"must be >= {DETECT_TOKENS.lo}")
        check_value("--temperature", self.temperature, SAMPLED_TEMPERATURE,
                    "must be > 0 (the greedy run is always made too)")
        need = self.eval_start + 2 * self.chunk_tokens
        if self.n_tokens < need:
            use = (f"use at least {need}" if need <= TOKENS.input_hi else
                   f"no --tokens can (at most {TOKENS.input_hi}): give smaller --policies or --chunk-tokens")
            raise ValueError(f"--tokens={self.n_tokens} leaves fewer than 2 chunks of {self.chunk_tokens} after the "
                             f"largest budget {self.eval_start}; {use}")
        if self.acceptance and self.prompt_tokens > self.n_tokens:
            raise ValueError(f"--prompt-tokens={self.prompt_tokens} exceeds --tokens={self.n_tokens}")

    @property
    def eval_start(self) -> int:
        """B: the first target of the evaluation region (the largest budget, at least 1)."""
        return max([p.budget for p in self.policies if p.budget is not None] + [1])


@dataclass
class PolicyRun:
    """One policy's scores and costs.

    Attributes:
        policy: The policy.
        nll: Float64 ``[S - 1]`` NLL (nats) per target, NaN where not scored.
        wall_s: Wall time of its forward passes.
        peak_rss_mb: Peak resident memory during it beyond the RSS before it (MB),
            None where the OS cannot reset the peak.
        n_scored: Targets scored.
    """

    policy: Policy
    nll: np.ndarray
    wall_s: float
    peak_rss_mb: float | None
    n_scored: int


@dataclass
class StreamResult:
    config: StreamConfig
    input_ids: torch.Tensor
    detection: Detection | None
    runs: list[PolicyRun]
    summary: list[dict[str, Any]]
    tests: list[analysis.PairedTest]
    recompute_check: dict[str, Any] | None
    acceptance: list[dict[str, Any]]
    bench: dict[str, Any]
    rolling: dict[str, np.ndarray]

    @property
    def greedy_top1_agree_range(self) -> tuple[int, int] | None:
        """Fewest and most prompt positions, over the greedy drafts, at which a draft's top-1 is the
        target's (``top1_agree_target`` of the large-sample check,
        :func:`lab.stream.acceptance.draft_top1`); None when no greedy draft carries the check."""
        agree = [a["top1_agree_target"] for a in self.acceptance
                 if a["mode"] == "greedy" and "top1_agree_target" in a]
        return (min(agree), max(agree)) if agree else None


def default_text() -> tuple[str, str]:
    """The default text: ``pydoc_data.topics`` (the ``help()`` topics shipped with CPython), topics in key order."""
    import sys

    from pydoc_data import topics

    text = "\n\n".join(topics.topics[k] for k in sorted(topics.topics))
    return text, f"pydoc_data.topics (CPython {sys.version.split()[0]}, {len(topics.topics)} topics, sorted by key)"


def _rss_mb(field_name: str) -> float | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (Linux: write 5 to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def machine_state() -> dict[str, Any]:
    """Load average, CPU count and torch threads, with the busy flag of every lab bench
    (:func:`lab.machine.is_busy`: 1-min load above the torch threads in use + its margin)."""
    from lab.machine import is_busy, sample_load

    sample = sample_load()
    return {"load_average": [sample.load_1m, sample.load_5m, sample.load_15m], "cpu_count": sample.cpu_count,
            "torch_threads": sample.torch_threads, "busy": bool(is_busy(sample))}


def _score(model: Any, ids: torch.Tensor, policy: Policy, cfg: StreamConfig,
           detected: tuple[int, ...] | None) -> tuple[np.ndarray, int]:
    s = ids.shape[1]
    nll = np.full(s - 1, np.nan)
    if policy.kind == "recompute":
        targets = recompute_targets(s, cfg.eval_start, cfg.recompute_every)
        nll[targets.numpy() - 1] = recompute_nll(model, ids, policy.window, targets,
                                                 batch_size=cfg.recompute_batch).numpy()
        return nll, int(targets.numel())
    nll[:] = masked_nll(model, ids, policy, detected).numpy()
    return nll, s - 1


def run_stream(model: Any, tokenizer: Any, text: str, cfg: StreamConfig, *,
               progress: Callable[[str], None] = lambda msg: None) -> StreamResult:
    """Score ``text`` under every policy, test, measure acceptance; see the module docstring.

    Raises:
        ValueError: a text too short for the settings or longer than the model's context.
    """
    from lab.stream.acceptance import measure_acceptance

    before = machine_state()
    # 1. tokenize; the text must fit the context (positions stay its own)
    check_fits(model, cfg.n_tokens, what=f"--tokens={cfg.n_tokens}")
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=True)["input_ids"][:, : cfg.n_tokens]
    if ids.shape[1] < cfg.n_tokens:
        raise ValueError(f"the text has {ids.shape[1]} tokens, fewer than --tokens={cfg.n_tokens}")
    # 2. the sink detector on the first chunk
    progress(f"sink detector on the first {cfg.detect_tokens} tokens")
    t0 = time.perf_counter()
    detection = detect_sinks(model, ids, cfg.detect_tokens, calibration=cfg.calibration)
    detect_wall = time.perf_counter() - t0
    # 3. one pass per policy, timed, with its peak memory
    runs = []
    for policy in cfg.policies:
        progress(f"scoring {ids.shape[1]} tokens under {policy.spec}")
        base = _rss_mb("VmRSS")
        can_peak = _reset_peak_rss()
        t0 = time.perf_counter()
        nll, n = _score(model, ids, policy, cfg, detection.ranked)
        wall = time.perf_counter() - t0
        peak = _rss_mb("VmHWM") if can_peak else None
        runs.append(PolicyRun(policy, nll, wall, None if peak is None or base is None else max(0.0, peak - base), n))
    summary, tests, recompute_check = summarize(runs, cfg)
    # 4. acceptance with an evicting draft
    acceptance = []
    t0 = time.perf_counter()
    if cfg.acceptance:
        acceptance = measure_acceptance(model, tokenizer, ids, cfg, detection.ranked, progress=progress)
    acceptance_wall = time.perf_counter() - t0
    after = machine_state()
    bench = {"before": before, "after": after, "busy": before["busy"] or after["busy"],
             "scoring_wall_s": sum(r.wall_s for r in runs), "detect_wall_s": detect_wall,
             "acceptance_wall_s": acceptance_wall,
             "peak_rss_beyond_model_mb": max((r.peak_rss_mb or 0.0) for r in runs),
             "rss_mb_at_end": _rss_mb("VmRSS")}
    # the oracle's sparse sample: a trailing mean over 16 of its points (not 64 // every), or it is all noise
    rolling = {r.policy.spec: analysis.rolling_mean(r.nll, ROLLING_WIDTH if r.policy.kind != "recompute"
                                                     else RECOMPUTE_ROLLING_POINTS)
               for r in runs}
    return StreamResult(cfg, ids[0], detection, runs, summary, tests, recompute_check, acceptance, bench, rolling)


def _find(runs: list[PolicyRun], kind: str, **attrs: Any) -> PolicyRun | None:
    for r in runs:
        if r.policy.kind == kind and all(getattr(r.policy, k) == v for k, v in attrs.items()):
            return r
    return None


def summarize(runs: list[PolicyRun], cfg: StreamConfig) -> tuple[list[dict], list[analysis.PairedTest], dict | None]:
    """Per-policy PPL with CIs, the pre-stated test with its control, and the recompute check."""
    start, chunk, seed = cfg.eval_start, cfg.chunk_tokens, cfg.seed
    dense = _find(runs, "dense")
    summary = []
    for r in runs:
        means = analysis.chunk_means(r.nll, start, chunk)
        ci = analysis.ppl_interval(means, seed)
        row = {"policy": r.policy.spec, "kind": r.policy.kind, "budget": r.policy.budget,
               "ppl": ci.value, "ppl_low": ci.low, "ppl_high": ci.high, "n_chunks": int(means.size),
               # the PPL and its CI cover whole chunks only: targets start..last_target, n_targets_ppl scored there
               "last_target": start + int(means.size) * chunk - 1,
               "n_targets_ppl": int(np.isfinite(r.nll[start - 1: start - 1 + int(means.size) * chunk]).sum()),
               "n_scored": r.n_scored, "ppl_all_targets": perplexity(torch.from_numpy(r.nll)),
               "wall_s": r.wall_s, "peak_rss_mb": r.peak_rss_mb}
        if dense is not None:  # on the same targets as this policy
            ratio = analysis.ppl_ratio_interval(means, analysis.chunk_means(analysis.matched(dense.nll, r.nll),
                                                                            start, chunk), seed)
            row.update(ratio_to_dense=ratio.value, ratio_low=ratio.low, ratio_high=ratio.high)
        summary.append(row)
    for row, r in zip(summary, runs):  # share of window:W's excess log-PPL over dense that kept positions win back
        w = next((x for x in summary if x["kind"] == "window" and x["budget"] == r.policy.window), None)
        if r.policy.kind in ("sinks", "detected") and w is not None and dense is not None:
            d = next(x for x in summary if x["kind"] == "dense")
            excess = math.log(w["ppl"]) - math.log(d["ppl"])
            row["window_excess_recovered"] = ((math.log(w["ppl"]) - math.log(row["ppl"])) / excess
                                              if excess > 0 else None)
    tests = []
    for w in [r for r in runs if r.policy.kind == "window"]:
        sinks = _find(runs, "sinks", n_keep=4, window=w.policy.window)
        if sinks is None:
            continue
        a = analysis.chunk_means(w.nll, start, chunk)
        b = analysis.chunk_means(sinks.nll, start, chunk)
        tests.append(analysis.wilcoxon_greater(a, b, name=f"H1: {w.policy.spec} has higher NLL than {sinks.policy.spec}",
                                               a_name=w.policy.spec, b_name=sinks.policy.spec))
        tests.append(analysis.shuffled_pairing_control(a, seed, a_name=w.policy.spec,
                                                       name=f"negative control: {w.policy.spec} vs itself, chunks paired at random"))
    recompute_check = None
    rec = _find(runs, "recompute")
    if rec is not None:
        sinks = next((r for r in runs if r.policy.kind == "sinks" and r.policy.n_keep == 4
                      and r.policy.budget == rec.policy.window), None)
        if sinks is not None:
            a = analysis.chunk_means(rec.nll, start, chunk)
            b = analysis.chunk_means(analysis.matched(sinks.nll, rec.nll), start, chunk)
            ratio = analysis.ppl_ratio_interval(a, b, seed)
            recompute_check = {"recompute": rec.policy.spec, "sinks": sinks.policy.spec, "ratio": ratio.value,
                               "low": ratio.low, "high": ratio.high, "tolerance": analysis.RECOMPUTE_TOLERANCE,
                               "within": abs(ratio.value - 1) <= analysis.RECOMPUTE_TOLERANCE,
                               "n_targets": rec.n_scored}
    return summary, tests, recompute_check
