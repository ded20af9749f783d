"""The study's test doubles, shared by its tests (a support module, not a test module).

Fake per-prompt runners that stand in for the models (the runner is injectable), the settings
the fake studies run with, a ``lab study`` subprocess that blocks mid-run, and the helpers of
the Ray tests (a runner factory with faults on chosen prompts, Ray's processes on this machine).
Subprocesses and Ray workers import this module by name, so it must stay importable from the
repository root without pytest.
"""

from __future__ import annotations


import os
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from lab.study.config import StudyConfig, prompt_seed
from lab.study.outcome import DraftedToken, PromptOutcome, PromptRow, TrackedDecode
from tests.provenance import environment_json, model_json

ROOT = Path(__file__).resolve().parents[1]
FAST_RESAMPLES = 99  # the bookkeeping is under test with the fakes, not the CI's precision
CLI_RESAMPLES = ["--resamples", str(FAST_RESAMPLES)]
LIMIT = 12  # 6 twin pairs, every category
TIMING = ("wall_s", "prefill_s", "decode_s", "speculative_s", "temperature_s")  # differ run to run by nature


class InterruptAfter(Exception):
    """Raised by :class:`FakeRunner` to simulate Ctrl-C after k prompts."""


def _u(prompt: Any) -> float:
    """A number in [0, 1) fixed by the prompt's id (its seed under study seed 0)."""
    return (prompt_seed(0, prompt.id) % 1000) / 1000.0


def _tokens(u: float, n: int, per_round: int) -> tuple[DraftedToken, ...]:
    """``n`` drafted tokens, all tested, of which ``round(u * n)`` accepted (spread evenly), so that
    alpha = n_accepted / n_drafted_tested follows ``u``."""
    k = round(u * n)
    return tuple(DraftedToken(round=i // per_round, index=i % per_round, draft_entropy_bits=(i * 0.37 + u) % 5,
                              draft_normalized_entropy=((i * 0.37 + u) % 5) / 15.6,
                              accepted=(i * k) // n != ((i + 1) * k) // n, tested=True) for i in range(n))


def _counts(tokens: tuple[DraftedToken, ...]) -> dict[str, Any]:
    """A row's drafted-token counts and alpha, as the tokens add them up (a work file is checked against them)."""
    n_accepted = sum(t.accepted for t in tokens)
    return {"n_drafted": len(tokens), "n_drafted_tested": len(tokens), "n_accepted": n_accepted,
            "alpha": n_accepted / len(tokens)}


def _lookback(prompt: Any, health: float) -> dict[str, Any]:
    """H1's measure as the study records it: a twin's from its health, a clean prompt's None (no span)."""
    if prompt.variant == "clean":
        return {"lookback_heads": None, "n_context_tokens": None}
    return {"lookback_heads": health / 10 - 0.5, "n_context_tokens": 12}


class FakeRunner:
    """Deterministic per-prompt numbers derived from the prompt's seed; records calls.

    Reports no decode (H5 untested) and has no ``alpha_at`` (H6 only where the study runs at a
    design temperature). ``fail_after``: raise ``interrupt`` (default :class:`InterruptAfter`; a
    ``KeyboardInterrupt`` is Ctrl-C) on the prompt after that many.
    """

    def __init__(self, fail_after: int | None = None, interrupt: type[BaseException] = InterruptAfter):
        self.calls: list[str] = []
        self.fail_after = fail_after
        self.interrupt = interrupt
        self.info = {"model": model_json(model="fake", source=None, profile=None), "draft": "fake-draft"}

    def __call__(self, prompt: Any) -> PromptOutcome:
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise self.interrupt(prompt.id)
        self.calls.append(prompt.id)
        u = _u(prompt)
        health = 10 * u - (3 if prompt.variant == "poisoned" else 0)
        tokens = _tokens(u, 12, per_round=4)
        row = PromptRow(n_prompt_tokens=20, context_health=health, sink_rate_pos0=0.8, sink_rate_content_mean=0.01,
                        position0_share=0.5, n_content_sinks=0, mean_entropy_bits=3 - 0.2 * health + u,
                        max_entropy_bits=6.0, var_entropy_bits=1.0, mean_varentropy_bits2=2.0, n_new_tokens=8,
                        tau=1.5, n_rounds=3, prefill_s=0.0, decode_s=0.0, speculative_s=0.0, text="fake",
                        **_lookback(prompt, health), **_counts(tokens))
        return PromptOutcome(row=row, tokens=tokens)


class FakeRunnerWithDecode:
    """Deterministic numbers from the prompt seed, with decode labels (H5) and alpha at other temperatures (H6)."""

    def __init__(self):
        self.info = {"model": model_json(model="fake", source=None, profile=None), "draft": "fake-draft"}
        self.calls: list[str] = []
        self.temperature_calls: list[tuple[str, float]] = []

    def __call__(self, prompt: Any) -> PromptOutcome:
        self.calls.append(prompt.id)
        u = _u(prompt)
        health = 9 + u - (1 if prompt.variant == "poisoned" else 0)
        ent = tuple((i * 0.7 + u) % 4 + (1.0 if i % 3 == 0 else 0.0) for i in range(12))
        word = tuple("initial" if i % 3 == 0 else "continuation" if i % 3 == 1 else "" for i in range(12))
        tokens = _tokens(u, 8, per_round=2)
        row = PromptRow(n_prompt_tokens=20, context_health=health, content_sink_health=10.0, sink_rate_pos0=0.8,
                        sink_rate_content_mean=0.01, position0_share=0.5, n_content_sinks=0,
                        mean_entropy_bits=3 - 0.2 * health + u, max_entropy_bits=6.0, var_entropy_bits=1.0,
                        mean_varentropy_bits2=2.0, n_new_tokens=12, tau=1.5, n_rounds=4, prefill_s=0.0, decode_s=0.0,
                        speculative_s=0.0, text="fake", initial_entropy_bits=1.0, continuation_entropy_bits=0.5,
                        n_multi_token_words=4, **_lookback(prompt, health), **_counts(tokens))
        return PromptOutcome(row=row, tokens=tokens, decode=TrackedDecode(ent, word))

    def alpha_at(self, prompt: Any, temperature: float) -> float:
        self.temperature_calls.append((prompt.id, temperature))
        return min(1.0, _u(prompt) * (0.5 + temperature / 2))


def fake_config(tmp_path: Path, **kw: Any) -> StudyConfig:
    """The settings of a fake study under ``tmp_path``: CPU, :data:`LIMIT` prompts unless ``limit`` is given
    (None: every prompt), :data:`FAST_RESAMPLES`."""
    kw.setdefault("n_resamples", FAST_RESAMPLES)
    kw.setdefault("limit", LIMIT)
    return StudyConfig(device="cpu", out=str(tmp_path), **kw)


def untimed(rows: Iterable[PromptRow | DraftedToken], drop: Iterable[str] = TIMING) -> list[dict[str, Any]]:
    """Rows as their columns without the ``drop`` columns, as JSON values (NaN -> None: two NaNs never
    compare equal), for comparing two runs."""
    from lab.reports import to_jsonable

    drop = set(drop)
    return to_jsonable([{k: v for k, v in r.as_columns().items() if k not in drop} for r in rows])


def use_runner(monkeypatch: Any, runner: Any) -> None:
    """``lab study`` (the CLI) runs with ``runner`` instead of loading the models."""
    from lab.study import runner as study_mod

    monkeypatch.setattr(study_mod.ModelRunner, "load", classmethod(lambda cls, cfg: runner))


def subprocess_env() -> dict[str, str]:
    """The environment of a ``python -c`` subprocess that imports ``lab`` and ``tests`` from this checkout."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}


_BLOCKED_STUDY = """
import pathlib, sys, time
from lab import cli
from lab.study import runner as study
from tests.study_fakes import FakeRunner

started, release = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])

