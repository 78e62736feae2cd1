"""The hybrid models SGLang serves that hybridbench plans for, with their real config.json (tests/vllm_cpu/
real_configs.py, loaded by path: that folder is another tier's), for the oracles that build a release's own view of
them (context length, TP splits)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SERVED = ("qwen3-next-80b-a3b", "qwen3.5-9b", "qwen3.5-122b-a10b", "nemotron-h-8b")


def real_configs() -> dict[str, dict[str, Any]]:
    spec = importlib.util.spec_from_file_location("real_configs", ROOT / "tests" / "vllm_cpu" / "real_configs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name: module.REAL_CONFIGS[name] for name in SERVED}
