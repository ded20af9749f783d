"""Tiny models and tokenizers built in memory, for tests that need no weights.

Nothing here downloads: models are random-weight transformers models built from a
config with a fixed seed, and tokenizers are word-level ``tokenizers`` objects with
a hand-written chat template in the style of ChatML (SmolLM2, Qwen2.5) or Gemma.
"""

from __future__ import annotations

import torch

from lab.models.source import ModelSource, register_source
from tests.provenance import environment_json, model_json

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
    register_source(model, ModelSource(model="tiny-llama", source="random config", profile=None,
                                       device="cpu", dtype="float32", attn_implementation=attn_implementation))
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
                init_std: float = 0.3, max_positions: int = 256, *, kv_heads: int = 2,
                layer_types: tuple[str, ...] | None = None, attn_implementation: str = "sdpa",
                tie_word_embeddings: bool = False):
    """A random Gemma 3 text model with a small sliding window (float32, eval mode).

    By default layers 0..n-2 are ``sliding_attention`` with window ``sliding_window``, the
    last ``full_attention``, as in Gemma 3's 5:1 pattern; so transformers builds a
    ``DynamicSlidingWindowLayer`` per sliding layer. Untied head and a larger init so
    greedy output varies and drafts get rejected (a tied 0.02 init repeats one token).
    ``layer_types`` gives another pattern (:data:`INTERLEAVED_GEMMA3`).
    """
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    if layer_types is None:
        layer_types = ("sliding_attention",) * (num_layers - 1) + ("full_attention",)
    cfg = Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=num_layers,
        num_attention_heads=4, num_key_value_heads=kv_heads, head_dim=16, sliding_window=sliding_window,
        layer_types=list(layer_types),
        max_position_embeddings=max_positions, initializer_range=init_std, tie_word_embeddings=tie_word_embeddings,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    cfg._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    return Gemma3ForCausalLM(cfg).eval()


# The eviction tests' Gemma 3 (``tiny_gemma3(**INTERLEAVED_GEMMA3)``): a sliding layer *after* the
# full one, so a mask built per layer type, not per depth, is what passes; window 5 so a 9-token
# prompt already crosses it; one KV head, tied head and the 0.02 init transformers uses by default.
INTERLEAVED_GEMMA3 = dict(vocab_size=128, num_layers=3, sliding_window=5, init_std=0.02, kv_heads=1,
                          layer_types=("sliding_attention", "full_attention", "sliding_attention"),
                          tie_word_embeddings=True)


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
        register_source(model, ModelSource(model=name, device="cpu", dtype="float32"))
        return model, tok

    monkeypatch.setattr(loading, "load_model", tiny_load)
    monkeypatch.setattr(loading, "check_model_available", lambda name: None)


def patch_tiny_loader_recording_drafts(monkeypatch) -> list:
    """:func:`patch_tiny_loader`, and a ``make_draft`` that records each ``(spec, dtype)`` it was asked
    for and hands back the tiny target's own first layer (``early-exit:1``) in its place.

    Returns:
        The list the ``(spec, dtype)`` pairs are appended to, in call order.
    """
    from lab.speculative import draft_specs

    patch_tiny_loader(monkeypatch)
    asked: list = []
    real_make_draft = draft_specs.make_draft

    def recording_draft(target, spec, **kw):
        asked.append((spec, kw.get("dtype")))
        return real_make_draft(target, "early-exit:1")

    monkeypatch.setattr(draft_specs, "make_draft", recording_draft)
    return asked


def fake_llamacpp_bins(root, names=None):
    """Empty executable shell scripts named as llama.cpp's binaries (default: every one ``make peer``
    builds) in ``root``, created if missing; returns ``root``. Enough for ``locate``, never run."""
    import os

    from lab.runtime.build import TARGETS

    root.mkdir(parents=True, exist_ok=True)
    for name in TARGETS if names is None else names:
        (root / name).write_text("#!/bin/sh\n")
        os.chmod(root / name, 0o755)
    return root


def assert_twins_built_like_the_embedded_set(prompts) -> None:
    """Every poisoned twin (there must be one) is a text of the distractor sample (lab/data/distractors.jsonl)
    named by its ``distractor`` label, a blank line, then its clean twin's text; no prompt text appears twice."""
    from tools.datagen.make_study_twins import load_sample

    by_id = {p.id: p for p in prompts}
    sample = {d["id"]: d["text"] for d in load_sample()}
    twins = [p for p in prompts if p.variant == "poisoned"]
    assert twins, "no poisoned twin to check"
    for p in twins:
        clean = by_id[p.twin_of].messages[-1]["content"]
        assert p.messages[-1]["content"] == sample[p.distractor] + "\n\n" + clean, p.id
    assert len({p.messages[-1]["content"] for p in prompts}) == len(prompts)  # no duplicate prompt


