"""The server's usage over time, read back from a run's saved logs (``hybridbench.results.read_usage``): a
trial's line range, an arm's whole log (older runs, the real-SGLang recordings), and the notes for a run without
logs or without usage lines. The reference engine's own ranges are checked in test_reference_engine.py."""

from __future__ import annotations

import gzip
import json
import shutil
from itertools import pairwise
from pathlib import Path

from hybridbench.records.server_log import parse_sglang_log_line
from hybridbench.results import read_run, read_usage

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "runs"
RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "sglang_cpu" / "recorded"


def _run(tmp_path: Path, name: str = "reference-smoke-kl") -> Path:
    shutil.copytree(FIXTURES / name, tmp_path / name)
    return tmp_path / name


def _real_log(name: str = "evict-0.5.23-server-lru.log.gz") -> str:
    return gzip.decompress((RECORDED / name).read_bytes()).decode()


def _timed_batch_lines(text: str) -> list[str]:
    return [line for line in text.split("\n") if (s := parse_sglang_log_line(line)) is not None and s.timestamp]


def test_timestamps_keep_their_fraction_of_a_second() -> None:
    ref = parse_sglang_log_line("[2026-11-25 00:36:18,365] Decode batch, #running-req: 4, full token usage: 0.04, "
                                "mamba usage: 0.02")
    assert ref is not None and ref.timestamp == "2026-11-25 00:36:18.365"
    sglang = parse_sglang_log_line("[2026-11-24 20:47:59] Prefill batch, #new-seq: 1, full token usage: 0.00")
    assert sglang is not None and sglang.timestamp == "2026-11-24 20:47:59"


def test_an_arm_without_line_ranges_gets_its_whole_real_sglang_log(tmp_path: Path) -> None:
    run = _run(tmp_path)
    text = _real_log()
    (run / "logs").mkdir()
    (run / "logs" / "server-branching.log").write_text(text)
    usage = read_usage(read_run(run))
    assert [(s.arm, s.workload, s.lines) for s in usage.series] == [("branching", "", None)]
    points = usage.series[0].points
    assert len(points) == len(_timed_batch_lines(text)) > 10
    assert points[0].t_s == 0.0 and points[-1].t_s > 0
    assert all(a.t_s <= b.t_s for a, b in pairwise(points))
    assert max(p.mamba_usage or 0 for p in points) > 0  # the recording's hybrid pool
    assert "whole log" in usage.note


def test_a_trial_gets_exactly_the_lines_its_bundle_names(tmp_path: Path) -> None:
    run = _run(tmp_path)
    lines = _real_log().split("\n")
    (run / "logs").mkdir()
    (run / "logs" / "server-disabled.log").write_text("\n".join(lines))
    start = next(i for i, line in enumerate(lines) if "Prefill batch" in line) + 5
    bundle = json.loads((run / "bundle.json").read_text())
    trial = next(t for t in bundle["trials"] if t["arm"] == "disabled")
    trial["server"].update(log_file="logs/server-disabled.log", log_lines=[start, start + 20])
    (run / "bundle.json").write_text(json.dumps(bundle))
    usage = read_usage(read_run(run))
    assert [(s.trial_id, s.lines) for s in usage.series] == [(trial["trial_id"], (start, start + 20))]
    assert len(usage.series[0].points) == len(_timed_batch_lines("\n".join(lines[start:start + 20]))) > 0
    assert usage.note == ""
    # A bundle pointing outside the run directory is not followed.
    (tmp_path / "outside.log").write_text("\n".join(lines))
    trial["server"]["log_file"] = "../outside.log"
    (run / "bundle.json").write_text(json.dumps(bundle))
    assert read_usage(read_run(run)).series == ()


def test_a_run_without_logs_says_so(tmp_path: Path) -> None:
    usage = read_usage(read_run(_run(tmp_path, "fbde869-smoke-sim")))
    assert usage.series == () and usage.note.startswith("no server log")


def test_a_log_without_usage_lines_says_so(tmp_path: Path) -> None:
    run = _run(tmp_path)
    (run / "logs").mkdir()
    (run / "logs" / "server-disabled.log").write_text("INFO:     Started server process [1]\n"
                                                      "(APIServer pid=1) INFO: Avg prompt throughput: 1.0 tokens/s\n")
    usage = read_usage(read_run(run))
    assert usage.series == () and "no batch lines" in usage.note
