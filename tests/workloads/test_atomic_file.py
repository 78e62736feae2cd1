"""The one atomic writer: a failed write keeps the old file and leaves no temporary file behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from workloads.atomic_file import atomic_writer, write_json_atomic, write_text_atomic


def test_failed_write_keeps_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "bundle.json"
    write_json_atomic(target, {"verdict": "pass"})
    with pytest.raises(RuntimeError), atomic_writer(target) as fh:
        fh.write('{"verdict": "fa')
        raise RuntimeError("disk full")
    assert json.loads(target.read_text()) == {"verdict": "pass"}
    assert [p.name for p in tmp_path.iterdir()] == ["bundle.json"]


def test_concurrent_writers_use_distinct_temporary_files(tmp_path: Path) -> None:
    # A fixed ".name.tmp" would let two writers of one file interleave into the same temporary file.
    target = tmp_path / "report.md"
    with atomic_writer(target) as a, atomic_writer(target) as b:
        a.write("first")
        b.write("second")
        assert a.name != b.name
    assert target.read_text() == "first"  # the outer block finished last and replaced the inner one's file
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


def test_written_file_honours_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        write_text_atomic(tmp_path / "report.md", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "report.md").stat().st_mode & 0o777 == 0o640
