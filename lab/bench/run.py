"""``lab bench``: why speculative decoding does or does not speed things up on this machine.

Runs, alternating in one process (so drift in machine load hits every method alike):
target-only decoding with the lab's own KV-cache loop and with transformers'
``generate``; speculative decoding over a gamma sweep and adaptive draft lengths;
and transformers' assisted generation (``generate(assistant_model=...)`` or
``prompt_lookup_num_tokens``) with the same draft, gamma and greedy settings.

The figures (Leviathan et al. 2023, Theorem 3.8, beside what was measured) are derived in
:mod:`lab.bench.summary`; per method, min / median / max over repeats of tokens/s, alpha and
speedup, end to end and decode-only (:func:`lab.bench.phases.repeat_spread`).

Greedy by default, so every method emits the same tokens (checked and reported, not
assumed). In sampling mode (``BenchConfig.sampling`` with temperature > 0) every method
draws through the same filter (the lab's loops through :mod:`lab.sampling`, transformers
through the same warpers, :func:`hf_sampling_kwargs`) from the same seed per (repeat, prompt)
(:func:`run_seed`, :class:`RunSeeds`), recorded per run; tokens are then compared only in greedy mode.
"""

from __future__ import annotations

import dataclasses
import logging
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Sequence

import torch

from lab.decode import check_context
from lab.machine import LoadLog
from lab.models.chat import build_messages, encode_chat
from lab.ranges import BENCH_NEW_TOKENS, BENCH_SEED, GAMMA, REPEATS, WARMUP_TOKENS, check_value
from lab.runtime.ggml import is_ggml
from lab.bench.levers import assistant_settings, lever_methods, select_methods, timed_generate, timed_speculative
from lab.bench.phases import FirstTokenClock
from lab.bench.results import BASELINE, BenchResult
from lab.bench.summary import summarize
from lab.sampling import SamplingConfig
from lab.speculative.auto import AUTO_MAX_GAMMA, AutoDraft
from lab.speculative.drafts import AdaptiveDraftLength, Drafter
from lab.speculative.loop import target_generate
from lab.speculative.no_cache import no_cache_generate
from lab.speculative.per_pass import parse_draft_dtype
from lab.speculative.policies import DynamicGamma
from lab.speculative.results import SpeculativeResult
from lab.speculative.settings import SpeculativeSettings

logger = logging.getLogger(__name__)

LAB_DEFAULT_METHOD = "lab default (auto)"
DEFAULT_PROMPTS = (
    "Explain step by step how a hash table handles collisions.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "List the planets of the solar system and one fact about each.",
)


