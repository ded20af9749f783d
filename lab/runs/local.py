"""Local worker processes: an experiment's units spread over this machine's cores, one process per worker.

On a CPU with a model as small as the embedded SmolLM2, two one-thread processes that decode
different prompts get more done than one process decoding with two threads: the study's 102
prompts took 265 s as two one-thread shards against about 340 s serially on two threads
(2-core AMD EPYC, AVX-512 BF16, no AMX; measured there only). :class:`ProcessExecutor` runs
them so: each worker is a spawned process (a fresh interpreter, so no forked torch thread pool),
loads the experiment once and takes units from one shared queue, so no worker idles while
another has work; the driver alone writes the work directory (:mod:`lab.runs.engine`).

A unit's numbers must not depend on which worker ran it. The first worker loads alone; the
others start once it is ready, with its few-row layout choices (:mod:`lab.models.fewrow`, which
would otherwise be timed again in each worker and could come out differently), and every worker
runs the same torch thread count.
"""

from __future__ import annotations

import os
import pickle
import signal
from typing import Any, Iterator, Sequence

from lab.ranges import THREADS, WORKERS
from lab.runs.engine import Experiment

FLOAT32_PER_GGUF_BYTE = 8  # a GGUF file holds at least 4 bits a weight: float32 takes at most 8x its bytes
MEMORY_SHARE = 0.5  # the workers' models may take at most this share of the machine's memory
POLL_S = 1.0  # how often the driver checks that its workers are alive while it waits
WORKERS_ENV = "LAB_STUDY_WORKERS"  # a shell's default worker count for lab study (the test tiers set 1)
EXIT_GRACE_S = 5.0  # how long a closing driver waits for its workers to exit before it ends them


