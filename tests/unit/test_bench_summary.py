"""lab.bench.summary's speculative figures when a figure has nothing measured under it."""

from __future__ import annotations

import math

import pytest

from lab.bench.summary import _Baseline, _comparisons, _speculative_figures
from lab.sampling import SamplingConfig
from lab.speculative.results import RoundRecord, SpeculativeResult

pytestmark = pytest.mark.unit

GAMMA = 4
PROMPT = 8


def _round(i: int, *, fused: bool, verify_s: float = 0.02) -> RoundRecord:
    """A round whose ``GAMMA`` drafts were all accepted, plus the bonus token."""
    return RoundRecord(round=i, proposed=[5] * GAMMA, n_accepted=GAMMA, next_token=6, next_kind="bonus",
                       stop_reason="gamma", draft_entropies=[0.1] * GAMMA, draft_normalized_entropies=[0.01] * GAMMA,
                       accepted_mask=[True] * GAMMA, tested_mask=[True] * GAMMA, draft_time_s=0.004,
                       verify_time_s=verify_s, n_draft_forwards=GAMMA, prefill_positions=PROMPT if fused else 0)


def _result(rounds: list[RoundRecord]) -> SpeculativeResult:
    n = (GAMMA + 1) * len(rounds)
    return SpeculativeResult(tokens=[5] * n, rounds=rounds, gamma=GAMMA, prompt_length=PROMPT,
                             stopped_by="max_new_tokens", prefill_time_s=0.03, total_time_s=0.03 + 0.05 * len(rounds),
                             draft_name="early-exit:1", sampling=SamplingConfig())


BASE = _Baseline(step_s=0.01, decode_tokens_per_s=100.0, tokens={})


def test_speculative_figures_all_rounds_in_fused_first_pass_leave_verify_nan_not_zero():
    """Fault class: ZeroDivisionError at t_verify when every run's only round was the fused first pass
    (`lab bench --max-new-tokens 4 --levers --humaneval tuning:1`): a verify time over no verify pass
    is not measured, so it and what is built on it are NaN, never 0 or a crash."""
    specs = [_result([_round(0, fused=True)]), _result([_round(0, fused=True)])]
    fig = _speculative_figures(specs, BASE, c_flops=0.2)
    assert math.isnan(fig.verify_s) and math.isnan(fig.verify_over_target_step)
    assert math.isnan(fig.speedup_predicted_from_measured_times) and math.isnan(fig.efficiency)
    assert fig.alpha == 1.0 and fig.tau == GAMMA + 1 and fig.n_rounds == 2  # what was measured stays
    assert math.isfinite(fig.measured_speedup)


def test_speculative_figures_verify_time_excludes_the_fused_pass():
    specs = [_result([_round(0, fused=True, verify_s=9.0), _round(1, fused=False, verify_s=0.02)])]
    fig = _speculative_figures(specs, BASE, c_flops=0.2)
    assert fig.verify_s == pytest.approx(0.02) and fig.verify_over_target_step == pytest.approx(2.0)
    assert math.isfinite(fig.speedup_predicted_from_measured_times)


def test_comparisons_show_an_unmeasured_prediction_as_n_a():
    fig = _speculative_figures([_result([_round(0, fused=True)])], BASE, c_flops=0.2)

    class Method:
        speculative = fig

    class Config:
        gammas = ()

    (comparison,) = _comparisons(Config(), {"speculative gamma=4": Method()})
    assert "nan" not in comparison.text and "n/a" in comparison.text
