"""llama.cpp inside ``lab bench``'s alternating schedule (``lab bench --peer llama.cpp``).

:class:`LlamaCppPeer` hands the bench two more methods per configuration, run in the
same repeats loop, on the same prompts, budget and threads, greedy, at every gamma of
the sweep: ``llama.cpp target-only`` (``llama-completion``) and ``llama.cpp speculative
gamma=G`` (``llama-speculative-simple``), on the GGUF files the lab loaded. Each run's
times are llama.cpp's own (prompt: ``prompt eval`` / ``encoded``; generation: ``eval`` +
sampling / ``decoded``), so process start and model loading are not counted.

After the schedule, ``llama-bench`` times each model alone: one-token generation steps
(the draft's cost ratio ``c`` = target tokens/s / draft tokens/s) and one batch of
gamma + 1 tokens on the target (a verify pass, in target steps). With the measured
acceptance rate these give llama.cpp's Leviathan et al. (2023, Theorem 3.8) prediction
E[tokens per round] / (gamma c + verify), beside the lab's own decomposition.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import signal
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from lab.bench.peer.llamacpp import (PeerBinaries, PeerOutputError, PeerRunConfig, PeerRunError, PeerUnavailableError,
                                     bench_command,
                                     completion_command, prompt_file_text, speculative_command, version_command)
from lab.bench.peer.parse import parse_bench_json, parse_completion, parse_speculative, parse_version
from lab.bench.results import BASELINE, MethodFigures
from lab.speculative.theory import expected_tokens_per_round

TARGET_METHOD = "llama.cpp target-only"
PROMPT_PLACEHOLDER = "PROMPT_FILE"  # the per-prompt text file in recorded command lines
# Each call's timeout is sized from its work (:func:`call_timeout`): a floor for starting the binary
# and mapping the GGUF files, plus a bound per forward step. A one-token step of the largest peer
# model (1.5B parameters) takes well under a second on 2 CPU cores; a second per step leaves a busy
# machine several times that, so only a binary that hangs trips it.
LOAD_S = 60.0
STEP_S = 1.0
STDERR_TAIL_LINES = 3  # of a failed binary's stderr, in the one-line error


def call_timeout(steps: int) -> float:
    """Seconds one llama.cpp call may take for ``steps`` forward steps: ``LOAD_S + STEP_S * steps``."""
    return LOAD_S + STEP_S * max(0, steps)


def run_binary(cmd: Sequence[str], timeout: float = LOAD_S) -> tuple[str, str]:
    """Run one llama.cpp command in its own process group; returns (stdout, stderr).

    Output that is not UTF-8 is decoded with replacement characters (the parser then names
    the field it cannot find).

    Raises:
        PeerRunError: it exited non-zero or died by a signal (the message holds the last
            lines of its stderr), or it ran past ``timeout`` seconds (its whole process
            group is killed); the message names the binary, in one line.
    """
    name = cmd[0]
    try:
        proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                errors="replace", start_new_session=True)
    except OSError as exc:
        raise PeerRunError(f"llama.cpp binary {name} could not be started: {exc.strerror or exc}") from exc
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise PeerRunError(f"llama.cpp binary {name} did not finish within {timeout:.0f} s (sized from the "
                           "run's tokens) and was killed; it hangs, or the machine is far too busy") from None
    except BaseException:  # Ctrl-C, SIGTERM: no orphan left running
        _kill_group(proc)
        raise
    if proc.returncode != 0:
        tail = " | ".join(line.strip() for line in stderr.splitlines()[-STDERR_TAIL_LINES:] if line.strip())
        if proc.returncode < 0:
            try:
                how = f"died by signal {signal.Signals(-proc.returncode).name}"
            except ValueError:
                how = f"died by signal {-proc.returncode}"
        else:
            how = f"exited {proc.returncode}"
        raise PeerRunError(f"llama.cpp binary {name} {how}" + (f"; its stderr ends: {tail}" if tail else
                                                                "; it printed nothing on stderr"))
    return stdout, stderr


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:  # already gone
        pass
    proc.communicate()


def probe_version(bins: PeerBinaries, runner: Callable[..., tuple[str, str]] = run_binary) -> dict[str, str]:
    """``llama-completion --version``, parsed: run before any model loads, so a binary that is
    broken (dies, hangs, prints garbage) is named in seconds.

    Raises:
        PeerRunError: the binary failed or its output has no version line (naming the binary).
    """
    cmd = version_command(bins)
    return _parse(cmd, parse_version, runner(cmd, timeout=call_timeout(0))[1])


def _parse(cmd: Sequence[str], parse: Callable[..., Any], *outputs: str, **kwargs: Any) -> Any:
    """``parse(*outputs)``; a :class:`PeerOutputError` is re-raised naming the binary and its command."""
    try:
        return parse(*outputs, **kwargs)
    except PeerOutputError as exc:
        raise PeerOutputError(f"llama.cpp binary {cmd[0]} printed output the lab cannot read: {exc}") from None


class LlamaCppPeer:
    """llama.cpp's target alone and speculative decoding as bench methods.

    Args:
        bins: from :func:`lab.bench.peer.llamacpp.locate`.
        target_gguf, draft_gguf: the GGUF files the lab's target and draft were loaded from.
        prompt_texts: per prompt, the chat-templated text the lab tokenized, keyed by the
            token ids it produced (the bench passes the ids; llama.cpp gets the text).
        threads: the bench's thread count (``-t``/``-tb``, the draft the same).
        gammas: draft lengths (``--spec-draft-n-max``), the bench's sweep.
        ctx_size: ``-c`` for every run.
        runner: ``runner(cmd, timeout=seconds)`` runs a command and returns (stdout, stderr);
            tests pass a fake. Each call's timeout is :func:`call_timeout` of its steps.
        decode: the lab's tokenizer decode, to compare llama.cpp's text with the lab's tokens.
        version: ``--version`` already parsed (:func:`probe_version`, before the models
            loaded); None runs it here.
    """

    def __init__(self, bins: PeerBinaries, target_gguf: Path, draft_gguf: Path,
                 prompt_texts: dict[tuple[int, ...], str], *, threads: int, gammas: Sequence[int],
                 ctx_size: int = 4096, runner: Callable[..., tuple[str, str]] = run_binary,
                 decode: Callable[[list[int]], str] | None = None, version: dict[str, str] | None = None):
        if not prompt_texts:
            raise ValueError("prompt_texts={} is empty")
        self.bins, self.target_gguf, self.draft_gguf = bins, Path(target_gguf), Path(draft_gguf)
        self.prompt_texts, self.threads, self.gammas = dict(prompt_texts), threads, tuple(gammas)
        self.ctx_size, self.runner, self.decode = ctx_size, runner, decode
        self._dir = tempfile.TemporaryDirectory(prefix="lab-peer-")
        self._files: dict[tuple[int, ...], Path] = {}
        for i, (key, text) in enumerate(self.prompt_texts.items()):
            path = Path(self._dir.name) / f"prompt-{i}.txt"
            path.write_text(prompt_file_text(text), encoding="utf-8")
            self._files[key] = path
        self.commands: dict[str, str] = {}
        self.version = version if version is not None else probe_version(bins, self.runner)

    def close(self) -> None:
        self._dir.cleanup()

    def __enter__(self) -> LlamaCppPeer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _config(self, gamma: int, budget: int) -> PeerRunConfig:
        return PeerRunConfig(threads=self.threads, gamma=gamma, max_new_tokens=budget, ctx_size=self.ctx_size)

    def _record(self, name: str, cmd: list[str], prompt_file: Path) -> None:
        # the last call wins: the timed runs, not the shorter warm-up
        self.commands[name] = shlex.join(PROMPT_PLACEHOLDER if a == str(prompt_file) else a for a in cmd)

    def methods(self, make_run: Callable[..., Any]) -> list[tuple[str, Callable[[Any, int], Any]]]:
        """``(name, fn(ids, budget) -> Run)`` for the bench; ``make_run`` is its ``Run`` class."""

        def target_only(ids: Any, budget: int) -> Any:
            key = tuple(ids[0].tolist())
            cmd = completion_command(self.bins, self.target_gguf, self._files[key], self._config(1, budget))
            self._record(TARGET_METHOD, cmd, self._files[key])
            steps = len(key) + budget  # the prompt's tokens, counted as steps (generous: a prefill batches them)
            out = _parse(cmd, parse_completion, *self.runner(cmd, timeout=call_timeout(steps)))
            return make_run(TARGET_METHOD, 0, 0, out.n_generated, out.prompt_s + out.decode_s, out.decode_s,
                            peer=out)

        def speculative(gamma: int) -> tuple[str, Callable[[Any, int], Any]]:
            name = f"llama.cpp speculative gamma={gamma}"

            def fn(ids: Any, budget: int) -> Any:
                key = tuple(ids[0].tolist())
                cmd = speculative_command(self.bins, self.target_gguf, self.draft_gguf, self._files[key],
                                          self._config(gamma, budget))
                self._record(name, cmd, self._files[key])
                # worst case: each round keeps one token after gamma draft steps and a verify; both models prefill
                steps = 2 * len(key) + budget * (gamma + 1)
                out = _parse(cmd, parse_speculative, *self.runner(cmd, timeout=call_timeout(steps)),
                             prompt=self.prompt_texts[key])
                return make_run(name, 0, 0, out.n_predict, out.encode_s + out.decode_s, out.decode_s, peer=out)
            return name, fn

        return [(TARGET_METHOD, target_only)] + [speculative(g) for g in self.gammas]

    def calibrate(self, budget: int, repeats: int) -> dict[str, Any]:
        """``llama-bench`` on each model alone: generation tokens/s and the gamma + 1 batches."""
        cfg = self._config(max(self.gammas), budget)
        rows: dict[str, Any] = {}
        for role, model in (("target", self.target_gguf), ("draft", self.draft_gguf)):
            cmd = bench_command(self.bins, model, cfg, repeats)
            cmd[cmd.index("-p") + 1] = ",".join(str(g + 1) for g in self.gammas)
            self.commands[f"llama-bench {role}"] = shlex.join(cmd)
            steps = (repeats + 1) * (sum(g + 1 for g in self.gammas) + budget)  # llama-bench warms up once
            rows[role] = _parse(cmd, parse_bench_json, self.runner(cmd, timeout=call_timeout(steps))[0])
        tg = {role: next((r.avg_ts for r in rs if r.n_gen > 0), None) for role, rs in rows.items()}
        if tg["target"] is None or tg["draft"] is None:
            raise PeerOutputError("llama-bench JSON has no generation (n_gen > 0) row")
        verify = {g: next((tg["target"] * (g + 1) / r.avg_ts for r in rows["target"] if r.n_prompt == g + 1), None)
                  for g in self.gammas}
        return {"target_generation_tokens_per_s": tg["target"], "draft_generation_tokens_per_s": tg["draft"],
                "cost_ratio_time": tg["target"] / tg["draft"], "verify_over_target_step": verify,
                "rows": {role: [dataclasses.asdict(r) for r in rs] for role, rs in rows.items()}}

    def report(self, peer_runs: Sequence[Any], lab_runs: Sequence[Any], lab_methods: Mapping[str, MethodFigures],
               budget: int, repeats: int, lab_groups: dict[str, Any] | None = None) -> dict[str, Any]:
        """After the schedule: calibrate with ``llama-bench``, then :meth:`summarize`."""
        return self.summarize(peer_runs, lab_runs, lab_methods, self.calibrate(budget, repeats), lab_groups)

    def summarize(self, peer_runs: Sequence[Any], lab_runs: Sequence[Any], lab_methods: Mapping[str, MethodFigures],
                  calibration: dict[str, Any], lab_groups: dict[str, Any] | None = None) -> dict[str, Any]:
        """Per llama.cpp method: tokens/s, alpha, the unaccounted share; each runtime's speedup
        over its own target alone (end to end and decode only) beside the lab's decomposition."""
        by: dict[str, list[Any]] = {}
        for r in peer_runs:
            by.setdefault(r.method, []).append(r)
        base = by.get(TARGET_METHOD, [])
        base_texts = {(r.repeat, r.prompt): r.peer.text for r in base}
        e2e = lambda rs: sum(r.n_tokens for r in rs) / sum(r.time_s for r in rs)  # noqa: E731
        dec = lambda rs: sum(r.n_tokens for r in rs) / sum(r.decode_time_s for r in rs)  # noqa: E731
        prompt_tps = lambda rs: (sum(r.peer.n_prompt for r in rs)  # noqa: E731
                                 / sum(r.time_s - r.decode_time_s for r in rs))
        methods: dict[str, Any] = {}
        for name, rs in by.items():
            m: dict[str, Any] = {"n_runs": len(rs), "n_tokens": sum(r.n_tokens for r in rs),
                                 "tokens_per_s": e2e(rs), "decode_tokens_per_s": dec(rs),
                                 "prompt_tokens_per_s": prompt_tps(rs),
                                 "prompt_tokens": sorted({r.peer.n_prompt for r in rs}),
                                 "unaccounted_pct_median": statistics.median(r.peer.perf.unaccounted_pct for r in rs)}
            if name != TARGET_METHOD and base:
                g = rs[0].peer.gamma
                drafted, accepted = sum(r.peer.n_drafted for r in rs), sum(r.peer.n_accepted for r in rs)
                alpha = accepted / drafted if drafted else math.nan
                c, verify = calibration["cost_ratio_time"], calibration["verify_over_target_step"].get(g)
                predicted = (expected_tokens_per_round(alpha, g) / (g * c + verify)
                             if verify is not None and not math.isnan(alpha) else None)
                speedup = m["decode_tokens_per_s"] / dec(base)
                m.update({"gamma": g, "n_drafted": drafted, "n_accepted": accepted, "alpha": alpha,
                          "speedup_end_to_end": m["tokens_per_s"] / e2e(base), "speedup_decode": speedup,
                          "cost_ratio_time": c, "verify_over_target_step": verify,
                          "speedup_predicted_from_measured_times": predicted,
                          "efficiency": speedup / predicted if predicted else None,
                          "same_text_as_own_target_only": all(_agree(r.peer.text, base_texts.get((r.repeat, r.prompt)))
                                                              for r in rs)})
            methods[name] = m
        return {"version": self.version, "binaries": str(self.bins.bin_dir), "binaries_from": self.bins.source,
                "target_gguf": str(self.target_gguf), "draft_gguf": str(self.draft_gguf),
                "threads": self.threads, "commands": dict(self.commands), "calibration": calibration,
                "methods": methods, "side_by_side": _side_by_side(methods, lab_methods, lab_groups),
                "prompt_texts": list(self.prompt_texts.values()),
                "lab_prompt_tokens": [len(k) for k in self.prompt_texts],
                "same_text_as_lab_target": _same_as_lab(base, lab_runs, self.decode),
                "texts": {name: [r.peer.text for r in rs if r.repeat == 0] for name, rs in by.items()},
                "lab_target_texts": ([self.decode(r.tokens) for r in lab_runs
                                      if r.method == BASELINE and r.repeat == 0]
                                     if self.decode is not None else None)}


