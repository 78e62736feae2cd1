"""Drive SGLang's real hybrid (FULL + MAMBA) prefix cache on CPU, one JSON command per line.

Runs INSIDE an SGLang virtualenv built by ``build_env.sh`` (never in the repo's own environment):

    ~/.cache/hybridbench/sglang-0.5.23/bin/python tests/sglang_oracle/sglang_driver.py

Protocol: one JSON object per stdin line, one JSON reply per stdout line. Everything SGLang itself
prints (logs, the Rust core's ``pretty_print``) goes to stderr: fd 1 is re-pointed at fd 2 and the
replies use a private duplicate of the original stdout.

Commands (``op``):
  init     {version, backend: "rust"|"python"|null, kv_size, mamba_size, chunk_size}
  insert   {tokens, prev_prefix_len?}
                                 fresh KV for every token and a fresh state slot; duplicate KV freed by
                                 the caller for 0.5.9 (what its cache_finished_req does); a state that
                                 already exists is freed (mamba_exist); skipped if a pool is short.
                                 With prev_prefix_len = k > 0 the caller first matches the key (no COW)
                                 and owns the tree's indices for p = min(k, matched) tokens: the value
                                 is those p indices + fresh KV for the rest, inserted with
                                 prev_prefix_len=p (what a request's checkpoint does); 0.5.9's caller
                                 frees value[p:prefix_len]
  match    {tokens, cow, lock}   match_prefix; with cow a throwaway request takes (then frees) a COW slot;
                                 with lock the returned node is locked and a lock id returned
  unlock   {lock}
  evict    {num_tokens, mamba_num}
  observe  {}                    sizes and a canonical tree dump
  request  {input, output, chunks?, chunk_size?}   (0.5.23, no_buffer, page 1)
                                 one request's whole lifecycle through SGLang's scheduler-side helpers,
                                 without a model runner: Req.init_next_round_input (match_kv_cache,
                                 cow_mamba, input_len-1 cap) -> cache.lock(last_node) -> alloc_req_slots
                                 (ensure_mamba_capacity) -> per prefill chunk alloc_token_slots + writes
                                 into req_to_token + checkpoint_kv_cache at every chunk end that is not
                                 the prompt end -> first output appended; checkpoint_kv_cache after the
                                 final prefill unless that finished the request (batch result processor)
                                 -> one decode step per further output (1 KV slot for the token fed
                                 back, kv_committed_len += 1) -> release_kv_cache(checkpoint=True).
                                 ``chunks`` are absolute chunk ends (ends inside the cached prefix are
                                 skipped, the prompt end is implied); ``chunk_size`` chunks the uncached
                                 part from the prefix on. Reply: ``stages``, one per observation point
                                 (admit, each checkpoint, finish), each with its facts and ``obs``
  bench    {...}                 the speed workload of docs/concepts/reference-cache.md, timed here
  quit

Every mutating reply carries ``obs`` (the ``observe`` payload) so the caller can compare after every
operation. Tree dump: sorted ``[path_tokens, has_state, full_lock_ref]`` for every non-root node.
Tokens are recovered from KV slot indices: each index handed to the cache is recorded with the
token it was allocated for, so ``path_device_indices`` (0.5.23) names the path exactly.

Only SGLang's public or semi-public cache API is used (docs/concepts/reference-cache.md); no SGLang
code is copied here.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import sys
import tempfile
import time
import traceback
import warnings
from abc import ABC, abstractmethod
from array import array
from typing import Any

warnings.filterwarnings("ignore")
os.environ.pop("SGLANG_USE_CPU_ENGINE", None)  # breaks the import on CPU (docs/concepts/reference-cache.md)

_PRETTY = re.compile(r"^(\s*)\[(\d+)\]\s+(\d+)\s+full_lock=(-?\d+)\s+(.*)$")


@contextlib.contextmanager
def _capture_fd1() -> Any:
    """Capture what native code or print() writes to fd 1 (the Rust core prints from Rust)."""
    sys.stdout.flush()
    buf = io.StringIO()
    py_buf = io.StringIO()
    with tempfile.TemporaryFile(mode="w+") as tmp:
        saved = os.dup(1)
        os.dup2(tmp.fileno(), 1)
        try:
            with contextlib.redirect_stdout(py_buf):
                yield buf
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            buf.write(tmp.read())
            buf.write(py_buf.getvalue())


class Fixture(ABC):
    """Pools + cache as in SGLang's unit-test fixture, for one version."""

    version: str

    def __init__(self, cmd: dict[str, Any]) -> None:
        import torch

        self.torch = torch
        self.kv_size = int(cmd.get("kv_size", 128))
        self.mamba_size = int(cmd.get("mamba_size", 20))
        self.chunk = int(cmd.get("chunk_size", 64))
        self.max_context = int(cmd.get("max_context_len", 2048))
        self.token_of: dict[int, int] = {}  # KV slot index -> the token it was allocated for
        self.locks: dict[int, Any] = {}
        self._next_lock = 1
        self._rid = 0
        self.build(cmd)

    # -- version specific -------------------------------------------------------------------------
    @abstractmethod
    def build(self, cmd: dict[str, Any]) -> None:
        """Version-specific: each fixture subclass implements it."""

    @abstractmethod
    def key(self, tokens: list[int]) -> Any:
        """Version-specific: each fixture subclass implements it."""

    @abstractmethod
    def mamba_alloc(self, n: int) -> Any:
        """Version-specific: each fixture subclass implements it."""

    @abstractmethod
    def mamba_free(self, idx: Any) -> None:
        """Version-specific: each fixture subclass implements it."""

    @abstractmethod
    def mamba_available(self) -> int:
        """Version-specific: each fixture subclass implements it."""

    @abstractmethod
    def lock_node(self, node: Any) -> Any:
        """Version-specific: each fixture subclass implements it."""

    @abstractmethod
    def unlock_lock(self, lock: Any) -> None:
        """Version-specific: each fixture subclass implements it."""

    @abstractmethod
    def tree_dump(self) -> list[list[Any]]:
        """Version-specific: each fixture subclass implements it."""

    @abstractmethod
    def new_req(self) -> Any:
        """Version-specific: each fixture subclass implements it."""

    @abstractmethod
    def req_mamba_slot(self, req: Any) -> Any:
        """Version-specific: each fixture subclass implements it."""

    def match_extra(self, result: Any) -> dict[str, Any]:
        return {}

    # -- shared -----------------------------------------------------------------------------------
    def kv_alloc(self, tokens: list[int]) -> Any:
        value = self.allocator.alloc(len(tokens))
        if value is None:
            return None
        for idx, tok in zip(value.tolist(), tokens, strict=True):
            self.token_of[idx] = tok
        return value

    def sizes(self) -> dict[str, int]:
        c = self.cache
        return {
            "full_avail": int(self.allocator.available_size()),
            "mamba_avail": int(self.mamba_available()),
            "full_evictable": int(c.full_evictable_size()),
            "full_protected": int(c.full_protected_size()),
            "mamba_evictable": int(c.mamba_evictable_size()),
            "mamba_protected": int(c.mamba_protected_size()),
        }

    def observe(self, tree: bool = True, sanity: bool = True) -> dict[str, Any]:
        obs: dict[str, Any] = self.sizes()
        # 0.5.9's sanity_check assumes an idle scheduler (no locked node), so it only runs then.
        if sanity and not (self.version == "0.5.9" and self.locks):
            with _capture_fd1():
                self.cache.sanity_check()
        if tree:
            obs["tree"] = self.tree_dump()
        return obs

    def insert(self, tokens: list[int], prev_prefix_len: int = 0) -> dict[str, Any]:
        from sglang.srt.mem_cache.base_prefix_cache import InsertParams, MatchPrefixParams

        owned = None
        if prev_prefix_len > 0 and tokens:
            # The caller's protected prefix: indices the tree handed out for the matched prefix.
            m = self.cache.match_prefix(MatchPrefixParams(key=self.key(tokens)))
            owned = self.match_indices(m)[: min(prev_prefix_len, self.prefix_len(m))].to(self.torch.int64)
        p = 0 if owned is None else len(owned)
        if not tokens or self.allocator.available_size() < len(tokens) - p or self.mamba_available() < 1:
            return {"skipped": True, "protected": p}
        fresh = self.kv_alloc(tokens[p:]) if len(tokens) > p else self.torch.empty(0, dtype=self.torch.int64)
        value = fresh if owned is None else self.torch.cat([owned, fresh.to(self.torch.int64)])
        slot = self.mamba_alloc(1)
        result = self.cache.insert(
            InsertParams(key=self.key(tokens), value=value, mamba_value=slot, prev_prefix_len=p)
        )
        prefix_len = int(result.prefix_len)
        if self.version == "0.5.9" and prefix_len > p:
            self.allocator.free(value[p:prefix_len])  # cache_*_req frees the duplicates itself
        if result.mamba_exist:
            self.mamba_free(slot)
        return {"skipped": False, "prefix_len": prefix_len, "mamba_exist": bool(result.mamba_exist), "protected": p}

    def request(self, cmd: dict[str, Any]) -> dict[str, Any]:
        raise ValueError(f"request lifecycle ops are implemented for 0.5.23 only, not {self.version}")

    def match(self, tokens: list[int], cow: bool, lock: bool) -> dict[str, Any]:
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams

        req = self.new_req() if cow else None
        before = self.mamba_available()
        result = self.cache.match_prefix(MatchPrefixParams(key=self.key(tokens), cow_mamba=cow, req=req))
        out: dict[str, Any] = {
            "prefix_len": int(self.prefix_len(result)),
            "branching_seqlen": result.mamba_branching_seqlen,
        }
        out.update(self.match_extra(result))
        node = result.last_device_node
        out["last_node_key_len"] = self.key_len(node)
        if cow:
            slot = self.req_mamba_slot(req)
            out["cow_slot"] = slot is not None
            out["cow_mamba_avail"] = before  # pool availability before the COW allocation
            if slot is not None:
                self.mamba_free(slot)
        if lock:
            lid = self._next_lock
            self._next_lock += 1
            self.locks[lid] = self.lock_node(node)
            out["lock"] = lid
        return out

    def prefix_len(self, result: Any) -> int:
        return int(result.device_prefix_len)

    def match_indices(self, result: Any) -> Any:
        """KV indices of a match's reusable prefix."""
        return self.cache.path_device_indices(result.last_device_node)[: self.prefix_len(result)]

    @abstractmethod
    def key_len(self, node: Any) -> int:
        """Version-specific: each fixture subclass implements it."""

    def unlock(self, lid: int) -> dict[str, Any]:
        self.unlock_lock(self.locks.pop(lid))
        return {}

    def evict(self, num_tokens: int, mamba_num: int) -> dict[str, Any]:
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        r = self.cache.evict(EvictParams(num_tokens=num_tokens, mamba_num=mamba_num))
        return {"num_tokens_evicted": int(r.num_tokens_evicted), "mamba_num_evicted": int(r.mamba_num_evicted)}


