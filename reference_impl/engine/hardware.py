"""GPU specs for the cost model: the one place GPU names are defined.

Peak numbers are the vendors' datasheet figures (dense bf16 tensor-core FLOP/s without sparsity,
HBM bandwidth, host link). The cost model never uses them raw: named efficiency factors scale them
(``reference_impl.engine.cost_model``), and those factors are what calibration fits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["GPUS", "GPU_KINDS", "NVIDIA_SMI_MODELS", "GPUSpec", "get_gpu", "gpu_key"]


@dataclass(frozen=True, slots=True)
class GPUSpec:
    name: str
    bf16_flops: float  # dense peak, FLOP/s
    hbm_bytes_per_s: float
    host_bytes_per_s: float  # host <-> device link, one direction
    hbm_bytes: int
    fp8_flops: float = 0.0  # dense fp8 tensor-core peak, FLOP/s; 0: no fp8 tensor cores (w8a8 fp8 refused)


GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        # NVIDIA H100 SXM5 80GB: 989.4 TFLOP/s bf16 dense, 3.35 TB/s HBM3, PCIe Gen5 x16 (64 GB/s).
        # fp8: 1978.9 TFLOP/s dense.
        GPUSpec("h100", 989.4e12, 3.35e12, 64e9, 80 * 2**30, fp8_flops=1978.9e12),
        # NVIDIA H200 SXM 141GB: same compute as H100, 4.8 TB/s HBM3e.
        GPUSpec("h200", 989.4e12, 4.8e12, 64e9, 141 * 2**30, fp8_flops=1978.9e12),
        # NVIDIA A100 SXM4 80GB: 312 TFLOP/s bf16 dense, 2.039 TB/s HBM2e, PCIe Gen4 x16 (32 GB/s).
        GPUSpec("a100", 312e12, 2.039e12, 32e9, 80 * 2**30),
    )
}


# The model word of nvidia-smi's product name -> the GPU key (``engine.gpu``) of that GPU: the harness checks the
# GPUs a server would get against engine.gpu by it. Form factors share a key ("NVIDIA H100 80GB HBM3", "NVIDIA H100
# PCIe", "NVIDIA H100 NVL"; "NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe"): how much memory a GPU has is read from
# nvidia-smi, not from GPUS. b200 has no GPUSpec (the simulator cannot forecast it), but a B200 run is a b200 run.
NVIDIA_SMI_MODELS: dict[str, str] = {"H100": "h100", "H200": "h200", "A100": "a100", "B200": "b200"}

# Every GPU key engine.gpu may name (lowercase): the simulator's, nvidia-smi's, and the Blackwell parts the SGLang
# start-up rules know by name (hybridbench.engines.sglang_refusal; docs/engines/sglang.md names gb200), which the
# doctor cannot confirm from nvidia-smi.
GPU_KINDS: frozenset[str] = frozenset({*GPUS, *NVIDIA_SMI_MODELS.values(), "gb200", "b300"})


def gpu_key(smi_name: str) -> str | None:
    """The GPU key of an nvidia-smi product name, or None for a GPU NVIDIA_SMI_MODELS does not name (an H20 is not
    an H200: whole words of the name are matched, split at spaces and hyphens)."""
    return next((NVIDIA_SMI_MODELS[w] for w in re.split(r"[\s-]+", smi_name.upper()) if w in NVIDIA_SMI_MODELS),
                None)


def get_gpu(name: str) -> GPUSpec:
    try:
        return GPUS[name]
    except KeyError:
        raise KeyError(f"unknown GPU {name!r}; valid names: {', '.join(sorted(GPUS))}") from None
