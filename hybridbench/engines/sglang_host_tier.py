"""What SGLang refuses, or quietly rewrites, for an arm with the host tier (hierarchical cache) in the planned line:
host memory that is no tier, a checkpoint format it cannot offload, the io backend and memory layout it switches
(with a storage backend, unified memory, decode context parallelism), and the releases that run none of it.
"""

from __future__ import annotations

from collections.abc import Sequence

from hybridbench.config.schema import ModelCfg
from hybridbench.engines.owned_flags import extra_flag_names, last_flag
from hybridbench.engines.planned_line import flag_value, has_flag, int_value, speculative_algorithm
from reference_impl.engine.arms import ArmSpec

__all__ = ["dcp_flag", "dcp_size", "host_tier_refusal", "host_tier_release_refusal"]

_HICACHE_DEFAULTS = {"--hicache-io-backend": "kernel", "--hicache-mem-layout": "page_first"}  # SGLang's own
# Host-tier storage backends whose layout SGLang rewrites from layer_first (0.5.16 ServerArgs
# _resolve_storage_layout_compatibility: mooncake; 0.5.23 hicache_hook.resolve_storage_layout_compatibility: also
# npu_memcache), to this layout per io backend.
_LAYER_FIRST_REWRITTEN = ("mooncake", "npu_memcache")
_STORAGE_LAYOUT = {"direct": "page_first_direct", "kernel": "page_first"}
# Decode context parallelism (0.5.23 arg_groups/fields/parallel.py dcp_size and its alias). 0.5.23 runs the host tier
# with it for MLA models only (hicache_hook.resolve_hicache_dcp_compatibility) and then keeps Mooncake's layer_first
# layout (resolve_storage_layout_compatibility); 0.5.16 rewrites that layout whatever the DCP size.
_DCP_FLAGS = ("--dcp-size", "--decode-context-parallel-size")
# The hybrid (mamba radix cache) architectures 0.5.23's ModelConfig gives MLA whatever their config says
# (configs/model_config.py _derive_model_shapes; arg_groups/overrides.py _MAMBA_RADIX_CACHE_ARCHS, GigaChat35's spec)
_MLA_HYBRIDS = ("KimiLinearForCausalLM", "KimiK3LinearForCausalLM", "KimiK3ForConditionalGeneration",
                "BailingMoeV2_5ForCausalLM", "BailingMoeV3ForCausalLM", "BailingMoeV3VLForConditionalGeneration",
                "GigaChat35ForCausalLM")


def dcp_size(args: Sequence[str]) -> int:
    """The decode context parallel size ``args`` asks for (1 when none)."""
    found = last_flag(args, *_DCP_FLAGS)
    return int_value(found[1]) or 1 if found else 1


def dcp_flag(args: Sequence[str]) -> str:
    """The spelling of the decode context parallel size ``args`` gives last (--dcp-size when none)."""
    found = last_flag(args, *_DCP_FLAGS)
    return found[0] if found else _DCP_FLAGS[0]


def _mla_hybrid(model: ModelCfg) -> bool:
    return model.architecture in _MLA_HYBRIDS


def _who(args: Sequence[str], extra: Sequence[str], flag: str, key: str) -> str:
    """Who gave ``flag`` its value: engine.extra_args when it has the flag, else the arm's key ("" leaves the flag out
    and the server's default in)."""
    value = flag_value(args, flag)
    if flag in extra_flag_names(extra):
        return f"engine.extra_args has {flag} {value}"
    return f"{key}={value}" if value else f"{key}='' (SGLang's default {_HICACHE_DEFAULTS[flag]})"


