"""``lab intervene``'s core: the added span, the arms' masks and the teacher-forced passes.

Fault classes guarded: a mask that lets a query see a key it should not (or hides one it should),
found by comparing each masked pass with an independent forward: A2 against the prompt with the
span removed at the original positions, A1 against one full-sequence forward with the same 4D
mask (no cache: the cache split and crop); an intervention machinery that moves entropy with a
zero shift; a draft masked differently from the target; a span off by a token or straddling a
boundary token; a continuation that runs past its EOS.
"""

from __future__ import annotations

import copy

import math

import pytest
import torch

from lab.intervene.masks import (ARMS, AddedSpan, Intervention, arm_intervention, intervention_mask,
                                 twin_prompt_ids)
from lab.intervene.score import greedy_continuation, intervened_logits, plain_pass, score_twin, shared_layers
from lab.models.chat import encode_chat
from lab.prompts import StudyPrompt
from lab.speculative.self_draft import early_exit_model
from tests import support

pytestmark = pytest.mark.unit

# Masked pass vs an independent forward, float32 on CPU: the two differ only in the order of float32
# reductions (other matmul shapes, keys that are masked rather than absent), ~1e-6 on these models'
# logits; one wrongly visible key moves them by > 1e-3 (the planted breach below shows it).
EXACT_ATOL = 1e-5
EMPTY_ATOL_BITS = 1e-4  # the run's control: the empty mask reproduces A0 to 1e-4 bits
PROMPT_LEN, SPAN, CONT_LEN = 20, AddedSpan(4, 12), 6  # Gemma 3's window 8 is crossed: the span leaves it


def _eager(model):
    model.set_attn_implementation("eager")
    return model


MODELS = {
    "llama": lambda: support.tiny_llama(attn_implementation="eager"),
    "qwen2": lambda: _eager(support.tiny_qwen2()),
    "gemma3": lambda: support.tiny_gemma3(vocab_size=256, attn_implementation="eager"),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request, one_torch_thread):
    return MODELS[request.param]()


@pytest.fixture(scope="module")
def llama(one_torch_thread):
    return MODELS["llama"]()


def _sequence(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 200, (PROMPT_LEN,), generator=g), torch.randint(3, 200, (CONT_LEN,), generator=g)


def _reference_mask(model, keep: torch.Tensor, pos: torch.Tensor):
    """Additive eager mask from a bool keep ``[Q, K]`` over queries and keys both at ``pos``, written apart
    from lab.intervene.masks: Gemma 3's sliding layers also drop keys ``window`` or more positions back."""
    def additive(k):
        return torch.zeros(k.shape).masked_fill(~k, torch.finfo(torch.float32).min)[None, None]

    if not getattr(model.config, "layer_types", None) or "sliding_attention" not in model.config.layer_types:
        return additive(keep)
    near = (pos[:, None] - pos[None, :]) < model.config.sliding_window
    return {"full_attention": additive(keep), "sliding_attention": additive(keep & near)}


def a2_gap(model, prompt: torch.Tensor, cont: torch.Tensor, span: AddedSpan, masked: AddedSpan) -> float:
    """Max |logit| difference at the decode rows between the A2 pass masking ``masked`` and a plain forward
    over the sequence without ``span``, every token at its original position."""
    ids = torch.cat([prompt, cont[:-1]])
    _, cache = plain_pass(model, ids, cont.numel())
    got = intervened_logits(model, ids, cache, arm_intervention("A2", masked, prompt.numel()), cont.numel())
    pos = torch.tensor([i for i in range(ids.numel()) if not span.start <= i < span.end])
    keep = pos[None, :] <= pos[:, None]
    ref = model(input_ids=ids[pos][None], position_ids=pos[None], attention_mask=_reference_mask(model, keep, pos),
                use_cache=False).logits[0, -cont.numel():].float()
    return float((got - ref).abs().max())


@torch.inference_mode()
def test_a2_masked_pass_equals_the_prompt_without_the_span_at_its_positions(model):
    assert a2_gap(model, *_sequence(), SPAN, SPAN) <= EXACT_ATOL


