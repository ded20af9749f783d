"""The runtime a command decodes on (``--runtime``: torch or llama.cpp), chosen before any model loads, and
the steps that load on it.

The choice (:func:`resolve_runtime`) reads the typed flags, ``$LAB_RUNTIME``, the per-machine runtime tuning
file (:mod:`lab.tuning`) and whether ``make peer`` built llama.cpp (:mod:`lab.runtime.ggml`); its
:class:`RuntimeChoice` carries the line a command prints before loading and the ``runtime_source`` its report
records. It lives in the command layer, not in :mod:`lab.runtime`: it reads argparse namespaces and the
tuning file, and :mod:`lab.tuning` and the draft specs import :mod:`lab.runtime` themselves.

Imported while ``lab --help`` builds the parser, so it stays light: torch and the loaders are imported inside
the functions that run.
"""

from __future__ import annotations

import argparse
import enum
import os
from dataclasses import dataclass
from typing import Any


# When --runtime is not typed, a GGUF profile on the CPU runs on llama.cpp's kernels whenever `make peer` built
# them (the tuning file of `lab bench-tune-runtime`, where there is one for the machine, overrides); else on
# torch, with one line saying what building them gives. Measured on the lab's 2-core AMD EPYC (AVX-512 BF16, no
# AMX): SmolLM2 decodes in 7.3 ms a token on llama.cpp against 30 ms on torch float32, the Qwen pair's target
# 20.9 tok/s end to end against 13.5 on torch q4; the 2-core Intel Xeon class ranked them the same
# (docs/results.md, "The runtime chosen per machine").
RUNTIME_ENV = "LAB_RUNTIME"  # torch or llama.cpp: the default for this shell, in place of the tuning file and build
# The note torch runs with when the runtime is not built (a GGUF profile on the CPU, nothing typed that needs torch).
BUILD_HINT = ("llama.cpp's kernels run GGUF profiles 1.5-4x faster than torch on the CPUs measured; `make peer` "
              "builds them once (about 6 minutes on 2 idle cores), then they are the default")


def add_runtime_arg(p: argparse.ArgumentParser, torch_only: str | None = None) -> None:
    """``--runtime``; ``torch_only``: what reads attention weights on a command that runs on torch only
    (llama.cpp refused, :func:`refuse_runtime`)."""
    chosen = ("whose kernels run the lab's decode loop: torch (the transformers model; --weights, --dtype and "
              "--device apply) or llama.cpp (a GGUF profile's own file through the pinned build of `make peer`; "
              "lab.runtime.ggml) (default: for a GGUF profile on the CPU, the runtime lab bench-tune-runtime measured "
              "fastest on this machine, else llama.cpp where make peer built it; else torch)")
    refused = (f"runs on torch: {torch_only} read(s) attention weights, which llama.cpp does not return; llama.cpp "
               "is refused in one line")
    p.add_argument("--runtime", default=None, choices=("torch", "llama.cpp"), help=refused if torch_only else chosen)


class RuntimeSource(enum.Enum):
    """Where a run's runtime came from."""

    TYPED = "--runtime"  # the user typed --runtime
    TUNED = "tuned"  # the per-machine runtime tuning file (lab bench-tune-runtime)
    ENV = "$LAB_RUNTIME"  # the shell's default (RUNTIME_ENV); torch from it prints no line, the report records it
    DEFAULT = "default"  # neither: llama.cpp where built for a GGUF profile on the CPU, else torch


@dataclass(frozen=True)
class RuntimeChoice:
    """The runtime a run decodes on, and the weights its target loads in, chosen before any model loads.

    Attributes:
        runtime: ``"torch"`` or ``"llama.cpp"``.
        source: Where it came from.
        note: Why, when the source alone does not say it (``"tuned: <file> (...)"``, ``"default: torch, because
            ..."``); None for a typed ``--runtime`` and the plain torch default.
        weights: The target's linear-layer weights on torch: ``--weights``, or a tuned torch winner's in place of
            an untyped one.
    """

    runtime: str
    source: RuntimeSource
    note: str | None
    weights: str

    @property
    def said(self) -> str:
        """Where the runtime came from, as the terminal and the reports' ``runtime_source`` say it."""
        return self.source.value if self.note is None else self.note

    @property
    def line(self) -> str | None:
        """The line a command prints before loading; None for the plain torch default, which says nothing new."""
        if (self.source is RuntimeSource.DEFAULT and self.note is None) or (
                self.source is RuntimeSource.ENV and self.runtime == "torch"):
            return None
        return f"runtime: {self.runtime} ({self.said})"


