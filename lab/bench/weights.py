"""What each weight representation costs and changes: kernel times and next-token numerics.

Two measurements behind the choice of :data:`lab.models.weights.Q4_FALLBACK` and of ``--weights``:

* **Kernels** (:func:`kernel_times`): per GGUF tensor type of a model's linear layers, the time of
  every layer of that type in each representation (float32 and bfloat16 dense, int8 per channel,
  int4 from the file's codes where the type has them), one after another with each layer's own
  weights as a forward pass runs them, at ``M = 1`` rows (a decode step) and ``M = gamma + 1``
  (a verify pass). The ratio ``t(M = gamma + 1) / t(M = 1)`` is what speculation pays for a
  verify in target steps: a kernel whose verify costs several of its steps leaves little for a
  draft to win (llama.cpp measured the same with K-quant targets). Timing one layer of each
  shape again and again and multiplying by the layer count would keep its weights in the CPU's
  cache, which a forward pass over a model larger than the cache never does: on a 2-core EPYC
  that understated the 1.5B's step by about a fifth.
* **A decode step in the model** (:func:`step_profile`): one-token steps of the loaded model
  after a prefill, the median step time, and ``torch.profiler``'s time per step in each kernel
  family (int4, int8, dense matmul, attention, everything else, and Python between the ops),
  beside the bytes of weights each family reads per step and the rate that implies: the
  kernel-by-kernel account of where a step's time goes.
* **Numerics** (:func:`numerics`): the model in each representation against its float32
  dequantization on held-out text: top-1 agreement of next-token distributions, mean and max
  KL(p_float32 || p_rep) in nats, and the shift of the entropy the tracker reports, in bits.

Times are medians over ``repeats`` after one warm-up call, on ``torch.get_num_threads()``
threads; the caller records the load average (:mod:`lab.machine`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, fields
from typing import Any, Callable, Sequence

import torch
from torch import nn

# The report's types are its kind's (lab.kinds): the command writes them, summary.md reads them.
from lab.kinds.bench_weights import KernelRow, NumericsRow, StepProfileRow, StepTimes
from lab.kinds.bench_weights import Report as WeightsBenchReport
from lab.ranges import GAMMA, ITERATIONS, REPEATS

LOG2 = math.log(2.0)


def _median_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm-up: first-call allocations and packing
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _in_order(layers: Sequence[nn.Module], inputs: dict[int, torch.Tensor]) -> Callable[[], None]:
    """A call running every layer once, in order, on the input of its width."""
    def run() -> None:
        for layer in layers:
            layer(inputs[layer.in_features])
    return run


def kernel_times(model: nn.Module, gguf_file: Any, *, gamma: int, repeats: int = 5,
                 seed: int = 0) -> list[KernelRow]:
    """Kernel time per GGUF type and representation for ``model``'s linear layers.

    Every layer of a type is built in the representation and the whole set is timed in model
    order, each layer with its own weights (so they stream from memory, as in a forward pass);
    one representation of one type is held at a time beside the float32 model.

    Args:
        model: the float32 model loaded from ``gguf_file`` (not quantized).
        gguf_file: its GGUF file.
        gamma: draft tokens per round; the verify pass has ``gamma + 1`` rows.
        repeats: timed passes over a type's layers per (representation, M); the median is kept.
        seed: of the random activations.

    Returns:
        One :class:`KernelRow` per (GGUF type, representation), types in file order; times are
        milliseconds for all the type's layers together.

    Raises:
        ValueError: ``gamma`` or ``repeats`` below 1.
    """
    from gguf import GGUFReader

    from lab.models import gguf_blocks
    from lab.models.qlinear import CastLinear, Int8Linear
    from lab.models.quantize import linear_tensors, q4_layer

    if gamma < GAMMA.lo or repeats < REPEATS.lo:  # both 1
        raise ValueError(f"gamma={gamma} and repeats={repeats} must be >= 1")
    layers = linear_tensors(model, GGUFReader(str(gguf_file)))
    by_type: dict[str, list[str]] = defaultdict(list)  # GGUF type -> layer names, model order
    for name, (tensor, _) in layers.items():
        by_type[tensor.tensor_type.name].append(name)
    gen = torch.Generator().manual_seed(seed)
    builders: dict[str, Callable[[str, nn.Module], nn.Module]] = {
        "float32": lambda name, m: m,
        "bfloat16": lambda name, m: CastLinear(m.weight, m.bias),
        "int8": lambda name, m: Int8Linear.from_weight(m.weight, m.bias),
        "q4": lambda name, m: q4_layer(name, m, *layers[name]),
    }
    rows = []
    for type_name, names in by_type.items():
        modules = [model.get_submodule(n) for n in names]
        widths = sorted({m.in_features for m in modules})
        params = sum(m.in_features * m.out_features for m in modules)
        for rep, build in builders.items():
            if rep == "q4" and type_name not in gguf_blocks.DECODABLE:
                continue
            built = [build(n, m) for n, m in zip(names, modules)]
            xs = [{k: torch.randn(1, m_rows, k, generator=gen) for k in widths} for m_rows in (1, gamma + 1)]
            with torch.no_grad():
                step, verify = (_median_ms(_in_order(built, x), repeats) for x in xs)
            rows.append(KernelRow(type_name, rep, len(names), params, step, verify))
            del built
    return rows


# --------------------------------------------------------------------------- a decode step, by kernel family

# torch.profiler op name -> kernel family of a decode step
FAMILY_OPS = {
    "aten::_weight_int4pack_mm_for_cpu": "int4",
    "aten::_weight_int8pack_mm": "int8",
    "aten::mm": "dense", "aten::addmm": "dense", "aten::bmm": "attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
    "aten::_scaled_dot_product_attention_math": "attention",
}
FAMILIES = ("int4", "int8", "dense", "attention", "other ops", "python between ops")


def weight_bytes(model: nn.Module) -> dict[str, int]:
    """Bytes of linear-layer weights (scales and zeros included) read per token, by kernel family.

    ``Int4Linear``: the packed codes and the bfloat16 scales and zeros (``"int4"``);
    ``Int8Linear``: the codes and per-channel scales (``"int8"``); ``CastLinear`` and
    ``nn.Linear``: the dense weight (``"dense"``). Biases are left out (a few KB).
    """
    from lab.models.qlinear import CastLinear, Int4Linear, Int8Linear

    out: Counter = Counter()
    for m in model.modules():
        if isinstance(m, Int4Linear):
            out["int4"] += m.packed.numel() * m.packed.element_size() + m.scale_zeros.numel() * m.scale_zeros.element_size()
        elif isinstance(m, Int8Linear):
            out["int8"] += m.weight_int8.numel() + m.scales.numel() * m.scales.element_size()
        elif isinstance(m, (CastLinear, nn.Linear)):
            out["dense"] += m.weight.numel() * m.weight.element_size()
    return dict(out)


@dataclass(frozen=True)
class StepProfile(StepTimes):
    """One-token decode steps of a loaded model (:class:`lab.kinds.bench_weights.StepTimes`, whose docstring gives
    each field), with the rate each kernel family reads its weights at.
    """

    def gb_per_s(self, family: str) -> float | None:
        """Weight bytes over the family's time, GB/s (10^9 bytes); None where it reads none."""
        b, ms = self.family_bytes.get(family, 0), self.family_ms.get(family, 0.0)
        return b / ms / 1e6 if b and ms > 0 else None

    def row(self) -> StepProfileRow:
        """The profile as the report holds it: its fields, then its GB/s per family (:data:`FAMILIES`)."""
        times = {field.name: getattr(self, field.name) for field in fields(StepTimes)}
        return StepProfileRow(**times, gb_per_s={f: self.gb_per_s(f) for f in FAMILIES})


