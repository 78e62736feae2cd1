"""What the trace reader's tests spy on: the byte strings one of its parsing functions was given."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest


@pytest.fixture
def calls_to(monkeypatch: pytest.MonkeyPatch) -> Callable[[ModuleType, str], list[bytes]]:
    """``calls_to(module, name)``: from now on, every ``seg`` ``module.name(seg, limit)`` is called with, in order."""

    def install(module: ModuleType, name: str) -> list[bytes]:
        seen: list[bytes] = []
        real = getattr(module, name)

        def spy(seg: bytes, limit: int) -> Any:
            seen.append(seg)
            return real(seg, limit)

        monkeypatch.setattr(module, name, spy)
        return seen

    return install


@pytest.fixture(params=["compiled", "numpy"])
def scan_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test that asks runs twice: through the compiled scans (workloads/_trace_scan.c) and through the numpy path
    an install without a C compiler reads with. The compiled run skips where the install built none
    (tests/workloads/test_trace_scan.py fails then if a compiler was there)."""
    import workloads.compiled_scans

    if request.param == "numpy":
        monkeypatch.setattr(workloads.compiled_scans, "scan", None)
    elif workloads.compiled_scans.scan is None:
        pytest.skip("the compiled scans were not built")
    return str(request.param)