# Cached vs full-recompute logits, float32. On a tiny random model on CPU they differ only by the
# order of float32 sums (different matmul shapes), with logits of magnitude ~10: 1e-4 absolute.
CACHE_PARITY_ATOL = 1e-4
# The same comparison where that rounding is larger: the real Gemma-3 270M (logits reach ~30, a
# cached decode against an uncached forward of 600+ positions) and tiny models on CUDA (cuBLAS and
# CUDA SDPA pick other kernels, so other reduction orders, for a one-token step than for a full
# forward). 1e-3 absolute.
CACHE_PARITY_ATOL_WIDE = 1e-3

# Masked one-pass NLL vs token-by-token eviction (:func:`streaming_nll`) on the tiny models: float32
# passes that differ only in the order of reductions (one masked pass over S keys vs S cached passes
# over the kept keys) agree to ~1e-6; 1e-4 nats leaves room for BLAS blocking differences while a
# single wrongly visible key moves the NLL by > 1e-2 (checked by the inverted-mask test).
NLL_ATOL = 1e-4


def _layer_window(model, layer: int) -> int | None:
    types = getattr(model.config, "layer_types", None)
    return int(model.config.sliding_window) if types and types[layer] == "sliding_attention" else None


def _head_dim(model) -> int:
    return getattr(model.config, "head_dim", None) or model.config.hidden_size // model.config.num_attention_heads


@torch.no_grad()
def streaming_nll(model, ids: torch.Tensor, policy, detected=None) -> torch.Tensor:
    """The eviction reference: token-by-token NLL with a cache rebuilt, per layer, from only the visible entries.

    Before each token a fresh cache holds only the keys/values ``policy`` lets that query see (and, on
    the model's own sliding-window layers, only those inside its window), each computed when its token
    was fed: eviction as a streaming server does it.

    Args:
        model: a causal LM (Llama, Qwen2 or Gemma 3 layout), eval mode.
        ids: token ids ``[1, S]``.
        policy: an eviction policy (``lab.stream.policies.parse_policy``).
        detected: the detector's ranking of positions, for ``detected:`` policies.

    Returns:
        NLL in nats of tokens 1..S-1, float32 ``[S - 1]``.
    """
    from transformers import DynamicCache

    from lab.attention_mask import sliding_visibility
    from lab.stream.policies import policy_visibility

    n_layers = model.config.num_hidden_layers
    s = ids.shape[1]
    keys: list[list[torch.Tensor]] = [[] for _ in range(n_layers)]  # per layer, per position [1, Hkv, 1, D]
    values: list[list[torch.Tensor]] = [[] for _ in range(n_layers)]
    nll = []
    for q in range(s):
        cache = DynamicCache()
        lengths = {}
        for layer in range(n_layers):
            past = torch.arange(q)
            vis = policy_visibility(policy, torch.tensor([q]), past, detected)[0]
            sw = _layer_window(model, layer)
            if sw is not None:
                vis = vis & sliding_visibility(torch.tensor([q]), past, sw)[0]
            idx = torch.nonzero(vis).flatten().tolist()
            kv_dim = (1, model.config.num_key_value_heads, 0, _head_dim(model))
            k = torch.cat([keys[layer][i] for i in idx], dim=2) if idx else torch.zeros(kv_dim)
            v = torch.cat([values[layer][i] for i in idx], dim=2) if idx else torch.zeros(kv_dim)
            cache.update(k, v, layer)
            lengths[sw is not None] = len(idx) + 1
        impl = model.config._attn_implementation

        def ones(n):
            keep = torch.ones(1, 1, 1, n, dtype=torch.bool)
            return keep if impl == "sdpa" else torch.zeros(1, 1, 1, n)

        if getattr(model.config, "layer_types", None) and "sliding_attention" in model.config.layer_types:
            mask = {"full_attention": ones(lengths.get(False, 1)), "sliding_attention": ones(lengths.get(True, 1))}
        else:
            mask = ones(lengths[False])
        out = model(input_ids=ids[:, q:q + 1], position_ids=torch.tensor([[q]]), cache=cache, use_cache=True,
                    attention_mask=mask)
        for layer in range(n_layers):
            keys[layer].append(cache.layers[layer].keys[:, :, -1:].clone())
            values[layer].append(cache.layers[layer].values[:, :, -1:].clone())
        if q + 1 < s:
            logits = out.logits[0, -1].float()
            nll.append(-torch.log_softmax(logits, -1)[ids[0, q + 1]])
    return torch.stack(nll)


