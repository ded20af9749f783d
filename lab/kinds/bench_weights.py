"""``lab bench-weights``: time and numerics of float32, bfloat16, int8 and q4 weights on a GGUF model."""

from __future__ import annotations

from dataclasses import dataclass

from lab.kinds import Kind
from lab.provenance import Environment, MachineLoad


@dataclass(frozen=True)
class KernelRow:
    """One GGUF type in one representation: times summed over the model's layers of that type
    (:func:`lab.bench.weights.kernel_times`).

    Attributes:
        gguf_type: The GGUF tensor type of the layers (``Q4_1``, ``Q8_0`` ...).
        representation: ``float32``, ``bfloat16``, ``int8`` or ``q4``.
        layers: The model's linear layers of that type.
        params: Their weights, in all (in features x out features, summed).
        step_ms: All those layers at ``M = 1`` row (a decode step), milliseconds (median over repeats).
        verify_ms: The same at ``M = gamma + 1`` rows (a verify pass), milliseconds.
    """

    gguf_type: str
    representation: str
    layers: int
    params: int
    step_ms: float
    verify_ms: float

    @property
    def verify_in_steps(self) -> float:
        """A verify pass in decode steps: ``verify_ms / step_ms`` (dimensionless)."""
        return self.verify_ms / self.step_ms


@dataclass(frozen=True)
class NumericsRow:
    """A representation against float32 over every position of the held-out texts (:func:`lab.bench.weights.compare`).

    The four figures are None (``null``) where the model gave a value that is not finite (JSON has no NaN).

    Attributes:
        representation: ``bfloat16``, ``int8`` or ``q4``.
        positions: Positions compared, tokens.
        top1_agree: A count: positions whose most likely token equals float32's.
        mean_kl_nats: Mean KL(p_float32 || p_representation) over the positions, nats.
        max_kl_nats: The largest, nats.
        mean_abs_entropy_shift_bits: Mean absolute change of the next-token entropy, bits.
        max_abs_entropy_shift_bits: The largest, bits.
    """

    representation: str
    positions: int
    top1_agree: int
    mean_kl_nats: float | None
    max_kl_nats: float | None
    mean_abs_entropy_shift_bits: float | None
    max_abs_entropy_shift_bits: float | None


@dataclass(frozen=True)
class StepTimes:
    """One-token decode steps of a loaded model: where a step's time goes, as measured
    (:func:`lab.bench.weights.step_profile`'s :class:`lab.bench.weights.StepProfile` adds the rates).

    Attributes:
        weights: The representation the model was loaded in.
        context: Positions in the KV cache when the steps start (the prefill's length), tokens.
        steps: Profiled steps (the same count timed without the profiler).
        step_ms: Median wall time of a step without the profiler, milliseconds.
        family_ms: Profiled milliseconds per step by kernel family (:data:`lab.bench.weights.FAMILIES`); ``"python
            between ops"`` is the profiled step's wall time less the time inside ops.
        family_bytes: Weight bytes each family reads per step, bytes (families that read none left out).
    """

    weights: str
    context: int
    steps: int
    step_ms: float
    family_ms: dict[str, float]
    family_bytes: dict[str, int]


@dataclass(frozen=True)
class StepProfileRow(StepTimes):
    """A step profile as the report holds it: :class:`StepTimes`' fields, then its rates
    (:meth:`lab.bench.weights.StepProfile.row`).

    Attributes:
        gb_per_s: Each family's weight bytes over its time, GB/s (10^9 bytes); None where it reads none.
    """

    gb_per_s: dict[str, float | None]


@dataclass(frozen=True)
class Report:
    """``report.json`` of ``lab bench-weights`` past its kind and format: kernels, numerics and step profiles of one
    GGUF model (:func:`lab.bench.weights.bench_weights`).

    Attributes:
        model: The ``--model`` profile.
        gamma: Draft tokens per round: the verify pass has ``gamma + 1`` rows.
        repeats: Timed passes per layer type, M and representation (the median is kept).
        texts: How many held-out texts the numerics read.
        kernels: Per GGUF type and representation, in file order (empty with ``--skip-kernels``).
        numerics: One row per representation other than float32.
        torch_threads: Torch's intra-op threads.
        steps: Decode steps timed, then profiled, per representation.
        step_context: The first text's length, tokens (the profiled steps' prefill).
        file_linear_bytes: Bytes the GGUF file stores for the model's linear layers, by GGUF type.
        step_profiles: One per loaded representation, float32 first (empty with ``--skip-kernels``).
        machine_load: The load log's summary (:mod:`lab.machine`).
        environment: The machine, libraries and model (:func:`lab.reports.environment`), float32 model loaded.
    """

    model: str
    gamma: int
    repeats: int
    texts: int
    kernels: list[KernelRow]
    numerics: list[NumericsRow]
    torch_threads: int
    steps: int
    step_context: int
    file_linear_bytes: dict[str, int]
    step_profiles: list[StepProfileRow]
    machine_load: MachineLoad
    environment: Environment


KIND = Kind("bench-weights", listed=80, commands=("lab.commands.bench_weights",), report=Report)
