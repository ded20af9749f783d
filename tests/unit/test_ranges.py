"""``lab.ranges``: one declaration of a numeric value's range, read by the flag check, the config check and the schema.

Fault classes guarded: a range stated in several places that drifts apart (the flag takes what the config
refuses, the file schema takes what the flag refuses); an open end taken as closed; a NaN, an infinity or a
``bool`` taken for a number; a config below the math floor (:class:`lab.sampling.SamplingConfig`, which may
import nothing from the lab) whose own check no longer matches the range the flags read. Each agreement check
has a planted control: a range stated wrongly must be found.
"""

from __future__ import annotations

import math
import os

import pytest

from lab import ranges
from lab.ranges import Range, check_value
from lab.schemas import Validator

pytestmark = pytest.mark.unit

# Values each agreement check tries: the ends of the lab's ranges, just past them, and what is no number.
PROBES = (-1, 0, 0.0, 1e-9, 0.5, 1, 1.0, 2, 4.0, 63, 64, 65, 100, 100.0, 100.5, 2**20, 2**20 + 1, 2**62 - 1,
          2**62, 2**64 - 1, 2**64, 10**400, True, False, None, "1", math.nan, math.inf, -math.inf, 1e309)


def disagreements(rng: Range, accepts, values=PROBES) -> list:
    """The values where ``accepts(value)`` (a config's or a schema's answer) differs from ``rng.problem``."""
    return [v for v in values if accepts(v) != (rng.problem(v) is None)]


def _takes(ctor, **kwargs) -> bool:
    try:
        ctor(**kwargs)
    except ValueError:
        return False
    return True


def _schema_takes(schema: dict, value) -> bool:
    return not list(Validator(schema).iter_errors(value))


# ---- the config reader: Range.problem ----

@pytest.mark.parametrize("value,problem", [
    (1, None), (64, None), (65, None), (10**400, None),  # a config is not held to the flag's limit
    (0, "must be an integer >= 1"), (-1, "must be an integer >= 1"), (True, "must be an integer >= 1"),
    (4.0, "must be an integer >= 1"), ("4", "must be an integer >= 1"), (None, "must be an integer >= 1"),
])
def test_range_problem_integer_with_a_limit_refuses_below_lo_and_non_integers_only(value, problem):
    assert ranges.GAMMA.problem(value) == problem


@pytest.mark.parametrize("value", [1e-300, 0.5, 1, 1.0])
def test_range_problem_open_lo_closed_hi_accepts_inside(value):
    assert ranges.TOP_P.problem(value) is None


@pytest.mark.parametrize("value", [0, 0.0, -0.0, 1.0000001, 2, math.nan, math.inf, -math.inf, True, "0.5", None])
def test_range_problem_open_lo_closed_hi_refuses_the_open_end_past_hi_and_non_numbers(value):
    assert ranges.TOP_P.problem(value) == "must be in (0, 1]"


def test_range_problem_open_hi_refuses_hi_itself():
    rng = Range(0, 1, hi_open=True)
    assert rng.problem(0.999) is None and rng.problem(0) is None
    assert rng.problem(1) == "must be in [0, 1)"
    assert rng.text == "[0, 1)"


def test_range_problem_optional_takes_none_and_says_so():
    assert ranges.TOP_K.problem(None) is None
    assert ranges.TOP_K.problem(0) == "must be an integer >= 1 or None"
    assert ranges.GAMMA.problem(None) == "must be an integer >= 1"


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e309, 10**400])
def test_range_problem_non_finite_number_refused(value):
    """Fault class: a NaN passing ``not x < 0`` (every comparison with NaN is False), an infinite temperature, an
    int no float holds (``float(10**400)`` raises OverflowError where the lab computes with it)."""
    assert ranges.TEMPERATURE.problem(value) == "must be a finite number >= 0"
    assert ranges.SAMPLED_TEMPERATURE.problem(value) == "must be a finite number > 0"


def test_range_problem_integer_with_both_ends_names_both():
    assert ranges.BENCH_SEED.problem(2**62) == "must be an integer in [0, 4611686018427387903]"
    assert ranges.BENCH_SEED.problem(2**62 - 1) is None


def test_check_value_names_the_field_echoes_the_value_and_keeps_a_configs_words():
    with pytest.raises(ValueError, match=r"^gamma=0 must be an integer >= 1$"):
        check_value("gamma", 0, ranges.GAMMA)
    with pytest.raises(ValueError, match=r"^limit=0 must be a positive integer$"):
        check_value("limit", 0, ranges.LIMIT, "must be a positive integer")
    check_value("limit", None, ranges.LIMIT, "must be a positive integer")


# ---- the flag reader: Range.check and Range.text ----

