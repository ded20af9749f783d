"""On the users' model family: the sink detector and the word split on Qwen2.5-Coder.

The sink tests reuse the tier's one load of the Qwen pair (``qwen_pair``) and run a
few short prompts (one prefill each, a few seconds on 2 CPU cores): the calibration
itself runs in ``lab calibrate-sinks``, not here. The word-split tests need only the
tokenizer.

Position 0 must be flagged on every prompt here: the calibration flagged it on all
calibration and held-out prompts of this model (``lab/sinks/calibrations/qwen2.5-coder.json``),
so a miss on these three is a regression, not chance. Content false positives: at
most :data:`MAX_CONTENT_FLAGGED` of the prompts' observed content tokens.
"""

from __future__ import annotations

import pytest

from lab.analysis.claims import word_positions
from lab.models.chat import build_messages
from lab.sinks.prefill import analyze_prefill

# Short prompts unlike the calibration and held-out sets (one code, one prose, one with a system prompt).
PROMPTS = [("Explain list comprehensions in Python.", None),
           ("Write a SQL query that counts orders per customer in 2024.", None),
           ("Summarize the causes of the French Revolution in three sentences.", "Answer briefly.")]
# The calibration flagged 0 content tokens at its threshold on most prompt sets of this
# model; 2 % of the ~40 observed content tokens here rounds to 1.
MAX_CONTENT_FLAGGED = 1
# Health is reported to 0.1 on the 0..10 scale: three different prompts must not all read the same
# to that precision (a constant, or a measure blind to the context, would).
HEALTH_SPREAD_MIN = 0.1


@pytest.fixture(scope="module")
def qwen_analyses(qwen_pair):
    target, tok, _, _ = qwen_pair
    return [analyze_prefill(target, tok, build_messages(p, s)) for p, s in PROMPTS]


def test_qwen_sinks_position0_flagged_with_calibrated_threshold(qwen_analyses, lab_log):
    """Regression (fault class: a baseline swamped by the injected system prompt): position 0 is flagged on Qwen."""
    rows = [{"prompt": p, "position0_score": float(a.score[0]), "threshold": a.threshold,
             "content_flagged": len(a.content_sinks),
             "n_content": int(sum(1 for i in a.content_positions if bool(a.observed[i]))),
             "context_health": a.context_health} for (p, _), a in zip(PROMPTS, qwen_analyses)]
    lab_log.record(statistic=qwen_analyses[0].statistic, prompts=rows)
    for a in qwen_analyses:
        assert a.calibrated_for == "qwen2.5-coder" and a.threshold_source == "calibrated"
        assert bool(a.is_sink[0]), f"position 0 not flagged: score {float(a.score[0]):.3f} <= {a.threshold}"
    flagged = sum(r["content_flagged"] for r in rows)
    assert flagged <= MAX_CONTENT_FLAGGED, f"{flagged} content tokens flagged: {rows}"


def test_qwen_sinks_primary_sink_holds_across_most_layers(qwen_analyses):
    """Position 0 is a sink from an early layer on, in at least half the layers, in every prompt (the primary sink)."""
    for a in qwen_analyses:
        span = next(r for r in a.layer_spans() if r["position"] == 0)
        n_layers = a.layer_scores.shape[0]
        assert span["first_layer"] < n_layers // 4 and span["n_layers"] >= n_layers // 2, span


def test_qwen_sinks_health_is_the_recorded_measure_recomputed_and_varies(qwen_analyses, lab_log):
    """Each prompt's context health is the measure the analysis recorded (the chosen one, read against Qwen's
    shipped length reference), recomputed from its own capture; below a perfect ten; and it differs across
    the prompts (a constant would pass a bound, not this)."""
    from lab.health.choice import load_chosen
    from lab.health.measures import CANDIDATES, HealthInputs

    healths = [a.context_health for a in qwen_analyses]
    lab_log.record(measure=qwen_analyses[0].health_measure, health=healths)
    for a in qwen_analyses:
        assert a.health_measure == load_chosen() and a.health_reference is not None, a.health_reference
        recomputed = CANDIDATES[a.health_measure](HealthInputs.from_prefill(a))
        assert a.context_health == pytest.approx(recomputed, abs=1e-9)
        assert 0.0 <= a.context_health < 10.0
    assert max(healths) - min(healths) > HEALTH_SPREAD_MIN, healths


