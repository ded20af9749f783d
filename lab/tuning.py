"""The draft set-up ``lab bench --tune`` measured best on this machine: written, read back, or ignored with a reason.

One JSON file per target profile in :func:`lab.user_dirs.tuning_dir`
(``draft-setup-<profile>.json``), holding the winning
:class:`~lab.speculative.setups.DraftSetup`, the draft it was measured with, the
machine it was measured on (:func:`machine_key`: CPU model and flags, torch version,
torch threads) and the measured figures of every candidate. A reader
(:func:`read_tuned`) uses the file only for the same profile, draft and machine key:

* another CPU model or other CPU flags: **foreign**, ignored;
* another thread count: foreign too, unless the command cannot choose its threads
  (``lab speculate`` has no ``--threads``): then the file is used and a note says with how
  many threads it was measured (``OMP_NUM_THREADS`` runs with as many);
* another torch version: **stale** (kernels change between versions), ignored;
* unreadable, not JSON, or outside its schema (:mod:`lab.speculative.tuning_schema`: every field of
  the set-up within what the command line accepts for its flag): **corrupt**, ignored;

each with one line naming the file and why, which the command shows and reports. The
file is written atomically (:func:`lab.runs.files.write_text_atomic`).

Nothing heavy at import (the torch version is read from the installed package's metadata),
so the commands can decide before any model loads.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from lab.machine import cpu_identity
from lab.models.profiles import PROFILES
from lab.schemas import FileSchemaError
from lab.speculative.tuning_schema import RUNTIME_TUNING_FORMAT, TUNING_FORMAT, load_runtime_tuning, load_tuning
from lab.speculative.setups import DraftSetup, ResolvedSetup, default_ggml_setup, default_setup, resolve_setup
from lab.runs.files import write_text_atomic
from lab.user_dirs import tuning_dir

MACHINE_FIELDS = ("cpu_model", "cpu_flags", "torch", "threads")


def machine_key(threads: int) -> dict[str, Any]:
    """What a tuned set-up is valid for: ``{"cpu_model", "cpu_flags", "torch", "threads"}``."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:  # pragma: no cover - the lab needs torch to decode at all
        torch_version = "none"
    return {**cpu_identity(), "torch": torch_version, "threads": int(threads)}


