"""``lab view A B``: two reports side by side; ``lab view`` itself writes no other kind."""

from __future__ import annotations

from dataclasses import dataclass

from lab.kinds import Kind


@dataclass(frozen=True)
class Report:
    """``report.json`` of a comparison (:func:`lab.commands.view.write_comparison`) past its kind and format: what
    ``lab view`` needs to draw its page again from the two reports (:func:`lab.views.open.redraw`).

    Attributes:
        compared_kind: The kind of the two reports compared.
        a: Report A's folder, its absolute path as written (not escaped for a page: the folder on the disk).
        b: Report B's folder, likewise.
    """

    compared_kind: str
    a: str
    b: str


KIND = Kind("compare", listed=140, commands=("lab.commands.view",), report=Report)