class Fixture0523(Fixture):
    version = "0.5.23"

    def build(self, cmd: dict[str, Any]) -> None:
        torch = self.torch
        from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
        from sglang.srt.environ import envs
        from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, HybridReqToTokenPool
        from sglang.srt.mem_cache.radix_cache import RadixKey
        from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

        self.RadixKey = RadixKey
        server_args = ServerArgs(model_path="dummy", page_size=1)
        server_args._mamba_cache_chunk_size = self.chunk
        set_global_server_args_for_scheduler(server_args)
        with envs.SGLANG_MAMBA_SSM_DTYPE.override("bfloat16"):
            shape = Mamba2StateShape.create(
                tp_world_size=1, intermediate_size=64, n_groups=1, num_heads=2, head_dim=16, state_size=16,
                conv_kernel=4,
            )
            layers = [i for i in range(8) if i not in (3, 7)]
            cache_params = Mamba2CacheParams(shape=shape, layers=layers)
        self.r2t = HybridReqToTokenPool(
            size=10, mamba_size=self.mamba_size, mamba_spec_state_size=10, max_context_len=self.max_context,
            device="cpu", enable_memory_saver=False, cache_params=cache_params, mamba_layer_ids=layers,
            enable_mamba_extra_buffer=False, speculative_num_draft_tokens=3,
        )
        kv_pool = HybridLinearKVPool(
            size=self.kv_size, dtype=torch.bfloat16, page_size=1, head_num=2, head_dim=16,
            full_attention_layer_ids=[3, 7], device="cpu", mamba_pool=self.r2t.mamba_pool,
        )
        self.allocator = TokenToKVPoolAllocator(
            size=self.kv_size, dtype=torch.bfloat16, device="cpu", kvcache=kv_pool, need_sort=False
        )
        params = CacheInitParams(
            disable=False, req_to_token_pool=self.r2t, token_to_kv_pool_allocator=self.allocator, page_size=1,
            tree_components=(ComponentType.FULL, ComponentType.MAMBA), enable_mamba_extra_buffer=False,
            eviction_policy="lru", tree_core_backend=cmd.get("backend"),
        )
        self.cache = UnifiedRadixCache(params)
        self.backend = type(self.cache.tree_core).__name__
        self.mamba_allocator = self.r2t.mamba_allocator

    def key(self, tokens: list[int]) -> Any:
        return self.RadixKey(array("q", tokens))

    def mamba_alloc(self, n: int) -> Any:
        return self.mamba_allocator.alloc(n)

    def mamba_free(self, idx: Any) -> None:
        if idx.dim() == 0:
            idx = idx.unsqueeze(0)
        self.mamba_allocator.free(idx)

    def mamba_available(self) -> int:
        return int(self.mamba_allocator.available_size())

    def lock_node(self, node: Any) -> Any:
        return self.cache.lock(node)

    def unlock_lock(self, lock: Any) -> None:
        self.cache.unlock(lock)

    def key_len(self, node: Any) -> int:
        root = self.cache.root_node_handle()
        if node == root:
            return 0
        path = self.cache.tree_core.collect_path_info([node])[0]
        last = path[-1]
        return int(last.path_end - last.path_start)

    def new_req(self) -> Any:
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        self._rid += 1
        return Req(f"r{self._rid}", "", array("q"), SamplingParams(temperature=0, max_new_tokens=1))

    def req_mamba_slot(self, req: Any) -> Any:
        return req.kv.mamba_pool_idx

    def match_extra(self, result: Any) -> dict[str, Any]:
        return {"full_kv_hit_length": int(result.full_kv_hit_length)}

    def request(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """One request's lifecycle, as the scheduler drives the cache (see the module docstring)."""
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.mem_cache.allocation import alloc_req_slots, alloc_token_slots
        from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache
        from sglang.srt.sampling.sampling_params import SamplingParams

        inp = [int(t) for t in cmd["input"]]
        out = [int(t) for t in cmd["output"]]
        if not inp or not out:
            raise ValueError("a request needs at least one input and one output token")
        seq = inp + out
        want_obs = cmd.get("observe", True)
        stages: list[dict[str, Any]] = []

        def stage(name: str, **facts: Any) -> None:
            st: dict[str, Any] = {"stage": name, **facts}
            if want_obs:
                st["obs"] = self.observe()
            stages.append(st)

        self._rid += 1
        params = SamplingParams(temperature=0, max_new_tokens=len(out), ignore_eos=True)
        params.normalize(None)  # what the tokenizer manager does (stop strings -> [])
        req = Req(f"q{self._rid}", "", array("q", inp), params)
        # Scheduler admission: init_next_round_input matches (cow_mamba = supports_mamba(), the
        # input_len-1 cap) and the PrefillAdder locks the matched node.
        req.init_next_round_input(self.cache)
        req.lock = self.cache.lock(req.last_node)
        prefix = int(req.prefix_len)
        cow = bool(req.kv.holds_mamba)
        # alloc_for_extend: request row + mamba slot (ensure_mamba_capacity evicts if short).
        alloc_req_slots(self.r2t, [req], self.cache)
        stage("admit", cached_tokens=prefix, branching_seqlen=req.mamba_branching_seqlen, cow=cow)
        row = req.kv.req_pool_idx
        if prefix:
            self.r2t.req_to_token[row, :prefix] = self.cache.prefix_device_indices(req).to(torch_int32(self))
        if cmd.get("chunk_size"):
            size = int(cmd["chunk_size"])
            ends = list(range(prefix + size, len(inp), size))
        else:
            ends = [int(e) for e in cmd.get("chunks") or [] if prefix < int(e) < len(inp)]
        ends = [*sorted(set(ends)), len(inp)]
        start = prefix
        for end in ends:
            loc = alloc_token_slots(self.cache, end - start)
            for idx, tok in zip(loc.tolist(), seq[start:end], strict=True):
                self.token_of[idx] = tok
            self.r2t.req_to_token[row, start:end] = loc.to(torch_int32(self))
            req.extend_end = end
            req.kv.kv_allocated_len = req.kv.kv_committed_len = end
            if end < len(inp):
                checkpoint_kv_cache(req, self.cache)  # Scheduler.stash_chunked_request
                stage("chunk", end=end, protected=int(req.kv.cache_protected_len))
            start = end
        # The prefill forward sampled the first output token (batch result processor).
        req.output_ids.append(out[0])
        req.update_finish_state()
        if not req.finished():
            checkpoint_kv_cache(req, self.cache)
            stage("chunk", end=len(inp), protected=int(req.kv.cache_protected_len))
        for tok in out[1:]:
            # One decode step: KV for the token fed back (the previous output), then the next token.
            pos = int(req.kv.kv_committed_len)
            loc = alloc_token_slots(self.cache, 1)
            self.token_of[int(loc[0])] = seq[pos]
            self.r2t.req_to_token[row, pos] = loc.to(torch_int32(self))
            req.kv.kv_allocated_len += 1
            req.kv.kv_committed_len += 1
            req.output_ids.append(tok)
            req.update_finish_state()
        if not req.finished():
            raise RuntimeError(f"request did not finish after {len(out)} outputs")
        committed = int(req.owned_kv_len())
        release_kv_cache(req, self.cache, checkpoint=True)
        stage("finish", committed_kv=committed)
        return {"stages": stages}

    def tree_dump(self) -> list[list[Any]]:
        with _capture_fd1() as buf:
            self.cache.pretty_print()
        out = []
        for line in buf.getvalue().splitlines():
            m = _PRETTY.match(line)
            if m is None:
                continue
            nid, key_len, lock, rest = int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5)
            if key_len == 0 and nid == self.cache.root_node_handle():
                continue
            comps = dict(part.split("=", 1) for part in rest.split())
            comps = {k.split(".")[-1].upper(): v for k, v in comps.items()}
            path = [self.token_of[i] for i in self.cache.path_device_indices(nid).tolist()]
            out.append([path, comps.get("MAMBA") == "yes", lock])
        out.sort()
        return out


