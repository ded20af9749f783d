"""Report directories: atomic writing, environment capture, JSON and CSV helpers.

Every command writes ``<root>/<timestamp>-<kind>-<slug>/``. The files go to a hidden
staging directory beside it (``.<name>.partial-XXXX``) and the directory is renamed
into place only after every file is written, so a visible report directory is
always complete: an interrupted or failed run leaves none (the staging directory
is removed on any exception, KeyboardInterrupt included, and the CLI turns SIGTERM
into one); a staging directory left by a killed process is removed by the next
report written in that root once it is :data:`STALE_STAGING_S` old.

Text files and CSV cells are written with control, bidirectional and invisible
characters escaped (:func:`lab.safe_text.printable`), so ``cat summary.md`` cannot
drive a terminal; ``report.json`` keeps the exact text (JSON escapes those characters).
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as _dt
import io
import json
import logging
import math
import os
import platform
import re
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from lab.files import make_staging, publish, read_bounded, sweep_staging  # make_staging: tests stand in for it here
from lab.kinds import REPORT_FORMAT, REPORT_JSON, Kind
from lab.typed import ShapeError, to_json, written_items
from lab.models.source import model_source
from lab.provenance import Environment
from lab.safe_text import printable
from lab.schemas import MAX_FILE_BYTES

logger = logging.getLogger(__name__)

_LIBRARIES = ("lab", "torch", "transformers", "numpy", "scipy", "gguf", "rich", "matplotlib")


def slugify(text: str, max_len: int = 40) -> str:
    """A filesystem-safe slug of ``text``: lowercase ASCII words joined by '-'."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:max_len].rstrip("-") or "run"


def timestamp() -> str:
    """Local time as ``YYYYmmdd-HHMMSS``, sortable and filesystem-safe."""
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def library_versions() -> dict[str, str | None]:
    """Installed versions of the libraries that decide the numbers in a report."""
    out: dict[str, str | None] = {}
    for name in _LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def peak_rss_bytes() -> int | None:
    """This process's peak resident set size so far, in bytes (``getrusage``), or None where unknown.

    Linux reports ``ru_maxrss`` in KiB, macOS in bytes. A subprocess (llama.cpp) is not included.
    """
    try:
        import resource
    except ImportError:  # Windows
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def environment(model: Any = None) -> dict[str, Any]:
    """:func:`environment_record` as the dict a report holds under ``"environment"`` (:func:`lab.typed.to_json`)."""
    return to_json(environment_record(model))


def environment_record(model: Any = None) -> Environment:
    """Machine, Python, library versions, this process's peak RSS in bytes so far (``peak_rss_bytes``:
    call it when the report is written) and (if given) the model's :class:`~lab.models.source.ModelSource`."""
    return Environment(python=sys.version.split()[0], platform=platform.platform(), machine=platform.machine(),
                       cpu_count=os.cpu_count(), libraries=library_versions(),
                       created=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                       peak_rss_bytes=peak_rss_bytes(),
                       model=model_source(model, default=None) if model is not None else None)


def to_jsonable(obj: Any) -> Any:
    """Convert dataclasses, tensors, numpy values and paths to JSON-ready values.

    Non-finite floats become ``None`` (JSON has no NaN); a report never silently
    carries ``NaN`` into a parser that would accept it. A dataclass's :func:`lab.typed.may_be_absent` field that is
    None is left out and the fields stand in the file's order, as :func:`lab.typed.to_json` writes them
    (:func:`lab.typed.written_items`).
    """
    try:
        import torch
    except ImportError:  # pragma: no cover
        torch = None
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        np = None
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {name: to_jsonable(value) for name, value in written_items(obj)}
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if torch is not None and isinstance(obj, torch.Tensor):
        return to_jsonable(obj.detach().cpu().tolist())
    if torch is not None and isinstance(obj, (torch.dtype, torch.device)):
        return str(obj)
    if np is not None and isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if np is not None and isinstance(obj, np.generic):
        return to_jsonable(obj.item())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Path):
        return str(obj)
    return obj


def check_reports_root(root: str | Path) -> Path:
    """Check that ``root`` can hold report directories, before any work starts; create nothing.

    The folder (and any missing parents) is created only when something is written
    into it, so a run refused for a bad argument leaves no directory tree behind.

    Raises:
        ValueError: ``root`` is empty, exists but is not a directory, lies under a file,
            or its nearest existing folder is not writable.
    """
    if not str(root).strip():
        raise ValueError(f"--out={str(root)!r} is empty; give a folder (default: reports)")
    path = Path(root).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out={str(root)!r} exists and is not a directory")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"--out={str(root)!r} cannot be created: {str(existing)!r} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--out={str(root)!r} is not writable" if existing == path else
                         f"--out={str(root)!r} cannot be created: {str(existing)!r} is not writable")
    return path


