"""trace: replay any trace file unchanged (Marconi's and SegLen's ``{dataset}_sps=..._nums=...jsonl`` too).

Rows are streamed through exactly as read; only the trace-level metadata line is added, recording the
source file and the arrival parameters its name encodes (``swebench_sps=10_art=5_nums=100.jsonl`` ->
``{"dataset": "swebench", "sps": 10.0, "art": 5.0, "nums": 100}``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.errors import WorkloadError
from workloads.params import param
from workloads.trace import TraceRow, TraceStream, iter_trace

__all__ = ["TraceFileParams", "build", "open_trace_file", "parse_marconi_name"]

_MARCONI_NAME = re.compile(
    r"^(?P<dataset>[A-Za-z0-9]+)_sps=(?P<sps>[0-9.]+)(?:_art=(?P<art>[0-9.]+))?_nums=(?P<nums>[0-9]+)\.jsonl$"
)


def parse_marconi_name(name: str) -> dict[str, Any] | None:
    """The dataset and arrival parameters in a Marconi/SegLen trace file name, or None."""
    m = _MARCONI_NAME.match(name)
    if m is None:
        return None
    try:
        out: dict[str, Any] = {"dataset": m["dataset"], "sps": float(m["sps"]), "nums": int(m["nums"])}
        if m["art"] is not None:
            out["art"] = float(m["art"])
    except ValueError:
        return None
    return out


def open_trace_file(path: str | Path, generator: str = "trace") -> TraceStream:
    """Stream a trace file's rows unchanged; its own metadata (if any) is kept under ``source_metadata``."""
    p = Path(path)
    items = iter_trace(p)
    first = next(items, None)
    if first is None:
        raise WorkloadError(f"{p}: the trace has no rows")
    source_meta: dict[str, Any] = {}
    pending: list[TraceRow] = []
    if isinstance(first, TraceRow):
        pending.append(first)
    else:
        source_meta = first

    def rows() -> Iterator[TraceRow]:
        yield from pending
        count = len(pending)
        for item in items:
            if isinstance(item, TraceRow):
                count += 1
                yield item
        if count == 0:
            raise WorkloadError(f"{p}: the trace has no rows")

    metadata: dict[str, Any] = {
        "generator": generator,
        "source": str(p),
        "synthetic": bool(source_meta.get("synthetic", False)),
    }
    named = parse_marconi_name(p.name)
    if named is not None:
        metadata["marconi_name"] = named
    if source_meta:
        metadata["source_metadata"] = source_meta
    return TraceStream(rows(), metadata)


@dataclass(frozen=True, slots=True)
class TraceFileParams:
    path: str = param(dataclasses.MISSING, "trace JSONL (Marconi/SegLen rows; metadata line optional)")


def build(params: TraceFileParams, source: None, vocab_size: int, seed: int, preset: str | None) -> TraceStream:
    """The registry's entry point: the trace replayed unchanged (the seed is not used; the caller checks the
    vocabulary on every row)."""
    stream = open_trace_file(params.path)
    return TraceStream(stream.rows, {**stream.metadata, "vocab_size": vocab_size})
