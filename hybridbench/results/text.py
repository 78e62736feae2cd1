"""Text from a run directory made safe for a terminal: control characters shown, never obeyed.

A run name, model name or engine version can hold an escape sequence (``\\x1b]0;...``, a cursor move, a
right-to-left override) that a terminal would act on; ``visible`` prints each such character as its escape.
"""

from __future__ import annotations

import unicodedata

__all__ = ["visible"]


def _shown(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object) -> str:
    """``text`` with C0/C1 controls, DEL, line and paragraph separators and bidi/format characters escaped."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c == " " or unicodedata.category(c)[0] not in "CZ" else _shown(c) for c in s)
