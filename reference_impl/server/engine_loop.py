"""The model loop: one thread owns the engine core and the model; the HTTP side only sends commands.

Commands (submit, abort, run-a-function) queue up and are applied between forwards, so the core is
never touched while a batch runs — this is SGLang's scheduler process, with a thread instead of a
process. Every step's new tokens go back to their requests through ``Submission.deliver`` (which the
HTTP layer makes thread-safe), and the step is logged in SGLang's format. The loop also takes SGLang's
scheduler-side timing stamps (waiting-queue entry, first forward, prefill end; ``Submission.times``, timing.py).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import sys
import threading
import time
import traceback
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reference_impl.engine.core import Batch, EngineRequest
from reference_impl.model.executor import Executor, RequestCtx, gpu_slot_copy_ratio
from reference_impl.model.model import HybridModel
from reference_impl.server.args import ServerConfig
from reference_impl.server.faults import FaultyEngineCore, MambaAllocationError
from reference_impl.server.metrics import Metrics, pool_usage
from reference_impl.server.modelled import ModelledClock
from reference_impl.server.timing import RequestTimes

__all__ = ["EngineLoop", "Submission", "Update"]

log = logging.getLogger("reference_impl.server")


@dataclass(frozen=True, slots=True)
class Update:
    output_ids: list[int]  # cumulative
    cached_tokens: int
    num_retractions: int
    finished: bool = False
    finish_reason: dict[str, Any] | None = None
    error: str | None = None


@dataclass(slots=True)
class Submission:
    rid: int
    input_ids: list[int]
    max_new_tokens: int  # as the client asked (0: prefill only)
    ctx: RequestCtx
    deliver: Callable[[Update], None]
    times: RequestTimes  # SGLang's per-request stamps (timing.py): the model thread writes the scheduler's
    max_prefix: int | None = None
    # A /health_generate probe, not a client's request: never an arrival the lockstep waits for or owes.
    probe: bool = False
    first_token: float | None = None
    last_token: float | None = None
    request: EngineRequest | None = None


class EngineLoop:
    def __init__(self, config: ServerConfig, model: HybridModel) -> None:
        self.config = config
        self.model = model
        self.metrics = Metrics()
        self._cv = threading.Condition()
        self._inbox: deque[tuple[str, Any]] = deque()
        self.subs: dict[int, Submission] = {}
        # The modelled clock (modelled.py) survives a cache flush: it is the server's, not the cache's.
        self.clock = ModelledClock(prefill_slowdown=config.prefill_slowdown)
        self._owed = 0  # requests finished whose closed-loop successors have not arrived (_await_arrivals)
        self._draining = False  # a whole wait passed with no arrival: the loop ran out of requests to send
        self._build()
        self._decode_steps = 0
        self.forwards = 0
        self._last_prefill_log = self._last_decode_log = time.perf_counter()
        self._decode_tokens = 0
        self.thread = threading.Thread(target=self._main, name="model-loop", daemon=True)

    def _build(self) -> None:
        faults = self.config.faults
        self.core = FaultyEngineCore(self.config.engine, faults)
        self.executor = Executor(
            self.core, self.model, branch_off_by_one="branch_off_by_one" in faults,
            stale_cow_source="stale_cow_source" in faults, copy_every_chunk="copy_every_chunk" in faults,
        )
        self.metrics.snapshot(self.core)

    # ------------------------------------------------------------------ commands (any thread)
    def start(self) -> None:
        self.thread.start()

    def _send(self, kind: str, payload: Any) -> None:
        with self._cv:
            self._inbox.append((kind, payload))
            self._cv.notify()

    def submit(self, sub: Submission) -> None:
        with self._cv:
            self._inbox.append(("submit", sub))
            # dispatched: in the inbox, stamped before the model thread can take it (so before its forward)
            sub.times.dispatched = time.perf_counter()
            self._cv.notify()

    def abort(self, rid: int) -> None:
        self._send("abort", rid)

    def vacate(self) -> None:
        """A closed-loop client finished a request it will send no successor for (``POST /lockstep/vacate``):
        the lockstep owes one request fewer and stops waiting for it at once instead of for its whole wait."""
        self._send("vacate", None)

    def call(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Run ``fn`` in the model thread between two forwards."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._send("call", (fn, fut))
        return fut

    def flush_cache(self) -> bool:
        """Drop the whole cache (model thread only); refused while requests are in flight. A flush ends what the
        lockstep owes: no closed loop flushes mid-trial (the harness flushes between trials and its probes between
        their own requests), so no successor of a finish before it is coming."""
        if not self.core.idle:
            return False
        self._build()
        self._owed = 0
        return True

    # ------------------------------------------------------------------ the loop
    def _main(self) -> None:
        try:
            while True:
                self._iterate()
        except MambaAllocationError as exc:
            self._die(str(exc))
        except Exception:
            self._die("Scheduler hit an exception: " + traceback.format_exc())

    def _die(self, message: str) -> None:
        # SGLang's scheduler takes the whole server down when it dies; so do we.
        log.error(message)
        sys.stderr.flush()
        os._exit(1)

    def _iterate(self) -> None:
        with self._cv:
            while not self._inbox and self.core.idle:
                self._cv.wait()
            if self.config.lockstep_s and not (self.core.idle and self._flush_waiting()):
                self._await_arrivals()  # not before a flush that will succeed: it ends the loop (flush_cache)
            commands = list(self._inbox)
            self._inbox.clear()
        vacated = sum(1 for kind, _ in commands if kind == "vacate")
        if vacated:  # counted, then dropped: where one landed among the submits must not reorder them
            commands = [c for c in commands if c[0] != "vacate"]
        if self.config.lockstep_s:
            commands = _in_modelled_order(commands)
        arrived = vacated + sum(1 for kind, p in commands if kind == "submit" and not p.probe)
        self._owed = max(0, self._owed - arrived)
        self._draining = self._draining and not arrived
        for kind, payload in commands:
            if kind == "submit":
                self._add(payload)
            elif kind == "abort":
                self._abort(payload, "client disconnected")
            else:
                fn, fut = payload
                try:
                    fut.set_result(fn())
                except Exception as exc:
                    fut.set_exception(exc)
        if self.core.idle:
            self.metrics.snapshot(self.core)
            return
        prev_chunked = self.core.chunked
        retractions = self.core.counters.retractions
        t0 = time.perf_counter()  # SGLang stamps forward entry when it schedules the batch, before the forward
        copies = self.executor.extra_copies
        report = self.executor.step()
        if report is None:
            if self.core.waiting and not self.core.running and self.core.chunked is None:
                head = self.core.waiting[0]
                self.core.abort(head, "request cannot be admitted with the configured pools")
                self._finish_aborted(head.rid, head.error)
            return
        if report.batch.kind == "prefill" and self.config.prefill_slowdown:
            # The planted regression (--prefill-slowdown): this prefill takes 1 + F times its own time.
            time.sleep(self.config.prefill_slowdown * (time.perf_counter() - t0))
        self.clock.advance(self.clock.forward_s(report.batch, self.executor.extra_copies - copies, self._copy_s()))
        now = time.perf_counter()
        self.forwards += 1  # read by /health_generate from the HTTP thread: progress, as SGLang judges health
        self.metrics.snapshot(self.core)
        if report.batch.kind == "prefill":
            self._log_prefill(report.batch, prev_chunked, now)
            for item in report.batch.items:
                if (entered := self.subs.get(item.request.rid)) is not None:
                    entered.times.enter_forward(t0)
        else:
            self._log_decode(len(report.batch.items), now)
            if self.core.counters.retractions != retractions:
                self._requeued(t0)
        for rid in report.sampled:
            self._deliver_tokens(rid, now)
        owed = sum(1 for req in report.finished if not getattr(self.subs.get(req.rid), "probe", False))
        for req in report.finished:
            self._finish(req.rid, now)
        self._owed += owed  # a closed loop replaces each finished request of its own, never a health probe

    def _flush_waiting(self) -> bool:
        """A flush is next in the inbox, no request before it: on an idle core it will succeed."""
        for kind, payload in self._inbox:
            if kind == "submit":
                return False
            if kind == "call" and payload[0] == self.flush_cache:
                return True
        return False

    def _copy_s(self) -> float:
        """The modelled time of one copy_every_chunk copy, priced as the executor prices its wall time: the whole
        state buffer at the GPU's copy-to-forward ratio of one chunk's forward."""
        if "copy_every_chunk" not in self.config.faults:
            return 0.0
        chunk = self.core.tree.chunk_size
        return self.executor.pool.size * gpu_slot_copy_ratio() * self.clock.chunk_forward_s(chunk, 0)

    def _await_arrivals(self) -> None:
        """``--modelled-lockstep-ms`` (a closed-loop load judged on the modelled clock; the caller holds the lock):
        before the next forward, wait — at most that long on the wall clock — for a request in place of each one
        that finished, and for a burst of first requests to settle. A closed-loop client sends the next request the
        moment one finishes (no think time), so on the modelled clock it arrives then; without this wait it joined
        whichever forward the wall clock's race left it, and batch composition (so modelled TTFT) varied from
        repeat to repeat. The modelled clock stands still meanwhile. A wait in which nothing at all arrives means the
        client has no more to send (a trial's end): no further waits until a request arrives again."""
        deadline = time.perf_counter() + self.config.lockstep_s
        settle = self.config.lockstep_s / 10

        def submits() -> int:  # successors in: a client's requests, and its word that a finish has none
            return sum(1 for kind, p in self._inbox if kind == "vacate" or (kind == "submit" and not p.probe))

        if self.core.idle and (not self._owed or self._draining):  # a burst begins: wait until it stops growing
            seen = submits()
            while (left := deadline - time.perf_counter()) > 0:
                self._cv.wait(timeout=min(settle, left))
                if submits() == seen:
                    return
                seen = submits()
            return
        if self._draining:  # the client has no more to send (a trial's end): nothing to wait for
            return
        before = submits()
        while submits() < self._owed and (left := deadline - time.perf_counter()) > 0:
            self._cv.wait(timeout=left)
        if submits() < self._owed:  # the rest are not coming (a session that ended): owe no more than arrived
            self._draining = submits() == before  # not one came in the whole wait: the loop is draining
            self._owed = submits()

    def _requeued(self, now: float) -> None:
        """Requests this decode step retracted back to the waiting queue: their queue time runs again."""
        for req in self.core.waiting:
            sub = self.subs.get(req.rid)
            if sub is not None and req.status == "waiting" and req.retractions and not sub.times.queued \
                    and sub.times.forward_entry:
                sub.times.enter_queue(now)

    def _add(self, sub: Submission) -> None:
        req = self.core.add_request(sub.rid, sub.input_ids, max(1, sub.max_new_tokens), max_prefix=sub.max_prefix)
        sub.request = req
        self.subs[sub.rid] = sub
        sub.times.enter_queue(time.perf_counter())
        sub.times.modelled_received = self.clock.now
        if req.status == "aborted":
            self._finish_aborted(sub.rid, req.error)
            return
        self.executor.register(req, sub.ctx)
        with self.metrics.lock:
            self.metrics.num_requests += 1

    def _abort(self, rid: int, reason: str) -> None:
        sub = self.subs.get(rid)
        if sub is None or sub.request is None:
            return
        self.core.abort(sub.request, reason)
        self._finish_aborted(rid, reason)

    def _finish_aborted(self, rid: int, reason: str) -> None:
        sub = self.subs.pop(rid, None)
        self.executor.forget(rid)
        with self.metrics.lock:
            self.metrics.num_aborted += 1
        if sub is not None:
            reason_obj = {"type": "abort", "message": reason}
            sub.deliver(Update([], 0, 0, finished=True, finish_reason=reason_obj, error=reason))

    def _visible_output(self, sub: Submission) -> list[int]:
        assert sub.request is not None
        return list(sub.request.output[: sub.max_new_tokens])

    def _deliver_tokens(self, rid: int, now: float) -> None:
        sub = self.subs.get(rid)
        if sub is None or sub.request is None:
            return
        req = sub.request
        m = self.metrics
        with m.lock:
            if sub.first_token is None:
                sub.first_token = sub.times.prefill_finished = now
                sub.times.modelled_first_token = self.clock.now
                m.ttft.observe(now - sub.times.received)  # from HTTP receipt, as SGLang's created_time
                m.prompt_tokens += len(sub.input_ids)
                m.cached_tokens += req.cached_tokens or 0
            elif sub.last_token is not None:
                m.itl.observe(now - sub.last_token)
            if len(req.output) <= sub.max_new_tokens:
                m.generation_tokens += 1
        sub.last_token = now
        if req.status != "finished":
            sub.deliver(Update(self._visible_output(sub), req.cached_tokens or 0, req.retractions))

    def _finish(self, rid: int, now: float) -> None:
        sub = self.subs.pop(rid, None)
        self.executor.forget(rid)
        if sub is None or sub.request is None:
            return
        req = sub.request
        sub.times.modelled_finished = self.clock.now
        with self.metrics.lock:
            self.metrics.e2e.observe(now - sub.times.received)
        out = self._visible_output(sub)
        if sub.ctx.stopped and sub.max_new_tokens > 0:
            reason: dict[str, Any] = {"type": "stop", "matched": out[-1] if out else None}
        else:
            reason = {"type": "length", "length": sub.max_new_tokens}
        sub.deliver(Update(out, req.cached_tokens or 0, req.retractions, finished=True, finish_reason=reason))

    # ------------------------------------------------------------------ SGLang-style log lines
    def _log_prefill(self, batch: Batch, prev_chunked: EngineRequest | None, now: float) -> None:
        new = [i for i in batch.items if i.request is not prev_chunked]
        cached = sum(i.start for i in new)
        full, mamba, _, _ = pool_usage(self.core)
        rate = batch.num_tokens / max(1e-9, now - self._last_prefill_log)
        self._last_prefill_log = now
        hit = cached / max(1, cached + batch.num_tokens)
        with self.metrics.lock:
            self.metrics.cache_hit_rate = hit
        pending = sum(len(r.fill_tokens) for r in self.core.waiting)
        log.info(
            f"Prefill batch, #new-seq: {len(new)}, #new-token: {batch.num_tokens}, #cached-token: {cached}, "
            f"full token usage: {full:.2f}, mamba usage: {mamba:.2f}, #running-req: {len(self.core.running)}, "
            f"#queue-req: {len(self.core.waiting)}, #pending-token: {pending}, cuda graph: False, "
            f"input throughput (token/s): {rate:.2f}"
        )

    def _log_decode(self, batch_size: int, now: float) -> None:
        self._decode_steps += 1
        self._decode_tokens += batch_size
        if self._decode_steps % self.config.decode_log_interval:
            return
        rate = self._decode_tokens / max(1e-9, now - self._last_decode_log)
        self._last_decode_log, self._decode_tokens = now, 0
        full, mamba, kv_used, st_used = pool_usage(self.core)
        with self.metrics.lock:
            self.metrics.gen_throughput = rate
        log.info(
            f"Decode batch, #running-req: {len(self.core.running)}, #full token: {kv_used}, "
            f"full token usage: {full:.2f}, mamba num: {st_used}, mamba usage: {mamba:.2f}, cuda graph: False, "
            f"gen throughput (token/s): {rate:.2f}, #queue-req: {len(self.core.waiting)}"
        )


def _arrival_key(sub: Submission) -> tuple[int, bytes, int, int, str]:
    c = sub.ctx  # two requests of one input may still differ in how they are sampled and what they return
    how = repr((c.temperature, c.logprob_start, c.top_logprobs_num, c.seed, sorted(c.stop_tokens)))
    return (len(sub.input_ids), array("q", sub.input_ids).tobytes(), sub.max_new_tokens,
            -1 if sub.max_prefix is None else sub.max_prefix, how)


def _in_modelled_order(commands: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Under ``--modelled-lockstep-ms`` the requests gathered in one wait arrive at one modelled moment, and the
    order the HTTP threads' race put them in decided which joined the next prefill first (so hits, evictions and
    modelled TTFT varied between two servers of one arm by several percent). Each run of consecutive submissions
    is therefore admitted in an order of their content (length, token ids, max_new_tokens, sampling), the same on
    every server and repeat; aborts and calls keep their places."""
    out: list[tuple[str, Any]] = []
    run: list[tuple[str, Any]] = []
    for command in commands:
        if command[0] == "submit":
            run.append(command)
            continue
        out += sorted(run, key=lambda c: _arrival_key(c[1]))
        run = []
        out.append(command)
    return out + sorted(run, key=lambda c: _arrival_key(c[1]))