def test_range_check_flag_error_names_flag_range_and_why():
    with pytest.raises(ValueError, match=r"^--gamma=65 must be in \[1, 64\]: beyond 64 drafted tokens"):
        ranges.GAMMA.check("--gamma", 65)
    ranges.GAMMA.check("--gamma", 64)
    ranges.GAMMA.check("--gamma", 1)
    with pytest.raises(ValueError, match=r"^--top-p=0\.0 must be in \(0, 1\] \(1 = off\)$"):
        ranges.TOP_P.check("--top-p", 0.0)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_range_check_flag_non_finite_refused(value):
    with pytest.raises(ValueError, match=r"^--temperature="):
        ranges.TEMPERATURE.check("--temperature", value)


def test_range_check_cpus_limit_is_this_machines_count():
    cpus = os.cpu_count() or 1
    ranges.THREADS.check("--threads", cpus)
    with pytest.raises(ValueError, match=rf"^--threads={cpus + 1} must be in \[1, this machine's CPU count\] "
                                         rf"\({cpus} here\): more threads"):
        ranges.THREADS.check("--threads", cpus + 1)


def test_range_text_formats_ends_as_typed():
    assert ranges.TEMPERATURE.text == "[0, 100]"
    assert ranges.SAMPLED_TEMPERATURE.text == "(0, 100]"
    assert ranges.RAY_TIMEOUT.text == "(0, 3600]"
    assert ranges.SEED.text == "[0, 18446744073709551615]"


def test_range_with_hi_and_limit_is_refused():
    with pytest.raises(AssertionError):
        Range(0, 1, limit=2)
    with pytest.raises(AssertionError):
        Range(1, 1)


# ---- the schema reader: Range.schema ----

def test_range_schema_input_and_file_forms():
    assert ranges.GAMMA.schema() == {"type": "integer", "minimum": 1, "maximum": 64}
    assert ranges.GAMMA.schema(most=2**31 - 1) == {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}
    assert ranges.LIMIT.schema(most=10) == {"type": ["integer", "null"], "minimum": 1, "maximum": 10}
    assert ranges.TOP_P.schema() == {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "finite": True}
    assert ranges.SAMPLED_TEMPERATURE.schema(most=1e6) == {"type": "number", "exclusiveMinimum": 0, "finite": 1e6}
    assert Range(0, 1, hi_open=True).schema() == {"type": "number", "minimum": 0, "exclusiveMaximum": 1,
                                                  "finite": True}


@pytest.mark.parametrize("name", ["GAMMA", "SEED", "BENCH_SEED", "TOKENS", "TOP_K", "TOP_P", "TEMPERATURE",
                                  "SAMPLED_TEMPERATURE", "LIMIT", "RAY_TIMEOUT", "RESAMPLES", "PILOT_LIMIT"])
def test_range_schema_takes_what_the_flag_takes(name):
    """A file field read back (the tuning file's gamma) holds what the flag takes: the schema and the flag's
    check agree on every probe that is a number."""
    rng = getattr(ranges, name)

    def flag_takes(v):
        try:
            rng.check("--x", v)
        except ValueError:
            return False
        return True

    numbers = [v for v in PROBES if isinstance(v, (int, float)) and not isinstance(v, bool)
               and not (rng.integer and isinstance(v, float))]
    assert [v for v in numbers if _schema_takes(rng.schema(), v) != flag_takes(v)] == []


def test_range_schema_planted_wrong_schema_is_caught():
    """Negative control: a schema stated by hand with a closed end where the range is open disagrees."""
    wrong = {"type": "number", "minimum": 0, "maximum": 1, "finite": True}
    assert 0 in disagreements(ranges.TOP_P, lambda v: _schema_takes(wrong, v) and not isinstance(v, bool))


# ---- below the math floor: SamplingConfig and theory state their own domains; they must match ----

@pytest.mark.parametrize("field,rng", [("temperature", ranges.TEMPERATURE), ("top_k", ranges.TOP_K),
                                       ("top_p", ranges.TOP_P)])
def test_sampling_config_takes_what_its_range_takes(field, rng):
    """:class:`lab.sampling.SamplingConfig` may import nothing from the lab, so it states its checks itself;
    they must refuse exactly what the range the flags read refuses."""
    from lab.sampling import SamplingConfig

    assert disagreements(rng, lambda v: _takes(SamplingConfig, **{field: v})) == []


def test_theory_gamma_domain_is_gammas_range():
    from lab.speculative.theory import expected_tokens_per_round

    # theory computes in floats: an int no float holds (10**400) is refused there, a config may hold it
    probes = [v for v in PROBES if not (isinstance(v, int) and v > 1e308)]
    assert disagreements(ranges.GAMMA, lambda v: _takes(expected_tokens_per_round, alpha=0.5, gamma=v), probes) == []