@dataclass(frozen=True)
class BenchConfig:
    """What ``lab bench`` runs.

    Attributes:
        gammas: Draft lengths swept.
        adaptive: Adaptive specs (``"entropy:X"`` / ``"pmin:X"``), each run at max(gammas).
        max_new_tokens: Budget per generation.
        repeats: Timed repetitions of the whole alternating schedule (min/median/max over these).
        assisted: Also run transformers' assisted generation at every gamma.
        warmup_tokens: Untimed warm-up generation length per method (first-call costs).
    """

    gammas: tuple[int, ...] = (1, 2, 4, 6)
    adaptive: tuple[str, ...] = ("entropy:0.3",)
    max_new_tokens: int = 64
    repeats: int = 3
    assisted: bool = True
    warmup_tokens: int = 8
    # Levers (lab.bench.levers), each one more method in the same alternating run:
    dynamic: tuple[str, ...] = ()  # draft-length policies, "dynamic:START:MAX"
    draft_dtypes: tuple[str, ...] = ()  # the model draft cast to these dtypes ("bfloat16")
    prompt_lookup: bool = False  # prompt lookup at max(gammas) and each dynamic policy
    # Keep only methods whose name contains one of these (the lab's target loop, the baseline,
    # always runs); () = every method. For a short check of one chosen configuration.
    methods: tuple[str, ...] = ()
    # The filter every method draws through; temperature 0 = greedy (every method then emits
    # the same tokens, which the report checks).
    sampling: SamplingConfig = SamplingConfig()
    seed: int = 0  # sampling mode: each (repeat, prompt)'s seed derives from it (run_seed)
    dtype_sweep: bool = False  # run each cast draft at every gamma, not only the largest (lab bench-tune)
    no_cache: bool = False  # also run the speculative loop without KV caches at each gamma (lab.speculative.no_cache)
    # Also run the lab's default, the auto draft (lab.speculative.auto: per round no draft, prompt lookup or the
    # bench's draft model, by the costs it measures; up to AUTO_MAX_GAMMA tokens a round), as `lab speculate` does
    lab_default: bool = True

    def __post_init__(self) -> None:
        if not self.gammas or any(GAMMA.problem(g) for g in self.gammas):
            raise ValueError(f"gammas={self.gammas!r} must be integers >= {GAMMA.lo}")
        for spec in self.adaptive:
            AdaptiveDraftLength.parse(spec)
        check_value("max_new_tokens", self.max_new_tokens, BENCH_NEW_TOKENS, f"must be >= {BENCH_NEW_TOKENS.lo}")
        check_value("repeats", self.repeats, REPEATS, f"must be >= {REPEATS.lo}")
        check_value("warmup_tokens", self.warmup_tokens, WARMUP_TOKENS)
        for spec in self.dynamic:
            DynamicGamma.parse(spec)
        for dtype in self.draft_dtypes:
            parse_draft_dtype(dtype)
        if any(not str(m).strip() for m in self.methods):
            raise ValueError(f"--methods={','.join(self.methods)!r} holds an empty name")
        if not isinstance(self.sampling, SamplingConfig):
            raise ValueError(f"sampling={self.sampling!r} must be a lab.sampling.SamplingConfig")
        check_value("--seed", self.seed, BENCH_SEED, "must be an integer in [0, 2**62)")


def run_seed(seed: int, repeat: int, prompt: int) -> int:
    """The seed of one (repeat, prompt) in sampling mode, the same for every method: distinct per
    pair for up to 10,000 prompts (repeat -1 is the warm-up)."""
    return seed + 10_000 * (repeat + 1) + prompt


class RunSeeds:
    """The seed of the run about to start; each method reads it when it runs.

    The bench sets it (:meth:`set`) before every run, warm-up included, so every method of
    one (repeat, prompt) draws from the same seed.
    """

    def __init__(self, config: BenchConfig):
        self.sampling, self.base, self.current = config.sampling, config.seed, config.seed

    def set(self, repeat: int, prompt: int) -> int:
        self.current = run_seed(self.base, repeat, prompt)
        return self.current

    def generator(self, device: Any = "cpu") -> torch.Generator | None:
        """A generator seeded with the current seed for the lab's loops (None when greedy)."""
        if self.sampling.greedy:
            return None
        dev = torch.device(device)
        return torch.Generator(device=dev if dev.type != "mps" else "cpu").manual_seed(self.current)

    def seed_global(self) -> None:
        """Seed torch's global generator, which transformers' ``generate`` samples from (sampling only)."""
        if not self.sampling.greedy:
            torch.manual_seed(self.current)


@dataclass
class Run:
    """One timed generation.

    ``first_token_s`` / ``n_first``: seconds to the first committed new token(s) and how many
    arrived then (:mod:`lab.bench.phases`); ``group``: the prompt's group
    (:mod:`lab.bench.prompt_split`); ``draft_passes``: the draft's forwards by shape
    (:func:`lab.speculative.per_pass.pass_shapes`), for model drafts.
    """

    method: str
    repeat: int
    prompt: int
    n_tokens: int
    time_s: float
    decode_time_s: float | None = None
    tokens: list[int] = field(default_factory=list)
    spec: SpeculativeResult | None = None
    target_step_s: float | None = None
    first_token_s: float | None = None
    n_first: int = 1
    group: str = "short"
    draft_passes: dict[str, Any] | None = None
    seed: int | None = None  # sampling mode: the run's seed (run_seed); None when greedy
    peer: Any = None  # a llama.cpp run's parsed output (lab.bench.peer); such runs are summarized apart
    side: str | None = None  # the label of the BenchSide that ran it (summarized apart); None: the main target


