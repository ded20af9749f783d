"""Parse what the pinned llama.cpp binaries print (``llama-completion``,
``llama-speculative-simple``, ``llama-bench -o json``).

The lines read, as the pinned sources print them (``common/sampling.cpp``
``common_perf_print``, ``examples/speculative-simple/speculative-simple.cpp``):

    common_perf_print:    sampling time =      12.34 ms
    common_perf_print:    samplers time =       4.56 ms /    17 tokens
    common_perf_print: prompt eval time =     789.00 ms /    52 tokens (...)
    common_perf_print:        eval time =    1234.00 ms /    15 runs   (...)
    common_perf_print:       total time =    2100.00 ms /    67 tokens
    common_perf_print: unaccounted time =      64.66 ms /   3.1 %      (total - ...)
    encoded   52 tokens in    0.800 seconds, speed:   65.000 t/s
    decoded   17 tokens in    1.500 seconds, speed:   11.333 t/s
    n_draft   = 5 / n_predict = 17 / n_drafted = 20 / n_accept  = 14 / accept    = 70.000%

llama.cpp counts a forward pass over one token as ``eval`` and one over several tokens
as ``prompt eval``: in speculative mode every verify batch lands in the target's
``prompt eval`` and the draft's own passes (on its own context) in the target's
``unaccounted`` time. A missing line raises :class:`PeerOutputError` naming the field.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from lab.bench.peer.llamacpp import PeerOutputError

_NUM = r"(-?[0-9.]+|nan|-?inf)"


def _find(text: str, field: str, pattern: str, where: str) -> tuple[str, ...]:
    match = re.search(pattern, text, re.MULTILINE)
    if match is None:
        raise PeerOutputError(f"llama.cpp {where} output has no {field!r} field (pattern {pattern!r}); "
                              "its output format differs from the pinned version's")
    return match.groups()


@dataclass(frozen=True)
class PerfCounters:
    """``common_perf_print`` of the target's context. Times in ms."""

    sampling_ms: float
    n_sampled: int
    prompt_eval_ms: float
    n_prompt_eval: int
    eval_ms: float
    n_eval: int
    total_ms: float
    unaccounted_ms: float
    unaccounted_pct: float


def parse_perf(stderr: str, where: str) -> PerfCounters:
    """Read the target's ``common_perf_print`` block from ``stderr``."""
    sampling, = _find(stderr, "sampling time", rf"sampling time =\s*{_NUM} ms", where)
    _, n_sampled = _find(stderr, "samplers time", rf"samplers time =\s*{_NUM} ms /\s*(\d+) tokens", where)
    p_ms, n_p = _find(stderr, "prompt eval time", rf"prompt eval time =\s*{_NUM} ms /\s*(\d+) tokens", where)
    e_ms, n_e = _find(stderr, "eval time", rf":\s+eval time =\s*{_NUM} ms /\s*(\d+) runs", where)
    total, = _find(stderr, "total time", rf"total time =\s*{_NUM} ms /", where)
    u_ms, u_pct = _find(stderr, "unaccounted time", rf"unaccounted time =\s*{_NUM} ms /\s*{_NUM} %", where)
    return PerfCounters(float(sampling), int(n_sampled), float(p_ms), int(n_p), float(e_ms), int(n_e),
                        float(total), float(u_ms), float(u_pct))


def parse_version(stderr: str, where: str = "--version") -> dict[str, str]:
    """``version: 0.5.0-dev (build 0, commit 0c1e57098)`` (what ``--version`` prints)."""
    version, number, commit = _find(stderr, "version", r"version: (\S+) \(build (\d+), commit ([0-9a-zA-Z]+)\)",
                                    where)
    return {"version": version, "build_number": number, "commit": commit}


@dataclass(frozen=True)
class CompletionOutput:
    """``llama-completion``: the target alone.

    Attributes:
        text: the generated text (stdout; the prompt is not echoed: ``--no-display-prompt``).
        perf: the target's counters; ``n_prompt_eval`` is the prompt's length in llama.cpp's
            tokens. (``n_sampled`` counts the prompt's tokens too: the sampler is fed them.)
    """

    text: str
    perf: PerfCounters

    @property
    def n_prompt(self) -> int:
        return self.perf.n_prompt_eval

    @property
    def n_generated(self) -> int:
        """Tokens generated: every one but the last is evaluated as a one-token pass (the
        last, budget-ending or end-of-generation, is sampled and not evaluated)."""
        return self.perf.n_eval + 1

    @property
    def prompt_s(self) -> float:
        return self.perf.prompt_eval_ms / 1e3

    @property
    def decode_s(self) -> float:
        """Generation time: one-token passes plus sampling (the first token is sampled from
        the prompt's logits, so ``n_eval`` is ``n_generated - 1``)."""
        return (self.perf.eval_ms + self.perf.sampling_ms) / 1e3


