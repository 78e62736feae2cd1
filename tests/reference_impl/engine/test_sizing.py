"""Pools from a memory budget, as SGLang 0.5.23 sizes them (kv_cache_configurator._handle_max_mamba_cache)."""

from __future__ import annotations

from reference_impl.engine.arms import parse_arm
from reference_impl.engine.cost_model import CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.engine.sizing import MAMBA_FULL_MEMORY_RATIO, engine_config
from reference_impl.models import get_model


def test_states_get_r_over_1_plus_r_less_the_padding_slot_and_kv_the_rest() -> None:
    model = get_model("qwen3.5-9b")  # float32 temporal state: 51,511,296 bytes a slot
    timer = CostModel(model, get_gpu("h100"), tp=1)
    config = engine_config(parse_arm("branching"), timer, mem_fraction_static=0.77)
    budget = 80 * 2**30 * 0.77 - timer.total_weight_bytes()  # an H100 holds 80 GiB
    r, slot = MAMBA_FULL_MEMORY_RATIO, 51_511_296
    assert model.state_bytes() == slot
    # K = (budget_states - slot) // slot; the pool allocates K + 1 (the padding slot) and KV gets what is left.
    assert config.state_slots == int((budget * r / (1 + r) - slot) // slot) == 442
    assert config.kv_tokens == int((budget - 443 * slot) // model.kv_bytes_per_token())
    # The bf16 state SGLang's --mamba-ssm-dtype bfloat16 gives: about twice the slots, the KV share unchanged.
    bf16 = engine_config(parse_arm("branching"), CostModel(get_model("qwen3.5-9b", temporal_dtype="bfloat16"),
                                                           get_gpu("h100"), tp=1), mem_fraction_static=0.77)
    assert bf16.state_slots == 866 and abs(bf16.kv_tokens - config.kv_tokens) < 1000