@torch.inference_mode()
@pytest.mark.parametrize("masked", [AddedSpan(SPAN.start + 1, SPAN.end), AddedSpan(SPAN.start, SPAN.end - 1),
                                    AddedSpan(SPAN.start - 1, SPAN.end)],
                         ids=["late-start", "early-end", "early-start"])
def test_a2_gap_planted_off_by_one_span_is_detected(llama, masked):
    """The exactness check can fail: a mask off by one token in the span breaks it."""
    assert a2_gap(llama, *_sequence(), SPAN, masked) > 100 * EXACT_ATOL


@torch.inference_mode()
def test_intervened_logits_a1_equals_one_full_forward_with_the_same_mask(model):
    prompt, cont = _sequence()
    ids = torch.cat([prompt, cont[:-1]])
    n = ids.numel()
    _, cache = plain_pass(model, ids, CONT_LEN)
    got = intervened_logits(model, ids, cache, arm_intervention("A1", SPAN, PROMPT_LEN), CONT_LEN)
    pos = torch.arange(n)
    keep = pos[None, :] <= pos[:, None]
    keep[PROMPT_LEN - 1:, SPAN.start:SPAN.end] = False  # decode rows blind to the span
    ref = model(input_ids=ids[None], position_ids=pos[None], attention_mask=_reference_mask(model, keep, pos),
                use_cache=False).logits[0, -CONT_LEN:].float()
    plain = model(input_ids=ids[None], use_cache=False).logits[0, -CONT_LEN:].float()
    assert float((got - ref).abs().max()) <= EXACT_ATOL
    assert float((got - plain).abs().max()) > 100 * EXACT_ATOL  # the mask did something


@torch.inference_mode()
def test_intervened_logits_lambda_one_equals_a0_and_lambda_half_does_not(llama):
    prompt, cont = _sequence()
    ids = torch.cat([prompt, cont[:-1]])
    a0, cache = plain_pass(llama, ids, CONT_LEN)
    one = intervened_logits(llama, ids, cache, Intervention(PROMPT_LEN - 1, SPAN.start, SPAN.end, math.log(1.0)),
                            CONT_LEN)
    half = intervened_logits(llama, ids, cache, arm_intervention("L0.5", SPAN, PROMPT_LEN), CONT_LEN)
    assert float((one - a0).abs().max()) <= EXACT_ATOL
    assert float((half - a0).abs().max()) > 100 * EXACT_ATOL


@pytest.fixture(scope="module")
def twin_outcome(model):
    prompt, cont = _sequence()
    return score_twin(model, early_exit_model(model, 1), prompt, SPAN, cont, prompt_id="t-poisoned",
                      variant="poisoned")


def test_score_twin_empty_mask_reproduces_a0(twin_outcome):
    assert set(twin_outcome.arms) == set(ARMS)
    assert twin_outcome.empty_max_diff_bits <= EMPTY_ATOL_BITS
    assert twin_outcome.n_decode == CONT_LEN and len(twin_outcome.arms["A0"].entropy_bits) == CONT_LEN


def test_score_twin_manipulation_checks_hold(twin_outcome):
    """Mediator 0 under A1 and A2, reduced with the dose (lower at 0.25 than 0.5); no sink mass under the sink arm,
    and C+ (the question masked) leaves the span and the sink visible."""
    arms = twin_outcome.arms
    assert arms["A1"].span_mass == 0.0 and arms["A2"].span_mass == 0.0
    assert 0 < arms["L0.25"].span_mass < arms["L0.5"].span_mass < arms["A0"].span_mass
    assert arms["sink"].sink_mass == 0.0 < arms["A0"].sink_mass
    assert arms["C+"].sink_mass > 0 and arms["C+"].span_mass > arms["A0"].span_mass  # the question's mass moved on
    assert all(0.0 <= b <= 1.0 + 1e-6 for arm in arms.values() for b in arm.beta)


