"""Reading a planned server command line as the server's argparse will read it: the value it keeps for a flag (the
last one given, ``--name v`` or ``--name=v``), whether a flag is given at all, and a value as a plain integer."""

from __future__ import annotations

from collections.abc import Sequence

from hybridbench.engines.owned_flags import last_flag

__all__ = ["flag_value", "has_flag", "int_value", "speculative_algorithm"]


def flag_value(args: Sequence[str], name: str) -> str | None:
    """The value argparse keeps for ``name`` (None when not given)."""
    found = last_flag(args, name)
    return found[1] if found else None


def has_flag(args: Sequence[str], *names: str) -> bool:
    return any(a == n or a.startswith(n + "=") for a in args for n in names)


def int_value(value: str | None) -> int | None:
    """``value`` as a non-negative integer; None for anything else ("²" is a digit to isdigit, not to int)."""
    return int(value) if value is not None and value.isascii() and value.isdigit() else None


def speculative_algorithm(args: Sequence[str]) -> str | None:
    """The speculative algorithm SGLang runs with ``args`` (None: none). With --enable-return-aux-hidden-states
    (0.5.23; older releases' --help lacks it) the algorithm only names the capture convention and is reset to None
    before any rule reads it (validation_hook.handle_aux_hidden_state_capture): no draft, no speculative rules."""
    return None if has_flag(args, "--enable-return-aux-hidden-states") else flag_value(args, "--speculative-algorithm")
