"""The context-reliance measures (lab.health.reliance) and their paired validation (lab.health.context_validity).

The lookback ratio is checked against a reference computed apart, from the model's own
``output_attentions``; the contrast against a prompt that removes nothing (KL exactly 0) and a
hand value. The validation figures get a planted effect they must pass, a null they must fail,
and a planted length proxy the bar must reject.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lab.health.context_items import ContextItem, ItemScores, PromptScores, load_items
from lab.health.context_validity import MIN_AUROC, paired_auroc, validity_figures
from lab.health.reliance import context_reliance, kl_bits, lookback_ratios
from lab.intervene.masks import AddedSpan
from tests import support

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPT_LEN, CONT_LEN = 14, 6
SPAN = AddedSpan(3, 9)
RATIO_ATOL = 1e-5  # float32 softmax rows summed over a dozen keys


@pytest.fixture(scope="module")
def eager_llama():
    return support.tiny_llama(attn_implementation="eager")


def _sequence(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 200, (PROMPT_LEN,), generator=g), torch.randint(3, 200, (CONT_LEN,), generator=g)


def test_lookback_ratio_is_context_mean_over_context_plus_generated_mean():
    """One head, two queries: the second sees a context mean of 0.2 and a generated mean of 0.3."""
    probs = torch.zeros(1, 2, 6)
    probs[0, 1] = torch.tensor([0.1, 0.2, 0.2, 0.0, 0.3, 0.2])  # span keys 1..2; prompt of 4; generated keys 4, 5
    got = lookback_ratios(probs, AddedSpan(1, 3), n_prompt=4)
    # query 1 has one generated key before it (key 4): new mean 0.3; context mean 0.2
    assert got.shape == (1, 1)
    assert float(got[0, 0]) == pytest.approx(0.2 / (0.2 + 0.3))


def test_lookback_ratio_counts_only_tokens_generated_before_each_query():
    probs = torch.zeros(1, 3, 7)
    probs[0, 2] = torch.tensor([0.0, 0.4, 0.0, 0.0, 0.2, 0.4, 0.0])  # query 2: keys 4, 5 generated; 6 not yet
    got = lookback_ratios(probs, AddedSpan(1, 2), n_prompt=4)
    assert float(got[0, 1]) == pytest.approx(0.4 / (0.4 + 0.3))


def test_lookback_ratio_with_no_mass_on_either_is_one_half():
    assert float(lookback_ratios(torch.zeros(2, 2, 5), AddedSpan(1, 2), n_prompt=3).max()) == 0.5


@pytest.mark.parametrize("shape,span,n_prompt", [((2, 1, 5), AddedSpan(1, 2), 3), ((2, 5), AddedSpan(1, 2), 3),
                                                 ((1, 2, 5), AddedSpan(1, 4), 3)],
                         ids=["one-query", "2d", "span-past-prompt"])
def test_lookback_ratios_refuses_bad_shapes_and_spans(shape, span, n_prompt):
    with pytest.raises(ValueError):
        lookback_ratios(torch.zeros(shape), span, n_prompt)


def test_kl_bits_is_zero_for_equal_rows_and_one_bit_for_a_certain_row_against_a_fair_coin():
    assert float(kl_bits(torch.randn(3, 5), torch.zeros(3, 5)).min()) >= 0.0
    x = torch.randn(4, 7)
    assert torch.equal(kl_bits(x, x.clone()), torch.zeros(4))
    assert float(kl_bits(torch.tensor([[0.0, -1e9]]), torch.zeros(1, 2))[0]) == pytest.approx(1.0)


def test_kl_bits_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="one shape"):
        kl_bits(torch.zeros(2, 3), torch.zeros(2, 4))


@torch.inference_mode()
def test_context_reliance_lookback_equals_the_models_own_attentions(eager_llama):
    prompt, cont = _sequence()
    got = context_reliance(eager_llama, prompt, SPAN, prompt[SPAN.end:], cont)
    ids = torch.cat([prompt, cont[:-1]])[None]
    attn = eager_llama(input_ids=ids, output_attentions=True, use_cache=False).attentions  # L x [1, H, N, N]
    per_layer = []
    for a in attn:
        rows = a[0, :, -CONT_LEN:]  # [H, T, N]
        vals = []
        for j in range(1, CONT_LEN):
            ctx = rows[:, j, SPAN.start:SPAN.end].mean(-1)
            new = rows[:, j, PROMPT_LEN:PROMPT_LEN + j].mean(-1)
            vals.append(ctx / (ctx + new))
        per_layer.append(float(torch.stack(vals).mean()))
    assert got.lookback_per_layer == pytest.approx(per_layer, abs=RATIO_ATOL)
    assert got.lookback_ratio == pytest.approx(sum(per_layer) / len(per_layer), abs=RATIO_ATOL)
    assert (got.n_context, got.n_decode) == (len(SPAN), CONT_LEN)


@torch.inference_mode()
def test_context_contrast_is_zero_when_nothing_is_removed_and_positive_when_the_context_is(eager_llama):
    prompt, cont = _sequence()
    same = context_reliance(eager_llama, prompt, SPAN, prompt, cont)
    assert same.contrast_bits == 0.0
    removed = context_reliance(eager_llama, prompt, SPAN, torch.cat([prompt[:SPAN.start], prompt[SPAN.end:]]), cont)
    assert removed.contrast_bits > 1e-4


def test_context_reliance_refuses_a_non_eager_model_and_a_one_token_continuation(eager_llama):
    prompt, cont = _sequence()
    with pytest.raises(ValueError, match="at least 2"):
        context_reliance(eager_llama, prompt, SPAN, prompt, cont[:1])
    with pytest.raises(ValueError, match="eager"):
        context_reliance(support.tiny_llama(attn_implementation="sdpa"), prompt, SPAN, prompt, cont)


# --- the paired validation's figures --------------------------------------------------------------------------

N_PAIRS = 160  # the validation set's size


def _lengths(gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n_rel = np.exp(gen.uniform(np.log(15), np.log(200), N_PAIRS)).round().astype(int)
    return n_rel, (n_rel * gen.uniform(0.95, 1.05, N_PAIRS)).round().astype(int)


def test_paired_auroc_counts_wins_and_half_ties():
    assert paired_auroc([2, 1, 3], [1, 1, 4]) == 0.5
    assert paired_auroc([2, 2], [1, 1]) == 1.0


N_SIMULATIONS = 200


def test_a_planted_relevance_effect_passes_the_bar_in_nearly_every_draw():
    """Power: a planted effect (relevant ~ N(1, 0.5), irrelevant ~ N(0, 0.5), no length trend) passes in
    >= 95 % of 200 seeded draws. The |rho| <= 0.2 bar alone fails a length-free measure in ~1 % of draws at
    n = 160 (|z| > 2.5), so a few misses are expected; the expected pass rate is ~99 %."""
    passed = 0
    for seed in range(N_SIMULATIONS):
        gen = np.random.default_rng(seed)
        n_rel, n_irr = _lengths(gen)
        rel, irr = gen.normal(1.0, 0.5, N_PAIRS), gen.normal(0.0, 0.5, N_PAIRS)
        fig = validity_figures("planted", rel, irr, n_rel, n_irr, seed=seed, n_boot=200)
        passed += fig.passes
        assert fig.auroc > 0.85 and abs(fig.placebo_auroc - 0.5) <= 0.15, fig
    assert passed >= 0.95 * N_SIMULATIONS, passed


def test_a_measure_of_noise_never_passes_the_bar_and_direction_flips_it():
    """Negative control (size): no effect in 200 seeded draws passes never; AUROC >= 0.75 by chance at
    n = 160 needs z ~ 6 (rate < 1e-8 a draw)."""
    for seed in range(N_SIMULATIONS):
        gen = np.random.default_rng(seed)
        n_rel, n_irr = _lengths(gen)
        rel, irr = gen.normal(0, 1, N_PAIRS), gen.normal(0, 1, N_PAIRS)
        fig = validity_figures("noise", rel, irr, n_rel, n_irr, seed=seed, n_boot=200)
        assert not fig.passes and any("AUROC" in f and "<" in f for f in fig.failed), fig
    flipped = validity_figures("noise", rel, irr, n_rel, n_irr, seed=0, direction=-1)
    assert flipped.auroc == pytest.approx(1 - paired_auroc(rel, irr))


def test_a_planted_length_proxy_is_rejected_by_the_bar():
    """A score that reads only the context's length (plus a small relevance leak) must fail: rho with length."""
    gen = np.random.default_rng(2)
    n_rel, n_irr = _lengths(gen)
    rel, irr = np.log(n_rel) + 0.3, np.log(n_irr)
    fig = validity_figures("length", rel, irr, n_rel, n_irr, seed=0)
    assert fig.auroc >= MIN_AUROC  # it ranks the pairs...
    assert not fig.passes and any("rho" in f for f in fig.failed)  # ...but reads length