class Fixture059(Fixture):
    version = "0.5.9"

    def build(self, cmd: dict[str, Any]) -> None:
        torch = self.torch
        from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
        from sglang.srt.environ import envs
        from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.mamba_radix_cache import MambaRadixCache
        from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, HybridReqToTokenPool
        from sglang.srt.mem_cache.radix_cache import RadixKey
        from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

        self.RadixKey = RadixKey
        server_args = ServerArgs(model_path="dummy", page_size=1)
        set_global_server_args_for_scheduler(server_args)
        with envs.SGLANG_MAMBA_SSM_DTYPE.override("bfloat16"):
            shape = Mamba2StateShape.create(
                tp_world_size=1, intermediate_size=64, n_groups=1, num_heads=2, head_dim=16, state_size=16,
                conv_kernel=4,
            )
            layers = [i for i in range(8) if i not in (3, 7)]
            cache_params = Mamba2CacheParams(shape=shape, layers=layers)
        self.r2t = HybridReqToTokenPool(
            size=10, mamba_size=self.mamba_size, mamba_spec_state_size=10, max_context_len=self.max_context,
            device="cpu", enable_memory_saver=False, cache_params=cache_params,
            enable_mamba_extra_buffer=False, speculative_num_draft_tokens=None,
        )
        kv_pool = HybridLinearKVPool(
            size=self.kv_size, dtype=torch.bfloat16, page_size=1, head_num=2, head_dim=16,
            full_attention_layer_ids=[3, 7], device="cpu", mamba_pool=self.r2t.mamba_pool,
            enable_kvcache_transpose=False,
        )
        self.allocator = TokenToKVPoolAllocator(
            size=self.kv_size, dtype=torch.bfloat16, device="cpu", kvcache=kv_pool, need_sort=False
        )
        params = CacheInitParams(
            disable=False, req_to_token_pool=self.r2t, token_to_kv_pool_allocator=self.allocator, page_size=1,
            enable_mamba_extra_buffer=False,
        )
        self.cache = MambaRadixCache(params)
        self.backend = "MambaRadixCache"
        self.mamba_pool = self.r2t.mamba_pool
        if server_args.mamba_cache_chunk_size != self.chunk:
            raise ValueError(f"0.5.9 chunk size is {server_args.mamba_cache_chunk_size}, asked for {self.chunk}")

    def key(self, tokens: list[int]) -> Any:
        return self.RadixKey(list(tokens))

    def mamba_alloc(self, n: int) -> Any:
        return self.mamba_pool.alloc(n)

    def mamba_free(self, idx: Any) -> None:
        if idx.dim() == 0:
            idx = idx.unsqueeze(0)
        self.mamba_pool.free(idx)

    def mamba_available(self) -> int:
        return int(self.mamba_pool.available_size())

    def lock_node(self, node: Any) -> Any:
        self.cache.inc_lock_ref(node)
        return node

    def unlock_lock(self, lock: Any) -> None:
        self.cache.dec_lock_ref(lock)

    def key_len(self, node: Any) -> int:
        return len(node.key)

    def prefix_len(self, result: Any) -> int:
        return len(result.device_indices)

    def match_indices(self, result: Any) -> Any:
        return result.device_indices

    def new_req(self) -> Any:
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        self._rid += 1
        return Req(f"r{self._rid}", "", [], SamplingParams(temperature=0, max_new_tokens=1))

    def req_mamba_slot(self, req: Any) -> Any:
        return req.mamba_pool_idx

    def match_extra(self, result: Any) -> dict[str, Any]:
        return {}

    def tree_dump(self) -> list[list[Any]]:
        out = []
        stack = [(self.cache.root_node, [])]
        while stack:
            node, path = stack.pop()
            for child in node.children.values():
                full = path + [int(t) for t in child.key.token_ids]
                out.append([full, child.mamba_value is not None, int(child.full_lock_ref)])
                stack.append((child, full))
        out.sort()
        return out


