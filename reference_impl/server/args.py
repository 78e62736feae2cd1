"""Command line of ``python -m reference_impl.server``: SGLang's flag names wherever SGLang has the concept."""

from __future__ import annotations

import argparse
import math
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NoReturn

from reference_impl.engine.arms import HICACHE_RATIO_MAX, SEGLEN_EFF_WEIGHT_MAX, ArmSpec, parse_arm
from reference_impl.engine.config import DEFAULT_KV_TOKENS, EngineConfig, state_ratio
from reference_impl.model.config import ModelConfig
from reference_impl.policies.registry import POLICIES
from reference_impl.server.contract import API_VERSIONS, DEFAULT_API_VERSION
from reference_impl.server.faults import FAULTS
from reference_impl.server.fields import SEED_MAX, SEED_MIN

__all__ = ["ServerConfig", "UsageError", "build_parser", "parse_config"]

MODEL_NAME = "reference-tiny-hybrid"


class UsageError(ValueError):
    """A bad flag or flag combination; printed as one line, exit status 2."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str
    port: int
    arm: ArmSpec
    engine: EngineConfig
    model: ModelConfig
    faults: frozenset[str]
    enable_metrics: bool
    context_length: int
    max_request_bytes: int
    stream_stall_s: float
    decode_log_interval: int
    served_model_name: str
    report_modelled: bool  # --report-modelled-time: meta_info carries modelled_* (not SGLang's keys)
    prefill_slowdown: float  # the planted regression: every prefill takes 1 + this times as long (modelled.py)
    lockstep_s: float  # wait this long at most for a closed loop's next requests before a forward (engine_loop.py)
    api_version: str  # whose HTTP answers to give where SGLang 0.5.16 and 0.5.23 differ (errors.py)
    args: dict[str, object]  # every flag as parsed, under SGLang's ServerArgs field names (/server_info)

    @property
    def disable_radix_cache(self) -> bool:
        return self.engine.cache == "disabled"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see --help)\n")  # one line, not argparse's usage block


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        # No abbreviations: hybridbench refuses the flags it sets (--policy, --log-level above info...) by their names,
        # which "--pol seglen" or "--log warning" would otherwise slip past
        allow_abbrev=False,
        prog="python -m reference_impl.server",
        description="CPU reference server: a tiny hybrid model behind SGLang's HTTP API and the reference cache.",
    )
    a = p.add_argument
    a("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: not reachable from other machines)")
    a("--port", type=int, default=30000)
    a("--arm", default=None, help="cache arm: disabled, lru, branching, lazy, seglen, l2 (compose with '+')")
    a("--mamba-radix-cache-strategy", "--mamba-scheduler-strategy", dest="mamba_radix_cache_strategy", default=None,
      choices=["auto", "no_buffer", "extra_buffer", "extra_buffer_lazy"],
      help="used when --arm is not given (auto = extra_buffer)")
    tree_policies = sorted(n for n, e in POLICIES.items() if e.tree_policy)
    a("--policy", "--radix-eviction-policy", dest="radix_eviction_policy", default=None, choices=tree_policies)
    a("--seglen-eff-weight", type=float, default=None)
    a("--disable-radix-cache", action="store_true")
    a("--page-size", type=int, default=1)
    a("--max-total-tokens", type=int, default=DEFAULT_KV_TOKENS, help="KV pool size in tokens")
    a("--max-mamba-cache-size", type=int, default=256, help="recurrent-state slots")
    a("--max-running-requests", type=int, default=None)
    a("--chunked-prefill-size", type=int, default=2048)
    a("--max-prefill-tokens", type=int, default=16384)
    a("--mamba-track-interval", type=int, default=256)
    a("--schedule-policy", default="fcfs", choices=["fcfs", "lpm"])
    a("--disable-overlap-schedule", action="store_true", help="1 extra state slot per request instead of 2")
    a("--enable-hierarchical-cache", "--enable-hicache", dest="enable_hierarchical_cache", action="store_true")
    a("--hicache-ratio", type=float, default=2.0, help="host tier size as a multiple of the device pools")
    # Not SGLang's: the reference cache with another engine's semantics (reference_impl.lifecycle: tokenspeed).
    a("--cache-semantics", default="sglang", choices=["sglang", "tokenspeed"],
      help="tokenspeed: TokenSpeed's radix-era cache (PR #162); its l2 arm keeps KV and Mamba states on the host")
    a("--host-tier-kv-only", action="store_true",
      help="with --cache-semantics tokenspeed: an arm's host tier is TokenSpeed's KV tier without --enable-mamba-l2 "
           "(host KV alone never gives a hybrid hit); no effect on an arm without one")
    a("--enable-metrics", action="store_true")
    a("--enable-cache-report", action="store_true", help="accepted for SGLang compatibility; always on here")
    a("--random-seed", "--seed", dest="random_seed", type=int, default=0, help="model weights and sampling")
    a("--context-length", type=int, default=None, help="longest prompt + output (default: the KV pool)")
    a("--decode-log-interval", type=int, default=40)
    a("--served-model-name", default=MODEL_NAME)
    a("--model-layers", default="RRRA", help="layer pattern of the tiny model: R recurrent, A attention")
    a("--hidden-size", type=int, default=64)
    a("--vocab-size", type=int, default=4096)
    a("--max-request-bytes", type=int, default=8 << 20, help="HTTP body size limit")
    a("--stream-stall-timeout", type=float, default=30.0,
      help="seconds a stream may wait for a client that stopped reading before it is dropped (and counted)")
    a("--inject-bug", action="append", default=[], choices=FAULTS, help="reproduce a historical bug (repeatable)")
    a("--prefill-slowdown", type=float, default=0.0,
      help="not SGLang's: plant a regression, every prefill forward takes 1 + this times as long (wall and "
           "modelled time; 0.25 = +25%%)")
    a("--report-modelled-time", action="store_true",
      help="not SGLang's: add each request's modelled_* times (the cost model's clock) to its last meta_info")
    a("--modelled-lockstep-ms", type=float, default=0.0,
      help="not SGLang's: for a closed-loop client judged on the modelled clock, wait up to this long before a "
           "forward for a new request in place of each one that finished (0: off)")
    a("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    a("--sglang-api-version", default=DEFAULT_API_VERSION, choices=API_VERSIONS,
      help="answer bad requests as this SGLang version does where versions differ (the cache is 0.5.23's)")
    # SGLang flags a launcher always passes; accepted so hybridbench's SGLang launcher can be pointed
    # at this server. They have no meaning for a tiny CPU model and are ignored.
    a("--model-path", default=None, help="accepted for SGLang compatibility; the tiny model is built in")
    a("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1, help="accepted; ignored on CPU")
    a("--mem-fraction-static", type=float, default=None, help="accepted; pools are sized by their flags")
    a("--hicache-write-policy", default="write_through", choices=["write_through", "write_back",
                                                                  "write_through_selective"])
    return p


def _arm(ns: argparse.Namespace) -> ArmSpec:
    if ns.disable_radix_cache:
        return parse_arm("disabled")
    if ns.arm is not None:
        try:
            spec = parse_arm(ns.arm)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    else:
        named = {"no_buffer": "lru", "extra_buffer_lazy": "lazy"}
        name = named.get(ns.mamba_radix_cache_strategy or "auto", "branching")
        spec = parse_arm(name + ("+l2" if ns.enable_hierarchical_cache else ""))
    if ns.enable_hierarchical_cache and not spec.host_tier and spec.strategy != "disabled":
        base, at, label = spec.name.partition("@")
        spec = parse_arm(f"{base}+l2{at}{label}")
    return spec


def _cache(ns: argparse.Namespace, arm: ArmSpec) -> Literal["disabled", "no_buffer", "extra_buffer",
                                                            "extra_buffer_lazy", "tokenspeed"]:
    """The cache strategy: the arm's, or TokenSpeed's variant of branch-point caching."""
    if ns.cache_semantics == "sglang":
        if ns.host_tier_kv_only:
            raise UsageError("--host-tier-kv-only needs --cache-semantics tokenspeed (SGLang's host tier keeps states)")
        if arm.strategy == "extra_buffer_lazy" and ns.disable_overlap_schedule:
            raise UsageError(f"arm {arm.name} (extra_buffer_lazy) requires the overlap schedule, as SGLang asserts: "
                             "drop --disable-overlap-schedule")
        return arm.strategy
    if arm.strategy == "extra_buffer_lazy":
        raise UsageError(f"arm {arm.name} cannot run with --cache-semantics tokenspeed: TokenSpeed has no lazy "
                         "ping-pong slot (use branching)")
    if arm.strategy == "no_buffer":
        raise UsageError(f"arm {arm.name} cannot run with --cache-semantics tokenspeed: TokenSpeed always keeps "
                         "branch-point states (use branching)")
    policy = ns.radix_eviction_policy or arm.policy
    if arm.strategy == "extra_buffer" and policy != "lru":
        what = f"--policy {policy}" if ns.radix_eviction_policy else f"arm {arm.name} evicts by {policy}"
        hint = "l2" if arm.host_tier else "branching"
        raise UsageError(f"{what}: --cache-semantics tokenspeed cannot apply it: TokenSpeed evicts least recently "
                         f"used by its own rules (use --arm {hint}, without --policy)")
    return "tokenspeed" if arm.strategy == "extra_buffer" else arm.strategy


def _check_host(host: str) -> None:
    """The bind address must be an IP address or a name this machine resolves (``256.1.1.1`` was a failed bind
    after start-up, exit 1); whether it is one of this machine's addresses is still the bind's to say."""
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise UsageError(f"--host {host!r} is not an address or a host name this machine resolves ({reason})") from None


def parse_config(argv: Sequence[str] | None = None) -> ServerConfig:
    ns = build_parser().parse_args(argv)
    arm = _arm(ns)
    positive = ("port", "page_size", "max_total_tokens", "max_mamba_cache_size", "chunked_prefill_size",
                "max_prefill_tokens", "mamba_track_interval", "decode_log_interval", "max_request_bytes",
                "hidden_size")
    for name in positive:
        if getattr(ns, name) <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {getattr(ns, name)}")
    if ns.port > 65535:
        raise UsageError(f"--port must be at most 65535, got {ns.port}")
    _check_host(ns.host)
    for name in ("seglen_eff_weight", "hicache_ratio", "mem_fraction_static", "stream_stall_timeout",
                 "prefill_slowdown", "modelled_lockstep_ms"):
        value = getattr(ns, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise UsageError(f"--{name.replace('_', '-')} must be a finite number >= 0, got {value}")
    if ns.stream_stall_timeout <= 0:
        raise UsageError("--stream-stall-timeout must be positive")
    if ns.max_running_requests is not None and ns.max_running_requests <= 0:
        raise UsageError("--max-running-requests must be positive")
    if arm.strategy == "no_buffer" and ns.page_size != 1:
        raise UsageError("Page size must be 1 for MambaRadixCache v1 (no_buffer); use --arm branching for a larger one")
    if arm.extra_buffer and ns.mamba_track_interval % ns.page_size:
        raise UsageError("--mamba-track-interval must be a multiple of --page-size")
    if not 0 < ns.hicache_ratio <= HICACHE_RATIO_MAX:
        raise UsageError(f"--hicache-ratio must be in (0, {HICACHE_RATIO_MAX:g}] (host pools as a multiple of the "
                         f"device pools), got {ns.hicache_ratio:g}")
    if ns.seglen_eff_weight is not None and ns.seglen_eff_weight > SEGLEN_EFF_WEIGHT_MAX:
        raise UsageError(f"--seglen-eff-weight must be in [0, {SEGLEN_EFF_WEIGHT_MAX:g}], got {ns.seglen_eff_weight:g}")
    if not SEED_MIN <= ns.random_seed <= SEED_MAX:  # torch.manual_seed overflows past 64 bits
        raise UsageError(f"--random-seed must fit in 64 bits, got {ns.random_seed}")
    cache = _cache(ns, arm)
    policy = ns.radix_eviction_policy or arm.policy
    try:
        model = ModelConfig(vocab_size=ns.vocab_size, hidden=ns.hidden_size, layers=ns.model_layers,
                            seed=ns.random_seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    host_kv = int(ns.max_total_tokens * ns.hicache_ratio) if arm.host_tier else 0
    host_states = int(ns.max_mamba_cache_size * ns.hicache_ratio) if arm.host_tier else 0
    engine = EngineConfig(
        kv_tokens=ns.max_total_tokens, state_slots=ns.max_mamba_cache_size, cache=cache, policy=policy,
        eff_weight=ns.seglen_eff_weight, page_size=ns.page_size, chunked_prefill_size=ns.chunked_prefill_size,
        max_prefill_tokens=ns.max_prefill_tokens, max_running_requests=ns.max_running_requests,
        schedule_policy=ns.schedule_policy, track_interval=ns.mamba_track_interval,
        overlap=not ns.disable_overlap_schedule, host_kv_tokens=host_kv, host_state_slots=host_states,
        host_kv_only=ns.host_tier_kv_only,
    )
    if ns.max_mamba_cache_size < state_ratio(engine):
        raise UsageError(
            f"--max-mamba-cache-size {ns.max_mamba_cache_size} cannot hold one running request "
            f"({state_ratio(engine)} slots each with arm {arm.name})"
        )
    if ns.context_length is not None and ns.context_length <= 1:  # 0 read as "not given" before
        raise UsageError(f"--context-length must be at least 2, got {ns.context_length}")
    context = ns.context_length if ns.context_length is not None else min(ns.max_total_tokens, model.max_context)
    if context <= 1:
        raise UsageError("--context-length must be at least 2")
    return ServerConfig(
        host=ns.host, port=ns.port, arm=arm, engine=engine, model=model, faults=frozenset(ns.inject_bug),
        enable_metrics=ns.enable_metrics, context_length=min(context, ns.max_total_tokens),
        max_request_bytes=ns.max_request_bytes, stream_stall_s=ns.stream_stall_timeout,
        decode_log_interval=ns.decode_log_interval,
        served_model_name=ns.served_model_name, prefill_slowdown=ns.prefill_slowdown,
        report_modelled=ns.report_modelled_time,
        lockstep_s=ns.modelled_lockstep_ms / 1e3,
        api_version=ns.sglang_api_version, args=dict(vars(ns)),
    )
