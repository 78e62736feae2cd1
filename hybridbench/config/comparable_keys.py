"""Which resolved-config keys two runs must share to be compared: the load and how the server is sized.

``python -m hybridbench.compare`` refuses two runs that differ in one (exit 2); ``compare latest:ROOT`` picks a
baseline only among the runs that share them all, so a newer main run at another sizing is passed over, not picked
and then refused. The interpreter, extra_args, timeouts, arm knobs and check thresholds may differ: that is what a
comparison is about.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from functools import cache
from typing import Any

from hybridbench.config.gpu_kind import gpu_kind
from hybridbench.config.schema import EngineCfg, ModelCfg

__all__ = ["fixed_settings", "flatten", "must_match", "sizing", "with_defaults"]

_SAME_LOAD = ("load.", "seed")
_SAME_ENGINE = frozenset([*(f"engine.{k}" for k in ("gpu", "tp", "page_size", "chunked_prefill_size",
                                                    "mem_fraction_static", "max_mamba_cache_size", "kv_tokens",
                                                    "track_interval", "workload_scale", "max_vocab",
                                                    "capacity_bytes")),
                          # the state and weight bytes the pools are sized from (and SGLang's flags for them)
                          "model.mamba_ssm_dtype", "model.quantization",
                          "model.hf_id"])  # the checkpoint served: one model name may name another checkpoint


@cache
def _defaults() -> dict[str, Any]:
    """The sizing keys' schema defaults (model.hf_id's depends on the model: never filled in)."""
    flat = {**flatten(asdict(EngineCfg()), "engine"), **flatten(asdict(ModelCfg()), "model")}
    return {k: v for k, v in flat.items() if k in _SAME_ENGINE and k != "model.hf_id"}


def with_defaults(flat: Mapping[str, Any]) -> dict[str, Any]:
    """A flattened config with each sizing key it lacks at its schema default: a run saved before a key existed
    ran with what it now defaults to (such a run read as resized against every later night, and history then
    judged the later nights only among themselves, a regression included). engine.gpu is read in its one spelling:
    a run saved before it was normalised may hold "H100", the same GPU as a later run's "h100"."""
    out = {**_defaults(), **flat}
    if isinstance(out.get("engine.gpu"), str):
        out["engine.gpu"] = gpu_kind(out["engine.gpu"])
    return out


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys (``engine.tp``); lists stay values."""
    out: dict[str, Any] = {}
    if isinstance(value, Mapping):
        for key, sub in value.items():
            out.update(flatten(sub, f"{prefix}.{key}" if prefix else str(key)))
    else:
        out[prefix] = value
    return out


def must_match(key: str) -> bool:
    """A dotted key two compared runs must share (a workload's own Poisson rate is part of its load)."""
    own_rate = key.startswith("workloads.") and key.endswith(".request_rate")
    return key.startswith(_SAME_LOAD) or key in _SAME_ENGINE or own_rate


def fixed_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The values of a resolved config's keys that must match, with its engine kind and model name."""
    flat = with_defaults(flatten(config))
    return {k: v for k, v in flat.items() if must_match(k) or k in ("engine.name", "model.name")}


def sizing(config: Mapping[str, Any]) -> dict[str, Any]:
    """How the server was sized and what it served (the engine and model keys above), without the load: what a
    history series' points must share beyond its own key (results/history.py)."""
    return {k: v for k, v in fixed_settings(config).items() if k in _SAME_ENGINE}
