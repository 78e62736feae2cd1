"""The trace reader's compiled scans (``workloads/_trace_scan.c``), where the install built them.

``pip install`` compiles them when a C compiler is there and goes on without them when not (``setup.py``: optional).
Without them numpy does the same work, slower, and every read gives the same rows. ``scan`` is looked up at each
call, so a test can run the reader both ways (tests/workloads/conftest.py)."""

from __future__ import annotations

from typing import Any

__all__ = ["scan"]

scan: Any  # the module, or None
try:
    from workloads import _trace_scan as _built
except ImportError:
    scan = None
else:
    scan = _built
