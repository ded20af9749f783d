"""Sink detection on the embedded model over held-out prompts: count-based acceptance criteria.

The prompts of lab/data/sinks_held_out.jsonl are NOT in the calibration set
(lab/data/calibration_prompts.jsonl), so these tests check that SmolLM2's calibrated threshold
(lab/sinks/calibrations/smollm2.json, on the detector's statistic, lab.sinks.profiles.load_choice) generalizes.
The model is deterministic (float32, CPU), so the randomness is in the choice of prompts.

False-positive rates (the chance that a detector meeting the calibration targets
fails here, treating the prompts as a random draw):

* position 0: fails if fewer than ceil(0.95 * n) of n = 24 prompts flag it. If
  the true per-prompt rate is 99.5 % (calibration: 36/36), P(fail) =
  binom.cdf(22, 24, 0.995) ~= 0.6 %.
* content tokens: fails if >= 1 % are flagged. If the true rate is 0.2 %
  (calibration: 0/765; its 95 % Clopper-Pearson upper bound is 0.48 %),
  P(fail) = binom.sf(ceil(0.01 n) - 1, n, 0.002) ~= 2.1 % at the n = 289 observed
  content tokens of these prompts (measured with sink_rate > 0.35: 24/24
  position 0, 0/289 content; with the gm_content z detector: the same counts).

Both figures are recomputed with scipy in the failure messages. Each criterion has
a negative control: a deliberately mis-set detector that the same check rejects.
"""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import binom

from lab.sinks.capture import capture_received
from lab.sinks.calibration import CONTENT_MAX_RATE, HELD_OUT_SET, POSITION0_MIN_RATE, load_prompts
from lab.models.chat import build_messages
from lab.sinks.prefill import score_positions
from lab.sinks.profiles import load_calibration
from lab.sinks.structure import ROLE_CONTENT, analyze_structure

# SmolLM2's own calibrated threshold (a calibrated constant belongs to its model).
THRESHOLD = load_calibration("smollm2").threshold
# Controls on the sink-rate scale: 0 flags every token some head attends to above
# epsilon (many content tokens on SmolLM2); no position's rate can exceed 1.
CONTROL_LOW_THRESHOLD = 0.0
CONTROL_HIGH_THRESHOLD = 1.0
# SmolLM2's calibrated gm_prose z threshold (the same sweep, lab/sinks/calibrations/smollm2.json), for the
# z-baseline control below.
Z_THRESHOLD = load_calibration("smollm2", statistic="gm_prose").threshold

# The packaged held-out set (lab/data/sinks_held_out.jsonl, 24 prompts, 3 with a system prompt).
HELD_OUT = [(p.prompt, p.system) for p in load_prompts(packaged=HELD_OUT_SET)]


@pytest.fixture(scope="module")
def held_out_scores(smollm2):
    """Per prompt: (z [S], observed [S], content [S]) from one streaming prefill."""
    model, tok = smollm2
    out = []
    for prompt, system in HELD_OUT:
        structure = analyze_structure(tok, build_messages(prompt, system))
        scores = score_positions(capture_received(model, structure.input_ids).per_head, structure.roles)
        content = torch.tensor([r == ROLE_CONTENT for r in structure.roles])
        out.append((scores.score, scores.observed, content))
    return out


def _position0_count(scores, threshold):
    return sum(int(z[0] > threshold) for z, _, _ in scores)


def _content_counts(scores, threshold):
    zs = torch.cat([z[content & observed] for z, observed, content in scores])
    return int((zs > threshold).sum()), int(zs.numel())


def _position0_ok(scores, threshold) -> tuple[bool, str]:
    n = len(scores)
    k = _position0_count(scores, threshold)
    need = math.ceil(POSITION0_MIN_RATE * n)
    fpr = binom.cdf(need - 1, n, 0.995)
    return k >= need, f"position 0 flagged on {k}/{n} prompts, need >= {need} (FPR at true 99.5 %: {fpr:.2%})"


