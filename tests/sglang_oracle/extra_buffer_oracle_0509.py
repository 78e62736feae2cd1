"""SGLang 0.5.9's own ``extra_buffer`` tracking and caching: ``extra_buffer_oracle.py``'s protocol and cases.

Runs INSIDE the SGLang 0.5.9 venv built by ``build_env.sh 0.5.9``:

    ~/.cache/hybridbench/sglang-0.5.9/bin/python tests/sglang_oracle/extra_buffer_oracle_0509.py < cases.json

Same stdin, stdout and life/match case meaning as ``extra_buffer_oracle.py`` (0.5.23), whose I/O it reuses. 0.5.9
spells the flag ``mamba_scheduler_strategy``, keeps the tracking fields on the ``Req`` and caches requests in
``MambaRadixCache`` itself (no cache components). Its grid ignores the case's model chunk ``C``:
``ServerArgs.mamba_cache_chunk_size`` is ``max(FLA_CHUNK_SIZE, page_size)``, FLA's 64 (server_args.py:5124-5128).

The pools and the tree are 0.5.9's own classes, made with ``object.__new__`` and given only the attributes their
methods read (their ``__init__`` sizes real GPU buffers), except ``MambaRadixCache``, built by its own
``__init__``. A state slot is one column of a real ``MambaPool.State``: a forward's write stores the tracked length
there, and SGLang's own ``alloc`` (zeroes it), ``copy_from`` / ``fork_from`` and ``free`` move it; ``donated`` reads
the length held by the slot each ``insert`` put into the tree. Functions run, file:line in 0.5.9's ``sglang/srt``:

- ``ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend``  managers/schedule_batch.py:1685
- ``alloc_req_slots`` (mem_cache/common.py:297) -> ``HybridReqToTokenPool.alloc`` (mem_cache/memory_pool.py:501:
  the live slot and the ping-pong pair, ``mamba_ping_pong_track_buffer_size = 2`` unless speculative, :453-455)
  -> ``ReqToTokenPool.alloc`` (:155); ``HybridReqToTokenPool.get_mamba_ping_pong_other_idx / free_mamba_cache``
  (:562, :568); ``MambaPool.alloc / free / copy_from / fork_from`` (:334, :347, :357, :367)
- ``MambaRadixCache.__init__ / cache_unfinished_req / cache_finished_req / insert / match_prefix``
  mem_cache/mamba_radix_cache.py:372, 556, 464, 449, 423 (the branch point: ``_match_post_processor``, :981-995)
- ``release_kv_cache`` (the finish)  mem_cache/common.py:465, with ``Req.pop_committed_kv_cache /
  pop_overallocated_kv_cache``  managers/schedule_batch.py:836, 844
- ``SchedulerOutputProcessorMixin._mamba_prefix_cache_update`` (a decode result books a track)
  managers/scheduler_output_processor_mixin.py:540
- a real ``ServerArgs`` (``mamba_track_interval``, ``mamba_cache_chunk_size``, ``page_size``).

One-liners of code not run here, each cited:

- a prefill forward sets ``kv_committed_len = kv_allocated_len = seq_len`` (schedule_batch.py:1522-1523); a chunk is
  checkpointed by ``cache_unfinished_req`` (``Scheduler.stash_chunked_request``, scheduler.py:1872-1873, or the
  prefill's result for a request that goes on decoding, scheduler_output_processor_mixin.py:181-183) unless the
  prefill finished the request, which ``release_kv_cache`` caches (:177-179);
- decode ``prepare_for_decode``: ``decode_batch_idx``, ``kv_committed_len`` and ``kv_allocated_len`` += 1
  (schedule_batch.py:1996-1999), the forward writes ``ping_pong[mamba_next_track_idx]`` where ``seq_len %
  mamba_track_interval == 0`` (2014-2030: the interval itself, no chunk);
- the result loop (scheduler_output_processor_mixin.py:450-480): append the token, ``_mamba_prefix_cache_update``,
  then the finish; with the overlap schedule batch k + 1 is prepared before batch k's result is processed (the
  shared ``run_decode``), and the look-ahead batch of the finishing step is never processed (:453-457).

No SGLang code is copied here.
"""

from __future__ import annotations

from typing import Any

from extra_buffer_oracle import SG, Case, Stub, bind, publish_args, run_decode, serve

