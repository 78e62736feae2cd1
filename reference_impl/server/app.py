"""The HTTP front end (aiohttp): SGLang's endpoints and response shapes over the model loop.

Handlers run on the asyncio loop and never touch the engine directly: they validate, submit a
``Submission`` whose ``deliver`` hops back onto the asyncio loop, and stream what arrives. A client
that goes away (write fails, or aiohttp cancels the handler) aborts its request, freeing its KV and
state slots in the core.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

from aiohttp import web

from reference_impl.model.executor import RequestCtx
from reference_impl.server.args import ServerConfig
from reference_impl.server.bodies import OpenAiChunks, generate_body
from reference_impl.server.engine_loop import EngineLoop, Submission, Update
from reference_impl.server.errors import (
    contract_refusal,
    dropped_stream,
    dumps_event,
    openai_error,
    openai_stream_error,
    stream_error,
    validation_error,
    value_error,
)
from reference_impl.server.openai_logprobs import ECHO_KEYERROR_0516, echo_crashes
from reference_impl.server.requests import (
    BadRequest,
    ContractViolation,
    GenerateParams,
    MalformedBody,
    contract_problem,
    parse_chat,
    parse_completions,
    parse_generate,
    parse_json,
)
from reference_impl.server.stream import Latest, StreamStalled, write_or_drop
from reference_impl.server.timing import RequestTimes

__all__ = ["build_app"]

VERSION = "reference-0.1.0"
HEALTH_TIMEOUT_S = 20.0
HEALTH_POLL_S = 0.05
HEALTH_BUSY_WAIT_S = 2.0  # a busy server that forwards within this needs no probe request

Started = tuple[Submission, Latest]  # a submitted request and the mailbox its updates arrive in
Render = Callable[[int, Update], tuple[list[dict[str, Any]], bool]]  # (request index, update) -> (events, last?)


def _no_render(i: int, u: Update) -> tuple[list[dict[str, Any]], bool]:
    raise AssertionError("a refused stream has no requests")


class Api:
    def __init__(self, config: ServerConfig, engine: EngineLoop) -> None:
        self.config = config
        self.engine = engine
        self._rids = itertools.count(1)

    # ------------------------------------------------------------------ submission
    def _start(self, params: GenerateParams, received: RequestTimes | None = None, probe: bool = False) -> Started:
        """Submit one request; ``received`` copies the stamps its HTTP request got on arrival (a batch's
        prompts share them)."""
        loop = asyncio.get_running_loop()
        queue = Latest()
        rid = next(self._rids)
        eos = self.config.model.eos_token_id
        ctx = RequestCtx(
            temperature=params.temperature, logprob_start=params.logprob_start_len,
            top_logprobs_num=params.top_logprobs_num, seed=params.seed if params.seed is not None else rid,
            stop_tokens=frozenset() if params.ignore_eos else frozenset({eos}),
        )
        max_prefix = None
        if params.logprob_start_len is not None:
            # SGLang caps the match so the logprobs it returns are computed, not read from the cache.
            max_prefix = max(0, params.logprob_start_len - 1)
        times = RequestTimes.at_receipt(self.config.api_version, stream=params.stream) if received is None \
            else dataclasses.replace(received, stream=params.stream)

        def arrived(update: Update) -> None:  # on the asyncio loop, read or not: SGLang's tokenizer manager's receipt
            times.output_arrived(len(update.output_ids), update.finished)
            queue.put(update)

        def deliver(update: Update) -> None:  # called from the model thread
            loop.call_soon_threadsafe(arrived, update)
        times.report_modelled = self.config.report_modelled
        sub = Submission(rid, params.input_ids, params.max_new_tokens, ctx, deliver=deliver, times=times,
                         max_prefix=max_prefix, probe=probe)
        self.engine.submit(sub)
        return sub, queue

    async def _updates(self, started: list[Started]) -> AsyncGenerator[tuple[int, Update], None]:
        """Each request's updates as they arrive, tagged with its index (SGLang's batch stream order). Requests
        still running when the consumer stops (the client went away, the handler was cancelled, a batch member
        failed) are aborted, freeing their slots."""
        waiting = {asyncio.ensure_future(queue.get()): i for i, (_, queue) in enumerate(started)}
        running = set(range(len(started)))
        try:
            while waiting:
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for task in sorted(done, key=waiting.__getitem__):
                    i = waiting.pop(task)
                    update = task.result()
                    if update.finished:
                        running.discard(i)
                    else:
                        waiting[asyncio.ensure_future(started[i][1].get())] = i
                    yield i, update
        finally:
            for task in waiting:
                task.cancel()
            for i in running:
                self.engine.abort(started[i][0].rid)

    async def _finals(self, started: list[Started]) -> list[Update] | str:
        """Every request's final update, or the first engine error (the others are then aborted)."""
        final: dict[int, Update] = {}
        updates = self._updates(started)
        try:
            async for i, u in updates:
                if u.error is not None:
                    return u.error
                if u.finished:
                    final[i] = u
        finally:
            await updates.aclose()
        return [final[i] for i in range(len(started))]

    async def _sse(self, request: web.Request, started: list[Started], render: Render,
                   refusal: dict[str, Any] | None = None) -> web.StreamResponse:
        """The one SSE loop (/generate, /v1/completions, /v1/chat/completions): each update rendered as
        ``data: <json>`` until the request ends or ``render`` says stop, then ``data: [DONE]``. ``refusal``: a
        request refused after SGLang would have sent its 200, the only event. A client that stops reading is
        dropped (``_drop``)."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        stall = self.config.stream_stall_s
        updates = self._updates(started)
        try:
            if refusal is not None:
                await write_or_drop(resp, dumps_event(refusal), stall)
            async for i, u in updates:
                bodies, last = render(i, u)
                for body in bodies:
                    await write_or_drop(resp, dumps_event(body), stall)
                if last:
                    break
            await write_or_drop(resp, b"data: [DONE]\n\n", stall)
        except StreamStalled:
            return self._drop(request, resp, started)
        finally:
            await updates.aclose()  # aborts what still runs (a failed batch's siblings) now, not at collection
        return resp

    async def _read(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise BadRequest(f"request body larger than {self.config.max_request_bytes} bytes") from None
        return parse_json(body)

    # ------------------------------------------------------------------ /generate
    async def generate(self, request: web.Request) -> web.StreamResponse:
        """SGLang's /generate: one prompt or a batch (a list of prompts: a list of answers, or one stream whose
        chunks carry their prompt's ``index``). Refusals in the shape each SGLang path gives (errors.py)."""
        version = self.config.api_version
        try:
            data = await self._read(request)
        except MalformedBody as exc:
            return validation_error(str(exc))
        except BadRequest as exc:
            return value_error(str(exc))
        stream = data.get("stream") is True
        problem = contract_problem(data) if version != "0.5.16" else None  # 0.5.23 checks before anything else
        if problem is not None:
            return await contract_refusal(request, problem, version, stream)
        try:
            batch = parse_generate(data, self.config.model.vocab_size, self.config.context_length)
        except ContractViolation as exc:
            return await contract_refusal(request, str(exc), version, stream)
        except BadRequest as exc:
            if stream:  # SGLang validates inside the stream: its 200 is already sent
                return await self._sse(request, [], _no_render, refusal=stream_error(str(exc)))
            return value_error(str(exc))
        # SGLang's created_time: set once the body is parsed and checked, when the tokenizer manager takes the
        # request (tokenizer_manager.py 0.5.23:3803-3845, received_time unset on /generate); one for a batch
        received = RequestTimes.at_receipt(version, stream=False)
        started = [self._start(p, received) for p in batch.items]
        metrics = self.config.enable_metrics
        if not batch.stream:
            finals = await self._finals(started)
            if isinstance(finals, str):
                return value_error(finals, 400 if "admitted" in finals else 500)
            bodies = [generate_body(sub, p, u, metrics=metrics)
                      for (sub, _), p, u in zip(started, batch.items, finals, strict=True)]
            return web.json_response(bodies if batch.batched else bodies[0])

        def render(i: int, u: Update) -> tuple[list[dict[str, Any]], bool]:
            body = generate_body(started[i][0], batch.items[i], u, metrics=metrics)
            if batch.batched:
                body["index"] = i
            return [body], u.error is not None
        return await self._sse(request, started, render)

    # ------------------------------------------------------------------ /v1/completions
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=True)

    async def _openai(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        """/v1/completions and /v1/chat/completions: one flow, two body shapes (text vs message/delta); a list of
        completion prompts is one answer with a choice per prompt."""
        try:
            data = await self._read(request)
            vocab, context = self.config.model.vocab_size, self.config.context_length
            items = (parse_chat(data, vocab, context),) if chat else parse_completions(data, vocab, context).items
        except MalformedBody as exc:
            return validation_error(str(exc))
        except BadRequest as exc:
            return openai_error(str(exc))
        if echo_crashes(self.config.api_version, items[0].echo, items[0].logprobs):  # 0.5.16's KeyError
            return await dropped_stream(request) if items[0].stream else openai_error(ECHO_KEYERROR_0516, 500)
        started = [self._start(p) for p in items]
        chunks = OpenAiChunks([sub for sub, _ in started], items[0], chat=chat, model=self.config.served_model_name,
                              version=self.config.api_version)
        if not items[0].stream:
            finals = await self._finals(started)
            if isinstance(finals, str):
                return openai_error(finals)
            return web.json_response(chunks.whole(finals))

        def render(i: int, u: Update) -> tuple[list[dict[str, Any]], bool]:
            return ([openai_stream_error(u.error)], True) if u.error is not None else (chunks.deltas(i, u), False)
        return await self._sse(request, started, render)

    def _drop(self, request: web.Request, resp: web.StreamResponse, started: list[Started]) -> web.StreamResponse:
        """A client that stopped reading: abort its requests (freeing their slots) and close its connection."""
        for sub, _ in started:
            self.engine.abort(sub.rid)
        with self.engine.metrics.lock:
            self.engine.metrics.dropped_streams += 1
        if request.transport is not None:
            request.transport.abort()  # drops what the kernel and aiohttp still buffer for it
        return resp

    async def health(self, request: web.Request) -> web.Response:
        if not self.engine.thread.is_alive():
            return web.Response(status=503, text="model loop is not running")
        return web.Response(text="")

    async def health_generate(self, request: web.Request) -> web.Response:
        """SGLang's rule: healthy once the scheduler produces any output after the probe was sent (its
        ``last_receive_tstamp``), not only once the probe itself finished. Under an all-at-once load the probe
        waits in the queue behind every request; waiting for it alone called a busy server hung."""
        forwards = self.engine.forwards
        # A busy server shows progress without a probe joining its batches: a probe request changes batch
        # composition, and so the modelled clock the reference engine's timing checks judge.
        busy_deadline = time.monotonic() + HEALTH_BUSY_WAIT_S
        while not self.engine.core.idle and time.monotonic() < busy_deadline:
            if self.engine.forwards > forwards:
                return web.Response(text="")
            await asyncio.sleep(HEALTH_POLL_S)
        params = GenerateParams(input_ids=[0], max_new_tokens=1, temperature=0.0, ignore_eos=True, stream=False)
        started = [self._start(params, probe=True)]

        async def run() -> str | None:
            finals = await self._finals(started)
            return finals if isinstance(finals, str) else None

        task = asyncio.ensure_future(run())
        deadline = time.monotonic() + HEALTH_TIMEOUT_S
        try:
            while not task.done():
                if self.engine.forwards > forwards:
                    return web.Response(text="")
                if time.monotonic() >= deadline:
                    return web.Response(status=503, text="health generation timed out")
                await asyncio.wait({task}, timeout=HEALTH_POLL_S)
            error = task.result()
        finally:
            task.cancel()  # a probe still queued is aborted (its slots freed) by _updates
        return web.Response(status=503, text=error) if error else web.Response(text="")

    async def lockstep_vacate(self, request: web.Request) -> web.Response:  # not SGLang's: EngineLoop.vacate
        self.engine.vacate()
        return web.Response(text="")

    async def flush_cache(self, request: web.Request) -> web.Response:
        try:
            timeout = float(request.query.get("timeout", "0"))
        except ValueError:
            timeout = math.nan
        if not math.isfinite(timeout) or timeout < 0:  # an infinite wait would hold the client forever
            # SGLang declares it Query(0.0, ge=0.0): a bad value is FastAPI's validation error
            return validation_error("timeout must be a finite number of seconds >= 0")
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            if await asyncio.wrap_future(self.engine.call(self.engine.flush_cache)):
                return web.Response(text="Cache flushed.\nPlease check backend logs for more details. (When there "
                                    "are running or waiting requests, the operation will not be performed.)\n")
            if time.monotonic() >= deadline:
                return web.Response(status=400, text="Cache not flushed. Please check if there are running or "
                                    "waiting requests. (When there are running or waiting requests, the operation "
                                    "will not be performed.)\n")
            await asyncio.sleep(0.05)

    def _info(self) -> dict[str, Any]:
        cfg = self.config
        core = self.engine.core
        m = self.engine.metrics
        info = dict(cfg.args)  # the flags under SGLang's ServerArgs field names
        # SGLang resolves "auto" only with the radix cache on; off, it reports the flag as given.
        strategy = (cfg.args["mamba_radix_cache_strategy"] or "auto") if cfg.disable_radix_cache else cfg.engine.cache
        info.update({
            "model_path": cfg.served_model_name, "disable_radix_cache": cfg.disable_radix_cache, "arm": cfg.arm.name,
            "mamba_radix_cache_strategy": strategy, "radix_eviction_policy": cfg.engine.policy,
            "max_running_requests": core.max_running, "max_total_num_tokens": cfg.engine.kv_tokens,
            "max_req_input_len": cfg.context_length - 1, "context_length": cfg.context_length,
            "inject_bug": sorted(cfg.faults), "version": VERSION,
            "internal_states": [{
                "max_running_requests": core.max_running, "mamba_pool_size": cfg.engine.state_slots,
                "mamba_cache_chunk_size": core.tree.chunk_size, "avg_spec_accept_length": None,
                # reference-only readouts: tests prove a load really exhausted the pools
                "chunk_state_copies": self.engine.executor.extra_copies,
                "peak_full_token_usage": m.peak_full_token_usage, "peak_mamba_usage": m.peak_mamba_usage,
                "evicted_mamba_states": m.evicted_states, "host_load_back_tokens": m.host_loaded_tokens,
            }],
        })
        return info

    async def server_info(self, request: web.Request) -> web.Response:
        return web.json_response(self._info())

    async def model_info(self, request: web.Request) -> web.Response:
        m = self.config.model
        return web.json_response({
            "model_path": self.config.served_model_name, "tokenizer_path": None, "is_generation": True,
            "architectures": ["TinyHybridForCausalLM"], "model_type": "tiny_hybrid", "vocab_size": m.vocab_size,
            "layers": m.layers, "hidden_size": m.hidden, "eos_token_id": m.eos_token_id, "weight_version": "default",
        })

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{
            "id": self.config.served_model_name, "object": "model", "created": 0, "owned_by": "hybridbench",
            "root": self.config.served_model_name, "max_model_len": self.config.context_length,
        }]})

    async def metrics(self, request: web.Request) -> web.Response:
        if not self.config.enable_metrics:
            return web.Response(status=404, text="metrics are off; start the server with --enable-metrics\n")
        text = self.engine.metrics.render(self.config.served_model_name)
        return web.Response(text=text, content_type="text/plain", charset="utf-8")


