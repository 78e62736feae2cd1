"""The trace cache (workloads.trace_cache) serves exactly the rows a parse gives, and only for the file version read.

Every test reads small files with the size floor lowered to 0; a second read is proved to come from the cache by
making the parser unavailable, and every way an entry may be stale or broken is shown to fall back to a parse.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

import workloads.compiled_scans
import workloads.trace
import workloads.trace_cache
import workloads.trace_fast
from workloads.trace import TraceError, read_trace

ROWS = [
    {"session_id": 0, "turn_id": 0, "ts": 0.0, "input_tokens": [1, 2, 3], "output_tokens": [4, 5]},
    {"session_id": "s-1", "turn_id": 0, "ts": 0.25, "input_tokens": [7, 2**40], "output_tokens": [],
     "note": {"k": [1, "a"]}, "score": 0.1},
    {"session_id": 0, "turn_id": 1, "ts": 1.5, "input_tokens": [1, 2, 3, 4, 5, 6], "output_tokens": [9]},
]


def _write(path: Path, rows: list[dict[str, Any]], metadata: dict[str, Any] | None = None) -> Path:
    lines = [json.dumps({"__trace_metadata__": metadata})] if metadata else []
    path.write_text("\n".join([*lines, *map(json.dumps, rows)]) + "\n", encoding="utf-8")
    old = time.time() - 3600
    os.utime(path, (old, old))
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("HYBRIDBENCH_TRACE_CACHE", str(root))
    monkeypatch.setattr(workloads.trace, "MIN_BYTES", 0)
    monkeypatch.setattr(workloads.trace_cache, "RACY_NS", 0)  # files made here are seconds old
    return root


def _no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> Iterator[Any]:
        raise AssertionError("parsed the JSON again")
        yield  # pragma: no cover

    monkeypatch.setattr(workloads.trace, "_iter_open", refuse)


def _plain(path: Path, monkeypatch: pytest.MonkeyPatch, vocab_size: int | None = None) -> Any:
    with monkeypatch.context() as m:
        m.setenv("HYBRIDBENCH_TRACE_CACHE", "off")
        return read_trace(path, vocab_size)


def _entries(root: Path) -> list[Path]:
    return sorted(root.glob("*.trace"))


def test_a_second_read_comes_from_the_cache_with_every_field_equal(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "t.jsonl", ROWS, {"generator": "test", "seed": 3})
    expected = _plain(path, monkeypatch)
    first = read_trace(path)
    assert len(_entries(cache)) == 1
    _no_parse(monkeypatch)
    second = read_trace(path)
    assert second == first == expected
    for got, want in zip(second.rows, expected.rows, strict=True):
        assert (got.session_id, got.turn_id, got.ts, dict(got.extra)) == (
            want.session_id, want.turn_id, want.ts, dict(want.extra))
        assert type(got.session_id) is type(want.session_id)
        assert got.input_tokens.typecode == want.input_tokens.typecode  # int64 ids stay int64
    assert second.metadata == {"generator": "test", "seed": 3}


def test_same_size_and_mtime_but_new_content_is_parsed_again(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "t.jsonl", ROWS)
    read_trace(path)
    st = path.stat()
    changed = path.read_text().replace("[4, 5]", "[8, 5]")  # same length
    path.write_text(changed)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime set back: only the change time tells
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    assert list(read_trace(path).rows[0].output_tokens) == [8, 5]


def test_a_copy_is_parsed_and_kept_apart(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "t.jsonl", ROWS)
    read_trace(path)
    copy = _write(tmp_path / "copy.jsonl", ROWS)
    assert read_trace(copy) == read_trace(path)
    assert len(_entries(cache)) == 2  # keyed by the file read: another inode is another entry
    _no_parse(monkeypatch)
    assert read_trace(copy) == read_trace(path)


def test_a_recently_modified_file_is_not_remembered(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workloads.trace_cache, "RACY_NS", 3600 * 10**9)
    path = _write(tmp_path / "t.jsonl", ROWS)  # its change time is now, whatever its mtime says
    read_trace(path)
    assert _entries(cache) == []  # a write within the same tick could keep the same times


def test_a_file_changed_while_read_is_not_kept(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "t.jsonl", ROWS)
    real = workloads.trace._iter_open

    def appending(*args: Any, **kwargs: Any) -> Iterator[Any]:
        for n, item in enumerate(real(*args, **kwargs)):
            if n == 0:
                with path.open("a") as fh:
                    fh.write(json.dumps({**ROWS[0], "turn_id": 7}) + "\n")
            yield item

    monkeypatch.setattr(workloads.trace, "_iter_open", appending)
    with pytest.raises(TraceError, match="the file changed while it was read"):  # the reader's own check
        read_trace(path)
    assert _entries(cache) == []


@pytest.mark.parametrize("damage", ["flip", "truncate", "header", "ts", "count"])
def test_a_damaged_entry_is_a_miss(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    path = _write(tmp_path / "t.jsonl", ROWS)
    read_trace(path)
    (entry,) = _entries(cache)
    data = bytearray(entry.read_bytes())
    if damage == "flip":
        data[-5] ^= 0x01  # inside the last input array: only the CRC can tell
    elif damage == "truncate":
        data = data[:-4]
    elif damage == "header":
        data = data.replace(b'"max_id": ', b'"max_id": 1')  # the header's length no longer matches
    elif damage == "ts":
        data = data.replace(b"1.5", b"1.4")  # still valid JSON, same length: only a CRC over the header tells
    else:
        data = _recount(data, 50_000_000)
    entry.write_bytes(bytes(data))
    expected = _plain(path, monkeypatch)
    assert read_trace(path) == expected
    _no_parse(monkeypatch)  # the damaged entry was replaced by the parse
    assert read_trace(path) == expected


def test_an_entry_under_another_files_name_is_not_served(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = _write(tmp_path / "a.jsonl", ROWS), _write(tmp_path / "b.jsonl", ROWS[:2])
    read_trace(first)
    read_trace(second)
    a, b = sorted(_entries(cache), key=lambda p: p.stat().st_size)[::-1]  # a: all three rows
    a.replace(b)  # b's name now holds a's rows
    assert read_trace(second) == _plain(second, monkeypatch)


def _recount(data: bytearray, count: int) -> bytearray:
    """The entry with the first row's input count (3 ids stored) replaced, its header's length prefix kept right."""
    magic = len(b"hybridbench trace cache 4\n")
    length = struct.unpack("<Q", data[magic:magic + 8])[0]
    header = bytes(data[magic + 8:magic + 8 + length]).replace(b'"i", 3, "i"', f'"i", {count}, "i"'.encode())
    return bytearray(data[:magic] + struct.pack("<Q", len(header)) + header + data[magic + 8 + length:])


def test_a_damaged_count_allocates_nothing(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "t.jsonl", ROWS)
    read_trace(path)
    (entry,) = _entries(cache)
    entry.write_bytes(bytes(_recount(bytearray(entry.read_bytes()), 50_000_000)))  # 200 MB of ids, if believed
    tracemalloc.start()
    try:
        assert read_trace(path) == _plain(path, monkeypatch)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20, peak


def test_the_earlier_layouts_memos_go_and_its_entries_are_never_read(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "t.jsonl", ROWS)
    read_trace(path)
    (entry,) = _entries(cache)
    old = bytearray(entry.read_bytes())
    old[: len(b"hybridbench trace cache 4\n")] = b"hybridbench trace cache 2\n"  # CRC aside, the same entry
    entry.write_bytes(bytes(old))
    (cache / "by-stat").mkdir()
    memo = cache / "by-stat" / ("c" * 40)
    memo.write_text("d" * 64)
    assert read_trace(path) == _plain(path, monkeypatch)  # parsed, and stored anew
    assert not memo.exists() and entry.read_bytes().startswith(b"hybridbench trace cache 4\n")


def test_an_entry_of_other_rules_is_not_served(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "t.jsonl", ROWS)
    read_trace(path)
    monkeypatch.setattr(workloads.trace_cache, "STAMP", "another-reader")
    before = _entries(cache)
    read_trace(path)  # parsed: the entry was written under the old reader's stamp
    assert len(_entries(cache)) == len(before) + 1


def test_a_cached_id_past_the_vocabulary_still_names_its_line(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "t.jsonl", ROWS)
    read_trace(path)
    with pytest.raises(TraceError) as plain:
        _plain(path, monkeypatch, vocab_size=1000)
    with pytest.raises(TraceError) as cached:
        read_trace(path, 1000)
    assert str(cached.value) == str(plain.value) and ":2:" in str(cached.value)
    with pytest.raises(TraceError, match=r":2: 'input_tokens' holds token id 1099511627776, outside the vocabulary"):
        read_trace(path, 2**40)  # the largest id is the vocabulary's size: one past its last id
    _no_parse(monkeypatch)
    assert len(read_trace(path, 2**40 + 1).rows) == 3  # within the vocabulary: from the cache


def test_an_output_id_past_the_vocabulary_counts_too(cache: Path, tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [{**ROWS[0], "output_tokens": [4, 5000]}])
    read_trace(path)
    with pytest.raises(TraceError, match=r":1: 'output_tokens' holds token id 5000, outside the vocabulary"):
        read_trace(path, 4096)


def test_a_read_that_starts_within_the_racy_window_is_not_remembered(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window counts from the start of the read: a slow read must not age a just-written file past it."""
    monkeypatch.setattr(workloads.trace_cache, "RACY_NS", 10**9)
    path = _write(tmp_path / "t.jsonl", ROWS)  # changed (utime) just now
    real = workloads.trace._iter_open

    def slow(*args: Any, **kwargs: Any) -> Iterator[Any]:
        time.sleep(1.5)
        yield from real(*args, **kwargs)

    monkeypatch.setattr(workloads.trace, "_iter_open", slow)
    read_trace(path)
    assert _entries(cache) == []


