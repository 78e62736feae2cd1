"""The ``python -m sglang.launch_server`` command for one arm: a pure function of model, engine options, arm and
the installed server's ``--help`` text. No process is launched here.

Sources (SGLang's repository): flag names, types and defaults from server_args.py; the strategy flag and its
rename (``--mamba-scheduler-strategy`` -> ``--mamba-radix-cache-strategy``, PR #28151, 2026-06-19);
why the strategy is always explicit: ``auto`` can resolve to ``no_buffer``; eviction policies
(``seglen`` from unmerged PR #22172, ``marconi`` from unmerged PR #21862); the host tier (HiCache flags).
Arm vocabulary: docs/reference/arms.md and ``reference_impl.engine.arms`` (the one place arm names live).

Version differences are read from ``help_text`` (``python -m sglang.launch_server --help`` of the interpreter
that will serve). When it is given, every flag the command uses must appear in it, and every keyword value must
be one of the flag's listed choices, or a ConfigError names the flag and who needs it. When it is ``None`` the
newest spellings are used and nothing is checked; the caller decides when that is acceptable.

Help-text parsing, flags and ``engine.extra_args`` merging, shared with vLLM's and TokenSpeed's commands, are in
``server_flags`` (re-exported here).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from hybridbench.config.schema import EngineCfg, ModelCfg
from hybridbench.engines.arm_table import ArmTable, nothing
from hybridbench.engines.mamba_chunk import check_mamba_chunk
from hybridbench.engines.owned_flags import (
    OWNED_BY_ARM,
    OWNED_BY_GPU_COUNT,
    OWNED_BY_HARNESS,
    data_parallel_groups,
    extra_flag_names,
    last_flag,
    refuse_owned,
    refuse_replicas,
)
from hybridbench.engines.server_flags import Flag, HelpText, check_flags, fmt_number, merge_extra, parse_help
from hybridbench.engines.sglang_refusal import sglang_refusal, startup_refusal
from hybridbench.errors import ConfigError
from reference_impl.engine.arms import ArmSpec, L2Knobs

__all__ = [
    "SGLANG_ARMS",
    "Flag",
    "HelpText",
    "check_flags",
    "fmt_number",
    "merge_extra",
    "parse_help",
    "sglang_attention_dp_groups",
    "sglang_command",
    "sglang_env",
    "sglang_help_argv",
    "sglang_metrics_ranks",
    "sglang_refusal",
]

STRATEGY_FLAG = "--mamba-radix-cache-strategy"  # since PR #28151 (2026-06-19), SGLang's server_args.py
STRATEGY_FLAG_OLD = "--mamba-scheduler-strategy"  # PR #14792 (2025-12-14); deprecated alias afterwards
HICACHE_FLAG = "--enable-hierarchical-cache"
HICACHE_FLAG_ALIAS = "--enable-hicache"  # 0.5.23 alias, SGLang's server_args.py
SEGLEN_WEIGHT_FLAG = "--seglen-eff-weight"  # PR #22172 text, SGLang's server_args.py
SEGLEN_WEIGHT_FLAG_FORK = "--marconi-eff-weight"  # abdelfattah-lab/sglang#3 text spells it so
MARCONI_WEIGHT_FLAG = "--marconi-eff-weight"  # PR #21862, SGLang's server_args.py


def sglang_help_argv(python: str, extra: Sequence[str] = ()) -> list[str]:
    """The command whose stdout is the ``help_text`` :func:`sglang_command` expects; ``extra`` (engine.extra_args)
    goes before ``--help``, so the server's own parser reads it first and refuses what it would refuse at launch."""
    return [python or sys.executable, "-m", "sglang.launch_server", *extra, "--help"]


# --------------------------------------------------------------------------------------------------------------
# Flags