class Blocked(FakeRunner):
    def __call__(self, prompt):
        if len(self.calls) == 2:  # two prompts finished: say so, then wait to be released
            started.touch()
            while not release.exists():
                time.sleep(0.01)
        return super().__call__(prompt)

study.ModelRunner.load = classmethod(lambda cls, cfg: Blocked())
sys.exit(cli.main(sys.argv[3:]))
"""
BLOCKED_START_S = 120  # a bound on a hang, not a timing assumption: the test waits for the marker


def start_blocked(tmp_path: Path, argv: list[str]) -> tuple[subprocess.Popen, Path]:
    """``lab study ARGV`` in a subprocess with :class:`FakeRunner`, stopped after two finished prompts.

    Returns:
        ``(process, release)``: touch ``release`` to let the study go on.
    """
    started, release = tmp_path / "started", tmp_path / "release"
    proc = subprocess.Popen([sys.executable, "-c", _BLOCKED_STUDY, str(started), str(release), *argv], cwd=ROOT,
                            env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + BLOCKED_START_S
    while not started.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the blocked study never started"
        time.sleep(0.05)
    return proc, release


# ---- Ray ----

# Ray's processes exit within seconds of ray.shutdown(); the bound only ends the wait for a leftover
# process, so it is set far above that, for a machine busy with other work.
RAY_GONE_S = 120.0
_RAY_PROCESS = re.compile(r"\b(raylet|gcs_server)\b|^ray::|ray/(_private|dashboard|autoscaler)/")


def ray_processes() -> set[tuple[int, str]]:
    """``(pid, command)`` of every Ray process on this machine (``ps``)."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    rows = (line.strip().split(None, 1) for line in out.splitlines() if line.strip())
    return {(int(r[0]), r[1]) for r in rows if len(r) == 2 and _RAY_PROCESS.search(r[1])}


