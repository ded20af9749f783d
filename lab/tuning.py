"""The tuned files: what ``lab bench-tune`` and ``lab bench-tune-runtime`` measured best on this machine, written,
read back, or ignored with a reason.

One JSON file per kind and target profile in :func:`lab.user_dirs.tuning_dir`, one writer
(:func:`write_tuned`) and one reader (:func:`read_tuned`) for every kind (:class:`TunedKind`); the
kinds differ only in their payload (:mod:`lab.speculative.tuning_schema`):

* :data:`DRAFT_SETUP`, ``draft-setup-<profile>.json``: the winning
  :class:`~lab.speculative.setups.DraftSetup` and the draft it was measured with (``lab speculate``
  runs it, :func:`choose_setup`);
* :data:`RUNTIME`, ``runtime-<profile>.json``: the runtime and weights that ran the target fastest
  (commands run it when ``--runtime`` is not typed, :func:`lab.commands.runtime_choice.resolve_runtime`).

Each holds the machine it was measured on (:func:`machine_key`: CPU model and flags, torch version,
torch threads; :func:`runtime_machine_key` adds the llama.cpp build) and the measured figures. A reader
uses the file only for the same profile (and draft) and machine key:

* another CPU model or other CPU flags: **foreign**, ignored;
* another thread count: foreign too, unless the command cannot choose its threads
  (``lab speculate`` has no ``--threads``): then the file is used and a note says with how
  many threads it was measured (``OMP_NUM_THREADS`` runs with as many);
* another torch version (or llama.cpp build): **stale** (kernels change between versions), ignored;
* unreadable, not JSON, or outside its schema (every field of the set-up within what the command
  line accepts for its flag): **corrupt**, ignored;
* a symbolic link that leads to no file (to one that does not exist, or in a loop): ignored;

each with one line naming the file and why, which the command shows and reports. The
file is written atomically (:func:`lab.runs.files.write_text_atomic`).

Nothing heavy at import (the torch version is read from the installed package's metadata),
so the commands can decide before any model loads.
"""

from __future__ import annotations

import errno
import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from lab.machine import cpu_identity
from lab.models.profiles import PROFILES
from lab.schemas import FileSchemaError
from lab.speculative import tuning_schema
from lab.speculative.setups import DraftSetup, ResolvedSetup, default_ggml_setup, default_setup, resolve_setup
from lab.speculative.tuning_schema import TunedSchema
from lab.runs.files import write_text_atomic
from lab.user_dirs import tuning_dir


