"""SGLang 0.5.23's own ``extra_buffer`` tracking and donation rules, run on inputs only (no model, no tree).

Runs INSIDE the SGLang 0.5.23 venv built by ``build_env.sh``, never in the repo's environment:

    ~/.cache/hybridbench/sglang-0.5.23/bin/python tests/sglang_oracle/extra_buffer_oracle.py < cases.json

stdin: ``{"life": [case, ...], "match": [case, ...]}``; stdout: one JSON line ``{"version", "life", "match"}``,
results in the order of the cases. Everything SGLang prints goes to stderr (fd 1 is re-pointed at fd 2 and the
reply uses a private duplicate of the original stdout, as in ``sglang_driver.py``).

A life case ``{C, P, I, overlap, prefix, L, S, n, branch}`` is one request under
``--mamba-radix-cache-strategy extra_buffer``: model chunk ``C``, page size ``P``, ``--mamba-track-interval I``,
the overlap schedule on or off, a cached prefix of ``prefix`` tokens, a match that reported branch point
``branch``, a prompt of ``L`` tokens prefilled in forwards of ``S`` tokens (None: one forward) and
``max_new_tokens`` ``n`` (the first from the prefill, then ``n - 1`` decode forwards). Its result: ``tracks``
(per prefill forward the tracked length or None, then every decode track), ``donated`` (``[at, len, state]``
per insert: at an unfinished checkpoint or the finish, the key length, and the length of the state held by
the donated slot as the forwards wrote it) and ``slots`` (state slots the request holds: live + ping-pong).
A match case ``{C, P, best, kv}`` answers the branch point a match reports when the reusable state ends at
``best`` and the KV hit at ``kv``.

SGLang's functions are bound (``types.MethodType``) onto stand-in objects that carry only their inputs
(a request's ``kv`` record, a pool's sizes and slot map, a batch's masks); file:line in 0.5.23's
``sglang/srt``:

- ``ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend``  managers/schedule_batch.py:3137
  (what a prefill forward tracks: chunk-aligned end or the branch point; the ping-pong swap)
- ``HybridReqToTokenPool.get_mamba_ping_pong_other_idx / get_mamba_ping_pong_keep_idx / _alloc_ping_pong_buffer /
  set_mamba_ping_pong_slot / donate_mamba_ping_pong_slot``  mem_cache/memory_pool.py:1743, 1749, 1753, 1784, 1803
- ``get_mamba_tracking_slots`` (ping-pong size: 1, 2 with overlap)  mem_cache/allocation_sizing.py:11
- ``MambaComponent._alloc_mamba_slot / _free_mamba_value / _select_finished_checkpoint / prepare_for_caching_req /
  cleanup_after_caching_req``  mem_cache/unified_cache/components/mamba.py:527, 576, 582, 604, 684
- ``MambaComponent.finalize_match_result_in_tree_core`` (the branch point)  same file:164, with
  ``mamba_checkpoint_grid`` from ``runtime_context.mamba_checkpoint_grid`` (runtime_context.py:1966), as
  ``MambaComponent.__init__`` sets it (mamba.py:85)
- ``SchedulerBatchResultProcessor._handle_finish_state_updated_req / _mamba_prefix_cache_update /
  _mamba_check_track_boundary / _mamba_assert_committed_len_lookahead``
  managers/scheduler_components/batch_result_processor.py:1377, 1524, 1650, 1637
- ``Req.owned_kv_len`` (the finish checkpoint's length)  managers/schedule_batch.py:1552
- ``runtime_context.mamba_track_grid`` (runtime_context.py:1974), read through a real ``ServerArgs`` with
  ``mamba_radix_cache_strategy="extra_buffer"``; the model's chunk is pre-seeded as ``_mamba_cache_chunk_size``,
  the hook ``arg_groups/overrides.py:1901-1907`` offers fixtures so a dummy model never loads an HF config.

No SGLang logic is re-implemented, except these one-liners of code this harness does not run (a scheduler
loop, a model forward, the tree insert), each cited:

- decode ``prepare_for_decode``: ``kv_committed_len += 1`` (mem_cache/allocation.py:686, ``alloc_for_decode``),
  ``decode_batch_idx += 1`` (schedule_batch.py:3783), the mask ``seq % mamba_track_grid(P) == 0`` and, with overlap,
  the next mask ``== grid - 1`` (schedule_batch.py:3803, 3816-3823), the batch's ``mamba_decode_batch_idx_cpu``
  (3827-3829) and ``mamba_track_buffer_indices = [req.kv.mamba_next_track_idx]``
  (``set_mamba_track_indices_from_reqs``, schedule_batch.py:2336-2347);
- the overlap schedule: batch k's result is processed after batch k + 1 was prepared, the last one too;
- a checkpoint's key length: ``min(up_to, component cache_len)`` floored to the page
  (``UnifiedRadixCache.checkpoint_into_tree``, mem_cache/unified_radix_cache.py:1191-1198, 1229-1230), nothing
  inserted at 0 (1218); ``up_to`` is ``req.extend_end`` for a chunk (mem_cache/common.py:278) and
  ``owned_kv_len()`` at the finish (common.py:421-431); a chunk is checkpointed unless the prefill finished the
  request (as in ``sglang_driver.py``'s ``request`` op);
- the forward's write: a tracked forward leaves the state at the tracked length in the slot it tracks into
  (prefill: ``track_position`` of the returned entry; decode: ``mamba_track_buffer_indices``). That is the
  kernel's job (layers/attention/hybrid_linear_attn_backend.py), here only bookkeeping for ``state``.

No SGLang code is copied here.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
import types
import warnings
from typing import Any

warnings.filterwarnings("ignore")
os.environ.pop("SGLANG_USE_CPU_ENGINE", None)  # breaks the import on CPU (docs/concepts/reference-cache.md)

Case = dict[str, Any]
Stub = types.SimpleNamespace  # a stand-in: only the attributes an SGLang function reads
SG: dict[str, Any] = {}  # SGLang's classes and functions, imported after fd 1 is re-pointed (see main)


def _import_sglang() -> None:
    import torch
    from sglang.srt import runtime_context
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.scheduler_components import batch_result_processor
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor
    from sglang.srt.mem_cache.allocation_sizing import get_mamba_tracking_slots
    from sglang.srt.mem_cache.base_prefix_cache import MatchResult
    from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.components.mamba import MambaComponent
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    SG.update(
        torch=torch, rc=runtime_context, brp_module=batch_result_processor,
        Req=Req, ScheduleBatch=ScheduleBatch, BRP=SchedulerBatchResultProcessor,
        tracking_slots=get_mamba_tracking_slots, MatchResult=MatchResult, Pool=HybridReqToTokenPool,
        Mamba=MambaComponent, ServerArgs=ServerArgs, set_args=set_global_server_args_for_scheduler,
    )


def bind(obj: Any, cls: type, *names: str) -> Any:
    """SGLang's own methods on a stand-in that carries only what they read."""
    for name in names:
        setattr(obj, name, types.MethodType(getattr(cls, name), obj))
    return obj