@dataclass(frozen=True)
class BenchSide:
    """Another runtime's (or weights') target and draft, timed in the same schedule as the main ones.

    ``label`` (``"torch q4"``) prefixes its methods' names in the schedule and keys its summary in
    :attr:`lab.bench.results.BenchResult.sides`.
    """

    label: str
    target: Any
    draft: Drafter


def hf_sampling_kwargs(sampling: SamplingConfig) -> dict[str, Any]:
    """``generate`` kwargs that make transformers draw through the lab's filter ``sampling``.

    Greedy: ``do_sample=False`` (the warpers left unset). Sampling: ``do_sample=True`` and the
    same temperature, top-k (0 = off, transformers' spelling of the lab's None) and top-p,
    and ``repetition_penalty=1.0``: a value left None would be filled from the model's own
    generation config (Qwen2.5's sets top_k 20, top_p 0.8 and a repetition penalty 1.05),
    which the lab's loops do not apply.
    """
    if sampling.greedy:
        return dict(do_sample=False, temperature=None, top_p=None, top_k=None)
    return dict(do_sample=True, temperature=float(sampling.temperature), top_k=int(sampling.top_k or 0),
                top_p=float(sampling.top_p), repetition_penalty=1.0)


def run_bench(target: Any, draft: Drafter, prompts: Sequence[torch.Tensor], config: BenchConfig, *,
              eos_token_ids: Sequence[int] | None = None,
              progress: Callable[[str], None] | None = None,
              load_log: LoadLog | None = None, prompt_groups: Sequence[str] | None = None,
              peer: Any = None, sides: Sequence[BenchSide] = ()) -> BenchResult:
    """Run the alternating benchmark and derive the figures (see the module docstring).

    Args:
        target: The target model.
        draft: A drafter from :func:`lab.speculative.draft_specs.make_draft`.
        prompts: int64 ``[1, S]`` prompt ids each.
        config: :class:`BenchConfig`.
        eos_token_ids: End-of-sequence ids (all methods use the same).
        progress: Called with a short description before each timed run.
        load_log: Receives a load-average / torch-threads sample before and after
            every timed run (:mod:`lab.machine`); its summary goes in the result.
        prompt_groups: One group name per prompt (``"short"``, ``"humaneval"``); None = all ``"short"``.
        peer: A :class:`lab.bench.peer.bench.LlamaCppPeer`: its methods join the same schedule,
            its runs are summarized apart under ``peer``.
        sides: :class:`BenchSide` s: each side's lab methods (its target alone and speculative rows, no
            assisted generation and no draft casts: ``config`` with those off) join the same schedule after the
            main ones, named ``"<label>: <method>"``, and are summarized apart under ``sides[label]``, each
            against its own target alone.

    Returns:
        A :class:`~lab.bench.results.BenchResult`: ``methods`` (per method: tokens/s
        min/median/max over repeats and the speculative figures), ``comparisons`` (each
        speculative method against transformers' assisted generation at the same gamma, and
        against the speedup predicted from its measured times), ``runs`` (raw timings),
        ``assisted_errors``, ``machine_load`` (None without ``load_log``) and ``by_group``
        (end-to-end and decode-only speedups per prompt group, :func:`group_speedups`);
        :meth:`~lab.bench.results.BenchResult.to_json` is the report's JSON-ready dict.

    Raises:
        ValueError: no prompts, a prompt of batch size > 1, ``prompt_groups`` of another
            length, or a ``config.methods`` name that matches no method.
    """
    groups = _prompt_groups(prompts, prompt_groups)
    eos = sorted(set(eos_token_ids or []))
    seeds = RunSeeds(config)
    methods = select_methods(_lab_methods(target, draft, config, eos, seeds), config.methods)
    side_config = dataclasses.replace(config, assisted=False, draft_dtypes=())
    for side in sides:
        methods += [(f"{side.label}: {name}", _on_side(fn, side.label))
                    for name, fn in select_methods(_lab_methods(side.target, side.draft, side_config, eos, seeds),
                                                   config.methods)]
    # the peer's methods always run with --peer (a --methods filter selects among the lab's)
    methods += peer.methods(Run) if peer is not None else []
    # 1. warm up every method once (untimed); a method transformers refuses is dropped with its reason
    usable, assisted_errors = _warm_up(methods, prompts[0], min(config.warmup_tokens, config.max_new_tokens), seeds)
    # 2. timed runs, alternating methods within each prompt and repeat
    runs = _timed_runs(usable, prompts, groups, config, seeds, progress, load_log)
    # 3. the figures: the lab's runs summarized, a peer's and each side's apart
    bench = _summarize_with_peer(target, draft, prompts, config, [r for r in runs if r.side is None],
                                 assisted_errors, peer)
    by_side = {side.label: summarize(side.target, side.draft, prompts, side_config,
                                     [r for r in runs if r.side == side.label], {}) for side in sides}
    return dataclasses.replace(bench, machine_load=load_log.record() if load_log is not None else None,
                               sides=by_side)


