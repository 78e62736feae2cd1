"""The HTTP front end (aiohttp): SGLang's endpoints and response shapes over the model loop.

Handlers run on the asyncio loop and never touch the engine directly: they validate, submit a
``Submission`` whose ``deliver`` hops back onto the asyncio loop, and stream what arrives. A client
that goes away (write fails, or aiohttp cancels the handler) aborts its request, freeing its KV and
state slots in the core.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from reference_impl.model.executor import RequestCtx
from reference_impl.server.args import ServerConfig
from reference_impl.server.engine_loop import EngineLoop, Submission, Update
from reference_impl.server.requests import (
    BadRequest,
    GenerateParams,
    parse_chat,
    parse_completions,
    parse_generate,
    parse_json,
)
from reference_impl.server.stream import Latest, StreamStalled, write_or_drop
from reference_impl.server.tokenizer import decode

__all__ = ["build_app"]

VERSION = "reference-0.1.0"
HEALTH_TIMEOUT_S = 20.0
HEALTH_POLL_S = 0.05


def _error(message: str, status: int = 400) -> web.Response:
    return web.json_response({"error": {"message": message, "code": status}}, status=status)


class Api:
    def __init__(self, config: ServerConfig, engine: EngineLoop) -> None:
        self.config = config
        self.engine = engine
        self._rids = itertools.count(1)

    # ------------------------------------------------------------------ submission
    def _start(self, params: GenerateParams) -> tuple[Submission, Latest]:
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
        def deliver(update: Update) -> None:  # called from the model thread
            loop.call_soon_threadsafe(queue.put, update)

        sub = Submission(rid, params.input_ids, params.max_new_tokens, ctx, deliver=deliver, max_prefix=max_prefix)
        self.engine.submit(sub)
        return sub, queue

    async def _updates(self, sub: Submission, queue: Latest) -> AsyncIterator[Update]:
        finished = False
        try:
            while not finished:
                update = await queue.get()
                finished = update.finished
                yield update
        finally:
            if not finished:  # the client went away (or the handler was cancelled): free its slots
                self.engine.abort(sub.rid)

    def _meta(self, sub: Submission, params: GenerateParams, u: Update) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": str(sub.rid), "finish_reason": u.finish_reason, "prompt_tokens": len(sub.input_ids),
            "weight_version": "default", "num_retractions": u.num_retractions, "reasoning_tokens": 0,
            "completion_tokens": len(u.output_ids), "cached_tokens": u.cached_tokens,
        }
        # SGLang (0.5.16, 0.5.23) always sends the key; null without a hit
        meta["cached_tokens_details"] = {"device": u.cached_tokens, "host": 0} if u.cached_tokens else None
        if u.finished:
            meta["e2e_latency"] = time.perf_counter() - sub.created
        if params.return_logprob:
            ctx = sub.ctx
            outs = ctx.output_logprobs[: len(u.output_ids)]
            def text(token: int) -> str | None:  # return_text_in_logprobs: each entry's token as text
                return decode([token]) if params.return_text_in_logprobs else None

            meta["output_token_logprobs"] = [[lp, t, text(t)] for (lp, _), t in zip(outs, u.output_ids, strict=False)]
            meta["output_token_logprobs_length"] = len(meta["output_token_logprobs"])
            inputs: list[list[Any]] = []
            start = params.logprob_start_len
            # SGLang: one entry per prompt token from logprob_start_len on, the first with a null logprob
            # (and null top logprobs) whatever the start (recorded from 0.5.16 and 0.5.23).
            computed = {p: e for p, e in ctx.input_logprobs.items() if start is not None and p > start}
            if start is not None:
                for pos in range(start, len(sub.input_ids)):
                    entry = computed.get(pos)
                    inputs.append([entry[0] if entry else None, sub.input_ids[pos], text(sub.input_ids[pos])])
            meta["input_token_logprobs"] = inputs
            if params.top_logprobs_num:
                meta["output_top_logprobs"] = [[[v, i, text(i)] for v, i in top] for _, top in outs]
                meta["input_top_logprobs"] = [
                    [[v, i, text(i)] for v, i in computed[p][1]] if p in computed else None
                    for p in range(start, len(sub.input_ids))
                ] if start is not None else []
        return meta

    def _body(self, sub: Submission, params: GenerateParams, u: Update) -> dict[str, Any]:
        return {"text": decode(u.output_ids), "output_ids": u.output_ids, "meta_info": self._meta(sub, params, u)}

    # ------------------------------------------------------------------ /generate
    async def _read(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise BadRequest(f"request body larger than {self.config.max_request_bytes} bytes") from None
        return parse_json(body)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        try:
            data = await self._read(request)
            params = parse_generate(data, self.config.model.vocab_size, self.config.context_length)
        except BadRequest as exc:
            return _error(str(exc))
        sub, queue = self._start(params)
        if not params.stream:
            last: Update | None = None
            async for u in self._updates(sub, queue):
                last = u
            assert last is not None
            if last.error is not None:
                return _error(last.error, 400 if "admitted" in last.error else 500)
            return web.json_response(self._body(sub, params, last))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        try:
            async for u in self._updates(sub, queue):
                if u.error is not None:
                    await write_or_drop(resp, f"data: {json.dumps({'error': {'message': u.error}})}\n\n".encode(),
                                        self.config.stream_stall_s)
                    break
                await write_or_drop(resp, f"data: {json.dumps(self._body(sub, params, u))}\n\n".encode(),
                                    self.config.stream_stall_s)
            await write_or_drop(resp, b"data: [DONE]\n\n", self.config.stream_stall_s)
        except StreamStalled:
            return self._drop(request, resp, sub)
        return resp

    # ------------------------------------------------------------------ /v1/completions
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=True)

    async def _openai(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        """/v1/completions and /v1/chat/completions: one flow, two body shapes (text vs message/delta)."""
        parse = parse_chat if chat else parse_completions
        try:
            data = await self._read(request)
            params = parse(data, self.config.model.vocab_size, self.config.context_length)
        except BadRequest as exc:
            return _error(str(exc))
        sub, queue = self._start(params)
        cid = f"{'chatcmpl' if chat else 'cmpl'}-{sub.rid}"
        created, model = int(time.time()), self.config.served_model_name

        def usage(u: Update) -> dict[str, Any]:
            n_in, n_out = len(sub.input_ids), len(u.output_ids)
            return {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out,
                    "prompt_tokens_details": {"cached_tokens": u.cached_tokens}}

        def chunk(text: str, reason: str | None, u: Update | None, *, whole: bool = False) -> dict[str, Any]:
            choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": reason}
            if not chat:
                choice["text"] = text
            elif whole:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["delta"] = {"role": "assistant", "content": text}
            kind = ("chat.completion" if whole else "chat.completion.chunk") if chat else "text_completion"
            body: dict[str, Any] = {"id": cid, "object": kind, "created": created, "model": model,
                                    "choices": [choice]}
            if u is not None:
                body["usage"] = usage(u)
                if params.return_cached_tokens_details:  # SGLang's extension, read by bench_serving's cache report
                    body["sglext"] = {"cached_tokens_details": {"device": u.cached_tokens, "host": 0}}
            return body

        def reason_of(u: Update) -> str:
            return str((u.finish_reason or {}).get("type", "length"))

        if not params.stream:
            last: Update | None = None
            async for u in self._updates(sub, queue):
                last = u
            assert last is not None
            if last.error is not None:
                return _error(last.error)
            return web.json_response(chunk(decode(last.output_ids), reason_of(last), last, whole=True))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        sent = ""
        try:
            async for u in self._updates(sub, queue):
                if u.error is not None:
                    await write_or_drop(resp, f"data: {json.dumps({'error': {'message': u.error}})}\n\n".encode(),
                                        self.config.stream_stall_s)
                    break
                text = decode(u.output_ids)
                delta, sent = text[len(sent) :], text
                body = chunk(delta, reason_of(u) if u.finished else None, u if u.finished else None)
                await write_or_drop(resp, f"data: {json.dumps(body)}\n\n".encode(), self.config.stream_stall_s)
            await write_or_drop(resp, b"data: [DONE]\n\n", self.config.stream_stall_s)
        except StreamStalled:
            return self._drop(request, resp, sub)
        return resp

    def _drop(self, request: web.Request, resp: web.StreamResponse, sub: Submission) -> web.StreamResponse:
        """A client that stopped reading: abort its request (freeing its slots) and close its connection."""
        self.engine.abort(sub.rid)
        with self.engine.metrics.lock:
            self.engine.metrics.dropped_streams += 1
        if request.transport is not None:
            request.transport.abort()  # drops what the kernel and aiohttp still buffer for it
        return resp

    # ------------------------------------------------------------------ the rest
    async def health(self, request: web.Request) -> web.Response:
        if not self.engine.thread.is_alive():
            return web.Response(status=503, text="model loop is not running")
        return web.Response(text="")

    async def health_generate(self, request: web.Request) -> web.Response:
        """SGLang's rule: healthy once the scheduler produces any output after the probe was sent (its
        ``last_receive_tstamp``), not only once the probe itself finished. Under an all-at-once load the probe
        waits in the queue behind every request; waiting for it alone called a busy server hung."""
        forwards = self.engine.forwards
        params = GenerateParams(input_ids=[0], max_new_tokens=1, temperature=0.0, ignore_eos=True, stream=False)
        sub, queue = self._start(params)

        async def run() -> str | None:
            async for u in self._updates(sub, queue):
                if u.error is not None:
                    return u.error
            return None

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

    async def flush_cache(self, request: web.Request) -> web.Response:
        try:
            timeout = float(request.query.get("timeout", "0"))
        except ValueError:
            timeout = math.nan
        if not math.isfinite(timeout):  # an infinite wait would hold the client forever
            return _error("timeout must be a finite number of seconds")
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
        return _error(f"request body too large: {exc.text}", 413)
    except web.HTTPException as exc:
        if exc.status >= 400:
            return _error(exc.reason, exc.status)
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
    return app