def _torch_only_flags(args: argparse.Namespace) -> list[str]:
    """The flags typed that apply to the torch runtime only, as typed."""
    typed = {"--weights": getattr(args, "weights", "float32") != "float32" or getattr(args, "weights_typed", False),
             "--dtype": getattr(args, "dtype", None) is not None,
             "--device": getattr(args, "device", None) not in (None, "cpu"),
             "--draft-weights": getattr(args, "draft_weights", "float32") != "float32",
             "--draft-dtype": bool(getattr(args, "draft_dtype", None)),
             # --context is read from the decode's attention, which the llama.cpp runtime does not expose
             "--context": getattr(args, "context", None) is not None or getattr(args, "context_file", None) is not None}
    return [flag for flag, on in typed.items() if on]


def resolve_runtime(args: argparse.Namespace) -> RuntimeChoice:
    """The runtime for ``--runtime`` and the model, checked before any model loads; ``args`` is not changed.

    Typed, it is used (and llama.cpp checked). Untyped, a GGUF profile on the CPU runs what the per-machine
    runtime tuning file says (:func:`lab.tuning.read_tuned`; a torch winner's weights replace an
    untyped ``--weights``), else llama.cpp, unless a torch-only flag was typed or the runtime is not built
    (then torch, with :data:`BUILD_HINT` as its note); every other model or device runs torch.
    ``$LAB_RUNTIME`` (:data:`RUNTIME_ENV`: ``torch`` or ``llama.cpp``) replaces the tuning file and the build
    check as the default of a shell (the test tiers set ``torch``, so a test runs what it names).

    Raises:
        ValueError: ``--runtime llama.cpp`` for a model without a GGUF file, with a torch-only flag
            (``--weights``, ``--dtype``, ``--device``, ``--draft-weights``, ``--draft-dtype``), or
            before ``make peer`` built the runtime (one line naming it); ``$LAB_RUNTIME`` set to another value.
    """
    from lab.models.loading import is_gguf_model
    from lab.runtime.ggml import binding

    typed = getattr(args, "runtime", None)
    weights = getattr(args, "weights", "float32")
    if typed == "torch":
        return RuntimeChoice("torch", RuntimeSource.TYPED, None, weights)
    if typed is None:
        return _untyped_runtime(args, weights)
    if not is_gguf_model(args.model):
        raise ValueError(f"--runtime llama.cpp runs a GGUF profile's own file; {args.model!r} has none (use "
                         "--runtime torch)")
    typed_torch = _torch_only_flags(args)
    if typed_torch:
        raise ValueError(f"--runtime llama.cpp runs the GGUF file's own weights on the CPU; {', '.join(typed_torch)} "
                         f"{'applies' if len(typed_torch) == 1 else 'apply'} to --runtime torch only")
    binding()  # RuntimeUnavailableError (a ValueError): one line naming `make peer`
    return RuntimeChoice("llama.cpp", RuntimeSource.TYPED, None, weights)


