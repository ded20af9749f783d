"""Tiny models and tokenizers built in memory, for tests that need no weights.

Nothing here downloads: models are random-weight transformers models built from a
config with a fixed seed, and tokenizers are word-level ``tokenizers`` objects with
a hand-written chat template in the style of ChatML (SmolLM2, Qwen2.5) or Gemma.
"""

from __future__ import annotations

import torch

# A small closed vocabulary: enough words to write prompts in tests.
WORDS = (
    "the a of to and in is it you that he was for on are as with his they at be this "
    "from have or by one had not but what all were when we there can an your which "
    "their said if do will each about how up out them then she many some so these "
    "would other into has more her two like him see time could no make than first "
    "been its who now people my made over did down only way find use may water long "
    "little very after words called just where most know paris france capital what "
    "hello world system user assistant helpful model , . ? ! : ; ' \" ( ) [ ] < > | _ "
    "0 1 2 3 4 5 6 7 8 9 im_start im_end"
).split()

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful model<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)


def _word_tokenizer(specials: list[str], bos: str | None, eos: str, template: str | None, add_bos: bool):
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(["<unk>", *specials, "\n", *WORDS])}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[ \t]+"), behavior="removed"),
        pre_tokenizers.Split("\n", behavior="isolated"),
        pre_tokenizers.Punctuation(),
    ])
    if add_bos and bos is not None:
        tk.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, vocab[bos])]
        )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="<unk>", bos_token=bos, eos_token=eos, pad_token=eos,
        additional_special_tokens=[s for s in specials if s not in (bos, eos)],
    )
    tok.chat_template = template
    return tok


def chatml_tokenizer():
    """ChatML word-level tokenizer; like SmolLM2, BOS is ``<|im_start|>`` and the
    template injects a default system prompt."""
    return _word_tokenizer(["<|im_start|>", "<|im_end|>"], "<|im_start|>", "<|im_end|>", CHATML_TEMPLATE, add_bos=False)


