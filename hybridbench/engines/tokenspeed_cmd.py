"""The ``ts serve`` command for one arm and one TokenSpeed version: a pure function of model, engine options, arm,
version and the installed engine's own flag list. No process is launched here.

Source: TokenSpeed's code, docs/engines/tokenspeed.md (flags by version, how ``ts serve`` splits its arguments between
the gRPC engine and the smg gateway, readiness, ``/flush_cache``, the hybrid cache semantics of PR #162).

``ts serve`` hands every flag the engine's parser (``ServerArgs``) does not know to the Rust gateway, which
rejects it only after the engine has loaded the whole model; so every engine flag is checked here, at plan time,
against the installed engine's own parser (:func:`tokenspeed_help_argv`).

Arm mapping (docs/reference/arms.md vocabulary). TokenSpeed always keeps Mamba checkpoints at branch points (SGLang's
``extra_buffer``) and evicts LRU only:

* ``disabled``  -> prefix caching off, host tier off.
* ``branching`` -> device cache only (``--disable-kvstore``: the KV host tier is on by default).
* ``l2``        -> the KV host tier and, on 0.1.0, the Mamba host tier (``--enable-mamba-l2``): a hit needs KV
  pages *and* a Mamba state, so a KV-only host tier never gives a hybrid hit after device eviction. 0.1.1
  removed the Mamba host tier: ``l2`` on a hybrid model is refused there, a dense model gets the KV tier.
* ``lru`` (no branch-point states), ``seglen``, ``marconi`` -> ConfigError naming the arm.

Ports: the gateway (``--host/--port``, default 0.0.0.0:8000), the control sidecar (``--control-port``, which
binds the gateway's host) and the smg Prometheus exporter (``--prometheus-host/--prometheus-port``, default
0.0.0.0 and a random port) are all given, on the loopback host unless engine.host says otherwise.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from hybridbench.config.schema import EngineCfg, ModelCfg
from hybridbench.engines import owned_flags as owned
from hybridbench.engines.arm_table import ArmTable, nothing
from hybridbench.engines.server_flags import Flag, check_flags, fmt_number, parse_help
from hybridbench.errors import ConfigError
from reference_impl.engine.arms import ArmSpec

__all__ = ["TOKENSPEED_ARMS", "TOKENSPEED_DEFAULT_PAGE", "TOKENSPEED_VERSIONS", "TokenSpeedVersion",
           "kv_only_host_tier", "tokenspeed_command", "tokenspeed_help_argv", "tokenspeed_version"]

TS_MODULE = "tokenspeed.cli"  # the module behind the `ts` console script
# The page both releases' parsers resolve when no --block-size / --prefix-granularity is given (tests/tokenspeed
# resolves it): engine.page_size <= 1 would pass no flag and run it while the plan and the record said 1, so it is
# refused (conf/engine/tokenspeed.yaml gives this one).
TOKENSPEED_DEFAULT_PAGE = 64
# The flags built from a config key, and the model the gateway serves (owned_flags.py says why they are refused).
TOKENSPEED_KEYED = {
    **dict.fromkeys(("--model", "--model-path"), "model.hf_id"),
    "--chunked-prefill-size": "engine.chunked_prefill_size", "--gpu-memory-utilization": "engine.mem_fraction_static",
    "--max-total-tokens": "engine.kv_tokens", "--max-mamba-cache-size": "engine.max_mamba_cache_size",
    "--mamba-ssm-dtype": "model.mamba_ssm_dtype", "--quantization": "model.quantization",
    **dict.fromkeys(("--block-size", "--prefix-granularity"), "engine.page_size"),
}
# The rest extra_args may not give, in both releases' parsers. ``ts serve`` rewrites --tp to --tensor-parallel-size
# (the later one wins: TP 8 served, TP 4 recorded); --attn-tp-size is its alias, refused beside it at start-up;
# --world-size and --nprocs-per-node add ranks (TP 4 in a world of 8 is two attention-DP groups on 8 GPUs). Of the
# cache switches, --enable-prefix-caching is exclusive with the disabled arm's flag (refused at start-up) and
# --disable-kvstore turns the l2 arm's host tier off (l2 run as branching under its name).
TOKENSPEED_OWNED = {
    **dict.fromkeys(("--tensor-parallel-size", "--tp", "--attn-tp-size"), "engine.tp"),
    **dict.fromkeys(("--pipeline-parallel-size", "--nnodes", "--world-size", "--nprocs-per-node"),
                    owned.OWNED_BY_GPU_COUNT),
    **dict.fromkeys(("--enable-prefix-caching", "--disable-kvstore"), owned.OWNED_BY_ARM),
}


@dataclass(frozen=True, slots=True)
class TokenSpeedVersion:
    """What one TokenSpeed release can express, and how its cache is made cold (docs/engines/tokenspeed.md)."""

    version: str
    no_prefix_cache: str  # the flag that turns prefix caching off
    granularity_flag: str  # the page (prefix granularity) size
    mamba_host_tier: bool  # --enable-mamba-l2 and its knobs exist (the radix-era cache of PR #162)
    flush_works: bool  # /flush_cache really clears the cache (0.1.0 acknowledges and does nothing)
    mamba_cache_size_flag: bool  # --max-mamba-cache-size exists
    models: frozenset[str]  # the model classes it can load (the EntryClass names under tokenspeed/runtime/models)


# The architectures (config.json's "architectures") each release's model registry holds, hybrid ones and those a
# dense baseline might use; read from the releases' tokenspeed/runtime/models. Neither has Qwen3-Next.
_TS_010_MODELS = frozenset({
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM", "Qwen2ForCausalLM", "LlamaForCausalLM", "GptOssForCausalLM", "DeepseekV3ForCausalLM",
    "InklingForConditionalGeneration", "KimiK25ForConditionalGeneration",
})
_TS_011_MODELS = _TS_010_MODELS | {"NemotronHForCausalLM", "Qwen3_5MoeForCausalLM", "Qwen4ExpForCausalLM",
                                   "Qwen4ExpForConditionalGeneration", "KimiK3ForConditionalGeneration"}

TOKENSPEED_VERSIONS: dict[str, TokenSpeedVersion] = {
    v.version: v for v in (
        TokenSpeedVersion("0.1.0", "--no-enable-prefix-caching", "--block-size", mamba_host_tier=True,
                          flush_works=False, mamba_cache_size_flag=True, models=_TS_010_MODELS),
        TokenSpeedVersion("0.1.1", "--disable-prefix-caching", "--prefix-granularity", mamba_host_tier=False,
                          flush_works=True, mamba_cache_size_flag=False, models=_TS_011_MODELS),
    )
}

# Flags ``ts serve`` keeps for itself or hands to the gateway: never in the engine's parser.
_GATEWAY_FLAGS = {"--host", "--port", "--prometheus-host", "--prometheus-port", "--control-port"}
_KV_HOST_TIER_FLAGS = ("--kvstore-ratio", "--kvstore-size")


def tokenspeed_version(installed: str) -> TokenSpeedVersion:
    """The table for an installed version string ("0.1.1", "0.1.1.dev3+g..."); ConfigError for any other release:
    its flags and cold protocol are unknown, and guessing would make a different experiment than the one named."""
    base = installed.split("+", maxsplit=1)[0]
    for known, table in TOKENSPEED_VERSIONS.items():
        if base == known or base.startswith(known + "."):
            return table
    raise ConfigError(f"engine=tokenspeed: installed version {installed or 'unknown'} is not one hybridbench knows "
                      f"({', '.join(TOKENSPEED_VERSIONS)}); set engine.python to an interpreter with one of them")


def tokenspeed_help_argv(python: str, extra: Sequence[str] = ()) -> list[str]:
    """Prints the engine parser's help. ``ts serve --help`` shows only ``--headless``; the engine's flags live in
    ``ServerArgs.add_cli_args``, which is what ``ts serve`` itself consults to route a flag. ``extra``
    (engine.extra_args) is parsed first, so the parser refuses what it would refuse at launch."""
    code = ("import argparse, sys; from tokenspeed.runtime.utils.server_args import ServerArgs; "
            "p = argparse.ArgumentParser(prog='ts serve'); ServerArgs.add_cli_args(p); "
            "p.parse_args(sys.argv[1:] + ['--help'])")
    return [python or sys.executable, "-c", code, *extra]


def kv_only_host_tier(extra: Sequence[str], version: TokenSpeedVersion) -> str:
    """The flag in ``extra`` that asks for a KV host tier without the Mamba one ("" if none does)."""
    names = owned.extra_flag_names(extra)
    if version.mamba_host_tier and "--enable-mamba-l2" in names:
        return ""
    return next((f for f in _KV_HOST_TIER_FLAGS if f in names), "")


def _engine_part(extra: Sequence[str]) -> list[str]:
    """``extra`` less the flags ``ts serve`` hands the gateway, with their values (each takes one): what the
    engine's parser reads."""
    out: list[str] = []
    skip = False
    for arg in extra:
        if skip:
            skip = False
        elif arg in _GATEWAY_FLAGS:
            skip = True
        elif arg.split("=", 1)[0] not in _GATEWAY_FLAGS:
            out.append(arg)
    return out


