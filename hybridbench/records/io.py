"""Append-only JSONL of records: each record is flushed as it completes, so a crash keeps the rest."""

from __future__ import annotations

import json
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

__all__ = ["JsonRow", "RecordWriter"]


class JsonRow(Protocol):
    def to_json(self) -> dict[str, Any]: ...


class RecordWriter:
    """Appends request records (records.jsonl) or KL samples (kl.jsonl): one flushed line each."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = path.open("a", encoding="utf-8")

    def write(self, record: JsonRow) -> None:
        self._fh.write(json.dumps(record.to_json(), sort_keys=True) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

