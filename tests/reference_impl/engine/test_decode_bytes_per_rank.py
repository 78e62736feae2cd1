"""A decode step's bytes are one TP rank's: weights and states split over the ranks, K and V only while there are
KV heads to split (SGLang keeps max(1, heads // tp) heads a rank, so past that many ranks each reads a whole head)."""

from __future__ import annotations

import pytest

from reference_impl.engine.cost_model import CALIBRATED, CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.models import get_model

H100 = get_gpu("h100")
CONTEXT = 100_000


@pytest.mark.parametrize(("model", "tp", "heads_a_rank"), [
    ("qwen3-next-80b-a3b", 1, 2),  # 2 KV heads
    ("qwen3-next-80b-a3b", 2, 1),
    ("qwen3-next-80b-a3b", 4, 1),  # copied, not split: 1 head a rank, not half of one
    ("qwen3-next-80b-a3b", 8, 1),
    ("nemotron-h-8b", 4, 2),  # 8 KV heads split evenly
])
def test_kv_read_per_rank_follows_the_heads_each_rank_holds(model: str, tp: int, heads_a_rank: int) -> None:
    m = get_model(model)
    cm = CostModel(m, H100, tp=tp)
    kv = cm.decode_bytes([CONTEXT]) - cm.decode_bytes([0])
    head_bytes = m.kv_bytes_per_token() // m.attn_kv_heads  # K and V of one head, every attention layer
    assert kv == pytest.approx(CONTEXT * heads_a_rank * head_bytes)


def test_weights_and_states_still_split_over_the_ranks() -> None:
    m = get_model("qwen3-next-80b-a3b")
    one, four = CostModel(m, H100, tp=1), CostModel(m, H100, tp=4)
    assert four.decode_bytes([0] * 8) == pytest.approx(one.decode_bytes([0] * 8) / 4)


def test_a_long_context_step_at_tp4_costs_the_copied_heads() -> None:
    # The step time reads the per-rank bytes at one GPU's bandwidth: at TP4 a 1M-token batch reads 1 head a rank.
    m = get_model("qwen3-next-80b-a3b")
    cm = CostModel(m, H100, tp=4)
    extra = cm.decode_step_seconds(64, 1_000_000) - cm.decode_step_seconds(64, 0)
    per_rank = 1_000_000 * m.kv_bytes_per_token() / 2
    assert extra == pytest.approx(per_rank / (H100.hbm_bytes_per_s * CALIBRATED.decode_bw_efficiency))