@torch.inference_mode()
def test_score_twin_draft_equal_to_target_accepts_everything_in_every_arm(llama):
    """A draft of all the target's layers gets the same masks, so p = q and beta = 1 in every arm; a draft
    masked otherwise (or not at all) would fall below 1 where the arm changes the target."""
    prompt, cont = _sequence()
    out = score_twin(llama, early_exit_model(llama, llama.config.num_hidden_layers), prompt, SPAN, cont)
    assert all(abs(b - 1.0) < 1e-5 for arm in out.arms.values() for b in arm.beta)
    separate = copy.deepcopy(early_exit_model(llama, llama.config.num_hidden_layers))  # own layers: its own passes
    assert shared_layers(llama, separate) is None
    out = score_twin(llama, separate, prompt, SPAN, cont)
    assert all(abs(b - 1.0) < 1e-5 for arm in out.arms.values() for b in arm.beta)


@torch.inference_mode()
def test_score_twin_early_exit_read_from_the_target_equals_running_the_draft(llama):
    """The early-exit draft's logits read from the target's pass (layer L's output, final norm, head) equal
    the draft's own passes under the same masks: a wrong layer, a missing norm or an unmasked read differs."""
    prompt, cont = _sequence()
    shared = early_exit_model(llama, 1)
    assert shared_layers(llama, shared) == 1
    read = score_twin(llama, shared, prompt, SPAN, cont)
    run = score_twin(llama, copy.deepcopy(shared), prompt, SPAN, cont)
    for arm in ARMS:
        assert max(abs(a - b) for a, b in zip(read.arms[arm].beta, run.arms[arm].beta)) < 1e-5, arm
    assert read.arms["A1"].beta != read.arms["A0"].beta


@torch.inference_mode()
def test_score_twin_draft_with_a_padded_vocabulary_compares_the_shared_ids(llama):
    draft = support.tiny_llama(vocab_size=260, num_layers=1, attn_implementation="eager", seed=3)
    prompt, cont = _sequence()
    out = score_twin(llama, draft, prompt, SPAN, cont)
    assert all(0.0 < b < 1.0 for arm in out.arms.values() for b in arm.beta)


def test_score_twin_sdpa_target_is_refused_in_one_line(llama):
    prompt, cont = _sequence()
    with pytest.raises(ValueError, match="attn_implementation='sdpa'") as err:
        score_twin(support.tiny_llama(), llama, prompt, SPAN, cont)
    assert "\n" not in str(err.value)


def test_score_twin_sequence_beyond_the_context_is_refused_naming_the_prompt(llama):
    prompt = torch.full((llama.config.max_position_embeddings - 2,), 5)
    with pytest.raises(ValueError, match="'long-twin'.*more than the target model's context"):
        score_twin(llama, llama, prompt, SPAN, torch.full((4,), 5), prompt_id="long-twin")


def test_intervention_mask_never_blocks_a_whole_row_and_doses_only_the_span(llama):
    iv = arm_intervention("L0.25", SPAN, PROMPT_LEN)
    mask = intervention_mask(llama, iv, PROMPT_LEN + CONT_LEN - 1)[0, 0]  # [T, N]
    assert mask.shape == (CONT_LEN, PROMPT_LEN + CONT_LEN - 1)
    assert torch.allclose(mask[:, SPAN.start:SPAN.end], torch.full((CONT_LEN, len(SPAN)), math.log(0.25)))
    assert (mask[:, :SPAN.start] == 0).all() and (mask[:, SPAN.end:PROMPT_LEN] == 0).all()
    assert (mask[torch.arange(CONT_LEN), PROMPT_LEN - 1 + torch.arange(CONT_LEN)] == 0).all()  # each query sees itself


def test_arm_intervention_rejects_a0_and_a_span_that_leaves_no_question():
    with pytest.raises(ValueError, match="A0 is the plain forward"):
        arm_intervention("A0", SPAN, PROMPT_LEN)
    for end in (PROMPT_LEN, PROMPT_LEN - 1):
        with pytest.raises(ValueError, match="must end before the question"):
            arm_intervention("A1", AddedSpan(2, end), PROMPT_LEN)