SLOTS = 64  # state slots in the pool: ample, eviction is not what is compared
CONTEXT = 4096  # req_to_token columns: the longest case's tokens


def _import_sglang() -> None:
    import torch
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.scheduler_output_processor_mixin import SchedulerOutputProcessorMixin
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.common import alloc_req_slots, release_kv_cache
    from sglang.srt.mem_cache.mamba_radix_cache import MambaRadixCache
    from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool, MambaPool
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    SG.update(torch=torch, Req=Req, ScheduleBatch=ScheduleBatch, Output=SchedulerOutputProcessorMixin,
              Allocator=TokenToKVPoolAllocator, alloc_req_slots=alloc_req_slots, release=release_kv_cache,
              Cache=MambaRadixCache, Pool=HybridReqToTokenPool, MambaPool=MambaPool, RadixKey=RadixKey,
              ServerArgs=ServerArgs, set_args=set_global_server_args_for_scheduler)


def configure(chunk: int, page: int, interval: int) -> Any:
    args = publish_args(chunk, page, interval, strategy_field="mamba_scheduler_strategy")
    assert args.enable_mamba_extra_buffer() and args.mamba_track_interval == interval
    return args


def make_cache(page: int) -> Any:
    """A real MambaRadixCache over a real MambaPool and HybridReqToTokenPool (attributes only, no GPU buffers)."""
    torch = SG["torch"]
    mamba = object.__new__(SG["MambaPool"])
    mamba.device, mamba.size = "cpu", SLOTS
    mamba.mamba_cache = SG["MambaPool"].State(conv=[torch.zeros(1, SLOTS + 1)],
                                              temporal=torch.zeros(1, SLOTS + 1, dtype=torch.int64))
    mamba.free_slots = torch.arange(1, SLOTS + 1)  # MambaPool.clear: slot 0 is the padding slot
    pool = object.__new__(SG["Pool"])
    pool.size, pool.device, pool.free_slots, pool.mamba_pool = 1, "cpu", [0], mamba
    pool.req_to_token = torch.arange(CONTEXT, dtype=torch.int32)[None]
    pool.enable_mamba_extra_buffer, pool.mamba_ping_pong_track_buffer_size = True, 2  # memory_pool.py:453-456
    pool.req_index_to_mamba_index_mapping = torch.zeros(1, dtype=torch.int32)
    pool.req_index_to_mamba_ping_pong_track_buffer_mapping = torch.zeros((1, 2), dtype=torch.int32)
    kv = object.__new__(SG["Allocator"])  # KV frees are not what is compared
    kv.device, kv.free = "cpu", lambda indices: None
    params = Stub(req_to_token_pool=pool, token_to_kv_pool_allocator=kv, page_size=page, disable=False,
                  enable_mamba_extra_buffer=True, enable_metrics=False)
    return SG["Cache"](params)


def state(cache: Any, slot: Any) -> int | None:
    """The length of the state a slot holds (0: never written since its alloc)."""
    held = int(cache.req_to_token_pool.mamba_pool.mamba_cache.temporal[0, int(slot)])
    return held or None