_ARGS: dict[str, Any] = {"key": None}


def publish_args(chunk: int, page: int, interval: int, strategy_field: str = "mamba_radix_cache_strategy",
                 strategy: str = "extra_buffer") -> Any:
    """Publish server args for (page, interval, strategy) and the model chunk; rebuilt only when they change (~80 ms).
    Every release's oracle (this one, extra_buffer_oracle_0516.py, extra_buffer_oracle_0509.py) publishes them so;
    0.5.9 names the strategy ``mamba_scheduler_strategy`` and has no chunk to seed (its grid ignores the model's)."""
    if _ARGS["key"] != (page, interval, strategy):
        args = SG["ServerArgs"](model_path="dummy", page_size=page, mamba_track_interval=interval,
                                **{strategy_field: strategy})
        SG["set_args"](args)
        _ARGS.update(key=(page, interval, strategy), args=args)
    # max(model chunk, page): what overrides.mamba_cache_chunk_size computes from a real model's config
    _ARGS["args"]._mamba_cache_chunk_size = max(chunk, page)
    return _ARGS["args"]


def strategy_of(case: Case) -> str:
    """A life case's ``--mamba-radix-cache-strategy``: ``lazy`` cases run ``extra_buffer_lazy`` (PR #27118)."""
    return "extra_buffer_lazy" if case.get("lazy") else "extra_buffer"