def test_disagreements_planted_wrong_range_is_caught():
    """Negative control: a range stated wrongly (top-p closed at 0, temperature open at 0) is found."""
    from lab.sampling import SamplingConfig

    probes = (-1, 0, 0.5, 1, 2)
    assert 0 in disagreements(Range(0, 1), lambda v: _takes(SamplingConfig, top_p=v), probes)
    assert 0 in disagreements(Range(0, lo_open=True), lambda v: _takes(SamplingConfig, temperature=v), probes)


# ---- every config reads its field's range ----

@pytest.mark.parametrize("ctor,field,rng", [
    ("lab.tracker.results.DecodeSettings", "max_new_tokens", ranges.TOKENS),
    ("lab.tracker.results.DecodeSettings", "temperature", ranges.TEMPERATURE),
    ("lab.tracker.results.DecodeSettings", "top_p", ranges.TOP_P),
    ("lab.tracker.results.DecodeSettings", "top_k", ranges.TOP_K),
    ("lab.tracker.results.DecodeSettings", "top_alternatives", ranges.TOP_ALTERNATIVES),
    ("lab.speculative.setups.DraftSetup", "gamma", ranges.GAMMA),
    ("lab.study.config.StudyConfig", "gamma", ranges.GAMMA),
    ("lab.study.config.StudyConfig", "max_new_tokens", ranges.TOKENS),
    ("lab.study.config.StudyConfig", "n_resamples", ranges.RESAMPLES),
    ("lab.study.config.StudyConfig", "seed", ranges.SEED),
    ("lab.study.config.StudyConfig", "limit", ranges.LIMIT),
    ("lab.study.config.StudyConfig", "temperature", ranges.SAMPLED_TEMPERATURE),
    ("lab.runs.cluster.ClusterConfig", "n_actors", ranges.RAY_ACTORS),
    ("lab.runs.cluster.ClusterConfig", "threads", ranges.THREADS),
    ("lab.runs.cluster.ClusterConfig", "connect_timeout_s", ranges.RAY_TIMEOUT),
    ("lab.stream.experiment.StreamConfig", "temperature", ranges.SAMPLED_TEMPERATURE),
    ("lab.stream.experiment.StreamConfig", "recompute_batch", ranges.RECOMPUTE_BATCH),
    ("lab.bench.run.BenchConfig", "repeats", ranges.REPEATS),
    ("lab.bench.run.BenchConfig", "seed", ranges.BENCH_SEED),
    ("lab.runs.cluster.ClusterConfig", "max_restarts", ranges.RETRIES),
    ("lab.runs.cluster.ClusterConfig", "max_task_retries", ranges.RETRIES),
], ids=lambda v: v if isinstance(v, str) else "")
def test_config_field_takes_what_its_range_takes(ctor, field, rng):
    import importlib

    module, _, name = ctor.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    # the stream's token counts relate to each other (--tokens holds two chunks past the budgets): probe small values
    probes = [v for v in PROBES if not (isinstance(v, int) and not isinstance(v, bool) and v > 10**6)] \
        if name == "StreamConfig" else PROBES
    assert disagreements(rng, lambda v: _takes(cls, **{field: v}), probes) == []


def test_problems_range_limit_is_the_held_back_splits_size():
    """Fault class: the --problems range (declared here, below the bench) drifting from the split it counts."""
    from lab.bench.prompt_split import HELD_BACK

    assert ranges.PROBLEMS.input_hi == ranges.HELD_BACK_PROBLEMS == len(HELD_BACK)


def test_hand_checked_ends_read_their_ranges():
    """The library checks that state their own message read the end from the range the flags read."""
    from lab.models.qlinear import set_dense_rows
    from lab.sinks.calibration import long_prompts
    from lab.stream.policies import parse_policy

    with pytest.raises(ValueError, match=r"^long lengths=\[63\] must each be >= 64 tokens$"):
        long_prompts(None, lengths=(63,))
    with pytest.raises(ValueError, match=r"^policy 'window:0': the window W must be >= 1$"):
        parse_policy("window:0")
    with pytest.raises(ValueError, match=r"^policy 'sinks:0\+4': K and W must both be >= 1$"):
        parse_policy("sinks:0+4")
    with pytest.raises(ValueError, match=r"^dense_rows=0 must be >= 1 \(or None\)$"):
        set_dense_rows(None, 0)