def machine_key(threads: int) -> dict[str, Any]:
    """What a tuned set-up is valid for: ``{"cpu_model", "cpu_flags", "torch", "threads"}``."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:  # pragma: no cover - the lab needs torch to decode at all
        torch_version = "none"
    return {**cpu_identity(), "torch": torch_version, "threads": int(threads)}


def runtime_machine_key(threads: int) -> dict[str, Any]:
    """:func:`machine_key` plus the llama.cpp build the runtime candidates ran on (``llama_cpp``)."""
    from lab.runtime.build import SDIST_VERSION

    return {**machine_key(threads), "llama_cpp": SDIST_VERSION}


@dataclass(frozen=True)
class TunedKind:
    """One kind of tuned file: its schema, where it lives, who writes it and what a reader matches.

    Attributes:
        schema: The file's :class:`~lab.speculative.tuning_schema.TunedSchema` (its payload).
        stem: The file is ``<tuning_dir>/<stem>-<profile>.json``.
        command: The command that writes it, named in a note (re-run it).
        matched: Payload fields a reader must find equal to what it asks for, besides the profile, each
            with the words a note puts before its value (``("draft", "draft ")``).
        used_note: Appended to the note on a file used although measured with another thread count
            (``{threads}``: the file's count).
    """

    schema: TunedSchema
    stem: str
    command: str
    matched: tuple[tuple[str, str], ...] = ()
    used_note: str = ""

    def path(self, profile: str) -> Path:
        """``<tuning_dir>/<stem>-<profile>.json``, the profile name made file-safe (``owner/name`` and paths too)."""
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", profile).strip("._") or "model"
        return tuning_dir() / f"{self.stem}-{safe}.json"


DRAFT_SETUP = TunedKind(tuning_schema.DRAFT_SETUP, "draft-setup", "lab bench-tune", matched=(("draft", "draft "),),
                        used_note=": its set-up runs all the same (OMP_NUM_THREADS={threads} runs as it was measured)")
RUNTIME = TunedKind(tuning_schema.RUNTIME, "runtime", "lab bench-tune-runtime")


def write_tuned(kind: TunedKind, profile: str, payload: dict[str, Any], machine: dict[str, Any],
                measured: dict[str, Any]) -> Path:
    """Write what ``profile`` measured best on ``machine``, replacing any earlier file of ``kind``.

    Args:
        kind: :data:`DRAFT_SETUP` (payload ``draft``, ``setup``) or :data:`RUNTIME` (``runtime``,
            ``weights``, ``report``).
        profile: The target profile (``--model``).
        payload: The kind's fields (:mod:`lab.speculative.tuning_schema`).
        machine: :func:`machine_key` (:func:`runtime_machine_key` for :data:`RUNTIME`) of the measuring run.
        measured: The figures behind the choice.

    Returns:
        The file's path.

    Raises:
        OSError: the tuning folder cannot be written.
    """
    after = {k: payload[k] for k in kind.schema.after_measured}
    data = {"format": kind.schema.format, "profile": profile,
            **{k: v for k, v in payload.items() if k not in after}, "machine": machine, "measured": measured, **after,
            "written": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    return write_text_atomic(kind.path(profile), json.dumps(data, indent=2, allow_nan=False) + "\n")


@dataclass(frozen=True)
class TunedRead:
    """What :func:`read_tuned` found.

    Attributes:
        path: The file looked for.
        note: One line to show about a file that exists: why it was ignored, or, when it is
            used, how its measurement differs from this run (another thread count); else None.
        data: The file's contents when it is used (its payload: ``data["setup"]``, ``data["runtime"]`` ...);
            None when there is no file or it was ignored.
    """

    path: Path
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
        parts = ([f"it had {' '.join(extra[:6])}"] if extra else []) + \
            ([f"it lacked {' '.join(lacking[:6])}"] if lacking else [])
        foreign.append(f"other CPU flags ({', '.join(parts)})")
    if not any_threads and theirs["threads"] != ours["threads"]:
        foreign.append(f"{_threads(theirs['threads'])}, this run has {ours['threads']}")
    if theirs["torch"] != ours["torch"]:
        stale.append(f"torch {theirs['torch']}, this is torch {ours['torch']}")
    if "llama_cpp" in theirs and "llama_cpp" in ours and theirs["llama_cpp"] != ours["llama_cpp"]:
        stale.append(f"llama.cpp build {theirs['llama_cpp']}, this is {ours['llama_cpp']}")
    return foreign, stale


def _refusal(kind: TunedKind, data: dict[str, Any], wanted: dict[str, Any], machine: dict[str, Any], *,
             any_threads: bool) -> str | None:
    """Why a valid file is not for this run (measured for another profile or draft, on another machine, or with
    other software), after ``ignoring the <kind> <path>: ``; None when it is."""
    if any(data[k] != v for k, v in wanted.items()):
        says = {"profile": "--model ", **dict(kind.matched)}
        return (f"tuned for {' with '.join(says[k] + str(data[k]) for k in wanted)}, "
                f"not {' with '.join(str(v) for v in wanted.values())}")
    foreign, stale = _differences(data["machine"], machine, any_threads=any_threads)
    if foreign:
        return f"measured on another machine ({'; '.join(foreign + stale)}); re-run {kind.command} here"
    if stale:
        return f"stale, measured with {'; '.join(stale)}; re-run {kind.command}"
    return None


def _present(path: Path) -> bool:
    """Whether anything is at ``path`` itself: a symbolic link counts, even one that leads nowhere or loops."""
    try:
        path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:  # a folder that cannot be searched: the file is named as unreadable when it is read
        pass
    return True


def _broken_link(path: Path) -> str | None:
    """Why the symbolic link at ``path`` leads to no file (it dangles, or loops), in words; None when it does not."""
    try:
        if not path.is_symlink():
            return None
        path.stat()
    except (FileNotFoundError, NotADirectoryError):
        try:
            return f"a symbolic link to {os.readlink(path)!r}, which does not exist"
        except OSError:  # gone since: still no file to read
            return "a symbolic link to nothing"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link that loops"
    return None


def read_tuned(kind: TunedKind, profile: str, machine: dict[str, Any], *, match: dict[str, str] | None = None,
               any_threads: bool = False) -> TunedRead:
    """The tuned file of ``kind`` for ``profile`` on ``machine``, or why there is none.

    Never raises for a bad file (only for a ``match`` that is not the kind's): a corrupt
    (:func:`lab.speculative.tuning_schema.load`), foreign or stale file, a symbolic link to no file, or one
    measured for another profile (or, :data:`DRAFT_SETUP`, another draft), is ignored and named in ``note``
    (one line); no file at all gives neither data nor a note.

    Args:
        kind: :data:`DRAFT_SETUP` or :data:`RUNTIME`.
        profile: The ``--model`` value.
        machine: :func:`machine_key` (:func:`runtime_machine_key` for :data:`RUNTIME`) of this run.
        match: The kind's :attr:`TunedKind.matched` fields this run asks for (``{"draft": spec}``).
        any_threads: The command cannot choose its thread count (it has no ``--threads``), or runs
            any: a file measured with another count is used, with a note naming the count it was measured with.

    Raises:
        ValueError: ``match`` does not name exactly the kind's matched fields (naming ``match``).
    """
    wanted = {"profile": profile, **(match or {})}
    if set(wanted) != {"profile", *(k for k, _ in kind.matched)}:
        raise ValueError(f"match={match!r} must name the fields a {kind.schema.kind} is matched on: "
                         f"{[k for k, _ in kind.matched]}")
    path = kind.path(profile)
    if not _present(path):
        return TunedRead(path)
    head = f"ignoring the {kind.schema.kind} {path}"
    broken = _broken_link(path)
    if broken is not None:
        return TunedRead(path, note=f"{head}: {broken}; re-run {kind.command} or delete it")
    try:
        data = tuning_schema.load(kind.schema, path)
    except FileSchemaError as exc:
        return TunedRead(path, note=f"{head}: corrupt ({exc.problem}); re-run {kind.command} or delete it")
    refused = _refusal(kind, data, wanted, machine, any_threads=any_threads)
    if refused:
        return TunedRead(path, note=f"{head}: {refused}")
    theirs, note = data["machine"]["threads"], None
    if theirs != machine["threads"]:
        note = (f"the {kind.schema.kind} {path} was measured with {_threads(theirs)}, this run has "
                f"{machine['threads']}" + kind.used_note.format(threads=theirs))
    return TunedRead(path, note=note, data=data)


def choose_setup(profile: str, draft_spec: str, flags: dict[str, Any], *, threads: int,
                 has_weights: bool, runtime: str = "torch") -> ResolvedSetup:
    """The draft set-up a command runs, and where each field came from (``lab speculate``).

    Field by field (:func:`lab.speculative.setups.resolve_setup`): the flags typed, else the
    set-up ``lab bench-tune`` measured best for this model, draft and machine
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
        runtime: ``"llama.cpp"``: no tuning file (``lab bench-tune`` measures torch set-ups);
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
    tuned = read_tuned(DRAFT_SETUP, profile, machine_key(threads), match={"draft": draft_spec}, any_threads=True)
    if tuned.data is not None:
        base, source = DraftSetup(**tuned.data["setup"]), f"tuned: {tuned.path}"
    else:
        base, source = default_setup(profile if own_draft else None, has_weights)
    return resolve_setup({"dynamic": None, **flags}, base=base, base_source=source, has_weights=has_weights,
                         notes=(tuned.note,) if tuned.note else ())