# Flags the harness builds from a config key: given in extra_args they replaced the key's value on the server while
# the plan's pools, the forecast, the plan-time pool check and the record kept the key's (--max-total-tokens 200
# under "sized by the server from memory").
SGLANG_KEYED = {
    "--page-size": "engine.page_size", "--chunked-prefill-size": "engine.chunked_prefill_size",
    "--mem-fraction-static": "engine.mem_fraction_static", "--max-total-tokens": "engine.kv_tokens",
    "--max-mamba-cache-size": "engine.max_mamba_cache_size", "--quantization": "model.quantization",
    "--mamba-ssm-dtype": "model.mamba_ssm_dtype",
    # read by the plan's pools, the forecast and the kl probe (track interval), the forecast (the seglen weight, the
    # host pools' ratio) and the vLLM host-tier comparison (the ratio)
    "--mamba-track-interval": "engine.track_interval", SEGLEN_WEIGHT_FLAG: "arm.seglen.eff_weight",
    "--hicache-ratio": "arm.l2.hicache_ratio",
}
# Flags that override a key's value without replacing its flag: --hicache-size sizes the host pools over
# --hicache-ratio (its --help: "Overrides --hicache-ratio"), which the forecast and the record read.
SGLANG_OVERRIDING = {"--hicache-size": "arm.l2.hicache_ratio"}
# The flags engine.extra_args may not give SGLang: the harness's, the keyed ones and the arms' (tuning flags may).
SGLANG_OWNED = {
    **dict.fromkeys(("--model-path", "--model"), "model.hf_id"), "--host": "engine.host", "--port": OWNED_BY_HARNESS,
    **dict.fromkeys(("--tp-size", "--tp", "--tensor-parallel-size"), "engine.tp"), **SGLANG_KEYED, **SGLANG_OVERRIDING,
    **dict.fromkeys(("--pp-size", "--pipeline-parallel-size", "--nnodes"), OWNED_BY_GPU_COUNT),
    **dict.fromkeys(("--disable-radix-cache", STRATEGY_FLAG, STRATEGY_FLAG_OLD, "--radix-eviction-policy",
                     HICACHE_FLAG, HICACHE_FLAG_ALIAS), OWNED_BY_ARM),
}
SGLANG_REPLICAS = ("--dp-size", "--data-parallel-size", "--dp")
# 0.5.23's attention data parallelism (arg_groups/fields/parallel.py attn_dp_size): groups inside engine.tp, no replica
SGLANG_ATTN_DP = ("--attn-dp-size", "--attention-data-parallel-size")


def _pick(help_text: HelpText | None, preferred: str, *older: str) -> tuple[str, tuple[str, ...]]:
    """The first spelling the build offers (the preferred, newest one when unknown or none is offered), and the
    other spellings, for the error message should the chosen one be missing."""
    names = (preferred, *older)
    chosen = preferred
    if help_text is not None:
        chosen = next((n for n in names if help_text.offers(n)), preferred)
    return chosen, tuple(n for n in names if n != chosen)


# --------------------------------------------------------------------------------------------------------------
# SGLang


@dataclass(frozen=True, slots=True)
class _Ctx:
    engine: EngineCfg
    help: HelpText | None


def _disabled(spec: ArmSpec, ctx: _Ctx) -> list[Flag]:
    # The strategy is not set: with the radix cache off, ``auto`` resolution does not apply (SGLang's source), and
    # an explicit value can only trip validation irrelevant there (a flashinfer GDN decode backend refuses
    # ``no_buffer`` even with the cache off).
    return [Flag("--disable-radix-cache", None, f"arm {spec.name}")]


def _strategy(spec: ArmSpec, ctx: _Ctx) -> list[Flag]:
    # Every cache-on arm sets the strategy explicitly: ``auto`` can resolve to no_buffer.
    owner, engine = f"arm {spec.name}", ctx.engine
    if spec.strategy == "no_buffer" and engine.page_size not in (0, 1):
        raise ConfigError(f"arm {spec.name} uses --mamba-radix-cache-strategy no_buffer, which needs page size 1; "
                          f"engine.page_size is {engine.page_size}")
    strategy_flag, alts = _pick(ctx.help, STRATEGY_FLAG, STRATEGY_FLAG_OLD)
    flags = [Flag(strategy_flag, spec.strategy, owner, alts)]
    if spec.strategy == "no_buffer":
        # SGLang 0.5.16 and 0.5.23 refuse no_buffer with the overlap schedule at start-up ("no_buffer do not support
        # overlap schedule": 0.5.23 arg_groups/mamba_hook.py:156-159) and turn overlap off themselves only for
        # ``auto``; 0.5.9 turned it off itself. Said on every version, so the arm means one thing everywhere.
        flags.append(Flag("--disable-overlap-schedule", None, owner))
    if spec.strategy == "extra_buffer_lazy" and "--disable-overlap-schedule" in engine.extra_args:
        # SGLang asserts it while sizing the pools, after the weights load (kv_cache_configurator.py:3074-3076 in
        # 0.5.23, :1586-1588 in 0.5.16): refused here instead of an hour of GPU time later.
        raise ConfigError(f"arm {spec.name} (extra_buffer_lazy) requires the overlap schedule; engine.extra_args has "
                          "--disable-overlap-schedule")
    if spec.extra_buffer:
        if engine.track_interval < 1:
            raise ConfigError(f"engine.track_interval must be >= 1 for arm {spec.name}, got {engine.track_interval}")
        if engine.page_size > 1 and engine.track_interval % engine.page_size:
            raise ConfigError(f"engine.track_interval ({engine.track_interval}) must be a multiple of "
                              f"engine.page_size ({engine.page_size}) for arm {spec.name} ({spec.strategy})")
        flags.append(Flag("--mamba-track-interval", str(engine.track_interval), owner))
    return flags