def assert_no_ray_process_left(before: set[tuple[int, str]]) -> None:
    deadline = time.monotonic() + RAY_GONE_S
    while (left := ray_processes() - before) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"Ray processes left behind: {sorted(left)}"


def short_tmpdir() -> Path:
    """A fresh, short TMPDIR for a subprocess: Ray's Unix sockets under it must fit in 107 bytes."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix="lt-", dir="/tmp"))


@dataclass(frozen=True)
class FaultyFactory:
    """Builds each actor's runner (the fake, or the embedded model's) with faults on chosen prompts.

    Every call appends ``"<pid> <prompt id>"`` to ``log`` before running, so the test
    counts attempts across actors and their restarts.
    """

    log: str
    die_on: str | None = None  # os._exit(1) on this prompt ...
    die_once: bool = True  # ... on its first attempt only (a marker file), else on every attempt
    raise_on: str | None = None  # a Python error on this prompt
    real: bool = False  # the embedded model (ModelRunner.load) instead of FakeRunner
    stall_after: int | None = None  # after this many prompts in one actor, touch `log`.stalled and hang

    def __call__(self, config: StudyConfig) -> "_Faulty":
        from lab.study.runner import ModelRunner

        return _Faulty(ModelRunner.load(config) if self.real else FakeRunner(), self)


class _Faulty:
    def __init__(self, inner: Any, spec: FaultyFactory):
        self.inner, self.spec, self.info = inner, spec, inner.info

    def __getattr__(self, name: str) -> Any:  # alpha_at where the inner runner has it
        return getattr(self.inner, name)

    def __call__(self, prompt: Any) -> PromptOutcome:
        with open(self.spec.log, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {prompt.id}\n")
        self.n = getattr(self, "n", 0) + 1
        if self.spec.stall_after is not None and self.n > self.spec.stall_after:
            Path(self.spec.log + ".stalled").touch()
            time.sleep(3600)  # until the driver's signal takes the cluster down
        if prompt.id == self.spec.die_on:
            marker = Path(self.spec.log + ".died")
            if not (self.spec.die_once and marker.exists()):
                marker.touch()
                os._exit(1)
        if prompt.id == self.spec.raise_on:
            raise ValueError(f"cannot measure {prompt.id}")
        return self.inner(prompt)


def attempts(log: Path) -> Counter:
    """Attempts per prompt id in a :class:`FaultyFactory` log."""
    return Counter(line.split()[1] for line in log.read_text().splitlines()) if log.exists() else Counter()


@dataclass(frozen=True)
class FakeRunnerFactory:
    """A picklable runner factory for worker processes (:class:`lab.runs.local.ProcessExecutor`): a
    :class:`FakeRunner` per worker; ``fail_after``: it raises :class:`InterruptAfter` on the prompt after that
    many of its own; ``die_after``: its process exits (code 3) instead, as one killed or out of memory."""

    fail_after: int | None = None
    die_after: int | None = None

    def __call__(self, config: StudyConfig) -> Any:
        return _Dying(self.die_after) if self.die_after is not None else FakeRunner(fail_after=self.fail_after)


class _Dying(FakeRunner):
    def __init__(self, die_after: int):
        super().__init__()
        self.die_after = die_after

    def __call__(self, prompt: Any) -> PromptOutcome:
        if len(self.calls) >= self.die_after:
            os._exit(3)
        return super().__call__(prompt)


def study_test(**fields: Any) -> dict[str, Any]:
    """One test of a study's report.json (``lab.kinds.study.StudyTest`` as JSON), every field there: made-up
    figures, ``fields`` over them (an ``untestable`` only where given, as in a report written before it)."""
    test = {"name": "H2", "hypothesis": "", "test": "", "effect_name": "point_biserial_r", "effect": None,
            "ci_low": None, "ci_high": None, "p_value": None, "n": 0, "predicted_sign": -1, "smallest_effect": 0.1,
            "p_holm": None, "verdict": "inconclusive", "note": "", "details": {}, "ci_level": 0.99}
    return {**test, **fields}


def study_report(tests: Iterable[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """A whole study report.json (``lab.kinds.study.Report``) holding ``tests`` (each completed by
    :func:`study_test`), its other parts empty; ``fields`` over them."""
    report = {"kind": "study", "settings": {}, "config": {}, "environment": environment_json(), "prompts": {},
              "timing": {"wall_s_total": 1.0, "wall_s_pipeline": 1.0, "compute_s_prompts": 1.0, "n_resumed": 0,
                         "model_load_s": None},
              "tests": [study_test(**t) for t in tests], "verdicts": {}, "acceptance_bins": [],
              "health_entropy_fit": None, "categories": {}, "pairs": [], "distractor_tables": {},
              "context_measure": {}, "length_drift": None, "missing_prompts": [], "merged_from": [], "figures": {}}
    return {**report, **fields}
