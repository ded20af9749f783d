"""Each numeric value's range, declared once: the flags, the configs and the file schemas read it here.

A :class:`Range` states the values a quantity takes (its ends, each closed or open, whether it is an
integer, whether ``None`` stands for "not given") and, where the value itself has no upper end, the
``limit`` an input is held to: a flag or a tuning file takes gamma up to 64, a config built in code
may go past it. Three readers:

* :meth:`Range.problem`, for a config's ``__post_init__`` (:func:`check_value`): what is wrong with a
  value (its type, a NaN or an infinity, an end), or None;
* :meth:`Range.check` and :attr:`Range.text`, for a flag: ``--gamma=65 must be in [1, 64]: ...``
  (:func:`lab.commands.common.check_bounds`, and the flag's help);
* :meth:`Range.schema`, a field's JSON Schema in a file the lab reads back (:mod:`lab.schemas`).

A flag's text becomes its number through :func:`read_number`, which reads what the user typed as that number
or says why it cannot (too many digits, too large for a float, a float that rounds to 0, an underscore), and
:func:`typed_refusal` turns that into the flag's one line, echoing the text cut (:func:`lab.safe_text.clipped`).

The lab's ranges follow the class, each with the reason for its ends. A ground-floor module: the
standard library and :mod:`lab.safe_text` (itself the standard library only), so that every part can read it (the math modules below it, which import nothing
from the lab, state their own domains; ``tests/unit/test_ranges.py`` checks that
:class:`lab.sampling.SamplingConfig` takes what these ranges take).
"""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

from lab.safe_text import clipped

# Characters of a flag's value its error echoes (lab.safe_text.clipped): the range and its reason follow on the
# same line, which stays short (a 5,000-digit value once made it 5,060 characters).
ECHO_MOST = 60