def test_a_measure_piled_at_its_scale_end_fails_the_bar():
    gen = np.random.default_rng(3)
    n_rel, n_irr = _lengths(gen)
    rel = np.where(gen.random(N_PAIRS) < 0.2, 1.0, gen.uniform(0.5, 0.9, N_PAIRS))
    irr = gen.uniform(0.1, 0.5, N_PAIRS)
    fig = validity_figures("piled", rel, irr, n_rel, n_irr, scale=(0.0, 1.0), seed=0)
    assert any("ends" in f for f in fig.failed) and fig.end_share > 0.05


@pytest.mark.parametrize("kwargs,match", [({"direction": 0}, "direction"), ({"n_boot": 10}, None)])
def test_validity_figures_checks_its_arguments(kwargs, match):
    if match is None:
        validity_figures("x", [1, 2, 3], [0, 0, 0], [10, 20, 30], [10, 20, 30], **kwargs)
        return
    with pytest.raises(ValueError, match=match):
        validity_figures("x", [1, 2, 3], [0, 0, 0], [10, 20, 30], [10, 20, 30], **kwargs)


def test_validity_figures_refuses_too_few_or_unequal_lists():
    with pytest.raises(ValueError, match="at least 3"):
        validity_figures("x", [1, 2], [0, 0], [1, 2], [1, 2])
    with pytest.raises(ValueError, match="finite"):
        validity_figures("x", [1, 2, math.nan], [0, 0, 0], [1, 2, 3], [1, 2, 3])