def _untyped_runtime(args: argparse.Namespace, weights: str) -> RuntimeChoice:
    """:func:`resolve_runtime` without ``--runtime``: the tuned runtime where it applies and can run, else torch."""
    import torch

    from lab.models.devices import resolve_device
    from lab.models.loading import is_gguf_model
    from lab.tuning import RUNTIME, read_tuned, runtime_machine_key

    if not is_gguf_model(args.model) or resolve_device(getattr(args, "device", None)).type != "cpu":
        # the tuning compares CPU runtimes; a GPU (the default where there is one) is not
        return RuntimeChoice("torch", RuntimeSource.DEFAULT, None, weights)
    chosen = os.environ.get(RUNTIME_ENV, "").strip()
    if chosen:
        if chosen not in ("torch", "llama.cpp"):
            raise ValueError(f"${RUNTIME_ENV}={chosen!r} must be torch or llama.cpp (or unset)")
        if chosen == "torch":
            return RuntimeChoice("torch", RuntimeSource.ENV, None, weights)
        return _llama_cpp_if_it_runs(args, RuntimeChoice("llama.cpp", RuntimeSource.ENV,
                                                         f"${RUNTIME_ENV}=llama.cpp, built by make peer", weights))
    tuned = read_tuned(RUNTIME, args.model, runtime_machine_key(torch.get_num_threads()), any_threads=True)
    if tuned.data is None:  # no file applies: llama.cpp where it is built
        said = f"; {tuned.note}" if tuned.note else ""
        return _llama_cpp_if_it_runs(args, RuntimeChoice("llama.cpp", RuntimeSource.DEFAULT,
                                                         f"default: llama.cpp, built by make peer{said}", weights), said)
    if tuned.data["runtime"] == "torch":
        # The tuned representation, as if typed; a typed --weights (float32 too: the reference) or --dtype wins.
        tuned_weights = tuned.data["weights"]
        if tuned_weights != "float32" and not getattr(args, "weights_typed", False) and hasattr(args, "weights") \
                and getattr(args, "dtype", None) is None:
            note = f"tuned: {tuned.path} (torch with {tuned_weights} weights)"
            return RuntimeChoice("torch", RuntimeSource.TUNED, note, tuned_weights)
        return RuntimeChoice("torch", RuntimeSource.TUNED,
                             f"tuned: {tuned.path} (torch, {tuned_weights} weights measured fastest)", weights)
    note = f"tuned: {tuned.path}" + (f"; {tuned.note}" if tuned.note else "")
    return _llama_cpp_if_it_runs(args, RuntimeChoice("llama.cpp", RuntimeSource.TUNED, note, weights),
                                 " (tuned: llama.cpp)")


def _llama_cpp_if_it_runs(args: argparse.Namespace, runs: RuntimeChoice, said: str = "") -> RuntimeChoice:
    """``runs`` (a llama.cpp choice not typed), unless a torch-only flag was typed or the runtime does not load:
    then torch, its note saying why (with :data:`BUILD_HINT` when the runtime is simply not built), and ``said``
    (what else chose it, or a tuning file's note) after."""
    from lab.runtime.ggml import RuntimeNotBuiltError, binding

    def torch_because(why: str) -> RuntimeChoice:
        return RuntimeChoice("torch", RuntimeSource.DEFAULT, why, runs.weights)

    typed_torch = _torch_only_flags(args)
    if typed_torch:
        verb = "applies" if len(typed_torch) == 1 else "apply"
        return torch_because(f"default: torch, because {', '.join(typed_torch)} {verb} to torch only{said}")
    try:
        binding()
    except RuntimeNotBuiltError:
        return torch_because(f"default: torch{said}; {BUILD_HINT}")
    except ValueError as exc:  # built but damaged, or another llama_cpp imported: one line saying so
        return torch_because(f"default: torch, because {exc}{said}")
    return runs


def torch_unless_typed(choice: RuntimeChoice, why: str, typed_error: str) -> RuntimeChoice:
    """``choice`` on torch when llama.cpp cannot run what the command was asked for (``why``).

    A typed ``--runtime llama.cpp`` is refused with ``typed_error``; a tuned one (:func:`resolve_runtime`) gives
    way to torch, with a note saying ``why`` and which tuning file chose llama.cpp, since the user typed neither
    the runtime nor the flags llama.cpp would have to refuse.

    Raises:
        ValueError: ``typed_error``, for a typed ``--runtime llama.cpp``.
    """
    if choice.source is RuntimeSource.TYPED:
        raise ValueError(typed_error)
    return RuntimeChoice("torch", RuntimeSource.DEFAULT, f"default: torch, because {why} (llama.cpp was {choice.said})",
                         choice.weights)


