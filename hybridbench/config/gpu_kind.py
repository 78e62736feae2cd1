"""``engine.gpu``, read once: lowercased and stripped where the config is composed (``prepare.typed_config``), and
refused there unless it is one word. Every rule after that compares the one spelling (``engine.gpu=CPU`` once
slipped past every ``!= "cpu"`` rule, and ``H100`` planned another fingerprint than ``h100``). A kind the harness
does not list (an L40S, an H20, an MI300X) still plans, with a warning (:func:`unknown_gpu_warning`): refusing it
would lock out GPUs SGLang and vLLM serve on. Saved runs keep whatever spelling they were recorded with: their
readers compare through :func:`gpu_kind` too.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from hybridbench.config.schema import RunCfg
from hybridbench.errors import ConfigError
from reference_impl.engine.hardware import GPU_KINDS

__all__ = ["KNOWN_GPU_KINDS", "NO_GPU", "gpu_kind", "normalise_gpu", "unknown_gpu_warning"]

# engine.gpu values that name no GPU: the reference server's and the CPU builds' "cpu", the replayer's "none"
NO_GPU = ("cpu", "none")
KNOWN_GPU_KINDS = (*sorted(GPU_KINDS), *NO_GPU)
_KIND = re.compile(r"[a-z0-9][a-z0-9._-]*")  # one word: "h100", "l40s", "mi300x", "rtx-6000"


def gpu_kind(value: object) -> str:
    """The one spelling of a GPU kind (a saved run's included): ``" H100 "`` -> ``"h100"``."""
    return str(value).strip().lower()


def normalise_gpu(cfg: RunCfg, resolved: dict[str, Any]) -> tuple[RunCfg, dict[str, Any]]:
    """The typed config and the resolved dict (what plan.json records and the fingerprint hashes) with engine.gpu
    in its one spelling; ConfigError (one line) for a value that is no one-word kind (empty, spaces, a list)."""
    gpu = gpu_kind(cfg.engine.gpu)
    if not _KIND.fullmatch(gpu):
        raise ConfigError(f"engine.gpu must be one word naming a GPU kind ({', '.join(sorted(GPU_KINDS))}, or another "
                          f"the server runs on) or {' / '.join(NO_GPU)} (no GPU), got {cfg.engine.gpu!r}")
    engine = resolved.get("engine")
    if isinstance(engine, dict):
        resolved = {**resolved, "engine": {**engine, "gpu": gpu}}
    return dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, gpu=gpu)), resolved


def unknown_gpu_warning(gpu: str) -> str:
    """The plan's warning for a GPU kind the harness does not list ("" for a listed one): it runs, unforecast and
    with only the start-up rules that hold on any GPU."""
    if gpu in KNOWN_GPU_KINDS:
        return ""
    return (f"engine.gpu={gpu} is a GPU kind the harness does not list ({', '.join(sorted(GPU_KINDS))}): no "
            "forecast, no start-up rules tied to a GPU kind, and the doctor cannot confirm it from nvidia-smi (check "
            "the spelling if you meant one of those)")
