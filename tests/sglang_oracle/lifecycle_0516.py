"""Whole requests through SGLang 0.5.16's own cache and scheduler-side code, one at a time (no_buffer, page 1).

Runs INSIDE the 0.5.16 virtualenv built by ``build_env.sh 0.5.16``. stdin: one JSON object
``{"kv_size", "mamba_size", "chunk", "requests": [[input_ids, output_ids] | ["flush", []], ...]}``; stdout:
one JSON list, each request's ``cached_tokens`` (null for a flush). Per request, as 0.5.16's scheduler does:
``Req.init_next_round_input`` (match with copy-on-write) -> ``inc_lock_ref`` (PrefillAdder) -> per prefill
chunk ``alloc_req_slots`` (alloc_for_extend runs it for every extend batch) and ``alloc_token_slots``, a
chunked request stashed with ``cache_unfinished_req(chunked=True)`` -> the first output, then
``cache_unfinished_req`` unless finished -> one ``alloc_token_slots(1)`` per decode step ->
``release_kv_cache``. A flush is ``/flush_cache``'s reset of the tree and both pools. No model runs: the
KV and state contents are never read, only the cache's bookkeeping.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from array import array
from typing import Any

warnings.filterwarnings("ignore")
os.environ.pop("SGLANG_USE_CPU_ENGINE", None)  # breaks the import on CPU (docs/concepts/reference-cache.md)


def main() -> None:
    cfg: dict[str, Any] = json.load(sys.stdin)
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # SGLang's own prints land on stderr
    import torch
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
    from sglang.srt.environ import envs
    from sglang.srt.managers.schedule_batch import Req, ReqKvInfo
    from sglang.srt.mem_cache.allocation import alloc_req_slots, alloc_token_slots
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.common import maybe_cache_unfinished_req, release_kv_cache
    from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, HybridReqToTokenPool
    from sglang.srt.mem_cache.unified_cache_components.tree_component import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    kv_size, mamba_size, chunk = int(cfg["kv_size"]), int(cfg["mamba_size"]), int(cfg["chunk"])
    server_args = ServerArgs(model_path="dummy", page_size=1)
    server_args._mamba_cache_chunk_size = 64  # read by match (branching seqlen); no model config to load
    set_global_server_args_for_scheduler(server_args)
    with envs.SGLANG_MAMBA_SSM_DTYPE.override("bfloat16"):
        shape = Mamba2StateShape.create(tp_world_size=1, intermediate_size=64, n_groups=1, num_heads=2,
                                        head_dim=16, state_size=16, conv_kernel=4)
        layers = [i for i in range(8) if i not in (3, 7)]
        cache_params = Mamba2CacheParams(shape=shape, layers=layers)
    r2t = HybridReqToTokenPool(size=4, mamba_size=mamba_size, mamba_spec_state_size=4, max_context_len=8192,
                               device="cpu", enable_memory_saver=False, cache_params=cache_params,
                               mamba_layer_ids=layers, enable_mamba_extra_buffer=False,
                               speculative_num_draft_tokens=None)
    kv_pool = HybridLinearKVPool(size=kv_size, dtype=torch.bfloat16, page_size=1, head_num=2, head_dim=16,
                                 full_attention_layer_ids=[3, 7], device="cpu", mamba_pool=r2t.mamba_pool)
    allocator = TokenToKVPoolAllocator(size=kv_size, dtype=torch.bfloat16, device="cpu", kvcache=kv_pool,
                                       need_sort=False)
    cache = UnifiedRadixCache(CacheInitParams(
        disable=False, req_to_token_pool=r2t, token_to_kv_pool_allocator=allocator, page_size=1,
        tree_components=(ComponentType.FULL, ComponentType.MAMBA), enable_mamba_extra_buffer=False,
        eviction_policy="lru"))
    dtype = r2t.req_to_token.dtype
    results: list[int | None] = []
    for n, (inp, outp) in enumerate(cfg["requests"]):
        if inp == "flush":
            cache.reset()
            r2t.clear()
            allocator.clear()
            results.append(None)
            continue
        params = SamplingParams(temperature=0, max_new_tokens=len(outp), ignore_eos=True)
        params.normalize(None)
        req = Req(f"q{n}", "", array("q", inp), params, vocab_size=1 << 40)
        req.init_next_round_input(cache)
        cache.inc_lock_ref(req.last_node)
        prefix = len(req.prefix_indices)
        results.append(prefix)
        alloc_req_slots(r2t, [req], cache)
        row = req.req_pool_idx
        if prefix:
            r2t.req_to_token[row, :prefix] = req.prefix_indices.to(dtype)
        req.kv = ReqKvInfo(kv_allocated_len=prefix, swa_evicted_seqlen=0)
        start = prefix
        while True:
            end = min(start + chunk, len(inp))
            if start > prefix:
                alloc_req_slots(r2t, [req], cache)
            r2t.req_to_token[row, start:end] = alloc_token_slots(cache, end - start).to(dtype)
            req.set_extend_range(start, end)
            req.kv.kv_allocated_len = req.kv_committed_len = end
            if end == len(inp):
                break
            maybe_cache_unfinished_req(req, cache, chunked=True)
            start = end
        req.output_ids.append(outp[0])
        req.update_finish_state()
        if not req.finished():
            maybe_cache_unfinished_req(req, cache)
            for tok in outp[1:]:
                pos = req.kv_committed_len
                r2t.req_to_token[row, pos] = alloc_token_slots(cache, 1).to(dtype)
                req.kv.kv_allocated_len += 1
                req.kv_committed_len += 1
                req.output_ids.append(tok)
                req.update_finish_state()
        if not req.finished():
            raise RuntimeError(f"request {n} did not finish after {len(outp)} outputs")
        release_kv_cache(req, cache)
    out.write(json.dumps(results) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
