"""Every test session reads traces through a trace cache of its own, never the user's ``~/.cache`` one, and
starts its commands from compiled sources."""

from __future__ import annotations

import compileall
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hybridbench", "reference_impl", "workloads")


def pytest_sessionstart(session: pytest.Session) -> None:
    # With PYTHONDONTWRITEBYTECODE set (as on the machines CI runs on) no import writes a .pyc, so every server and
    # CLI process the tests start compiled the project's modules again (test_cli.py: 86.9 -> 76.2 CPU s with this).
    # compileall writes them whatever that variable says. Once, in the process that starts the xdist workers (its
    # sessionstart runs before theirs start); the workers would only find it done.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for package in PACKAGES:
        compileall.compile_dir(ROOT / package, quiet=2, workers=1)


@pytest.fixture(autouse=True, scope="session")
def _own_trace_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # os.environ, not monkeypatch: the commands tests start (replay, simulate, the harness) inherit it
    before = os.environ.get("HYBRIDBENCH_TRACE_CACHE")
    if before is None:
        os.environ["HYBRIDBENCH_TRACE_CACHE"] = str(tmp_path_factory.mktemp("trace-cache"))
    yield
    if before is None:
        os.environ.pop("HYBRIDBENCH_TRACE_CACHE", None)
