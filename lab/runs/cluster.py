"""An experiment on a Ray cluster: one actor per worker slot holds the models, units are tasks.

:class:`RayExecutor` is a :class:`lab.runs.engine.Executor`: the driver (``lab study``'s
:func:`lab.study.run.run_study`, ``lab intervene``'s :func:`lab.intervene.run.run_triples`) drives it
exactly as it drives the serial one, and the driver alone writes each finished unit into the work
directory as it arrives (so resume and merge work unchanged, and a restarted driver never recomputes
a stored unit). Each unit is the experiment's ``measure`` run inside an actor; its numbers depend only
on the settings, the unit and the torch thread count, so a cluster run equals a serial run with the
same threads.

Layout (Ray's documented patterns, https://docs.ray.io/en/latest/ray-core/actors.html):

* **Actors, one per worker slot.** With GPUs in the cluster a slot is one GPU
  (``num_gpus=1``) plus ``threads`` CPUs; without, it is ``threads`` CPUs. Each
  actor sets ``torch.set_num_threads(threads)`` and loads the models once, in its
  constructor (the experiment's ``load``), as the experiment sent to the workers
  fixes them (``for_workers``: the device and dtype the driver resolved).
* **Units are actor tasks**, at most :data:`IN_FLIGHT_PER_ACTOR` per actor, the
  next sent when one finishes, so a slow actor never holds a queue of its own.
* **Faults are Ray's business** (https://docs.ray.io/en/latest/ray-core/fault_tolerance/actors.html):
  an actor whose process dies is restarted by Ray (``max_restarts``) and its
  unfinished units are resent by Ray (``max_task_retries``); this module
  retries nothing itself. A unit whose retries are used up, or that raises a
  Python error (deterministic: it would raise again, so Ray does not retry it),
  comes back as a :class:`lab.runs.engine.UnitFailure` naming it, and the run
  then lacks it. An actor that stays dead after its restarts gets no more units;
  when none is left the rest fail as well.

The cluster: ``address=None`` starts a local one on this machine (dashboard off,
sized by Ray to the CPUs and GPUs it detects) and stops it at the end; ``"auto"``
or ``host:port`` / ``ray://host:port`` connects to a running cluster
(``ray start --head``) and only disconnects. A driver already connected
(``ray.is_initialized()``) is used as it is. Every node needs the lab installed
(``pip install 'lab[cluster]'``) and the models in its cache.

Ray is an optional dependency (the ``lab[cluster]`` extra): it is imported only
here, only when a cluster run starts.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import tempfile
import threading
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from lab.ranges import RAY_ACTORS, RAY_TIMEOUT, RETRIES, THREADS, check_value
from lab.runs.engine import Experiment, UnitFailure
from lab.safe_text import clipped

logger = logging.getLogger(__name__)

RAY_EXTRA = "lab[cluster]"
# Seconds `--ray ADDRESS` waits for a running cluster to answer before it gives up
# (check_reachable). Ray's own connect retries for minutes, printing GCS
# time-outs; a head node that answers at all answers a TCP connect and an HTTP/2 greeting in
# milliseconds on a LAN, so 10 s leave room for a busy one.
DEFAULT_CONNECT_TIMEOUT_S = 10.0
# An actor's process may die (OOM killer, a node lost, a crashed kernel) several times
# in a long study; three restarts cover that without looping forever on a node that
# cannot load the models at all.
DEFAULT_MAX_RESTARTS = 3
# A unit is resent after its actor died at most twice: a unit that kills its
# actor three times (e.g. runs it out of memory) is a property of the unit, and is
# reported rather than allowed to use up every actor's restarts.
DEFAULT_MAX_TASK_RETRIES = 2
# One unit running and one queued behind it per actor: the actor never idles while
# the driver saves a result, and no actor holds more than one unit in reserve.
IN_FLIGHT_PER_ACTOR = 2
# The first bytes of every HTTP/2 connection (RFC 9113, section 3.4): the client's preface and an
# empty SETTINGS frame. Ray's GCS and its client server speak gRPC, so they answer with a frame
# of their own; a port held by anything else stays silent, closes, or answers in another protocol.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_HTTP2_SETTINGS = 4  # frame type of the server's first frame (RFC 9113, section 6.5)
MAX_PORT = 65535  # TCP's ports are 16-bit, 0 reserved
ADDRESS_FORMS = f"'auto', 'local', host:port or ray://host:port (port 1-{MAX_PORT})"
_HOST_PORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]+)$")


def parse_address(text: str | None) -> str | None:
    """``--ray``'s ADDRESS, checked before anything connects.

    Returns:
        ``None`` for a local cluster started for the run (no address, or ``"local"``),
        else the address as given: ``"auto"``, ``host:port`` or ``ray://host:port``.

    Raises:
        ValueError: any other form, or a port outside 1-65535, naming the address.
    """
    if text is None or text.strip() in ("", "local"):
        return None
    if text == "auto":
        return text
    m = _HOST_PORT.match(text.removeprefix("ray://"))
    if m is None:
        raise ValueError(f"--ray {clipped(text)} is not an address: give {ADDRESS_FORMS}")
    if len(m["port"].lstrip("0")) > len(str(MAX_PORT)):  # echoed with the address, cut (Python reads 4,300 digits)
        raise ValueError(f"--ray {clipped(text)}: the port is outside 1-{MAX_PORT}")
    if not 1 <= int(m["port"]) <= MAX_PORT:
        raise ValueError(f"--ray {clipped(text)}: port {m['port']} is outside 1-{MAX_PORT}")
    return text


def _host_port(address: str) -> tuple[str, int]:
    m = _HOST_PORT.match(address.removeprefix("ray://"))
    assert m is not None, f"unchecked address {address!r}"
    return m["host"].strip("[]"), int(m["port"])


def check_reachable(address: str, timeout_s: float, *, shown: str | None = None) -> None:
    """Fail in at most about ``timeout_s`` seconds unless ``address`` answers as a gRPC server.

    A TCP connect, then the HTTP/2 preface (:data:`_HTTP2_PREFACE`), whose answer must be a
    SETTINGS frame: what Ray's GCS (``host:port``) and Ray Client server (``ray://``) send
    first. With TLS (``RAY_USE_TLS``) only the connect is tried.

    Args:
        address: A ``host:port`` or ``ray://host:port`` checked by :func:`parse_address`.
        timeout_s: Seconds for the connect, and again for the answer.
        shown: How the error names the address (default ``address``).

    Raises:
        ValueError: refused, unreachable, unknown host, no answer within ``timeout_s``,
            or an answer that is not HTTP/2, naming the address and the bound.
    """
    import socket

    host, port = _host_port(address)
    name = shown or address
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            if os.environ.get("RAY_USE_TLS", "0") not in ("0", ""):
                return
            sock.sendall(_HTTP2_PREFACE)
            head = sock.recv(9)  # a frame header: length (3 bytes), type, flags, stream id
    except socket.timeout:
        raise ValueError(f"--ray {name!r}: no answer within {timeout_s:g} s (--ray-timeout); is the cluster's "
                         "head node up, and the port its GCS port (ray start --head prints it)?") from None
    except OSError as exc:
        raise ValueError(f"--ray {name!r}: cannot connect ({exc.strerror or exc}); start the cluster with "
                         "ray start --head, or drop the address to start a local one for this run") from None
    if len(head) < 4 or head[3] != _HTTP2_SETTINGS:
        raise ValueError(f"--ray {name!r}: something answers there, but not a Ray cluster (no gRPC greeting); "
                         "give the head node's GCS port (ray start --head prints it)")


def resolve_auto(ray: Any) -> str:
    """The ``host:port`` that ``--ray auto`` joins: ``RAY_ADDRESS``, else the cluster ``ray start`` left running.

    Raises:
        ValueError: no running cluster, or several, in one line saying what to do.
    """
    from ray._private.services import canonicalize_bootstrap_address_or_die  # Ray is pinned (pyproject.toml)

    try:
        return canonicalize_bootstrap_address_or_die(os.environ.get("RAY_ADDRESS") or "auto")
    except ConnectionError as exc:
        found = "several running Ray clusters" if "multiple" in str(exc) else "no running Ray cluster"
        raise ValueError(f"--ray auto found {found} on this machine; start one with ray start --head, give its "
                         "address (--ray host:port), or drop the address to start a local one for this run") from None


RAY_NO_FAILURE_HANDLER = "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"  # set before Ray is first imported (require_ray)


def require_ray() -> Any:
    """The ``ray`` module, imported with Ray's native failure signal handlers off (:data:`RAY_NO_FAILURE_HANDLER`,
    inherited by the cluster a run starts), so this process's SIGTERM handler holds through ``ray.shutdown``.

    Raises:
        ValueError: Ray is not installed, naming the extra that installs it (the
            CLI turns this into exit status 2 before any model loads).
    """
    # Ray's core worker puts native failure handlers on SIGTERM (and SIGSEGV, ...) in this process, and
    # ray.shutdown() sets SIGTERM back to SIG_DFL at the OS level, while Python still believes its own
    # handler is in place: a SIGTERM in the ~2 s shutdown then spends stopping a local cluster killed the
    # run with no line (exit -15) and left Ray's session folder. Ray reads this switch when imported.
    os.environ.setdefault(RAY_NO_FAILURE_HANDLER, "1")
    try:
        import ray
    except ImportError:
        raise ValueError(f"--ray needs Ray, which is not installed: pip install '{RAY_EXTRA}' "
                         "(make setup-test installs it)") from None
    return ray


@dataclass(frozen=True)
class ClusterConfig:
    """Where and how wide a cluster run is.

    Attributes:
        address: ``None`` starts a local cluster on this machine; ``"auto"``,
            ``host:port`` or ``ray://host:port`` joins a running one
            (:func:`parse_address`).
        connect_timeout_s: Seconds a running cluster has to answer
            (:func:`check_reachable`) before the run gives up.
        n_actors: Actors to start; ``None`` = one per worker slot of the cluster.
        threads: CPUs each actor reserves, and its torch threads.
        max_restarts: Ray's ``max_restarts`` of each actor.
        max_task_retries: Ray's ``max_task_retries`` of each unit.
    """

    address: str | None = None
    n_actors: int | None = None
    threads: int = 1  # one thread per actor: on CPUs, more actors beat more threads per decode
    max_restarts: int = DEFAULT_MAX_RESTARTS
    max_task_retries: int = DEFAULT_MAX_TASK_RETRIES
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.address is not None and (not isinstance(self.address, str) or parse_address(self.address) is None):
            raise ValueError(f"address={self.address!r} must be {ADDRESS_FORMS} (None starts a local cluster)")
        check_value("connect_timeout_s", self.connect_timeout_s, RAY_TIMEOUT, f"must be in {RAY_TIMEOUT.text} seconds")
        check_value("n_actors", self.n_actors, RAY_ACTORS, f"must be an integer >= {RAY_ACTORS.lo}")
        for name, rng in (("threads", THREADS), ("max_restarts", RETRIES), ("max_task_retries", RETRIES)):
            check_value(name, getattr(self, name), rng)


@dataclass(frozen=True)
class Slots:
    """How the actors are placed: ``n_actors`` of ``num_cpus`` CPUs and ``num_gpus`` GPUs each."""

    n_actors: int
    num_cpus: int
    num_gpus: int
    capacity: int  # slots the cluster has now


def plan_slots(resources: dict[str, float], config: ClusterConfig, *, local: bool) -> Slots:
    """One actor per worker slot of ``resources`` (``ray.cluster_resources()``).

    A slot is one GPU and ``threads`` CPUs where the cluster has GPUs, else
    ``threads`` CPUs.

    Raises:
        ValueError: no slot at all, or (on a local cluster, which cannot grow) more
            ``n_actors`` than slots. A remote cluster may be autoscaling: there the
            extra actors wait for nodes, with a warning.
    """
    cpus, gpus = int(resources.get("CPU", 0)), int(resources.get("GPU", 0))
    num_gpus = 1 if gpus else 0
    capacity = min(gpus, cpus // config.threads) if gpus else cpus // config.threads
    if capacity < 1:
        raise ValueError(f"threads={config.threads} per actor: the cluster has only {cpus} CPUs")
    n = config.n_actors or capacity
    if n > capacity:
        what = f"{capacity} slots ({cpus} CPUs, {gpus} GPUs, {config.threads} threads per actor)"
        if local:
            raise ValueError(f"n_actors={n}: this machine's cluster has {what}")
        logger.warning("n_actors=%d but the cluster has %s now; the rest wait for nodes", n, what)
    return Slots(n, config.threads, num_gpus, capacity)


class UnitActor:
    """Inside one Ray actor: the experiment's state, loaded once, and its ``measure`` per unit.

    A load error is kept and raised by :meth:`ready` (so the driver shows the
    cause, not a dead actor) and by every :meth:`measure`.
    """

    def __init__(self, experiment: Experiment, threads: int):
        import torch

        torch.set_num_threads(threads)
        self.experiment, self.state, self.error = experiment, None, None
        try:
            self.state = experiment.load()
        except Exception as exc:  # noqa: BLE001 - re-raised by ready() and measure()
            self.error = exc

    def ready(self) -> dict[str, Any]:
        import torch

        if self.error is not None:
            raise self.error
        return {"info": self.experiment.info(self.state), "pid": os.getpid(),
                "torch_threads": torch.get_num_threads()}

    def measure(self, unit: Any) -> Any:
        if self.state is None:
            raise RuntimeError(f"this actor could not load the models: {self.error!r}")
        return self.experiment.measure(self.state, unit)


class RayExecutor:
    """Runs an experiment's units on a Ray cluster (:class:`lab.runs.engine.Executor`).

    Args:
        config: Address, actors, threads and Ray's retry limits.

    The experiment (its ``for_workers()``) is pickled to the actors, so what it holds (a runner
    factory) must be importable there or defined locally (cloudpickle sends it by value). Each unit
    has an ``id``, which names it when it fails.

    Raises:
        ValueError: Ray not installed (:func:`require_ray`), a cluster without room
            (:func:`plan_slots`), or the experiment's own load error in an actor
            (re-raised as itself, e.g. a prompt too long for the target).
    """

    def __init__(self, config: ClusterConfig):
        self.config = config
        self.ray = require_ray()
        self.actors: list[Any] = []
        self._experiment_ref: Any = None
        self._owns_cluster = False
        self._session_dir: str | None = None  # Ray's files of a local cluster this executor started
        self._n_failed = 0
        self._sigterm_handler: Callable[[int, Any], Any] | None = None  # this process's, wrapped while Ray runs
        self._sigterm_seen = False

    def start(self, experiment: Experiment) -> dict[str, Any]:
        ray = self.ray
        # 1. join or start the cluster
        if not ray.is_initialized():
            self._init_cluster()
        resources = ray.cluster_resources()
        slots = plan_slots(resources, self.config, local=self.config.address is None)
        if slots.num_gpus and experiment.device == "cpu":
            logger.warning("the cluster has GPUs but the run's device is cpu; pass --device cuda to use them")

        # 2. one actor per slot, each loading the models once, with the device the settings fixed
        # Held for the executor's life: Ray rebuilds a restarted actor from these arguments
        # (Ray warns once per actor that they live in the object store; this reference keeps them).
        self._experiment_ref = ray.put(experiment.for_workers())
        actor_cls = ray.remote(num_cpus=slots.num_cpus, num_gpus=slots.num_gpus,
                               max_restarts=self.config.max_restarts,
                               max_task_retries=self.config.max_task_retries)(UnitActor)
        logger.info("starting %d actors (%d CPUs, %d GPUs each); each loads the models",
                    slots.n_actors, slots.num_cpus, slots.num_gpus)
        self.actors = [actor_cls.remote(self._experiment_ref, self.config.threads)
                       for _ in range(slots.n_actors)]
        try:
            with self._signals_as_raised():
                ready = ray.get([a.ready.remote() for a in self.actors])
        except ray.exceptions.RayTaskError as exc:  # the experiment's own load error, e.g. a too-long prompt
            raise (exc.cause if isinstance(exc.cause, Exception) else exc) from None

        # 3. what the report records: the experiment's info plus the cluster's shape
        info = dict(ready[0]["info"])
        if any("load_s" in r["info"] for r in ready):  # the actors load in parallel: the slowest counts
            info["load_s"] = max(float(r["info"].get("load_s") or 0.0) for r in ready)
        info["cluster"] = {"address": self.config.address or "local", "ray": ray.__version__,
                           "n_actors": slots.n_actors, "cpus_per_actor": slots.num_cpus,
                           "gpus_per_actor": slots.num_gpus, "torch_threads_per_actor": ready[0]["torch_threads"],
                           "nodes": sum(1 for n in ray.nodes() if n.get("Alive")),
                           "max_restarts": self.config.max_restarts,
                           "max_task_retries": self.config.max_task_retries}
        return info

    def run(self, units: Sequence[Any], progress: Any) -> Iterator[tuple[Any, Any]]:
        ray = self.ray
        queue = deque(units)
        pending: dict[Any, tuple[Any, int]] = {}  # object ref -> (unit, actor index)
        load = [0] * len(self.actors)
        alive = set(range(len(self.actors)))
        n_failed = 0
        status = getattr(progress, "status", None)

        def feed() -> None:
            for i in sorted(alive):
                while queue and load[i] < IN_FLIGHT_PER_ACTOR:
                    p = queue.popleft()
                    pending[self.actors[i].measure.remote(p)] = (p, i)
                    load[i] += 1

        feed()
        while pending:
            if status is not None:
                status(len(pending), n_failed)
            with self._signals_as_raised():
                [ref], _ = ray.wait(list(pending), num_returns=1)
            p, i = pending.pop(ref)
            load[i] -= 1
            actor_died = False
            try:
                with self._signals_as_raised():
                    got = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:  # a Python error in the task: not retried
                got = UnitFailure(_one_line(exc.cause or exc))
            except ray.exceptions.RayError as exc:  # the actor died and Ray's retries are used up
                got = UnitFailure(f"its actor died {self.config.max_task_retries + 1} times ({_one_line(exc)})")
                actor_died = True
            if isinstance(got, UnitFailure):
                n_failed += 1
                self._n_failed = n_failed
                logger.warning("%s failed: %s", p.id, got.error)
            yield p, got
            if actor_died and i in alive and not self._still_alive(i):
                alive.discard(i)
                logger.warning("actor %d is dead after its %d restarts; %d actors left",
                               i, self.config.max_restarts, len(alive))
            if not alive:
                while queue:
                    n_failed += 1
                    self._n_failed = n_failed
                    yield queue.popleft(), UnitFailure("no live actor was left to run it")
            feed()
        if status is not None:
            status(0, n_failed)

    def _init_cluster(self) -> None:
        """``ray.init``: a local cluster whose files live in a folder of its own, or a running
        cluster checked to answer within the bound first; this process's SIGTERM handler kept."""
        ray, address = self.ray, self.config.address
        if address is None:
            # Ray's logs and sockets go to a folder the lab owns and names, not /tmp/ray; a
            # short path, since Ray's Unix sockets inside it must fit in 107 bytes.
            self._session_dir = tempfile.mkdtemp(prefix="lab-ray-")
            logger.info("Ray's session files (logs, sockets) go to %s", self._session_dir)
            kw: dict[str, Any] = {"include_dashboard": False, "_temp_dir": self._session_dir}
        else:
            target = resolve_auto(ray) if address == "auto" else address
            check_reachable(target, self.config.connect_timeout_s,
                            shown=f"auto ({target})" if address == "auto" else address)
            kw = {"address": target}
        # ray.init sets its own SIGTERM handler (sys.exit) and its core worker a native one that
        # dumps a stack and aborts (exit 134): this process's handler (the CLI's, which keeps the
        # finished prompts and prints the resume line) is put back, wrapped by _on_sigterm, and a
        # SIGTERM that arrived meanwhile is delivered to it again.
        main = threading.current_thread() is threading.main_thread()
        previous = signal.getsignal(signal.SIGTERM) if main else None
        try:
            ray.init(log_to_driver=False, logging_level=logging.WARNING, **kw)
        except (ConnectionError, RuntimeError) as exc:
            if address is None:
                raise
            # a gRPC server that is not a Ray cluster's GCS passes check_reachable; Ray gives
            # up on it by itself (~20 s measured), and says so in a ConnectionError
            raise ValueError(f"--ray {address!r}: a server answers there, but Ray could not join it as a "
                             f"cluster ({_one_line(exc)}); give the head node's GCS port") from None
        except SystemExit as exc:
            if previous is None or exc.code != signal.SIGTERM:
                raise
            signal.signal(signal.SIGTERM, previous)
            signal.raise_signal(signal.SIGTERM)
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        self._owns_cluster = True
        if callable(previous):
            self._sigterm_handler = previous
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        """This process's SIGTERM handler, noting that it ran: Ray's blocking calls (``ray.wait``,
        ``ray.get``) turn whatever a signal handler raises into a plain ``KeyboardInterrupt``."""
        self._sigterm_seen = True
        self._sigterm_handler(signum, frame)

    @contextmanager
    def _signals_as_raised(self) -> Iterator[None]:
        """Re-raise a ``KeyboardInterrupt`` that Ray made of a SIGTERM as this process's handler raises it
        (the CLI's ``Terminated``: exit 143 and the resume line, as without ``--ray``)."""
        try:
            yield
        except KeyboardInterrupt:
            if self._sigterm_seen and self._sigterm_handler is not None:
                self._sigterm_handler(signal.SIGTERM, None)
            raise

    def _still_alive(self, i: int) -> bool:
        """Whether actor ``i`` answers (Ray restarts it first if it has restarts left)."""
        try:
            with self._signals_as_raised():
                self.ray.get(self.actors[i].ready.remote())
            return True
        except self.ray.exceptions.RayError:
            return False

    def close(self) -> None:
        """Stop the actors; stop the local cluster if this executor started it (disconnect otherwise)."""
        ray = self.ray
        try:
            for a in self.actors:
                try:
                    ray.kill(a, no_restart=True)
                except Exception:  # noqa: BLE001 - already gone
                    pass
            self.actors, self._experiment_ref = [], None
            if self._owns_cluster and ray.is_initialized():
                ray.shutdown()
        except BaseException:  # a Ctrl-C or SIGTERM in the shutdown (~2 s): finish stopping the cluster first
            if self._owns_cluster:
                try:
                    ray.shutdown()
                except BaseException:  # noqa: BLE001 - a second signal: the first one is already on its way
                    pass
            raise
        finally:  # ... then neither this process's handler stays wrapped nor the session folder stays
            self._owns_cluster = False
            if self._sigterm_handler is not None and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, self._sigterm_handler)
                self._sigterm_handler = None
            if self._session_dir is not None:
                if self._n_failed:  # the actors' logs may say why
                    logger.warning("Ray's logs of this run are kept in %s", self._session_dir)
                else:
                    shutil.rmtree(self._session_dir, ignore_errors=True)
                self._session_dir = None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
