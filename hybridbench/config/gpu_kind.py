"""``engine.gpu``, read once: lowercased and stripped where the config is composed (``prepare.typed_config``), and
refused there unless it names a kind the harness knows. Every rule after that compares the one spelling
(``engine.gpu=CPU`` once slipped past every ``!= "cpu"`` rule, and ``H100`` planned another fingerprint than
``h100``). Saved runs keep whatever spelling they were recorded with: their readers compare through
:func:`gpu_kind` too.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hybridbench.config.schema import RunCfg
from hybridbench.errors import ConfigError
from reference_impl.engine.hardware import GPU_KINDS

__all__ = ["KNOWN_GPU_KINDS", "NO_GPU", "gpu_kind", "normalise_gpu"]

# engine.gpu values that name no GPU: the reference server's and the CPU builds' "cpu", the replayer's "none"
NO_GPU = ("cpu", "none")
KNOWN_GPU_KINDS = (*sorted(GPU_KINDS), *NO_GPU)


def gpu_kind(value: object) -> str:
    """The one spelling of a GPU kind (a saved run's included): ``" H100 "`` -> ``"h100"``."""
    return str(value).strip().lower()


def normalise_gpu(cfg: RunCfg, resolved: dict[str, Any]) -> tuple[RunCfg, dict[str, Any]]:
    """The typed config and the resolved dict (what plan.json records and the fingerprint hashes) with engine.gpu
    in its one spelling; ConfigError (one line) for a kind no rule knows, which every GPU rule would read as "not
    cpu" and no forecast or doctor check could place."""
    gpu = gpu_kind(cfg.engine.gpu)
    if gpu not in KNOWN_GPU_KINDS:
        raise ConfigError(f"engine.gpu must be a GPU kind ({', '.join(sorted(GPU_KINDS))}) or {' / '.join(NO_GPU)} "
                          f"(no GPU), got {cfg.engine.gpu!r}")
    engine = resolved.get("engine")
    if isinstance(engine, dict):
        resolved = {**resolved, "engine": {**engine, "gpu": gpu}}
    return dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, gpu=gpu)), resolved
