"""The simulate CLI and the arm registry."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from reference_impl.engine.arms import parse_arm
from reference_impl.engine.summary import percentile
from workloads.stats import percentiles

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "swebench_sps=1_art=5_nums=20.jsonl"


def sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reference_impl.simulate", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_arms_compose_and_reject_what_this_engine_cannot_express() -> None:
    spec = parse_arm("branching+seglen+l2")
    assert (spec.strategy, spec.policy, spec.host_tier) == ("extra_buffer", "seglen", True)
    assert parse_arm("lru").strategy == "no_buffer"
    with pytest.raises(ValueError, match="cannot run on this engine"):
        parse_arm("marconi")
    with pytest.raises(ValueError, match="unknown arm 'fifo'"):
        parse_arm("lru+fifo")
    with pytest.raises(ValueError, match="does not compose"):
        parse_arm("disabled+l2")


def test_percentile_matches_numpy_linear_interpolation() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 90) == pytest.approx(4.6)
    assert percentile([7.0], 99) == 7.0
    # sorting once gives what each percentile gives alone, and NaN for no values
    assert percentiles(values, (50, 90, 99)) == [percentile(values, q) for q in (50, 90, 99)]
    assert all(math.isnan(x) for x in percentiles([], (50, 90)))


def test_summary_keys_and_cache_arms_against_disabled() -> None:
    out = {}
    for arm in ("disabled", "branching"):
        proc = sim(str(EXAMPLE), "--arm", arm, "--tp", "4", "--max-concurrency", "4", "--json")
        assert proc.returncode == 0, proc.stderr
        out[arm] = json.loads(proc.stdout)
    for key in ("completed", "duration", "request_throughput", "input_throughput", "output_throughput",
                "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "mean_e2e_latency_ms",
                "token_hit_rate", "peak_token_usage", "peak_mamba_usage", "retractions"):
        assert key in out["branching"]
    assert "modelled" in out["branching"]
    assert out["disabled"]["token_hit_rate"] == 0
    assert out["branching"]["token_hit_rate"] > 0.3
    assert out["branching"]["mean_ttft_ms"] < out["disabled"]["mean_ttft_ms"]
    assert out["branching"]["completed"] == out["disabled"]["completed"] == 44


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--arm", "marconi", "--max-concurrency", "2"], "cannot run on this engine"),
        (["--arm", "lru", "--max-concurrency", "0"], "must be positive"),
        (["--arm", "lru"], "choose a load"),
        (["--arm", "lru", "--request-rate", "-1"], "must be positive"),
        (["--arm", "lru", "--request-rate", "2", "--trace-timestamps"], "choose one"),
        (["--arm", "lru", "--max-concurrency", "2", "--page-size", "16"], "page size 1"),
        (["--arm", "lru", "--max-concurrency", "2", "--model", "gpt"], "invalid choice"),
        (["--arm", "lru", "--max-concurrency", "2"], "does not fit on 1 x h100"),
        # exited 0: the harness's engine.mem_fraction_static is in (0, 1]
        (["--tp", "4", "--max-concurrency", "2", "--mem-fraction-static", "2"],
         "argument --mem-fraction-static: must be in (0, 1], got 2"),
        # exited 0 with every request failed and nan metrics (--max-mamba-cache-size 1 was refused)
        (["--tp", "4", "--max-concurrency", "2", "--kv-tokens", "1"],
         "error: --kv-tokens: 44 of 44 requests cannot fit a KV pool of 1 tokens alone"),
        (["--tp", "4", "--arm", "seglen", "--max-concurrency", "2", "--eff-weight", "1.5"],
         "argument --eff-weight: must be in [0, 1], got 1.5"),
        (["--tp", "4", "--arm", "seglen", "--max-concurrency", "2", "--eff-weight", "heavy"],
         "argument --eff-weight: 'heavy' is not a valid float"),
        (["--tp", "4", "--arm", "branching", "--max-concurrency", "2", "--eff-weight", "0.5"],
         "--eff-weight is seglen's weight; arm branching evicts by lru, which has none"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], needle: str) -> None:
    proc = sim(str(EXAMPLE), *args)
    assert proc.returncode == 2
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_request_rate_inf_sends_everything_at_once_as_bench_serving_does() -> None:
    """bench_serving's default --request-rate inf: every request at t=0, capped by --max-concurrency if given."""
    def run(*load: str) -> dict[str, float]:
        proc = sim(str(EXAMPLE), "--arm", "branching", "--tp", "4", *load, "--json")
        assert proc.returncode == 0, proc.stderr
        out: dict[str, float] = json.loads(proc.stdout)
        return out

    everything = run("--request-rate", "inf")
    assert everything == run("--max-concurrency", "44")  # the example has 44 requests
    assert run("--request-rate", "inf", "--max-concurrency", "4") == run("--max-concurrency", "4")
    assert everything["mean_ttft_ms"] > run("--max-concurrency", "4")["mean_ttft_ms"]  # they queue


def test_mamba_ssm_dtype_is_sglangs_flag_and_a_bf16_state_decodes_faster() -> None:
    out = {}
    for dtype in ("float32", "bfloat16"):
        proc = sim(str(EXAMPLE), "--arm", "branching", "--tp", "4", "--max-concurrency", "4", "--json",
                   "--mamba-ssm-dtype", dtype)
        assert proc.returncode == 0, proc.stderr
        out[dtype] = json.loads(proc.stdout)
        assert out[dtype]["mamba_ssm_dtype"] == dtype
    # Half the temporal state's bytes read and written per decode step (pools from memory hold twice the slots).
    assert out["bfloat16"]["median_itl_ms"] < out["float32"]["median_itl_ms"]
    assert out["bfloat16"]["peak_mamba_usage"] < out["float32"]["peak_mamba_usage"]
    bad = sim(str(EXAMPLE), "--arm", "lru", "--max-concurrency", "4", "--mamba-ssm-dtype", "fp8")
    assert bad.returncode == 2 and "--mamba-ssm-dtype" in bad.stderr


def test_seglen_weight_reaches_the_policy_and_zero_is_lru(tmp_path: Path) -> None:
    """seglen at weight 0 ranks by recency alone: the branching arm's run, request for request; the PR's 0.85 evicts
    differently once eight state slots are short (three 20-turn sessions, eight in flight)."""
    trace = tmp_path / "t.jsonl"
    made = subprocess.run([sys.executable, "-m", "workloads.generate", "swebench", "--num-sessions", "3", "--sps", "10",
                           "--art", "5", "--max-turns", "20", "--max-input", "16384", "--seed", "42", "--vocab-size",
                           "151936", "-o", str(trace)], capture_output=True, text=True, timeout=300, check=False)
    assert made.returncode == 0, made.stderr

    def run(*arm: str) -> dict[str, object]:
        proc = sim(str(trace), *arm, "--model", "qwen3.5-9b", "--max-concurrency", "8", "--max-mamba-cache-size", "8",
                   "--json")
        assert proc.returncode == 0, proc.stderr
        got: dict[str, object] = json.loads(proc.stdout)
        return got

    lru, zero, default = run("--arm", "branching"), run("--arm", "seglen", "--eff-weight", "0"), run("--arm", "seglen")
    assert (lru["eff_weight"], zero["eff_weight"], default["eff_weight"]) == (None, 0.0, 0.85)
    timing = ("token_hit_rate", "mean_ttft_ms", "duration")
    assert [zero[k] for k in timing] == [lru[k] for k in timing]
    assert default["token_hit_rate"] != lru["token_hit_rate"]
