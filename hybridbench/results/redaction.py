"""The one redaction (``hybridbench.config.redact``) applied to what results' writers copy out of old runs.

Runs written before a secret's redaction existed still hold it in plan.json, bundle.json or a launch command.
Every writer that copies run text out (the dashboard's pages and PNGs, ``results export``'s Parquet, ``results
history --json``, ``results show``) masks the secret values of the runs it read, found by the same rule that masks
them at write time: ``secret_values`` of each run's configs and of its recorded commands.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Any

import pandas as pd

from hybridbench.config.redact import MASK, MIN_SECRET_CHARS, redact, scrub, secret_values
from hybridbench.results.types import Run

__all__ = ["run_secrets", "scrub", "scrub_frame"]


def _command_secrets(commands: Iterable[Any]) -> set[str]:
    out: set[str] = set()
    for cmd in commands:
        try:
            argv = shlex.split(cmd) if isinstance(cmd, str) else [str(a) for a in cmd]
        except ValueError:  # an unbalanced quote: word by word
            argv = str(cmd).split()
        for orig, red in zip(argv, redact(argv), strict=True):
            if red != orig:
                value = orig[len(red) - len(MASK):] if red.endswith(MASK) and len(red) > len(MASK) else orig
                out.update(w for w in (value, *value.split()) if len(w) >= MIN_SECRET_CHARS)
    return out


def run_secrets(run: Run) -> frozenset[str]:
    """The secret values a run's saved files may still hold."""
    found = set(secret_values(run.plan.config))
    b = run.bundle
    if b is not None:
        found |= secret_values(b.provenance.config) | secret_values(b.raw.get("provenance") or {})
        found |= _command_secrets([b.provenance.command, b.provenance.engine.command])
    return frozenset(found)


def scrub_frame(frame: pd.DataFrame, secrets: frozenset[str]) -> pd.DataFrame:
    """A copy of ``frame`` with every secret masked in its text columns."""
    if not secrets:
        return frame
    out = frame.copy()
    for col in out.columns:
        if not (pd.api.types.is_numeric_dtype(out[col]) or pd.api.types.is_datetime64_any_dtype(out[col])):
            out[col] = out[col].map(lambda v: scrub(v, secrets) if isinstance(v, str) else v)
    return out
