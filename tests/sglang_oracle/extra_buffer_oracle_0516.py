"""SGLang 0.5.16's own ``extra_buffer`` tracking and donation rules: ``extra_buffer_oracle.py``'s protocol and cases.

Runs INSIDE the SGLang 0.5.16 venv built by ``build_env.sh 0.5.16``:

    ~/.cache/hybridbench/sglang-0.5.16/bin/python tests/sglang_oracle/extra_buffer_oracle_0516.py < cases.json

Same stdin, stdout and life/match case meaning as ``extra_buffer_oracle.py`` (0.5.23), whose I/O and stand-ins it
reuses. 0.5.16 keeps the tracking fields on the ``Req`` itself (0.5.23 moved them to ``req.kv``) and its cache is
``UnifiedRadixCache`` with ``unified_cache_components.MambaComponent`` (mem_cache/registry.py:114-115). Functions
bound onto stand-ins, file:line in 0.5.16's ``sglang/srt``:

- ``ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend``  managers/schedule_batch.py:2421
- ``HybridReqToTokenPool.get_mamba_ping_pong_other_idx / get_mamba_ping_pong_keep_idx / _alloc_ping_pong_buffer /
  set_mamba_ping_pong_slot / donate_mamba_ping_pong_slot``  mem_cache/memory_pool.py:1339, 1345, 1355, 1381, 1393
- ``MambaComponent._alloc_mamba_slot / _free_mamba_value / prepare_for_caching_req / cleanup_after_caching_req /
  finalize_match_result`` (the branch point)  mem_cache/unified_cache_components/mamba_component.py:313, 343,
  349, 428, 97
- ``SchedulerBatchResultProcessor._handle_finish_state_updated_req / _mamba_prefix_cache_update /
  _mamba_check_track_boundary``  managers/scheduler_components/batch_result_processor.py:856, 921, 956
- ``Req.effective_kv_committed_len`` (the finish checkpoint's ``kv_len_to_handle``, mem_cache/common.py:147-151)
  managers/schedule_batch.py:1116
- a real ``ServerArgs`` (``mamba_track_interval``, ``enable_mamba_extra_buffer*``), the model's chunk pre-seeded as
  ``_mamba_cache_chunk_size`` (the property, server_args.py:7542-7556, computes max(chunk, page) from a config).

One-liners of code not run here, each cited:

- the ping-pong size ``2 if enable_overlap_schedule else 1`` (memory_pool.py:1136);
- decode ``prepare_for_decode``: ``decode_batch_idx += 1; kv_committed_len += 1`` (schedule_batch.py:2818-2819),
  the mask ``seq_lens_cpu % mamba_track_interval == 0`` (2851-2852: the interval itself, no lcm with the chunk, no
  next-step mask) and the slot it writes, ``buffer[req.mamba_next_track_idx]`` (``set_mamba_track_indices_from_reqs``,
  1688-1711);
- the overlap schedule (scheduler.py:1575-1611): batch k + 1 is prepared (and its ``kv_committed_len`` advanced)
  before batch k's result is processed; a request finished by batch k is skipped in batch k + 1's result
  (batch_result_processor.py:695-700). The prefill's result sets no decode track;
- a checkpoint's key: ``min(len(token ids), component cache_len)`` floored to the page, nothing inserted at 0
  (mem_cache/unified_radix_cache.py: finished 730-766, token ids ``(origin + output)[:kv_len_to_handle]``;
  unfinished 794-844);
- the forward's write, as in ``extra_buffer_oracle.py``: a tracked prefill leaves the state at the tracked length in
  ``track_index``; a tracked decode at its seq length in the slot ``mamba_next_track_idx`` named at its prepare.

No SGLang code is copied here.
"""

from __future__ import annotations

import os
from typing import Any

from extra_buffer_oracle import SG, Allocator, Case, Stub, bind, publish_args, run_decode, serve