def test_the_entry_names_the_file_read_not_what_the_path_points_to_later(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = _write(tmp_path / "x.jsonl", ROWS), _write(tmp_path / "y.jsonl", ROWS[:1])
    link = tmp_path / "trace.jsonl"
    link.symlink_to(first)
    real = workloads.trace._iter_open

    def repointing(*args: Any, **kwargs: Any) -> Iterator[Any]:
        for n, item in enumerate(real(*args, **kwargs)):
            if n == 0:
                link.unlink()
                link.symlink_to(second)
            yield item

    monkeypatch.setattr(workloads.trace, "_iter_open", repointing)
    assert len(read_trace(link).rows) == 3  # the file opened, read whole
    monkeypatch.setattr(workloads.trace, "_iter_open", real)
    assert read_trace(link) == _plain(second, monkeypatch)


def test_a_pipe_is_read_every_time(cache: Path, tmp_path: Path) -> None:
    """Only regular files are cached: two writes to a named pipe within one timestamp tick leave its times as they
    were (with the racy window off, as here, the second read was served the first's rows in CI: 3 rows for 1)."""
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    for rows in (ROWS, ROWS[:1]):  # a pipe's next reader gets what is written next, never a cached read
        writer = threading.Thread(target=lambda rows=rows: fifo.write_text("\n".join(map(json.dumps, rows)) + "\n"))
        writer.start()
        assert len(read_trace(fifo).rows) == len(rows)
        writer.join()


def test_a_fault_inside_the_cache_costs_a_parse_never_the_read(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "t.jsonl", ROWS)

    def deep(*_: Any) -> None:
        raise RecursionError("maximum recursion depth exceeded")  # json on a deeply nested extra

    with monkeypatch.context() as m:
        m.setattr(workloads.trace_cache, "write_entry", deep)
        assert len(read_trace(path).rows) == 3
    assert _entries(cache) == []
    read_trace(path)
    monkeypatch.setattr(workloads.trace_cache, "read_entry", deep)
    assert read_trace(path) == _plain(path, monkeypatch)


def test_without_numpy_or_the_compiled_scans_nothing_is_kept(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workloads.trace_fast, "np", None)  # the reader's slower path; the cache needs one of them
    monkeypatch.setattr(workloads.compiled_scans, "scan", None)
    path = _write(tmp_path / "t.jsonl", ROWS)
    assert len(read_trace(path).rows) == 3
    assert not cache.exists()


def test_a_relative_folder_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDBENCH_TRACE_CACHE", "0")
    with pytest.raises(TraceError, match=r"^HYBRIDBENCH_TRACE_CACHE='0': give an absolute folder, or off$"):
        read_trace(_write(tmp_path / "t.jsonl", ROWS))


@pytest.mark.parametrize("field", ["st_dev", "st_ino", "st_size", "st_mtime_ns", "st_ctime_ns"])
def test_every_part_of_a_files_identity_keys_its_entry(field: str) -> None:
    """Two files alike but for one field (two files written in one tick differ only in their inode) never share."""
    fields = {"st_dev": 1, "st_ino": 2, "st_size": 3, "st_mtime_ns": 4, "st_ctime_ns": 5}
    one = SimpleNamespace(**fields)
    other = SimpleNamespace(**{**fields, field: fields[field] + 1})
    tc = workloads.trace_cache.TraceCache(Path("/nowhere"), "stamp")
    assert tc._entry(cast("os.stat_result", one)) != tc._entry(cast("os.stat_result", other))


def test_invalid_traces_are_never_cached(cache: Path, tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [*ROWS, ROWS[0]])  # a duplicate request
    with pytest.raises(TraceError, match=r"t\.jsonl:4: session 0 turn 0 already at line 1"):
        read_trace(path)
    assert not cache.exists() or _entries(cache) == []


def test_off_writes_nothing_and_an_unusable_folder_only_costs_the_parse(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workloads.trace, "MIN_BYTES", 0)
    path = _write(tmp_path / "t.jsonl", ROWS)
    monkeypatch.setenv("HYBRIDBENCH_TRACE_CACHE", "off")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    read_trace(path)
    assert not (tmp_path / "home").exists()
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the folder would be")
    monkeypatch.setenv("HYBRIDBENCH_TRACE_CACHE", str(blocker / "cache"))
    assert len(read_trace(path).rows) == 3


def test_small_files_are_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDBENCH_TRACE_CACHE", str(tmp_path / "cache"))
    read_trace(_write(tmp_path / "t.jsonl", ROWS))  # far under MIN_BYTES
    assert not (tmp_path / "cache").exists()


def test_the_least_recently_used_entries_go_past_the_size_bound(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = [_write(tmp_path / f"{n}.jsonl", ROWS[:n]) for n in (1, 2, 3)]
    read_trace(paths[0])
    read_trace(paths[1])
    for n, entry in enumerate(sorted(_entries(cache), key=lambda p: p.stat().st_size)):
        os.utime(entry, (1 + n, 1 + n))  # the one-row entry is the older
    read_trace(paths[0])  # ...until it is used again
    kept = next(e for e in _entries(cache) if e.stat().st_mtime > 10)
    with monkeypatch.context() as m:  # the three-row entry's size, from a cache of its own
        m.setenv("HYBRIDBENCH_TRACE_CACHE", str(tmp_path / "other"))
        read_trace(paths[2])
    (third,) = _entries(tmp_path / "other")
    monkeypatch.setattr(workloads.trace_cache, "MAX_BYTES", kept.stat().st_size + third.stat().st_size)
    read_trace(paths[2])
    assert _entries(cache) == sorted([kept, cache / third.name])  # the two-row entry, least recently used, went


def test_a_folder_of_other_files_keeps_them_whatever_their_age_or_size(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # HYBRIDBENCH_TRACE_CACHE may name any folder, a home directory even: its day-old dotfiles were deleted as a
    # killed writer's temporary files, and its own *.trace files as entries past the size bound.
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "by-stat").mkdir()
    mine = [cache / ".netrc", cache / ".profile", cache / "notes.trace", cache / "by-stat" / ".keep",
            cache / "by-stat" / "README"]
    killed = [cache / f".{'a' * 64}-{'b' * 16}.trace.x1y2", cache / "by-stat" / f".{'c' * 40}.q9"]
    for path in [*mine, *killed]:
        path.write_text("x" * 100)
        os.utime(path, (1, 1))  # 1970: older than any day
    monkeypatch.setattr(workloads.trace_cache, "MAX_BYTES", 1)  # every entry is past the bound
    read_trace(_write(tmp_path / "t.jsonl", ROWS))
    assert all(p.exists() for p in mine), [p for p in mine if not p.exists()]
    assert not any(p.exists() for p in killed)


def test_a_link_planted_under_an_entrys_name_is_replaced_not_written_through(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shared cache folder: another user's link named as the next entry once had the entry written over the file
    it named (the atomic writer follows links for outputs a user names)."""
    path = _write(tmp_path / "t.jsonl", ROWS)
    tc = workloads.trace_cache.trace_cache()
    assert tc is not None
    victim = tmp_path / "victim" / ".profile"  # not there yet: the link dangles, so the lookup just misses
    victim.parent.mkdir()
    cache.mkdir(parents=True)
    tc._entry(path.stat()).symlink_to(victim)
    expected = _plain(path, monkeypatch)
    assert read_trace(path) == expected
    assert not victim.exists()
    (entry,) = _entries(cache)
    assert not entry.is_symlink()
    _no_parse(monkeypatch)
    assert read_trace(path) == expected


def test_a_rebuilt_compiled_scan_stamps_entries_anew(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries made by one build of workloads/_trace_scan.c are not read back by another (nor by the numpy path)."""
    built = tmp_path / "_trace_scan.so"
    built.write_bytes(b"one build")
    monkeypatch.setattr(workloads.compiled_scans, "scan", SimpleNamespace(__file__=str(built)))
    first = workloads.trace_cache._reader_stamp()
    built.write_bytes(b"another build")
    second = workloads.trace_cache._reader_stamp()
    monkeypatch.setattr(workloads.compiled_scans, "scan", None)
    assert None not in (first, second) and len({first, second, workloads.trace_cache._reader_stamp()}) == 3


def test_numpy_s_version_is_in_the_stamp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries parsed under one numpy are not served under another (the numpy path's parse); a numpy laid out without
    version.py still stamps (the cache is not silently off)."""
    package = tmp_path / "numpy"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "version.py").write_text('version = "1.0"\n')
    found = SimpleNamespace(origin=str(package / "__init__.py"))
    monkeypatch.setattr(workloads.trace_cache, "find_spec", lambda name: found)
    first = workloads.trace_cache._reader_stamp()
    (package / "version.py").write_text('version = "2.0"\n')
    second = workloads.trace_cache._reader_stamp()
    (package / "version.py").unlink()
    third = workloads.trace_cache._reader_stamp()
    assert None not in (first, second, third) and len({first, second, third}) == 3
