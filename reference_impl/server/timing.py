"""SGLang's per-request timing in /generate's ``meta_info``: the moments it measures, and which answer or stream
chunk carries which of them, per ``--sglang-api-version``.

SGLang stamps each request with ``time.perf_counter()`` twice over: its API server (``APIServerReqTimeStats``:
received, dispatched to the scheduler, first output back, finished, first byte sent) and its scheduler
(``SchedulerReqTimeStats``: waiting-queue entry, first forward, prefill finished, time queued), and reports the
stamps as wall-clock (``time.time()``) by one offset. Here the HTTP side takes the API server's moments and the
model thread the scheduler's, each at the equivalent point; two or three clock reads per request, none per token.

File:line references are to ``sglang/srt`` of the installed 0.5.16 and 0.5.23 wheels.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

__all__ = ["FORCE_STREAM_INTERVAL", "RequestTimes", "finish_meta", "modelled_meta", "scheduler_meta"]

# SGLang's scheduler sends a non-streamed request's output only when it finishes or every 50 tokens
# (SGLANG_FORCE_STREAM_INTERVAL; scheduler_components/output_streamer.py 0.5.16:358-360, 0.5.23:474-477): the API
# server's "first output" of such a request is then, not its first token.
FORCE_STREAM_INTERVAL = 50


@dataclass(slots=True)
class RequestTimes:
    """One request's moments, ``perf_counter`` seconds (0.0: not yet), written by the thread that owns each."""

    version: str  # the SGLang API version imitated
    stream: bool
    received: float  # API server ``created_time``: the parsed request taken (tokenizer_manager.py 0.5.23:3803)
    wall_offset: float  # time.time() - perf_counter(), taken at receipt (SGLang's global_diff_realtime_monotonic)
    dispatched: float = 0.0  # api_server_dispatch_finish_time: the request is in the model thread's inbox
    # the model thread's (scheduler)
    wait_entry: float = 0.0  # wait_queue_entry_time, and again after a retraction
    queued: bool = False  # in the waiting queue since wait_entry
    forward_entry: float = 0.0  # the first forward that includes it
    prefill_finished: float = 0.0  # its prompt done: the first token sampled
    queue_s: float = 0.0  # 0.5.23's queue_duration_s: every stay in the waiting queue, summed
    # the HTTP side's (tokenizer manager)
    first_token: float = 0.0  # first_token_time
    finished: float = 0.0
    response_sent: float = 0.0
    # the modelled clock's (modelled.py; seconds on the server's modelled clock, None: not yet)
    modelled_received: float | None = None
    modelled_first_token: float | None = None
    modelled_finished: float | None = None
    report_modelled: bool = False  # --report-modelled-time: without it the answer keeps SGLang's keys only

    @classmethod
    def at_receipt(cls, version: str, *, stream: bool) -> RequestTimes:
        now = time.perf_counter()
        return cls(version, stream, now, time.time() - now)

    def wall(self, t: float) -> float:
        return t + self.wall_offset

    # ------------------------------------------------------------------ model thread
    def enter_queue(self, now: float) -> None:
        self.wait_entry, self.queued = now, True

    def enter_forward(self, now: float) -> None:
        """Its first forward, or the first after a retraction re-queued it (req_time_stats.py 0.5.23:802-840)."""
        if self.queued:
            self.queue_s += now - self.wait_entry
            self.queued = False
        if not self.forward_entry:
            self.forward_entry = now

    # ------------------------------------------------------------------ HTTP side
    def output_arrived(self, n_out: int, finished: bool) -> None:
        """An update reached the HTTP side: where SGLang's API server would get one (every token streamed; a
        non-streamed request's at the end or every ``FORCE_STREAM_INTERVAL`` tokens), stamp its first output and
        its end (tokenizer_manager.py 0.5.16:2133-2144, 0.5.23:2731-2753)."""
        if self.finished or not (finished or self.stream or n_out >= FORCE_STREAM_INTERVAL):
            return
        if self.first_token:
            if finished:
                self.finished = time.perf_counter()
            return
        now = time.perf_counter()
        new = self.version != "0.5.16"
        # 0.5.23 takes a non-streamed request's first token from the scheduler's prefill_finished_time
        # (tokenizer_manager.py 0.5.23:2800-2809); 0.5.16 from this first output's arrival.
        pf = self.prefill_finished
        self.first_token = pf if new and not self.stream and self.received < pf <= now else now
        if finished:  # 0.5.23 reuses the arrival; 0.5.16 reads the clock again
            self.finished = now if new else time.perf_counter()

    def mark_sent(self) -> bool:
        """Stamp the first byte sent to the client, once; True when this call stamped it."""
        if self.response_sent:
            return False
        self.response_sent = time.perf_counter()
        return True