def _import_sglang() -> None:
    import torch
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.scheduler_components import batch_result_processor
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor
    from sglang.srt.mem_cache.base_prefix_cache import MatchResult
    from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool
    from sglang.srt.mem_cache.unified_cache_components.mamba_component import MambaComponent
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    SG.update(torch=torch, brp_module=batch_result_processor,
              Req=Req, ScheduleBatch=ScheduleBatch, BRP=SchedulerBatchResultProcessor,
              MatchResult=MatchResult, Pool=HybridReqToTokenPool, Mamba=MambaComponent, ServerArgs=ServerArgs,
              set_args=set_global_server_args_for_scheduler)


def configure(chunk: int, page: int, interval: int, lazy: bool = False) -> Any:
    args = publish_args(chunk, page, interval, strategy="extra_buffer_lazy" if lazy else "extra_buffer")
    assert args.enable_mamba_extra_buffer() and args.enable_mamba_extra_buffer_lazy() == lazy
    return args


def make_pool(overlap: bool, lazy: bool = False) -> Any:
    pool = Stub(mamba_ping_pong_track_buffer_size=2 if overlap else 1, enable_mamba_extra_buffer_lazy=lazy,
                mamba_allocator=Allocator(), req_index_to_mamba_ping_pong_track_buffer_mapping={})
    return bind(pool, SG["Pool"], "get_mamba_ping_pong_other_idx", "get_mamba_ping_pong_keep_idx",
                "_alloc_ping_pong_buffer", "set_mamba_ping_pong_slot", "donate_mamba_ping_pong_slot")