def _on_side(fn: Callable[[torch.Tensor, int], Run], label: str) -> Callable[[torch.Tensor, int], Run]:
    """``fn`` whose runs carry ``side = label``."""
    def run(ids: torch.Tensor, budget: int) -> Run:
        out = fn(ids, budget)
        out.side = label
        return out

    return run


def encode_prompts(model: Any, tokenizer: Any, texts: Sequence[str], max_new_tokens: int,
                   device: Any) -> list[torch.Tensor]:
    """Each user message through the chat template, as int64 ``[1, S]`` ids on ``device``.

    Raises:
        ValueError: a prompt whose length plus ``max_new_tokens`` exceeds the model's context
            (naming ``--max-new-tokens``), before any decoding.
    """
    ids = [encode_chat(tokenizer, build_messages(p)).to(device) for p in texts]
    for prompt_ids in ids:
        check_context(model, prompt_ids.shape[1], max_new_tokens, arg="--max-new-tokens")
    return ids


def run_schedules(model: Any, draft: Drafter, ids: Sequence[torch.Tensor], configs: dict[str, BenchConfig], *,
                  eos: Sequence[int], threads: int, status: Callable[[str], ContextManager[Any]], label: str,
                  groups: Sequence[str] | None = None) -> dict[str, BenchResult]:
    """:func:`run_bench` once per named configuration, each with its own load log.

    Args:
        model / draft / ids: As :func:`run_bench`'s target, draft and prompts.
        configs: ``{name: BenchConfig}``, run in order.
        eos: End-of-sequence ids.
        threads: Torch threads, for the load logs.
        status: ``status(text)`` gives a context whose ``update(text)`` shows progress (a Rich
            console's ``status``).
        label: Progress text's prefix.
        groups: One group name per prompt (None = all ``"short"``).

    Returns:
        ``{name: BenchResult}``.
    """
    out = {}
    for name, config in configs.items():
        with status(f"{label}: {name}") as shown:
            out[name] = run_bench(model, draft, ids, config, eos_token_ids=eos, load_log=LoadLog(threads=threads),
                                  prompt_groups=groups, progress=lambda msg, n=name: shown.update(f"{n}: {msg}"))
    return out


def _prompt_groups(prompts: Sequence[torch.Tensor], prompt_groups: Sequence[str] | None) -> list[str]:
    """One group name per prompt (all ``"short"`` when None).

    Raises:
        ValueError: no prompts, or ``prompt_groups`` of another length.
    """
    if not prompts:
        raise ValueError("prompts=[] is empty")
    groups = list(prompt_groups) if prompt_groups is not None else ["short"] * len(prompts)
    if len(groups) != len(prompts):
        raise ValueError(f"prompt_groups has {len(groups)} names for {len(prompts)} prompts")
    return groups