def _file_safe(profile: str) -> str:
    """The profile name as a file name's part (``owner/name`` and paths too)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", profile).strip("._") or "model"


def tuning_path(profile: str) -> Path:
    """``<tuning_dir>/draft-setup-<profile>.json`` (the profile name made file-safe)."""
    return tuning_dir() / f"draft-setup-{_file_safe(profile)}.json"


def write_tuned(profile: str, draft: str, setup: DraftSetup, machine: dict[str, Any],
                measured: dict[str, Any]) -> Path:
    """Write the winner for ``profile`` on ``machine``, replacing any earlier file.

    Args:
        profile: The target profile (``--model``).
        draft: The draft spec the set-up was measured with.
        setup: The winning set-up.
        machine: :func:`machine_key` of the measuring run.
        measured: The figures behind the choice (the winner's and every candidate's).

    Returns:
        The file's path.

    Raises:
        OSError: the tuning folder cannot be written.
    """
    data = {"format": TUNING_FORMAT, "profile": profile, "draft": draft, "setup": setup.as_dict(),
            "machine": machine, "measured": measured,
            "written": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    return write_text_atomic(tuning_path(profile), json.dumps(data, indent=2, allow_nan=False) + "\n")


@dataclass(frozen=True)
class TunedRead:
    """What :func:`read_tuned` found.

    Attributes:
        path: The file looked for.
        setup: The tuned set-up, or None (no file, or ignored).
        note: One line to show about a file that exists: why it was ignored, or, when it is
            used, how its measurement differs from this run (another thread count); else None.
        data: The file's contents when it was used.
    """

    path: Path
    setup: DraftSetup | None = None
    note: str | None = None
    data: dict[str, Any] | None = None


def _threads(n: int) -> str:
    return f"{n} torch thread" + ("" if n == 1 else "s")


def _differences(theirs: dict[str, Any], ours: dict[str, Any], *,
                 any_threads: bool) -> tuple[list[str], list[str]]:
    """(foreign reasons, stale reasons) between a file's machine key and this run's (threads left out
    when ``any_threads``)."""
    foreign, stale = [], []
    if theirs["cpu_model"] != ours["cpu_model"]:
        foreign.append(f"CPU {theirs['cpu_model']!r}, this one is {ours['cpu_model']!r}")
    if sorted(theirs["cpu_flags"]) != sorted(ours["cpu_flags"]):
        extra = sorted(set(theirs["cpu_flags"]) - set(ours["cpu_flags"]))
        lacking = sorted(set(ours["cpu_flags"]) - set(theirs["cpu_flags"]))
        parts = ([f"it had {' '.join(extra[:6])}"] if extra else []) + ([f"it lacked {' '.join(lacking[:6])}"] if lacking else [])
        foreign.append(f"other CPU flags ({', '.join(parts)})")
    if not any_threads and theirs["threads"] != ours["threads"]:
        foreign.append(f"{_threads(theirs['threads'])}, this run has {ours['threads']}")
    if theirs["torch"] != ours["torch"]:
        stale.append(f"torch {theirs['torch']}, this is torch {ours['torch']}")
    if "llama_cpp" in theirs and "llama_cpp" in ours and theirs["llama_cpp"] != ours["llama_cpp"]:
        stale.append(f"llama.cpp build {theirs['llama_cpp']}, this is {ours['llama_cpp']}")
    return foreign, stale


def _not_this_machine(theirs: dict[str, Any], ours: dict[str, Any], *, any_threads: bool, head: str,
                      command: str) -> str | None:
    """The note for a file measured on another machine (foreign) or with other software (stale), else None."""
    foreign, stale = _differences(theirs, ours, any_threads=any_threads)
    if foreign:
        return f"{head}: measured on another machine ({'; '.join(foreign + stale)}); re-run {command} here"
    if stale:
        return f"{head}: stale, measured with {'; '.join(stale)}; re-run {command}"
    return None


def read_tuned(profile: str, draft: str, machine: dict[str, Any], *, any_threads: bool = False) -> TunedRead:
    """The tuned set-up for ``profile`` and ``draft`` on ``machine``, or why there is none.

    Never raises for a bad file: a corrupt (:func:`lab.speculative.tuning_schema.load_tuning`), foreign or
    stale file is ignored and named in ``note`` (one line); no file at all gives neither a
    set-up nor a note.

    Args:
        profile: The ``--model`` value.
        draft: The draft spec in force.
        machine: :func:`machine_key` of this run.
        any_threads: The command cannot choose its thread count (it has no ``--threads``): a file
            measured with another count is used, with a note naming the count it was measured with.
    """
    path = tuning_path(profile)
    try:
        present = path.exists()
    except OSError:  # a folder that cannot be searched: the file is named below as unreadable
        present = True
    if not present:
        return TunedRead(path)
    head = f"ignoring the tuning file {path}"
    try:
        data = load_tuning(path)
    except FileSchemaError as exc:
        return TunedRead(path, note=f"{head}: corrupt ({exc.problem}); re-run lab bench --tune or delete it")
    if data["profile"] != profile or data["draft"] != draft:
        return TunedRead(path, note=f"{head}: tuned for --model {data['profile']} with draft {data['draft']}, "
                                    f"not {profile} with {draft}")
    theirs = data["machine"]
    refused = _not_this_machine(theirs, machine, any_threads=any_threads, head=head, command="lab bench --tune")
    if refused:
        return TunedRead(path, note=refused)
    note = None
    if theirs["threads"] != machine["threads"]:
        note = (f"the tuning file {path} was measured with {_threads(theirs['threads'])}, this run has "
                f"{machine['threads']}: its set-up runs all the same (OMP_NUM_THREADS={theirs['threads']} runs "
                "as it was measured)")
    return TunedRead(path, setup=DraftSetup(**data["setup"]), note=note, data=data)


def choose_setup(profile: str, draft_spec: str, flags: dict[str, Any], *, threads: int,
                 has_weights: bool, runtime: str = "torch") -> ResolvedSetup:
    """The draft set-up a command runs, and where each field came from (``lab speculate``).

    Field by field (:func:`lab.speculative.setups.resolve_setup`): the flags typed, else the
    set-up ``lab bench --tune`` measured best for this model, draft and machine
    (:func:`read_tuned`; a foreign, stale or corrupt file is ignored with a note; one measured
    with another thread count is used with a note, since ``lab speculate`` has no ``--threads``
    to match it), else the documented set-up for the profile's own draft
    (:func:`lab.speculative.setups.default_setup`), else the fallback.

    Args:
        profile: The ``--model`` value (a profile name, a path or a hub id).
        draft_spec: The draft in force.
        flags: Field -> the value typed or None (``draft_dtype``, ``gamma``, ``adaptive``; see
            :data:`lab.speculative.setups.SETUP_FIELDS`).
        threads: torch's thread count for this run (compared with the file's, for the note).
        has_weights: Whether the draft is a separate model (only such a draft has a dtype).
        runtime: ``"llama.cpp"``: no tuning file (``lab bench --tune`` measures torch set-ups);
            the documented llama.cpp set-up for the profile's own draft
            (:data:`lab.speculative.setups.DEFAULT_GGML_SETUPS`), else the fallback's gamma.

    Returns:
        A :class:`lab.speculative.setups.ResolvedSetup`, with the tuning file's note if any.

    Raises:
        ValueError: a typed draft dtype for a draft without weights of its own (naming ``--draft-dtype``).
    """
    known = PROFILES.get(profile)
    own_draft = known is not None and known.draft == draft_spec
    if runtime == "llama.cpp":
        base, source = default_ggml_setup(profile if own_draft else None)
        chosen = resolve_setup({"dynamic": None, **flags}, base=base, base_source=source, has_weights=False)
        chosen.sources["draft_dtype"] = "the GGUF file's own weights (llama.cpp runtime)"
        return chosen
    tuned = read_tuned(profile, draft_spec, machine_key(threads), any_threads=True)
    if tuned.setup is not None:
        base, source = tuned.setup, f"tuned: {tuned.path}"
    else:
        base, source = default_setup(profile if own_draft else None, has_weights)
    return resolve_setup({"dynamic": None, **flags}, base=base, base_source=source, has_weights=has_weights,
                         notes=(tuned.note,) if tuned.note else ())


# ---- the runtime: ``lab bench --tune-runtime`` writes it, commands read it when --runtime is not typed ----

def runtime_machine_key(threads: int) -> dict[str, Any]:
    """:func:`machine_key` plus the llama.cpp build the runtime candidates ran on (``llama_cpp``)."""
    from lab.runtime.build import SDIST_VERSION

    return {**machine_key(threads), "llama_cpp": SDIST_VERSION}


def runtime_tuning_path(profile: str) -> Path:
    """``<tuning_dir>/runtime-<profile>.json`` (the profile name made file-safe)."""
    return tuning_dir() / f"runtime-{_file_safe(profile)}.json"


def write_tuned_runtime(profile: str, runtime: str, weights: str, machine: dict[str, Any],
                        measured: dict[str, Any], report: str | None) -> Path:
    """Write the runtime (and weights) that ran ``profile``'s target fastest on ``machine``, replacing any earlier file.

    Args:
        profile: The GGUF profile (``--model``).
        runtime: ``"torch"`` or ``"llama.cpp"``.
        weights: The torch representation (:data:`lab.models.weights.WEIGHTS`), or ``"gguf"`` for llama.cpp.
        machine: :func:`runtime_machine_key` of the measuring run.
        measured: Every candidate's figures.
        report: The bench report that measured them.

    Returns:
        The file's path.

    Raises:
        OSError: the tuning folder cannot be written.
    """
    data = {"format": RUNTIME_TUNING_FORMAT, "profile": profile, "runtime": runtime, "weights": weights,
            "machine": machine, "measured": measured, "report": report,
            "written": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    return write_text_atomic(runtime_tuning_path(profile), json.dumps(data, indent=2, allow_nan=False) + "\n")


@dataclass(frozen=True)
class TunedRuntime:
    """What :func:`read_tuned_runtime` found.

    Attributes:
        path: The file looked for.
        runtime: ``"torch"`` or ``"llama.cpp"``, or None (no file, or ignored).
        weights: The file's weights (``"gguf"`` for llama.cpp), or None.
        note: One line about a file that exists: why it was ignored, or how its measurement differs
            from this run (another thread count); else None.
        data: The file's contents when it was used.
    """

    path: Path
    runtime: str | None = None
    weights: str | None = None
    note: str | None = None
    data: dict[str, Any] | None = None


def read_tuned_runtime(profile: str, machine: dict[str, Any], *, any_threads: bool = False) -> TunedRuntime:
    """The runtime ``lab bench --tune-runtime`` measured fastest for ``profile`` on ``machine``, or why there is none.

    The same rules as :func:`read_tuned`: a corrupt file, one measured for another profile or on another
    CPU (model or flags) or, unless ``any_threads``, with another thread count is ignored with a note;
    one measured with another torch version or llama.cpp build is stale and ignored too. Never raises.

    Args:
        profile: The ``--model`` value.
        machine: :func:`runtime_machine_key` of this run.
        any_threads: Use a file measured with another thread count (with a note naming it).
    """
    path = runtime_tuning_path(profile)
    try:
        present = path.exists()
    except OSError:
        present = True
    if not present:
        return TunedRuntime(path)
    head = f"ignoring the runtime tuning file {path}"
    try:
        data = load_runtime_tuning(path)
    except FileSchemaError as exc:
        return TunedRuntime(path, note=f"{head}: corrupt ({exc.problem}); re-run lab bench --tune-runtime or delete it")
    if data["profile"] != profile:
        return TunedRuntime(path, note=f"{head}: tuned for --model {data['profile']}, not {profile}")
    theirs = data["machine"]
    refused = _not_this_machine(theirs, machine, any_threads=any_threads, head=head,
                                command="lab bench --tune-runtime")
    if refused:
        return TunedRuntime(path, note=refused)
    note = None
    if theirs["threads"] != machine["threads"]:
        note = (f"the runtime tuning file {path} was measured with {_threads(theirs['threads'])}, this run has "
                f"{machine['threads']}")
    return TunedRuntime(path, runtime=data["runtime"], weights=data["weights"], note=note, data=data)
