"""The chosen context health on real prefills of both model families: its six properties, and the controls.

The sixth property (length-neutral: |Spearman rho(health, content length N)| <= 0.2 over
clean prompts and their neutral variants) is checked on each model's own prefills of
:data:`N_PROMPTS` calibration prompts and their neutral variants (clean context of about
5 to 500 tokens; a subset of the 36 the calibration reports on, to keep the tier's time), beside
the five properties of
:func:`lab.health.measures.check_properties_on`. Negative control: the length-only control
fails the sixth property on the same prefills (so the check can fail), and so does the chosen
measure read against the *other* model's length reference (a reference is per model). Deterministic: fixed
prompts, float32 on CPU. Also checked: the neutral twins' added length matches the poisoned
twins' within 5 % on both tokenizers.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from scipy import stats

from lab.health.calibration import LENGTH_RHO_TOLERANCE, neutral_variants
from lab.health.choice import load_chosen
from lab.health.measures import CANDIDATES, CONTROLS, FOR_LENGTH, HealthInputs, check_properties_on
from lab.health.references import load_references
from lab.sinks.calibration import load_prompts as load_calibration
from lab.sinks.prefill import analyze_prefill

N_PROMPTS = 12  # of the 36 calibration prompts (and their neutral variants): ~24 prefills per model


def _inputs(model, tok) -> tuple[list[HealthInputs], list[int]]:
    clean = load_calibration(None)[:N_PROMPTS]
    prompts = clean + neutral_variants(clean)
    inputs = [HealthInputs.from_prefill(analyze_prefill(model, tok, p.messages())) for p in prompts]
    return inputs, [int(h.content.sum()) for h in inputs]


@pytest.fixture(scope="module")
def smollm2_inputs(smollm2):
    return _inputs(*smollm2)


@pytest.fixture(scope="module")
def qwen_inputs(qwen_pair):
    target, tok, _, _ = qwen_pair
    return _inputs(target, tok)


def _check(inputs_and_lengths, lab_log, model: str) -> None:
    inputs, lengths = inputs_and_lengths
    chosen = load_chosen()
    values = [CANDIDATES[chosen](h) for h in inputs]
    rho = float(stats.spearmanr(values, lengths).statistic)
    control = float(stats.spearmanr([CONTROLS["length_only"](h) for h in inputs], lengths).statistic)
    props = check_properties_on(CANDIDATES[chosen], inputs)
    lab_log.record(model=model, measure=chosen, length_rho=rho, control_length_rho=control, properties=props,
                   n_min=min(lengths), n_max=max(lengths))
    assert max(lengths) > 10 * min(lengths), lengths  # the prompts span the lengths the property is about
    assert all(props[k] for k in props if not k.startswith("n_")), props
    assert abs(rho) <= LENGTH_RHO_TOLERANCE, f"{chosen} drifts with length on {model}: rho {rho:.3f}"
    assert abs(control) > LENGTH_RHO_TOLERANCE, f"negative control: length_only rho {control:.3f}"
    if chosen.endswith(FOR_LENGTH):  # negative control: the other family's reference does not fit this model
        other = load_references("qwen2.5-coder" if model == "smollm2" else "smollm2")
        foreign = [CANDIDATES[chosen](replace(h, length_reference=other)) for h in inputs]
        foreign_rho = float(stats.spearmanr(foreign, lengths).statistic)
        lab_log.record(model=model, foreign_reference_length_rho=foreign_rho)
        assert abs(foreign_rho) > LENGTH_RHO_TOLERANCE, f"negative control: foreign reference rho {foreign_rho:.3f}"


def test_health_six_properties_on_smollm2_prefills(smollm2_inputs, lab_log):
    """On SmolLM2's prefills the chosen measure has all six properties; the length-only control fails the sixth."""
    _check(smollm2_inputs, lab_log, "smollm2")


# Every base candidate drifts with length on Qwen2.5-Coder-1.5B (on all 36 calibration prompts and
# their neutral variants, 2026-12-02: local_entropy rho -0.59, relative_entropy -0.92); read against
# the model's packaged length reference (lab/health/length/qwen2.5-coder.json) the chosen measure does
# not (-0.19 on all 36, -0.07 on these 12; docs/results.md).
def test_health_six_properties_on_qwen_prefills(qwen_inputs, lab_log):
    """On Qwen2.5-Coder-1.5B's prefills the chosen measure has all six properties; the control fails the sixth."""
    _check(qwen_inputs, lab_log, "qwen2.5-coder")


def test_neutral_twins_added_length_matches_poisoned_on_both_tokenizers():
    """Fault class: neutral twins that are not length-matched (H4a would then compare lengths again).
    Every neutral twin of the study sets and the calibration adds its poisoned twin's tokens to within 5 %,
    on the smollm2 and qwen2.5-coder tokenizers."""
    from tools.datagen.make_neutral_twins import LENGTH_TOLERANCE, token_counters
    from lab.health.calibration import distractor_texts, poisoned_variants
    from lab.prompts import default_prompts_path, load_prompts

    counts = token_counters()
    worst = 0.0
    for path in (default_prompts_path(), default_prompts_path().with_name("prompts_power.jsonl")):
        prompts = load_prompts(path)
        by_id = {p.id: p for p in prompts}
        poisoned = {p.twin_of: p for p in prompts if p.variant == "poisoned"}
        neutral = [p for p in prompts if p.variant == "neutral"]
        assert len(neutral) == len(poisoned)
        for n in neutral:
            q = by_id[n.twin_of].messages[-1]["content"]
            for count in counts:
                base = count(q)
                want, got = count(poisoned[n.twin_of].messages[-1]["content"]) - base, count(n.messages[-1]["content"]) - base
                worst = max(worst, abs(got - want) / want)
    clean = load_calibration(None)
    for c, p, n in zip(clean, poisoned_variants(clean, distractor_texts(load_prompts())), neutral_variants(clean)):
        for count in counts:
            base = count(c.prompt)
            worst = max(worst, abs((count(n.prompt) - base) - (count(p.prompt) - base)) / (count(p.prompt) - base))
    assert worst <= LENGTH_TOLERANCE, worst
