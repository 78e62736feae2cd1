"""FP8 / w8a8 weights in the cost model, under SGLang's --quantization names (SGLang PR #11214's served
Qwen3-Next-80B-A3B in FP8 on H100s, one reporter with --quantization w8a8_fp8 on two)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reference_impl.engine.arms import parse_arm
from reference_impl.engine.core import Batch, BatchItem
from reference_impl.engine.cost_model import CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.engine.sizing import engine_config
from reference_impl.models import get_model

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "swebench_sps=1_art=5_nums=20.jsonl"
QWEN = get_model("qwen3-next-80b-a3b")


def test_fp8_weights_halve_weight_bytes_and_let_the_80b_model_fit_two_h100s() -> None:
    bf16, fp8 = CostModel(QWEN, get_gpu("h100"), tp=2), CostModel(QWEN, get_gpu("h100"), tp=2, quantization="w8a8_fp8")
    assert fp8.total_weight_bytes() == pytest.approx(bf16.total_weight_bytes() / 2)
    with pytest.raises(ValueError, match="does not fit on 2 x h100"):
        engine_config(parse_arm("lru"), bf16)
    sized = engine_config(parse_arm("lru"), fp8)
    assert sized.kv_tokens > 100_000 and sized.state_slots > 10
    assert CostModel(QWEN, get_gpu("h100"), tp=2, quantization="fp8").total_weight_bytes() == fp8.total_weight_bytes()


def test_fp8_decode_reads_fewer_bytes_and_prefill_gemms_run_at_the_fp8_peak() -> None:
    gpu = get_gpu("h100")
    bf16, fp8 = CostModel(QWEN, gpu, tp=4), CostModel(QWEN, gpu, tp=4, quantization="fp8")
    assert fp8.decode_bytes([1000] * 8) < bf16.decode_bytes([1000] * 8)
    # KV and states stay in the model dtype: at one batch size the saving is the weights alone, whatever the context.
    assert bf16.decode_bytes([1000] * 8) - fp8.decode_bytes([1000] * 8) == pytest.approx(
        bf16.decode_bytes([1] * 8) - fp8.decode_bytes([1] * 8))
    prefill = Batch("prefill", (BatchItem(None, 0, 8192, 0),))  # type: ignore[arg-type]  # time reads lengths only
    f = bf16.factors
    t_bf16 = bf16.batch_seconds(prefill) - f.prefill_overhead_s
    t_fp8 = fp8.batch_seconds(prefill) - f.prefill_overhead_s
    assert t_bf16 / 2 < t_fp8 < t_bf16  # linear layers twice as fast, attention scores not
    assert fp8.prefill_flops(8192, 0) == bf16.prefill_flops(8192, 0)  # the same work


def test_unknown_names_and_gpus_without_fp8_are_refused() -> None:
    with pytest.raises(ValueError, match="w8a8_fp8"):
        CostModel(QWEN, get_gpu("h100"), quantization="int4")
    with pytest.raises(ValueError, match="a100 has no fp8"):
        CostModel(QWEN, get_gpu("a100"), quantization="fp8")


def test_the_simulator_cli_runs_seed_001s_fp8_setup_at_rate_inf() -> None:
    proc = subprocess.run([sys.executable, "-m", "reference_impl.simulate", str(EXAMPLE), "--arm", "lru", "--tp", "2",
                           "--quantization", "w8a8_fp8", "--request-rate", "inf", "--json"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["quantization"] == "w8a8_fp8" and out["completed"] == 44