# --- the items file ---------------------------------------------------------------------------------------------

def test_load_items_reads_the_packaged_sets_and_refuses_a_bad_line(tmp_path):
    assert len(load_items("lab/data/context_validation.jsonl")) >= 150
    bad = tmp_path / "items.jsonl"
    bad.write_text('{"id": "a", "package": "p", "object": "o", "question": "q", "relevant": "r"}\n')
    with pytest.raises(ValueError, match=r"items.jsonl:1: field 'irrelevant'"):
        load_items(bad)
    with pytest.raises(ValueError, match="not a regular file"):
        load_items(tmp_path)


def test_item_scores_row_names_each_side():
    s = PromptScores(0.5, 1.0, 0.2, math.nan, 10, 30)
    row = ItemScores("a", "p", s, s).to_json()
    assert row["relevant_lookback"] == 0.5 and row["irrelevant_n_context"] == 10 and row["package"] == "p"
    assert ContextItem("a", "p", "o", "q", "r", "i").line == 0


# --- the chosen measure's fit (lookback heads referenced to length) ---------------------------------------------

def _heads(gen: np.random.Generator, n: int, planted: dict, n_layers: int = 6, n_heads: int = 4):
    """Per-head ratios [n, L, H] for both sides, lengths; ``planted`` (layer, head) -> relevant - irrelevant shift."""
    n_rel = np.exp(gen.uniform(np.log(15), np.log(200), n)).round()
    n_irr = (n_rel * gen.uniform(0.95, 1.05, n)).round()
    rel = gen.uniform(0.3, 0.7, (n, n_layers, n_heads))
    irr = gen.uniform(0.3, 0.7, (n, n_layers, n_heads))
    for (layer, head), shift in planted.items():
        rel[:, layer, head] += shift
    return rel, irr, n_rel, n_irr


def test_fit_head_reference_finds_the_planted_heads_and_its_leave_one_out_auroc_reads_them():
    from lab.health.context_validity import fit_head_reference

    planted = {(1, 2): 0.3, (4, 0): 0.3, (5, 3): 0.3}
    rel, irr, n_rel, n_irr = _heads(np.random.default_rng(0), 60, planted)
    ref = fit_head_reference(rel, irr, n_rel, n_irr, k=3)
    assert set(ref.heads) == set(planted)
    assert ref.loo_auroc > 0.9


def test_fit_head_reference_never_keeps_a_head_that_reads_only_length():
    """A planted proxy: a head whose ratio is the context's log length (paired lengths match within 5 %, so it
    cannot rank a pair) must not be kept while heads that do rank them exist."""
    from lab.health.context_validity import fit_head_reference

    gen = np.random.default_rng(1)
    rel, irr, n_rel, n_irr = _heads(gen, 60, {(2, 1): 0.3, (3, 3): 0.3})
    rel[:, 0, 0], irr[:, 0, 0] = np.log(n_rel) / 6, np.log(n_irr) / 6
    ref = fit_head_reference(rel, irr, n_rel, n_irr, k=2)
    assert (0, 0) not in ref.heads and set(ref.heads) == {(2, 1), (3, 3)}