@dataclass(frozen=True)
class Range:
    """The values a numeric field, flag or file field takes.

    Attributes:
        lo: The lower end.
        hi: The value's own upper end, or None (none: see ``limit``). Checked by every reader.
        lo_open, hi_open: Whether the end itself is refused (a temperature that must be > 0).
        integer: Whether the value is an ``int`` (a ``bool`` is not); else any finite ``int`` or ``float``.
        optional: Whether ``None`` ("not given": top-k off, every prompt) is a value.
        limit: Where ``hi`` is None, the most a flag or a file takes (a config built in code is not held
            to it); None: no limit.
        cpus: The limit is this machine's CPU count (:func:`os.cpu_count`), read when checked.
        why: Why the flag's ends are there, appended to its error (starts with ``" ("``, ``": "`` or
            ``" "``).
        zero: What 0 stands for where the range takes it (``"greedy"``), said to a typed value that rounds to 0.

    Examples:
        >>> top_p = Range(0, 1, lo_open=True)
        >>> top_p.text, top_p.problem(0.0), top_p.problem(1)
        ('(0, 1]', 'must be in (0, 1]', None)
        >>> Range(1, integer=True, limit=64).text
        '[1, 64]'
    """

    lo: float
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False
    optional: bool = False
    limit: float | None = None
    cpus: bool = False
    why: str = ""
    zero: str = ""

    def __post_init__(self) -> None:
        assert self.hi is None or (self.limit is None and not self.cpus), "a limit is for a range with no upper end"
        assert self.hi is None or self.lo < self.hi, f"empty range: {self.lo}, {self.hi}"

    @property
    def input_hi(self) -> float | None:
        """The upper end a flag or a file is held to: ``hi``, else the ``limit`` (the CPU count with ``cpus``)."""
        if self.hi is not None:
            return self.hi
        return (os.cpu_count() or 1) if self.cpus else self.limit

    @property
    def text(self) -> str:
        """The flag's range as its help and error state it: ``[1, 64]``, ``(0, 1]``, ``[1, this machine's CPU count]``.

        Examples:
            >>> Range(1, integer=True, cpus=True).text
            "[1, this machine's CPU count]"
        """
        hi = "this machine's CPU count" if self.cpus else _number(self.input_hi)
        return f"{'(' if self.lo_open else '['}{_number(self.lo)}, {hi}{')' if self.hi_open else ']'}"

    def check(self, flag: str, value: float) -> None:
        """The flag reader: refuse a parsed flag value outside ``[lo, input_hi]``.

        Args:
            flag: The flag as typed (``"--top-p"``), named in the error.
            value: The value argparse parsed (its type is the flag's).

        Raises:
            ValueError: ``value`` outside the range (NaN and the infinities included), as
                ``--top-p=0.0 must be in (0, 1] (1 = off)``; with ``cpus``, the count here is named.

        Examples:
            >>> Range(0, 1, lo_open=True, why=" (1 = off)").check("--top-p", 0.0)
            Traceback (most recent call last):
            ...
            ValueError: --top-p=0.0 must be in (0, 1] (1 = off)
        """
        hi = self.input_hi
        if not (self._above_lo(value) and (hi is None or self._below_hi(value, hi))):  # NaN fails both
            raise ValueError(f"{flag}={clipped(value, ECHO_MOST)} {self.must}")

    @property
    def must(self) -> str:
        """The range as a flag's error states it: ``must be in [1, 64]: beyond ...``, with the CPU count here."""
        where = f" ({self.input_hi} here)" if self.cpus else ""
        return f"must be in {self.text}{where}{self.why}"

    def problem(self, value: Any) -> str | None:
        """The config reader: what is wrong with ``value`` for a field of this range, or None.

        The field's own ends only (``lo``, ``hi``); the ``limit`` is an input's, not the config's.

        A ``bool`` is no number; a non-integer range takes a finite ``float`` or an ``int`` a float holds.

        Returns:
            None when ``value`` is in the range; else the problem as the end of a one-line error:
            ``"must be an integer >= 1"`` (``" or None"`` when optional), ``"must be a finite number >= 0"``,
            ``"must be in (0, 1]"`` (both ends).

        Examples:
            >>> gamma = Range(1, integer=True, limit=64)
            >>> gamma.problem(65), gamma.problem(0), gamma.problem(True)
            (None, 'must be an integer >= 1', 'must be an integer >= 1')
            >>> Range(0).problem(float("nan"))
            'must be a finite number >= 0'
        """
        if value is None and self.optional:
            return None
        if self.integer:
            number = isinstance(value, int)
        else:  # a finite float, or an int a float holds (lab.schemas' "finite": float(x) must not overflow)
            number = isinstance(value, (int, float)) and abs(value) <= sys.float_info.max  # NaN: False
        if (not isinstance(value, bool) and number and self._above_lo(value)
                and (self.hi is None or self._below_hi(value, self.hi))):
            return None
        kind = "an integer" if self.integer else "a finite number"
        if self.hi is not None:
            said = f"must be {kind + ' ' if self.integer else ''}in {self.text}"
        else:
            said = f"must be {kind} {'>' if self.lo_open else '>='} {_number(self.lo)}"
        return said + (" or None" if self.optional else "")

    def schema(self, most: float | None = None) -> dict[str, Any]:
        """The schema reader: the field's JSON Schema in a file the lab reads back (:mod:`lab.schemas`).

        Args:
            most: None: the range an input is held to (``[lo, input_hi]``, a tuning file's gamma as its
                flag takes it); else the upper end of a field with none of its own in a file the lab wrote
                from a config (a count's ``maximum``; a number's magnitude, the lab's ``"finite"``).

        Returns:
            ``{"type": ..., "minimum" | "exclusiveMinimum": lo, "maximum" | "exclusiveMaximum": hi}``, with
            ``"finite"`` for a non-integer (``true``, or ``most``) and ``"null"`` in the type when optional.

        Examples:
            >>> Range(1, integer=True, limit=64).schema()
            {'type': 'integer', 'minimum': 1, 'maximum': 64}
            >>> Range(0, lo_open=True, limit=100.0).schema(most=1e6)
            {'type': 'number', 'exclusiveMinimum': 0, 'finite': 1000000.0}
        """
        kind = "integer" if self.integer else "number"
        out: dict[str, Any] = {"type": [kind, "null"] if self.optional else kind,
                               "exclusiveMinimum" if self.lo_open else "minimum": self.lo}
        hi = self.input_hi if most is None or self.hi is not None else most
        if hi is not None and (self.integer or most is None or self.hi is not None):
            out["exclusiveMaximum" if self.hi_open else "maximum"] = hi
        if not self.integer:
            out["finite"] = True if most is None or self.hi is not None else most
        return out

    def _above_lo(self, value: float) -> bool:
        return value > self.lo if self.lo_open else value >= self.lo

    def _below_hi(self, value: float, hi: float) -> bool:
        return value < hi if self.hi_open else value <= hi