def step_profile(model: nn.Module, input_ids: torch.Tensor, *, steps: int = 10, weights: str = "?") -> StepProfile:
    """Time ``steps`` greedy one-token steps after prefilling ``input_ids`` ``(1, S)``, then profile as many more.

    Args:
        model: a causal LM on the CPU (any representation).
        input_ids: int64 ``(1, S)``, S >= 1, the prefill.
        steps: decode steps per measurement, >= 1.
        weights: the representation's name, for the record.

    Returns:
        :class:`StepProfile`.

    Raises:
        ValueError: ``steps`` < 1 or ``input_ids`` not ``(1, S)`` with S >= 1.
    """
    from torch.profiler import ProfilerActivity, profile

    from lab.decode import decode_one, new_cache, prefill

    if steps < ITERATIONS.lo:
        raise ValueError(f"steps={steps} must be >= {ITERATIONS.lo}")
    if input_ids.ndim != 2 or input_ids.shape[0] != 1 or input_ids.shape[1] < 1:
        raise ValueError(f"input_ids must be (1, S) with S >= 1; got shape {tuple(input_ids.shape)}")

    def prefilled() -> tuple[Any, torch.Tensor]:  # (cache, next token [1, 1]) after the prefill
        cache = new_cache(model)
        logits, _ = prefill(model, input_ids, cache)
        return cache, logits.argmax(-1, keepdim=True)

    def step(cache: Any, token: torch.Tensor) -> tuple[torch.Tensor, float]:
        logits, seconds = decode_one(model, token, cache)
        return logits.argmax(-1, keepdim=True), seconds

    with torch.inference_mode():
        cache, nxt = prefilled()
        nxt, _ = step(cache, nxt)  # the first step after a prefill warms up
        times = []
        for _ in range(steps):
            nxt, seconds = step(cache, nxt)
            times.append(seconds * 1e3)
        step_ms = statistics.median(times)
        cache, nxt = prefilled()
        nxt, _ = step(cache, nxt)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            for _ in range(steps):
                nxt, _ = step(cache, nxt)
            wall_ms = (time.perf_counter() - t0) * 1e3
    family_us: Counter = Counter()
    for event in prof.key_averages():
        family_us[FAMILY_OPS.get(event.key, "other ops")] += event.self_cpu_time_total
    family_ms = {f: family_us.get(f, 0.0) / 1e3 / steps for f in FAMILIES[:-1]}
    family_ms["python between ops"] = max(0.0, wall_ms / steps - sum(family_ms.values()))
    return StepProfile(weights, int(input_ids.shape[1]), steps, step_ms, family_ms, weight_bytes(model))