def host_tier_refusal(args: Sequence[str], extra: Sequence[str], arm: ArmSpec, model: ModelCfg) -> str:
    """Why SGLang 0.5.16 and 0.5.23 refuse the host tier of ``arm`` planned as ``args`` or run another one ("" when
    they run it as planned, or the arm has none). ``extra`` (engine.extra_args) only says who set a flag."""
    if not arm.host_tier:
        return ""
    owner = f"arm {arm.name}"
    if flag_value(args, "--hicache-host-memory-mode") == "buffer_only":
        # 0.5.23 hicache_hook.validate_hicache_host_memory_mode (0.5.16 has no such flag: its parser refuses it)
        return (f"{owner}: engine.extra_args has --hicache-host-memory-mode buffer_only, with which SGLang keeps "
                "no host tier: host memory only stages pages for the storage backend (write_back runs as "
                "write_through; with no --hicache-storage-backend it refuses to start), not the host tier the "
                "plan, the forecast and the record say; leave the flag out (cache, its default, is the host tier)")
    if has_flag(args, "--enable-int8-mamba-checkpoint"):  # 0.5.16 ServerArgs, 0.5.23 handle_int8_mamba_checkpoint
        return (f"{owner}: engine.extra_args has --enable-int8-mamba-checkpoint, which SGLang refuses with the "
                "host tier (its host-offload path is not int8-aware)")
    # hicache's layout/io normalisation (0.5.16 ServerArgs, 0.5.23 hicache_hook.resolve_layout_io_compatibility)
    # switches one of these silently: the record would name a host tier the server does not run.
    io_flag, layout_flag = "--hicache-io-backend", "--hicache-mem-layout"
    io = flag_value(args, io_flag) or _HICACHE_DEFAULTS[io_flag]
    layout = flag_value(args, layout_flag) or _HICACHE_DEFAULTS[layout_flag]
    if layout == "page_first_direct" and io == "kernel":
        return (f"{_who(args, extra, io_flag, 'arm.l2.hicache_io_backend')}: {owner}'s page_first_direct layout "
                "takes the direct io backend, and SGLang would switch to it; set direct")
    if layout == "page_first" and io == "direct":
        return (f"{_who(args, extra, layout_flag, 'arm.l2.hicache_mem_layout')}: {owner}'s direct io backend "
                "takes the page_first_direct layout, and SGLang would switch to it; set page_first_direct")
    storage = flag_value(args, "--hicache-storage-backend")
    kept = storage == "mooncake" and dcp_size(args) > 1 and _mla_hybrid(model)  # 0.5.23's; 0.5.16: below
    if storage in _LAYER_FIRST_REWRITTEN and layout == "layer_first" and io in _STORAGE_LAYOUT and not kept:
        return (f"{_who(args, extra, layout_flag, 'arm.l2.hicache_mem_layout')}: with engine.extra_args' "
                f"--hicache-storage-backend {storage} SGLang switches {owner}'s layer_first layout to "
                f"{_STORAGE_LAYOUT[io]}; set {_STORAGE_LAYOUT[io]}")
    if has_flag(args, "--enable-unified-memory") and layout == "page_first_direct":
        # 0.5.23 hicache_hook.resolve_unified_memory_layout_io (0.5.16 refuses the pair: host_tier_release_refusal)
        return (f"{owner}: engine.extra_args has --enable-unified-memory, with which SGLang switches the host "
                "tier's page_first_direct layout and direct io backend to page_first and kernel")
    return ""


def host_tier_release_refusal(extra: Sequence[str], release: tuple[int, ...], version: str, arm: ArmSpec,
                              model: ModelCfg) -> str:
    """The host tier's release-dependent rules for SGLang ``version`` (0.5.16 or later) on the hybrid ``model`` with
    ``engine.extra_args``: "" when it runs ``arm``'s host tier."""
    if not arm.host_tier:
        return ""
    if release < (0, 5, 23) and has_flag(extra, "--enable-unified-memory"):
        # 0.5.16 ServerArgs._handle_unified_memory_pool asserts it is "not yet compatible with hierarchical /
        # host-tiered KV cache"; 0.5.23 runs the pair (rewriting a page_first_direct layout: host_tier_refusal)
        return (f"arm {arm.name}: engine.extra_args has --enable-unified-memory, which SGLang {version} refuses with "
                "the host tier")
    if (dcp := dcp_size(extra)) <= 1:
        return ""
    dcp_said = f"{dcp_flag(extra)} {dcp}"
    spec = speculative_algorithm(extra)  # None with 0.5.23's aux-hidden-state capture, which resets it first
    if release >= (0, 5, 23) and spec not in (None, "DSPARK"):
        # 0.5.23 hicache_hook.resolve_hicache_dcp_compatibility compares the value as given: "dspark" is refused too
        return (f"arm {arm.name}: engine.extra_args has --speculative-algorithm {spec} with {dcp_said}, which SGLang "
                f"{version} refuses with the host tier (only DSPARK's draft host pool translates DCP indices); leave "
                "decode context parallelism out, or use --speculative-algorithm DSPARK")
    if release >= (0, 5, 23) and has_flag(extra, "--enable-hisparse"):  # the same hook: its host pool has no DCP
        return (f"arm {arm.name}: engine.extra_args has --enable-hisparse with {dcp_said}, which SGLang {version} "
                "refuses with the host tier (the HiSparse host pool translates no DCP indices); leave one of them out")
    if release >= (0, 5, 23) and not _mla_hybrid(model):
        # 0.5.23 hicache_hook.resolve_hicache_dcp_compatibility: only MLATokenToKVPoolHost translates DCP indices
        return (f"arm {arm.name}: engine.extra_args has {dcp_said}, with which SGLang {version} runs the "
                f"host tier only for MLA models ({model.architecture or model.name} is not one); leave decode "
                "context parallelism out")
    l2 = arm.knobs.l2
    layout = flag_value(extra, "--hicache-mem-layout") or (l2.hicache_mem_layout if l2 else "") or "page_first"
    io = flag_value(extra, "--hicache-io-backend") or (l2.hicache_io_backend if l2 else "") or "kernel"
    if (release < (0, 5, 23) and flag_value(extra, "--hicache-storage-backend") == "mooncake"
            and layout == "layer_first" and io in _STORAGE_LAYOUT):
        # 0.5.16 ServerArgs._resolve_storage_layout_compatibility (server_args.py:6269-6288) has no DCP exception
        return (f"arm {arm.name}: with engine.extra_args' --hicache-storage-backend mooncake SGLang {version} "
                f"switches the layer_first layout to {_STORAGE_LAYOUT[io]} (0.5.23 keeps it with --dcp-size > 1); "
                f"set {_STORAGE_LAYOUT[io]}")
    return ""
