"""Stand-ins for TokenSpeed's GPU kernel packages, so its pure-Python argument parsers import on a CPU machine.

``tokenspeed.runtime.utils.server_args`` (the engine's parser, which ``ts serve`` also consults to route each
flag) imports ``tokenspeed_kernel`` (CUDA .so; its platform module refuses to import without a GPU),
``tokenspeed_triton`` and ``triton`` for a few constants. Any module under those names becomes an empty mock;
only the parsers run here, never a kernel. On PYTHONPATH only for tests/tokenspeed's parser probe.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any
from unittest import mock

STUBBED = ("tokenspeed_kernel", "tokenspeed_triton", "triton")


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module: Any = mock.MagicMock(name=spec.name)
        module.__path__ = []
        module.__spec__ = spec
        return module  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        pass


class _StubFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name.split(".", maxsplit=1)[0] in STUBBED:
            return importlib.machinery.ModuleSpec(name, _StubLoader(), is_package=True)
        return None


sys.meta_path.insert(0, _StubFinder())