def run_life(case: Case) -> dict[str, Any]:
    chunk, page, interval, overlap = case["C"], case["P"], case["I"], case["overlap"]
    prefix, prompt, step, n, branch = case["prefix"], case["L"], case["S"], case["n"], case["branch"]
    lazy = bool(case.get("lazy"))
    # SGLang's own test hook: the lazy second slot's allocation fails (schedule_batch.py:2751), as on a full pool
    os.environ["SGLANG_TEST_MAMBA_LAZY_ALLOC_FAIL"] = "1" if case.get("fail") else "0"
    configure(chunk, page, interval, lazy)
    pool = make_pool(overlap, lazy)
    comp = Stub(cache=Stub(req_to_token_pool=pool), enable_mamba_extra_buffer=True, int8_ckpt_pool=None)
    bind(comp, SG["Mamba"], "_alloc_mamba_slot", "prepare_for_caching_req", "cleanup_after_caching_req",
         "_free_mamba_value")
    sched = Stub(req_to_token_pool=pool)
    bind(sched, SG["ScheduleBatch"], "_mamba_radix_cache_v2_req_prepare_for_extend")
    brp = Stub(server_args=Stub(disaggregation_decode_enable_offload_kvcache=False, enable_hisparse=False),
               _maybe_collect_customized_info=lambda *a: None, draft_worker=None, model_worker=Stub(),
               tree_cache=None, _maybe_collect_routed_experts=lambda *a: None,
               _maybe_collect_indexer_topk=lambda *a: None)
    bind(brp, SG["BRP"], "_handle_finish_state_updated_req", "_mamba_prefix_cache_update",
         "_mamba_check_track_boundary", "mamba_lazy_post_decode_at_boundary")
    # The finished request's release (batch_result_processor.py:897-905) is not run here: its insert flag is
    # recorded, and the finish checkpoint below is taken only if it is set (release_kv_cache(is_insert=...)).
    released: list[bool] = []
    SG["brp_module"].release_kv_cache = lambda _req, _tree, is_insert=True: released.append(is_insert)

    req = Stub(req_pool_idx=0, mamba_last_track_seqlen=None, mamba_branching_seqlen=branch, kv_committed_len=prefix,
               decode_batch_idx=0, output_ids=[], origin_input_ids=list(range(prompt)), rid="r",
               finished=lambda: False, reasoning_tokens=0, prefix_indices=range(prefix), mamba_lazy_is_insert=True,
               multimodal_inputs=None, time_stats=Stub(set_completion_time=lambda: None))
    bind(req, SG["Req"], "effective_kv_committed_len")
    pool._alloc_ping_pong_buffer(req)
    tracks: list[int | None] = []
    donated: list[list[Any]] = []
    written: dict[int, int] = {}  # slot id -> length of the state a forward left in it

    def checkpoint(up_to: int, finished: bool) -> None:
        params = Stub(mamba_value=None)
        cache_len = comp.prepare_for_caching_req(req, params, up_to, finished)
        key_len = min(up_to, up_to if cache_len is None else cache_len) // page * page
        if key_len > 0:
            slot = int(params.mamba_value.reshape(-1)[0])
            donated.append(["finish" if finished else "ckpt", key_len, written.get(slot)])
        if not finished:  # the request goes on; insert_result as when the tree had no state there
            comp.cleanup_after_caching_req(req, False, insert_result=Stub(mamba_exist=False), insert_params=params)

    start = prefix
    while start < prompt:
        end = min(start + step, prompt) if step else prompt
        req.prefix_indices, req.extend_range = range(start), Stub(length=end - start, end=end)
        entry = sched._mamba_radix_cache_v2_req_prepare_for_extend(req)
        tracks.append(req.mamba_last_track_seqlen if entry.track_mask else None)
        if entry.track_mask:
            written[entry.track_index] = req.mamba_last_track_seqlen
        req.kv_committed_len = end
        if not (end == prompt and n == 1):
            checkpoint(end, False)
        start = end
    req.output_ids.append(0)  # the prefill's token

    batches: list[Any] = []
    # The stand-ins every decode step shares (built once a request: ~10^5 steps a release; nothing writes to them)
    lazy_batch = bind(Stub(reqs=[req], req_to_token_pool=pool, tree_cache=None), SG["ScheduleBatch"],
                      "mamba_lazy_prealloc_at_boundary")
    no_spec, no_result = Stub(is_none=lambda: True), Stub()

    def prepare() -> None:
        req.decode_batch_idx += 1
        req.kv_committed_len += 1
        seq = req.kv_committed_len
        if lazy:  # prepare_for_decode (schedule_batch.py:2845-2847): the second slot, before the indices are read
            lazy_batch.seq_lens_cpu = SG["torch"].tensor([seq])
            lazy_batch.mamba_lazy_prealloc_at_boundary(interval)
        if seq % interval == 0:  # the forward writes the state at seq into the slot named now
            written[int(req.mamba_ping_pong_track_buffer[req.mamba_next_track_idx])] = seq
        batches.append(Stub(spec_algorithm=no_spec, req_to_token_pool=pool))

    def process(batch: Any) -> None:
        req.output_ids.append(0)  # the result processor appends the batch's token first
        before = req.mamba_last_track_seqlen
        if lazy and len(req.output_ids) == n:  # lazy reads req.finished() (batch_result_processor.py:1002-1004)
            req.finished = lambda: True
        brp._handle_finish_state_updated_req(req, batch, no_result, 0, None)
        if req.mamba_last_track_seqlen != before:  # what the result booked as tracked (it never unsets it)
            tracks.append(req.mamba_last_track_seqlen)

    run_decode(n - 1, overlap, prepare, process, batches)
    up_to = min(req.effective_kv_committed_len(), len(req.origin_input_ids) + len(req.output_ids))
    if not lazy or released != [False]:
        checkpoint(up_to, True)
    return {"tracks": tracks, "donated": donated, "slots": (1 if lazy else pool.mamba_ping_pong_track_buffer_size) + 1}


def run_match(case: Case) -> int | None:
    configure(case["C"], case["P"], 256)
    torch, best, kv = SG["torch"], case["best"], case["kv"]
    comp = Stub(cache=Stub(cache_controller=None), component_type="mamba")
    bind(comp, SG["Mamba"], "finalize_match_result")
    # The matched path: a node holding the state at `best`, then one whose state was evicted (KV to `kv`).
    chunks = [torch.arange(length) for length in (best, kv - best) if length > 0]
    node = Stub(component_data={"mamba": Stub(value=None, host_value=None)})
    result = SG["MatchResult"](device_indices=None, last_device_node=node, last_host_node=node, best_match_node=node)
    params = Stub(cow_mamba=False, req=None)
    branch: int | None = comp.finalize_match_result(result, params, chunks, 1 if best > 0 else 0).mamba_branching_seqlen
    return branch


if __name__ == "__main__":
    serve(_import_sglang, run_life, run_match)
