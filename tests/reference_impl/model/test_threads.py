"""The tiny model runs torch on one thread (its ops are too small to split; idle workers spin) unless the caller
set OMP_NUM_THREADS."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = ("import torch; torch.set_num_threads(2); "
         "from reference_impl.model.config import ModelConfig; from reference_impl.model.model import HybridModel; "
         "HybridModel(ModelConfig()); print(torch.get_num_threads())")


@pytest.mark.parametrize(("omp", "threads"), [(None, 1), ("2", 2)])
def test_a_model_takes_one_thread_unless_the_caller_chose(omp: str | None, threads: int) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if omp is not None:
        env["OMP_NUM_THREADS"] = omp
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[-1] == str(threads)
