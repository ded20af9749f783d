"""Every kind of report the lab writes, declared once: one module of this package per kind.

A kind's module holds ``KIND``, a :class:`Kind`: its name (the ``<kind>`` in a report folder's name
``<YYYYmmdd-HHMMSS>-<kind>-<slug>``), the ``lab`` subcommands that write it, the module that draws its
own part of a page, and where reports written before :data:`REPORT_FORMAT` kept their exact figures.
Everything that lists kinds reads them here: the CLI's subcommands (:func:`command_modules`), the views' reading of a folder's kind
(``lab.views.files.kind_of``) and page (``lab.views.page.kind_module``), and the commands' report folders
(``lab.reports.report_dir`` is given the ``Kind``). Adding a kind is adding one module here, editing
nothing else (``tests/unit/test_kinds.py`` adds a toy kind that way).

The modules a kind names (its commands, its page) are named by their dotted path, as Python's entry
points name them, and imported only when used: importing this package imports the standard library
only, so ``lab --help`` and a page redraw load no command and no model code. A unit test imports each
name and checks what it must hold (``register``, ``page``).

The anchor is lm-evaluation-harness' task registry (a task declared once where it lives, found by
the registry).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType
from typing import Any

from lab.typed import ShapeError, from_json

__all__ = ["Kind", "ShapeError", "all_kinds", "command_modules", "kind_named", "names_longest_first"]

# The file every report folder holds its exact figures in, with its kind and format
# (lab.reports.ReportDir.write_report writes it).
REPORT_JSON = "report.json"
# The format of report.json. 1: every kind writes report.json (before it, a study wrote study.json, a calibration
# calibration.json ...: Kind.older_file), with "kind" and "format" as its first two keys.
REPORT_FORMAT = 1


@dataclass(frozen=True)
class Kind:
    """One kind of report, as declared in its module of :mod:`lab.kinds`.

    Attributes:
        name: The kind's name: lowercase words joined by ``-``, the ``<kind>`` of its folders' names.
        listed: Where its subcommands stand in ``lab --help`` (ascending; ties are an error).
        commands: Dotted names of the ``lab.commands`` modules that write it, in ``--help`` order; each has
            ``register(subparsers)``. Empty for a kind no subcommand of its own writes (a calibration's
            validation, written by ``lab calibrate-health --validate``; the integration tier's log).
        page: Dotted name of the module whose ``page(files)`` draws the kind's own sections of its page
            (and, where it has one, ``compare(a, b)`` two of its reports side by side); None when its page
            is the summary and the files only.
        older_file: Where reports of this kind written before :data:`REPORT_FORMAT` held their exact figures
            (a study's ``study.json``), read when a folder has no ``report.json``; None where it was always
            ``report.json``.
        variants: Other values its ``report.json``'s ``kind`` may hold, one per shape of report its commands
            write (a bench folder holds a ``bench``, a ``bench-tune`` or a ``bench-seed-tables`` report).
        report: The shape of its ``report.json`` past ``kind`` and ``format``: a frozen dataclass whose fields, in
            the file's order, carry their units in their docstring, or for a kind with variants a dict of one
            per name (``{"bench": ..., "bench-tune": ...}``: the file's ``kind`` says which it is read as); the
            writer checks every report against it and a page reads it (:meth:`read`). None for a kind not yet
            typed (its page reads the parsed JSON).

    Raises:
        ValueError: a name that is not lowercase words joined by ``-``, or a page without a typed report.
    """

    name: str
    listed: int
    commands: tuple[str, ...] = ()
    page: str | None = None
    older_file: str | None = None
    variants: tuple[str, ...] = ()
    report: Any = None

    def __post_init__(self) -> None:
        words = self.name.split("-")
        if not all(w.isascii() and w.isalnum() and w == w.lower() for w in words):
            raise ValueError(f"kind name={self.name!r} must be lowercase words joined by '-'")
        if self.page is not None and self.report is None:  # a page reads its report typed, never a dict
            raise ValueError(f"kind {self.name!r} names a page module but no typed report")

    def page_module(self) -> ModuleType | None:
        """The module named by ``page``, imported; None when the kind has none."""
        return importlib.import_module(self.page) if self.page else None

    def __str__(self) -> str:
        return self.name

    def read(self, data: dict[str, Any]) -> Any:
        """A parsed ``report.json`` (or a pre-format file, :attr:`older_file`) as :attr:`report`.

        Raises:
            ShapeError: a ``kind`` that is not this kind's, a ``format`` newer than :data:`REPORT_FORMAT`, or the
                rest not in :attr:`report`'s shape (one line naming where).
        """
        said = data.get("kind", self.name)
        if said != self.name and said not in self.variants:
            raise ShapeError("kind", f"a {self.name} report, not {str(said)[:60]!r}")
        form = data.get("format", 0)
        if not isinstance(form, int) or isinstance(form, bool) or not 0 <= form <= REPORT_FORMAT:
            raise ShapeError("format", f"a format this lab reads (0 to {REPORT_FORMAT}), not {str(form)[:60]!r}")
        shape = self.report[said] if isinstance(self.report, dict) else self.report
        return from_json(shape, {k: v for k, v in data.items() if k not in ("kind", "format")})


@lru_cache(maxsize=None)
def _declared(path: tuple[str, ...]) -> tuple[Kind, ...]:
    kinds = []
    for info in sorted(pkgutil.iter_modules(list(path)), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        kind = getattr(importlib.import_module(f"{__name__}.{info.name}"), "KIND", None)
        if not isinstance(kind, Kind):
            raise TypeError(f"lab.kinds.{info.name} declares no KIND (a lab.kinds.Kind)")
        kinds.append(kind)
    names = [k.name for k in kinds]
    if len(set(names)) != len(names):
        raise ValueError(f"a kind is declared twice: {sorted(n for n in names if names.count(n) > 1)}")
    places = [k.listed for k in kinds]
    if len(set(places)) != len(places):
        raise ValueError(f"two kinds share a place in `lab --help`: {sorted(p for p in places if places.count(p) > 1)}")
    return tuple(sorted(kinds, key=lambda k: k.listed))


def all_kinds() -> tuple[Kind, ...]:
    """Every declared kind, in ``lab --help`` order (each module of this package imported once)."""
    return _declared(tuple(__path__))


def kind_named(name: str) -> Kind | None:
    """The kind called ``name``; None when none is."""
    return next((k for k in all_kinds() if k.name == name), None)


def names_longest_first() -> tuple[str, ...]:
    """Every kind's name, longest first, so a folder ``...-bench-sinks-x`` is read as ``bench-sinks``, not
    ``bench``."""
    return tuple(sorted((k.name for k in all_kinds()), key=lambda n: (-len(n), n)))


def command_modules() -> tuple[str, ...]:
    """The ``lab`` subcommands' modules, in the order ``lab --help`` lists them."""
    return tuple(m for k in all_kinds() for m in k.commands)