def scheduler_meta(t: RequestTimes) -> dict[str, Any]:
    """The scheduler's stamps, on every answer and chunk (with ``--enable-metrics``; tokenizer_manager.py
    0.5.16:1934-1937, 0.5.23:2515-2518)."""
    if t.version == "0.5.16":
        # 0.5.16 loses the scheduler's stamps on the way: the detokenizer re-pickles them, and
        # SchedulerReqTimeStats.__getstate__ then sends {} (enable_metrics is not pickled; req_time_stats.py
        # 0.5.16:626-629), so the tokenizer reads forward_entry_time - wait_queue_entry_time = 0 - 0 and no
        # forward/prefill stamps (:1147-1160). Recorded so; 0.5.23 keeps them (has_timing_data).
        return {"queue_time": 0.0}
    meta: dict[str, Any] = {}
    if t.wait_entry:  # set on waiting-queue entry with metrics on; no storage tier here to wait on (:776-783)
        meta["storage_prefetch_wait"] = meta["storage_staging_wait"] = 0.0
    if t.forward_entry:
        meta["forward_entry_time"] = t.wall(t.forward_entry)
    if t.prefill_finished:
        meta["prefill_finished_time"] = t.wall(t.prefill_finished)
    meta["queue_time"] = t.queue_s  # req_time_stats.py 0.5.23:1213-1236
    return meta


def finish_meta(t: RequestTimes, completion_tokens: int, *, metrics: bool) -> dict[str, Any]:
    """The API server's keys on a request's last answer: e2e_latency always, the rest with ``--enable-metrics``
    (APIServerReqTimeStats.convert_to_output_meta_info, req_time_stats.py 0.5.16:471-495, 0.5.23:507-533)."""
    finished = t.finished or time.perf_counter()
    meta: dict[str, Any] = {"e2e_latency": finished - t.received}
    if not metrics:
        return meta
    meta["request_received_ts"] = t.wall(t.received)
    if t.version != "0.5.16" and t.first_token > t.received:
        meta["first_token_latency"] = t.first_token - t.received
    if t.dispatched:
        meta["api_server_dispatch_finish_ts"] = t.wall(t.dispatched)
    if t.response_sent:  # a stream's first chunk went out before its end
        meta["response_sent_to_client_ts"] = t.wall(t.response_sent)
    meta["request_finished_ts"] = t.wall(finished)
    decode = finished - t.first_token
    if t.first_token and completion_tokens > 1 and decode > 0.0:
        meta["decode_throughput"] = (completion_tokens - 1) / decode  # get_decode_throughput, 0.5.23:492-502
    return meta


def modelled_meta(t: RequestTimes) -> dict[str, Any]:
    """Not SGLang's: the request's moments on the modelled clock (modelled.py), on its last answer, each key named
    ``modelled_*`` so no reader takes them for measured times."""
    if not t.report_modelled:
        return {}
    stamps = {"modelled_received_s": t.modelled_received, "modelled_first_token_s": t.modelled_first_token,
              "modelled_finished_s": t.modelled_finished}
    return {k: v for k, v in stamps.items() if v is not None}