def file_linear_bytes(model: nn.Module, gguf_file: Any) -> dict[str, int]:
    """Bytes the GGUF file stores for ``model``'s linear layers, by GGUF type (what llama.cpp's kernels read)."""
    from gguf import GGUFReader

    from lab.models.quantize import linear_tensors

    out: Counter = Counter()
    seen = set()
    for tensor, _ in linear_tensors(model, GGUFReader(str(gguf_file))).values():
        if tensor.name not in seen:  # a tied LM head is the embedding's tensor
            seen.add(tensor.name)
            out[tensor.tensor_type.name] += int(tensor.n_bytes)
    return dict(out)


def _log_probs(model: nn.Module, batches: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    with torch.no_grad():
        return [torch.log_softmax(model(ids).logits[0].float(), dim=-1) for ids in batches]


def _entropy_bits(log_probs: torch.Tensor) -> torch.Tensor:
    return -(log_probs.exp() * log_probs).sum(-1) / LOG2


def compare(reference: Sequence[torch.Tensor], other: Sequence[torch.Tensor], representation: str) -> NumericsRow:
    """Top-1 agreement, KL(reference || other) and entropy shift over matching ``(S, V)`` log-prob rows.

    Raises:
        ValueError: the two lists differ in length or shapes.
    """
    if len(reference) != len(other) or any(r.shape != o.shape for r, o in zip(reference, other)):
        raise ValueError("reference and compared log-probs must have the same texts and shapes")
    ref, out = torch.cat(list(reference)), torch.cat(list(other))
    kl = (ref.exp() * (ref - out)).sum(-1)
    shift = (_entropy_bits(out) - _entropy_bits(ref)).abs()
    return NumericsRow(representation, ref.shape[0], int((ref.argmax(-1) == out.argmax(-1)).sum()),
                       float(kl.mean()), float(kl.max()), float(shift.mean()), float(shift.max()))


def numerics(load: Callable[[str], nn.Module], batches: Sequence[torch.Tensor],
             representations: Sequence[str],
             on_model: Callable[[str, nn.Module], None] | None = None) -> list[NumericsRow]:
    """Each representation against float32 on ``batches`` (token ids ``(1, S)`` each).

    ``load(weights)`` returns the model in that representation; models are loaded one at a time
    and released, so at most two are held (float32's log-probs are kept, not the model).
    ``on_model(weights, model)``, if given, is called with each loaded model, float32 first
    (``lab bench-weights`` profiles a decode step there, so no model is loaded twice).
    """
    reference_model = load("float32")
    reference = _log_probs(reference_model, batches)
    if on_model is not None:
        on_model("float32", reference_model)
    del reference_model
    rows = []
    for rep in representations:
        model = load(rep)
        rows.append(compare(reference, _log_probs(model, batches), rep))
        if on_model is not None:
            on_model(rep, model)
        del model
    return rows


def bench_weights(model_name: str, texts: Sequence[str], *, gamma: int, repeats: int, steps: int,
                  skip_kernels: bool, load_log: Any, status: Callable[[str], Any]) -> WeightsBenchReport:
    """Kernels on the float32 model, then numerics one representation at a time, profiling a
    decode step in each loaded representation.

    Args:
        model_name: A GGUF profile (:func:`lab.models.loading.is_gguf_model`).
        texts: Held-out texts for the numerics (>= 1); the first is the profiled steps' prefill.
        gamma: Draft tokens per round (the verify pass has gamma + 1 rows).
        repeats: Timed calls per layer shape, M and representation.
        steps: Decode steps timed, then profiled, per representation.
        skip_kernels: Numerics only: no kernel table, no step profile.
        load_log: A :class:`lab.machine.LoadLog`, sampled around each part.
        status: ``status(text)`` gives a context that shows ``text`` while a part runs (a Rich
            console's ``status``).
    """
    from lab.models.loading import gguf_path, load_model
    from lab.models.profiles import PROFILES
    from lab.models.weights import WEIGHTS
    from lab.reports import environment_record

    # 1. Kernels, on the float32 model.
    with status(f"loading {model_name}"):
        model, tokenizer = load_model(model_name, device="cpu")
    env = environment_record(model)
    kernels = []
    file_bytes = file_linear_bytes(model, gguf_path(PROFILES[model_name]))
    if not skip_kernels:
        with status("timing the kernels"), load_log.around("kernels"):
            kernels = kernel_times(model, gguf_path(PROFILES[model_name]), gamma=gamma, repeats=repeats)
    del model

    # 2. Numerics, one representation at a time.
    batches = [tokenizer(t, return_tensors="pt").input_ids for t in texts]
    profiles = []

    def profile_step(weights: str, model) -> None:  # the first text is the prefill
        if not skip_kernels:
            with load_log.around(f"step profile {weights}"):
                profiles.append(step_profile(model, batches[0], steps=steps, weights=weights))

    with status("numerics against float32, and a decode step profiled per representation"), \
            load_log.around("numerics"):
        rows = numerics(lambda w: load_model(model_name, device="cpu", weights=w)[0], batches,
                        [w for w in WEIGHTS if w != "float32"], on_model=profile_step)
    return WeightsBenchReport(model=model_name, gamma=gamma, repeats=repeats, texts=len(texts), kernels=kernels,
                              numerics=rows, torch_threads=torch.get_num_threads(), steps=steps,
                              step_context=int(batches[0].shape[1]), file_linear_bytes=file_bytes,
                              step_profiles=[p.row() for p in profiles], machine_load=load_log.record(), environment=env)
