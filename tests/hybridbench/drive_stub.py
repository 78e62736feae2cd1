"""Drive a trace through the real load driver and client against an in-test aiohttp server's ``/generate``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from hybridbench.config.schema import LoadCfg
from hybridbench.load.client import generate_sglang
from hybridbench.load.driver import Completed, drive
from hybridbench.load.http import StreamPool
from hybridbench.plan.load import plan_load
from workloads.arrival import arrival_schedule
from workloads.trace import TraceRow


async def serve_and_drive(rows: list[TraceRow], load: LoadCfg, server: Any,
                          after: Callable[[Completed], None] = lambda _c: None,
                          vacate: Callable[[], Any] | None = None, *, timeout_s: float = 10.0) -> list[Completed]:
    """``server.generate``: the aiohttp handler SGLang's ``/generate`` is played by."""
    app = web.Application()
    app.router.add_post("/generate", server.generate)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    done: list[Completed] = []
    try:
        async with StreamPool(f"http://127.0.0.1:{port}") as pool:
            async def send(prompt: list[int], n: int, answer_needed: bool):  # type: ignore[no-untyped-def]
                return await generate_sglang(pool, prompt, n, timeout_s)

            def on_done(c: Completed) -> None:
                done.append(c)
                after(c)

            await drive(rows, arrival_schedule(rows, plan_load(load), 0), send, on_done, vacate)
    finally:
        await runner.cleanup()
    return done
