"""How busy the machine was while a benchmark ran: load average and torch threads.

Every bench (``lab bench``, ``lab bench-tracker``, ``lab bench-sinks``, and any new
one) samples the machine before and after each timed method with
:func:`sample_load`, keeps the samples in a :class:`LoadLog`, writes
:meth:`LoadLog.summary` into its report and shows :func:`busy_warning` on the
terminal and in ``summary.md`` when the machine was busy.

The rule (:func:`is_busy`): the machine counts as busy when a sample's 1-minute load
average exceeds the number of torch threads the bench itself uses plus
:data:`BUSY_MARGIN`. The bench's own threads explain up to that many runnable
tasks; anything beyond is another process competing for the cores, and on a
shared CPU that can make each torch thread several times slower (seen: a verify
pass costing 6-8 decode steps instead of 1.7-1.9). The load average is a
1-minute exponential average of runnable tasks (Linux ``/proc/loadavg``), so it
lags a sudden change by tens of seconds; it is a flag, not a measurement.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from lab.provenance import LoadSample, MachineLoad, MethodLoad
from lab.ranges import THREADS, check_value
from lab.typed import to_json

# Half a runnable task of slack: a load of threads + 0.5 means another process has
# been runnable at least half of the last minute.
BUSY_MARGIN = 0.5


NOISY_LOGGERS = ("transformers", "accelerate", "httpx", "huggingface_hub", "urllib3")


def quiet_loaders() -> None:
    """No info lines or progress bars from the model loaders (transformers, its hub client): the lab's own
    logging set-up (:func:`lab.render.console.setup_logging`) and a worker process
    (:mod:`lab.runs.local`) both call this."""
    import logging

    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.ERROR)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover - the lab needs transformers to load a model at all
        pass


def sample_load(label: str = "") -> LoadSample:
    """Read the load average and torch's intra-op thread count now."""
    import torch

    try:
        one, five, fifteen = os.getloadavg()
    except OSError:  # pragma: no cover - platforms without a load average
        one = five = fifteen = float("nan")
    return LoadSample(label=label, load_1m=one, load_5m=five, load_15m=fifteen,
                      torch_threads=torch.get_num_threads(), cpu_count=os.cpu_count() or 1, wall_s=time.time())


def is_busy(sample: LoadSample, threads: int | None = None) -> bool:
    """``load_1m > threads + BUSY_MARGIN`` (``threads``: the bench's; default the sample's torch threads)."""
    used = sample.torch_threads if threads is None else threads
    return sample.load_1m > used + BUSY_MARGIN


def set_threads(threads: int | None) -> int:
    """Apply ``--threads`` (None keeps torch's choice) and return the threads in use.

    Raises:
        ValueError: ``threads`` is not a positive integer.
    """
    import torch

    if threads is not None:
        check_value("--threads", threads, THREADS)
        torch.set_num_threads(threads)
    return torch.get_num_threads()