def torch_int32(fx: Fixture) -> Any:
    return fx.r2t.req_to_token.dtype


FIXTURES = {"0.5.23": Fixture0523, "0.5.9": Fixture059}


def installed_version() -> str:
    from importlib.metadata import version

    return version("sglang")


def bench(fx: Fixture, cmd: dict[str, Any]) -> dict[str, Any]:
    """docs/concepts/reference-cache.md: 50% match / 50% insert, explicit evict on allocation failure."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams

    ops = cmd["ops"]
    cache, allocator = fx.cache, fx.allocator
    sum_hit = 0
    t0 = time.perf_counter()
    for op, tokens in ops:
        key = fx.key(tokens)
        if op == "match":
            sum_hit += fx.prefix_len(cache.match_prefix(MatchPrefixParams(key=key)))
            continue
        need = len(tokens) - allocator.available_size()
        if need > 0:
            cache.evict(EvictParams(num_tokens=need))
        value = allocator.alloc(len(tokens))
        if value is None:
            continue
        slot = fx.mamba_alloc(1)
        if slot is None:
            cache.evict(EvictParams(num_tokens=0, mamba_num=1))
            slot = fx.mamba_alloc(1)
        if slot is None:
            allocator.free(value)
            continue
        result = cache.insert(InsertParams(key=key, value=value, mamba_value=slot))
        if fx.version == "0.5.9" and result.prefix_len:
            allocator.free(value[: result.prefix_len])
        if result.mamba_exist:
            fx.mamba_free(slot)
    elapsed = time.perf_counter() - t0
    with _capture_fd1():
        cache.sanity_check()
    sizes = fx.sizes()
    return {
        "seconds": elapsed,
        "sum_hit": sum_hit,
        "states": sizes["mamba_evictable"] + sizes["mamba_protected"],
        "cached_tokens": sizes["full_evictable"] + sizes["full_protected"],
        "backend": fx.backend,
    }


def main() -> None:
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # SGLang's own prints land on stderr, never in the protocol stream
    sys.stdout = sys.stderr
    random.seed(0)
    fx: Fixture | None = None
    version = installed_version()
    out.write(json.dumps({"ready": True, "version": version}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            reply: dict[str, Any]
            if op == "quit":
                break
            if op == "init":
                if cmd.get("version", version) != version:
                    raise ValueError(f"this venv has sglang {version}, asked for {cmd['version']}")
                fx = FIXTURES[version](cmd)
                reply = {"backend": fx.backend}
            else:
                if fx is None:
                    raise RuntimeError("send init first")
                if op == "insert":
                    reply = fx.insert(cmd["tokens"], int(cmd.get("prev_prefix_len", 0)))
                elif op == "request":
                    reply = fx.request(cmd)
                elif op == "match":
                    reply = fx.match(cmd["tokens"], bool(cmd.get("cow")), bool(cmd.get("lock")))
                elif op == "unlock":
                    reply = fx.unlock(int(cmd["lock"]))
                elif op == "evict":
                    reply = fx.evict(int(cmd.get("num_tokens", 0)), int(cmd.get("mamba_num", 0)))
                elif op == "observe":
                    reply = {}
                elif op == "bench":
                    reply = bench(fx, cmd)
                else:
                    raise ValueError(f"unknown op {op!r}")
                if op not in ("bench", "request") and cmd.get("observe", True):
                    reply["obs"] = fx.observe(tree=cmd.get("tree", True), sanity=cmd.get("sanity", True))
            out.write(json.dumps({"ok": True, **reply}) + "\n")
        except Exception as exc:
            out.write(json.dumps({"ok": False, "error": repr(exc), "traceback": traceback.format_exc()}) + "\n")


if __name__ == "__main__":
    main()