@web.middleware
async def _json_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Turn aiohttp's own refusals (413, 405, 404) into SGLang-style JSON errors, one line each."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except web.HTTPRequestEntityTooLarge as exc:
        return value_error(f"request body too large: {exc.text}", 413)
    except web.HTTPException as exc:
        if exc.status >= 400:
            return value_error(exc.reason, exc.status)
        raise


def build_app(config: ServerConfig, engine: EngineLoop) -> web.Application:
    api = Api(config, engine)
    app = web.Application(client_max_size=config.max_request_bytes, middlewares=[_json_errors])
    app.router.add_post("/generate", api.generate)
    app.router.add_put("/generate", api.generate)
    app.router.add_post("/v1/completions", api.completions)
    app.router.add_post("/v1/chat/completions", api.chat_completions)
    app.router.add_get("/health", api.health)
    app.router.add_get("/health_generate", api.health_generate)
    app.router.add_route("*", "/flush_cache", api.flush_cache)
    app.router.add_post("/reset_prefix_cache", api.flush_cache)  # vLLM's name for the same operation
    app.router.add_get("/server_info", api.server_info)
    app.router.add_get("/get_server_info", api.server_info)
    app.router.add_get("/model_info", api.model_info)
    app.router.add_get("/v1/models", api.models)
    app.router.add_get("/metrics", api.metrics)
    app.router.add_post("/lockstep/vacate", api.lockstep_vacate)
    return app