def configure(chunk: int, page: int, interval: int, lazy: bool = False) -> None:
    publish_args(chunk, page, interval, strategy="extra_buffer_lazy" if lazy else "extra_buffer")
    mamba = SG["rc"].get_exec().mamba
    assert mamba.enable_mamba_extra_buffer and mamba.enable_mamba_extra_buffer_lazy == lazy
    assert mamba.mamba_track_interval == interval


class Allocator:
    """The mamba slot allocator: fresh ids, never exhausted (eviction is not what is compared)."""

    def __init__(self) -> None:
        self.next = 100

    def alloc(self, k: int) -> Any:
        ids = SG["torch"].arange(self.next, self.next + k)
        self.next += k
        return ids

    def free(self, ids: Any) -> None:
        return


def make_pool(overlap: bool, lazy: bool = False) -> Any:
    # HybridReqToTokenPool.__init__ (memory_pool.py:1392-1399): the pair's size, and the slots allocated up front
    size = SG["tracking_slots"](extra_buffer=True, overlap=overlap)
    initial = SG["tracking_slots"](extra_buffer=True, overlap=overlap, lazy=lazy)
    pool = Stub(mamba_ping_pong_track_buffer_size=size, mamba_initial_tracking_slots=initial,
              enable_mamba_extra_buffer_lazy=lazy, enable_mamba_extra_buffer=True, mamba_allocator=Allocator(),
              req_index_to_mamba_ping_pong_track_buffer_mapping={})
    return bind(pool, SG["Pool"], "get_mamba_ping_pong_other_idx", "get_mamba_ping_pong_keep_idx",
                "_alloc_ping_pong_buffer", "set_mamba_ping_pong_slot", "donate_mamba_ping_pong_slot")


def make_req(prefix: int, branch: int | None, prompt: int) -> Any:
    kv = Stub(req_pool_idx=0, mamba_last_track_seqlen=None, mamba_prev_track_seqlen=None, kv_committed_len=prefix,
            mamba_untracked_decode_batch_idx=None)
    req = Stub(kv=kv, prefix_len=prefix, extend_end=prefix, extend_len=0, mamba_branching_seqlen=branch,
             decode_batch_idx=0, output_ids=[], origin_input_ids=list(range(prompt)), rid="r",
             finished=lambda: False, reasoning_tokens=0, finished_len=None, output_ids_through_stop=[],
             mamba_lazy_checkpoint=True, multimodal_inputs=None, time_stats=Stub(set_completion_time=lambda: None))
    return bind(req, SG["Req"], "owned_kv_len")


