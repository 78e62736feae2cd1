"""The one atomic writer: a failed write keeps the old file and leaves no temporary file behind."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
from pathlib import Path

import pytest

from workloads.atomic_file import (
    atomic_bytes_writer,
    atomic_writer,
    output_problem,
    write_json_atomic,
    write_text_atomic,
)


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


def test_a_symlink_target_writes_the_file_it_points_to_and_stays_a_link(tmp_path: Path) -> None:
    (tmp_path / "target.txt").write_text("old")
    (tmp_path / "link").symlink_to("target.txt")
    write_json_atomic(tmp_path / "link", {"a": 1})
    assert (tmp_path / "link").is_symlink()
    assert json.loads((tmp_path / "target.txt").read_text()) == {"a": 1}
    (tmp_path / "new").symlink_to("created.txt")  # a link to a file not there yet: the file is created
    write_text_atomic(tmp_path / "new", "x")
    assert (tmp_path / "new").is_symlink() and (tmp_path / "created.txt").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["created.txt", "link", "new", "target.txt"]


def test_a_fifo_target_is_written_through_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    try:
        with atomic_bytes_writer(tmp_path / "fifo") as fh:
            fh.write(b"through the pipe")
    finally:
        if not got:  # a writer that replaced the pipe left the reader waiting for one: open it to let go
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=10)
    assert got == [b"through the pipe"]
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and [p.name for p in tmp_path.iterdir()] == ["fifo"]


def test_a_link_to_an_open_descriptor_writes_to_it(tmp_path: Path) -> None:
    # `--json out` with out -> /proc/self/fd/1: the output goes down stdout; the link is not replaced.
    r, w = os.pipe()
    os.set_blocking(r, False)
    try:
        (tmp_path / "out").symlink_to(f"/proc/self/fd/{w}")
        write_text_atomic(tmp_path / "out", "to the descriptor\n")
        assert os.read(r, 100) == b"to the descriptor\n"
        assert (tmp_path / "out").is_symlink()
    finally:
        os.close(r)
        os.close(w)


def test_a_directory_target_is_refused_by_name_before_any_write(tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    with pytest.raises(IsADirectoryError) as exc, atomic_writer(tmp_path / "adir") as fh:
        fh.write("x")
    assert exc.value.filename == str(tmp_path / "adir")
    assert [p.name for p in tmp_path.iterdir()] == ["adir"] and not any((tmp_path / "adir").iterdir())


@pytest.mark.parametrize(("given", "folder", "problem"), [
    ("", False, "an empty path"),
    ("", True, "an empty path"),
    ("adir", False, "adir: is a directory"),
    ("nodir/x.json", False, "does not exist"),
    ("afile/deep", True, "afile is not a directory"),
    ("afile/deep.json", False, "Not a directory"),
    ("afile", True, "afile: exists and is not a directory"),
    ("afile", False, None),
    ("new.json", False, None),
    ("fifo", False, None),
    ("new/deep/site", True, None),  # a folder output's parents are created
    ("adir", True, None),
])
def test_output_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, folder: bool,
                        problem: str | None) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("")
    os.mkfifo(tmp_path / "fifo")
    got = output_problem(given, folder=folder)
    assert got is None if problem is None else (got is not None and problem in got and "\n" not in got), got
