"""Runs the batches the engine core schedules on the tiny model, with the reference cache's memory.

The core decides what runs and what is reused; this module makes it real:

* a request's recurrent state lives in its ``live_state`` slot of the ``TensorStatePool`` that
  replaced the tree's state pool, so a hit's copy-on-write really copies the cached state;
* a prefill forward snapshots the state at the position the strategy will track inside it
  (``Strategy.track_position``: the chunk-aligned point or the branch point), and the lifecycle's
  labels move those snapshots into the track slots the tree is handed;
* the KV of a hit's prefix is read from rows an earlier forward wrote (``KVStore``);
* the sampled tokens go back through ``EngineCore.complete``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from reference_impl.engine.core import Batch, BatchItem, EngineCore, EngineRequest
from reference_impl.engine.cost_model import CALIBRATED, CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.lifecycle import CachedRequest, fingerprint
from reference_impl.model.model import HybridModel, RecState
from reference_impl.model.storage import KVStore, StateMaterializationError, TensorStatePool, rolling_keys
from reference_impl.models import get_model
from reference_impl.radix.tree import MambaRadixTree

__all__ = ["SAMPLING_EPS", "Executor", "RequestCtx", "StepReport", "gpu_slot_copy_ratio"]

SAMPLING_EPS = 1e-6  # SGLang's _SAMPLING_EPS: a lower temperature samples greedily (top_k = 1)


def gpu_slot_copy_ratio(model: str = "qwen3-next-80b-a3b", gpu: str = "h100", tokens: int = 64) -> float:
    """GPU seconds one state-slot copy (read + write) takes per GPU second of a ``tokens``-token prefill.

    The tiny model's state is a few KB while its per-token work is Python-bound, so on this CPU a state
    copy is almost free next to the forward; on a GPU serving the real model (SGLang PR #11214's Qwen3-Next-80B
    on H100s, ~77 MB of state per request, the temporal part in float32) it is not. The ``copy_every_chunk``
    fault charges its copies at this ratio of the forward it interrupts, so its cost relative to compute is
    the GPU's.
    """
    spec, dev = get_model(model), get_gpu(gpu)
    copy_s = 2 * spec.state_bytes() / dev.hbm_bytes_per_s
    forward_s = CostModel(spec, dev).prefill_flops(tokens, 0) / (dev.bf16_flops * CALIBRATED.prefill_mfu)
    return copy_s / forward_s

TopLogprobs = list[tuple[float, int]]


@dataclass(slots=True)
class RequestCtx:
    """What the executor keeps per request besides the core's bookkeeping."""

    temperature: float = 0.0
    logprob_start: int | None = None  # first input position whose logprob is returned (None: none)
    top_logprobs_num: int = 0
    seed: int = 0
    stop_tokens: frozenset[int] = frozenset()  # EOS unless ignore_eos
    stopped: bool = False  # finished on a stop token (finish_reason "stop")
    keys: list[int] = field(default_factory=list)  # rolling prefix hash per position
    rows: list[int] = field(default_factory=list)  # KV rows of positions [0, len(rows))
    rows_for: CachedRequest | None = None  # the admission ``rows`` belong to (reset on retraction)
    input_logprobs: dict[int, tuple[float, TopLogprobs]] = field(default_factory=dict)
    output_logprobs: list[tuple[float, TopLogprobs]] = field(default_factory=list)
    last_logits: Tensor | None = None  # logits at the end of the previous chunk (input logprobs)
    generator: torch.Generator | None = None
    keep_logits: bool = False  # keep every sampled position's logits (the cache-hit contract tests)
    logits: list[Tensor] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class StepReport:
    batch: Batch
    sampled: dict[int, int]  # rid -> token sampled this step
    finished: list[EngineRequest]
    seconds: float = 0.0


