"""The CLIs through subprocess: outputs, byte-identical reruns, and bad input -> one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=120, check=False)


def _gen(out: Path, *args: str, seed: str = "1") -> subprocess.CompletedProcess[str]:
    return _run("workloads.generate", *args, "--vocab-size", "1000", "--seed", seed, "-o", str(out))


@pytest.mark.parametrize(
    "args",
    [
        ["gsp", "--num-groups", "3", "--prompts-per-group", "4", "--system-prompt-len", "30", "--question-len", "5",
         "--output-len", "4", "--num-turns", "2", "--group-distribution", "zipf", "--zipf-alpha", "1.1"],
        ["random", "--num-prompts", "5", "--input-len", "20", "--output-len", "2"],
        ["sharegpt", "--num-sessions", "5"],
        ["sharegpt", "--path", str(FIXTURES / "sharegpt_tiny.json"), "--preset", "marconi", "--min-turns", "1"],
        ["swebench", "--num-sessions", "2", "--max-turns", "8", "--max-input", "20000"],
        ["swebench", "--path", str(FIXTURES / "swe_agent_tiny.traj")],
        ["trace", "--path", str(FIXTURES / "swebench_sps=10_art=5_nums=2.jsonl")],
        ["gsp", "--preset", "radix", "--num-groups", "2", "--prompts-per-group", "2", "--scale", "16"],
    ],
)  # fmt: skip
def test_generate_then_stats(tmp_path: Path, args: list[str]) -> None:
    out = tmp_path / "t.jsonl"
    done = _gen(out, *args)
    assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    meta = json.loads(lines[0])["__trace_metadata__"]
    assert meta["vocab_size"] == 1000 and "synthetic" in meta
    rows = [json.loads(line) for line in lines[1:]]
    assert rows and all(t < 1000 for r in rows for t in r["input_tokens"] + r["output_tokens"])
    stats = _run("workloads.stats", str(out))
    assert stats.returncode == 0, stats.stderr
    assert "ideal hit rate" in stats.stdout
    assert ("SYNTHETIC" in stats.stdout) == bool(meta["synthetic"])
    as_json = json.loads(_run("workloads.stats", str(out), "--json").stdout)
    assert as_json["rows"] == len(rows)


def test_same_seed_is_byte_identical_and_seed_matters(tmp_path: Path) -> None:
    args = ["swebench", "--num-sessions", "3", "--max-turns", "10"]
    for name, seed in (("a", "5"), ("b", "5"), ("c", "6")):
        assert _gen(tmp_path / f"{name}.jsonl", *args, seed=seed).returncode == 0
    a, b, c = ((tmp_path / f"{n}.jsonl").read_bytes() for n in "abc")
    assert a == b and a != c


def test_scale_cli(tmp_path: Path) -> None:
    src, dst = tmp_path / "g.jsonl", tmp_path / "s.jsonl"
    assert (
        _gen(src, "gsp", "--num-groups", "4", "--prompts-per-group", "2", "--system-prompt-len", "40").returncode == 0
    )
    done = _run("workloads.scale", str(src), "-o", str(dst), "--factor", "2")
    assert done.returncode == 0, done.stderr
    meta = json.loads(dst.read_text().splitlines()[0])["__trace_metadata__"]
    assert meta["scale"][0]["factor"] == 2 and meta["generator"] == "gsp"
    assert len(dst.read_text().splitlines()) == 1 + 4  # 2 of 4 groups x 2 prompts
    marconi = FIXTURES / "swebench_sps=10_art=5_nums=2.jsonl"
    missing_vocab = _run("workloads.scale", str(marconi), "-o", str(dst), "--factor", "2")
    assert missing_vocab.returncode == 2 and "--vocab-size" in missing_vocab.stderr


def _bad_cases(tmp: Path) -> list[tuple[list[str], str]]:
    bad_rows = tmp / "bad_rows.jsonl"
    bad_rows.write_text('{"session_id": 0, "turn_id": 0, "input_tokens": [1, "x"], "output_tokens": []}\n')
    not_json = tmp / "not.json"
    not_json.write_text("{{{")
    big_ids = tmp / "swebench_sps=1_art=5_nums=1.jsonl"
    big_ids.write_text('{"session_id": 0, "turn_id": 0, "input_tokens": [5000], "output_tokens": [1]}\n')
    return [
        (["workloads.generate", "chat"], "invalid choice"),
        (["workloads.generate", "gsp", "--bogus"], "unrecognized"),
        (["workloads.generate", "gsp", "--num-groups", "-1"], "num_groups"),
        (["workloads.generate", "gsp", "--question-len", "-5"], "question_len"),
        (["workloads.generate", "gsp", "--num-groups", "x"], "invalid int"),
        (["workloads.generate", "gsp", "--group-distribution", "zipf"], "zipf_alpha"),
        (["workloads.generate", "gsp", "--num-groups", "20", "--prompts-per-group", "2000"], "too small"),
        (["workloads.generate", "random", "--range-ratio", "2"], "range_ratio"),
        (["workloads.generate", "sharegpt", "--path", str(tmp / "missing.json")], "missing.json"),
        (["workloads.generate", "sharegpt", "--path", str(not_json)], "not a ShareGPT JSON"),
        (["workloads.generate", "sharegpt", "--path", str(FIXTURES / "swe_agent_tiny.traj")], "JSON list"),
        (["workloads.generate", "swebench", "--path", str(FIXTURES / "sharegpt_tiny.json")], "trajectory"),
        (["workloads.generate", "swebench", "--path", str(big_ids)], ">= --vocab-size"),
        (["workloads.generate", "trace", "--path", str(bad_rows)], "input_tokens"),
        (["workloads.generate", "swebench", "--sps", "0"], "sps"),
        (["workloads.generate", "gsp", "--system-prompt-len", "0", "--question-len", "0"],
         "system_prompt_len + question_len must be >= 1"),
        (["workloads.generate", "gsp", "--num-groups", "100000000"], "one workload may generate at most 1,000,000"),
    ]


def test_bad_input_is_one_line_exit_2_and_no_output(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for args, needle in _bad_cases(tmp_path):
        out = out_dir / "t.jsonl"
        tail = ["--vocab-size", "1000", "-o", str(out)] if args[0] == "workloads.generate" else []
        done = _run(*args, *tail)
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
        assert needle in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
        assert list(out_dir.iterdir()) == [], args  # nothing half-written, no temp file left


def test_stats_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"session_id": 0}\n')
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for path, needle in ((tmp_path / "missing.jsonl", "cannot open"), (bad, "missing key"), (empty, "no rows")):
        done = _run("workloads.stats", str(path))
        assert done.returncode == 2 and needle in done.stderr and len(done.stderr.splitlines()) == 1
    assert _run("workloads.stats").returncode == 2
