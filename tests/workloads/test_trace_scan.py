"""The trace reader's compiled scans (workloads/_trace_scan.c) against what they stand in for: json.loads for the
ids, bytes.count for commas, a byte-by-byte scan for the first difference. Whole traces read through them are
compared with the numpy path and the JSON path in test_trace_fast.py and test_trace_reuse.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from array import array
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import workloads.compiled_scans
import workloads.trace
import workloads.trace_fast
from workloads.token_ids import largest_in
from workloads.trace import read_trace

scan: Any = workloads.compiled_scans.scan
INT32 = 1 << 31


def test_the_install_built_the_compiled_scans_where_a_compiler_exists() -> None:
    """An optional build fails quietly; here that is a failure, not a skip of every compiled case."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}): the reader uses its numpy path")
    assert scan is not None, "pip install -e . built no workloads._trace_scan though a C compiler is here"


needs_scan = pytest.mark.skipif(scan is None, reason="the compiled scans were not built")


def _ids(text: bytes, limit: int = INT32, start: int = 0, stop: int | None = None) -> list[int] | None:
    got = scan.parse_ids(text, start, len(text) if stop is None else stop, limit)
    return None if got is None else array("i", got).tolist()


def _json_ids(text: str) -> list[Any] | None:
    try:
        value = json.loads(f"[{text}]")
    except ValueError:
        return None
    return value if isinstance(value, list) else None


@needs_scan
@pytest.mark.parametrize(("text", "want"), [
    ("1, 22, 333", [1, 22, 333]), ("0", [0]), ("0,1", [0, 1]), (" 7 ,  8 ", [7, 8]), (str(INT32 - 1), [INT32 - 1]),
    ("01", None), ("1, 00", None), ("1,,2", None), ("1, ", None), (", 1", None), ("", None), ("   ", None),
    ("1 2", None), ("1,\t2", None), ("1,\n2", None), ("-1", None), ("+1", None), ("1.0", None), ("1e3", None),
    ("true", None), ('"1"', None), ("[1]", None), (str(INT32), None), ("9" * 40, None), ("1\x00", None),
])
def test_the_plain_form_is_read_and_anything_else_declined(text: str, want: list[int] | None) -> None:
    assert _ids(text.encode()) == want


@needs_scan
def test_ids_at_or_past_the_limit_are_declined_for_the_full_reader_to_name() -> None:
    assert _ids(b"5, 299", 300) == [5, 299]
    assert _ids(b"5, 300", 300) is None and _ids(b"0", 0) is None
    assert _ids(b"5, 6", 1 << 62) == [5, 6]  # a limit past int32 is int32's


@needs_scan
def test_only_the_range_asked_for_is_read() -> None:
    line = b'{"input_tokens": [12, 34], "output_tokens": [5]}'
    lo = line.index(b"[") + 1
    assert _ids(line, start=lo, stop=line.index(b"]")) == [12, 34]
    assert _ids(line, start=lo, stop=lo + 1) == [1]  # "1" of "12": the bytes past stop are not looked at
    assert _ids(bytearray(b"3, 4"), start=0, stop=4) == [3, 4] and _ids(memoryview(b"x9y"), start=1, stop=2) == [9]
    for start, stop in ((-1, 2), (3, 2), (0, 99)):
        with pytest.raises(IndexError):
            scan.parse_ids(b"1, 2", start, stop, INT32)


@needs_scan
@settings(max_examples=1500, deadline=None)
@given(text=st.text("0123456789, -+.e\t\n", max_size=24), limit=st.sampled_from([INT32, 1000, 7, 1]))
def test_what_is_read_is_what_json_reads_and_within_the_limit(text: str, limit: int) -> None:
    got = _ids(text.encode(), limit)
    if got is not None:
        assert got == _json_ids(text) and all(type(v) is int and 0 <= v < limit for v in got), text


@needs_scan
@settings(max_examples=500, deadline=None)
@given(ids=st.lists(st.integers(0, INT32 - 1), min_size=1, max_size=40), sep=st.sampled_from([", ", ",", " , "]),
       pad=st.sampled_from(["", " ", "  "]))
def test_every_plain_array_is_read(ids: list[int], sep: str, pad: str) -> None:
    """The fast path must not decline what it is for: a declined row goes the 12-second way."""
    assert _ids((pad + sep.join(map(str, ids)) + pad).encode()) == ids