class Executor:
    def __init__(
        self,
        core: EngineCore,
        model: HybridModel,
        *,
        branch_off_by_one: bool = False,
        stale_cow_source: bool = False,
        copy_every_chunk: bool = False,
    ) -> None:
        self.core = core
        self.model = model
        self.branch_off_by_one = branch_off_by_one
        self.copy_every_chunk = copy_every_chunk
        tree = core.tree
        if tree.state_pool.available != tree.state_pool.size:
            raise RuntimeError("the executor must take over the state pool before anything is allocated")
        # Swap the counting pool for one with tensors behind every slot; nothing is allocated yet.
        self.pool = TensorStatePool(tree.state_pool.size, model)
        self.pool.stale_cow_source = stale_cow_source
        tree.state_pool = self.pool
        if core.host is not None:
            host_pool = TensorStatePool(core.host.tree.state_pool.size, model)
            core.host.tree.state_pool = host_pool
            self.pool.peers.append(host_pool)
            host_pool.peers.append(self.pool)
        # The host tier's KV copies are rows too (they are what a load-back brings back to the device).
        host_rows = core.config.host_kv_tokens if core.host is not None else 0
        self.kv = KVStore(core.config.kv_tokens + host_rows + core.config.chunked_prefill_size, model.kv_row_shape,
                          self._live_keys)
        self.requests: dict[int, tuple[EngineRequest, RequestCtx]] = {}
        self.extra_copies = 0  # state copies made by the copy_every_chunk fault
        self._slot_copy_ratio = gpu_slot_copy_ratio() if copy_every_chunk else 0.0

    # ------------------------------------------------------------------ bookkeeping
    def register(self, req: EngineRequest, ctx: RequestCtx) -> None:
        ctx.generator = torch.Generator().manual_seed(ctx.seed)
        self.requests[req.rid] = (req, ctx)

    def forget(self, rid: int) -> None:
        self.requests.pop(rid, None)

    def _live_keys(self) -> Iterator[int]:
        """Every prefix key the tree, the host tier or a running request still holds (KV rows to keep)."""
        host = self.core.host
        for tree in (self.core.tree, *((host.tree,) if host is not None else ())):
            yield from self._tree_keys(tree)
        for req, ctx in self.requests.values():
            if req.cached is not None:
                yield from ctx.keys[: req.cached.kv_len + req.cached.kv_reserved]

    @staticmethod
    def _tree_keys(tree: MambaRadixTree) -> Iterator[int]:
        stack = [(tree.root, 0)]
        while stack:
            node, h = stack.pop()
            for child in node.children.values():
                ch = h
                for tok in child.key:
                    ch = hash((ch, tok))
                    yield ch
                stack.append((child, ch))

    def _rows(self, ctx: RequestCtx, cached: CachedRequest, upto: int) -> list[int]:
        """KV rows of positions ``[0, upto)``; the part reused from the cache is looked up once."""
        if ctx.rows_for is not cached:
            ctx.rows_for, ctx.rows = cached, []
        if len(ctx.rows) < upto:
            rolling_keys(cached.tokens, ctx.keys, upto)
            ctx.rows.extend(self.kv.rows_for(ctx.keys[len(ctx.rows) : upto]))
        return ctx.rows[:upto]

    # ------------------------------------------------------------------ one step
    def step(self) -> StepReport | None:
        batch = self.core.schedule()
        if batch is None:
            return None
        sampled = self._run_prefill(batch) if batch.kind == "prefill" else self._run_decode(batch)
        for rid, token in sampled.items():
            req, ctx = self.requests[rid]
            if token in ctx.stop_tokens:  # stop here: the core finishes a request with nothing remaining
                req.max_new_tokens = len(req.output) + 1
                ctx.stopped = True
        try:
            finished = self.core.complete(batch, list(sampled.values()))
        finally:
            self.pool.pending.clear()
        return StepReport(batch, sampled, finished)

    def _check_live(self, cached: CachedRequest, at: int) -> int:
        slot = cached.live_state
        assert slot is not None
        want = cached.fingerprint(at)
        if at and self.pool.held.get(slot) != want:
            raise StateMaterializationError(f"live state slot {slot} does not hold the state after {at} tokens")
        return slot

    def _run_prefill(self, batch: Batch) -> dict[int, int]:
        sampled: dict[int, int] = {}
        for item in batch.items:
            req, ctx = self.requests[item.request.rid]
            cached = req.cached
            assert cached is not None
            token = self._prefill_item(item, req, ctx, cached)
            if token is not None:
                sampled[req.rid] = token
        return sampled

    def _prefill_item(
        self, item: BatchItem, req: EngineRequest, ctx: RequestCtx, cached: CachedRequest
    ) -> int | None:
        start, end, tokens = item.start, item.end, cached.tokens
        slot = self._check_live(cached, start)
        rows = self._rows(ctx, cached, start)
        past = self.kv.gather(rows) if start else torch.zeros(0, *self.model.kv_row_shape)
        track = self.core.strategy.track_position(cached, start, end)
        snaps = [track] if track is not None else []
        shift = 0
        if self.branch_off_by_one and track is not None and track == cached.branch_seqlen:
            shift = 1  # the branch point's state is taken one token early but labelled as the branch point
        chunk = self.core.tree.chunk_size
        if self.copy_every_chunk and self.core.config.cache != "disabled":  # #27220: the radix cache's tracking
            snaps = sorted({*snaps, *range((start // chunk + 1) * chunk, end + 1, chunk)})
        want_lp = ctx.logprob_start is not None and end > ctx.logprob_start
        state = self.pool.get([slot])
        t0 = time.perf_counter()
        out = self.model.extend(
            tokens[start:end],
            start,
            RecState(state.conv[0], state.ssm[0]),
            past,
            snaps,
            all_logits=want_lp,
            snapshot_shift=shift,
        )
        rolling_keys(tokens, ctx.keys, end)
        ctx.rows.extend(self.kv.store(ctx.keys[start:end], out.kv))
        forward_s = time.perf_counter() - t0
        self.pool.put(slot, out.state, fingerprint(tokens, end))
        for pos, snap in out.snapshots.items():
            if pos != track:
                self._copy_chunk_state(snap, forward_s * chunk / (end - start))
                continue
            self.pool.pending[fingerprint(tokens, pos)] = snap
        if want_lp:
            self._input_logprobs(ctx, tokens, (start, end), cached.input_len, out.logits)
        if end < cached.input_len:
            return None
        return self._sample(ctx, out.logits[-1])

    def _copy_chunk_state(self, snap: RecState, chunk_forward_s: float) -> None:
        """The copy_every_chunk fault: every chunk boundary takes a slot and a synchronous buffer copy.

        #27220's per-chunk tracking allocates a slot, copies the state and inserts it for every
        chunk; here the copy goes through the whole state buffer, as a non-fused copy kernel does.
        The copy really happens (tensors move); its time is then brought up to what copying every
        slot of the pool costs a GPU relative to one chunk's forward (``gpu_slot_copy_ratio``), since
        a synchronous copy stalls the stream and nothing overlaps it.
        """
        slot = self.pool.alloc()
        if slot is None:
            return
        t0 = time.perf_counter()
        self.pool.tensors.conv[slot] = snap.conv
        self.pool.tensors.ssm[slot] = snap.ssm
        self.pool.tensors = RecState(self.pool.tensors.conv.clone(), self.pool.tensors.ssm.clone())
        self.pool.free(slot)
        self.extra_copies += 1
        gpu_like = self.pool.size * self._slot_copy_ratio * chunk_forward_s
        time.sleep(max(0.0, gpu_like - (time.perf_counter() - t0)))

    def _input_logprobs(
        self, ctx: RequestCtx, tokens: Sequence[int], span: tuple[int, int], input_len: int, logits: Tensor
    ) -> None:
        start, end = span
        assert ctx.logprob_start is not None
        lp = torch.log_softmax(torch.cat([ctx.last_logits, logits]) if ctx.last_logits is not None else logits, -1)
        offset = start - (1 if ctx.last_logits is not None else 0)  # row r predicts position offset + r + 1
        for pos in range(max(start, ctx.logprob_start, 1), min(end, input_len)):
            if pos in ctx.input_logprobs:
                continue  # a retracted request recomputes its prompt: keep the first values
            row = lp[pos - offset - 1]
            ctx.input_logprobs[pos] = (float(row[tokens[pos]]), self._top(row, ctx.top_logprobs_num))
        ctx.last_logits = logits[-1:].clone()

    def _run_decode(self, batch: Batch) -> dict[int, int]:
        reqs = [self.requests[i.request.rid] for i in batch.items]
        slots, pasts, feed, positions = [], [], [], []
        for item, (req, ctx) in zip(batch.items, reqs, strict=True):
            cached = req.cached
            assert cached is not None
            slots.append(self._check_live(cached, item.start))
            pasts.append(self.kv.gather(self._rows(ctx, cached, item.start)))
            feed.append(cached.tokens[item.start])
            positions.append(item.start)
        logits, state, new_kv = self.model.decode(feed, positions, self.pool.get(slots), pasts)
        sampled: dict[int, int] = {}
        for b, (item, (req, ctx)) in enumerate(zip(batch.items, reqs, strict=True)):
            cached = req.cached
            assert cached is not None
            rolling_keys(cached.tokens, ctx.keys, item.end)
            ctx.rows.extend(self.kv.store(ctx.keys[item.start : item.end], new_kv[b : b + 1]))
            self.pool.put(slots[b], RecState(state.conv[b], state.ssm[b]), cached.fingerprint(item.end))
            sampled[req.rid] = self._sample(ctx, logits[b])
        return sampled

    # ------------------------------------------------------------------ sampling
    @staticmethod
    def _top(row: Tensor, k: int) -> TopLogprobs:
        if k <= 0:
            return []
        vals, ids = row.topk(k)
        return [(float(v), int(i)) for v, i in zip(vals, ids, strict=True)]

    def _sample(self, ctx: RequestCtx, logits: Tensor) -> int:
        if not ctx.temperature >= SAMPLING_EPS:  # also catches NaN: greedy, never a division blowing up
            token = int(logits.argmax())
        else:
            # Shift so the best logit is 0 before dividing, in float64: every scaled value is in [-inf, 0]
            # and the best is exactly 0, so the probabilities are finite and sum to >= 1 for any finite
            # temperature (1e-45 would overflow float32 to inf and make the softmax NaN).
            scaled = (logits.double() - logits.max().double()) / ctx.temperature
            probs = torch.softmax(scaled, -1)
            token = int(torch.multinomial(probs, 1, generator=ctx.generator))
        if ctx.keep_logits:
            ctx.logits.append(logits.clone())
        lp = torch.log_softmax(logits, -1)
        ctx.output_logprobs.append((float(lp[token]), self._top(lp, ctx.top_logprobs_num)))
        return token