@dataclass(frozen=True, slots=True)
class _Ctx:
    version: TokenSpeedVersion
    hybrid: bool


def _off(spec: ArmSpec, ctx: _Ctx) -> list[Flag]:
    owner = f"arm {spec.name}"
    return [Flag(ctx.version.no_prefix_cache, None, owner), Flag("--disable-kvstore", None, owner)]


def _device_only(spec: ArmSpec, ctx: _Ctx) -> list[Flag]:
    # The KV host tier is on by default: a device-only cache has to turn it off (an l2 arm's host tier drops this).
    return [] if spec.host_tier else [Flag("--disable-kvstore", None, f"arm {spec.name}")]


def _host_tier(spec: ArmSpec, ctx: _Ctx) -> list[Flag]:
    owner = f"arm {spec.name}"
    ratio = fmt_number(spec.knobs.l2.hicache_ratio if spec.knobs.l2 is not None else 2.0)
    flags = [Flag("--kvstore-ratio", ratio, owner)]
    if ctx.version.mamba_host_tier:
        return [*flags, Flag("--enable-mamba-l2", None, owner), Flag("--mamba-l2-ratio", ratio, owner)]
    if ctx.hybrid:
        raise ConfigError(f"arm {spec.name} on TokenSpeed {ctx.version.version} would be a KV-only host tier (this "
                          "release has no Mamba host tier): after device eviction it can never give a hybrid "
                          "model a hit; use TokenSpeed 0.1.0 (--enable-mamba-l2) or a dense model")
    return flags


