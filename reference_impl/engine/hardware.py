"""GPU specs for the cost model: the one place GPU names are defined.

Peak numbers are the vendors' datasheet figures (dense bf16 tensor-core FLOP/s without sparsity,
HBM bandwidth, host link). The cost model never uses them raw: named efficiency factors scale them
(``reference_impl.engine.cost_model``), and those factors are what calibration fits.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GPUS", "GPUSpec", "get_gpu"]


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


def get_gpu(name: str) -> GPUSpec:
    try:
        return GPUS[name]
    except KeyError:
        raise KeyError(f"unknown GPU {name!r}; valid names: {', '.join(sorted(GPUS))}") from None
