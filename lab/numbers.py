"""Numbers as text and text as numbers: the one formatter of a figure and the one reader of a report's value.

Standard library only, so that every layer may import it: :mod:`lab.render` (the terminal and ``summary.md``),
:mod:`lab.views` (the page), :mod:`lab.schemas` (an error's line) and the library code that words a figure.

* :func:`number_text` writes a figure: ``format(x, spec)``, or a missing marker where nothing was measured
  (None, NaN; an infinity too unless asked to keep it). The marker is what differs between the outputs:
  :data:`MISSING` (``n/a``) in ``summary.md`` and on the terminal, :data:`PAGE_MISSING` (``-``) on the page.
* :func:`effect_text` and :func:`p_text` write the study's figures, their format chosen by the value.
* :func:`number_or_none` reads a report's value (a JSON number, or a CSV cell's text) as a float, None where
  there is no number.
* :func:`number_in_line` names a number in an error's line (a many-digit integer by its digit count).
"""

from __future__ import annotations

import math
from typing import Any

MISSING = "n/a"  # summary.md and the terminal: a figure with nothing measured under it
PAGE_MISSING = "-"  # the page's marker for the same
SMALL = 1e-3  # below this magnitude the study prints significant figures (p-values: scientific notation)
LONG_INTEGER = 10**16  # an integer of 17 or more digits is named by its digit count in a line


def number_text(x: Any, spec: str = ".3f", missing: str = MISSING, *, keep_inf: bool = False) -> str:
    """``x`` in format ``spec``, or ``missing`` where nothing was measured: None, NaN, and (unless ``keep_inf``)
    an infinity (``report.json`` holds every one of them as None).

    Args:
        x: The figure: a number, or anything ``format`` takes (text passes through with ``spec`` ``""``).
        spec: A format spec (``".2g"``, ``".1%"``; default three decimals); ``""``: ``str(x)``.
        missing: The marker: :data:`MISSING` (``summary.md``, terminal) or :data:`PAGE_MISSING` (page).
        keep_inf: Write an infinity as ``format`` does (``inf``) instead of ``missing``.

    >>> number_text(0.12345, ".3f"), number_text(None), number_text(float("nan"), ".2f", "-"), number_text(12, "")
    ('0.123', 'n/a', '-', '12')
    >>> number_text(float("inf"), ".1f"), number_text(float("inf"), ".1f", keep_inf=True)
    ('n/a', 'inf')
    """
    if x is None or (isinstance(x, float) and (math.isnan(x) if keep_inf else not math.isfinite(x))):
        return missing
    return format(x, spec)


def effect_text(x: Any, digits: int = 3, missing: str = MISSING) -> str:
    """The study's figure (an effect, an interval end, a share): ``digits`` decimals, ``digits`` significant
    figures below :data:`SMALL` (so a small effect is not printed as 0.000), a non-float as it is;
    ``missing`` as :func:`number_text`.

    >>> effect_text(0.25), effect_text(0.00012), effect_text(0.0), effect_text(7), effect_text(float("nan"))
    ('0.250', '0.00012', '0.000', '7', 'n/a')
    """
    small = isinstance(x, float) and abs(x) < SMALL and x != 0
    return number_text(x, (f".{digits}g" if small else f".{digits}f") if isinstance(x, float) else "", missing)


def p_text(p: Any, missing: str = MISSING) -> str:
    """The study's p-value: scientific below :data:`SMALL`, else four decimals; ``missing`` where untested (NaN).

    >>> p_text(0.0123), p_text(2e-5), p_text(float("nan"))
    ('0.0123', '2.00e-05', 'n/a')
    """
    return number_text(p, ".2e" if isinstance(p, (int, float)) and p < SMALL else ".4f", missing)


def number_or_none(x: Any, *, text: bool = True, finite: bool = True) -> float | None:
    """A report's value as a float, or None where it holds no number.

    Args:
        x: A JSON value of a report, or a CSV cell (text).
        text: Read text as a number too (``"0.25"``, a CSV cell); False: only an int or a float is one.
        finite: None for NaN and the infinities (``report.json`` writes them as null); False: an infinity stays
            (a page shows it as out of its range), NaN is still None.

    Returns:
        The float, or None for None, a bool, ``""``, text that is no number (or any text when not ``text``),
        NaN, and (when ``finite``) an infinity.

    >>> number_or_none("0.25"), number_or_none("0.25", text=False), number_or_none(3), number_or_none(True)
    (0.25, None, 3.0, None)
    >>> number_or_none("nan"), number_or_none(float("inf")), number_or_none("inf", finite=False), number_or_none("x")
    (None, None, inf, None)
    """
    if isinstance(x, bool) or x is None or x == "" or not (text or isinstance(x, (int, float))):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError, OverflowError):
        return None
    return v if math.isfinite(v) or (not finite and not math.isnan(v)) else None


def number_in_line(x: int | float) -> str:
    """``x`` in an error's line: an integer of many digits by its digit count (its text would fill the line).

    >>> number_in_line(12), number_in_line(0.5), number_in_line(10**20)
    ('12', '0.5', 'a 21-digit integer')
    """
    return f"a {len(str(abs(x)))}-digit integer" if isinstance(x, int) and abs(x) >= LONG_INTEGER else repr(x)