@needs_scan
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300), byte=st.integers(0, 255), cut=st.tuples(st.integers(0, 300), st.integers(0, 300)))
def test_a_byte_is_counted_as_bytes_count_counts_it(data: bytes, byte: int, cut: tuple[int, int]) -> None:
    start, stop = min(cut[0], len(data)), min(max(cut), len(data))
    assert scan.count_byte(data, start, stop, byte) == data.count(bytes([byte]), start, stop)


@needs_scan
def test_a_range_past_either_buffer_is_refused_not_read() -> None:
    for args in ((b"ab", 0, b"ab", 0, 3), (b"ab", 1, b"abc", 0, 2), (b"ab", 0, b"ab", 0, -1)):
        with pytest.raises((IndexError, ValueError)):
            scan.first_difference(*args)
    with pytest.raises(IndexError):
        scan.count_byte(b"ab", 1, 3, 44)
    assert scan.first_difference(b"xab", 1, b"ab", 0, 2) == 2 and scan.first_difference(b"", 0, b"", 0, 0) == 0


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=50), wide=st.booleans())
def test_the_largest_id_is_found_both_ways(values: list[int], wide: bool, scan_path: str) -> None:
    code = "q" if wide else "i"
    kept = values if wide else [v >> 32 for v in values]  # int32's range
    buffer = array(code, kept).tobytes()
    assert largest_in(buffer, code) == (max(kept) if kept else -1)
    if scan_path == "compiled":
        with pytest.raises(ValueError):
            scan.largest(b"123", 4)


@needs_scan
def test_a_first_read_imports_no_numpy(tmp_path: Path) -> None:
    """Importing numpy costs a first read of the seglen preset a sixth of its CPU: with the compiled scans built the
    reader (a parse, a re-sent turn spliced, an id 0) and the replay never need it. (An id past int32 still does.)"""
    rows = [(0, 0, "1, 2, 3"), (0, 1, "1, 2, 3, 9, 4, 5"), (1, 0, "7, 0")]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"session_id": s, "turn_id": t, "input_tokens": json.loads(f"[{ids}]"),
                                         "output_tokens": [9]}) + "\n" for s, t, ids in rows))
    probe = ("import sys, runpy; sys.argv = ['replay', sys.argv[1], '--policy', 'sglang_plus', '--capacity-bytes',"
             " '1e9']\ntry:\n    runpy.run_module('reference_impl.replay', run_name='__main__')\nexcept SystemExit:\n"
             "    pass\nprint('numpy' in sys.modules, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe, str(trace)], capture_output=True, text=True, check=True,
                          env={**os.environ, "HYBRIDBENCH_TRACE_CACHE": "off"})
    assert "requests                3" in done.stdout and done.stderr.strip().splitlines()[-1] == "False", done


def test_numpy_imported_mid_read_reads_what_the_json_path_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scan_path: str) -> None:
    """numpy is imported at its first need (an id past int32, a tab): that first use reads as the JSON path does."""
    trace = tmp_path / "t.jsonl"
    lines = ['{"session_id": 0, "turn_id": 0, "input_tokens": [1, 2], "output_tokens": [3]}',
             f'{{"session_id": 0, "turn_id": 1, "input_tokens": [1, 2, 3, {2**31}], "output_tokens": [4]}}',
             '{"session_id": 1, "turn_id": 0, "input_tokens": [5,\t6], "output_tokens": [7]}',
             '{"session_id": 2, "turn_id": 0, "input_tokens": [8, 9], "output_tokens": [10, 11]}']
    trace.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("HYBRIDBENCH_TRACE_CACHE", "off")

    def rows() -> list[tuple[Any, ...]]:
        return [(r.session_id, r.turn_id, tuple(r.input_tokens), tuple(r.output_tokens), r.input_tokens.typecode,
                 r.output_tokens.typecode) for r in read_trace(trace).rows]

    monkeypatch.setattr(workloads.trace_fast, "np", workloads.trace_fast._LAZY)  # as in a fresh process
    got = rows()
    assert workloads.trace_fast.np is not workloads.trace_fast._LAZY  # the first need imported it
    monkeypatch.setattr(workloads.trace, "cut_row", lambda *args: None)  # the full JSON path only
    assert got == rows() and [r[4] for r in got] == ["i", "q", "i", "i"]


@needs_scan
def test_a_misaligned_slice_is_read_value_by_value() -> None:
    data = array("q", [7, 2**40, -1]).tobytes()
    shifted = memoryview(b"x" + data)[1:]  # each 8-byte value at an odd address
    assert scan.largest(shifted, 8) == 2**40 and scan.largest(memoryview(b"xy" + array("i", [3, 9]).tobytes())[2:],
                                                               4) == 9
