"""Which native build vLLM's CPU platform loads, reported; and its AVX2-only path forced on request. At launch,
never written into the env.

A directory on PYTHONPATH whose ``sitecustomize`` every Python process of the server imports at start-up (the API
server, the engine core and the worker inherit the environment). vLLM 0.32.0 picks its CPU path from torch's
hardware queries alone: ``CpuPlatform.import_kernels`` (vllm/platforms/cpu.py:631-666) loads ``_C`` when
``torch.cpu._is_avx512_supported()`` and ``_is_avx512_bf16_supported()``, ``_C_AVX512`` on AVX-512 without BF16
and ``_C_AVX2`` otherwise; the BF16 query also decides the GDN SSM-state dtype (cpu.py:301-320), the conv-state
layout (cpu.py:439) and the GDN conv kernel (ops/cpu/gdn_attention.py:213), and AMX queries pick the attention,
MoE and GDN kernels.

* Always: the first import of a ``vllm._C*`` native module prints ``hybridbench cpu_isa: vLLM loads vllm._C...``
  on stderr (the server log), so a test sees the build the server really loaded. Nothing else changes.
* With ``HYBRIDBENCH_FORCE_ISA=avx2``: every torch.cpu AVX-512/AMX query answers "no", as on an AVX2-only CPU
  (AMD Zen 3), and torch's own ATen kernels are pinned to AVX2. AVX2 is a subset of AVX-512, so ``_C_AVX2``
  runs on an AVX-512 machine. If torch no longer has one of the queries, the import fails loudly: the
  override would be silently partial.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any

NATIVE = ("vllm._C", "vllm._C_AVX512", "vllm._C_AVX2")
# Every torch.cpu ISA query above AVX2 (vLLM 0.32.0 calls all but _is_vnni_supported: grep "torch.cpu._is_").
QUERIES = ("_is_avx512_supported", "_is_avx512_bf16_supported", "_is_vnni_supported", "_is_amx_tile_supported",
           "_is_amx_fp16_supported")
FORCE = os.environ.get("HYBRIDBENCH_FORCE_ISA", "")
if FORCE not in ("", "avx2"):
    raise RuntimeError(f"hybridbench cpu_isa: HYBRIDBENCH_FORCE_ISA={FORCE!r}: only 'avx2' can be forced")
if FORCE:
    os.environ["ATEN_CPU_CAPABILITY"] = "avx2"  # before torch loads: ATen reads it at its first dispatch


def _no(*_args: Any) -> bool:
    return False


def _force_avx2(module: ModuleType) -> None:
    missing = [q for q in QUERIES if not callable(getattr(module, q, None))]
    if missing:
        raise RuntimeError(f"hybridbench cpu_isa: torch.cpu has no {', '.join(missing)}; the AVX2 override is "
                           "stale (update tests/vllm_cpu/cpu_isa)")
    for query in QUERIES:
        setattr(module, query, _no)


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _force_avx2(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name in NATIVE:
            print(f"hybridbench cpu_isa: vLLM loads {name} (pid {os.getpid()})", file=sys.stderr, flush=True)
            return None  # the normal finders load it
        if name != "torch.cpu" or not FORCE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


sys.meta_path.insert(0, _Finder())