def _cell(value: Any) -> Any:
    return printable(value) if isinstance(value, str) else value


class ReportDir:
    """A report directory being written; see :func:`report_dir`."""

    def __init__(self, staging: Path, final: Path, kind: Kind | str = ""):
        self.path = staging  # write here; becomes `final` on success
        self.final = final
        self.kind = str(kind)  # the report's kind, as report_dir was given it
        self.declared = kind if isinstance(kind, Kind) else None

    def write_text(self, name: str, text: str) -> Path:
        """Write a text file (``summary.md``) with control, bidirectional and invisible characters
        escaped (:func:`lab.safe_text.printable`): a report read in a terminal cannot drive it."""
        p = self.path / name
        p.write_text(printable(text), encoding="utf-8")
        return p

    def write_json(self, name: str, data: Any) -> Path:
        """Write JSON as is: ``json.dumps`` already escapes every non-ASCII and control character. The one
        serializer of a report's JSON (:meth:`write_report` writes through it)."""
        p = self.path / name
        p.write_text(json.dumps(to_jsonable(data), indent=2, allow_nan=False) + "\n", encoding="utf-8")
        return p

    def write_report(self, data: Any) -> Path:
        """Write ``report.json``, the report's exact figures: ``{"kind": <this report's kind>, "format":``
        :data:`lab.kinds.REPORT_FORMAT` ``, ...}`` then ``data``'s other fields in their order.

        Args:
            data: A mapping or a dataclass (converted by :func:`to_jsonable`); a ``kind`` in it must be this
                report's or one of its :attr:`lab.kinds.Kind.variants` (kept as written), and it holds no
                ``format`` of its own.

        Raises:
            ValueError: ``data`` is no mapping, names another kind, holds a ``format``, or (a kind with a typed
                report, :attr:`lab.kinds.Kind.report`) is not in that type's shape.
        """
        body = to_jsonable(data)
        if not isinstance(body, dict):
            raise ValueError(f"report.json of a {self.kind!r} report must be a mapping, not {type(body).__name__}")
        said = body.pop("kind", self.kind)
        if said != self.kind and said not in (self.declared.variants if self.declared else ()):
            raise ValueError(f"report.json of a {self.kind!r} report says kind={said!r}")
        if "format" in body:
            raise ValueError(f"report.json of a {self.kind!r} report holds a field 'format', which the writer sets")
        if self.declared is not None and self.declared.report is not None:
            # The kind's typed report is what is written: a field the type does not know, or a value of another
            # shape, is the lab's own fault and stops here, before any page reads it.
            try:
                body = to_json(self.declared.read({"kind": said, **body}))
            except ShapeError as exc:
                raise ValueError(f"report.json of a {self.kind!r} report is not in its declared shape: {exc}") from None
        return self.write_json(REPORT_JSON, {"kind": said, "format": REPORT_FORMAT, **body})

    def write_csv(self, name: str, rows: Sequence[Mapping[str, Any]], fieldnames: Sequence[str] | None = None) -> Path:
        """Write a CSV; string cells are escaped like :meth:`write_text` (the full text stays in the JSON)."""
        p = self.path / name
        fields = list(fieldnames or (rows[0].keys() if rows else []))
        with p.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: _cell(to_jsonable(row.get(k))) for k in fields})
        return p

    def file(self, name: str) -> Path:
        """Path for a file another library writes (a matplotlib PNG, say)."""
        return self.path / name


class ReportWriteError(RuntimeError):
    """The report, or a file a command writes beside it once it is complete (a calibration), could
    not be written (an ``OSError`` after the work); the message names the path. The CLI exits 1."""


def fallback_root() -> Path:
    """Where a report goes when its root refuses it at report time: ``<tempdir>/lab-reports``."""
    return Path(tempfile.gettempdir()) / "lab-reports"


# A staging directory is written for seconds (a report's files); one older than this was left by a
# process killed without cleanup (SIGKILL, power loss) and is removed by the next report in that root.
STALE_STAGING_S = 6 * 3600


