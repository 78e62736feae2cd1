"""Pools from a memory budget, as SGLang 0.5.23 sizes them (kv_cache_configurator._handle_max_mamba_cache)."""

from __future__ import annotations

from reference_impl.engine.arms import parse_arm
from reference_impl.engine.core import EngineCore
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


def test_extra_buffer_checkpoints_fall_on_the_served_models_chunk() -> None:
    # SGLang 0.5.16+ reads Nemotron-H's config "chunk_size" (128 for Nemotron-H-8B) as mamba_chunk_size; a GDN model
    # gets FLA's 64. With 64 for every model, the simulator put Nemotron-H's prefill checkpoints and branch points at
    # multiples of 64 that SGLang never takes.
    for name, chunk, tracked in (("nemotron-h-8b", 128, 128), ("qwen3.5-9b", 64, 192)):
        timer = CostModel(get_model(name), get_gpu("h100"), tp=1)
        config = engine_config(parse_arm("branching"), timer, mem_fraction_static=0.8)
        assert config.mamba_chunk_size == chunk
        core = EngineCore(config)
        assert core.tree.chunk_size == chunk
        # One 200-token prefill forward tracks its last chunk boundary.
        req = core.strategy.admit(list(range(200)))
        assert core.strategy.track_position(req, 0, 200) == tracked  # type: ignore[attr-defined]


def test_past_as_many_ranks_as_kv_heads_each_rank_holds_a_whole_head() -> None:
    # SGLang gives each rank max(1, kv_heads // tp) heads: Qwen3-Next's 2 KV heads are copied on 4 ranks, not
    # split, so a rank's KV pool holds half the tokens an even split would (1,421,992, not 2,843,984, on 4 x H100
    # at 0.85; SGLang 0.5.23's own configurator gives 1,421,992). Nemotron-H's 8 heads split evenly up to TP 8.
    for name, tp, heads_a_rank in (("qwen3-next-80b-a3b", 4, 1), ("qwen3-next-80b-a3b", 8, 1),
                                   ("qwen3.5-9b", 8, 1), ("nemotron-h-8b", 8, 1), ("nemotron-h-8b", 2, 4)):
        model = get_model(name)
        timer = CostModel(model, get_gpu("h100"), tp=tp)
        config = engine_config(parse_arm("lru"), timer, mem_fraction_static=0.85)
        per_rank_bytes = (80 * 2**30 * 0.85 * tp - timer.total_weight_bytes()
                          - (config.state_slots + 1) * model.state_bytes()) / tp
        cell = model.num_attn_layers * 2 * heads_a_rank * (model.attn_kv_dim // model.attn_kv_heads) * model.dtype_bytes
        assert config.kv_tokens == int(per_rank_bytes // cell), name
        even = int(per_rank_bytes * tp // model.kv_bytes_per_token())
        assert (config.kv_tokens < even * 0.6) == (model.attn_kv_heads < tp), name
    paged = engine_config(parse_arm("branching"), CostModel(get_model("qwen3.5-9b"), get_gpu("h100"), tp=1),
                          mem_fraction_static=0.85, page_size=64)
    assert paged.kv_tokens % 64 == 0  # whole pages, as SGLang rounds each rank's pool
