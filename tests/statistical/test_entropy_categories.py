"""Does the tracker separate prompts the embedded model should be sure about from open ones?

Hypothesis: under greedy decoding, the mean per-step entropy of SmolLM2's answers
to short factual questions is lower than for open-ended creative or ambiguous
requests. Test: one-sided Mann-Whitney U (scipy.stats.mannwhitneyu,
``alternative="less"``, exact p-value for these sample sizes) on the per-prompt
mean entropy, at ALPHA = 0.05, which is the test's false-positive rate: if the two
kinds of prompt did not differ, it would reject 5 % of the time at most.

Negative controls (the same test where no difference exists, or the wrong
direction): two random halves of the factual prompts (fixed seed), and the
reversed alternative. Both must NOT reject.

Deterministic: greedy decoding in float32 on the CPU, a fixed prompt set, fixed
seed for the split; 16 prompts x up to 24 tokens.
"""

from __future__ import annotations

import random

import pytest
import scipy.stats

from lab.models.chat import build_messages, encode_chat
from lab.tracker.loop import track_generate

ALPHA = 0.05  # the test's false-positive rate (one-sided)
NEW_TOKENS = 24
SPLIT_SEED = 20240601

# Written for this test: each has one short, well-known answer.
FACTUAL_PROMPTS = (
    "What is the capital of France?",
    "How many days are there in a week?",
    "What is the chemical symbol for gold?",
    "What is 7 multiplied by 8?",
    "Which planet is closest to the Sun?",
    "At what temperature in Celsius does water boil at sea level?",
    "Who wrote the play Romeo and Juliet?",
    "What is the largest ocean on Earth?",
)
# Written for this test: many good answers, none privileged.
OPEN_PROMPTS = (
    "Write the opening line of a strange fairy tale.",
    "Invent a name for a new colour and describe it.",
    "Tell me something surprising.",
    "Describe a dream someone might have.",
    "Suggest an unusual hobby.",
    "Write a two-line poem about anything you like.",
    "What should I do this weekend?",
    "Make up a word and define it.",
)


def _mean_entropies(model, tok, prompts) -> list[float]:
    out = []
    for prompt in prompts:
        ids = encode_chat(tok, build_messages(prompt))
        out.append(track_generate(model, tok, ids, max_new_tokens=NEW_TOKENS).mean_entropy_bits)
    return out


@pytest.fixture(scope="module")
def entropies(smollm2):
    model, tok = smollm2
    return {"factual": _mean_entropies(model, tok, FACTUAL_PROMPTS),
            "open": _mean_entropies(model, tok, OPEN_PROMPTS)}


def _one_sided(x, y, alternative="less") -> float:
    return scipy.stats.mannwhitneyu(x, y, alternative=alternative, method="exact").pvalue


def test_entropy_factual_prompts_lower_than_open_prompts(entropies):
    """Mean entropy(factual) < mean entropy(open): one-sided Mann-Whitney U rejects at ALPHA."""
    f, o = entropies["factual"], entropies["open"]
    p = _one_sided(f, o)
    assert p < ALPHA, (f"Mann-Whitney U (factual < open) p={p:.4f} >= alpha={ALPHA}; "
                       f"factual={[round(v, 3) for v in f]}, open={[round(v, 3) for v in o]}")


def test_entropy_random_halves_of_factual_not_rejected(entropies):
    """Negative control: two random halves of the factual set do not differ (test must not reject)."""
    f = list(entropies["factual"])
    random.Random(SPLIT_SEED).shuffle(f)
    half = len(f) // 2
    p = _one_sided(f[:half], f[half:])
    assert p >= ALPHA, f"control rejected: p={p:.4f} < alpha={ALPHA} on halves {f[:half]} vs {f[half:]}"


def test_entropy_reversed_direction_not_rejected(entropies):
    """Negative control: the one-sided test in the wrong direction (open < factual) must not reject."""
    p = _one_sided(entropies["open"], entropies["factual"])
    assert p >= ALPHA, f"reversed test rejected: p={p:.4f}"