@dataclass
class LoadLog:
    """Load samples taken around each method of a benchmark.

    Attributes:
        threads: The torch threads the bench uses (the busy rule's allowance).
        samples: Every :class:`LoadSample`, in order.
        methods: Per method name, the labels' indices into ``samples`` (before, after).
    """

    threads: int
    samples: list[LoadSample] = field(default_factory=list)
    methods: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def add(self, sample: LoadSample) -> LoadSample:
        self.samples.append(sample)
        return sample

    @contextmanager
    def around(self, method: str) -> Iterator[None]:
        """Sample before and after one run of ``method``."""
        before = len(self.samples)
        self.add(sample_load(f"before {method}"))
        try:
            yield
        finally:
            self.add(sample_load(f"after {method}"))
            self.methods.setdefault(method, []).append((before, len(self.samples) - 1))

    def busy_samples(self) -> list[LoadSample]:
        return [s for s in self.samples if is_busy(s, self.threads)]

    def busy_methods(self) -> list[str]:
        """Methods with a busy sample before or after at least one of their runs."""
        return [m for m, pairs in self.methods.items()
                if any(is_busy(self.samples[i], self.threads) for pair in pairs for i in pair)]

    def summary(self) -> dict[str, Any]:
        """JSON-ready: the rule, the threads, max 1-min load, busy flag and methods, per-method loads, samples
        (:class:`lab.provenance.MachineLoad`, written by :func:`lab.typed.to_json`)."""
        return to_json(self.record())

    def record(self) -> MachineLoad:
        """The log as the typed record reports hold under ``machine_load``."""
        loads = [s.load_1m for s in self.samples]
        per_method = {m: MethodLoad(load_1m_before=[self.samples[b].load_1m for b, _ in pairs],
                                    load_1m_after=[self.samples[a].load_1m for _, a in pairs],
                                    torch_threads=sorted({self.samples[i].torch_threads for p in pairs for i in p}))
                      for m, pairs in self.methods.items()}
        return MachineLoad(rule=busy_rule(self.threads), threads=self.threads, cpu_count=os.cpu_count(),
                           busy=bool(self.busy_samples()), max_load_1m=max(loads) if loads else None,
                           busy_methods=self.busy_methods(), per_method=per_method, samples=list(self.samples))


def busy_rule(threads: int) -> str:
    return f"busy when the 1-minute load average exceeds the bench's {threads} torch thread(s) + {BUSY_MARGIN:g}"


def busy_warning(load: MachineLoad | None) -> str | None:
    """One paragraph for the terminal and ``summary.md``, or None when the machine was quiet (or nobody sampled it)."""
    if load is None or not load.busy:
        return None
    methods = load.busy_methods
    which = f" (around {len(methods)} of {len(load.per_method)} methods)" if methods else ""
    return (f"WARNING: the machine was busy during this benchmark{which}: 1-minute load average up to "
            f"{load.max_load_1m:.2f} with {load.threads} torch thread(s) on {load.cpu_count} CPUs "
            f"({load.rule}). Other processes competed for the cores, so times and speedups are inflated "
            "and noisy; re-run on a quiet machine before trusting them.")


def _meminfo_kib(field_name: str) -> int | None:
    """One field of Linux ``/proc/meminfo`` in KiB, or None (another platform, or no such field)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def address_space_limit() -> int | None:
    """This process's address-space limit in bytes (``ulimit -v``), or None when none is set or
    the platform cannot say."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):  # not on every platform
        return None
    return None if soft == resource.RLIM_INFINITY else int(soft)


def memory_text() -> str:
    """The memory this process can have, in words: the machine's total and available memory and
    the address-space limit (``ulimit -v``) when one is set. Parts it cannot read are left out."""
    parts = []
    total, available = _meminfo_kib("MemTotal"), _meminfo_kib("MemAvailable")
    if total is not None:
        parts.append(f"the machine has {total / 2**20:.1f} GiB"
                     + (f", {available / 2**20:.1f} GiB available" if available is not None else ""))
    limit = address_space_limit()
    if limit is not None:
        parts.append(f"this process is limited to {limit / 2**30:.1f} GiB of address space (ulimit -v)")
    return "; ".join(parts) if parts else "the machine's memory could not be read"


def cpu_identity() -> dict[str, Any]:
    """The CPU's model name and instruction-set flags, which decide what is fastest on it.

    Linux: ``model name`` and ``flags`` of the first processor in ``/proc/cpuinfo`` (x86;
    ARM kernels say ``Features``). Elsewhere, or unreadable: ``platform.processor()`` and
    no flags. Which flags the OS grants matters too (AMX needs the kernel's permission),
    but cpuinfo is what identifies a machine class here.

    Returns:
        ``{"cpu_model": str, "cpu_flags": sorted list of str}``.
    """
    import platform

    model, flags = "", []
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Processor", "cpu model") and not model:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = value.split()
                elif not line.strip() and model and flags:
                    break  # the first processor's block is enough
    except OSError:
        pass
    return {"cpu_model": model or platform.processor() or platform.machine(), "cpu_flags": sorted(set(flags))}
