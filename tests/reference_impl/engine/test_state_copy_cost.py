"""The radix cache's per-chunk recurrent-state copies in the simulator: counted where SGLang makes them,
charged as bytes moved over HBM bandwidth, and absent with the cache off."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from reference_impl.engine.arms import parse_arm
from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import Batch, BatchItem, EngineCore, EngineRequest
from reference_impl.engine.cost_model import CALIBRATED, CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.engine.simulator import SimResult, simulate
from reference_impl.models import get_model
from workloads.arrival import LoadSpec, arrival_schedule
from workloads.trace import TraceRow

QWEN = get_model("qwen3-next-80b-a3b")
H100 = get_gpu("h100")
CHUNK = 8192


def _prompt(session: int, length: int, seed: int, outputs: int = 1) -> TraceRow:
    rng = random.Random(seed)
    return TraceRow(session, 0, 0.0, tuple(rng.randrange(150_000) for _ in range(length)), (7,) * outputs)


def _run(arm: str, rows: list[TraceRow], tp: int = 8) -> tuple[SimResult, int, CostModel]:
    timer = CostModel(QWEN, H100, tp=tp)
    config = EngineConfig(kv_tokens=200_000, state_slots=64, cache=parse_arm(arm).strategy, chunked_prefill_size=CHUNK)
    core = EngineCore(config)
    res = simulate(rows, core, timer, arrival_schedule(rows, LoadSpec("closed", max_concurrency=1)))
    return res, core.strategy.counters.state_copies, timer


def _extra_seconds(arm: str, rows: list[TraceRow]) -> tuple[int, float, float]:
    """(copies, seconds the arm took beyond the disabled arm, what the copies should cost)."""
    off, off_copies, _ = _run("disabled", rows)
    on, copies, timer = _run(arm, rows)
    assert off_copies == 0
    assert len(on.steps) == len(off.steps)  # no reuse in these loads: the same forwards, only the copies differ
    return copies, on.duration_s - off.duration_s, timer.state_copy_seconds(copies)


@pytest.mark.parametrize("length", [8000, 20480, 40000])
def test_no_buffer_forks_once_per_chunk_boundary_and_pays_exactly_that(length: int) -> None:
    chunks = math.ceil(length / CHUNK)
    copies, extra, expected = _extra_seconds("lru", [_prompt(0, length, seed=length)])
    # A request that finishes after its prefill donates its live slot: only the chunk ends before it fork.
    assert copies == chunks - 1
    assert extra == pytest.approx(expected, abs=2e-9 * chunks)
    if chunks > 1:
        assert extra > 0


def test_no_buffer_also_forks_after_the_last_chunk_when_the_request_goes_on_decoding() -> None:
    copies, extra, expected = _extra_seconds("lru", [_prompt(0, 20480, seed=1, outputs=4)])
    assert copies == 3  # three chunks, each checkpointed; decode forks nothing
    assert extra == pytest.approx(expected, abs=1e-8)


def test_extra_buffer_writes_one_tracked_state_per_prefill_forward() -> None:
    # 20480 = 8192 + 8192 + 4096: every forward is at least one 64-token chunk, so each tracks a state.
    copies, extra, expected = _extra_seconds("branching", [_prompt(0, 20480, seed=2)])
    assert copies == 3
    assert extra == pytest.approx(expected, abs=1e-8)
    # A forward shorter than one 64-token chunk tracks nothing.
    assert _extra_seconds("branching", [_prompt(0, 50, seed=3)])[0] == 0


def test_radix_off_never_copies_a_state_even_when_prompts_repeat() -> None:
    row = _prompt(0, 20480, seed=4)
    res, copies, _ = _run("disabled", [row, replace(row, session_id=1)])
    assert copies == 0 and all(r.cached_tokens == 0 for r in res.records)


def test_a_hit_adds_its_copy_on_write() -> None:
    row = _prompt(0, 20480, seed=5)
    _, once, _ = _run("lru", [row])
    longer = TraceRow(1, 0, 0.0, (*row.input_tokens, 7, *range(100)), (7,))  # the first prompt + its output + 100
    res, twice, _ = _run("lru", [row, longer])
    assert res.records[1].cached_tokens == 20480
    assert twice == once + 1  # the second request COWs the cached state and prefills 101 tokens in one chunk


def test_copy_cost_is_state_bytes_read_and_written_over_tp_and_bandwidth() -> None:
    one = CostModel(QWEN, H100, tp=8).state_copy_seconds(1)
    assert one == pytest.approx(2 * QWEN.state_bytes() / (8 * H100.hbm_bytes_per_s * CALIBRATED.decode_bw_efficiency))
    assert CostModel(QWEN, H100, tp=8).state_copy_seconds(5) == pytest.approx(5 * one)
    assert CostModel(QWEN, H100, tp=4).state_copy_seconds(1) == pytest.approx(2 * one)
    big = replace(QWEN, ssm_conv_elems_per_layer=2 * QWEN.ssm_conv_elems_per_layer,
                  ssm_temporal_elems_per_layer=2 * QWEN.ssm_temporal_elems_per_layer)
    assert CostModel(big, H100, tp=8).state_copy_seconds(1) == pytest.approx(2 * one)
    # --mamba-ssm-dtype bfloat16 halves the temporal state, the bulk of the bytes (the conv stays bf16).
    bf16 = CostModel(QWEN.with_temporal_dtype("bfloat16"), H100, tp=8).state_copy_seconds(1)
    assert bf16 == pytest.approx(one * QWEN.with_temporal_dtype("bfloat16").state_bytes() / QWEN.state_bytes())
    assert 0.5 < bf16 / one < 0.52
    assert CostModel(QWEN, H100, tp=8).state_copy_seconds(0) == 0.0


@pytest.mark.parametrize("quantization", ["", "fp8"])
@pytest.mark.parametrize("kind", ["prefill", "decode"])
def test_a_batch_pays_for_the_copies_it_made(kind: str, quantization: str) -> None:
    timer = CostModel(QWEN, H100, tp=8, quantization=quantization)
    req = EngineRequest(0, tuple(range(9000)), 1)
    item = BatchItem(req, 0, 8192, 0) if kind == "prefill" else BatchItem(req, 9000, 9001, 9000)
    batch = Batch(kind, (item,))  # type: ignore[arg-type]
    plain = timer.batch_seconds(batch)
    assert timer.batch_seconds(replace(batch, state_copies=3)) - plain == pytest.approx(timer.state_copy_seconds(3))


def test_the_modelled_fork_is_far_below_the_seeds_radix_on_prefill_overhead() -> None:
    # SGLang PR #11214 measured -11.8% input throughput radix on; the forks of a 20480-token prompt (TP8) cost
    # microseconds against a prefill of a quarter second. If this fails the model changed (docs/concepts/simulator.md).
    copies, extra, _ = _extra_seconds("lru", [_prompt(0, 20480, seed=6)])
    off, _, _ = _run("disabled", [_prompt(0, 20480, seed=6)])
    assert copies == 2
    assert 0 < extra / off.duration_s < 1e-3