def packaged_sink_profile_files() -> list:
    """The shipped ``lab/sinks/calibrations/<profile>.json`` files (``choice.json`` left out), sorted by path."""
    from lab.sinks import profiles

    return sorted(p for p in profiles.calibration_dir().glob("*.json") if p.name != profiles.CHOICE_FILE)


def warped_reference_probs(log_p_row: torch.Tensor, temperature: float, top_k: int | None,
                           top_p: float) -> torch.Tensor:
    """The distribution a token is sampled from, written independently of transformers and lab.sampling:
    temperature, then keep the ``top_k`` largest, then the smallest prefix (by descending probability)
    whose mass reaches ``top_p``.

    Args:
        log_p_row: log-probs (or logits) of one position ``[V]``, float64 for a reference.
        temperature: > 0.
        top_k: tokens kept, or None for all.
        top_p: nucleus mass in (0, 1]; 1 keeps all.

    Returns:
        Probabilities ``[V]``, zero outside the kept set.
    """
    logits = log_p_row / temperature
    keep = torch.ones_like(logits, dtype=torch.bool)
    if top_k is not None:
        keep &= logits >= logits.topk(top_k).values[-1]
    probs = torch.softmax(logits.masked_fill(~keep, float("-inf")), -1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(descending=True)
        mass_before = sorted_p.cumsum(0) - sorted_p
        nucleus = torch.zeros_like(keep)
        nucleus[order] = mass_before < top_p
        probs = torch.softmax(logits.masked_fill(~(keep & nucleus), float("-inf")), -1)
    return probs


def bench_method(gamma: int | None = None, *, tokens_per_s=(101.23, 123.45, 134.56), alpha: float = 0.8,
                 adaptive: str | None = None, policy: str | None = None, per_repeat: dict | None = None,
                 **figures):
    """A :class:`lab.bench.results.MethodFigures` for renderers and choosers: speculative when ``gamma``
    is given (every float figure 1.0 unless in ``figures``); ``per_repeat``: ``{figure: median}``."""
    import dataclasses

    from lab.bench.results import MethodFigures, SpeculativeFigures, Spread

    spec = None
    if gamma is not None:
        floats = {f.name: 1.0 for f in dataclasses.fields(SpeculativeFigures) if f.type == "float"}
        spec = SpeculativeFigures(**{**floats, "alpha": alpha, **figures}, gamma=gamma, adaptive=adaptive,
                                  gamma_policy=policy, n_drafted_tested=10, n_accepted=8, n_rounds=3,
                                  accepted_length_histogram=[0] * (gamma + 1), speedup_theory_flops=None,
                                  speedup_theory_time_ratio=None)
    return MethodFigures(tokens_per_s=Spread(*tokens_per_s), n_runs=2, n_tokens=64,
                         same_tokens_as_lab_target_loop=True,
                         per_repeat={k: Spread(v, v, v) for k, v in (per_repeat or {}).items()}, speculative=spec)


def bench_result(methods: dict, **fields):
    """A :class:`lab.bench.results.BenchResult` holding ``methods`` (the rest placeholders unless in ``fields``)."""
    from lab.bench.results import BenchResult

    base = dict(config=None, draft="early-exit:24", mean_prompt_tokens=8.0, flops_context=40,
                target_flops_per_token=1e6, target_step_s=0.01, comparisons=(), assisted_errors={}, by_group={},
                runs=())
    return BenchResult(methods=methods, **{**base, **fields})


def entropy_step(**fields) -> dict:
    """One step of a ``lab entropy`` report.json (:class:`lab.kinds.entropy.Step`): placeholders unless in
    ``fields``."""
    base = {"position": 0, "token_id": 0, "token_text": "a", "entropy_bits": 1.0, "normalized_entropy": 0.1,
            "varentropy_bits2": 1.0, "sampled_entropy_bits": 0.0, "sampled_normalized_entropy": 0.0,
            "chosen_prob": 0.5, "bucket": "confident", "alternatives": []}
    return {**base, **fields}


def entropy_report(steps=(), summary=None, **fields) -> dict:
    """A whole ``lab entropy`` report.json (:class:`lab.kinds.entropy.Report`) holding ``steps``: placeholders unless
    in ``fields``; ``summary`` holds the summary's figures that are not placeholders (its means None)."""
    steps = list(steps)
    text = "".join(s["token_text"] for s in steps)
    base_summary = {"n_steps": len(steps), "stop_reason": "eos", "mean_entropy_bits": None, "max_entropy_bits": None,
                    "var_entropy_bits": None, "mean_varentropy_bits2": None, "mean_sampled_entropy_bits": None,
                    "elapsed_s": 1.0, "tokens_per_s": None}
    base = {"kind": "entropy", "prompt": "p", "system": None, "messages": [{"role": "user", "content": "p"}],
            "prompt_ids": [1, 2], "settings": {"max_new_tokens": 64, "temperature": 0.0, "top_p": 1.0, "top_k": None,
                                               "seed": None, "top_alternatives": 5},
            "seed": None, "model": model_json(), "device": "cpu", "dtype": "float32", "runtime": "torch",
            "runtime_source": "default", "vocab_size": 49152, "environment": environment_json(),
            "summary": {**base_summary, **(summary or {})}, "text": text,
            "new_token_ids": [s["token_id"] for s in steps], "stop_reason": "eos", "steps": steps}
    return {**base, **fields}


def speculate_round(**fields) -> dict:
    """One round of a ``lab speculate`` report.json (:class:`lab.kinds.speculate.Round`): placeholders (one drafted
    token, kept, then a bonus) unless in ``fields``."""
    base = {"round": 0, "proposed": [5], "n_accepted": 1, "next_token": 6, "next_kind": "bonus", "stop_reason": "gamma",
            "draft_entropies": [1.0], "draft_normalized_entropies": [0.1], "accepted_mask": [True],
            "tested_mask": [True], "draft_time_s": 0.1, "verify_time_s": 0.1, "n_draft_forwards": 1,
            "prefill_positions": 0, "target_probs": [], "draft_probs": [], "draft_source": ""}
    return {**base, **fields}


def speculate_report(rounds=(), acceptance=None, settings=None, **fields) -> dict:
    """A whole ``lab speculate`` report.json (:class:`lab.kinds.speculate.Report`) holding ``rounds``: placeholders
    unless in ``fields``; ``acceptance`` and ``settings`` hold the figures that are not placeholders."""
    rounds = list(rounds)
    tokens = [t for r in rounds for t in r["proposed"][:r["n_accepted"]] + ([r["next_token"]] if r["next_token"]
                                                                              is not None else [])]
    base_acceptance = {"alpha": None, "tau": None, "n_rounds": len(rounds), "n_drafted": 0, "n_drafted_tested": 0,
                       "n_accepted": 0, "expected_tokens_per_round_at_alpha": None, "accepted_length_histogram": [],
                       "all_rounds_histogram": [], "geometric_expected": [], "geometric_chi2": None,
                       "geometric_p_value": None, "tokens": len(tokens), "tokens_per_s": None, "prefill_time_s": 0.1,
                       "draft_time_s": 0.1, "verify_time_s": 0.1, "overhead_time_s": 0.0, "total_time_s": 0.3,
                       "stopped_by": "eos"}
    base_settings = {"draft": "early-exit:12", "gamma": 4, "adaptive": None, "draft_dtype": None, "dynamic": None,
                     "draft_setup": {"draft_dtype": None, "gamma": 4, "adaptive": None, "dynamic": None,
                                     "sources": {}, "notes": []},
                     "max_new_tokens": 64, "sampling": {"temperature": 0.0, "top_k": None, "top_p": 1.0}, "seed": 1,
                     "runtime": "torch", "runtime_source": "default"}
    base = {"kind": "speculate", "prompt": "p", "system": None, "messages": [{"role": "user", "content": "p"}],
            "prompt_ids": [1, 2], "settings": {**base_settings, **(settings or {})}, "model": model_json(),
            "environment": environment_json(), "acceptance": {**base_acceptance, **(acceptance or {})}, "draft_cost": None,
            "text": "answer", "new_token_ids": tokens, "rounds": rounds, "per_token": [], "token_texts": {}}
    return {**base, **fields}


def edit_at(where: str, value):
    """An edit of a valid JSON value, for hostile variants of a file: ``where`` is ``"key"`` or
    ``"key/sub/..."``; ``value`` ``...`` deletes that key. The returned function changes its argument."""
    def edit(data):
        *parents, last = where.split("/")
        node = data
        for key in parents:
            node = node[key]
        if value is ...:
            del node[last]
        else:
            node[last] = value
        return data
    return edit


def write_tuned_setup(profile, draft, setup, machine, measured):
    """``lab bench-tune``'s file (:data:`lab.tuning.DRAFT_SETUP`): ``setup`` for ``profile``, measured with
    ``draft`` on ``machine``."""
    from lab.tuning import DRAFT_SETUP, write_tuned

    return write_tuned(DRAFT_SETUP, profile, {"draft": draft, "setup": setup.as_dict()}, machine, measured)


def read_tuned_setup(profile, draft, machine):
    """``(set-up, read)``: the tuned :class:`~lab.speculative.setups.DraftSetup` for ``profile`` and ``draft`` on
    ``machine`` (None: no file, or ignored) and :func:`lab.tuning.read_tuned`'s answer."""
    from lab.speculative.setups import DraftSetup
    from lab.tuning import DRAFT_SETUP, read_tuned

    got = read_tuned(DRAFT_SETUP, profile, machine, match={"draft": draft})
    return (DraftSetup(**got.data["setup"]) if got.data is not None else None), got


def without_seconds(value):
    """A report's JSON ``value`` without its wall-clock fields (every ``seconds`` key, at any depth), for
    comparing two runs of one experiment."""
    if isinstance(value, dict):
        return {k: without_seconds(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [without_seconds(v) for v in value]
    return value


def report_dirs(root) -> list:
    """The report directories in a reports root, by name: the visible folders (the root also holds the
    experiment log, ``index.html``, and a run in progress its hidden staging folder)."""
    from pathlib import Path

    return sorted((p for p in Path(root).iterdir() if p.is_dir() and not p.name.startswith(".")), key=lambda p: p.name)


def cli_exit(argv: list[str]) -> int:
    """``lab ARGV``'s exit code, argparse's own refusals (an unknown flag, a bad choice: ``SystemExit(2)``) included."""
    from lab import cli

    try:
        return cli.main(argv)
    except SystemExit as exc:
        return int(exc.code)


def sinks_report(tokens: list[str], roles: list[str], received: list[float], is_sink: list[bool],
                 **analysis) -> dict:
    """A whole ``lab sinks`` report.json (:class:`lab.kinds.sinks.Report`) over these positions, two layers of
    one head each and no sink in any layer; ``analysis`` replaces any of its analysis' fields."""
    n = len(tokens)
    full = {"n_tokens": n, "threshold": 0.35, "epsilon": 0.3, "min_observers": 2, "statistic": "sink_rate",
            "threshold_source": "given", "calibrated_for": None, "calibration_file": None, "context_health": 4.25,
            "context_health_measure": "relative_entropy_for_length", "context_health_invalid": None,
            "content_sink_health": 10.0, "position0_share": received[0], "layer_levels": [],
            "layer_sinks": [[], []], "structural": [i for i, r in enumerate(roles) if r != "content"],
            "structural_sinks": [i for i, (r, s) in enumerate(zip(roles, is_sink)) if s and r != "content"],
            "content_sinks": [i for i, (r, s) in enumerate(zip(roles, is_sink)) if s and r == "content"],
            "sink_heads": [], "input_ids": list(range(n)), "tokens": tokens, "roles": roles, "received": received,
            "score": [0.8 if s else 0.0 for s in is_sink], "z": [0.0] * n,
            "sink_rate": [0.8 if s else 0.0 for s in is_sink], "is_sink": is_sink, "observed": [True] * n,
            "per_head_shape": [2, 1, n], "per_head": None}
    return {"kind": "sinks", "prompt": "fox", "system": None, "messages": [{"role": "user", "content": "fox"}],
            "model": model_json(), "environment": environment_json(), "analysis": {**full, **analysis}}


def bench_method_json(gamma: int | None = None, **figures) -> dict:
    """A method of a bench's ``report.json`` (:class:`lab.kinds.bench.Method`, or with ``gamma``
    :class:`lab.kinds.bench.SpeculativeMethod`), whole: every figure 1.0 and every count 1 unless in ``figures``."""
    import dataclasses

    from lab.kinds.bench import Method, SpeculativeMethod

    spread = {"min": 1.0, "median": 1.0, "max": 1.0}
    out = {"tokens_per_s": spread, "n_runs": 1, "n_tokens": 1, "same_tokens_as_lab_target_loop": True,
           "per_repeat": {}}
    if gamma is not None:
        plain = {f.name for f in dataclasses.fields(Method)}
        out.update({f.name: 1 if f.type == "int" else 1.0 for f in dataclasses.fields(SpeculativeMethod)
                    if f.name not in plain})
        out.update({"gamma": gamma, "adaptive": None, "gamma_policy": None,
                    "accepted_length_histogram": [0] * (gamma + 1)})
    return {**out, **figures}


def bench_report_json(methods: dict, **fields) -> dict:
    """A whole ``lab bench`` ``report.json`` (:class:`lab.kinds.bench.Report`) holding ``methods`` (of
    :func:`bench_method_json`), the rest placeholders unless in ``fields``."""
    config = {"gammas": [2], "adaptive": [], "max_new_tokens": 8, "repeats": 1, "assisted": False, "warmup_tokens": 2,
              "dynamic": [], "draft_dtypes": [], "prompt_lookup": False, "methods": [],
              "sampling": {"temperature": 0.0, "top_k": None, "top_p": 1.0}, "seed": 0, "dtype_sweep": False,
              "no_cache": False, "lab_default": False}
    base = {"kind": "bench", "model": model_json(), "draft": "early-exit:24",
            "prompts": ["p"], "prompt_groups": ["short"], "humaneval": "none", "torch_threads": 1,
            "environment": environment_json(),
            "draft_cost": None, "config": config, "mean_prompt_tokens": 8.0, "flops_context": 40,
            "target_flops_per_token": 1e6, "target_step_s": 0.01, "methods": methods, "comparisons": [],
            "assisted_errors": {}, "by_group": {}, "runs": [], "machine_load": None}
    return {**base, **fields}


def stream_policy_row(policy: str, kind: str, budget: int | None, **figures) -> dict:
    """One row of a ``lab stream`` report's ``policies`` in a run with dense (:class:`lab.kinds.stream.PolicyToDense`):
    made-up figures unless in ``figures``."""
    row = {"policy": policy, "kind": kind, "budget": budget, "ppl": 20.0, "ppl_low": 18.0, "ppl_high": 22.0,
           "n_chunks": 2, "last_target": 287, "n_targets_ppl": 32, "n_scored": 287, "ppl_all_targets": 19.0,
           "wall_s": 1.0, "peak_rss_mb": 200.0, "ratio_to_dense": 1.0, "ratio_low": 1.0, "ratio_high": 1.0}
    return {**row, **figures}


def stream_test(name: str, **figures) -> dict:
    """One of a ``lab stream`` report's ``tests`` (:class:`lab.kinds.stream.PairedTest`), made-up figures unless in
    ``figures``."""
    return {"name": name, "a": "window:252", "b": "sinks:4+252", "n_pairs": 2, "n_nonzero": 2, "n_a_higher": 2,
            "median_diff": 0.5, "statistic": 3.0, "p_value": 0.25, "alpha": 0.01, "reject": False, **figures}


def stream_report(**parts) -> dict:
    """A whole ``lab stream`` report.json (:class:`lab.kinds.stream.Report`, with its kind and format), made-up
    figures; ``parts`` replace its top-level keys (``policies``, ``tests``, ``recompute_check`` ...)."""
    machine = {"load_average": [0.5, 0.5, 0.5], "cpu_count": 2, "torch_threads": 1, "busy": False}
    settings = {"n_tokens": 320, "chunk_tokens": 16, "detect_tokens": 32, "recompute_every": 16, "recompute_batch": 16,
                "acceptance": False, "prompt_tokens": 1024, "max_new_tokens": 32, "gamma": 4, "temperature": 1.0,
                "seed": 0, "draft": None, "draft_weights": "float32", "calibration": None,
                "policies": ["dense", "window:252"], "eval_start": 252}
    report = {"kind": "stream", "format": 1, "model": model_json(), "environment": environment_json(),
              "text": {"source": "t.txt", "sha256": "0" * 64, "n_tokens": 3, "input_ids": [1, 2, 3]},
              "settings": settings,
              "detection": {"n_tokens": 32, "threshold": 0.02, "calibration_file": None, "flagged": [0], "ranked": [0],
                            "score_first_32": [0.5, None]},
              "policies": [stream_policy_row("dense", "dense", None), stream_policy_row("window:252", "window", 252)],
              "tests": [], "recompute_check": None, "acceptance": [],
              "benchmark": {"before": machine, "after": machine, "busy": False, "scoring_wall_s": 2.0,
                            "detect_wall_s": 0.1, "acceptance_wall_s": 0.0, "peak_rss_beyond_model_mb": 200.0,
                            "rss_mb_at_end": None}}
    return {**report, **parts}