def _number(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def check_value(name: str, value: Any, rng: Range, says: str | None = None) -> None:
    """Raise the config's error for a field outside its range.

    Args:
        name: The field (or the flag, where a config names its flags), as the error names it.
        value: The field's value.
        rng: Its :class:`Range`.
        says: The config's own words for the problem, where they are not :meth:`Range.problem`'s.

    Raises:
        ValueError: ``rng.problem(value)`` is not None: ``f"{name}={value!r} {says or problem}"``, the value's
            echo cut (:func:`lab.safe_text.clipped`: a 5,000-digit seed read from a file is not echoed whole).

    Examples:
        >>> check_value("gamma", 0, GAMMA)
        Traceback (most recent call last):
        ...
        ValueError: gamma=0 must be an integer >= 1
    """
    problem = rng.problem(value)
    if problem is not None:
        raise ValueError(f"{name}={clipped(value, ECHO_MOST)} {says or problem}")


class NumberTextError(ValueError):
    """A number typed as text that the lab does not read as Python's ``int`` or ``float`` would
    (:func:`read_number`); ``str()`` is the reason, worded to follow the echoed text."""


class TooLarge(NumberTextError):
    """An integer of more digits than Python reads, or a float literal past the largest float: out of every range."""


class RoundsToZero(NumberTextError):
    """A float literal with a non-zero digit that a float rounds to 0 (``1e-400``)."""


class Underscored(NumberTextError):
    """A number written with an underscore (``5_0``, which Python reads as 50)."""


# An integer as int() reads it, in digits alone: its sign and its digits after any leading zeros.
_INTEGER = re.compile(r"\s*([+-]?)0*(\d+)\s*")


def read_number(text: str, integer: bool) -> int | float:
    """A number typed on a command line, read as the ``int`` (``integer``) or ``float`` it says, or refused.

    Python's readers take more than the lab does, and say less: ``int("5_0")`` is 50, ``float("1e400")``
    is inf, ``float("1e-400")`` is 0.0, and ``int`` calls a well-formed integer of more than
    :func:`sys.get_int_max_str_digits` digits invalid (its guard against quadratic-time conversion). Leading
    zeros do not count as digits. Surrounding whitespace, a sign and the forms ``float`` reads (``inf``,
    ``nan``, ``1e-3``) are read as Python reads them; a subnormal float (``1e-320``) is a value.

    Args:
        text: The text as typed.
        integer: Read an ``int``; else a ``float``.

    Returns:
        The number.

    Raises:
        Underscored: ``text`` holds an underscore.
        TooLarge: an integer past Python's digit limit ("is out of range"), or a float literal that overflows
            ("is too large for a float").
        RoundsToZero: a float literal with a non-zero digit that rounds to 0 (either sign).
        ValueError: not a number at all (``int``'s or ``float``'s own refusal).

    Examples:
        >>> read_number(" 007", integer=True), read_number("1e-3", integer=False)
        (7, 0.001)
        >>> read_number("1e400", integer=False)
        Traceback (most recent call last):
        ...
        lab.ranges.TooLarge: is too large for a float
    """
    if "_" in text:
        raise Underscored("is written with an underscore: type the digits alone")
    if integer:
        try:
            return int(text)
        except ValueError:
            m = _INTEGER.fullmatch(text)
            if m is None:
                raise
        try:  # well-formed: refused for its digits, which may be leading zeros
            return int(m[1] + m[2])
        except ValueError:
            raise TooLarge("is out of range") from None
    x = float(text)
    mantissa = text.lower().partition("e")[0]
    if math.isinf(x) and any(c.isdecimal() for c in mantissa):  # a number, not "inf" typed
        raise TooLarge("is too large for a float")
    if x == 0 and any(c.isdecimal() and int(c) != 0 for c in mantissa):
        raise RoundsToZero("rounds to 0 in a float")
    return x


def typed_refusal(flag: str, text: str, exc: NumberTextError, rng: Range | None) -> str:
    """The one-line refusal of ``flag``'s ``text`` that :func:`read_number` refused with ``exc``.

    The text is echoed cut (:func:`lab.safe_text.clipped`); then the reason, and the range (``rng``: None for a
    flag that checks its own): ``--top-k='99...' (5,000 characters) is out of range: must be in [1, 1048576] ...``;
    a value that rounds to 0 where 0 has a meaning is told to type 0 for it (``use 0 for greedy``).

    Examples:
        >>> typed_refusal("--temperature", "1e-400", RoundsToZero("rounds to 0 in a float"), TEMPERATURE)
        "--temperature='1e-400' rounds to 0 in a float; use 0 for greedy"
    """
    said = f"{flag}={clipped(text, ECHO_MOST)} {exc}"
    if isinstance(exc, RoundsToZero) and rng is not None and rng.zero:
        return f"{said}; use 0 for {rng.zero}"
    if isinstance(exc, Underscored) or rng is None:
        return said
    return f"{said}: {rng.must}"


# ---- the lab's ranges ----

# Gamma, draft tokens per round. A round drafts at least one token (no draft at all is the target alone).
# With acceptance rate alpha a round yields (1 - alpha**(gamma+1)) / (1 - alpha) tokens in expectation
# (Leviathan et al. 2023, eq. 1): at alpha = 0.9, the best measured here (the Qwen pair), gamma = 64 already
# gives 99.9 % of the gamma -> infinity limit, while every further drafted token costs a draft forward, and the
# per-round table and histogram have gamma + 1 columns. A config built in code may go past 64.
GAMMA = Range(1, integer=True, limit=64, why=": beyond 64 drafted tokens a round gains nothing measurable")

# torch.Generator.manual_seed takes [0, 2**64 - 1]; beyond: "Overflow when unpacking long long".
SEED = Range(0, 2**64 - 1, integer=True, why=" (2**64 - 1, what torch's generator takes)")  # torch's end: configs too
# lab bench derives one seed per (repeat, prompt) from --seed (lab.bench.run.run_seed), which must stay below 2**62.
BENCH_SEED = Range(0, 2**62 - 1, integer=True, why=" (2**62 - 1: each repeat and prompt derives a seed from it)")

# Any length in tokens (new tokens, a text's or a prompt's tokens): 131,072 (128 Ki) is the longest context of
# the open models this lab loads or is likely to; the model's own context is checked as well where it is known.
MAX_TOKENS = 131_072
TOKENS = Range(1, integer=True, limit=MAX_TOKENS, why=" (128 Ki tokens, the longest context of the models here)")
# The bench's schedules time at least one token past the prefill's.
BENCH_NEW_TOKENS = Range(2, integer=True, limit=MAX_TOKENS,
                         why=" (the first token is the prefill's; 128 Ki, the longest context here)")
# lab validate-context's lookback ratio needs a query after the first new token.
LOOKBACK_NEW_TOKENS = Range(2, integer=True, limit=MAX_TOKENS,
                            why=" (the lookback ratio needs a query after the first; 128 Ki, the longest context here)")
DETECT_TOKENS = Range(2, integer=True, limit=MAX_TOKENS,
                      why=" (the detector needs two positions; 128 Ki, the longest context here)")
# Untimed warm-up tokens per method before lab bench times it (0: none).
WARMUP_TOKENS = Range(0, integer=True, limit=MAX_TOKENS, why=" (0: no warm-up; 128 Ki, the longest context here)")
EAGER_LENGTH = Range(0, integer=True, limit=MAX_TOKENS, why=" (0 skips it; 128 Ki, the longest context here)")
DENSE_ROWS = Range(1, integer=True, limit=MAX_TOKENS,
                   why=" (passes of at least this many positions take the dense path)")
# lab bench-sinks' prompt lengths: the capture's statistics need a few positions past the sink.
SINK_LENGTH = Range(16, integer=True, limit=MAX_TOKENS, why=" (16 tokens at least; 128 Ki, the longest context here)")
# lab calibrate-sinks' long prompts: below 64 tokens a prompt is not long (lab.sinks.calibration.long_prompts).
LONG_LENGTH = Range(64, integer=True, limit=MAX_TOKENS,
                    why=" (a long prompt has 64 tokens at least; 128 Ki, the longest context here)")

# Logits are divided by the temperature (0 = greedy): at 100 a softmax over logits spread by ~50 nats (wider
# than any model's here) is within 0.5 nats of uniform, so a higher temperature samples noise, not the model.
MAX_TEMPERATURE = 100.0
TEMPERATURE = Range(0, limit=MAX_TEMPERATURE,
                    why=f" (0 = greedy; above {MAX_TEMPERATURE:g} the draw is close to uniform)", zero="greedy")
# A run that samples (the study, the stream's sampled run): > 0.
SAMPLED_TEMPERATURE = Range(0, lo_open=True, limit=MAX_TEMPERATURE,
                            why=" (the run samples; above 100 the draw is close to uniform)")
TOP_P = Range(0, 1, lo_open=True, why=" (1 = off)")
# --adaptive's thresholds X (lab.speculative.drafts.AdaptiveDraftLength): entropy:X stops drafting once the draft's
# normalized entropy H / log2 V exceeds X (1 never stops); pmin:X once its top probability falls below X (1 would
# stop every round at its first token).
ADAPTIVE_ENTROPY = Range(0, 1, lo_open=True, why=" (normalized entropy)")
ADAPTIVE_PMIN = Range(0, 1, lo_open=True, hi_open=True)
# top-k above the vocabulary keeps every token (lab.sampling.filter_logits clamps k): 2**20 is above any
# vocabulary here (Qwen2.5: 151,936; Gemma 3: 262,144). None: off.
TOP_K = Range(1, integer=True, optional=True, limit=2**20, why=" (2**20, above any vocabulary here)")
# Alternatives recorded per decode step: a table for reading, saved per step in report.json
# (1,000 x 64 steps is already 64,000 records); the full distribution is not what it is for.
TOP_ALTERNATIVES = Range(1, integer=True, limit=1000, why=" (alternatives shown and saved per step)")

# Bootstrap resamples. The Monte Carlo error of a percentile CI endpoint shrinks as 1/sqrt(B): at B = 100,000
# (50x the default 1,999) it is ~0.07 percentage points of coverage; the analysis time grows linearly with B.
RESAMPLES = Range(1, integer=True, limit=100_000,
                  why=" (50x the default; the CI's Monte Carlo error is negligible there)")
# Prompts of a study (None: all): the largest packaged set holds 1,440; --limit only selects from the set.
LIMIT = Range(1, integer=True, optional=True, limit=100_000, why=" (the largest prompt set here holds 1,440)")
# Timed repeats: the median of 1,000 is as steady as a median gets on a shared machine; more only add hours.
REPEATS = Range(1, integer=True, limit=1000, why=" (the median of 1,000 repeats is as steady as it gets)")
# Iterations of a timed loop (the statistics-only timing, decode steps profiled): 100,000 of a millisecond-scale
# call is minutes; more adds no precision to a median.
ITERATIONS = Range(1, integer=True, limit=100_000, why=" (more adds no precision to the median)")
# Oracle windows per forward pass of lab stream's recompute:W policy: each is a W-token window, so the batch's
# activations grow with it; past ~1,000 a forward only risks memory and runs no faster per window.
RECOMPUTE_BATCH = Range(1, integer=True, limit=1024,
                        why=" (oracle windows in one forward pass: more only risks memory)")
# lab intervene's pilot: it checks the controls before the main triples and is excluded from the analysis; the
# design caps it at 12 triples (two per category) so that it stays a check, not a second sample.
PILOT_MAX = 12
PILOT_LIMIT = Range(0, integer=True, limit=PILOT_MAX,
                    why=" (a pilot checks the controls and is excluded from the analysis: it stays small)")

# Held-back HumanEval problems of lab bench-weights' numerics (0: none): the held-back split
# (lab.bench.prompt_split.HELD_BACK, which tests/unit/test_ranges.py checks has this many) bounds it.
HELD_BACK_PROBLEMS = 5
PROBLEMS = Range(0, integer=True, limit=HELD_BACK_PROBLEMS,
                 why=f" (the held-back HumanEval split has {HELD_BACK_PROBLEMS})")

THREADS = Range(1, integer=True, cpus=True, why=": more threads than CPUs only contend for them")
WORKERS = Range(1, integer=True, cpus=True, why=": more worker processes than CPUs only contend for them")
# Ray actors (None: one per worker slot): each holds the target and the draft; a thousand is past any cluster
# this lab has been run on.
RAY_ACTORS = Range(1, integer=True, optional=True, limit=1000)
# Seconds a running Ray cluster has to answer: an hour is past any cluster that will answer.
RAY_TIMEOUT = Range(0, 3600, lo_open=True, why=" seconds (an hour, lab.runs.cluster.ClusterConfig's own limit)")
# Ray's max_restarts and max_task_retries of an actor (lab.runs.cluster.ClusterConfig): 0 = none.
RETRIES = Range(0, integer=True)

# ---- physical ranges of a report's figures ----
# What a measured figure can be at all, whatever the run: the report pages check every figure they print against
# these (lab.views.core.figure), so a damaged or hand-edited report.json shows an impossible value as such, never
# as fact. Declared here, beside the flags' ranges, because they are the same declaration (ends, open or closed,
# integer) read by the same Range.problem; the entropy's upper end, log2 V, is the report's own vocabulary size,
# so the page passes it to the check.
PROBABILITY = Range(0, 1)  # a probability, a rate, a share, alpha, an acceptance rate, a p-value
NORMALIZED_ENTROPY = Range(0, 1)  # H / log2 V
ENTROPY_BITS = Range(0)  # at most log2 V where the report gives V (Shannon 1948: uniform is the maximum)
VARENTROPY_BITS2 = Range(0)  # a variance
SECONDS = Range(0)  # a time
COUNT = Range(0, integer=True)  # tokens, rounds, prompts
NONNEGATIVE = Range(0)  # a speed (tokens/s), a mean count (tokens per round), a speed-up, a perplexity ratio
PERPLEXITY = Range(1)  # exp of a mean negative log-likelihood, which is >= 0
CORRELATION = Range(-1, 1)  # a correlation coefficient (Spearman's rho, a point-biserial r)
HEALTH = Range(0, 10)  # a context health score (lab.sinks.scores.context_health: 10 when no content token is a sink)
