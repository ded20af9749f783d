"""An experiment's units run through an executor: here, one after another, or on a Ray cluster.

An experiment declares what a worker loads once (its models) and how one unit (a study prompt, an
intervention triple) is measured on it (:class:`Experiment`). An executor runs the units and yields
each result as it finishes (:class:`Executor`): :class:`SerialExecutor` in this process, or
:class:`lab.runs.cluster.RayExecutor` with one actor per worker slot. The driver alone writes the
work directory, so an executor never touches files, and a unit's result depends only on the
experiment's settings and the unit, never on where or in which order it ran: a cluster run equals a
serial one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Protocol, Sequence


class Experiment(Protocol):
    """What a worker runs: ``load`` once, then ``measure`` per unit.

    Attributes:
        device: Where the models run (``"cpu"``, ``"cuda"``, ...), as the settings resolved it.
    """

    device: str

    def load(self) -> Any:
        """The worker's state (the loaded models). Raises ``ValueError`` for a set-up that cannot run."""

    def info(self, state: Any) -> dict[str, Any]:
        """What the report records of the loaded state (models, load time), JSON-ready."""

    def measure(self, state: Any, unit: Any) -> Any:
        """One unit's result (picklable: it may come back from another process)."""

    def for_workers(self) -> "Experiment":
        """The experiment as sent to a cluster's workers (every setting fixed, so each loads the same)."""


@dataclass(frozen=True)
class UnitFailure:
    """A unit an executor gave up on (after its own retries): ``error`` says why, in one line."""

    error: str


class Executor(Protocol):
    """Where an experiment's units run.

    The driver calls ``start`` once (the models load; it returns the experiment's ``info``), then
    iterates ``run``, which yields ``(unit, result)`` for every unit in the order they finish, the
    result being the experiment's ``measure`` or a :class:`UnitFailure`; ``close`` is always called last.
    """

    def start(self, experiment: Experiment) -> dict[str, Any]: ...

    def run(self, units: Sequence[Any], progress: Any) -> Iterator[tuple[Any, Any]]: ...

    def close(self) -> None: ...


class SerialExecutor:
    """The units one after another in this process (the default executor).

    Args:
        state: A state already loaded (tests pass a fake runner); None loads the experiment's in ``start``.

    An exception in ``measure`` is not caught: it stops the run (finished units stay in the work
    directory), as a serial run always has.
    """

    def __init__(self, state: Any = None):
        self.state, self.experiment = state, None

    def start(self, experiment: Experiment) -> dict[str, Any]:
        self.experiment = experiment
        if self.state is None:
            self.state = experiment.load()
        return experiment.info(self.state)

    def run(self, units: Sequence[Any], progress: Any = None) -> Iterator[tuple[Any, Any]]:
        for unit in units:
            yield unit, self.experiment.measure(self.state, unit)

    def close(self) -> None:
        pass
