"""What SGLang refuses, or quietly rewrites, when the server starts although its ``--help`` has every flag: found at
plan time and refused there with one line naming the key, not as a server that dies (or runs another arm) after the
plan, the forecast and the record were made.

:func:`startup_refusal` reads the planned command line (``engine.extra_args`` last, so an extra_args flag wins as
argparse's last value does) and holds for every release that has the flags: SGLang 0.5.16's ``ServerArgs`` checks
(server_args.py) and 0.5.23's ``arg_groups`` hooks agree on each of them. :func:`sglang_refusal` is one release's, on
the planned ``engine.gpu``. The rules live by what they are about: the kernels' (sglang_kernels), speculative
decoding's (sglang_speculative), the host tier's (sglang_host_tier); the cache's own are here.
tests/sglang_oracle/test_sglang_startup_departures.py runs each case through both releases' own resolution.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from hybridbench.config.schema import EngineCfg, ModelCfg
from hybridbench.engines.gpus import cuda_major
from hybridbench.engines.planned_line import flag_value, has_flag
from hybridbench.engines.sglang_host_tier import host_tier_refusal, host_tier_release_refusal
from hybridbench.engines.sglang_kernels import (
    mamba_rounding_refusal,
    trtllm_mha_gpu_refusal,
    trtllm_mha_page_refusal,
    trtllm_mha_refusal,
)
from hybridbench.engines.sglang_speculative import (
    dcp_speculative_refusal,
    draft_tokens,
    lazy_speculative_refusal,
    no_buffer_speculative_refusal,
    speculative_refusal,
)
from reference_impl.engine.arms import ArmSpec

__all__ = ["sglang_refusal", "startup_refusal"]

# --enable-deterministic-inference keeps the radix cache only on these attention backends
# (RADIX_SUPPORTED_DETERMINISTIC_ATTENTION_BACKEND: 0.5.16 server_args.py, 0.5.23 arg_groups/choices.py)
_DETERMINISTIC_RADIX_BACKENDS = ("ascend", "fa3", "fa4", "triton")
# Flags that ask for another prefix cache than the arm's. SGLang's create_tree_cache (mem_cache/registry.py, 0.5.16 and
# 0.5.23) builds a registered backend's cache for --radix-cache-backend; 0.5.23's default chain builds LMCache's or
# FlexKV's; 0.5.16's returns the unified cache for a hybrid model first, ignoring the last two flags, which still
# appear in the run's record.
_OTHER_CACHE = ("--radix-cache-backend", "--enable-lmcache", "--enable-flexkv")


def _cache_turned_off(args: Sequence[str], engine: EngineCfg) -> str:
    """The engine.extra_args flag with which SGLang runs with the radix cache off whatever the arm says ("": none)."""
    decode = flag_value(args, "--disaggregation-mode") == "decode"
    if decode and not has_flag(args, "--disaggregation-decode-enable-radix-cache"):
        # 0.5.16 and 0.5.23 arg_groups/pd_disaggregation_hook.py handle_pd_disaggregation
        return "--disaggregation-mode decode (a decode server runs without a radix cache)"
    if has_flag(args, "--enable-mis"):  # 0.5.16 ServerArgs._handle_multi_item_scoring; 0.5.23 attention_hook.py
        return "--enable-mis (multi-item scoring turns the radix cache off)"
    backend = flag_value(args, "--attention-backend")
    if backend == "dual_chunk_flash_attn":  # 0.5.16 ServerArgs (dual-chunk backend); gone from 0.5.23's choices
        return "--attention-backend dual_chunk_flash_attn (it turns the radix cache off)"
    if has_flag(args, "--enable-deterministic-inference"):
        if backend is None:  # 0.5.23 overrides._deterministic_attention_backend: flashinfer on Blackwell, else fa3
            backend = "flashinfer" if cuda_major(engine.gpu) == 10 else "fa3"
        if backend not in _DETERMINISTIC_RADIX_BACKENDS:  # ServerArgs._handle_deterministic_inference
            return (f"--enable-deterministic-inference with the {backend} attention backend (the radix cache stays "
                    f"on only with {', '.join(_DETERMINISTIC_RADIX_BACKENDS)})")
    return ""


def _extra_buffer_refusal(args: Sequence[str], arm: ArmSpec, engine: EngineCfg) -> str:
    """Why SGLang refuses the extra_buffer ``arm`` planned as ``args`` or runs it off its track interval ("")."""
    owner = f"arm {arm.name} ({arm.strategy})"
    # ServerArgs._validate_mamba_extra_buffer (0.5.16) / mamba_hook.validate_mamba_extra_buffer (0.5.23):
    # supports_mamba_cache_extra_buffer holds only on the triton linear-attention backend.
    if (backend := flag_value(args, "--linear-attn-backend")) not in (None, "triton"):
        return (f"{owner}: engine.extra_args has --linear-attn-backend {backend}; SGLang refuses extra_buffer unless "
                "the linear-attention backend is triton")
    if has_flag(args, "--enable-linear-replayssm"):  # its own check: 'requires ... no_buffer'
        return (f"{owner}: engine.extra_args has --enable-linear-replayssm, which SGLang runs only with "
                "--mamba-radix-cache-strategy no_buffer")
    drafts, filled = draft_tokens(args)
    if drafts is not None and drafts > engine.track_interval:
        # the same validators: assert mamba_track_interval >= speculative_num_draft_tokens. They run before the
        # speculative defaults are filled in, so a filled-in count slips past them (the server starts anyway).
        given = (f"--speculative-algorithm {flag_value(args, '--speculative-algorithm')} ({filled})" if filled else
                 f"--speculative-num-draft-tokens {drafts}")
        return (f"engine.track_interval={engine.track_interval}: {owner} with engine.extra_args {given} needs a track "
                f"interval of at least its {drafts} draft tokens (SGLang asserts it at start-up when they are given)")
    return ""


def startup_refusal(args: Sequence[str], extra: Sequence[str], arm: ArmSpec, engine: EngineCfg,
                    model: ModelCfg) -> str:
    """Why SGLang 0.5.16 and 0.5.23 refuse ``args`` (the planned server flags) at start-up, or run it as another
    arm than ``arm`` ("" when they run it as planned). ``extra`` (engine.extra_args) only says who set a flag."""
    owner = f"arm {arm.name}"
    if why := (speculative_refusal(args) or trtllm_mha_refusal(args, arm, engine)
               or mamba_rounding_refusal(args, engine)):
        return why
    if other := next((f for f in _OTHER_CACHE if has_flag(args, f)), ""):
        return (f"{owner}: engine.extra_args has {other}, which asks SGLang for another prefix cache than the arm's "
                "(0.5.23 builds that one; 0.5.16 ignores it for a hybrid model while the record would name it)")
    if arm.cache_on and (why := _cache_turned_off(args, engine)):
        return f"{owner}: engine.extra_args has {why}; the arm would be served with no prefix cache"
    if arm.cache_on and (cap := flag_value(args, "--mamba-max-states-per-path")) not in (None, "-1"):
        # 0.5.23 mem_cache/unified_cache/components/mamba.py _evict_excess_path_states, after every insert
        return (f"{owner}: engine.extra_args has --mamba-max-states-per-path {cap}, with which SGLang drops a path's "
                f"shallower mamba states after each insert: not the {arm.strategy} the arm, its forecast and the "
                "reference model run")
    if arm.extra_buffer and (why := _extra_buffer_refusal(args, arm, engine)):
        return why
    return host_tier_refusal(args, extra, arm, model)


def _release(version: str) -> tuple[int, ...] | None:
    """``0.5.16.post1`` -> (0, 5, 16); None when the version is unknown or not numbered."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(g) for g in m.groups()) if m else None


