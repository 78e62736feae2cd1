"""The event loop the load client runs on: uvloop's when it is installed (the ``fast`` extra), else asyncio's.

uvloop's loop and socket transports are C (libuv): against ``benchmarks/client_overhead.py``'s instant
server they cut the client's CPU per request by about a sixth at 512 streams, CPU that on a shared
machine would otherwise be taken from the server under test. Both loops run the same code; the
benchmark's ``--event-loop`` compares them.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

__all__ = ["EVENT_LOOPS", "EventLoop", "default", "run"]

EventLoop = Literal["asyncio", "uvloop"]
EVENT_LOOPS: tuple[EventLoop, ...] = ("asyncio", "uvloop")
T = TypeVar("T")


def default() -> EventLoop:
    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


def run(main: Coroutine[Any, Any, T], loop: EventLoop | None = None) -> T:
    """``asyncio.run(main)`` on ``loop`` (default: uvloop when installed)."""
    if (loop or default()) == "uvloop":
        import uvloop  # noqa: PLC0415  (optional: imported only when chosen)

        return uvloop.run(main)
    return asyncio.run(main)