_LRU_ONLY = ("arm {arm} needs the %s eviction policy, which TokenSpeed does not offer (it evicts LRU only); run "
             "it on engine=sglang with a build that has it")

# What TokenSpeed can express of an arm, and how (module docstring); the release is in the context.
TOKENSPEED_ARMS: ArmTable[_Ctx, Flag] = ArmTable(
    engine="tokenspeed",
    strategies={"disabled": _off, "extra_buffer": _device_only},
    policies={"lru": nothing},
    host_tier=_host_tier,
    why_not={"no_buffer": "arm {arm} keeps no branch-point states, which TokenSpeed cannot express (it always "
                          "checkpoints at branch points); its device-only cache is arm branching",
             "extra_buffer_lazy": "arm {arm} is SGLang's extra_buffer_lazy (one ping-pong state slot a request), "
                                  "which TokenSpeed has no counterpart of; its device-only cache is arm branching",
             **{p: _LRU_ONLY % p for p in ("seglen", "marconi")}},
)


def tokenspeed_command(
    *,
    python: str,
    model: ModelCfg,
    engine: EngineCfg,
    arm: ArmSpec,
    port: int,
    control_port: int,
    prometheus_port: int,
    version: TokenSpeedVersion,
    help_text: str | None,
) -> list[str]:
    """``python -m tokenspeed.cli serve --model <hf_id> ...`` (= ``ts serve``) for one arm.

    Order: ``--model --host --port --control-port --prometheus-port`` (gateway and orchestrator), then the
    engine's: ``--tensor-parallel-size``, ``--chunked-prefill-size``, ``--gpu-memory-utilization``
    (engine.mem_fraction_static), the page size (``--block-size`` / ``--prefix-granularity``: engine.page_size,
    which must be > 1), ``--max-total-tokens`` (engine.kv_tokens), ``--max-mamba-cache-size`` (0.1.0),
    ``--mamba-ssm-dtype`` and ``--quantization`` (model.mamba_ssm_dtype, model.quantization, when set), the arm's
    flags, then
    ``engine.extra_args``, which win over a built flag of the same name. ``--enable-metrics`` keeps the engine's
    cache counters. engine.track_interval has no effect on TokenSpeed (0.1.0's --mamba-track-interval is read
    nowhere) and is not passed.
    """
    spec = arm
    TOKENSPEED_ARMS.check(spec)
    if engine.tp < 1:
        raise ConfigError(f"engine.tp must be >= 1, got {engine.tp}")
    if not model.hf_id:
        raise ConfigError("model.hf_id is empty; ts serve needs a model path or Hugging Face id")
    if model.architecture and model.architecture not in version.models:
        # Its parsers take any model id; the server dies at model load, after the weights download.
        hybrid = sorted(a for a in version.models if a.startswith(("Qwen3_5", "NemotronH")))
        raise ConfigError(f"model.architecture {model.architecture} ({model.name}): TokenSpeed {version.version} has "
                          f"no such model class (hybrid ones it serves: {', '.join(hybrid)}); choose a model it "
                          "serves, e.g. model=qwen3.5-9b")
    extra = [str(a) for a in engine.extra_args]
    # The harness's flags, those it builds from a key (owned_flags.py says why), the GPU count and the cache switches
    # (the kvstore sizes may be tuned there: a host tier of one's own).
    owned.refuse_owned(extra, {"--host": "engine.host", **TOKENSPEED_KEYED, **TOKENSPEED_OWNED,
                         **dict.fromkeys(("--port", "--control-port", "--prometheus-port"), owned.OWNED_BY_HARNESS),
                         version.no_prefix_cache: owned.OWNED_BY_ARM})
    owned.refuse_replicas(extra, ("--data-parallel-size",), None)
    if model.hybrid and spec.strategy != "disabled" and (flag := kv_only_host_tier(extra, version)):
        raise ConfigError(f"engine.extra_args asks for a KV-only host tier ({flag}) on a hybrid model: a hit needs a "
                          "Mamba state as well, so after device eviction it can never hit; add --enable-mamba-l2 "
                          "(TokenSpeed 0.1.0) or use arm l2")
    if engine.page_size <= 1:  # no flag: TokenSpeed would serve its own page under the name of this one
        raise ConfigError(f"engine.page_size={engine.page_size} gives ts serve no {version.granularity_flag}: "
                          f"TokenSpeed would run its own {TOKENSPEED_DEFAULT_PAGE}-token pages while the plan and the "
                          f"record said {engine.page_size}; set engine.page_size={TOKENSPEED_DEFAULT_PAGE} "
                          "(conf/engine/tokenspeed.yaml's) or another page > 1")
    if engine.max_mamba_cache_size > 0 and not version.mamba_cache_size_flag:
        raise ConfigError(f"engine.max_mamba_cache_size={engine.max_mamba_cache_size} has no flag on TokenSpeed "
                          f"{version.version}; set it to 0 (size the cache with engine.mem_fraction_static)")
    host = engine.host or "127.0.0.1"
    flags = [Flag("--tensor-parallel-size", str(engine.tp), "engine.tp")]
    if engine.chunked_prefill_size > 0:
        flags.append(Flag("--chunked-prefill-size", str(engine.chunked_prefill_size), "engine.chunked_prefill_size"))
    flags.append(Flag("--gpu-memory-utilization", fmt_number(engine.mem_fraction_static), "engine.mem_fraction_static"))
    flags.append(Flag(version.granularity_flag, str(engine.page_size), "engine.page_size"))
    if engine.kv_tokens > 0:
        flags.append(Flag("--max-total-tokens", str(engine.kv_tokens), "engine.kv_tokens"))
    if engine.max_mamba_cache_size > 0:
        flags.append(Flag("--max-mamba-cache-size", str(engine.max_mamba_cache_size), "engine.max_mamba_cache_size"))
    if model.mamba_ssm_dtype:  # ts serve --mamba-ssm-dtype {float32,bfloat16} (runtime/utils/server_args.py)
        flags.append(Flag("--mamba-ssm-dtype", model.mamba_ssm_dtype, "model.mamba_ssm_dtype"))
    if model.quantization:  # as SGLang gets it: without it a bf16 checkpoint served bf16 while fp8 was recorded
        flags.append(Flag("--quantization", model.quantization, "model.quantization"))
    flags.append(Flag("--enable-metrics", None, "the engine's cache counters"))
    flags.extend(TOKENSPEED_ARMS.express(spec, _Ctx(version, model.hybrid)))
    overridden = owned.extra_flag_names(extra)
    if overridden & set(_KV_HOST_TIER_FLAGS) and spec.strategy != "disabled":
        # extra_args sizes a host tier: a cache-on arm's "off" would contradict it. The disabled arm keeps it off:
        # ServerArgs refuses a KV store without prefix caching at start-up ("mutually exclusive").
        flags = [f for f in flags if f.name != "--disable-kvstore"]
    helped = parse_help(help_text) if help_text is not None else None
    extra_engine = _engine_part(extra)
    check_flags([f for f in flags if f.name not in overridden], extra_engine, helped, f"TokenSpeed {version.version}")
    served = [
        Flag("--host", host, "engine.host"),
        Flag("--port", str(port), "engine.port"),
        Flag("--control-port", str(control_port), "the control sidecar"),
        Flag("--prometheus-host", host, "the Prometheus exporter"),  # smg's default is 0.0.0.0
        Flag("--prometheus-port", str(prometheus_port), "the Prometheus exporter"),
    ]
    argv = [python or sys.executable, "-m", TS_MODULE, "serve", "--model", model.hf_id]
    for f in (*served, *flags):
        if f.name not in overridden:
            argv.extend(f.render())
    return argv + extra