def test_qwen_health_five_properties_hold_on_qwen_prefills(qwen_analyses, lab_log):
    """The chosen health measure's five properties hold on Qwen's own prefills, not only on random inputs."""
    from lab.health.choice import load_chosen
    from lab.health.measures import CANDIDATES, HealthInputs, check_properties_on

    chosen = load_chosen()
    got = check_properties_on(CANDIDATES[chosen], [HealthInputs.from_prefill(a) for a in qwen_analyses])
    lab_log.record(measure=chosen, properties=got)
    assert got["n_checked"] == len(PROMPTS), got
    assert all(got[k] for k in got if not k.startswith("n_")), got


def test_qwen_sinks_negative_control_old_detector_misses_position0(qwen_analyses):
    """Negative control: the prose-baseline detector (gm_prose at SmolLM2's calibrated z, 3.75 when written) misses
    position 0 on at least one prompt here."""
    from lab.sinks.prefill import candidate_scores
    from lab.sinks.profiles import load_calibration

    z = load_calibration("smollm2", statistic="gm_prose").threshold
    old = [float(candidate_scores(a.per_head, a.roles)["gm_prose"][0]) for a in qwen_analyses]
    assert min(old) <= z, (old, z)


# --------------------------------------------------------------------------- word split on byte-level BPE

# Hand-checked against Qwen2.5's tokenizer: each sentence, its pieces as decoded one
# token at a time, and the labels a reader gives them (i = initial, c = continuation).
WORD_CASES = [
    ("The unbelievably photosynthetic organisms thrive.",
     ["The", " unbelie", "vably", " photos", "yn", "thetic", " organisms", " thrive", "."],
     "- i c i c c - - -"),
    ("def compute_average(values_list):",
     ["def", " compute", "_average", "(values", "_list", "):"],
     "- i c i c -"),
    ("Café naïve résumé",
     ["C", "af", "é", " naï", "ve", " ré", "sum", "é"],
     "i c c i c i c c"),
    ("tokenization isn't camelCaseIdentifier e.g. 2024",
     ["token", "ization", " isn", "'t", " camel", "Case", "Identifier", " e", ".g", ".", " ", "2", "0", "2", "4"],
     "i c - - i c c - - - - - - - -"),
]
LABEL = {"i": "initial", "c": "continuation", "-": ""}


@pytest.fixture(scope="module")
def qwen_tokenizer():
    from lab.models.loading import load_tokenizer

    return load_tokenizer("qwen2.5-coder")


@pytest.mark.parametrize("text,pieces,labels", WORD_CASES)
def test_word_positions_on_qwen_byte_level_bpe_hand_checked(qwen_tokenizer, text, pieces, labels):
    ids = qwen_tokenizer(text, add_special_tokens=False)["input_ids"]
    got = [qwen_tokenizer.decode([i]) for i in ids]
    assert got == pieces, "Qwen's tokenization changed: re-check the hand labels"
    assert word_positions(got) == [LABEL[x] for x in labels.split()]


def test_word_positions_on_qwen_split_character_is_one_word(qwen_tokenizer):
    """'Ωmega': Ω is two byte tokens (each decodes to U+FFFD alone); the word is three pieces."""
    ids = qwen_tokenizer(" Ωmega", add_special_tokens=False)["input_ids"]
    pieces = [qwen_tokenizer.decode([i]) for i in ids]
    assert "".join(pieces) != qwen_tokenizer.decode(ids) and len(pieces) == 3  # fragments alone are not text
    assert word_positions(pieces) == ["initial", "continuation", "continuation"]