def sglang_refusal(  # noqa: PLR0917 - the positional hook server.EngineSpec.refusal calls
        model: ModelCfg, arm: ArmSpec, version: str, extra_args: Sequence[object] = (), gpu: str = "",
        page_size: int = 1) -> str:
    """Why the installed SGLang ``version`` cannot run ``arm`` on ``model`` (with ``engine.extra_args``, on
    ``engine.gpu``: "" is none the plan knows) although its ``--help`` has every flag ("" when it can, or when the
    version is unknown): the server would die at start-up or after loading the weights, or run something else."""
    release = _release(version)
    if release is None:
        return ""
    extra = [str(a) for a in extra_args]  # YAML may give numbers
    # the attention backend's and decode context parallelism's rules hold for every model, hybrid or dense
    if why := (trtllm_mha_gpu_refusal(extra, release, version, gpu)
               or trtllm_mha_page_refusal(extra, release, version, arm, page_size)
               or dcp_speculative_refusal(extra, release, version, gpu)):
        return why
    if not model.hybrid:
        return ""
    # The architecture names the class SGLang loads; a renamed model (model.name=my-nemotron) keeps it. Without one
    # (architecture ""), the name is all there is to go by.
    arch = model.architecture or model.name
    if "jamba" in arch.lower():
        return f"SGLang {version} has no Jamba model (no JambaForCausalLM under sglang/srt/models)"
    if release < (0, 5, 16):
        if arm.strategy == "extra_buffer_lazy":  # also absent from its --help's strategy choices
            return f"arm {arm.name}: SGLang {version} has no extra_buffer_lazy (PR #27118, in 0.5.16 and later)"
        if arm.host_tier:
            # 0.5.9 managers/scheduler.py:699-713 picks HiRadixCache before the hybrid check, and it refuses the
            # hybrid KV pool (mem_cache/hiradix_cache.py:69-97): the host tier for hybrid models came in 0.5.16.
            return (f"arm {arm.name}: SGLang {version} has no host tier for hybrid models (its HiRadixCache takes MHA "
                    "and MLA pools only); use SGLang 0.5.16 or later")
        if arm.strategy == "extra_buffer" and arch.lower().startswith(("nemotron-h", "nemotronhfor")):
            # 0.5.9 server_args.py:1548-1551 passes support_mamba_cache_extra_buffer=False for NemotronH.
            return f"arm {arm.name}: SGLang {version} refuses extra_buffer for NemotronHForCausalLM"
        if why := no_buffer_speculative_refusal(extra, release, version, arm):
            return why
    elif why := host_tier_release_refusal(extra, release, version, arm, model):
        return why
    if why := lazy_speculative_refusal(extra, release, version, arm):
        return why
    mode = flag_value(extra, "--disaggregation-mode")
    if arm.strategy == "extra_buffer_lazy" and mode not in (None, "null") and release >= (0, 5, 23):
        # 0.5.23 arg_groups/mamba_hook.validate_mamba_extra_buffer: "extra_buffer_lazy unsupported under PD
        # disaggregation" (its decode pool is not wired for lazy slots)
        return (f"arm {arm.name}: engine.extra_args has --disaggregation-mode {mode}; SGLang {version} refuses "
                "extra_buffer_lazy under prefill/decode disaggregation")
    return ""
