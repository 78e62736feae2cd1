"""The load client's own overhead: TTFT against a server that answers instantly, and peak request rate.

A minimal SGLang-protocol streaming server (one SSE chunk per token, no model, no sleeping) runs in a
separate process on 127.0.0.1; hybridbench's driver sends N requests at 1, 64 and 512 concurrent
streams. Whatever TTFT it measures is client + loopback + server-framework overhead, an upper bound
on what the client adds to every real measurement. A benchmark, not a test.

    python benchmarks/client_overhead.py [--requests 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import socket
import sys
import time

import aiohttp
from aiohttp import web

from hybridbench.config.schema import LoadCfg
from hybridbench.load.client import ClientResult, generate_sglang
from hybridbench.load.driver import Completed, drive
from hybridbench.metrics.stats import percentile
from workloads.trace import TraceRow


def _serve(port: int, tokens: int) -> None:
    async def generate(request: web.Request) -> web.StreamResponse:
        await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for k in range(tokens):
            chunk = {"text": "x" * (k + 1), "meta_info": {"completion_tokens": k + 1, "cached_tokens": 0}}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/generate", generate)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _run(port: int, n: int, concurrency: int) -> tuple[list[float], float]:
    rows = [TraceRow(i, 0, 0.0, tuple(range(100)), (0,) * 4) for i in range(n)]
    done: list[Completed] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def send(prompt: list[int], k: int) -> ClientResult:
            return await generate_sglang(session, f"http://127.0.0.1:{port}", prompt, k, 30.0)

        start = time.perf_counter()
        await drive(rows, LoadCfg(kind="closed", max_concurrency=concurrency), 0, send, done.append)
        wall = time.perf_counter() - start
    ttft = [(c.result.first_token - c.result.sent) * 1e3 for c in done if c.result.first_token is not None]
    return ttft, n / wall


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args()
    port = _free_port()
    server = mp.Process(target=_serve, args=(port, 4), daemon=True)
    server.start()
    time.sleep(1.0)
    try:
        cpu = platform.processor() or platform.machine()
        print(f"machine: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}; server in its own process")
        print("| concurrent streams | requests | TTFT p50 ms | TTFT p99 ms | requests/s |")
        print("|---|---|---|---|---|")
        for c in (1, 64, 512):
            ttft, rate = asyncio.run(_run(port, args.requests, c))
            print(f"| {c} | {args.requests} | {percentile(ttft, 50):.2f} | {percentile(ttft, 99):.2f} | {rate:,.0f} |",
                  flush=True)
    finally:
        server.terminate()
        server.join(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
