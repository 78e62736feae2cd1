"""Every benchmark script refuses a bad argument before it measures anything: one line naming the flag, exit 2.
Zero or negative counts, a missing folder or file and a tree of no hybridbench commit each once ended in a
Python traceback, some of them after minutes of work (a median of no repeats, a division by zero paths)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

CASES: list[tuple[str, list[str], str]] = [
    ("harness_commands", ["--baseline", str(ROOT), "--repeats", "0"], "argument --repeats: must be >= 1, got 0"),
    ("harness_commands", ["--baseline", "/nonexist"], "argument --baseline: /nonexist: no such directory"),
    ("harness_commands", ["--baseline", "{tmp}"], "argument --baseline: {tmp}: not a tree of a hybridbench commit"),
    ("harness_commands", ["--baseline", str(ROOT), "--sglang", "/nope"], "argument --sglang: /nope: no such file"),
    ("sequential_looks", ["--paths", "0"], "argument --paths: must be >= 1, got 0"),
    ("sequential_looks", ["--confidence", "1.5"], "argument --confidence: must be in (0, 1), got '1.5'"),
    ("sequential_looks", ["--sd", "-1"], "argument --sd: must be a finite number > 0, got '-1'"),
    ("sequential_looks", ["--repeats", "5", "--repeats-max", "3"], "--repeats-max: must be >= --repeats (5), got 3"),
    ("whole_commands", ["--baseline", "/nonexist"], "argument --baseline: /nonexist: no such directory"),
    ("whole_commands", ["--repeats", "-1"], "argument --repeats: must be >= 1, got -1"),
    ("whole_commands", ["--dir", "{tmp}/afile"], "argument --dir: {tmp}/afile: exists and is not a directory"),
    # matched nothing: an empty table and exit 0 (read as "nothing regressed"), after generating 500 MB of traces
    ("whole_commands", ["--only", "nomatch,zzz", "--dir", "{tmp}/d"], "argument --only: no target's name has any of "
                                                                      "nomatch, zzz"),
    ("calibrate_sim", ["--fit", "--rounds", "0"], "argument --rounds: must be >= 1, got 0"),
    ("client_overhead", ["--requests", "0"], "argument --requests: must be >= 1, got 0"),
    ("client_overhead", ["--concurrency", "4,0"], "argument --concurrency: every count must be >= 1"),
    ("compare_marconi", ["--repeats", "0"], "argument --repeats: must be >= 1, got 0"),
    ("compare_marconi", ["--sessions", "-2", "--ours-only"], "argument --sessions: must be >= 1, got -2"),
    ("compare_marconi", ["--marconi-dir", "/nonexist"], "argument --marconi-dir: /nonexist: no such directory"),
    ("compare_marconi", ["--trace", "{tmp}", "--ours-only"], "argument --trace: {tmp}: not a trace file"),
    ("marconi_replay", ["/nonexist.jsonl", "--policy", "marconi", "--capacity-bytes", "1e9"],
     "argument trace: /nonexist.jsonl: no such file"),
    ("marconi_replay", ["{tmp}/afile", "--policy", "marconi", "--capacity-bytes", "0"],
     "argument --capacity-bytes: must be a finite number > 0, got '0'"),
    ("marconi_whole_commands", ["--repeats", "0"], "argument --repeats: must be >= 1, got 0"),
    ("marconi_whole_commands", ["--sessions", "-1"], "argument --sessions: must be >= 0, got -1"),
    ("marconi_whole_commands", ["--marconi-python", "/nope"], "argument --marconi-python: /nope: no such file"),
    ("reference_server_speed", ["--prompts", "0"], "argument --prompts: must be >= 1, got 0"),
    ("reference_server_speed", ["--decode-steps", "many"], "argument --decode-steps: not a whole number: 'many'"),
    ("replay_throughput", ["--sessions", "0"], "argument --sessions: must be >= 1, got 0"),
    ("replay_throughput", ["--capacity-bytes", "nan"], "argument --capacity-bytes: must be a finite number > 0"),
    ("replay_throughput", ["--baseline-src", "/nonexist"], "argument --baseline-src: /nonexist: no such directory"),
    ("replay_throughput", ["--scales", "1,-1"], "argument --scales: every multiple must be positive"),
    ("sglang_oracle_speed", ["--ops", "0"], "argument --ops: must be >= 1, got 0"),
    ("sglang_oracle_speed", ["--states", "-5"], "argument --states: must be >= 1, got -5"),
    ("verdict_power", ["--runs", "0"], "argument --runs: must be >= 1, got 0"),
    ("verdict_power", ["--planted", "-0.1"], "argument --planted: must be a finite number > 0, got '-0.1'"),
    ("verdict_power", ["--repo", "{tmp}"], "argument --repo: {tmp}: not a tree of a hybridbench commit"),
    ("verdict_power", ["--recount", "/nonexist"], "argument --recount: /nonexist: no such directory"),
    ("verdict_power", ["--json", "{tmp}"], "argument --json: {tmp}: is a directory"),
]


@pytest.mark.parametrize(("script", "argv", "says"), CASES, ids=[f"{c[0]}-{'-'.join(c[1])}"[:60] for c in CASES])
def test_a_bad_argument_is_one_line_naming_the_flag_and_exit_2(
        script: str, argv: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "afile").write_text("")
    main = importlib.import_module(script).main
    with pytest.raises(SystemExit) as exited:
        main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert captured.out == "" and len(err) == 1 and err[0].startswith("error: "), captured
    assert says.replace("{tmp}", str(tmp_path)) in err[0], err
