"""Statistical test: in sampling mode the tracker's statistics read off a speculative run
(:func:`lab.tracker.track_speculative`, what the study runs per prompt) follow the same
distribution as the tracked target-only decode's (:func:`lab.tracker.track_generate`).

Greedy runs are compared number by number (tests/unit/test_tracker_speculative.py); a
sampled run consumes its random draws differently, so only the distributions can agree.
The per-step entropy at step j is a function of the sampled prefix, so it is a discrete
random variable: its values are grouped into atoms (values within :data:`ATOM_GAP_BITS`
are one atom: the two decodes round the same entropy differently by < 1e-5 bits) and
the counts of N_RUNS independent seeded runs per arm go into a 2 x atoms chi-square test
of homogeneity (``scipy.stats.chi2_contingency`` on **counts**), atoms pooled in value
order until each pooled column holds >= :data:`MIN_POOLED` runs (expected >= 5 per cell).

False-positive rate: steps 2 and 3 are tested (step 1's entropy is the prompt's, one
value), each at P_THRESHOLD / 2, so a correct implementation fails with probability
<= 1e-3 over the choice of seeds (Bonferroni); the seeds are fixed, so a passing run
stays passing. Negative control, implemented here and never in library code: the
``on_commit`` rows shifted by one within each round (the fault class "statistics from
the wrong verify row"), which the same test must reject.
"""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chi2_contingency

from lab.models.chat import encode_chat
from lab.sampling import SamplingConfig
from lab.speculative.draft_specs import make_draft
from lab.speculative.loop import speculative_generate
from lab.speculative.settings import SpeculativeSettings
from lab.tracker.results import DecodeSettings
from lab.tracker.stats import StepRecorder
from lab.tracker.speculative import commit_recorder, track_speculative
from lab.tracker.loop import track_generate
from tests import support

P_THRESHOLD = 1e-3  # family-wise false-positive rate of the test (two steps, Bonferroni)
STEPS = (1, 2)  # 0-based: the 2nd and 3rd generated tokens' entropies
N_RUNS = 300  # seeded runs per arm (~3 s per arm on one thread)
MAX_NEW = 4
GAMMA = 2
ATOM_GAP_BITS = 1e-3  # distinct entropies of this model differ by >> 1e-3 bits; rounding by < 1e-5
MIN_POOLED = 10  # runs per pooled column over both arms: expected >= 5 per cell


@pytest.fixture(scope="module")
def setup(one_torch_thread):
    """A 2-layer random Llama with a large init (peaked, prefix-dependent distributions) and its
    1-layer early-exit draft (alpha ~0.4: rounds commit one, two or three tokens)."""
    tok = support.chatml_tokenizer()
    model = support.tiny_llama_untied(vocab_size=len(tok), num_layers=2, seed=0, init_std=1.0)
    ids = encode_chat(tok, [{"role": "user", "content": "what is the capital of france ?"}])
    return model, make_draft(model, "early-exit:1"), tok, ids


def homogeneity_table(a: list[float], b: list[float]) -> list[list[int]]:
    """Counts ``[2, columns]`` of two samples of a discrete variable, atoms pooled in value order."""
    values = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    columns: list[list[int]] = []
    current, last = [0, 0], None
    for v, arm in values:
        if last is not None and v - last > ATOM_GAP_BITS and sum(current) >= MIN_POOLED:
            columns.append(current)
            current = [0, 0]
        current[arm] += 1
        last = v
    if columns and sum(current) < MIN_POOLED:
        columns[-1] = [columns[-1][0] + current[0], columns[-1][1] + current[1]]
    else:
        columns.append(current)
    return [[c[0] for c in columns], [c[1] for c in columns]]


def step_pvalues(reference: list[list[float]], other: list[list[float]]) -> dict[int, float]:
    out = {}
    for step in STEPS:
        table = homogeneity_table([r[step] for r in reference], [r[step] for r in other])
        out[step] = 1.0 if len(table[0]) < 2 else float(chi2_contingency(table).pvalue)
    return out


def _tracker_runs(setup) -> list[list[float]]:
    model, _, tok, ids = setup
    return [[s.entropy_bits for s in track_generate(model, tok, ids, max_new_tokens=MAX_NEW, temperature=1.0,
                                                    seed=seed).steps] for seed in range(N_RUNS)]


def _speculative_runs(setup) -> list[list[float]]:
    model, draft, tok, ids = setup
    return [[s.entropy_bits for s in track_speculative(model, draft, tok, ids,
                                                       DecodeSettings(max_new_tokens=MAX_NEW, temperature=1.0,
                                                                      seed=seed),
                                                       gamma=GAMMA)[0].steps]
            for seed in range(N_RUNS, 2 * N_RUNS)]  # seeds disjoint from the tracker's: independent samples


def _shifted_row_runs(setup) -> list[list[float]]:
    """Negative control: each round's committed rows rotated by one (row j recorded for token j + 1)."""
    model, draft, _, ids = setup
    runs = []
    for seed in range(N_RUNS, 2 * N_RUNS):
        recorder = StepRecorder(5, True)
        hook = commit_recorder(recorder, DecodeSettings(max_new_tokens=MAX_NEW, temperature=1.0, seed=seed))
        speculative_generate(model, draft, ids,
                             SpeculativeSettings(max_new_tokens=MAX_NEW, gamma=GAMMA,
                                                 sampling=SamplingConfig(temperature=1.0)),
                             generator=torch.Generator().manual_seed(seed),
                             on_commit=lambda logits, tokens: hook(logits.roll(1, 0), tokens))
        runs.append([row[0] for row in recorder.finish()[0]])
    return runs


def test_track_speculative_sampling_step_entropies_distributed_as_the_trackers(setup):
    reference = _tracker_runs(setup)
    got = _speculative_runs(setup)
    assert all(len(r) == MAX_NEW for r in reference + got)
    p = step_pvalues(reference, got)
    assert min(p.values()) >= P_THRESHOLD / len(STEPS), (
        f"step entropies differ from the tracker's: p={p} (N_RUNS={N_RUNS}, MAX_NEW={MAX_NEW}, gamma={GAMMA})")
    # Negative control: the same test rejects rows taken one position off.
    broken = step_pvalues(reference, _shifted_row_runs(setup))
    assert min(broken.values()) < P_THRESHOLD / len(STEPS), f"the shifted-row control was not rejected: p={broken}"
