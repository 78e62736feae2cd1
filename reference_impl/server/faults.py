"""Fault injection (``--inject-bug NAME``): switches that reproduce historical SGLang bugs.

Each switch puts one real bug back so a hybridbench check can be shown to catch it
(https://github.com/sgl-project/sglang, docs/reference/checks.md):

* ``branch_off_by_one`` — the state tracked at a branch point is taken one token early but
  labelled as the branch point: a later hit there produces wrong logits (KL check).
* ``stale_cow_source`` — a hit's copy-on-write copies the state of another node (#35821's stale
  COW source): wrong logits while the bookkeeping looks right (KL check).
* ``no_mamba_pool_check`` — requests are admitted without checking the state pool and without the
  state-derived cap on running requests; when a slot cannot be found the scheduler dies with
  SGLang's allocation error, as in SGLang PR #11214's crash report (survival check).
* ``no_shared_prefix_hits`` — a request admitted while others are in flight never reuses the cache
  (#28222's "#cached-token: 0" under concurrency; cache_hits check).
* ``copy_every_chunk`` — every chunk boundary inside a prefill gets its own state snapshot, slot
  and a synchronous copy through the whole state buffer, as in #27220's per-chunk tracking; each
  copy is charged what it costs a GPU relative to the chunk's forward (``gpu_slot_copy_ratio``), so
  radix-on prefill throughput falls far below radix-off (prefill_overhead check). Arms with the
  radix cache disabled track nothing and are unaffected, as in SGLang.
"""

from __future__ import annotations

from reference_impl.engine.config import EngineConfig, state_ratio
from reference_impl.engine.core import Batch, EngineCore, EngineRequest
from reference_impl.radix.pools import PoolExhausted

__all__ = ["FAULTS", "FaultyEngineCore", "MambaAllocationError"]

FAULTS = ("branch_off_by_one", "stale_cow_source", "no_mamba_pool_check", "no_shared_prefix_hits", "copy_every_chunk")

MAMBA_ALLOC_MESSAGE = (
    "Not enough space for mamba cache, try to increase --mamba-full-memory-ratio or --max-mamba-cache-size."
)


class MambaAllocationError(RuntimeError):
    """Fatal, as in SGLang: the scheduler process dies with this message."""


class FaultyEngineCore(EngineCore):
    """The engine core with the scheduler-side faults; executor-side faults live in the Executor."""

    def __init__(self, config: EngineConfig, faults: frozenset[str]) -> None:
        super().__init__(config)
        self.faults = faults
        self._admitted_this_batch = 0
        if "no_mamba_pool_check" in faults:
            # The state pool no longer bounds concurrency: only --max-running-requests does.
            self.max_running = config.max_running_requests or config.kv_tokens

    def _schedule_prefill(self) -> Batch | None:
        self._admitted_this_batch = 0
        return super()._schedule_prefill()

    def _state_headroom(self) -> int:
        if "no_mamba_pool_check" in self.faults:
            return state_ratio(self.config)  # "always enough": the check that was missing
        return super()._state_headroom()

    def _admit(self, req: EngineRequest, batch_reserve: int = 0, pending_states: int = 0) -> bool:
        busy = bool(self.running or self.chunked or self._admitted_this_batch)
        if "no_shared_prefix_hits" in self.faults and busy:
            req.max_prefix = 0  # concurrent requests never see the cache
        if "no_mamba_pool_check" in self.faults:
            try:
                ok = self._admit_unchecked(req, batch_reserve)
            except PoolExhausted as exc:
                self._slots_failed(exc)
                return False
        else:
            ok = super()._admit(req, batch_reserve, pending_states)
        if ok:
            self._admitted_this_batch += 1
        return ok

    def _admit_unchecked(self, req: EngineRequest, batch_reserve: int) -> bool:
        """``EngineCore._admit`` without swallowing a state allocation failure."""
        return self._take(req, self.strategy.match_request(req.fill_tokens, req.max_prefix), batch_reserve)

    def _slots_failed(self, exc: PoolExhausted) -> None:
        if "no_mamba_pool_check" in self.faults and "mamba" in str(exc):
            raise MambaAllocationError(MAMBA_ALLOC_MESSAGE) from exc