def test_arm_intervention_c_plus_masks_the_question_and_sink_masks_key_0():
    """C+: decode queries blind to every key after the span but the last prompt token; sink: key 0 only."""
    c_plus, sink = arm_intervention("C+", SPAN, PROMPT_LEN), arm_intervention("sink", SPAN, PROMPT_LEN)
    assert (c_plus.first_query, c_plus.key_start, c_plus.key_end) == (PROMPT_LEN - 1, SPAN.end, PROMPT_LEN - 1)
    assert (sink.first_query, sink.key_start, sink.key_end) == (PROMPT_LEN - 1, 0, 1)
    assert c_plus.shift == sink.shift == -math.inf


# ---- the added span -------------------------------------------------------------------------------

QUESTION = "what is the capital of france ?"


def _triple(twin_text: str, clean_text: str = QUESTION) -> tuple[StudyPrompt, StudyPrompt]:
    clean = StudyPrompt(id="q1", category="factual", messages=({"role": "user", "content": clean_text},))
    twin = StudyPrompt(id="q1-poisoned", category="factual", variant="poisoned", twin_of="q1",
                       messages=({"role": "user", "content": twin_text},))
    return twin, clean


def test_twin_prompt_ids_chatml_span_is_the_added_text(chatml_tokenizer):
    added = "the people of paris are many , and they like water .\n\n"
    twin, clean = _triple(added + QUESTION)
    ids, span = twin_prompt_ids(chatml_tokenizer, twin, clean)
    assert torch.equal(ids, encode_chat(chatml_tokenizer, [dict(m) for m in twin.messages])[0])
    clean_ids = encode_chat(chatml_tokenizer, [dict(m) for m in clean.messages])[0]
    assert torch.equal(torch.cat([ids[:span.start], ids[span.end:]]), clean_ids)
    assert chatml_tokenizer.decode(ids[span.start:span.end]).split() == added.split()
    assert chatml_tokenizer.decode(ids[span.end:span.end + 3]).split() == ["what", "is", "the"]


@pytest.mark.parametrize("twin_text, clean_text, message", [
    ("the people of paris .\n\nwhat is the capital of paris ?", QUESTION, "is not added text followed by"),
    ("\n\n" + QUESTION, QUESTION, "is not added text followed by"),
    ("the people of parisfrance ?", "france ?", "differ from"),  # ends with the question; one token straddles
], ids=["other-question", "nothing-added", "straddling-token"])
def test_twin_prompt_ids_bad_twin_is_refused_in_one_line_naming_it(chatml_tokenizer, twin_text, clean_text, message):
    twin, clean = _triple(twin_text, clean_text)
    with pytest.raises(ValueError, match=message) as err:
        twin_prompt_ids(chatml_tokenizer, twin, clean)
    assert "'q1-poisoned'" in str(err.value) and "\n" not in str(err.value)


def test_twin_prompt_ids_smollm2_tokenizer_embedded_twins_have_exact_spans():
    """The real BPE tokenizer on every twin of the embedded prompt set: the span is the added text."""
    from lab.models.loading import ModelUnavailableError, load_tokenizer
    from lab.prompts import load_prompts

    try:
        tok = load_tokenizer("smollm2")
    except (ModelUnavailableError, OSError) as exc:
        pytest.skip(f"SmolLM2's tokenizer is not available here: {exc}")
    prompts = load_prompts()
    by_id = {p.id: p for p in prompts}
    twins = [p for p in prompts if p.twin_of is not None]
    assert twins
    for twin in twins:
        clean = by_id[twin.twin_of]
        ids, span = twin_prompt_ids(tok, twin, clean)
        added = twin.messages[-1]["content"][: -len(clean.messages[-1]["content"])]
        assert tok.decode(ids[span.start:span.end]) == added, twin.id


# ---- the continuation -----------------------------------------------------------------------------

@torch.inference_mode()
def test_greedy_continuation_stops_after_the_first_eos_and_keeps_it(llama):
    prompt, _ = _sequence()
    full = greedy_continuation(llama, prompt, 6)
    assert full.dtype == torch.long and full.shape == (6,)
    eos = int(full[3])
    first = int((full == eos).nonzero()[0])
    stopped = greedy_continuation(llama, prompt[None], 6, frozenset({eos}))
    assert stopped.tolist() == full[:first + 1].tolist()