def _content_ok(scores, threshold) -> tuple[bool, str]:
    k, n = _content_counts(scores, threshold)
    fpr = binom.sf(math.ceil(CONTENT_MAX_RATE * n) - 1, n, 0.002)
    return k < CONTENT_MAX_RATE * n, (f"content flagged {k}/{n} ({k / n:.2%}), need < {CONTENT_MAX_RATE:.0%} "
                                      f"(FPR at true 0.2 %: {fpr:.2%}); threshold {threshold}")


def test_sinks_real_enough_held_out_prompts():
    assert len(HELD_OUT) >= 20


def test_sinks_real_position0_flagged_on_95_percent_of_prompts(held_out_scores):
    ok, msg = _position0_ok(held_out_scores, THRESHOLD)
    assert ok, msg


def test_sinks_real_content_false_positive_rate_under_1_percent(held_out_scores):
    ok, msg = _content_ok(held_out_scores, THRESHOLD)
    assert ok, msg


def test_sinks_real_low_threshold_control_fails_content_criterion(held_out_scores):
    """Negative control: a threshold far below calibration flags ordinary words; the check must reject it."""
    ok, msg = _content_ok(held_out_scores, CONTROL_LOW_THRESHOLD)
    assert not ok, "content criterion did not reject a detector at rate > 0: " + msg


def test_sinks_real_high_threshold_control_fails_position0_criterion(held_out_scores):
    """Negative control: a detector that flags nothing must fail the position-0 criterion."""
    ok, msg = _position0_ok(held_out_scores, CONTROL_HIGH_THRESHOLD)
    assert not ok, "position-0 criterion did not reject a detector at rate > 1: " + msg


# --------------------------------------------------------------------------- long uniform prompt

# The held-out prompts joined and repeated to this many tokens: long, uniform text on
# which the pre-fix baseline flagged 22 trailing positions (all seen by < 80 queries).
LONG_TOKENS = 2000
# Trailing positions: seen by fewer than this share of the queries (the last ~200).
TRAILING_FRACTION = 0.1


@pytest.fixture(scope="module")
def long_uniform(smollm2):
    """(scores, content [S]) of one streaming prefill over ~2,000 tokens of repeated held-out text."""
    model, tok = smollm2
    piece = tok(" ".join(p for p, _ in HELD_OUT), add_special_tokens=False)["input_ids"]
    text = tok.decode((piece * (LONG_TOKENS // len(piece) + 1))[:LONG_TOKENS])
    structure = analyze_structure(tok, build_messages(text))
    scores = score_positions(capture_received(model, structure.input_ids).per_head, structure.roles)
    return scores, torch.tensor([r == ROLE_CONTENT for r in structure.roles])


def _trailing(s: int) -> torch.Tensor:
    return torch.arange(s, 0, -1) < TRAILING_FRACTION * s


def test_sinks_real_long_uniform_prompt_no_trailing_sink(long_uniform):
    """Regression (fault class: a baseline blind to how many queries see a position).

    A fixed prompt on a deterministic model, so this is a regression check, not a draw:
    no trailing content position is flagged, position 0 is, and under 1 % of content
    tokens are (calibration: sink_rate > 0.35 flags 0 of 2,047 content
    tokens of this prompt, none trailing)."""
    scores, content = long_uniform
    flagged = scores.observed & (scores.score > THRESHOLD)
    s = flagged.numel()
    trailing = torch.nonzero(flagged & content & _trailing(s)).flatten().tolist()
    assert not trailing, f"trailing positions flagged: {trailing} of S = {s}"
    assert bool(flagged[0]), f"position 0 z = {float(scores.score[0]):.2f}"
    k, n = int((flagged & content).sum()), int((content & scores.observed).sum())
    assert k < CONTENT_MAX_RATE * n, f"content flagged {k}/{n}"


def test_sinks_real_long_uniform_prompt_global_baseline_flags_tail_negative_control(long_uniform):
    """Control: the same scores against one global median (robust_z, the pre-fix baseline) flag
    trailing positions, so the test above can fail."""
    from lab.sinks.scores import robust_z

    scores, content = long_uniform
    z_global = robust_z(scores.typical, exclude=~(scores.observed & content))
    s = z_global.numel()
    assert int((scores.observed & content & _trailing(s) & (z_global > Z_THRESHOLD)).sum()) > 0