def run_life(case: Case) -> dict[str, Any]:
    chunk, page, interval, overlap = case["C"], case["P"], case["I"], case["overlap"]
    prefix, prompt, step, n, branch = case["prefix"], case["L"], case["S"], case["n"], case["branch"]
    lazy = bool(case.get("lazy"))
    # SGLang's own test hook: the lazy second slot's allocation fails (schedule_batch.py:3639), as on a full pool
    os.environ["SGLANG_TEST_MAMBA_LAZY_ALLOC_FAIL"] = "1" if case.get("fail") else "0"
    configure(chunk, page, interval, lazy)
    pool = make_pool(overlap, lazy)
    comp = Stub(cache=Stub(enable_mamba_extra_buffer=True, req_to_token_pool=pool), int8_ckpt_pool=None)
    bind(comp, SG["Mamba"], "_alloc_mamba_slot", "_select_finished_checkpoint", "prepare_for_caching_req",
         "cleanup_after_caching_req", "_free_mamba_value")
    tree = Stub(page_size=page)
    model_config = Stub(hf_text_config=Stub(mamba_chunk_size=chunk))
    sched = Stub(model_config=model_config, tree_cache=tree, req_to_token_pool=pool)
    bind(sched, SG["ScheduleBatch"], "_mamba_radix_cache_v2_req_prepare_for_extend")
    brp = Stub(tree_cache=tree, draft_worker=None, _maybe_collect_customized_info=lambda *a: None)
    bind(brp, SG["BRP"], "_handle_finish_state_updated_req", "_mamba_prefix_cache_update",
         "_mamba_check_track_boundary", "mamba_lazy_post_decode_at_boundary", "_mamba_can_cache_finished_req")
    # The finished request's release (batch_result_processor.py:1436-1467) is not run here: its checkpoint flag is
    # recorded, and the finish checkpoint below is taken only if it is set (release_kv_cache(checkpoint=...)).
    released: list[bool] = []
    SG["brp_module"].release_kv_cache = lambda _req, _tree, checkpoint=True: released.append(checkpoint)
    for name in ("_maybe_collect_routed_experts", "_maybe_collect_indexer_topk", "_prepare_kv_cache_release"):
        setattr(brp, name, lambda *a: None)
    brp._mamba_assert_committed_len_lookahead = SG["BRP"]._mamba_assert_committed_len_lookahead  # a staticmethod

    req = make_req(prefix, branch, prompt)
    pool._alloc_ping_pong_buffer(req)
    tracks: list[int | None] = []
    donated: list[list[Any]] = []
    written: dict[int, int] = {}  # slot id -> length of the state a forward left in it

    def wrote(idx: int, length: int) -> None:
        written[int(req.kv.mamba_ping_pong_track_buffer[idx])] = length

    def checkpoint(up_to: int, finished: bool) -> None:
        params = Stub(mamba_value=None, mamba_keep_idx=None)
        cache_len = comp.prepare_for_caching_req(req, params, up_to, finished)
        key_len = min(up_to, up_to if cache_len is None else cache_len) // page * page
        if key_len > 0:
            slot = int(params.mamba_value.reshape(-1)[0])
            donated.append(["finish" if finished else "ckpt", key_len, written.get(slot)])
        if not finished:  # the request goes on: the next checkpoint starts from nothing tracked
            comp.cleanup_after_caching_req(req, False, insert_result=Stub(mamba_exist=False), insert_params=params)

    start = prefix
    while start < prompt:
        end = min(start + step, prompt) if step else prompt
        req.prefix_len, req.extend_end, req.extend_len = start, end, end - start
        entry = sched._mamba_radix_cache_v2_req_prepare_for_extend(req)
        tracks.append(req.kv.mamba_last_track_seqlen if entry.track_mask else None)
        if entry.track_mask:
            wrote(entry.track_position, req.kv.mamba_last_track_seqlen)
        req.kv.kv_committed_len = end
        if not (end == prompt and n == 1):
            checkpoint(end, False)
        start = end
    req.output_ids.append(0)  # the prefill's token

    grid = SG["rc"].mamba_track_grid(page)
    batches: list[Any] = []
    # The stand-ins every decode step shares (built once a request: ~10^5 steps a release; nothing writes to them)
    lazy_batch = bind(Stub(reqs=[req], req_to_token_pool=pool), SG["ScheduleBatch"], "mamba_lazy_prealloc_at_boundary")
    no_spec, no_drafts = Stub(is_none=lambda: True), Stub(num_correct_drafts_per_req_cpu=None)

    def prepare() -> None:
        req.kv.kv_committed_len += 1
        req.decode_batch_idx += 1
        seq = req.kv.kv_committed_len
        if lazy:  # prepare_for_decode (schedule_batch.py:3811-3812): the second slot, before the indices are read
            lazy_batch.seq_lens_cpu = SG["torch"].tensor([seq])
            lazy_batch.mamba_lazy_prealloc_at_boundary(grid)
        batch = Stub(mamba_track_mask_cpu=[seq % grid == 0],
                   mamba_track_mask_next_cpu=[seq % grid == grid - 1] if overlap else None,
                   mamba_decode_batch_idx_cpu=[req.decode_batch_idx],
                   mamba_track_buffer_indices=[req.kv.mamba_next_track_idx],
                   spec_algorithm=no_spec, req_to_token_pool=pool)
        if batch.mamba_track_mask_cpu[0]:
            wrote(req.kv.mamba_next_track_idx, seq)
        batches.append(batch)

    def process(batch: Any) -> None:
        req.output_ids.append(0)  # the result processor appends the batch's token first
        if lazy and len(req.output_ids) == n:  # lazy reads req.finished() (batch_result_processor.py:1408-1415)
            req.finished = lambda: True
        brp._handle_finish_state_updated_req(req, batch, no_drafts, 0, None)
        if batch.mamba_track_mask_cpu[0]:
            tracks.append(req.kv.mamba_last_track_seqlen)

    run_decode(n - 1, overlap, prepare, process, batches)
    req.finished_len = n
    req.output_ids_through_stop = req.output_ids[:n]
    # release_kv_cache(checkpoint=req.mamba_lazy_checkpoint) in lazy mode (batch_result_processor.py:1460-1465)
    if not lazy or released != [False]:
        checkpoint(req.owned_kv_len(), True)
    return {"tracks": tracks, "donated": donated, "slots": pool.mamba_initial_tracking_slots + 1}


