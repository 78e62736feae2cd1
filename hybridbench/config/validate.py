"""Plan-time ranges for every number in the run config, so no value a user can type ends in an internal error
or a gate that silently stops gating (``checks.bootstrap_samples=0`` or ``checks.ttft_regression=nan`` once
turned a +19% TTFT regression into a pass).

One rule per key, in one table. Arm knobs (``arm.*``) and load settings (``load.*``) get their ranges where
arms and loads are parsed (plan/); here they, like every other number, only may not be NaN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from hybridbench.config.quantization import check_quantization
from hybridbench.config.schema import MODELLED_ENGINES, MODELLED_TIMING_ENGINES, SERVING_ENGINES, TIMINGS, RunCfg
from hybridbench.errors import ConfigError
from reference_impl.models import STATE_DTYPES

__all__ = ["INT64_MAX", "INT64_MIN", "MAX_TRIALS", "RULES", "Range", "check_unread_keys", "validate_config"]

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1  # the reference server's --random-seed (torch.manual_seed)
# A run plans every trial up front and keeps one record per request; this bounds what a typo can ask for
# (repeats=100000000 once grew the process to gigabytes with no output).
MAX_TRIALS = 10_000
CACHE_SEMANTICS = ("sglang", "tokenspeed")  # engine.cache_semantics: the reference server's --cache-semantics


@dataclass(frozen=True, slots=True)
class Range:
    """A closed or half-open interval of finite numbers (``hi=math.inf`` leaves it unbounded above)."""

    lo: float
    hi: float = math.inf
    lo_open: bool = False
    hi_open: bool = False

    def holds(self, v: float) -> bool:
        if not math.isfinite(v):
            return False
        above = v > self.lo if self.lo_open else v >= self.lo
        below = v < self.hi if self.hi_open else v <= self.hi
        return above and below

    def text(self) -> str:
        if self.hi == math.inf:
            return f"{'>' if self.lo_open else '>='} {_num(self.lo)}"
        return f"in {'(' if self.lo_open else '['}{_num(self.lo)}, {_num(self.hi)}{')' if self.hi_open else ']'}"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e18 else repr(v)


_POSITIVE = Range(0, lo_open=True)
_NON_NEGATIVE = Range(0)
_ONE_UP = Range(1)
_FRACTION = Range(0, 1)

RULES: dict[str, Range] = {
    "repeats": _ONE_UP,
    "repeats_max": _NON_NEGATIVE,  # 0 = repeats; otherwise >= repeats (checked below)
    "budget_minutes": _POSITIVE,
    "seed": Range(INT64_MIN, INT64_MAX),
    "engine.tp": _ONE_UP,
    "engine.port": Range(0, 65535),  # 0 = pick a free one
    "engine.startup_timeout_s": _POSITIVE,
    "engine.request_timeout_s": _POSITIVE,
    "engine.health_timeout_s": _POSITIVE,
    "engine.chunked_prefill_size": _ONE_UP,
    "engine.mem_fraction_static": Range(0, 1, lo_open=True),
    "engine.max_mamba_cache_size": _NON_NEGATIVE,  # 0 = sized from memory
    "engine.kv_tokens": _NON_NEGATIVE,  # 0 = sized from memory
    "engine.capacity_bytes": _NON_NEGATIVE,  # the replay engine requires > 0 (checked by the engine)
    "engine.page_size": _ONE_UP,
    "engine.track_interval": _ONE_UP,
    "engine.workload_scale": _ONE_UP,
    "engine.max_vocab": _NON_NEGATIVE,  # 0 = the model's vocabulary
    "engine.kl_threshold": _NON_NEGATIVE,
    "model.vocab_size": Range(2, INT64_MAX),
    # config.json's head counts (0 = no such layer / unknown): engine.tp is checked against them
    **dict.fromkeys(("model.attention_heads", "model.kv_heads", "model.linear_key_heads", "model.linear_value_heads",
                     "model.mamba_heads", "model.mamba_groups"), _NON_NEGATIVE),
    "checks.ttft_regression": _NON_NEGATIVE,
    # A drop of 100% or more cannot happen (throughput is >= 0): at 1 or above the check could never fail, and
    # checks.throughput_regression=10 is 10%'s typo, a gate switched off (compare's flag takes [0, 1) too).
    "checks.throughput_regression": Range(0, 1, hi_open=True),
    "checks.min_token_hit_rate": _FRACTION,
    # Fewer resamples make the interval's ends the extremes of a handful of draws: a gate in name only.
    "checks.bootstrap_samples": Range(100, 1_000_000),
    # Near 1 the t-interval over a few repeats grows so wide that no regression can fail it (0.999999 over three
    # repeats: a half-width of ~1000 standard errors), a pass nothing could refute; below 0.5 it hardly gates noise.
    "checks.confidence": Range(0.5, 0.99),
    "checks.kl_samples": Range(1, 10_000),
    "checks.kl_max_new_tokens": Range(1, 100_000),
    "checks.kl_temperature": _NON_NEGATIVE,
    "checks.kl_min_hit_fraction": _FRACTION,
    "checks.min_prefill_throughput_ratio": _NON_NEGATIVE,
    "checks.accuracy_limit": Range(0, 1_000_000),
    "checks.accuracy_max_tokens": Range(1, 100_000),
    "checks.accuracy_batch_size": Range(1, 1024),
    "checks.accuracy_timeout_s": _POSITIVE,
    "checks.accuracy_alpha": Range(0, 1, lo_open=True, hi_open=True),
    # At 1 no accuracy drop exceeds it (the check could never fail): accuracy_tolerance=1 is 1%'s typo.
    "checks.accuracy_tolerance": Range(0, 1, hi_open=True),
}


def _get(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _nans(value: Any, path: str) -> list[str]:
    """Dotted paths of every NaN anywhere in the config, workload parameters and lists included."""
    if isinstance(value, float):
        return [path] if math.isnan(value) else []
    if is_dataclass(value) and not isinstance(value, type):
        return [p for f in fields(value) for p in _nans(getattr(value, f.name), f"{path}{f.name}.")]
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in _nans(v, f"{path}{k}.")]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in _nans(v, f"{path}{i}.")]
    return []


def validate_config(cfg: RunCfg) -> None:
    """Raise ConfigError naming the first key whose value is out of range, before anything is written."""
    nans = _nans(cfg, "")
    if nans:
        raise ConfigError(f"{nans[0].rstrip('.')}: expected a number, got nan")
    # The run directory is results/runs/<time>-<name>: a '/' in it would put the run outside results/runs/ (where
    # the index, the store and the dashboard look), '../../x' anywhere on disk.
    if not cfg.name.strip() or any(c in cfg.name for c in "/\\\0") or cfg.name in (".", ".."):
        raise ConfigError(f"name must be a plain file name (no '/', not empty), got {cfg.name!r}")
    for key, rule in RULES.items():
        value = _get(cfg, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not rule.holds(value):
            raise ConfigError(f"{key} must be a finite number {rule.text()}, got {value!r}")
    if cfg.model.mamba_ssm_dtype and cfg.model.mamba_ssm_dtype not in STATE_DTYPES:
        raise ConfigError(f"model.mamba_ssm_dtype must be one of {', '.join(STATE_DTYPES)} (SGLang's "
                          f"--mamba-ssm-dtype) or empty for the model's default, got {cfg.model.mamba_ssm_dtype!r}")
    check_quantization(cfg)
    # A chunk shorter than a page never advances a prompt longer than it (SGLang's and the reference scheduler's
    # chunks are whole pages). engine.page_size is the page SGLang, the reference server and the modelled engines run;
    # TokenSpeed's is the page its release serves for the model, checked once the engine knows the release
    # (engines/tokenspeed.py); vLLM 0.32.0 advances a block wider than the chunk in sub-block steps and re-aligns at
    # the next boundary (Scheduler._mamba_block_aligned_split), so no chunk is too short for its block.
    if cfg.engine.name not in ("tokenspeed", "vllm") and cfg.engine.chunked_prefill_size < cfg.engine.page_size:
        raise ConfigError(
            f"engine.chunked_prefill_size {cfg.engine.chunked_prefill_size} is smaller than a page "
            f"({cfg.engine.page_size})"
        )
    if cfg.engine.cache_semantics not in CACHE_SEMANTICS:
        raise ConfigError(f"engine.cache_semantics must be one of {', '.join(CACHE_SEMANTICS)}, "
                          f"got {cfg.engine.cache_semantics!r}")
    if cfg.engine.cache_semantics != "sglang" and cfg.engine.name != "reference":
        raise ConfigError(f"engine.cache_semantics={cfg.engine.cache_semantics}: only engine=reference mirrors "
                          f"another engine's cache (engine.name is {cfg.engine.name!r})")
    _check_timing(cfg)
    _check_in_process(cfg)
    if cfg.sizing.family == "cpu" and cfg.engine.name in SERVING_ENGINES:
        # conf/sizing/*/cpu.yaml fixes pools for two CPU cores (a few thousand KV tokens, tens of states) and
        # shrinks the loads: on a GPU server that is a run nobody asked for, recorded as the experiment.
        raise ConfigError(f"sizing=cpu: the CPU sizing (small pools, shrunk loads) is for engine=reference, or "
                          f"engine=sim to forecast it; engine {cfg.engine.name} takes the GPU sizing (drop sizing=cpu)")
    if cfg.engine.name in SERVING_ENGINES and cfg.engine.gpu != "cpu":
        # The reference engine's own shrink (conf/engine/reference.yaml) and its tiny model's vocabulary: on a GPU
        # server a smaller load than the experiment's, recorded as it. A deliberate one is workloads.<name>.scale.
        for key, value, off in (("engine.workload_scale", cfg.engine.workload_scale, 1),
                                ("engine.max_vocab", cfg.engine.max_vocab, 0)):
            if value != off:
                raise ConfigError(f"{key}: {value} is what a CPU engine can carry, not engine={cfg.engine.name} on "
                                  f"engine.gpu={cfg.engine.gpu} (leave it at {off}; a smaller load of your own is "
                                  "workloads.<name>.scale)")
    for name, w in cfg.workloads.items():
        if not 1 <= w.scale <= 1_000_000:
            raise ConfigError(f"workloads.{name}.scale must be in [1, 1000000], got {w.scale}")
    if cfg.repeats_max and cfg.repeats_max < cfg.repeats:
        raise ConfigError(f"repeats_max must be >= repeats ({cfg.repeats}) or 0 (= repeats), got {cfg.repeats_max}")
    most = max(cfg.repeats, cfg.repeats_max)  # a run may earn repeats up to repeats_max: bound what it could plan
    trials = most * max(len(cfg.arms), 1) * max(len(cfg.workloads), 1)
    if trials > MAX_TRIALS:
        key = "repeats_max" if most > cfg.repeats else "repeats"
        raise ConfigError(
            f"{key}: {most} repeats x {len(cfg.arms)} arm(s) x {len(cfg.workloads)} workload(s) = "
            f"{trials} trials; one run plans at most {MAX_TRIALS}"
        )


def _check_timing(cfg: RunCfg) -> None:
    """engine.timing and engine.prefill_slowdown: the reference server's own clock and switch, nowhere else (a GPU
    engine is never judged on modelled time, and has no planted slowdown)."""
    e = cfg.engine
    if e.timing not in TIMINGS:
        raise ConfigError(f"engine.timing must be one of {', '.join(TIMINGS)}, got {e.timing!r}")
    if e.timing == "modelled" and e.name not in MODELLED_TIMING_ENGINES:
        raise ConfigError(f"engine.timing=modelled: engine {e.name!r} reports no modelled time (only "
                          f"{', '.join(MODELLED_TIMING_ENGINES)}); GPU engines are judged on wall time")
    for arm, value in e.prefill_slowdown.items():
        if arm not in cfg.arms:
            raise ConfigError(f"engine.prefill_slowdown.{arm}: not an arm of this run ({', '.join(cfg.arms)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
            raise ConfigError(f"engine.prefill_slowdown.{arm} must be a finite number >= 0, got {value!r}")
        if value and e.name != "reference":
            raise ConfigError(f"engine.prefill_slowdown.{arm}: the planted prefill slowdown is a reference-server "
                              f"switch; engine {e.name!r} has none (noise.planted_slowdown needs engine=reference)")
    slowdown = cfg.noise.planted_slowdown
    if isinstance(slowdown, bool) or not isinstance(slowdown, (int, float)) or not (
            math.isfinite(slowdown) and slowdown >= 0):
        raise ConfigError(f"noise.planted_slowdown must be a finite number >= 0, got {slowdown!r}")


def _check_in_process(cfg: RunCfg) -> None:
    """engine.python and engine.extra_args on an engine that starts no server: nothing would read them. A user who
    set ``engine=sim engine.python=<their build>`` to preview their change got the simulator of this checkout and a
    pass, with no word that their build never ran."""
    e = cfg.engine
    if e.name not in MODELLED_ENGINES:
        return
    what = f"engine {e.name} runs this checkout's reference_impl in the harness's own process and starts no server"
    if e.python:
        raise ConfigError(f"engine.python: {what}, so {e.python!r} would never run; a build of your own runs with "
                          "engine=sglang, vllm, tokenspeed or reference (leave engine.python empty here)")
    if e.extra_args:
        raise ConfigError(f"engine.extra_args: {what}, so no flag reaches anything; its settings are engine.* keys "
                          "(docs/reference/config.md; leave engine.extra_args empty here)")


def check_unread_keys(cfg: RunCfg) -> None:
    """Keys only one engine or load reads, set for another: nothing would read them, yet the run records them and
    ``compare`` requires them equal, so a run with one stray key could be compared with no other. Asked once the
    engine has checked the plan (``prepare.prepare_run``): an experiment made for one engine (marconi's byte budget)
    is refused elsewhere by what it cannot run, which says more."""
    if cfg.engine.capacity_bytes and cfg.engine.name != "replay":
        raise ConfigError(f"engine.capacity_bytes: only engine=replay reads it (the replayed cache's byte budget); "
                          f"engine {cfg.engine.name} sizes its pools from engine.kv_tokens and "
                          "engine.max_mamba_cache_size, or from memory (leave it unset)")
    if cfg.load.slowdown != 1.0 and cfg.load.kind != "trace":
        raise ConfigError(f"load.slowdown: only load=trace reads it (each row's timestamp times it); load.kind is "
                          f"{cfg.load.kind} (leave it at 1)")