Method = tuple[str, Callable[[torch.Tensor, int], Run]]


def _lab_methods(target: Any, draft: Drafter, config: BenchConfig, eos: list[int], seeds: RunSeeds) -> list[Method]:
    """The lab's methods in schedule order, as ``(name, fn(ids, budget) -> Run)``: the target alone
    (the lab's loop, transformers ``generate``), then per gamma the speculative loop (and its
    no-cache twin, and transformers' assisted generation), the adaptive stops and the levers."""
    pad = eos[0] if eos else 0
    methods: list[Method] = []
    draft_facts = draft.facts()
    assistant = draft_facts.assistant_model
    sampling = config.sampling

    def hf_kwargs(ids: torch.Tensor, eos_ids: list[int] | None = eos) -> dict[str, Any]:  # transformers' generate
        return dict(attention_mask=torch.ones_like(ids), eos_token_id=eos_ids or None, pad_token_id=pad,
                    **hf_sampling_kwargs(sampling))

    def lab_target(ids: torch.Tensor, budget: int) -> Run:
        r = target_generate(target, ids, max_new_tokens=budget, eos_token_ids=eos, sampling=sampling,
                            generator=seeds.generator(ids.device))
        return Run(BASELINE, 0, 0, len(r.tokens), r.total_time_s, r.total_time_s - r.prefill_time_s,
                   r.tokens, target_step_s=r.decode_step_time_s, first_token_s=r.prefill_time_s)  # token 1: prefill

    def hf_target(ids: torch.Tensor, budget: int) -> Run:
        return timed_generate("target-only (transformers generate)", target, ids, Run, seeds, max_new_tokens=budget,
                              **hf_kwargs(ids))

    methods.append((BASELINE, lab_target))
    if not is_ggml(target):  # transformers generate runs a torch model only
        methods.append(("target-only (transformers generate)", hf_target))
    if config.lab_default:
        methods.append(_auto_method(target, draft, config, eos, seeds))

    def spec_method(gamma: int, adaptive: str | None) -> Method:
        name = f"speculative gamma={gamma}" + (f" adaptive={adaptive}" if adaptive else "")

        def fn(ids: torch.Tensor, budget: int) -> Run:
            settings = SpeculativeSettings(max_new_tokens=budget, gamma=gamma, sampling=sampling, adaptive=adaptive,
                                           eos_token_ids=eos)
            return timed_speculative(name, target, draft, ids, Run, settings, generator=seeds.generator(ids.device))
        return name, fn

    def assisted_method(gamma: int) -> Method:
        name = f"transformers assisted gamma={gamma}"

        def fn(ids: torch.Tensor, budget: int) -> Run:
            extra: dict[str, Any]
            settings: dict[str, Any] = {}
            if draft_facts.model is None:  # no model: prompt lookup, which transformers runs itself
                extra = dict(prompt_lookup_num_tokens=gamma)
            else:  # read from the assistant's own generation config, not from generate()'s kwargs
                extra = dict(assistant_model=assistant)
                settings = dict(num_assistant_tokens=gamma, num_assistant_tokens_schedule="constant",
                                assistant_confidence_threshold=0.0)
            return timed_generate(name, target, ids, Run, seeds, assistant_settings(assistant, **settings),
                                  max_new_tokens=budget, **extra, **hf_kwargs(ids))
        return name, fn

    def no_cache_method(gamma: int) -> Method:
        name = f"speculative gamma={gamma} no-cache"

        def fn(ids: torch.Tensor, budget: int) -> Run:
            clock = FirstTokenClock()
            r = no_cache_generate(target, draft, ids, gamma=gamma, max_new_tokens=budget, eos_token_ids=eos,
                                  sampling=sampling, generator=seeds.generator(ids.device),
                                  on_round=lambda record: clock.first(len(record.emitted)))
            return Run(name, 0, 0, len(r.tokens), clock.elapsed(), r.decode_time_s, r.tokens, spec=r,
                       first_token_s=clock.first_token_s, n_first=clock.n_first)
        return name, fn

    for g in config.gammas:
        methods.append(spec_method(g, None))
        if config.no_cache:
            methods.append(no_cache_method(g))
        if config.assisted:
            methods.append(assisted_method(g))
    for spec in config.adaptive:
        methods.append(spec_method(max(config.gammas), spec))
    methods += lever_methods(target, draft, config, eos=eos, make_run=Run, seeds=seeds,
                             hf_kwargs=hf_kwargs)
    return methods


