"""Drafters from spec strings: what ``--draft`` and ``--draft-dtype`` name, checked and built.

A draft spec is ``"early-exit:N"`` (the target's first N layers:
:class:`~lab.speculative.self_draft.EarlyExitDraft`), ``"prompt-lookup"``
(:class:`~lab.speculative.drafts.PromptLookupDraft`), a model profile / path / hub
id (:func:`~lab.speculative.drafts.model_draft`, optionally cast per
:mod:`lab.speculative.per_pass`), or ``"auto"`` / ``"auto:M"``: per round no draft, prompt
lookup or the draft model M, by the costs measured as it runs
(:class:`~lab.speculative.auto.AutoDraft`). :func:`check_draft_spec` validates a spec without
building anything and :func:`check_draft` adds the draft's weights and whether its model
can be loaded, so the commands fail before any model loads;
:func:`make_draft` builds the drafter; :func:`resolve_draft_spec` picks the spec a command
runs. This module alone knows every kind of
drafter, so the kinds' own modules (:mod:`.drafts`, :mod:`.self_draft`,
:mod:`.per_pass`, :mod:`.auto`) import only downward.
"""

from __future__ import annotations

from typing import Any

from lab.decode import model_device
from lab.models.devices import parse_dtype
from lab.models import loading  # looked up at each call, so a test can stand in for the loaders
from lab.models.profiles import PROFILES
from lab.ranges import TooLarge, Underscored, read_number
from lab.runtime.ggml import is_ggml
from lab.safe_text import clipped
from lab.speculative.admission import check_tokenizer_vocab
from lab.speculative.auto import AutoDraft
from lab.speculative.drafts import Drafter, PromptLookupDraft, model_draft
from lab.speculative.draft_dtypes import PER_PASS_ALIAS
from lab.speculative.per_pass import parse_draft_dtype, per_pass_draft
from lab.speculative.self_draft import EarlyExitDraft


def resolve_draft_spec(draft: str | None, model: str) -> str:
    """The draft a command runs: ``--draft`` as typed, else the ``--model`` profile's own draft.

    Args:
        draft: The ``--draft`` value, or None (not given).
        model: The ``--model`` value (a profile name, a path or a hub id).

    Returns:
        A draft spec (see :func:`check_draft_spec`; not yet checked).

    Raises:
        ValueError: no ``draft`` and a model without a profile draft (naming ``--model`` and ``--draft``).
    """
    if draft is not None and not draft.strip():
        raise ValueError(f"--draft {draft!r} is empty: give a draft spec, or drop --draft for the profile's own")
    if draft:
        return draft
    profile = PROFILES.get(model)
    if profile is None or profile.draft is None:
        raise ValueError(f"--model {model!r} has no default draft; pass --draft")
    return profile.draft


