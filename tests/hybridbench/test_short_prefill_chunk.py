"""engine.chunked_prefill_size below the model's mamba chunk: SGLang runs extra_buffer arms that way but tracks no
state in a prefill forward shorter than its checkpoint grid (0.5.23 warns so at start-up). The plan warns; the
simulator behind the forecast does the same as SGLang (tests/sglang_oracle/test_sglang_extra_buffer.py holds the
reference's lifecycle against 0.5.16's and 0.5.23's with such chunks)."""

from __future__ import annotations

import random

import pytest

from hybridbench.preview.build import build_preview
from hybridbench.preview.compose import compose_run
from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import EngineCore
from reference_impl.engine.cost_model import CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.engine.simulator import simulate
from reference_impl.models import get_model
from workloads.arrival import LoadSpec, arrival_schedule
from workloads.trace import TraceRow


def warnings(*overrides: str) -> list[str]:
    return [w for w in build_preview(compose_run(["+experiment=smoke", *overrides]), forecast=False).warnings
            if w.startswith("engine.chunked_prefill_size=")]


def test_the_plan_warns_when_prefill_chunks_are_shorter_than_the_checkpoint_grid() -> None:
    assert warnings("engine.chunked_prefill_size=32") == [
        "engine.chunked_prefill_size=32 is below the 64-token checkpoint grid of model qwen3-next-80b-a3b: arm "
        "branching checkpoints no mamba state while prefilling (a forward shorter than the grid tracks none; SGLang "
        "0.5.23 warns so at start-up), only in decode, and the forecast models that"]
    assert warnings("engine.chunked_prefill_size=64") == []
    assert warnings("engine.chunked_prefill_size=32", "arms=[disabled,lru]", "checks.baseline_arm=disabled") == []


@pytest.mark.parametrize(("chunk", "hits"), [(32, False), (64, True)])
def test_the_simulator_checkpoints_no_prefill_shorter_than_the_grid(chunk: int, hits: bool) -> None:
    rng = random.Random(0)
    system = tuple(rng.randrange(5000) for _ in range(600))
    # one output token each: no decode step, so whatever is cached was checkpointed while prefilling
    rows = [TraceRow(i, 0, 0.0, system + tuple(rng.randrange(5000) for _ in range(40)), (1,)) for i in range(6)]
    core = EngineCore(EngineConfig(kv_tokens=200_000, state_slots=64, cache="extra_buffer", chunked_prefill_size=chunk))
    timer = CostModel(get_model("qwen3-next-80b-a3b"), get_gpu("h100"), tp=4)
    res = simulate(rows, core, timer, arrival_schedule(rows, LoadSpec("closed", max_concurrency=1)))
    assert all(r.status == "ok" for r in res.records)
    assert (sum(r.cached_tokens for r in res.records) > 0) is hits