def gemma_tokenizer():
    """Gemma-style word-level tokenizer: ``<bos>``, ``<start_of_turn>``/``<end_of_turn>``."""
    return _word_tokenizer(["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>", GEMMA_TEMPLATE, add_bos=False)


def base_tokenizer():
    """A base-model tokenizer: no chat template, prepends ``<bos>``."""
    return _word_tokenizer(["<bos>", "<eos>"], "<bos>", "<eos>", None, add_bos=True)


def tiny_llama(vocab_size: int = 256, num_layers: int = 2, hidden: int = 64, heads: int = 4,
               kv_heads: int = 2, seed: int = 0, attn_implementation: str = "sdpa", max_positions: int = 512):
    """A random-weight Llama causal LM (float32, eval mode) built from a config."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=num_layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions, bos_token_id=1, eos_token_id=2, pad_token_id=2,
        tie_word_embeddings=True,
    )
    cfg._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    model.lab_source = {"model": "tiny-llama", "source": "random config", "profile": None,
                        "device": "cpu", "dtype": "float32", "attn_implementation": attn_implementation}
    return model


def tiny_qwen2(vocab_size: int = 256, num_layers: int = 2, hidden: int = 64, seed: int = 0):
    """A random-weight Qwen2 causal LM (the qwen2.5 profile's architecture), float32."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, tie_word_embeddings=True)
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(cfg).eval()


def tiny_llama_untied(vocab_size: int = 64, num_layers: int = 4, hidden: int = 64, seed: int = 0,
                      init_std: float = 0.2):
    """A random Llama whose greedy output varies (untied head, larger init).

    ``tiny_llama``'s tied embeddings and 0.02 init make it repeat its input token, so
    a draft agrees with it always; speculative-decoding tests need rejections.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=512, bos_token_id=1, eos_token_id=2, pad_token_id=2,
        tie_word_embeddings=False, initializer_range=init_std,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).eval()


CHISQ_MIN_EXPECTED = 5.0  # chi-square approximation needs expected counts >= 5 per bin


def chisq_pvalue(observed: dict, expected_probs: dict) -> float:
    from scipy.stats import chisquare

    """Chi-square p-value of observed counts against probabilities, pooling bins with expected < 5."""
    n = sum(observed.values())
    if any(expected_probs.get(k, 0.0) <= 0.0 for k, c in observed.items() if c > 0):
        return 0.0  # an impossible outcome happened
    keys = sorted(expected_probs, key=lambda k: expected_probs[k])
    obs, exp, pool_o, pool_e = [], [], 0.0, 0.0
    for k in keys:
        e = n * expected_probs[k]
        if e < CHISQ_MIN_EXPECTED:
            pool_o, pool_e = pool_o + observed.get(k, 0), pool_e + e
        else:
            obs.append(observed.get(k, 0))
            exp.append(e)
    if pool_e > 0:
        if pool_e < CHISQ_MIN_EXPECTED and exp:  # merge the pool into the smallest regular bin
            obs[0], exp[0] = obs[0] + pool_o, exp[0] + pool_e
        else:
            obs.append(pool_o)
            exp.append(pool_e)
    if len(obs) < 2:
        return 1.0
    scale = sum(obs) / sum(exp)  # exact float equality of totals, as chisquare requires
    return float(chisquare(obs, [e * scale for e in exp]).pvalue)


def tiny_gemma3(vocab_size: int = 64, num_layers: int = 4, sliding_window: int = 8, seed: int = 0,
                init_std: float = 0.3, max_positions: int = 256):
    """A random Gemma 3 text model with a small sliding window (float32, eval mode).

    Layers 0..n-2 are ``sliding_attention`` with window ``sliding_window``, the last
    ``full_attention``, as in Gemma 3's 5:1 pattern; so transformers builds a
    ``DynamicSlidingWindowLayer`` per sliding layer. Untied head and a larger init so
    greedy output varies and drafts get rejected (a tied 0.02 init repeats one token).
    """
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    cfg = Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=num_layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=sliding_window,
        layer_types=["sliding_attention"] * (num_layers - 1) + ["full_attention"],
        max_position_embeddings=max_positions, initializer_range=init_std, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return Gemma3ForCausalLM(cfg).eval()


def assert_same_track_steps(ref, got) -> dict:
    """Two tracked decodes (``TrackResult``) agree step by step, within the greedy tolerances of
    :mod:`lab.tracker.speculative`: same tokens, positions, alternatives (ids), text and stop,
    entropy, normalized entropy, varentropy and chosen probability. Returns the max differences."""
    from lab.tracker.speculative import GREEDY_ENTROPY_ATOL_BITS, GREEDY_PROB_ATOL, GREEDY_VARENTROPY_ATOL_BITS2

    assert got.new_token_ids == ref.new_token_ids
    assert [s.position for s in got.steps] == [s.position for s in ref.steps]
    worst = {"entropy_bits": 0.0, "varentropy_bits2": 0.0, "chosen_prob": 0.0}
    for a, b in zip(ref.steps, got.steps):
        for key in worst:
            worst[key] = max(worst[key], abs(getattr(a, key) - getattr(b, key)))
        assert abs(a.entropy_bits - b.entropy_bits) <= GREEDY_ENTROPY_ATOL_BITS, (a.position, a.entropy_bits, b.entropy_bits)
        assert abs(a.normalized_entropy - b.normalized_entropy) <= GREEDY_ENTROPY_ATOL_BITS, a.position
        assert abs(a.varentropy_bits2 - b.varentropy_bits2) <= GREEDY_VARENTROPY_ATOL_BITS2, a.position
        assert abs(a.chosen_prob - b.chosen_prob) <= GREEDY_PROB_ATOL, a.position
        assert [t for t, _, _ in a.alternatives] == [t for t, _, _ in b.alternatives], a.position
    assert got.text == ref.text and got.stop_reason == ref.stop_reason
    return worst


def patch_tiny_loader(monkeypatch) -> None:
    """Make ``lab.models.loading.load_model`` return a tiny random Llama (ChatML tokenizer, 4096
    positions) for any name, and every model available: the CLI's paths without weights."""
    from lab.models import loading

    tok = chatml_tokenizer()

    def tiny_load(name, **kw):
        model = tiny_llama(vocab_size=len(tok), max_positions=4096)
        model.lab_source = {"model": name, "device": "cpu", "dtype": "float32"}
        return model, tok

    monkeypatch.setattr(loading, "load_model", tiny_load)
    monkeypatch.setattr(loading, "check_model_available", lambda name: None)
