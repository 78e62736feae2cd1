"""Every test session reads traces through a trace cache of its own, never the user's ``~/.cache`` one."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _own_trace_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # os.environ, not monkeypatch: the commands tests start (replay, simulate, the harness) inherit it
    before = os.environ.get("HYBRIDBENCH_TRACE_CACHE")
    if before is None:
        os.environ["HYBRIDBENCH_TRACE_CACHE"] = str(tmp_path_factory.mktemp("trace-cache"))
    yield
    if before is None:
        os.environ.pop("HYBRIDBENCH_TRACE_CACHE", None)
