"""One extend batch of several requests through a real SGLang release's cache and ``alloc_req_slots`` on CPU.

Runs INSIDE a venv built by ``build_env.sh`` (0.5.9, 0.5.16 or 0.5.23):

    ~/.cache/hybridbench/sglang-0.5.9/bin/python tests/sglang_oracle/batch_oracle.py < cases.json

stdin: ``{"cases": {name: case}}``, a case ``{"mamba_size", "kv_size", "extra_buffer", "seeds": [tokens, ...],
"batch": [input_ids, ...], "chunked"?: input_ids, "chunked_first"?: its first chunk's length, "kv"?: true}``, each
run on a fresh cache and pools. The seeds go
into the tree first, in order (fresh KV and a fresh state each: the oldest is the least recently used). Then, as the
scheduler forms one extend batch: per request ``Req.init_next_round_input`` (the match, with the hit's copy-on-write
slot) and the PrefillAdder's lock on the matched node (after ``chunked``, a request an earlier batch began, if
given); then ONE ``alloc_req_slots(req_to_token_pool, reqs, cache)``
for the whole batch (what ``alloc_for_extend`` runs: 0.5.9 mem_cache/common.py:297-325, 0.5.16
mem_cache/allocation.py:252-291, 0.5.23 mem_cache/allocation.py:327-345 with ``ensure_mamba_capacity``, :298).
stdout: one JSON line ``{"cases": {name: result}}``, a result ``cached`` (each request's matched length),
``mamba_avail`` after the batch's allocation, ``tracking_slots`` (ping-pong slots a request gets), and ``seeds``: how
much of each seed a match still reuses afterwards (its length while its state survives, 0 once the batch's eviction
took it). With ``kv`` the batch's KV follows its slots as ``alloc_for_extend`` allocates it at page size 1: ONE
``alloc_token_slots(cache, extend_num_tokens)`` for the whole batch (0.5.9 mem_cache/common.py:359, 0.5.16
mem_cache/allocation.py:351, 0.5.23 :432), and the result adds ``kv_avail``, the free KV after it. The pools are
SGLang's own classes built by their own ``__init__`` on CPU; no model runs. No SGLang code is copied here.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from importlib.metadata import version
from typing import Any

warnings.filterwarnings("ignore")
os.environ.pop("SGLANG_USE_CPU_ENGINE", None)  # breaks the import on CPU (docs/concepts/reference-cache.md)

LAYERS = [i for i in range(8) if i not in (3, 7)]


def _state_params() -> Any:
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
    from sglang.srt.environ import envs

    with envs.SGLANG_MAMBA_SSM_DTYPE.override("bfloat16"):
        shape = Mamba2StateShape.create(tp_world_size=1, intermediate_size=64, n_groups=1, num_heads=2,
                                        head_dim=16, state_size=16, conv_kernel=4)
        return Mamba2CacheParams(shape=shape, layers=LAYERS)


def build(release: str, kv_size: int, mamba_size: int, extra: bool) -> tuple[Any, Any, Any]:
    """(req_to_token_pool, KV allocator, cache) of ``release``, as its scheduler builds them (CPU, page 1)."""
    import torch
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, HybridReqToTokenPool
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    args = ServerArgs(model_path="dummy", page_size=1)
    if release != "0.5.9":
        args._mamba_cache_chunk_size = 64  # read by the match (branching seqlen); no model config to load
    if extra:
        args.mamba_scheduler_strategy = "extra_buffer"
    set_global_server_args_for_scheduler(args)
    common: dict[str, Any] = dict(size=8, mamba_size=mamba_size, mamba_spec_state_size=8, max_context_len=1024,
                                  device="cpu", enable_memory_saver=False, cache_params=_state_params(),
                                  enable_mamba_extra_buffer=extra)
    kv_kw: dict[str, Any] = dict(size=kv_size, dtype=torch.bfloat16, page_size=1, head_num=2, head_dim=16,
                                 full_attention_layer_ids=[3, 7], device="cpu")
    if release == "0.5.9":
        from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.mamba_radix_cache import MambaRadixCache

        r2t = HybridReqToTokenPool(**common, speculative_num_draft_tokens=None)
        kv_pool = HybridLinearKVPool(**kv_kw, mamba_pool=r2t.mamba_pool, enable_kvcache_transpose=False)
        allocator = TokenToKVPoolAllocator(size=kv_size, dtype=torch.bfloat16, device="cpu", kvcache=kv_pool,
                                           need_sort=False)
        cache = MambaRadixCache(CacheInitParams(disable=False, req_to_token_pool=r2t,
                                                token_to_kv_pool_allocator=allocator, page_size=1,
                                                enable_mamba_extra_buffer=extra))
        return r2t, allocator, cache
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    if release == "0.5.16":
        from sglang.srt.mem_cache.unified_cache_components.tree_component import ComponentType
    else:
        from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    r2t = HybridReqToTokenPool(**common, mamba_layer_ids=LAYERS, speculative_num_draft_tokens=None,
                               enable_overlap_schedule=True)
    kv_pool = HybridLinearKVPool(**kv_kw, mamba_pool=r2t.mamba_pool)
    allocator = TokenToKVPoolAllocator(size=kv_size, dtype=torch.bfloat16, device="cpu", kvcache=kv_pool,
                                       need_sort=False)
    cache = UnifiedRadixCache(CacheInitParams(
        disable=False, req_to_token_pool=r2t, token_to_kv_pool_allocator=allocator, page_size=1,
        tree_components=(ComponentType.FULL, ComponentType.MAMBA), enable_mamba_extra_buffer=extra,
        eviction_policy="lru"))
    return r2t, allocator, cache


def mamba_alloc(release: str, r2t: Any, n: int) -> Any:
    return (r2t.mamba_pool if release == "0.5.9" else r2t.mamba_allocator).alloc(n)


def mamba_avail(release: str, r2t: Any) -> int:
    return int((r2t.mamba_pool if release == "0.5.9" else r2t.mamba_allocator).available_size())


def reusable(release: str, cache: Any, key: Any) -> int:
    """How much of ``key`` a later request could reuse: the match ends at the deepest node still holding a state."""
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams

    result = cache.match_prefix(MatchPrefixParams(key=key))
    return int(result.device_prefix_len) if release == "0.5.23" else len(result.device_indices)


def main() -> None:
    # Every case in one process: importing SGLang is most of an oracle's time (each case alone took ~10 s).
    cases: dict[str, dict[str, Any]] = json.load(sys.stdin)["cases"]
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # SGLang's own prints land on stderr
    from array import array

    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.sampling.sampling_params import SamplingParams

    release = version("sglang")
    alloc_req_slots: Any
    alloc_token_slots: Any
    if release == "0.5.9":
        from sglang.srt.mem_cache.common import alloc_req_slots, alloc_token_slots
    else:
        from sglang.srt.mem_cache.allocation import alloc_req_slots, alloc_token_slots

    def one(case: dict[str, Any]) -> dict[str, Any]:
        """A fresh cache and pools, the seeds, then the case's extend batch."""
        r2t, allocator, cache = build(release, int(case["kv_size"]), int(case["mamba_size"]),
                                      bool(case["extra_buffer"]))

        def key(tokens: list[int]) -> Any:
            return RadixKey(list(tokens) if release == "0.5.9" else array("q", tokens))

        for seed in case["seeds"]:
            value = allocator.alloc(len(seed))
            slot = mamba_alloc(release, r2t, 1)
            result = cache.insert(InsertParams(key=key(seed), value=value, mamba_value=slot))
            assert int(result.prefix_len) == 0 and not result.mamba_exist, "seeds share no prefix"

        def admit(name: str, inp: list[int]) -> Any:
            params = SamplingParams(temperature=0, max_new_tokens=1, ignore_eos=True)
            params.normalize(None)
            if release == "0.5.9":
                req = Req(name, "", list(inp), params)
            else:
                req = Req(name, "", array("q", inp), params, vocab_size=1 << 40)
            req.init_next_round_input(cache)  # match, and a hit's copy-on-write slot
            if release == "0.5.23":
                req.lock = cache.lock(req.last_node)  # the PrefillAdder's lock on the matched node
            else:
                cache.inc_lock_ref(req.last_node)
            return req

        reqs = []
        if case.get("chunked"):
            # A request whose prompt an earlier extend batch began (alone, a miss): it continues first in this one,
            # holding its slots. Its first chunk, shorter than a mamba chunk, tracked nothing, so extra_buffer's
            # cache_unfinished_req caches nothing for it (0.5.9 mem_cache/mamba_radix_cache.py:568-574) and is not run.
            first = admit("chunked", case["chunked"])
            alloc_req_slots(r2t, [first], cache)
            # What marks it as continuing for ReqToTokenPool.alloc, which then reuses its row: the scheduler's chunk
            # count (0.5.9 managers/scheduler.py:2139, 0.5.16 :3043); 0.5.23 checks the KV its first chunk allocated.
            if release == "0.5.9":
                first.is_chunked += 1
            elif release == "0.5.16":
                first.inflight_middle_chunks += 1
            else:
                first.kv.kv_allocated_len = int(case["chunked_first"])
            reqs.append(first)
        reqs += [admit(f"b{n}", inp) for n, inp in enumerate(case["batch"])]
        cached = [len(r.prefix_indices) if release != "0.5.23" else int(r.prefix_len) for r in reqs]
        alloc_req_slots(r2t, reqs, cache)  # once, for the whole extend batch
        kv: dict[str, int] = {}
        if case.get("kv"):
            assert not case.get("chunked"), "a chunked request's first chunk allocated no KV here"
            extend = sum(len(inp) - n for inp, n in zip(case["batch"], cached, strict=True))
            alloc_token_slots(cache, extend)  # once, for the whole batch's extend tokens
            kv["kv_avail"] = int(allocator.available_size())
        tracking = getattr(r2t, "mamba_initial_tracking_slots", None)
        if tracking is None:
            tracking = r2t.mamba_ping_pong_track_buffer_size if case["extra_buffer"] else 0
        avail = mamba_avail(release, r2t)
        seeds = [reusable(release, cache, key(seed)) for seed in case["seeds"]]  # after the batch: what it evicted
        return {"cached": cached, "mamba_avail": avail, "tracking_slots": tracking, "seeds": seeds, **kv}

    out.write(json.dumps({"cases": {name: one(case) for name, case in cases.items()}}) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