def _agree(text: str, other: str | None) -> bool:
    """Greedy outputs of different lengths agree when the shorter is a prefix of the longer
    (llama-speculative-simple overshoots its budget by up to gamma tokens)."""
    if other is None:
        return False
    return text.startswith(other) or other.startswith(text)


def _same_as_lab(base: Sequence[Any], lab_runs: Sequence[Any], decode: Callable[[list[int]], str] | None) -> bool | None:
    """llama.cpp's target-only text equals the lab's target-only tokens decoded (None: no decoder)."""
    if decode is None:
        return None
    lab = {(r.repeat, r.prompt): r.tokens for r in lab_runs if r.method == BASELINE}
    return all((r.repeat, r.prompt) in lab and _agree(decode(lab[(r.repeat, r.prompt)]), r.peer.text) for r in base)


def _side_by_side(peer_methods: dict[str, Any], lab_methods: Mapping[str, MethodFigures],
                  lab_groups: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per llama.cpp gamma and lab speculative method at that fixed gamma (float32
    draft, cast or per-pass draft alike; adaptive and dynamic ones are left out): each
    runtime's speedup over its own target alone, end to end and decode only, and its
    decomposition. ``lab_groups`` is the lab bench's ``by_group["all"]`` (end-to-end and
    decode-only speedups per method); without it the lab's end-to-end cell is None."""
    rows = []
    for name, m in peer_methods.items():
        if "gamma" not in m:
            continue
        g = m["gamma"]
        lab_names = [n for n, lm in lab_methods.items()
                     if n.startswith(f"speculative gamma={g}") and lm.speculative is not None
                     and lm.speculative.gamma == g and lm.speculative.adaptive is None
                     and lm.speculative.gamma_policy is None]
        for lab_name in lab_names or [None]:
            lab = lab_methods[lab_name].speculative if lab_name else None
            phased = (lab_groups or {}).get(lab_name, {}) if lab_name else {}
            lab_row = {k: getattr(lab, k) if lab is not None else None
                       for k in ("alpha", "measured_speedup", "cost_ratio_time", "verify_over_target_step",
                                 "overhead_fraction", "speedup_predicted_from_measured_times", "efficiency")}
            lab_row.update({"method": lab_name, "speedup_end_to_end": phased.get("e2e_speedup"),
                            "speedup_decode": phased.get("decode_speedup")})
            rows.append({"gamma": g, "lab": lab_row,
                         "llama.cpp": {k: m.get(k) for k in ("alpha", "speedup_decode", "speedup_end_to_end",
                                                             "cost_ratio_time", "verify_over_target_step",
                                                             "unaccounted_pct_median",
                                                             "speedup_predicted_from_measured_times",
                                                             "efficiency")}})
    return rows


__all__ = ["LlamaCppPeer", "PeerRunError", "PeerUnavailableError", "TARGET_METHOD", "call_timeout", "probe_version",
           "run_binary"]