def run_decode(steps: int, overlap: bool, prepare: Any, process: Any, batches: list[Any]) -> None:
    """The scheduler's order of ``steps`` decode batches: with overlap, batch k + 1 is prepared before batch k's
    result is processed (the last one too); without, each result is processed before the next batch is prepared."""
    if steps > 0:
        prepare()
        for k in range(steps):
            if overlap:
                prepare()
            process(batches[k])
            if not overlap and k + 1 < steps:
                prepare()


def run_match(case: Case) -> int | None:
    configure(case["C"], case["P"], 256)
    comp = Stub(mamba_checkpoint_grid=SG["rc"].mamba_checkpoint_grid(case["P"]), has_host_value_only=lambda node: False)
    bind(comp, SG["Mamba"], "finalize_match_result_in_tree_core")
    result = SG["MatchResult"](last_device_node=None, last_host_node=None, device_prefix_len=case["best"],
                               best_match_node=None, full_kv_hit_length=case["kv"])
    branch: int | None = comp.finalize_match_result_in_tree_core(result, None, [], 0).mamba_branching_seqlen
    return branch


def _order(cases: list[Case], key: tuple[str, ...]) -> list[int]:
    """Case indices grouped by server args, so each (page, interval) builds ServerArgs once."""
    return sorted(range(len(cases)), key=lambda i: tuple(cases[i][k] for k in key))


def serve(import_sglang: Any, life_fn: Any, match_fn: Any) -> None:
    """stdin cases -> stdout reply, with one release's importer and case runners (0.5.16's module reuses it)."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # SGLang's own prints land on stderr, never in the reply
    sys.stdout = sys.stderr
    import_sglang()
    cases = json.load(sys.stdin)
    life: list[Any] = [None] * len(cases["life"])
    for i in sorted(range(len(cases["life"])), key=lambda i: (strategy_of(cases["life"][i]), cases["life"][i]["P"],
                                                              cases["life"][i]["I"])):
        life[i] = life_fn(cases["life"][i])
    match: list[Any] = [None] * len(cases["match"])
    for i in _order(cases["match"], ("P",)):
        match[i] = match_fn(cases["match"][i])
    reply = {"version": importlib.metadata.version("sglang"), "life": life, "match": match}
    out.write(json.dumps(reply) + "\n")
    out.flush()


def main() -> None:
    serve(_import_sglang, run_life, run_match)


if __name__ == "__main__":
    main()
