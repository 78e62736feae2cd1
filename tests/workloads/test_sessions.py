"""keep_sessions: the first K sessions of a trace, whole, exactly as the full trace has them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workloads.cli import run_cli
from workloads.generate import main as generate_main
from workloads.scale import scale_stream
from workloads.sessions import keep_first_sessions
from workloads.swebench import SwebenchParams, generate_swebench
from workloads.trace import TraceRow, iter_trace

V = 4096
PARAMS = SwebenchParams(num_sessions=24, sps=2.0, art=3.0, max_turns=6, max_input=6000)


def _first_sessions(rows: list[TraceRow], k: int) -> list[TraceRow]:
    order: list[object] = []
    for r in rows:
        if r.session_id not in order:
            order.append(r.session_id)
    return [r for r in rows if r.session_id in order[:k]]


def test_the_kept_sessions_are_the_full_traces_first_sessions_token_for_token() -> None:
    full = list(scale_stream(generate_swebench(PARAMS, V, 7), 4, V).rows)
    cut = keep_first_sessions(scale_stream(generate_swebench(PARAMS, V, 7), 4, V), 5)
    rows = list(cut.rows)
    assert rows == _first_sessions(full, 5)
    assert len({r.session_id for r in rows}) == 5 and len(rows) < len(full)
    # sessions start interleaved with other sessions' turns: the cut keeps every turn of each, in trace order
    assert [r.ts for r in rows] == sorted(r.ts for r in rows)
    assert cut.metadata["keep_sessions"] == {"kept": 5, "of": 6}  # every 4th of 24 after scaling
    assert cut.metadata["scale"] == scale_stream(generate_swebench(PARAMS, V, 7), 4, V).metadata["scale"]


def test_more_sessions_than_the_trace_has_keeps_it_all_and_says_how_many() -> None:
    cut = keep_first_sessions(generate_swebench(PARAMS, V, 3), 50)
    assert list(cut.rows) == list(generate_swebench(PARAMS, V, 3).rows)
    assert cut.metadata["keep_sessions"] == {"kept": 24, "of": 24}


def test_a_trace_file_is_cut_by_first_appearance(tmp_path: Path) -> None:
    """A replayed file (SegLen's traces are such files): sessions named by strings, turns interleaved."""
    src = tmp_path / "in.jsonl"
    order = ["b", "a", "b", "c", "a", "d", "c", "b"]
    src.write_text("".join(json.dumps({"session_id": s, "turn_id": i, "ts": float(i), "input_tokens": [1, 2, i],
                                       "output_tokens": [3]}) + "\n" for i, s in enumerate(order)))
    out = tmp_path / "out.jsonl"
    assert generate_main(["trace", "--path", str(src), "--vocab-size", "64", "-o", str(out),
                          "--keep-sessions", "2"]) == 0
    items = list(iter_trace(out))
    rows = [r for r in items if isinstance(r, TraceRow)]
    assert [r.session_id for r in rows] == ["b", "a", "b", "a", "b"]  # b and a appear first; c and d dropped
    (meta,) = [m for m in items if not isinstance(m, TraceRow)]
    assert isinstance(meta, dict) and meta["keep_sessions"] == {"kept": 2, "of": 4}


def test_a_negative_count_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_cli(generate_main, "python -m workloads.generate",
                   ["swebench", "--vocab-size", "64", "-o", str(tmp_path / "x.jsonl"), "--keep-sessions", "-1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--keep-sessions must be >= 0" in err
    assert not (tmp_path / "x.jsonl").exists()


def test_the_generator_scales_first_and_cuts_the_scaled_trace(tmp_path: Path) -> None:
    """``--scale`` then ``--keep-sessions``, as the harness runs it: the cut counts the sessions the scaled trace
    kept (every 4th), not the full trace's first ones."""
    out = tmp_path / "t.jsonl"
    assert generate_main(["swebench", "--num-sessions", "24", "--sps", "2", "--max-turns", "6", "--max-input", "6000",
                          "--vocab-size", str(V), "--seed", "7", "--scale", "4", "--keep-sessions", "2",
                          "-o", str(out)]) == 0
    rows = [r for r in iter_trace(out) if isinstance(r, TraceRow)]
    scaled = list(scale_stream(generate_swebench(SwebenchParams(num_sessions=24, sps=2.0, max_turns=6,
                                                                max_input=6000), V, 7), 4, V).rows)
    assert rows == _first_sessions(scaled, 2) and {r.session_id for r in rows} == {0, 4}