def check_draft_spec(spec: str, num_layers: int | None = None) -> str:
    """Validate a draft spec without building anything, so commands fail before loading.

    Args:
        spec: ``"early-exit:N"``, ``"prompt-lookup"``, or a model profile / path / hub id.
        num_layers: The target's layer count, to check N; ``None`` skips that check.

    Returns:
        ``"early-exit"``, ``"prompt-lookup"`` or ``"model"``.

    Raises:
        ValueError: an empty or malformed spec, N out of range, or a model name that is
            neither a profile, a path nor a hub id.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"draft={spec!r} is empty; use auto, auto:M, early-exit:N, prompt-lookup or a model name")
    if spec.startswith("early-exit"):
        head, _, value = spec.partition(":")
        try:
            layers = read_number(value, integer=True)
        except TooLarge as exc:
            raise ValueError(f"draft={clipped(spec)}: N {exc}: it must be in [1, the target's layers - 1]") from None
        except Underscored as exc:
            raise ValueError(f"draft={clipped(spec)}: N {exc}") from None
        except ValueError:
            raise ValueError(f"draft={clipped(spec)} must be early-exit:N with an integer N") from None
        if head != "early-exit" or layers < 1:
            raise ValueError(f"draft={clipped(spec)} must be early-exit:N with N >= 1")
        if num_layers is not None and layers >= num_layers:
            raise ValueError(f"draft={clipped(spec)}: N must be in [1, {num_layers - 1}] (the target has {num_layers} "
                             "layers)")
        return "early-exit"
    if spec == "prompt-lookup":
        return "prompt-lookup"
    if spec == "auto" or spec.startswith("auto:"):
        inner = auto_model(spec)
        try:
            inner_kind = None if inner is None else check_draft_spec(inner, num_layers)
        except ValueError as exc:
            raise ValueError(f"draft={spec!r}: {exc}") from None
        if inner is not None and inner_kind != "model":
            raise ValueError(f"draft={spec!r}: auto:M takes a draft model M (auto alone drafts by prompt lookup "
                             "only); the rest it chooses per round")
        return "auto"
    try:
        loading.check_model_name(spec)
    except ValueError as exc:
        why = str(exc).removeprefix(f"model={spec!r} is ")  # `model=` would be read as --model at the CLI
        raise ValueError(f"draft={spec!r} is not auto, auto:M, early-exit:N, prompt-lookup or a model: {why}") from None
    return "model"


def auto_model(spec: str) -> str | None:
    """The draft model of an ``auto:M`` spec (``M``), or None for ``auto`` (:class:`lab.speculative.auto.AutoDraft`).

    Raises:
        ValueError: ``auto:`` with nothing after it.
    """
    if spec == "auto":
        return None
    inner = spec.removeprefix("auto:")
    if not inner.strip():
        raise ValueError(f"draft={spec!r}: auto:M needs a draft model M (or plain auto)")
    return inner


def check_draft(spec: str, weights: str = "float32") -> str:
    """Everything about ``--draft`` and ``--draft-weights`` that can be checked before any model loads.

    :func:`check_draft_spec`; for a draft model, that it can be loaded
    (:func:`lab.models.loading.check_draft_available`: a profile's package installed, a hub
    model cached); and that ``weights`` fits the draft: only a draft model has weights of its
    own, and ``q4`` keeps a GGUF file's own 4-bit codes, so it needs a GGUF profile.

    Args:
        spec: A draft spec, as :func:`check_draft_spec`.
        weights: The draft's linear-layer weights (``--draft-weights``): ``float32``,
            ``bfloat16``, ``int8`` or ``q4``.

    Returns:
        The draft's kind, as :func:`check_draft_spec`.

    Raises:
        ValueError: as :func:`check_draft_spec`; non-float32 weights for an early-exit or
            prompt-lookup draft; ``q4`` for a draft model that is not a GGUF profile.
        lab.models.loading.ModelUnavailableError: a draft model that cannot be loaded.
    """
    kind = check_draft_spec(spec)
    if kind == "auto":
        inner = auto_model(spec)
        if inner is None and weights != "float32":
            raise ValueError(f"--draft-weights={weights!r}: the draft {spec!r} runs no model (auto:M takes one)")
        if inner is not None:
            check_draft(inner, weights)
        return kind
    if weights != "float32":
        if kind != "model":
            why = "it shares the target's: use --weights" if kind == "early-exit" else "it runs no model"
            raise ValueError(f"--draft-weights={weights!r}: the {kind} draft {spec!r} has no weights of its own "
                             f"({why})")
        if weights == "q4" and not loading.is_gguf_model(spec):
            raise ValueError(f"--draft-weights q4 keeps a GGUF file's own 4-bit codes; the draft {spec!r} is not a "
                             "GGUF profile (use bfloat16 or int8 for it)")
    if kind == "model":
        loading.check_draft_available(spec)
    return kind


def make_draft(target: Any, spec: str, *, target_tokenizer: Any = None, device: Any = None,
               dtype: Any = None, weights: str = "float32") -> Drafter:
    """Build a drafter from a spec string.

    Args:
        target: The target model.
        spec: ``"early-exit:N"`` (the target's first N layers, shared weights),
            ``"prompt-lookup"`` (n-gram lookup, no model), or a model profile / path /
            hub id loaded with :func:`lab.models.loading.load_model` on the target's device.
        target_tokenizer: The target's tokenizer, to check a separate draft's
            vocabulary token by token (without it, the two ``vocab_size`` values
            must be equal).
        device: Where a draft model goes (default: the target's device).
        dtype: A draft model's dtype (``"bfloat16"``, ``torch.float32`` ...; default:
            the target's), or per pass shape: ``"PREFILL:STEP"`` / ``"per-pass"``
            (:class:`~lab.speculative.per_pass.PerPassDraft`). Early-exit drafts share
            the target's weights and dtype: asking another dtype for one is an error.

    Raises:
        ValueError: a malformed spec, N out of range, a dtype for a draft without its
            own weights, or a vocabulary mismatch
            (decided from the draft's tokenizer before its weights load). A draft
            model of any depth or cost is admitted; see ``.facts().cost`` on the result.
        lab.models.loading.ModelUnavailableError: a draft model that cannot be loaded.
    """
    kind = check_draft_spec(spec, int(target.config.num_hidden_layers))
    if kind == "auto":
        inner = auto_model(spec)
        model = None if inner is None else make_draft(target, inner, target_tokenizer=target_tokenizer, device=device,
                                                      dtype=dtype, weights=weights)
        return AutoDraft(int(target.config.vocab_size), model, runtime="llama.cpp" if is_ggml(target) else "torch")
    if is_ggml(target):
        return _ggml_draft(target, spec, kind, target_tokenizer)
    target_dtype = next(target.parameters()).dtype
    if isinstance(dtype, str) and (":" in dtype or dtype == PER_PASS_ALIAS):
        prefill_dtype, _ = parse_draft_dtype(dtype)
        if kind != "model":
            raise ValueError(f"draft dtype={dtype!r}: the {kind} draft {spec!r} has no weights of its own")
        return per_pass_draft(make_draft(target, spec, target_tokenizer=target_tokenizer, device=device,
                                         dtype=prefill_dtype, weights=weights), dtype)
    if dtype is not None and kind != "model":
        if parse_dtype(dtype, model_device(target)) != target_dtype:
            raise ValueError(f"draft dtype={dtype!r}: the {kind} draft {spec!r} has no weights of its own "
                             f"(it runs in the target's {str(target_dtype).removeprefix('torch.')})")
    if weights != "float32" and kind != "model":
        raise ValueError(f"draft weights={weights!r}: the {kind} draft {spec!r} has no weights of its own")
    if kind == "early-exit":
        return EarlyExitDraft(target, int(spec.partition(":")[2]))
    if kind == "prompt-lookup":
        return PromptLookupDraft(int(target.config.vocab_size))
    if target_tokenizer is not None:  # vocabulary from metadata, before any draft weights load
        try:
            check_tokenizer_vocab(target_tokenizer, loading.load_tokenizer(spec), spec)
        except loading.ModelUnavailableError:
            pass  # load_model below says why the draft is unavailable, in the same words

    dev = device or model_device(target)
    draft_model, draft_tok = loading.load_model(spec, device=dev, dtype=dtype if dtype is not None else target_dtype,
                                                weights=weights)
    if target_tokenizer is None:  # without both tokenizers only equal vocab_size passes
        return model_draft(target, draft_model, name=spec)
    return model_draft(target, draft_model, target_tokenizer=target_tokenizer, draft_tokenizer=draft_tok, name=spec)


def _ggml_draft(target: Any, spec: str, kind: str, target_tokenizer: Any) -> Drafter:
    """A drafter for a target on the llama.cpp runtime: a GGUF draft model on the same runtime, or prompt lookup.

    Raises:
        ValueError: an early-exit draft (it borrows the target's torch layers), or a draft model that is
            not a GGUF profile.
    """
    from lab.runtime.ggml import load_ggml_model

    if kind == "early-exit":
        raise ValueError(f"--draft {spec}: an early-exit draft runs the target's own torch layers; on --runtime "
                         "llama.cpp use a GGUF draft model (e.g. qwen2.5-coder-0.5b) or prompt-lookup")
    if kind == "prompt-lookup":
        return PromptLookupDraft(int(target.config.vocab_size))
    own = None
    if target_tokenizer is not None:
        own = loading.load_tokenizer(spec)
        check_tokenizer_vocab(target_tokenizer, own, spec)
    draft_model, draft_tok = load_ggml_model(spec, n_threads=target.n_threads, tokenizer=own)  # loaded once
    if target_tokenizer is None:
        return model_draft(target, draft_model, name=spec)
    return model_draft(target, draft_model, target_tokenizer=target_tokenizer, draft_tokenizer=draft_tok, name=spec)