def _seglen(spec: ArmSpec, ctx: _Ctx) -> list[Flag]:
    # PR #22172; the fork branch spells the weight --marconi-eff-weight, used when that is what the build offers.
    owner = f"arm {spec.name}"
    weight, alts = _pick(ctx.help, SEGLEN_WEIGHT_FLAG, SEGLEN_WEIGHT_FLAG_FORK)
    w = spec.knobs.eff_weight
    return [Flag("--radix-eviction-policy", "seglen", owner),
            *([Flag(weight, fmt_number(w), owner, alts)] if w is not None else [])]


def _marconi(spec: ArmSpec, ctx: _Ctx) -> list[Flag]:
    # PR #21862's launch line; the weight only when configured (the PR autotunes it otherwise).
    owner, w = f"arm {spec.name}", spec.knobs.eff_weight
    return [Flag("--radix-eviction-policy", "marconi", owner),
            *([Flag(MARCONI_WEIGHT_FLAG, fmt_number(w), owner)] if w is not None else [])]


def _host_tier(spec: ArmSpec, ctx: _Ctx) -> list[Flag]:
    # As SGLang's own mamba HiCache tests run it (arm.l2.*; "" leaves the io backend / layout flag out).
    owner, l2 = f"arm {spec.name}", spec.knobs.l2 or L2Knobs()
    hicache, alts = _pick(ctx.help, HICACHE_FLAG, HICACHE_FLAG_ALIAS)
    flags = [Flag(hicache, None, owner, alts), Flag("--hicache-ratio", fmt_number(l2.hicache_ratio), owner),
             Flag("--hicache-write-policy", l2.hicache_write_policy, owner)]
    for flag, value in (("--hicache-io-backend", l2.hicache_io_backend),
                        ("--hicache-mem-layout", l2.hicache_mem_layout)):
        if value:
            flags.append(Flag(flag, value, owner))
    return flags


# What SGLang can express of an arm, and how (docs/reference/arms.md table; SGLang's server_args.py). An unmerged policy
# (seglen, marconi) is in the table; whether the installed build has its flags is checked against --help.
SGLANG_ARMS: ArmTable[_Ctx, Flag] = ArmTable(
    engine="sglang",
    strategies={"disabled": _disabled, "no_buffer": _strategy, "extra_buffer": _strategy,
                "extra_buffer_lazy": _strategy},
    policies={"lru": nothing, "seglen": _seglen, "marconi": _marconi},
    host_tier=_host_tier,
)


def sglang_arm_flags(spec: ArmSpec, engine: EngineCfg, help_text: HelpText | None) -> list[Flag]:
    """The flags that express one arm: :data:`SGLANG_ARMS`."""
    return SGLANG_ARMS.express(spec, _Ctx(engine, help_text))


