"""Reading a planned server command line as the server's argparse will read it: the value it keeps for a flag (the
last one given, ``--name v`` or ``--name=v``), whether a flag is given at all, and a value as a plain integer."""

from __future__ import annotations

from collections.abc import Sequence

from hybridbench.engines.owned_flags import last_flag

__all__ = ["flag_value", "has_flag", "int_value"]


def flag_value(args: Sequence[str], name: str) -> str | None:
    """The value argparse keeps for ``name`` (None when not given)."""
    found = last_flag(args, name)
    return found[1] if found else None


def has_flag(args: Sequence[str], *names: str) -> bool:
    return any(a == n or a.startswith(n + "=") for a in args for n in names)


def int_value(value: str | None) -> int | None:
    """``value`` as a non-negative integer; None for anything else ("²" is a digit to isdigit, not to int)."""
    return int(value) if value is not None and value.isascii() and value.isdigit() else None