def _sendable(exc: BaseException) -> BaseException:
    """``exc`` if it pickles (it crosses to the driver), else a ``RuntimeError`` carrying its type and text."""
    try:
        pickle.dumps(exc)
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _worker(experiment: Experiment, threads: int, chosen: dict, conn: Any, verbose: bool) -> None:
    """A worker's life: load once, then measure each unit the driver sends until the ``None`` that ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the driver stops the workers
    import torch

    import logging

    from lab.machine import quiet_loaders
    from lab.models import fewrow

    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(message)s")
    quiet_loaders()  # as the driver's logging set-up: no progress bars or info lines from the loaders
    torch.set_num_threads(threads)
    fewrow.adopt_layout_choices(chosen)
    try:
        state = experiment.load()
        conn.send(("ready", None, (experiment.info(state), fewrow.layout_choices())))
    except BaseException as exc:
        conn.send(("failed", None, _sendable(exc)))
        return
    while (item := conn.recv()) is not None:
        i, unit = item
        try:
            conn.send(("done", i, experiment.measure(state, unit)))
        except BaseException as exc:
            conn.send(("failed", i, _sendable(exc)))
            return


class ProcessExecutor:
    """The units on ``workers`` local processes of ``threads`` torch threads each (:class:`lab.runs.engine.Executor`).

    The driver sends each worker one unit at a time over its own pipe and the next when it answers, so a
    slow unit never holds back the others. An exception in a worker's ``load`` or ``measure`` is raised in
    the driver and stops the run (the finished units stay in the work directory), as with
    :class:`lab.runs.engine.SerialExecutor`; a worker that dies (killed, out of memory) stops it with a
    ``RuntimeError`` naming its exit code.

    Args:
        workers: Processes, >= 1.
        threads: Torch threads of each, >= 1.

    Raises:
        ValueError: ``workers`` or ``threads`` below 1.
    """

    def __init__(self, workers: int, threads: int = 1):
        if workers < WORKERS.lo or threads < THREADS.lo:  # both 1; the upper end (the CPUs) is the flags'
            raise ValueError(f"workers={workers} and threads={threads} must be >= 1")
        self.workers, self.threads = workers, threads
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        self._finished = False  # every unit came back: the workers are exiting on their own

    def start(self, experiment: Experiment) -> dict[str, Any]:
        import logging
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        sent, verbose = experiment.for_workers(), logging.getLogger().level <= logging.DEBUG
        self._spawn(ctx, sent, {}, verbose)
        _, _, (info, chosen) = self._receive(self._conns[0])  # the first worker's models and layout choices
        for _ in range(self.workers - 1):
            self._spawn(ctx, sent, chosen, verbose)
        return {**info, "workers": {"processes": self.workers, "torch_threads_per_worker": self.threads}}

    def _spawn(self, ctx: Any, experiment: Experiment, chosen: dict, verbose: bool) -> None:
        here, there = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(experiment, self.threads, chosen, there, verbose), daemon=True)
        proc.start()
        there.close()  # the worker's end lives in the worker: its death reads as the end of the pipe here
        self._procs.append(proc)
        self._conns.append(here)

    def _receive(self, conn: Any) -> tuple[str, int | None, Any]:
        """The next message on ``conn`` (a worker's failure raised here, its death a ``RuntimeError``)."""
        from multiprocessing.connection import wait

        while not wait([conn], timeout=POLL_S):
            pass  # a signal (Ctrl-C, SIGTERM) interrupts the wait between polls
        try:
            kind, i, payload = conn.recv()
        except EOFError:
            proc = self._procs[self._conns.index(conn)]
            proc.join(timeout=POLL_S)
            raise RuntimeError(f"a worker process died (exit code {proc.exitcode}; a negative code is the signal "
                               "that ended it, e.g. -9 when the system ran out of memory)") from None
        if kind == "failed":
            raise payload
        return kind, i, payload

    def run(self, units: Sequence[Any], progress: Any = None) -> Iterator[tuple[Any, Any]]:
        from multiprocessing.connection import wait

        todo = list(enumerate(units))[::-1]  # popped from the end: in order
        open_ = list(self._conns)  # workers not yet sent their None: a closed pipe from one of them is a death
        ready = {self._conns[0]}  # the first worker is ready (start); the others say so when they are
        self._feed(self._conns[0], todo, open_)
        done = 0
        while done < len(units):
            for conn in wait(open_, timeout=POLL_S):
                kind, i, result = self._receive(conn)
                if kind == "done":
                    done += 1
                    yield units[i], result
                if kind == "done" or conn not in ready:
                    ready.add(conn)
                    self._feed(conn, todo, open_)
        for conn in list(open_):  # still loading: its None waits in the pipe
            self._feed(conn, todo, open_)
        self._finished = True

    @staticmethod
    def _feed(conn: Any, todo: list, open_: list) -> None:
        """The next unit to ``conn``'s worker, or ``None`` (it exits, no longer waited on) when none is left."""
        if todo:
            conn.send(todo.pop())
        else:
            conn.send(None)
            open_.remove(conn)

    def close(self) -> None:
        import time

        # after a full run each worker has its None and is exiting; an interrupted one is ended at once
        deadline = time.monotonic() + (EXIT_GRACE_S if self._finished else 0.0)
        for proc in self._procs:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self._conns:
            conn.close()
        self._procs, self._conns = [], []


def auto_workers(model: str, draft: str | None, device: str) -> int:
    """How many one-thread worker processes run a study by default: this machine's CPUs, when every worker's
    models fit; else 1 (one process, torch's threads). ``$LAB_STUDY_WORKERS`` (a count) answers instead.

    More than one only on the CPU, and only for GGUF profiles, whose file size bounds the float32 models
    (at most :data:`FLOAT32_PER_GGUF_BYTE` times the file): the workers' target and draft models together
    must fit in :data:`MEMORY_SHARE` of the machine's memory. A hub model or a local path (size unknown
    before it loads) runs in one process.
    """
    from lab.models.loading import gguf_path, is_gguf_model
    from lab.models.profiles import PROFILES

    cpus = os.cpu_count() or 1
    typed = os.environ.get(WORKERS_ENV, "").strip()
    if typed:
        if not (typed.isascii() and typed.isdigit() and WORKERS.lo <= int(typed) <= cpus):
            raise ValueError(f"${WORKERS_ENV}={typed!r} must be a count of worker processes in [{WORKERS.lo}, {cpus}] (this "
                             "machine's CPUs: more only contend for them)")
        return int(typed)
    if device != "cpu" or cpus < 2 or not is_gguf_model(model):
        return 1
    names = [model] + ([draft] if draft is not None and is_gguf_model(draft) else [])
    sizes = []
    for name in names:
        profile = PROFILES[name]
        sizes.append(profile.chunks.size if profile.chunks is not None else gguf_path(profile).stat().st_size)
    per_worker = FLOAT32_PER_GGUF_BYTE * sum(sizes)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(1, min(cpus, int(MEMORY_SHARE * memory // per_worker)))