def _staging_with_fallback(root: Path, dirname: str) -> tuple[Path, Path]:
    """``(root, staging)``: staged under ``root``, else (an ``OSError``: permission, read-only
    filesystem, a pseudo-filesystem such as /sys, which ``os.access`` calls writable for root)
    under :func:`fallback_root`, with a warning naming both."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        sweep_staging(root, ".*.partial-*", STALE_STAGING_S)
        return root, make_staging(root, dirname)
    except OSError as exc:
        fallback = fallback_root()
        try:
            fallback.mkdir(parents=True, exist_ok=True)
            staging = make_staging(fallback, dirname)
        except OSError as exc2:
            raise ReportWriteError(f"cannot write the report under {str(root)!r} ({exc.strerror}) nor under "
                                   f"{str(fallback)!r} ({exc2.strerror})") from exc2
        logger.warning("cannot write the report under %s (%s); writing it under %s instead", root,
                       exc.strerror or exc, fallback)
        return fallback, staging


# What a report's writer may do around the rename (the page and the experiment log, :mod:`lab.views.publish`):
# ``(staging folder, final name, kind)`` before it, ``(root)`` after it.
BeforeRename = Callable[[Path, str, str], None]
AfterRename = Callable[[Path], None]


@contextmanager
def report_dir(root: str | Path, kind: Kind | str, slug: str = "", *, name: str | None = None,
               before_rename: BeforeRename | None = None,
               after_rename: AfterRename | None = None) -> Iterator[ReportDir]:
    """Write a report directory atomically.

    Args:
        root: The reports root (created if missing), ``reports/`` by default in the CLI.
        kind: The report's kind (:mod:`lab.kinds`), or any name; part of the directory name.
        slug: A short description (usually of the prompt); slugified.
        name: Use this exact directory name instead of ``<timestamp>-<kind>-<slug>``.
        before_rename: Called with the staging folder, the final name and the kind once every file is
            written and before the rename, so a visible report has what it writes (its page); what it
            raises propagates like the block's own exceptions.
        after_rename: Called with the root once the report is in place (the experiment log).

    Yields:
        A :class:`ReportDir`; write into ``.path``. On normal exit the directory is
        renamed to ``.final``, which is ``<name>`` or, when another run already took
        that name, ``<name>-2``, ``<name>-3`` ... (read ``.final`` after the block);
        on any exception it is deleted and the exception propagates. When ``root``
        refuses the report at this point (it was checked writable when the run
        started), the report goes under :func:`fallback_root` instead, with a warning,
        and ``.final`` says where.

    Raises:
        ReportWriteError: an ``OSError`` while writing (disk full ...; nothing is kept),
            neither ``root`` nor the fallback accepts the report, or the finished report
            could not be renamed into place (it is kept in its staging directory, named).
    """
    root = Path(root)
    dirname = name or "-".join(p for p in (timestamp(), str(kind), slugify(slug) if slug else "") if p)
    root, staging = _staging_with_fallback(root, dirname)
    report = ReportDir(staging, root / dirname, kind)
    kind = str(kind)
    try:
        yield report
        if before_rename is not None:
            before_rename(staging, report.final.name, kind)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise ReportWriteError(f"writing the report to {str(report.final)!r} failed ({exc.strerror or exc}"
                               f"{_failed_file(exc, staging)}); nothing of it was kept") from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        report.final = publish(staging, report.final, if_taken="next")  # atomic on one filesystem
    except OSError as exc:
        raise ReportWriteError(f"the report is complete in {str(staging)!r} but could not be renamed to "
                               f"{str(report.final)!r} ({exc.strerror or exc})") from exc
    report.path = report.final
    if after_rename is not None:
        after_rename(root)


def _failed_file(exc: OSError, staging: Path) -> str:
    """``": <file>"`` for the file an ``OSError`` names (relative to the report when it is in the staging
    directory, which is removed), ``""`` when it names none (the report's folder then says where)."""
    if not isinstance(exc.filename, (str, bytes, os.PathLike)) or not os.fspath(exc.filename):
        return ""
    path = Path(os.fsdecode(exc.filename))
    return f": {path.relative_to(staging) if path.is_relative_to(staging) else path}"


def read_json(path: str | Path) -> Any:
    """A report's JSON file, read back (bounded: :data:`lab.schemas.MAX_FILE_BYTES`, no file the lab writes nears it).

    Raises:
        lab.files.FileRefused: as :func:`lab.files.read_bounded`.
        ValueError: not UTF-8, or not JSON.
    """
    return json.loads(read_bounded(path, MAX_FILE_BYTES).decode("utf-8"))


def rows_from_csv(path: str | Path) -> list[dict[str, str]]:
    """A report's CSV file's rows, read back (bounded as :func:`read_json`)."""
    return list(csv.DictReader(io.StringIO(read_bounded(path, MAX_FILE_BYTES).decode("utf-8"), newline="")))