def sglang_command(
    *,
    python: str,
    model: ModelCfg,
    engine: EngineCfg,
    arm: ArmSpec,
    port: int,
    help_text: str | None,
    metrics: bool = True,
    cache_report: bool = True,
) -> list[str]:
    """``python -m sglang.launch_server ...`` for one arm (SGLang's server_args.py).

    Order: ``--model-path --host --port --tp-size --page-size --chunked-prefill-size --mem-fraction-static``
    (``--chunked-prefill-size`` is engine.chunked_prefill_size times the ``--enable-dp-attention`` groups: SGLang
    divides it among them),
    then ``--max-mamba-cache-size`` (if engine.max_mamba_cache_size > 0) and ``--max-total-tokens`` (if
    engine.kv_tokens > 0), ``--enable-metrics`` (``/metrics``) and ``--enable-cache-report``
    (``cached_tokens`` in OpenAI usage), the arm's flags (:func:`sglang_arm_flags`), and finally
    ``engine.extra_args`` verbatim (a flag the harness builds from a key, or one that says which server or cache this
    is, is refused there: :data:`SGLANG_OWNED`).

    ``--tp-size`` is spelled out rather than ``--tp``, which only works through argparse prefix matching.
    """
    helped = parse_help(help_text) if help_text is not None else None
    if engine.tp < 1:
        raise ConfigError(f"engine.tp must be >= 1, got {engine.tp}")
    if not model.hf_id:
        raise ConfigError("model.hf_id is empty; the SGLang server needs a model path or Hugging Face id")
    extra = [str(a) for a in engine.extra_args]  # YAML may give numbers
    # SGLang divides --chunked-prefill-size by the DP attention groups (0.5.9/0.5.16 ServerArgs
    # _handle_data_parallelism, 0.5.23 arg_groups/parallel_hook.py): given times the groups, each group's scheduler
    # runs engine.chunked_prefill_size, the value the plan, the forecast and the record carry.
    groups = sglang_attention_dp_groups(extra)
    flags = [
        Flag("--model-path", model.hf_id, "model.hf_id"),
        Flag("--host", engine.host or "127.0.0.1", "engine.host"),
        Flag("--port", str(port), "engine.port"),
        Flag("--tp-size", str(engine.tp), "engine.tp"),
        Flag("--page-size", str(max(engine.page_size, 1)), "engine.page_size"),
        Flag("--chunked-prefill-size", str(engine.chunked_prefill_size * groups), "engine.chunked_prefill_size"),
        Flag("--mem-fraction-static", fmt_number(engine.mem_fraction_static), "engine.mem_fraction_static"),
    ]
    if model.quantization:
        flags.append(Flag("--quantization", model.quantization, "model.quantization"))
    if model.mamba_ssm_dtype:  # its choices are checked against --help like any keyword value
        flags.append(Flag("--mamba-ssm-dtype", model.mamba_ssm_dtype, "model.mamba_ssm_dtype"))
    if engine.max_mamba_cache_size > 0:
        flags.append(Flag("--max-mamba-cache-size", str(engine.max_mamba_cache_size), "engine.max_mamba_cache_size"))
    if engine.kv_tokens > 0:
        flags.append(Flag("--max-total-tokens", str(engine.kv_tokens), "engine.kv_tokens"))
    if metrics:
        flags.append(Flag("--enable-metrics", None, "metrics scraping"))
    if cache_report:
        flags.append(Flag("--enable-cache-report", None, "per-request cached_tokens"))
    flags.extend(sglang_arm_flags(arm, engine, helped))
    check_mamba_chunk(model, engine, arm)
    refuse_owned(extra, SGLANG_OWNED)
    _refuse_other_device(extra, engine.gpu)
    refuse_replicas(extra, SGLANG_REPLICAS, "--enable-dp-attention")
    sglang_metrics_ranks(engine)  # a DP size that does not split engine.tp is refused now, not after the weights load
    overridden = extra_flag_names(extra)
    check_flags([f for f in flags if f.name not in overridden], extra, helped, "SGLang")
    args = merge_extra(flags, extra)
    # what every release with these flags refuses or rewrites
    if why := startup_refusal(args, extra, arm, engine, model):
        raise ConfigError(why)
    return [python or sys.executable, "-m", "sglang.launch_server", *args]


def _refuse_other_device(extra: Sequence[str], gpu: str) -> None:
    """ConfigError for ``--device`` other than ``cuda`` on a GPU plan: the CPU recipe (``--device cpu``, as the
    recorded fixtures ran) given without ``engine.gpu=cpu`` would serve on the CPU while the run, its pools and its
    forecast say ``engine.gpu`` (CUDA is also what ROCm builds call their GPUs)."""
    device = last_flag(extra, "--device")
    if device is not None and gpu != "cpu" and device[1] != "cuda":
        raise ConfigError(f"engine.extra_args has --device {device[1]}, but engine.gpu={gpu}: the server would not run "
                          f"on the {gpu} the run records; drop --device, or set engine.gpu=cpu for a CPU run")


def sglang_metrics_ranks(engine: EngineCfg) -> int:
    """How many scheduler processes add into one of 0.5.9's and 0.5.16's unlabelled cache counters: every TP rank
    runs a cache, and the ranks of one data-parallel attention group count the same tokens (each group its own
    requests), so the sum is (TP / DP) x the groups' total (0.5.9 layers/dp_attention.py:230-244)."""
    groups = sglang_attention_dp_groups([str(a) for a in engine.extra_args])
    if engine.tp % groups:
        raise ConfigError(f"engine.extra_args asks for {groups} data-parallel attention groups, which do not divide "
                          f"engine.tp={engine.tp}; SGLang requires tp_size % dp_size == 0")
    return engine.tp // groups


def sglang_attention_dp_groups(extra: Sequence[str]) -> int:
    """The data-parallel attention groups ``engine.extra_args`` splits engine.tp into: 0.5.23's ``--attn-dp-size``
    (the spelling it asks for; no --enable-dp-attention beside it), else ``--dp-size`` with ``--enable-dp-attention``
    (which 0.5.23 rewrites to the former)."""
    return data_parallel_groups(extra, SGLANG_ATTN_DP, None) if extra_flag_names(extra) & set(SGLANG_ATTN_DP) else (
        data_parallel_groups(extra, SGLANG_REPLICAS, "--enable-dp-attention"))


def sglang_env(arm: ArmSpec) -> dict[str, str]:
    """Environment knobs an arm needs on top of the caller's environment: none today (SGLang's server_args.py lists the
    variables; ``SGLANG_RADIX_FORCE_MISS=1`` would be a second cache-off baseline, not one of the documented arms)."""
    return {}