def test_configs_hold_the_seed_to_torchs_end_and_check_the_stream_seed_and_the_warmup():
    """Fault class: a seed past 2**64 - 1 taken by a config and refused by torch mid-run; the stream's seed and
    the bench's warm-up tokens not checked at all (None, -1, a bool, a string ran)."""
    from lab.bench.run import BenchConfig
    from lab.stream.experiment import StreamConfig
    from lab.tracker.results import DecodeSettings

    DecodeSettings(seed=2**64 - 1)
    with pytest.raises(ValueError, match=r"seed=18446744073709551616 must be an integer in \[0, 18446744073709551615\]"):
        DecodeSettings(seed=2**64)
    for bad in (None, -1, True, "5", math.nan):
        with pytest.raises(ValueError, match="--seed="):
            StreamConfig(seed=bad)
        with pytest.raises(ValueError, match="warmup_tokens="):
            BenchConfig(warmup_tokens=bad)
    BenchConfig(warmup_tokens=0)


@pytest.mark.parametrize("text,integer,value", [
    ("64", True, 64), (" 7 ", True, 7), ("-3", True, -3), ("0" * 5000 + "5", True, 5), ("0.5", False, 0.5),
    ("1e-3", False, 0.001), ("1e-320", False, 1e-320), ("inf", False, math.inf), ("0e-999", False, 0.0),
    ("-0", False, -0.0)])
def test_read_number_reads_the_number_typed(text, integer, value):
    """Fault class: a value silently changed, or a valid integer called invalid (a 5,000-character 5 with
    leading zeros was past Python's digit limit); a subnormal and a typed inf stay what they were."""
    assert ranges.read_number(text, integer) == value


@pytest.mark.parametrize("text,integer,error,reason", [
    ("9" * 5000, True, ranges.TooLarge, "is out of range"),
    ("-" + "9" * 5000, True, ranges.TooLarge, "is out of range"),
    ("9" * 5000, False, ranges.TooLarge, "is too large for a float"),
    ("1e400", False, ranges.TooLarge, "is too large for a float"),
    ("1e-400", False, ranges.RoundsToZero, "rounds to 0 in a float"),
    ("-1e-400", False, ranges.RoundsToZero, "rounds to 0 in a float"),
    ("5_0", True, ranges.Underscored, "underscore"),
    ("0_5", False, ranges.Underscored, "underscore"),
])
def test_read_number_unheld_text_raises_its_reason(text, integer, error, reason):
    """Fault class: an error that names a wrong reason ("invalid int value" for a valid integer), a value
    silently changed (1e400 -> inf, 1e-400 -> 0.0, 5_0 -> 50)."""
    with pytest.raises(error, match=reason):
        ranges.read_number(text, integer)


@pytest.mark.parametrize("text,integer", [("abc", True), ("1.5", True), ("1e3", True), ("", True), ("x", False)])
def test_read_number_not_a_number_is_a_plain_value_error(text, integer):
    """What is no number is Python's own refusal (the parser keeps argparse's "invalid int value")."""
    with pytest.raises(ValueError) as info:
        ranges.read_number(text, integer)
    assert not isinstance(info.value, ranges.NumberTextError)


def test_typed_refusal_echoes_the_text_cut_and_states_the_range():
    """Fault class: an error line that dumps the whole value, or that states no range."""
    line = ranges.typed_refusal("--top-k", "9" * 5000, ranges.TooLarge("is out of range"), ranges.TOP_K)
    assert len(line) < 300 and "(5,000 characters) is out of range" in line and ranges.TOP_K.text in line
    zero = ranges.typed_refusal("--top-p", "1e-400", ranges.RoundsToZero("rounds to 0 in a float"), ranges.TOP_P)
    assert zero == "--top-p='1e-400' rounds to 0 in a float: must be in (0, 1] (1 = off)"


def test_range_check_long_integer_is_echoed_cut():
    """Fault class: an error line that dumps the whole value (a 4,000-digit int Python reads, refused by the
    range with every digit echoed)."""
    with pytest.raises(ValueError) as info:
        ranges.TOP_K.check("--top-k", int("9" * 4000))
    assert len(str(info.value)) < 300 and "(4,000 characters) must be in [1, 1048576]" in str(info.value)


def test_check_value_integer_of_thousands_of_digits_is_echoed_cut():
    """A one-line error of thousands of characters: a config's range check echoed a 5,000-digit value whole
    (from a file or a hand-edited report), where a flag's echo is cut."""
    from lab.ranges import GAMMA, SEED, check_value

    with pytest.raises(ValueError) as caught:
        check_value("seed", 10**4000, SEED)
    assert len(str(caught.value)) < 200 and "4,001 characters" in str(caught.value)
    with pytest.raises(ValueError, match="gamma=0 must be an integer >= 1"):
        check_value("gamma", 0, GAMMA)
