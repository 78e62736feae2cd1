"""Append-only JSONL of records: each record is flushed as it completes, so a crash keeps the rest."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from hybridbench.errors import ConfigError
from hybridbench.records.schema import Record, record_from_json

__all__ = ["JsonRow", "RecordWriter", "read_records"]


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


def read_records(path: Path) -> Iterator[Record]:
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read records ({exc.strerror or exc})") from None
    with fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield record_from_json(json.loads(line))
            except (json.JSONDecodeError, TypeError) as exc:
                raise ConfigError(f"{path}:{lineno}: not a record ({exc})") from None
