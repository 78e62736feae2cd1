"""Typed generator parameters: each parameter is declared once, as a field of a frozen dataclass, and both the
command line (``python -m workloads.generate``) and typed callers (the harness) are built from that declaration.

A field's type is its parser (``int``, ``float``, ``str``, ``bool``, a ``Literal`` of choices, ``X | None``);
``param(default, help)`` gives the help text. On the command line an option left out keeps the preset's (or the
dataclass's) value; a ``bool`` is a flag. A typed caller passes a mapping of field names to values, checked
here: an unknown name or a value of the wrong type is a :class:`WorkloadError` of one line naming the parameter.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from workloads.errors import WorkloadError

__all__ = ["Declared", "add_arguments", "checked_values", "declarations", "param", "values_from_args"]

_KINDS: tuple[type, ...] = (bool, int, float, str)


def param(default: Any, help: str) -> Any:
    """A declared parameter: its default and a one-line help (the CLI appends the default)."""
    return dataclasses.field(default=default, metadata={"help": help})


@dataclass(frozen=True, slots=True)
class Declared:
    name: str
    kind: type  # bool, int, float or str
    optional: bool  # None is a valid value
    choices: tuple[str, ...] | None
    required: bool  # no default: the caller must give it
    default: Any
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def _declared(f: dataclasses.Field[Any], hint: Any) -> Declared:
    optional = False
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        optional = True
        (hint,) = [a for a in args if a is not type(None)]
    choices = None
    if typing.get_origin(hint) is Literal:
        choices = tuple(str(c) for c in typing.get_args(hint))
        hint = str
    if hint not in _KINDS:
        raise TypeError(f"parameter {f.name}: unsupported type {hint!r}")
    required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    return Declared(f.name, hint, optional, choices, required, None if required else f.default,
                    str(f.metadata.get("help", "")))


def declarations(cls: type[Any]) -> tuple[Declared, ...]:
    """The parameters ``cls`` (a dataclass) declares, in field order."""
    hints = typing.get_type_hints(cls)
    return tuple(_declared(f, hints[f.name]) for f in dataclasses.fields(cls))


def add_arguments(parser: argparse.ArgumentParser, cls: type[Any]) -> None:
    """One option per declared parameter; every option defaults to None ("not given")."""
    for d in declarations(cls):
        shown = f"; default {d.default}" if not d.required and d.default is not None else ""
        if d.kind is bool:
            parser.add_argument(d.flag, dest=d.name, action="store_true", default=None, help=d.help)
        else:
            parser.add_argument(d.flag, dest=d.name, type=d.kind, choices=d.choices, required=d.required,
                                default=None, help=d.help + shown)


def values_from_args(ns: argparse.Namespace, cls: type[Any]) -> dict[str, Any]:
    """The parameters of ``cls`` given on the command line."""
    return {d.name: getattr(ns, d.name) for d in declarations(cls) if getattr(ns, d.name, None) is not None}


def _check(d: Declared, value: object) -> object:
    if value is None:
        if d.optional:
            return None
        raise WorkloadError(f"{d.name}: a value is required")
    if d.kind is bool:
        ok = isinstance(value, bool)
    elif d.kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif d.kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
        value = float(value) if ok else value  # type: ignore[arg-type]
    else:
        ok = isinstance(value, str)
    if not ok:
        raise WorkloadError(f"{d.name}: expected {'a number' if d.kind is float else d.kind.__name__}, "
                            f"got {value!r}")
    if d.choices is not None and value not in d.choices:
        raise WorkloadError(f"{d.name}: {value!r} is not one of {', '.join(d.choices)}")
    return value


def checked_values(values: Mapping[str, object], *classes: type[Any]) -> list[dict[str, Any]]:
    """Split ``values`` by the class declaring each name (one dict per class), each value type-checked."""
    decl = [{d.name: d for d in declarations(c)} for c in classes]
    out: list[dict[str, Any]] = [{} for _ in classes]
    for name, value in values.items():
        owner = next((i for i, ds in enumerate(decl) if name in ds), None)
        if owner is None:
            known = sorted(n for ds in decl for n in ds)
            raise WorkloadError(f"unknown parameter {name!r}; choose from {', '.join(known)}")
        out[owner][name] = _check(decl[owner][name], value)
    for i, ds in enumerate(decl):
        for d in ds.values():
            if d.required and d.name not in out[i]:
                raise WorkloadError(f"{d.name}: a value is required")
    return out
