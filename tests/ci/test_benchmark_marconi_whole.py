"""benchmarks/marconi_whole_commands.py compares what two whole commands print: ours
(``python -m reference_impl.replay``) and Marconi's simulator driven by benchmarks/marconi_replay.py. These tests
hold the pieces that decide its table without Marconi's code: the driver runs against a stand-in checkout, and
its lines must parse exactly as ours do, or every row would read MISMATCH (or, worse, agree by accident)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_impl.replay.__main__ import main as replay_main
from workloads.trace import TraceRow, write_trace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import marconi_replay  # noqa: E402
from marconi_whole_commands import agreement, cut_sessions, parse, ratio, row  # noqa: E402
from marconi_whole_commands import main as marconi_main  # noqa: E402
from whole_command import Summary  # noqa: E402

# A stand-in for Marconi's checkout: the three modules the driver imports, with a tree that reuses the longest
# prefix of anything inserted before (no capacity), recording request_history as Marconi's trees do.
_FAKE_TREE = '''
class RadixCache:
    def __init__(self, capacity_bytes, eff_weight=0, **kwargs):
        self.seen, self.request_history, self.eff_weight = [], [], eff_weight
    def match_prefix(self, ids):
        best = max((next((i for i, (a, b) in enumerate(zip(ids, s)) if a != b), min(len(ids), len(s)))
                    for s in self.seen), default=0)
        self.request_history.append((best > 0, len(ids), best))
    def insert(self, token_ids, state_at_leaf, state_at_branchoff):
        self.seen.append(token_ids)
'''


def _trace(path: Path) -> Path:
    shared = tuple(range(10, 60))
    rows = [TraceRow(s, t, float(s + t), shared + tuple(range(100 * s, 100 * s + 20 * (t + 1))), (7, 8, 9))
            for t in range(3) for s in range(3)]
    write_trace(path, rows, {"generator": "test"})
    return path


@pytest.fixture
def fake_marconi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    d = tmp_path / "marconi"
    d.mkdir()
    names = ("config_tuner", "radix_cache_hybrid", "radix_cache_vllm")
    (d / "config_tuner.py").write_text("as_completed = None\n")
    (d / "radix_cache_hybrid.py").write_text(_FAKE_TREE)
    (d / "radix_cache_vllm.py").write_text(_FAKE_TREE)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the driver puts the checkout on sys.path: undone after
    yield d
    for name in names:  # nor do the stand-ins stay imported for other tests in this worker
        sys.modules.pop(name, None)


def test_the_driver_skips_our_metadata_line_and_prints_lines_that_parse(
    tmp_path: Path, fake_marconi: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _trace(tmp_path / "t.jsonl")
    assert len(marconi_replay.load_request_trace(trace)) == 9  # the metadata line is not a request
    rc = marconi_replay.main([str(trace), "--policy", "marconi", "--capacity-bytes", "1e9",
                              "--marconi-dir", str(fake_marconi)])
    out = parse(capsys.readouterr().out)
    assert rc == 0
    assert out["requests"] == "9"
    assert out["alpha"] == "0"  # Marconi's grid holds the int 0 and 1.0: printed as ours prints α (:g)
    # sessions 1 and 2 reuse the shared 50 tokens on turn 0; every later turn its previous input (not the output)
    reused = 2 * 50 + sum(50 + 20 * t for t in (1, 2) for _ in range(3))
    total = sum(50 + 20 * (t + 1) for t in range(3)) * 3
    assert out["token hit rate"] == f"{reused / total:.4%}"


def test_our_replay_command_prints_the_lines_compared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _trace(tmp_path / "t.jsonl")
    argv = [str(trace), "--policy", "marconi", "--capacity-bytes", "4e10"]
    assert replay_main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert replay_main(argv) == 0
    ours = capsys.readouterr().out
    assert set(parse(ours)) == {"token hit rate", "requests", "alpha"}
    # the driver's lines for the same counts and α read as equal: the layouts agree, not only the numbers
    alpha = f"{result['notes']['alpha']:g}"
    counts = result["num_requests"], result["input_tokens"], result["hit_tokens"]
    theirs = marconi_replay.render("marconi", *counts, alpha)
    assert agreement(ours, theirs) == ""
    assert result["hit_tokens"] > 0  # the trace shares prefixes, so a wrong layout cannot agree on zeros


def test_agreement_names_what_differs() -> None:
    ours = marconi_replay.render("marconi", 10, 1000, 437, "0.2")
    assert agreement(ours, ours) == ""
    assert agreement(ours, marconi_replay.render("marconi", 10, 1000, 438, "0.2")) == \
        "MISMATCH: token hit rate 43.7000% / 43.8000%"
    assert "alpha 0.2 / 0.3" in agreement(ours, marconi_replay.render("marconi", 10, 1000, 437, "0.3"))
    assert "requests" in agreement(ours, marconi_replay.render("marconi", 11, 1000, 437, "0.2"))
    assert agreement(ours, "Traceback ...") == "MISMATCH: no token hit rate printed"


def test_ratio_and_verdict_hold_the_ten_times_line() -> None:
    theirs = Summary("marconi", 1, 30.0, 30.0, 900.0)
    assert ratio(3.0, 30.0) == 10.0
    assert "| 10.0× | meets |" in row("t", 4e10, "marconi", Summary("ours", 1, 3.0, 3.0, 300.0), theirs,
                                     hit="x / x", mismatch="", load="1.0")
    missed = row("t", 4e10, "marconi", Summary("ours", 1, 3.1, 3.1, 300.0), theirs, hit="x / y",
                 mismatch="MISMATCH: token hit rate x / y", load="1.0")
    assert "| 9.7× | misses |" in missed
    assert missed.endswith(" MISMATCH: token hit rate x / y")
    assert ratio(0.0, 1.0) == float("inf")


def test_a_session_cut_keeps_whole_sessions_in_trace_order(tmp_path: Path) -> None:
    src = _trace(tmp_path / "t.jsonl")
    assert cut_sessions(src, tmp_path / "cut.jsonl", 2) == (6, sum(50 + 20 * (t + 1) for t in range(3)) * 2)
    lines = [json.loads(x) for x in (tmp_path / "cut.jsonl").read_text().splitlines()]
    assert "__trace_metadata__" in lines[0]
    assert [(r["session_id"], r["turn_id"]) for r in lines[1:]] == [(s, t) for t in range(3) for s in range(2)]


@pytest.mark.parametrize(("flag", "value"), [
    ("--capacities", "nan"), ("--capacities", "inf"), ("--capacities", "0"), ("--capacities", "4e10,-1"),
    ("--capacities", "4e10,x"), ("--capacities", ""), ("--sessions", "-1"), ("--repeats", "0"),
])
def test_a_flag_that_names_no_measurement_is_refused_in_one_line(
        flag: str, value: str, fake_marconi: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--trace", str(_trace(tmp_path / "t.jsonl")), "--marconi-dir", str(fake_marconi), "--dir",
            str(tmp_path / "work"), flag, value]
    with pytest.raises(SystemExit) as exc:
        marconi_main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and err[0].startswith("error: ") and flag in err[0], err
    assert not (tmp_path / "work").exists()  # refused before anything was written


@pytest.mark.parametrize(("bad", "says"), [
    ('{"session_id": "s0", "turn_id": 0, "input_tokens": [1], "output_tokens": [2]}', "t.jsonl:1: ValueError"),
    ('{"session_id": 0, "turn_id": 0, "input_tok', "t.jsonl:1: JSONDecodeError"),
])
def test_a_trace_the_cut_cannot_read_is_one_line_and_leaves_no_cut(
        bad: str, says: str, fake_marconi: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A string session_id or a truncated line raised a traceback half-way, and the partial cut, newer than its
    # source, was reused by the next run as the whole cut.
    trace = tmp_path / "t.jsonl"
    trace.write_text(bad + "\n")
    with pytest.raises(SystemExit) as exc:
        marconi_main(["--trace", str(trace), "--marconi-dir", str(fake_marconi), "--dir", str(tmp_path / "work"),
                      "--sessions", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and says in err[-1], err
    assert list((tmp_path / "work").iterdir()) == []  # no partial cut to reuse


def test_a_relative_dir_is_taken_from_where_the_command_runs(
        fake_marconi: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The trace cache folders under --dir went to the replay as relative paths, which it refuses.
    monkeypatch.chdir(tmp_path)
    assert marconi_main(["--trace", str(_trace(tmp_path / "t.jsonl")), "--marconi-dir", str(fake_marconi),
                         "--dir", "work", "--sessions", "1", "--capacities", "1e9", "--policies", "sglang_plus",
                         "--trace-cache", "cold"]) in (0, 1)
    assert (tmp_path / "work").is_dir()
