"""Text that can neither drive a terminal nor hide what it says, for the console and the report files.

Prompts, tokens, file names and model output are echoed to the terminal and written into
``summary.md`` and the CSVs, and any of them may hold:

- control characters (Unicode category Cc: C0, DEL, C1): ``ESC [2J`` clears the screen,
  ``ESC ]0;...`` retitles the window, a carriage return overwrites a line;
- bidirectional controls (U+202A-U+202E, U+2066-U+2069, U+200E, U+200F, U+061C): they
  reorder how the text around them is shown (the "Trojan Source" trick, Boucher and
  Anderson 2021), so what is shown is not what the text says;
- invisible characters (U+200B zero-width space, U+2060-U+2064, U+FEFF): text that is there
  and cannot be seen.

:func:`printable` writes each as an escape (``\\x1b``, ``\\u202e``) and leaves everything
else, newline, tab and all other Unicode, as it is. The zero-width (non-)joiners U+200C and
U+200D are kept: emoji sequences and Indic and Persian scripts need them, and they reorder
nothing. Stdlib only: the report writers (:mod:`lab.reports`) and the consoles
(:mod:`lab.render.console`) both use it.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f"  # Cc, but newline (0x0a) and tab (0x09)
                     "\u061c\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clipped(value: object, most: int = 120) -> str:
    """``repr(value)`` cut to ``most`` characters, with the length said, for a value echoed in a one-line error.

    The length is the text's own for a ``str``, else its ``repr``'s (an int's digits and sign).

    Examples:
        >>> clipped("smollm2")
        "'smollm2'"
        >>> clipped("9" * 5000, most=6)
        "'99999... (5,000 characters)"
        >>> clipped(10**300, most=5)
        '10000... (301 characters)'
    """
    shown = repr(value)
    if len(shown) <= most:
        return shown
    return f"{shown[:most]}... ({len(value) if isinstance(value, str) else len(shown):,} characters)"


def printable(text: str) -> str:
    """``text`` with every control character but newline and tab, every bidirectional control and
    every invisible character written as ``\\xNN`` / ``\\uNNNN`` (see the module docstring)."""
    if text.isprintable():  # no Cc or Cf character at all: the common case, in C
        return text
    return _UNSAFE.sub(_escape, text)