def _strip_trailer(stdout: str, trailer: str, where: str) -> str:
    if not stdout.endswith(trailer):
        raise PeerOutputError(f"llama.cpp {where} stdout does not end with {trailer!r} (the generated text's "
                              "end could not be found); its output format differs from the pinned version's")
    return stdout[: len(stdout) - len(trailer)]


COMPLETION_TRAILER = "\n\n"  # completion.cpp prints LOG("\n\n") after the generation loop
EOS_MARK = " [end of text]\n"  # completion.cpp, when the model emits an end-of-generation token


def parse_completion(stdout: str, stderr: str) -> CompletionOutput:
    """Parse ``llama-completion -no-cnv --no-display-prompt`` output."""
    text = _strip_trailer(stdout, COMPLETION_TRAILER, "llama-completion")
    if text.endswith(EOS_MARK):
        text = text[: -len(EOS_MARK)]
    return CompletionOutput(text=text, perf=parse_perf(stderr, "llama-completion"))


@dataclass(frozen=True)
class SpeculativeOutput:
    """``llama-speculative-simple``.

    Attributes:
        text: the generated text (stdout after the echoed prompt).
        n_prompt: prompt tokens (``encoded``); ``encode_s`` includes the draft's prefill.
        n_predict: tokens emitted; ``decode_s`` the whole generation loop (draft and verify).
            It stops at the first round that takes ``n_predict`` past ``-n`` and drafts full
            rounds regardless, so it emits between ``-n + 1`` and ``-n + gamma + 1`` tokens.
        n_drafted, n_accepted: drafted and accepted tokens over all rounds.
        perf: the target context's counters (``unaccounted`` holds the draft's passes).
    """

    text: str
    n_prompt: int
    encode_s: float
    n_predict: int
    decode_s: float
    gamma: int
    n_drafted: int
    n_accepted: int
    perf: PerfCounters

    @property
    def alpha(self) -> float:
        return self.n_accepted / self.n_drafted if self.n_drafted else math.nan


SPECULATIVE_HEAD = "\n\n"  # LOG("\n\n") before the echoed prompt
SPECULATIVE_TRAILER = "\n\n\n\n"  # LOG("\n\n") after the loop and again at exit


def parse_speculative(stdout: str, stderr: str, prompt: str) -> SpeculativeOutput:
    """Parse ``llama-speculative-simple`` output; ``prompt`` is the text it was given
    (it echoes the prompt's tokens before the generated ones)."""
    where = "llama-speculative-simple"
    body = _strip_trailer(stdout, SPECULATIVE_TRAILER, where)
    head = SPECULATIVE_HEAD + prompt
    if not body.startswith(head):
        raise PeerOutputError(f"llama.cpp {where} stdout does not start with the echoed prompt "
                              "(the generated text could not be separated from it)")
    n_in, enc_s = _find(stderr, "encoded", rf"encoded\s+(\d+) tokens in\s+{_NUM} seconds", where)
    n_out, dec_s = _find(stderr, "decoded", rf"decoded\s+(\d+) tokens in\s+{_NUM} seconds", where)
    gamma, = _find(stderr, "n_draft", r"n_draft\s+=\s*(\d+)", where)
    drafted, = _find(stderr, "n_drafted", r"n_drafted\s+=\s*(\d+)", where)
    accepted, = _find(stderr, "n_accept", r"n_accept\s+=\s*(\d+)", where)
    return SpeculativeOutput(text=body[len(head):], n_prompt=int(n_in), encode_s=float(enc_s),
                             n_predict=int(n_out), decode_s=float(dec_s), gamma=int(gamma),
                             n_drafted=int(drafted), n_accepted=int(accepted), perf=parse_perf(stderr, where))


@dataclass(frozen=True)
class BenchRow:
    """One ``llama-bench`` test: ``n_prompt`` tokens in one batch (pp) or ``n_gen`` one-token steps (tg)."""

    model_filename: str
    n_prompt: int
    n_gen: int
    n_threads: int
    avg_ts: float
    stddev_ts: float
    build_commit: str
    build_number: int


BENCH_FIELDS = ("model_filename", "n_prompt", "n_gen", "n_threads", "avg_ts", "stddev_ts",
                "build_commit", "build_number")


def parse_bench_json(stdout: str) -> list[BenchRow]:
    """Parse ``llama-bench -o json`` (a JSON array of test objects)."""
    try:
        rows = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise PeerOutputError(f"llama-bench -o json printed no JSON ({exc})") from None
    if not isinstance(rows, list) or not rows:
        raise PeerOutputError("llama-bench -o json printed no test rows")
    out = []
    for row in rows:
        missing = [f for f in BENCH_FIELDS if f not in row]
        if missing:
            raise PeerOutputError(f"llama-bench JSON row has no {missing[0]!r} field; its output format "
                                  "differs from the pinned version's")
        out.append(BenchRow(**{f: row[f] for f in BENCH_FIELDS}))
    return out
