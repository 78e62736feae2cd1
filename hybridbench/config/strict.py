"""Keys the schema does not know are errors, even when added with Hydra's ``+`` prefix.

Hydra type-checks ``key=value`` against the structured schema, but ``+key=value`` (and ``++``) force the
key in, and the dataclass conversion then drops it without a word: ``+engine.chunked_prefil_size=4``
would run with the default chunk size. A benchmark that silently ignores a knob is worse than one
that refuses it.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any

from omegaconf import DictConfig

from hybridbench.errors import ConfigError

__all__ = ["reject_unknown_keys"]


def _unknown(node: DictConfig, schema: type[Any], prefix: str) -> list[tuple[str, list[str]]]:
    hints = typing.get_type_hints(schema)
    names = [f.name for f in dataclasses.fields(schema)]
    out: list[tuple[str, list[str]]] = []
    for raw in node:
        key = str(raw)
        path = f"{prefix}{key}"
        if key not in names:
            out.append((path, difflib.get_close_matches(key, names, n=1)))
            continue
        hint, value = hints[key], node[key]
        if not isinstance(value, DictConfig):
            continue
        if dataclasses.is_dataclass(hint):
            out += _unknown(value, typing.cast(type[Any], hint), f"{path}.")
        elif typing.get_origin(hint) is dict:
            item = typing.get_args(hint)[1]
            if dataclasses.is_dataclass(item):  # e.g. workloads: dict[str, WorkloadCfg]
                for name in map(str, value):
                    sub = value[name]
                    if isinstance(sub, DictConfig):
                        out += _unknown(sub, typing.cast(type[Any], item), f"{path}.{name}.")
    return out


def reject_unknown_keys(cfg: DictConfig, schema: type[Any]) -> None:
    """Raise ConfigError naming the first key ``cfg`` has beyond ``schema`` (a dataclass), with a guess."""
    unknown = _unknown(cfg, schema, "")
    if unknown:
        path, close = unknown[0]
        parent = path.rsplit(".", 1)[0] + "." if "." in path else ""
        hint = f" (did you mean {parent}{close[0]}?)" if close else ""
        more = f" and {len(unknown) - 1} more" if len(unknown) > 1 else ""
        raise ConfigError(f"unknown config key {path}{hint}{more}")
