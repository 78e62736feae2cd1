"""Every trace consumer refuses the same bad rows the same way (issue 13): one line naming file:line, exit 2.

The rules live in one reader (workloads.trace.iter_trace); this pins that each consumer really goes through it:
stats, scale, the trace generator (what the harness's `trace` workload runs), replay and simulate.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import workloads.trace
from reference_impl.replay.__main__ import main as replay_main
from reference_impl.simulate import main as simulate_main
from workloads import generate, scale, stats
from workloads.cli import run_cli

GOOD = {"session_id": 0, "turn_id": 0, "ts": 0.0, "input_tokens": [1, 2, 3], "output_tokens": [4, 5]}

# (name, second line of the file, what the message says): each was once accepted (or crashed a consumer).
BAD = [
    ("duplicate", json.dumps(GOOD), "session 0 turn 0 already at line 1"),  # was sent twice
    ("ts-nan", json.dumps({**GOOD, "turn_id": 1, "ts": float("nan")}), "'ts' must be a finite number >= 0"),
    ("ts-inf", json.dumps({**GOOD, "turn_id": 1, "ts": float("inf")}), "'ts' must be a finite number >= 0"),
    ("ts-negative", json.dumps({**GOOD, "turn_id": 1, "ts": -1.0}), "'ts' must be a finite number >= 0"),
    ("token-2**70", json.dumps({**GOOD, "turn_id": 1, "input_tokens": [1, 2**70]}), "outside int64"),
    ("empty-prompt", json.dumps({**GOOD, "turn_id": 1, "input_tokens": []}), "'input_tokens' is empty"),
    ("long-line", json.dumps({**GOOD, "turn_id": 1, "input_tokens": [7] * 5000}), "line longer than 1000"),
    # JSON's escape of a lone surrogate: read as a session, its records then broke `results export` of the root.
    # json's own message ends in "at" (its position followed): once read "character at)", the position left off
    ("tab-in-string", '{"session_id": "x\ty"}', "not valid JSON (Invalid control character at column 18)"),
    ("surrogate-session", json.dumps({**GOOD, "session_id": "\ud800x"}), "'session_id' '\\ud800x' is not text"),
]

Consumer = Callable[[Path, Path], int]


def _replay(trace: Path, out: Path) -> int:
    del out
    return replay_main([str(trace), "--policy", "lru", "--capacity-bytes", "1e9"])


def _simulate(trace: Path, out: Path) -> int:
    del out
    return simulate_main([str(trace), "--max-concurrency", "1", "--model", "marconi-7b"])


CONSUMERS: dict[str, Consumer] = {
    "stats": lambda t, o: run_cli(stats.main, "workloads.stats", [str(t)]),
    "scale": lambda t, o: run_cli(scale.main, "workloads.scale",
                                  [str(t), "-o", str(o), "--factor", "2", "--vocab-size", "100"]),
    "generate-trace": lambda t, o: run_cli(generate.main, "workloads.generate",
                                           ["trace", "--path", str(t), "-o", str(o), "--vocab-size", "100"]),
    "replay": _replay,
    "simulate": _simulate,
}


def test_every_consumer_accepts_the_good_row(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "turn_id": 1, "ts": 0.5}) + "\n")
    for name, consume in CONSUMERS.items():
        assert consume(trace, tmp_path / f"{name}.jsonl") == 0, name


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
@pytest.mark.parametrize(("case", "line", "needle"), BAD, ids=[b[0] for b in BAD])
def test_every_consumer_refuses_each_bad_row_in_one_line(  # noqa: PLR0917 - pytest's parameters
        consumer: str, case: str, line: str, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    del case  # the id
    monkeypatch.setattr(workloads.trace, "MAX_LINE_CHARS", 1000)  # the bound itself is 64 MB; the rule is what counts
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps(GOOD) + "\n" + line + "\n")
    out = tmp_path / "out.jsonl"
    assert CONSUMERS[consumer](trace, out) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{trace}:2: " in err and needle in err, err
    assert not out.exists()  # nothing half-written


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
@pytest.mark.parametrize(("kind", "needle"), [
    ("fifo", "a pipe with no writer (nothing written in 0.2 s); not a trace file"),  # once waited forever
    ("directory", "not a trace file (a directory, not a regular file or pipe)"),
    ("device", "not a trace file (a device or socket, not a regular file or pipe)"),  # /dev/zero: once read to 64 MB
])
def test_a_path_that_is_no_trace_file_is_refused_in_one_line(  # noqa: PLR0917 - pytest's parameters
        consumer: str, kind: str, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workloads.trace, "PIPE_WAIT_S", 0.2)
    path = {"fifo": tmp_path / "t.jsonl", "directory": tmp_path, "device": Path("/dev/zero")}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    out = tmp_path / "out.jsonl"
    assert CONSUMERS[consumer](path, out) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{path}: {needle}" in err, err
    assert not out.exists()


def test_a_pipe_with_a_writer_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(json.dumps(GOOD) + "\n"))
    writer.start()
    assert CONSUMERS["stats"](fifo, tmp_path / "o") == 0
    writer.join()
    assert "requests           1 in 1 sessions" in capsys.readouterr().out


def test_the_harness_refuses_token_ids_outside_the_engines_vocabulary(tmp_path: Path) -> None:
    from hybridbench.app import run
    from hybridbench.config.schema import EngineCfg, RunCfg, WorkloadCfg
    from hybridbench.errors import ConfigError

    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({**GOOD, "input_tokens": [1, 5000]}) + "\n")  # the tiny model has 4096 tokens
    cfg = RunCfg(workloads={"t": WorkloadCfg(kind="trace", params={"path": str(trace)})},
                 engine=EngineCfg(name="sim", max_vocab=4096, tp=4))
    with pytest.raises(ConfigError, match=r"^workloads\.t: .*5000.*4096"):
        run(cfg, tmp_path / "run", {})


def test_a_late_timestamp_is_a_timestamp(tmp_path: Path) -> None:
    """A trace may span hours: no bound on ts but finite and >= 0."""
    path = tmp_path / "late.jsonl"
    path.write_text(json.dumps({"session_id": 0, "turn_id": 0, "ts": 86400.5, "input_tokens": [1],
                                "output_tokens": [2]}) + "\n")
    assert workloads.trace.read_trace(path).rows[0].ts == 86400.5
