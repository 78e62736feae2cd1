"""vLLM 0.32.0's CPU Mamba2 prefix-checkpoint workaround, applied at launch (never written into the env).

A directory on PYTHONPATH whose ``sitecustomize`` every Python process of the server imports at start-up: the
API server, the engine core and the worker (they inherit the environment). Only the hit-accounting tests put
it there; the survival test runs vLLM as published and must see it die.

The upstream bug (docs/engines/vllm.md): in align mode ``MambaMixer2.get_kv_cache_spec`` asks for a
mid-prefill checkpoint (``num_prefill_checkpoint_blocks=1``) that the CPU SSD scan never returns, and the first
prompt longer than a block kills the engine (IndexError in ``conv_ssm_forward``). On CPU the workaround returns
the plain Mamba spec, so the scheduler splits the prefill at the block boundary instead. If the method no
longer asks for the checkpoint, the import fails loudly: the workaround is then stale, not silently inert.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import inspect
import sys
from types import ModuleType
from typing import Any

TARGET = "vllm.model_executor.layers.mamba.mamba_mixer2"


def _patch(module: ModuleType) -> None:
    cls: Any = module.MambaMixer2
    if "num_prefill_checkpoint_blocks=1" not in inspect.getsource(cls.get_kv_cache_spec):
        raise RuntimeError("hybridbench cpu_mamba_patch: MambaMixer2.get_kv_cache_spec no longer asks for a "
                           "prefill checkpoint; the workaround is stale (update tests/vllm_cpu)")
    original = cls.get_kv_cache_spec
    platform = module.current_platform

    def get_kv_cache_spec(self: Any, vllm_config: Any) -> Any:
        if platform.is_cpu():  # the CPU scan has no intermediate states: keep the parent's plain spec
            return super(cls, self).get_kv_cache_spec(vllm_config)
        return original(self, vllm_config)

    cls.get_kv_cache_spec = get_kv_cache_spec


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


sys.meta_path.insert(0, _Finder())
