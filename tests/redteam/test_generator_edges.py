"""Generator and trace-tool inputs that got past validation: ``--sps 1e-320`` wrote ``"ts": Infinity`` rows (not
JSON, refused by every trace reader) with exit 0; ``gsp --zipf-alpha 1100`` and ``workloads.scale --vocab-size
1e23`` (or such a vocab_size in a trace's metadata) ended in an OverflowError traceback (exit 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workloads.cli import run_cli
from workloads.generate import main as generate_main
from workloads.scale import main as scale_main
from workloads.trace import TraceError, TraceRow, write_trace


def _generate(argv: list[str]) -> int:
    return run_cli(generate_main, "python -m workloads.generate", argv)


def _scale(argv: list[str]) -> int:
    return run_cli(scale_main, "python -m workloads.scale", argv)


@pytest.mark.parametrize("workload", ["sharegpt", "swebench"])
def test_an_sps_whose_sessions_start_at_infinity_is_refused(workload: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.jsonl"
    code = _generate([workload, "--vocab-size", "1000", "--num-sessions", "3", "--max-turns", "2", "--sps", "1e-320",
                      "-o", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "sps" in err and len(err.splitlines()) == 1, err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_the_writer_never_writes_a_ts_the_readers_refuse(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    with pytest.raises(TraceError, match="'ts' must be a finite number"):
        write_trace(out, [TraceRow(0, 0, float("inf"), (1,), (2,), {})], {"vocab_size": 10})
    assert list(tmp_path.iterdir()) == []


def test_a_zipf_alpha_past_a_float_puts_every_prompt_in_group_0(tmp_path: Path) -> None:
    out = tmp_path / "z.jsonl"
    code = _generate(["gsp", "--vocab-size", "1000", "--group-distribution", "zipf", "--zipf-alpha", "1100",
                      "--num-groups", "3", "--prompts-per-group", "2", "--system-prompt-len", "5", "--question-len",
                      "3", "--output-len", "2", "-o", str(out)])
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    assert len(rows) == 6 and {r["group"] for r in rows} == {0}


def test_scale_refuses_a_vocab_past_token_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.jsonl"
    write_trace(src, [TraceRow(0, 0, 0.0, (1, 2, 3), (4,), {})], {"vocab_size": 10})
    out = tmp_path / "out.jsonl"
    assert _scale([str(src), "-o", str(out), "--factor", "2", "--vocab-size", str(10**23)]) == 2
    assert "--vocab-size" in capsys.readouterr().err
    meta = json.loads(src.read_text().splitlines()[0])
    meta["__trace_metadata__"]["vocab_size"] = 10**23
    big = tmp_path / "big.jsonl"
    big.write_text(json.dumps(meta) + "\n" + src.read_text().splitlines()[1] + "\n")
    assert _scale([str(big), "-o", str(out), "--factor", "2"]) == 2
    assert "vocab_size" in capsys.readouterr().err
    assert not out.exists()
