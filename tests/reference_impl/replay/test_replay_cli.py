"""The replayer CLI end to end, through a subprocess, on traces written by the test."""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from reference_impl.models import get_model
from reference_impl.policies.registry import make_replay_cache
from reference_impl.replay.api import ReplayConfig
from reference_impl.replay.run import replay_rows
from workloads.trace import TraceRow, write_trace


def agent_trace(path: Path, sessions: int = 6, turns: int = 5, seed: int = 0) -> list[TraceRow]:
    """Multi-turn sessions sharing a system prompt: each turn extends the previous input + output."""
    rng = random.Random(seed)
    system = [rng.randrange(50_000) for _ in range(300)]
    rows = []
    for s in range(sessions):
        history = system + [rng.randrange(50_000) for _ in range(200)]
        for t in range(turns):
            user = [rng.randrange(50_000) for _ in range(rng.randint(30, 120))]
            out = [rng.randrange(50_000) for _ in range(rng.randint(10, 60))]
            rows.append(TraceRow(s, t, s * 0.25 + t * 5.0, tuple(history + user), tuple(out)))
            history = history + user + out
    write_trace(path, rows)
    return rows


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reference_impl.replay", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_json_output_has_the_documented_keys_and_consistent_counts(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    rows = agent_trace(trace)
    proc = run_cli(str(trace), "--policy", "lru", "--capacity-bytes", "1e10", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key in (
        "token_hit_rate",
        "request_hit_rate",
        "flops_saved",
        "num_requests",
        "input_tokens",
        "hit_tokens",
        "elapsed_s",
    ):
        assert key in out
    assert out["num_requests"] == len(rows)
    assert out["input_tokens"] == sum(len(r.input_tokens) for r in rows)
    assert out["token_hit_rate"] == pytest.approx(out["hit_tokens"] / out["input_tokens"])
    # With a roomy cache every later turn reuses its predecessor's input + output - 1 tokens.
    hits = [len(p.input_tokens) + len(p.output_tokens) - 1 for p, r in itertools.pairwise(rows) if r.turn_id > 0]
    assert out["hit_tokens"] == sum(hits)
    assert out["request_hit_rate"] == pytest.approx(len(hits) / len(rows))
    model = get_model("marconi-7b")
    assert out["flops_saved"] == pytest.approx(sum(model.prefill_flops(n) for n in hits))


def test_text_output_names_the_metrics(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    agent_trace(trace)
    proc = run_cli(str(trace), "--policy", "seglen", "--strategy", "extra_buffer", "--capacity-bytes", "2e9")
    assert proc.returncode == 0, proc.stderr
    for label in ("token hit rate", "request hit rate", "FLOPs saved", "states admitted", "states evicted"):
        assert label in proc.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["missing.jsonl", "--policy", "lru", "--capacity-bytes", "1e9"], "cannot open trace"),
        (["{trace}", "--policy", "fifo", "--capacity-bytes", "1e9"], "invalid choice"),
        (["{trace}", "--policy", "lru", "--capacity-bytes", "0"], "positive"),
        (["{trace}", "--policy", "lru", "--capacity-bytes", "lots"], "not a number"),
        (["{bad}", "--policy", "lru", "--capacity-bytes", "1e9"], "not valid JSON"),
        (["{trace}", "--policy", "lru", "--capacity-bytes", "1e6"], "state slots"),
        (["{trace}", "--policy", "lru", "--capacity-bytes", "1e9", "--page-size", "4"], "page-size 1"),
        # these three exited 0
        (["{trace}", "--policy", "seglen", "--capacity-bytes", "1e9", "--eff-weight", "inf"],
         "--eff-weight: must be a finite number >= 0, got inf"),
        (["{trace}", "--policy", "lru,,seglen", "--capacity-bytes", "1e9"], "empty policy name in 'lru,,seglen'"),
        (["{trace}", "--policy", "seglen", "--capacity-bytes", "1e9", "--eff-weight", "1.5"],
         "--eff-weight must be in [0, 1] for seglen"),
        # Marconi's trees hold 4-byte ids: this was an OverflowError's traceback mid-replay
        (["{wide}", "--policy", "lru,marconi", "--capacity-bytes", "1e9"], "wide.jsonl:2: 'input_tokens' holds token id"
         " 4294967296, outside the vocabulary (4294967296 tokens)"),
        (["{wide}", "--policy", "vllm_plus", "--capacity-bytes", "1e9"], "wide.jsonl:2:"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    trace = tmp_path / "t.jsonl"
    agent_trace(trace, sessions=1, turns=1)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"session_id": 0, "turn_id": 0, "input_tokens": [1], "output_tokens": [2]}\n{oops\n')
    wide = tmp_path / "wide.jsonl"
    write_trace(wide, [TraceRow(0, 0, 0.0, (1, 2), (3,)), TraceRow(1, 0, 0.0, (5, 2**32), (3,))])
    argv = [a.format(trace=trace, bad=bad, wide=wide) for a in args]
    proc = run_cli(*argv)
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert proc.stdout == ""


def test_ids_past_4_bytes_replay_under_the_radix_policies(tmp_path: Path) -> None:
    wide = tmp_path / "wide.jsonl"
    write_trace(wide, [TraceRow(0, 0, 0.0, (1, 2**40), (3,)), TraceRow(0, 1, 1.0, (1, 2**40, 3, 4), (3,))])
    proc = run_cli(str(wide), "--policy", "lru,seglen", "--capacity-bytes", "1e9")
    assert proc.returncode == 0 and proc.stdout.count("requests                2") == 2, proc.stderr


def test_small_cache_evicts_and_hits_less_than_a_large_one(tmp_path: Path) -> None:
    rows = agent_trace(tmp_path / "t.jsonl", sessions=10, turns=6)
    model = get_model("marconi-7b")
    rates = {}
    for cap in (1.5e9, 3e10):
        cfg = ReplayConfig(capacity_bytes=int(cap), model=model)
        rates[cap] = replay_rows("lru", rows, make_replay_cache("lru", cfg), model)
    assert rates[1.5e9].states_evicted > 0 and rates[3e10].states_evicted == 0
    assert rates[1.5e9].token_hit_rate < rates[3e10].token_hit_rate


@pytest.mark.parametrize("policy", ["lru", "seglen"])
def test_admit_of_other_tokens_than_looked_up_is_rejected(policy: str) -> None:
    model = get_model("marconi-7b")
    cache = make_replay_cache(policy, ReplayConfig(capacity_bytes=int(4e10), model=model))
    looked_up = tuple(range(100, 400))
    cache.lookup(looked_up)
    cache.admit(list(looked_up), (7, 8))  # equal tokens, another object: compared, accepted
    cache.lookup(looked_up)
    cache.admit((*looked_up[:-1], 1), (7, 8))  # not what was looked up: served uncached
    notes = dict(cache.stats().notes)
    assert notes["rejected_requests"] == 1
    assert cache.lookup((*looked_up, 7, 9)) == 301  # the accepted request's input and first output token


# The command run as `python -m`, then its own peak RSS (VmHWM of this process image) on stderr. The child's
# rusage would not do: Linux carries the forking parent's (pytest's) peak into a child's ru_maxrss at exec.
_PEAK = """
import runpy, sys
sys.argv = ["reference_impl.replay", *sys.argv[1:]]
code = 0
try:
    runpy.run_module("reference_impl.replay", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
print("PEAK_KB", hwm.split()[1], file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM is Linux's")
@pytest.mark.parametrize("policy", ["lru", "seglen"])
def test_replay_memory_does_not_grow_with_the_capacity(policy: str, tmp_path: Path) -> None:
    """'Infinite capacity' is how Marconi-style studies run: 1e16 bytes once built a list of 1.8e8 state slots
    (7 GB, 20 s). The whole command's peak RSS stays under 100 MB."""
    trace = tmp_path / "t.jsonl"
    agent_trace(trace)
    proc = subprocess.run([sys.executable, "-c", _PEAK, str(trace), "--policy", policy, "--capacity-bytes", "1e16"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "state pool slots" in proc.stdout
    peak_kb = int(proc.stderr.split("PEAK_KB")[1].split()[0])
    assert peak_kb < 100 * 1024, f"peak RSS {peak_kb} KB"


# As _PEAK, but reporting how many OS threads the process ran on (OpenBLAS's workers are not Python threads).
_THREADS = _PEAK.split("hwm = ", maxsplit=1)[0] + (
    'print("THREADS", len(__import__("os").listdir("/proc/self/task")), file=sys.stderr)\nsys.exit(code)\n'
)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="/proc/self/task is Linux's")
def test_replay_runs_on_one_thread(tmp_path: Path) -> None:
    """numpy (the trace reader's parser) would start an OpenBLAS worker per core, whose start-up and idle spinning
    the CPU seconds of the whole command pay for; the replay does no linear algebra, so it asks for none."""
    trace = tmp_path / "t.jsonl"
    agent_trace(trace, sessions=2, turns=2)
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    proc = subprocess.run([sys.executable, "-c", _THREADS, str(trace), "--policy", "lru", "--capacity-bytes", "4e10"],
                          capture_output=True, text=True, timeout=120, check=False, env=env)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stderr.split("THREADS")[1].split()[0]) == 1
