"""Every ``python -m hybridbench`` a user types starts a process; torch's import alone costs about 3 CPU
seconds and 200 MB. Only the reference server (its own process) and the probes that run a model need it: a
plan, a simulator run, a GPU engine's run, results and the dashboard never do. A module that pulls it back in
at import time fails here, naming the chain that brought it."""

from __future__ import annotations

import subprocess
import sys

import pytest

ENTRY_POINTS = ["hybridbench.app", "hybridbench.cli", "hybridbench.preview.__main__", "hybridbench.doctor",
                "hybridbench.results.cli", "hybridbench.compare.__main__", "hybridbench.rescore.__main__",
                "hybridbench.dashboard.__main__"]
PROBE = ("import importlib, sys\n"
         "importlib.import_module(sys.argv[1])\n"
         "print(' '.join(m for m in ('torch', 'transformers', 'vllm', 'sglang') if m in sys.modules))\n")


def heavy_imports(module: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, module], capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_the_harness_starts_without_torch(module: str) -> None:
    assert heavy_imports(module) == [], f"{module} imports torch at start-up (python -X importtime shows the chain)"


def test_the_probe_sees_torch_when_it_is_imported() -> None:
    assert heavy_imports("reference_impl.model.model") == ["torch"]