def _auto_method(target: Any, draft: Drafter, config: BenchConfig, eos: list[int], seeds: RunSeeds) -> Method:
    """``lab speculate``'s default as a bench method: a fresh auto draft each run (what one command starts with),
    on the bench's draft model where it has one with a cache of its own, else prompt lookup alone."""
    facts = draft.facts()
    inner = draft if facts.model is not None and not facts.drafts_on_target_cache else None
    name = LAB_DEFAULT_METHOD

    def fn(ids: torch.Tensor, budget: int) -> Run:
        auto = AutoDraft(int(target.config.vocab_size), inner, runtime="llama.cpp" if is_ggml(target) else "torch")
        settings = SpeculativeSettings(max_new_tokens=budget, gamma=AUTO_MAX_GAMMA, sampling=config.sampling,
                                       eos_token_ids=eos)
        return timed_speculative(name, target, auto, ids, Run, settings, generator=seeds.generator(ids.device))
    return name, fn


def _warm_up(methods: list[Method], ids: torch.Tensor, budget: int,
             seeds: RunSeeds) -> tuple[list[Method], dict[str, str]]:
    """Run every method once, untimed; ``(usable methods, {refused method: error})``.

    A method transformers refuses (assisted generation) is dropped with its reason: a result to
    report, not a crash; any other method's error propagates.
    """
    usable, assisted_errors = [], {}
    for name, fn in methods:
        try:
            seeds.set(-1, 0)
            fn(ids, budget)
            usable.append((name, fn))
        except Exception as exc:  # transformers' refusal is a result to report, not a crash
            if not name.startswith("transformers assisted"):
                raise
            assisted_errors[name] = f"{type(exc).__name__}: {exc}"
            logger.warning("%s refused: %s", name, assisted_errors[name])
    return usable, assisted_errors


def _timed_runs(methods: list[Method], prompts: Sequence[torch.Tensor], groups: list[str], config: BenchConfig,
                seeds: RunSeeds, progress: Callable[[str], None] | None, load_log: LoadLog | None) -> list[Run]:
    """``config.repeats`` passes over the prompts, every method on each prompt in turn, each run
    seeded with its (repeat, prompt)'s seed and sampled by ``load_log`` around it."""
    runs: list[Run] = []
    for rep in range(config.repeats):
        for pi, ids in enumerate(prompts):
            for name, fn in methods:
                if progress:
                    progress(f"repeat {rep + 1}/{config.repeats} prompt {pi + 1}/{len(prompts)}: {name}")
                seed = seeds.set(rep, pi)
                with load_log.around(name) if load_log is not None else nullcontext():
                    run = fn(ids, config.max_new_tokens)
                run.repeat, run.prompt, run.group = rep, pi, groups[pi]
                run.seed = None if config.sampling.greedy else seed
                runs.append(run)
    return runs


def _summarize_with_peer(target: Any, draft: Any, prompts: Sequence[torch.Tensor], config: BenchConfig,
                         runs: list[Run], assisted_errors: dict[str, str], peer: Any) -> BenchResult:
    """The lab's runs summarized as always; a peer's runs apart, under ``peer`` (lab.bench.peer)."""
    lab_runs = [r for r in runs if r.peer is None]
    bench = summarize(target, draft, prompts, config, lab_runs, assisted_errors)
    if peer is None:
        return bench
    return dataclasses.replace(bench, peer=peer.report(
        [r for r in runs if r.peer is not None], lab_runs, bench.methods, config.max_new_tokens,
        config.repeats, lab_groups=bench.by_group.get("all")))