def runtime_for_draft(choice: RuntimeChoice, draft_spec: str, kind: str) -> RuntimeChoice:
    """``choice``, unless it is llama.cpp and the draft cannot run there, before any model loads.

    llama.cpp runs prompt lookup and a GGUF profile's draft model; an early-exit draft borrows the target's
    torch layers, and another draft model has no GGUF file to run. Then :func:`torch_unless_typed`.

    Args:
        choice: :func:`resolve_runtime`'s choice.
        draft_spec: The draft in force (typed or the profile's own).
        kind: Its kind (:func:`lab.speculative.draft_specs.check_draft_spec`).

    Raises:
        ValueError: a typed ``--runtime llama.cpp`` with such a draft, naming ``--draft``.
    """
    from lab.models.loading import is_gguf_model
    from lab.speculative.draft_specs import auto_model

    if kind == "auto":  # prompt lookup, and a draft model if named: the model must be a GGUF profile on llama.cpp
        inner = auto_model(draft_spec)
        if inner is None:
            return choice
        draft_spec, kind = inner, "model"
    if choice.runtime != "llama.cpp" or kind == "prompt-lookup" or (kind == "model" and is_gguf_model(draft_spec)):
        return choice
    if kind == "early-exit":
        return torch_unless_typed(choice, f"the draft {draft_spec} runs the target's own torch layers",
                                  f"--draft {draft_spec}: an early-exit draft runs the target's own torch layers; on "
                                  "--runtime llama.cpp use a GGUF draft model or prompt-lookup")
    return torch_unless_typed(choice, f"the draft {draft_spec} has no GGUF file for llama.cpp to run",
                              f"--draft {draft_spec}: on --runtime llama.cpp a draft model runs from a GGUF profile's "
                              f"file; {draft_spec!r} has none (use a GGUF draft model or prompt-lookup)")


def load_on(model: str, runtime: str, weights: str, device: Any = "cpu", dtype: str | None = None,
            threads: int | None = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` on ``runtime``: llama.cpp runs a GGUF profile's own file on ``threads`` threads
    (default: torch's count); torch loads the model in ``weights`` and ``dtype`` on ``device``."""
    if runtime == "llama.cpp":
        import torch

        from lab.runtime.ggml import load_ggml_model

        return load_ggml_model(model, n_threads=threads or torch.get_num_threads())
    from lab.models.loading import load_model

    return load_model(model, device=device, dtype=dtype, weights=weights)


def print_runtime_line(err: Any, runtime: RuntimeChoice) -> None:
    """``runtime``'s line on stderr (:attr:`RuntimeChoice.line`) before a command loads, where it says something."""
    if runtime.line is not None:
        err.print(runtime.line, markup=False, highlight=False, soft_wrap=True)


def loading_status(args: argparse.Namespace, device: Any, runtime: RuntimeChoice) -> str:
    """The status line while ``--model`` loads on ``runtime`` (on ``device`` for torch)."""
    return f"loading {args.model} on {device if runtime.runtime == 'torch' else 'llama.cpp'}"


def load_target_step(err: Any, args: argparse.Namespace, device: Any, runtime: RuntimeChoice) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of ``--model`` on ``runtime`` (:func:`load_on`, in its weights and ``--dtype``),
    its line printed first (:func:`print_runtime_line`), under a status line."""
    print_runtime_line(err, runtime)
    with err.status(loading_status(args, device, runtime)):
        return load_on(args.model, runtime.runtime, runtime.weights, device, args.dtype)


def load_target_and_draft(args: argparse.Namespace, device: Any, draft_spec: str, err: Any,
                          runtime: RuntimeChoice | None = None, draft_dtype: Any = None) -> tuple[Any, Any, Any]:
    """The target (in ``runtime``'s weights) and the draft (``--draft-weights``, ``draft_dtype``) on ``runtime``,
    under a status line, a draft failure named as the draft's. ``runtime`` None: torch with ``--weights``, for the
    schedules that choose no runtime (lab bench-seed-tables, bench-tune)."""
    from lab.models.loading import ModelUnavailableError, as_draft_error
    from lab.speculative.draft_specs import make_draft

    runtime = runtime or RuntimeChoice("torch", RuntimeSource.DEFAULT, None, args.weights)
    with err.status(loading_status(args, device, runtime)):
        model, tokenizer = load_on(args.model, runtime.runtime, runtime.weights, device, args.dtype)
        try:
            draft = make_draft(model, draft_spec, target_tokenizer=tokenizer, weights=args.draft_weights,
                               dtype=draft_dtype)
        except ModelUnavailableError as exc:  # the draft model, not --model, is what failed to load
            raise as_draft_error(exc, draft_spec) from None
    return model, tokenizer, draft


def refuse_runtime(args: argparse.Namespace, command: str) -> None:
    """One line for a command whose measures need attention weights, asked for the llama.cpp runtime."""
    if getattr(args, "runtime", None) == "llama.cpp":
        from lab.runtime.ggml import TORCH_ONLY

        raise ValueError(f"lab {command} --runtime llama.cpp: {TORCH_ONLY}; use --runtime torch")