def run_life(case: Case) -> dict[str, Any]:
    page, interval, overlap = case["P"], case["I"], case["overlap"]
    prefix, prompt, step, n = case["prefix"], case["L"], case["S"], case["n"]
    configure(case["C"], page, interval)
    torch, cache = SG["torch"], make_cache(page)
    mamba = cache.req_to_token_pool.mamba_pool
    tracks: list[int | None] = []
    donated: list[list[Any]] = []
    phase = ["ckpt"]
    insert = cache.insert

    def recording_insert(params: Any) -> Any:
        result = insert(params)
        if not result.mamba_exist:  # the slot went into the tree
            donated.append([phase[0], len(params.key), state(cache, params.mamba_value.reshape(-1)[0])])
        return result

    cache.insert = recording_insert

    def write(slot: Any, length: int) -> None:  # the forward leaves the state at `length` in `slot`
        mamba.mamba_cache.temporal[0, int(slot)] = length

    req = Stub(req_pool_idx=None, mamba_pool_idx=None, mamba_ping_pong_track_buffer=None, mamba_next_track_idx=None,
               mamba_last_track_seqlen=None, mamba_branching_seqlen=case["branch"], is_dllm=lambda: False,
               is_chunked=0, kv_committed_len=prefix, kv_allocated_len=prefix, kv_committed_freed=False,
               kv_overallocated_freed=False, decode_batch_idx=0, origin_input_ids=list(range(1, prompt + 1)),
               output_ids=[], prefix_indices=torch.arange(prefix), cache_protected_len=prefix,
               last_node=cache.root_node, extra_key=None)
    bind(req, SG["Req"], "pop_committed_kv_cache", "pop_overallocated_kv_cache")
    sched = bind(Stub(req_to_token_pool=cache.req_to_token_pool), SG["ScheduleBatch"],
                 "_mamba_radix_cache_v2_req_prepare_for_extend")
    slots = 0
    start = prefix
    while start < prompt:
        end = min(start + step, prompt) if step else prompt
        assert len(req.prefix_indices) == start, (len(req.prefix_indices), start)
        req.extend_input_len, req.fill_ids = end - start, req.origin_input_ids[:end]
        SG["alloc_req_slots"](cache.req_to_token_pool, [req], cache)
        slots = slots or SLOTS - int(mamba.available_size())
        mask: list[bool] = []
        indices: list[int] = []
        sched._mamba_radix_cache_v2_req_prepare_for_extend(req, mask, indices, [])
        req.kv_committed_len = req.kv_allocated_len = end
        tracks.append(req.mamba_last_track_seqlen if mask[0] else None)
        if mask[0]:
            write(indices[0], req.mamba_last_track_seqlen)
        if not (end == prompt and n == 1):
            cache.cache_unfinished_req(req, chunked=end < prompt)
        start = end
    req.output_ids.append(0)  # the prefill's token

    out = bind(Stub(), SG["Output"], "_mamba_prefix_cache_update")
    batches: list[Any] = []

    def prepare() -> None:
        req.decode_batch_idx += 1
        req.kv_committed_len += 1
        req.kv_allocated_len += 1
        if req.kv_committed_len % interval == 0:
            write(req.mamba_ping_pong_track_buffer[req.mamba_next_track_idx], req.kv_committed_len)
        batches.append(Stub(spec_algorithm=Stub(is_none=lambda: True)))

    def process(batch: Any) -> None:
        req.output_ids.append(0)
        before = req.mamba_last_track_seqlen
        out._mamba_prefix_cache_update(req, batch, None, 0)
        if req.mamba_last_track_seqlen != before:
            tracks.append(req.mamba_last_track_seqlen)

    run_decode(n - 1, overlap, prepare, process, batches)
    phase[0] = "finish"
    SG["release"](req, cache)
    assert int(mamba.available_size()) + len(donated) == SLOTS, "the request freed every slot it did not donate"
    return {"tracks": tracks, "donated": donated, "slots": slots}


def run_match(case: Case) -> int | None:
    """The branch point 0.5.9's match reports: a state ends at ``best``, the KV goes on to ``kv``, whose own state
    was evicted (a tombstone, as ``evict_mamba`` leaves an internal node, mamba_radix_cache.py:728-761)."""
    page, best, kv = case["P"], case["best"], case["kv"]
    configure(case["C"], page, 256)
    torch, cache = SG["torch"], make_cache(page)
    tokens = list(range(1, kv + page + 1))

    def insert(length: int) -> Any:
        key = SG["RadixKey"](tokens[:length])
        cache.insert(Stub(key=key, value=torch.arange(length), mamba_value=cache.req_to_token_pool.mamba_pool.alloc(1)))
        return cache.match_prefix(Stub(key=key, req=None, cow_mamba=False)).last_device_node

    if best > 0:
        insert(best)
    if kv > best:
        deeper = insert(kv)
        insert(kv + page)  # a child below keeps the evicted node internal
        cache.mamba_lru_list.remove_node(deeper)
        cache._tombstone_internal_node(deeper)
    probe = SG["RadixKey"](tokens[:kv] + [-1] * page)
    result = cache.match_prefix(Stub(key=probe, req=None, cow_mamba=False))
    assert len(result.device_indices) == best, (case, len(result.device_indices))
    branch: int | None = result.mamba_branching_seqlen
    return branch


if __name__ == "__main__":
    serve(_import_sglang, run_life, run_match)
