"""The reference server's modelled clock (reference_impl/server/modelled.py) and its planted prefill slowdown."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from server_harness import running_server

from reference_impl.engine.core import Batch, BatchItem
from reference_impl.server.args import UsageError, parse_config
from reference_impl.server.modelled import CPU_COSTS, ModelledClock

PROMPT = list(range(3, 203))


def _items(*spans: tuple[int, int, int]) -> tuple[BatchItem, ...]:
    return tuple(BatchItem(None, start, end, prefix) for start, end, prefix in spans)  # type: ignore[arg-type]


def test_a_prefill_costs_its_new_tokens_and_their_context_and_the_slowdown_scales_only_prefills() -> None:
    clock, slow = ModelledClock(), ModelledClock(prefill_slowdown=0.25)
    cold = Batch("prefill", _items((0, 200, 0)))
    hit = Batch("prefill", _items((150, 200, 150)))  # 150 tokens from the cache: only 50 computed
    assert clock.forward_s(hit) < clock.forward_s(cold) / 3
    assert slow.forward_s(cold) == pytest.approx(1.25 * clock.forward_s(cold))
    decode = Batch("decode", _items((200, 201, 200), (90, 91, 90)))
    assert slow.forward_s(decode) == clock.forward_s(decode) > CPU_COSTS.decode_fixed_s
    assert clock.advance(0.5) == clock.advance(0.0) == 0.5


def test_the_flag_is_validated() -> None:
    assert parse_config(["--prefill-slowdown", "0.25"]).prefill_slowdown == 0.25
    assert parse_config([]).prefill_slowdown == 0.0
    with pytest.raises(UsageError, match="--prefill-slowdown must be a finite number >= 0"):
        parse_config(["--prefill-slowdown", "-1"])


def _modelled_ttft(*args: str) -> tuple[float, dict[str, Any]]:
    with running_server("--log-level", "warning", "--report-modelled-time", *args) as s:
        meta = s.generate({"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 3, "temperature": 0,
                                                                     "ignore_eos": True}})["meta_info"]
    return meta["modelled_first_token_s"] - meta["modelled_received_s"], meta


def test_each_answer_carries_its_modelled_moments_and_the_planted_slowdown_adds_25_percent() -> None:
    """A lone request's modelled TTFT is its one prefill forward: exactly 1.25 times as long with the switch on,
    whatever the machine's load did to the wall clock."""
    plain, meta = _modelled_ttft()
    assert 0 <= meta["modelled_received_s"] < meta["modelled_first_token_s"] < meta["modelled_finished_s"]
    slowed, _ = _modelled_ttft("--prefill-slowdown", "0.25")
    assert slowed == pytest.approx(1.25 * plain, rel=1e-9)
    # without --report-modelled-time the answer keeps SGLang's own keys (the recorded shapes)
    with running_server("--log-level", "warning") as s:
        bare = s.generate({"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 3}})["meta_info"]
    assert not [k for k in bare if k.startswith("modelled_")]


def _burst(order: list[int], prompts: list[list[int]], *args: str) -> dict[int, tuple[int, float]]:
    """Send ``prompts`` in ``order``, 30 ms apart (one lockstep burst), to a fresh lockstep server; each prompt's
    (cached tokens, modelled TTFT)."""
    out: dict[int, tuple[int, float]] = {}
    # 5 s of lockstep: the burst settles after 500 ms without an arrival, so a loaded machine's stalls between the
    # sends (30 ms apart) do not split it into two waits
    with running_server("--log-level", "warning", "--report-modelled-time", "--modelled-lockstep-ms", "5000",
                        "--chunked-prefill-size", "256", *args) as s:
        def send(i: int) -> None:
            meta = s.generate({"input_ids": prompts[i], "sampling_params": {
                "max_new_tokens": 2, "temperature": 0, "ignore_eos": True}})["meta_info"]
            out[i] = (meta["cached_tokens"], meta["modelled_first_token_s"] - meta["modelled_received_s"])

        threads = []
        for i in order:
            threads.append(threading.Thread(target=send, args=(i,)))
            threads[-1].start()
            time.sleep(0.03)
        for t in threads:
            t.join()
    return out


def test_a_lockstep_burst_is_admitted_in_one_order_whatever_order_its_requests_reached_the_server() -> None:
    """Requests that arrive in one lockstep wait share one modelled moment; which of them the next prefill takes
    first must not follow the HTTP race (two servers of one arm differed by 13% in an A/A run when it did). Four
    200-token prompts against a 256-token prefill chunk: each joins a later forward than the one before it."""
    prompts = [[5 + i, *range(100 + 7 * i, 299 + 7 * i)] for i in range(4)]
    forward, backward = _burst([0, 1, 2, 3], prompts), _burst([3, 2, 1, 0], prompts)
    assert forward == backward
    assert len({ttft for _, ttft in forward.values()}) > 1  # the order mattered: someone went first


def _second_finishes_after(vacate: bool) -> float:
    """A long request, admitted, then a short one on an 8 s lockstep; the short one finishes first and its client
    sends nothing after it. How long, in wall seconds from that finish, the long one still takes."""
    with running_server("--log-level", "warning", "--report-modelled-time", "--modelled-lockstep-ms", "8000") as s:
        done: dict[str, float] = {}

        def send(name: str, n: int) -> None:
            s.generate({"input_ids": PROMPT, "sampling_params": {"max_new_tokens": n, "temperature": 0,
                                                                 "ignore_eos": True}})
            done[name] = time.perf_counter()

        long = threading.Thread(target=send, args=("long", 300))
        long.start()
        # The long one admitted first, whatever the machine's load: otherwise it could arrive after the short one
        # finished and count as its successor, and nothing would be owed.
        deadline = time.perf_counter() + 30
        while s.metric("sglang:num_requests_total") < 1:
            assert time.perf_counter() < deadline, "the long request was never admitted"
            time.sleep(0.02)
        send("short", 2)
        if vacate:
            status, _ = s.request("POST", "/lockstep/vacate", {})
            assert status == 200
        long.join()
    assert done["long"] > done["short"]
    return done["long"] - done["short"]


def test_a_vacated_finish_ends_the_lockstep_wait_for_its_successor_at_once() -> None:
    """A closed loop's finish with no successor (a session's last turn) is announced by hybridbench's client; the
    lockstep then owes nothing for it. Unannounced, the server waits out its whole bound before the next forward."""
    assert _second_finishes_after(vacate=True) < 5.0
    assert _second_finishes_after(vacate=False) >= 7.0


def _stepped_loop() -> tuple[Any, Any, set[int]]:
    """An engine loop on a 1.5 s lockstep, driven step by step (over HTTP the windows below are microseconds wide):
    the loop, a submit(rid, max_new_tokens), and the rids finished so far."""
    from reference_impl.model.executor import RequestCtx
    from reference_impl.model.model import HybridModel
    from reference_impl.server.engine_loop import EngineLoop, Submission
    from reference_impl.server.timing import RequestTimes

    config = parse_config(["--modelled-lockstep-ms", "1500", "--report-modelled-time"])
    loop = EngineLoop(config, HybridModel(config.model))
    finished: set[int] = set()

    def submit(rid: int, n: int) -> None:
        loop.submit(Submission(rid, PROMPT, n, RequestCtx(stop_tokens=frozenset()),
                               lambda u, rid=rid: finished.add(rid) if u.finished else None,
                               RequestTimes.at_receipt(config.api_version, stream=False)))
    return loop, submit, finished


def test_a_refused_flush_does_not_cut_the_lockstep_wait() -> None:
    """Only a flush that succeeds ends the loop: one refused while a request runs leaves the successor owed, and
    the next forward still waits for it."""
    loop, submit, finished = _stepped_loop()
    submit(1, 300)
    submit(2, 2)
    while 2 not in finished:  # the short one finishes; the long one runs on, and a successor of the short is owed
        loop._iterate()
    loop.call(loop.flush_cache)
    t0 = time.perf_counter()
    loop._iterate()  # takes the flush (refused: request 1 runs) and forwards
    assert time.perf_counter() - t0 >= 1.2, "a refused flush skipped the wait for the owed successor"
    assert 1 not in finished


def test_a_flush_behind_a_request_does_not_cut_the_lockstep_wait() -> None:
    """Two finishes owed, one successor in, then a flush: the request runs first, so the flush will be refused and
    the second successor is still awaited."""
    loop, submit, finished = _stepped_loop()
    submit(1, 2)
    submit(2, 2)
    while not {1, 2} <= finished:
        loop._iterate()
    submit(3, 2)
    loop.call(loop.flush_cache)
    t0 = time.perf_counter()
    loop._iterate()
    assert time.perf_counter() - t0 >= 1.2, "a flush behind a request skipped the wait for the owed successor"


def test_a_flush_ends_what_the_lockstep_owes_instead_of_waiting_it_out() -> None:
    """A probe (kl, accuracy) sends one request, then flushes: no closed loop flushes mid-trial, so the flush neither
    waits for the finished request's successor nor leaves it owed. Before, each such flush waited the whole bound
    (the kl experiment spent about a second of every probe step idle at the harness's 1 s lockstep)."""
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True}}
    with running_server("--log-level", "warning", "--report-modelled-time", "--modelled-lockstep-ms", "8000") as s:
        s.generate(body)  # finished: one successor owed
        t0 = time.perf_counter()
        status, _ = s.request("POST", "/flush_cache", {})
        flushed = time.perf_counter() - t0
        s.generate(body)
        again = time.perf_counter() - t0
    assert status == 200
    assert flushed < 4.0, f"the flush waited {flushed:.1f} s for a successor that is not coming"
    assert again < 6.0, f"the request after the flush took {again - flushed:.1f} s"