def test_fit_head_reference_on_noise_has_a_leave_one_out_auroc_near_one_half():
    """Size of the selection step: on 40 seeded draws of pure noise (60 pairs, 24 heads, 8 kept), the
    leave-one-out AUROC stays below the 0.75 bar in every draw (in-sample selection would inflate it; the
    leave-one-out does not). The mean is near 0.5."""
    from lab.health.context_validity import fit_head_reference

    loo = [fit_head_reference(*_heads(np.random.default_rng(seed), 60, {}), k=8).loo_auroc for seed in range(40)]
    assert max(loo) < MIN_AUROC and abs(np.mean(loo) - 0.5) < 0.06, loo


def test_head_reference_score_subtracts_the_length_line_and_refuses_a_head_outside_the_model():
    from lab.health.context_validity import HeadReference

    ref = HeadReference(heads=((0, 1), (1, 0)), intercept=0.1, slope=0.05, n_pairs=3, loo_auroc=0.5)
    per_head = [[0.0, 0.6], [0.4, 0.0]]
    assert ref.score(per_head, 10) == pytest.approx(0.5 - 0.1 - 0.05 * math.log(10))
    with pytest.raises(ValueError, match="outside"):
        HeadReference(heads=((5, 0),), intercept=0, slope=0, n_pairs=3, loo_auroc=0.5).score(per_head, 10)


def test_a_study_twin_is_scored_as_a_validation_prompt_and_the_models_attention_is_restored():
    """The study's H1 value of a twin (lab.health.context_items.twin_lookback) equals the validation's scoring of
    the same context and question (score_prompt's per-head ratios through the same fitted measure), on a model
    that runs SDPA: eager is switched on for the call and the model's own implementation comes back."""
    from lab.health.context_items import score_prompt, twin_lookback
    from lab.health.context_validity import HeadReference
    from lab.prompts import StudyPrompt

    tok = support.chatml_tokenizer()
    model = support.tiny_llama(vocab_size=len(tok), attn_implementation="sdpa")
    context, question = " ".join(support.WORDS[:9]), "what does " + " ".join(support.WORDS[9:12]) + " do"
    clean = StudyPrompt(id="q1", category="code", messages=({"role": "user", "content": question},))
    twin = StudyPrompt(id="q1-neutral", category="code", variant="neutral", twin_of="q1",
                       messages=({"role": "user", "content": f"{context}\n\n{question}"},))
    ref = HeadReference(heads=((1, 0), (0, 3)), intercept=0.1, slope=0.02, n_pairs=3, loo_auroc=0.5)
    value, n_context = twin_lookback(model, tok, frozenset(), twin, clean, ref, 4)
    assert model.config._attn_implementation == "sdpa"
    eager = support.tiny_llama(vocab_size=len(tok), attn_implementation="eager")
    scores = score_prompt(eager, tok, frozenset(), context, question, 4)
    assert n_context == scores.n_context and math.isfinite(value)
    assert value == pytest.approx(ref.score(scores.lookback_per_head, scores.n_context), abs=RATIO_ATOL)


def test_a_clean_prompt_and_a_model_without_a_fitted_measure_get_no_value():
    """Fault class: a prompt without a context span given a number (0 or NaN read as measured)."""
    from types import SimpleNamespace

    from lab.prompts import StudyPrompt
    from lab.study.runner import twin_context_measure

    clean = StudyPrompt(id="q1", category="code", messages=({"role": "user", "content": "q"},))
    twin = StudyPrompt(id="q1-neutral", category="code", variant="neutral", twin_of="q1",
                       messages=({"role": "user", "content": "c\n\nq"},))
    runner = SimpleNamespace(clean_prompts={"q1": clean}, context_reference=None)
    assert twin_context_measure(runner, clean) == (None, None)
    assert twin_context_measure(runner, twin) == (None, None)  # no fitted measure
    runner.context_reference, runner.clean_prompts = object(), {}
    assert twin_context_measure(runner, twin) == (None, None)  # its clean prompt not in the file


@pytest.mark.parametrize("prompts", [None, "humaneval"], ids=["embedded", "named-source"])
def test_the_runner_finds_clean_prompts_in_a_file_and_in_a_named_source(prompts, tmp_path, monkeypatch):
    """Fault class: the runner read --prompts as a file only, so `lab study --prompts humaneval` failed to load."""
    from lab.study.config import StudyConfig
    from lab.study.runner import context_measure_inputs

    monkeypatch.setenv("LAB_CALIBRATION_DIR", str(tmp_path))
    reference, clean = context_measure_inputs(StudyConfig(model="smollm2", prompts=prompts, out=str(tmp_path)))
    assert reference is not None and clean and all(p.variant == "clean" for p in clean.values())
