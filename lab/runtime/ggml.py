"""The decode core on llama.cpp's kernels: a GGUF model behind the interface the lab's loops call.

The lab's loops (:func:`lab.decode.generate`, :func:`lab.speculative.loop.speculative_generate`,
:class:`lab.speculative.drafts.ModelDraft`) call a model as transformers does,
``model(input_ids=[1, T], cache=cache, use_cache=True, logits_to_keep=k).logits`` ->
``[1, k, V]``, and keep a KV cache with ``get_seq_length()`` and ``crop(-n)``. A
:class:`GgmlModel` answers the same calls with one ``llama_decode`` of a batch of T tokens
on the GGUF file's own quantized weights, asking logits only for the last k positions; its
:class:`GgmlCache` is the context's KV memory for sequence 0, rolled back with
``llama_memory_seq_rm``. Everything the lab is for stays in the lab's code: the sampling
filter, accept / reject and residual resampling, gamma policies, entropy and acceptance
statistics. Attention weights do not leave llama.cpp, so attention capture, sinks, health
and the stream run on torch only (:data:`TORCH_ONLY`).

The binding is llama-cpp-python's own ``llama_cpp`` package and the libraries are built
from the same pinned sdist and the same compile as the peer binaries (``make peer``,
:mod:`lab.runtime.build`): ``<cache>/llama.cpp/<version>/python``. It is imported from
there, never from whatever ``llama_cpp`` a user's environment may hold.

Shapes: T = positions fed in one pass, V = vocabulary size (the GGUF's token count).
Batch size 1 throughout; logits are float32 on the CPU.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from lab.models.source import ModelSource, register_source

RUNTIMES = ("torch", "llama.cpp")
TORCH_ONLY = "attention capture, sinks, context health and the stream need attention weights and run on torch only"


class RuntimeUnavailableError(ValueError):
    """The ggml runtime is not built or cannot load (a ValueError: the CLI prints one line, exit 2)."""


class RuntimeNotBuiltError(RuntimeUnavailableError):
    """The ggml runtime was never built here (no install, no manifest): ``make peer`` builds it."""


def check_runtime(runtime: Any) -> str:
    """Return ``runtime`` if it is one of :data:`RUNTIMES`, else raise ``ValueError`` naming them."""
    if runtime not in RUNTIMES:
        raise ValueError(f"--runtime {runtime!r}: choose one of {', '.join(RUNTIMES)}")
    return runtime


def binding_dir() -> Path:
    """Where ``make peer`` puts the binding: ``<cache>/llama.cpp/<version>/python``."""
    from lab.runtime.build import PYTHON_DIR, BuildConfig

    return BuildConfig().install_dir / PYTHON_DIR


_BINDING: Any = None
_LOG_CALLBACK: Any = None  # kept alive: llama.cpp holds the pointer


def binding() -> Any:
    """The ``llama_cpp.llama_cpp`` module of the pinned build, imported once, with llama.cpp's log silenced.

    Raises:
        RuntimeUnavailableError: the build is not installed (:class:`RuntimeNotBuiltError`: run ``make peer``), is
            damaged (its
            manifest does not match its files, a library or the binding does not import: "does
            not load ... run `make peer` again", which rebuilds it), or a different
            ``llama_cpp`` was imported first in this process.
        MemoryError: the libraries could not be mapped (``ulimit -v``).
    """
    global _BINDING, _LOG_CALLBACK
    if _BINDING is not None:
        return _BINDING
    from lab.runtime.build import MANIFEST, BuildConfig, installed

    root = binding_dir()
    complete = installed(BuildConfig().install_dir) is not None
    if not complete and (root.parent / MANIFEST).exists():
        raise RuntimeUnavailableError(f"the llama.cpp runtime in {root.parent} does not load (its manifest {MANIFEST} "
                                      "does not parse, or does not match the files there or this machine's build "
                                      "flags): run `make peer` again")
    if not complete:
        raise RuntimeNotBuiltError(f"the llama.cpp runtime is not built ({root.parent} has no complete install); "
                                      "run `make peer` (once, about 15 minutes on 2 cores)")
    loaded = sys.modules.get("llama_cpp")
    if loaded is not None and Path(loaded.__file__).resolve().parent != (root / "llama_cpp").resolve():
        raise RuntimeUnavailableError(f"another llama_cpp ({loaded.__file__}) is already imported; the lab's runtime "
                                      f"needs the pinned build in {root}")
    os.environ.pop("LLAMA_CPP_LIB_PATH", None)  # the binding's own lib/ folder, built with it
    sys.path.insert(0, str(root))
    try:
        module = importlib.import_module("llama_cpp.llama_cpp")
        callback = module.llama_log_callback(lambda level, text, data: None)
        module.llama_log_set(callback, ctypes.c_void_p(0))
        module.llama_backend_init()
    except Exception as exc:  # a damaged install fails in any way: a library's bytes, a cut binding, ...
        _forget_binding()
        raise _not_loading(root, exc) from exc
    finally:
        sys.path.remove(str(root))
    _LOG_CALLBACK, _BINDING = callback, module
    return module


def _forget_binding() -> None:
    """Drop a half-imported binding from ``sys.modules``, so that a second try imports it afresh."""
    for name in [n for n in sys.modules if n == "llama_cpp" or n.startswith("llama_cpp.")]:
        del sys.modules[name]


def _not_loading(root: Path, exc: Exception) -> Exception:
    """The error for a binding that does not import: memory exhausted (``ulimit -v``) stays a
    ``MemoryError`` the CLI reports as such; anything else is a damaged install, a one-line
    :class:`RuntimeUnavailableError` that says to build it again."""
    detail = " ".join(str(exc).split()) or "no detail given"
    lowered = detail.lower()
    if (isinstance(exc, MemoryError) or "failed to map segment" in lowered
            or ("cannot allocate memory" in lowered and "static tls" not in lowered)):  # TLS: no shortage of memory
        return MemoryError(f"loading the llama.cpp runtime in {root}: {detail}")
    return RuntimeUnavailableError(f"the llama.cpp runtime in {root} does not load ({type(exc).__name__}: {detail}): "
                                   "run `make peer` again (it checks the install and builds it anew)")


def _load_failed(message: str) -> Exception:
    """llama.cpp says only that a load failed: under an address-space limit (``ulimit -v``) that is
    almost always memory (a ``MemoryError`` the CLI reports as out of memory), else a bad file
    (``ValueError``)."""
    from lab.machine import address_space_limit

    if address_space_limit() is not None:
        return MemoryError(f"{message}, under an address-space limit")
    return ValueError(message)


@dataclass
class _Output:
    logits: torch.Tensor  # [1, k, V]


class GgmlCache:
    """The KV memory of a :class:`GgmlModel`'s context (sequence 0), as the decode core sees a cache.

    Holds positions ``0 .. get_seq_length() - 1``. ``crop(-n)`` drops the last n with
    ``llama_memory_seq_rm``; a model has one live cache (a new one clears the memory).
    """

    layers: tuple = ()  # no per-layer state the decode core must check (lab.decode.enable_rollback)

    def __init__(self, model: "GgmlModel"):
        self.model = model
        self.length = 0

    def get_seq_length(self) -> int:
        return self.length

    def activate_past_recording(self) -> None:
        """Nothing to do: every position stays in the KV memory until removed."""

    def crop(self, n: int) -> None:
        """Keep ``get_seq_length() + n`` positions for ``n <= 0`` (transformers' convention), or the first n."""
        keep = self.length + n if n <= 0 else min(n, self.length)
        if keep < 0:
            raise ValueError(f"crop({n}) on a cache of {self.length} positions")
        if keep < self.length:
            self.model.remove_positions(keep)
        self.length = keep


class GgmlModel:
    """A GGUF model on llama.cpp's CPU kernels, called like a transformers causal LM by the lab's loops.

    Args:
        gguf: The GGUF file.
        config: The transformers config of the same model (vocabulary size, layer counts for
            the cost model); ``max_position_embeddings`` is set to the context allocated here.
        generation_config: The transformers generation config (EOS ids).
        n_threads: CPU threads for every pass (llama.cpp's ``n_threads`` and ``n_threads_batch``).
        n_ctx: KV positions to allocate (default: the model's training context).
        name: For reports.

    Attributes:
        runtime: ``"llama.cpp"`` (the decode core dispatches on it through :func:`is_ggml`).
        weight_type: The GGUF's file type as llama.cpp names it (``"Q4_1"``, ``"Q4_K - Medium"``).
        n_params: The parameters the file's tensors hold (the product of each tensor's shape, summed).
        device: ``cpu``.

    Raises:
        RuntimeUnavailableError: the runtime is not built.
        ValueError: the file does not load, or the model keeps a recurrent state (cannot roll back).
        MemoryError: the file or its context does not load under an address-space limit (``ulimit -v``).
    """

    runtime = "llama.cpp"

    def __init__(self, gguf: Path | str, config: Any, generation_config: Any = None, *, n_threads: int = 1,
                 n_ctx: int | None = None, name: str = ""):
        lib = binding()
        self.lib, self.name, self.gguf = lib, name or Path(gguf).name, Path(gguf)
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0
        self._model = lib.llama_model_load_from_file(str(gguf).encode(), params)
        if not self._model:
            raise _load_failed(f"llama.cpp could not load {gguf}")
        self._ctx = None
        if lib.llama_model_is_recurrent(self._model) or lib.llama_model_is_hybrid(self._model):
            self.close()
            raise ValueError(f"{gguf}: the model keeps a recurrent state, which cannot be rolled back after a "
                             "rejected draft token")
        vocab = lib.llama_model_get_vocab(self._model)
        self.n_vocab = int(lib.llama_vocab_n_tokens(vocab))
        self.n_ctx = int(n_ctx or lib.llama_model_n_ctx_train(self._model))
        self.n_threads = int(n_threads)
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = self.n_ctx
        cparams.n_batch = self.n_ctx  # one llama_decode takes any pass (llama.cpp splits it in ubatches)
        cparams.n_seq_max = 1
        cparams.n_threads = cparams.n_threads_batch = self.n_threads
        cparams.no_perf = True
        self._ctx = lib.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            self.close()
            raise _load_failed(f"llama.cpp could not make a context of {self.n_ctx} positions for {gguf}")
        self._memory = lib.llama_get_memory(self._ctx)
        self._batch = lib.llama_batch_init(self.n_ctx, 0, 1)
        self._batch_size = self.n_ctx
        # The file type alone: llama_model_desc would prefix the architecture and a size label llama.cpp picks
        # from the layer count ("llama 256M Q4_1" for SmolLM2-135M), which is not the model's size.
        ftype = lib.llama_ftype_name(lib.llama_model_ftype(self._model))
        self.weight_type = ftype.decode(errors="replace") if ftype else "unknown GGUF file type"
        self.n_params = int(lib.llama_model_n_params(self._model))
        self.dtype = self.weight_type
        self.device = torch.device("cpu")
        self.config = config
        self.config.max_position_embeddings = self.n_ctx
        self.generation_config = generation_config if generation_config is not None else SimpleNamespace(eos_token_id=None)
        self._live: GgmlCache | None = None
        self._placeholder = torch.empty(0)

    # -- what the lab's loops call -------------------------------------------------------------

    def parameters(self):
        """A placeholder tensor on the CPU, so device probes (``next(model.parameters()).device``) work."""
        yield self._placeholder

    def eval(self) -> "GgmlModel":
        return self

    def new_cache(self) -> GgmlCache:
        """An empty KV cache: clears the context's memory (a model has one live cache)."""
        self.lib.llama_memory_clear(self._memory, True)
        self._live = GgmlCache(self)
        return self._live

    def remove_positions(self, keep: int) -> None:
        if not self.lib.llama_memory_seq_rm(self._memory, 0, keep, -1):
            raise RuntimeError(f"llama.cpp refused to remove positions >= {keep} from the KV memory")

    def __call__(self, input_ids: torch.Tensor, cache: GgmlCache, use_cache: bool = True,
                 logits_to_keep: int = 1, **_: Any) -> _Output:
        """One ``llama_decode`` of ``input_ids`` (int64 ``[1, T]``) after the ``cache``'s positions.

        Returns:
            An object whose ``logits`` is float32 ``[1, k, V]``, k = ``logits_to_keep`` (0 = all T).

        Raises:
            ValueError: ``cache`` is not this model's live cache, or the pass runs past the context.
            RuntimeError: ``llama_decode`` failed.
        """
        if cache is not self._live:
            raise ValueError("the cache is not this model's live cache (a newer one replaced it)")
        ids = input_ids.reshape(-1).tolist()
        t = len(ids)
        start = cache.length
        if start + t > self.n_ctx:
            raise ValueError(f"{start + t} positions exceed the llama.cpp context of {self.n_ctx}")
        k = t if logits_to_keep in (0, None) else min(int(logits_to_keep), t)
        b = self._batch
        b.n_tokens = t
        for i, token in enumerate(ids):
            b.token[i] = token
            b.pos[i] = start + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = i >= t - k
        code = self.lib.llama_decode(self._ctx, b)
        if code != 0:
            raise RuntimeError(f"llama_decode returned {code} on a pass of {t} positions after {start}")
        cache.length = start + t
        ptr = self.lib.llama_get_logits(self._ctx)
        rows = np.ctypeslib.as_array(ptr, shape=(k, self.n_vocab)).copy()
        return _Output(torch.from_numpy(rows).unsqueeze(0))

    # -- life cycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Free the context, batch and model (also on garbage collection)."""
        lib = getattr(self, "lib", None)
        if lib is None:
            return
        if getattr(self, "_batch", None) is not None:
            lib.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "_ctx", None):
            lib.llama_free(self._ctx)
            self._ctx = None
        if getattr(self, "_model", None):
            lib.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the binding may be gone
            pass

    def __repr__(self) -> str:
        return f"GgmlModel({self.name!r}, {self.weight_type}, n_ctx={self.n_ctx}, threads={self.n_threads})"


def is_ggml(model: Any) -> bool:
    """Whether ``model`` runs on the llama.cpp runtime (a :class:`GgmlModel`)."""
    return getattr(model, "runtime", None) == "llama.cpp"


def load_ggml_model(name: str, *, n_threads: int | None = None, n_ctx: int | None = None,
                    tokenizer: Any = None) -> tuple[GgmlModel, Any]:
    """Load a GGUF profile on the llama.cpp runtime, with the lab's tokenizer for it.

    The tokenizer, config and EOS ids are the ones :func:`lab.models.loading.load_model` gives
    the same profile on torch (the same token ids in, the same vocabulary out); the weights are
    the GGUF file's own, never dequantized.

    Args:
        name: A GGUF profile (``smollm2``, ``gemma3-270m``, ``qwen2.5-coder``, ...).
        n_threads: CPU threads (default ``torch.get_num_threads()``, what the torch runtime uses).
        n_ctx: KV positions to allocate (default: the model's training context).
        tokenizer: The profile's tokenizer, when the caller has loaded it already (it takes a second of
            the command's start: a draft's was loaded to check its vocabulary); default: loaded here.

    Returns:
        ``(model, tokenizer)``; :func:`lab.models.source.model_source` gives :func:`ggml_source`'s record.

    Raises:
        ValueError: ``name`` is not a GGUF profile (a hub id or folder has no GGUF file to run).
        RuntimeUnavailableError: the runtime is not built.
        ModelUnavailableError: the profile's package is missing.
    """
    from transformers import AutoConfig, GenerationConfig

    from lab.models import cache as model_cache
    from lab.models.cache import cache_dir
    from lab.models.loading import check_model_name, gguf_path, is_gguf_model, load_tokenizer
    from lab.models.profiles import PROFILES

    check_model_name(name)
    if not is_gguf_model(name):
        raise ValueError(f"--runtime llama.cpp runs a GGUF profile ({', '.join(p for p in PROFILES if is_gguf_model(p))}); "
                         f"{name!r} has no GGUF file")
    binding()  # refuse before anything is joined or parsed
    profile = PROFILES[name]
    path = gguf_path(profile)
    cached = cache_dir() / profile.name
    if cached.exists() and model_cache.cache_problem(cached) is None:
        config = AutoConfig.from_pretrained(str(cached), local_files_only=True)
        try:
            generation = GenerationConfig.from_pretrained(str(cached), local_files_only=True)
        except OSError:
            generation = GenerationConfig()
    else:
        config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
        generation = GenerationConfig()
    tokenizer = load_tokenizer(name) if tokenizer is None else tokenizer
    if profile.eos_token_ids:
        generation.eos_token_id = list(profile.eos_token_ids)
    elif generation.eos_token_id is None:
        generation.eos_token_id = tokenizer.eos_token_id
    model = GgmlModel(path, config, generation, n_threads=n_threads or torch.get_num_threads(), n_ctx=n_ctx,
                      name=name)
    if model.n_vocab != int(config.vocab_size):
        vocab = model.n_vocab
        model.close()
        raise ValueError(f"{path.name}: llama.cpp reads {vocab} tokens, the config {config.vocab_size}; "
                         "the runtimes would disagree on token ids")
    register_source(model, ggml_source(name, model))
    return model, tokenizer


def ggml_source(name: str, model: GgmlModel) -> ModelSource:
    """The record of GGUF profile ``name`` loaded on llama.cpp as ``model``: the file ran on llama.cpp's kernels in
    its own quantization (``source`` says so, never "dequantized"), ``weights`` and ``dtype`` are its file type, and
    its size is ``parameters``, counted from its tensors (:attr:`GgmlModel.n_params`).

    Raises:
        KeyError: ``name`` is not a profile.
    """
    from lab.models.profiles import PROFILES

    return ModelSource(model=name, source=PROFILES[name].origin("llama.cpp"), profile=name, device="cpu",
                       dtype=model.weight_type, weights=model.weight_type, runtime="llama.cpp",
                       parameters=model.n_params)
