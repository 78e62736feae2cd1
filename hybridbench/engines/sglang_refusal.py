"""What SGLang refuses, or quietly rewrites, when the server starts although its ``--help`` has every flag: found at
plan time and refused there with one line naming the key, not as a server that dies (or runs another arm) after the
plan, the forecast and the record were made.

:func:`startup_refusal` reads the planned command line (``engine.extra_args`` last, so an extra_args flag wins as
argparse's last value does) and holds for every release that has the flags: SGLang 0.5.16's ``ServerArgs`` checks
(server_args.py) and 0.5.23's ``arg_groups`` hooks agree on each of them. :func:`sglang_refusal` is one release's, on
the planned ``engine.gpu``.
tests/sglang_oracle/test_sglang_startup_departures.py runs each case through both releases' own resolution.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from hybridbench.config.schema import EngineCfg, ModelCfg
from hybridbench.engines.owned_flags import extra_flag_names, last_flag
from reference_impl.engine.arms import ArmSpec

__all__ = ["sglang_refusal", "startup_refusal"]

# --enable-deterministic-inference keeps the radix cache only on these attention backends
# (RADIX_SUPPORTED_DETERMINISTIC_ATTENTION_BACKEND: 0.5.16 server_args.py, 0.5.23 arg_groups/choices.py)
_DETERMINISTIC_RADIX_BACKENDS = ("ascend", "fa3", "fa4", "triton")
# SM100 parts by engine.gpu's names (b200, gb200, b300, ...): SGLang's deterministic default backend differs there
_BLACKWELL = re.compile(r"g?b\d")
_HICACHE_DEFAULTS = {"--hicache-io-backend": "kernel", "--hicache-mem-layout": "page_first"}  # SGLang's own
# Flags that ask for another prefix cache than the arm's. SGLang's create_tree_cache (mem_cache/registry.py, 0.5.16 and
# 0.5.23) builds a registered backend's cache for --radix-cache-backend; 0.5.23's default chain builds LMCache's or
# FlexKV's; 0.5.16's returns the unified cache for a hybrid model first, ignoring the last two flags, which still
# appear in the run's record.
_OTHER_CACHE = ("--radix-cache-backend", "--enable-lmcache", "--enable-flexkv")
# Host-tier storage backends whose layout SGLang rewrites from layer_first (0.5.16 ServerArgs
# _resolve_storage_layout_compatibility: mooncake; 0.5.23 hicache_hook.resolve_storage_layout_compatibility: also
# npu_memcache), to this layout per io backend.
_LAYER_FIRST_REWRITTEN = ("mooncake", "npu_memcache")
_STORAGE_LAYOUT = {"direct": "page_first_direct", "kernel": "page_first"}
# The draft tokens SGLang fills in when only --speculative-algorithm is given (speculative_hook.py, 0.5.16 and 0.5.23):
# NGRAM's _handle_ngram sets 12; the EAGLE family takes _auto_choose_speculative_params' (steps 3, top-k 1) for every
# architecture but Llama's and Grok's (no hybrid model), and with top-k 1 the draft tokens are always steps + 1.
_EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
_NGRAM_DRAFTS, _AUTO_STEPS = 12, 3
# The attention-backend flags whose trtllm_mha SGLang runs only on pages of these sizes, switching any other page size
# to 64 (0.5.9 server_args.py:1894-1909, 0.5.16 arg_groups/overrides.py:1732-1742, 0.5.23 overrides.py:1174-1187,
# which also takes 128 and reads the draft's backend: sglang_refusal, which knows the release).
_TRTLLM_MHA_FLAGS = ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend")
_TRTLLM_MHA_PAGES = (16, 32, 64)  # said so in the refusals
_DRAFT_BACKEND = "--speculative-draft-attention-backend"
# engine.gpu -> the CUDA capability major SGLang's is_sm90/is_sm100/is_sm120 probes answer for it (Blackwell's names
# by _BLACKWELL). trtllm_mha runs on some majors only; a GPU not named here is left to the server.
_SM_MAJOR = {"a100": 8, "h100": 9, "h200": 9}
_BLACKWELL_ONLY: tuple[int, ...] = (10,)
_SM90_ON: tuple[int, ...] = (9, 10, 12)
_SMS_SAID = {_BLACKWELL_ONLY: "Blackwell (SM100) GPUs", _SM90_ON: "Hopper (SM90) and Blackwell (SM100, SM120) GPUs"}
_ATTN_CP_FLAGS = ("--attn-cp-size", "--attention-context-parallel-size")  # 0.5.23 prefill context parallelism
# Decode context parallelism (0.5.23 arg_groups/fields/parallel.py dcp_size and its alias). 0.5.23 runs the host tier
# with it for MLA models only (hicache_hook.resolve_hicache_dcp_compatibility) and then keeps Mooncake's layer_first
# layout (resolve_storage_layout_compatibility); 0.5.16 rewrites that layout whatever the DCP size.
_DCP_FLAGS = ("--dcp-size", "--decode-context-parallel-size")
# The hybrid (mamba radix cache) architectures 0.5.23's ModelConfig gives MLA whatever their config says
# (configs/model_config.py _derive_model_shapes; arg_groups/overrides.py _MAMBA_RADIX_CACHE_ARCHS, GigaChat35's spec)
_MLA_HYBRIDS = ("KimiLinearForCausalLM", "KimiK3LinearForCausalLM", "KimiK3ForConditionalGeneration",
                "BailingMoeV2_5ForCausalLM", "BailingMoeV3ForCausalLM", "BailingMoeV3VLForConditionalGeneration",
                "GigaChat35ForCausalLM")


def _dcp(args: Sequence[str]) -> int:
    found = last_flag(args, *_DCP_FLAGS)
    return _int(found[1]) or 1 if found else 1


def _mla_hybrid(model: ModelCfg) -> bool:
    return model.architecture in _MLA_HYBRIDS


def _last(args: Sequence[str], name: str) -> str | None:
    """The value argparse keeps for ``name`` (None when not given)."""
    found = last_flag(args, name)
    return found[1] if found else None


def _has(args: Sequence[str], *names: str) -> bool:
    return any(a == n or a.startswith(n + "=") for a in args for n in names)


def _who(args: Sequence[str], extra: Sequence[str], flag: str, key: str) -> str:
    """Who gave ``flag`` its value: engine.extra_args when it has the flag, else the arm's key ("" leaves the flag out
    and the server's default in)."""
    value = _last(args, flag)
    if flag in extra_flag_names(extra):
        return f"engine.extra_args has {flag} {value}"
    return f"{key}={value}" if value else f"{key}='' (SGLang's default {_HICACHE_DEFAULTS[flag]})"


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isascii() and value.isdigit() else None


def _draft_tokens(args: Sequence[str]) -> tuple[int | None, str]:
    """The draft tokens SGLang verifies per step with ``args``, and how they came ("" when given): None where the plan
    cannot know them (DFLASH's and DSPARK's come from the draft model's config; --speculative-adaptive picks steps)."""
    given = _int(_last(args, "--speculative-num-draft-tokens"))
    algorithm = (_last(args, "--speculative-algorithm") or "").upper()
    if algorithm == "NGRAM" and given is None:
        return _NGRAM_DRAFTS, "SGLang fills in 12 for NGRAM"
    if algorithm in _EAGLE_FAMILY and not _has(args, "--speculative-adaptive"):
        steps, topk = _int(_last(args, "--speculative-num-steps")), _int(_last(args, "--speculative-eagle-topk"))
        auto = steps is None
        if auto:  # _auto_choose_speculative_params (SGLang asserts top-k and draft tokens are unset then)
            steps, topk = _AUTO_STEPS, 1
        if topk == 1 and steps is not None and steps + 1 != given:
            how = f"its automatic {steps} steps" if auto else f"--speculative-num-steps {steps}"
            return steps + 1, f"SGLang gives {algorithm} {how} + 1 with top-k 1"
    return given, ""


def _speculative_refusal(args: Sequence[str]) -> str:
    """Why SGLang stops at start-up on ``args``' EAGLE-family settings ("" when it does not). With no
    --speculative-num-steps it picks steps, top-k and draft tokens itself and asserts the other two were not given;
    with steps but no --speculative-eagle-topk it fills in neither and compares the missing top-k with 1, a TypeError
    (0.5.9 server_args.py:2422-2452; 0.5.16 arg_groups/speculative_hook.py:555-571 and :639-641; 0.5.23
    speculative_hook.py:1159-1163 and :1273-1275). --speculative-adaptive picks them its own way (not checked)."""
    algorithm = (_last(args, "--speculative-algorithm") or "").upper()
    if algorithm not in _EAGLE_FAMILY or _has(args, "--speculative-adaptive"):
        return ""
    steps, topk = _has(args, "--speculative-num-steps"), _has(args, "--speculative-eagle-topk")
    if not steps and (given := [f for f in ("--speculative-eagle-topk", "--speculative-num-draft-tokens")
                                if _has(args, f)]):
        return (f"engine.extra_args has --speculative-algorithm {algorithm} with {' and '.join(given)} but no "
                "--speculative-num-steps: SGLang then picks all three itself and asserts at start-up that none was "
                "given; give --speculative-num-steps and --speculative-eagle-topk too, or none of them")
    if steps and not topk:
        return (f"engine.extra_args has --speculative-algorithm {algorithm} with --speculative-num-steps but no "
                "--speculative-eagle-topk: SGLang fills in no top-k then and stops at start-up comparing the missing "
                "one; give --speculative-eagle-topk too (1 for a chain)")
    return ""


def _trtllm_mha_refusal(args: Sequence[str], arm: ArmSpec, engine: EngineCfg) -> str:
    """Why SGLang does not run ``arm`` as planned with a trtllm_mha attention backend ("" when it does)."""
    flag = next((f for f in _TRTLLM_MHA_FLAGS if _last(args, f) == "trtllm_mha"), "")
    if not flag:
        return ""
    if arm.strategy == "no_buffer" and flag == "--attention-backend":
        # 0.5.16 ServerArgs._validate_mamba_no_buffer (server_args.py:4827-4829), 0.5.23 mamba_hook.py:161-163
        # validate_mamba_no_buffer; 0.5.9 turns the radix cache off instead (server_args.py:1752-1758)
        return (f"arm {arm.name}: engine.extra_args has --attention-backend trtllm_mha, which SGLang refuses with "
                "--mamba-radix-cache-strategy no_buffer (0.5.9 turns the radix cache off instead); use another "
                "attention backend (triton, fa3)")
    if max(engine.page_size, 1) not in (*_TRTLLM_MHA_PAGES, 128):  # 128: a release's own rule (sglang_refusal)
        return _trtllm_mha_page_said(engine.page_size, flag, "SGLang", "16, 32 or 64 (0.5.23: or 128)", arm)
    return ""


def _trtllm_mha_page_said(page: int, flag: str, who: str, pages: str, arm: ArmSpec) -> str:
    return (f"engine.page_size={page}: engine.extra_args has {flag} trtllm_mha, with which {who} runs pages of "
            f"{pages} tokens only: it would run arm {arm.name} on pages of 64 while the plan, the forecast and the "
            f"record say {page}; set engine.page_size to one of them"
            + (" (a no_buffer arm needs 1: use another attention backend)" if arm.strategy == "no_buffer" else ""))


def _trtllm_mha_page_refusal(extra: Sequence[str], release: tuple[int, ...], version: str, arm: ArmSpec,
                             page_size: int) -> str:
    """The page rule's release-dependent half: 0.5.9 and 0.5.16 switch 128 to 64; 0.5.23 keeps 128 and also reads
    the draft model's backend (overrides.py:1174-1187), which the rule for every release does not."""
    newest = release >= (0, 5, 23)
    flags = (*_TRTLLM_MHA_FLAGS, _DRAFT_BACKEND) if newest else _TRTLLM_MHA_FLAGS
    flag = next((f for f in flags if _last(extra, f) == "trtllm_mha"), "")
    page = max(page_size, 1)
    if not flag or page in _TRTLLM_MHA_PAGES or (newest and page == 128):
        return ""
    if page != 128 and flag != _DRAFT_BACKEND:
        return ""  # startup_refusal says it, for every release
    return _trtllm_mha_page_said(page_size, flag, f"SGLang {version}",
                                 "16, 32, 64 or 128" if newest else "16, 32 or 64 (0.5.23: or 128)", arm)


def _sm_major(gpu: str) -> int | None:
    return 10 if _BLACKWELL.match(gpu) else _SM_MAJOR.get(gpu)  # engine.gpu comes lowercased (config.gpu_kind)


def _trtllm_mha_gpu_refusal(extra: Sequence[str], release: tuple[int, ...], version: str, gpu: str) -> str:
    """Why SGLang ``version`` refuses ``extra``'s trtllm_mha attention backend on engine.gpu at start-up ("" when it
    runs it, or when the plan does not know the GPU). A stage's backend is its own flag's, else --attention-backend's.
    0.5.9 (server_args.py:1894-1902) takes any of the three flags it reads naming it on Blackwell only; 0.5.16
    (server_args.py:5022-5032) prefill on Blackwell only and decode on SM90 too; 0.5.23 (attention_hook.py:197-233)
    both on SM90 too, prefill with context parallelism on Blackwell only (its SM90 kernel cannot mask CP shards)."""
    major = _sm_major(gpu)
    if major is None:
        return ""
    given = {f: _last(extra, f) for f in _TRTLLM_MHA_FLAGS}
    if release < (0, 5, 16):  # equal prefill and decode backends replace --attention-backend first (:1776-1779)
        prefill, decode = given["--prefill-attention-backend"], given["--decode-attention-backend"]
        named = {**given, "--attention-backend": prefill} if prefill and prefill == decode else given
        stages = [("any", f) for f in _TRTLLM_MHA_FLAGS if named[f] == "trtllm_mha"][:1]
    else:
        own = {stage: f"--{stage}-attention-backend" for stage in ("prefill", "decode")}
        deciding = {stage: flag if given[flag] else "--attention-backend" for stage, flag in own.items()}
        stages = [(stage, flag) for stage, flag in deciding.items() if given[flag] == "trtllm_mha"]
    cp = last_flag(extra, *_ATTN_CP_FLAGS)
    for stage, flag in stages:
        runs_on, why, fix = _SM90_ON, "", "use another attention backend (triton, flashinfer)"
        if release < (0, 5, 16) or (stage == "prefill" and release < (0, 5, 23)):
            runs_on = _BLACKWELL_ONLY
            if major in _SM90_ON and stage == "prefill":  # 0.5.16 on an H100: decode may keep it
                fix = ("give --prefill-attention-backend another backend (fa3, triton) to keep trtllm_mha for decode, "
                       "or use SGLang 0.5.23 (it runs trtllm_mha prefill on SM90)")
        elif stage == "prefill" and cp and (_int(cp[1]) or 1) > 1 and major in _SM90_ON:
            runs_on, why = _BLACKWELL_ONLY, f" with prefill context parallelism ({cp[0]} {cp[1]})"
            fix = f"leave {cp[0]} out, or give --prefill-attention-backend another backend (fa3, triton)"
        if major not in runs_on:
            used = "" if stage == "any" else f" for {stage}"
            return (f"engine.gpu={gpu}: engine.extra_args has {flag} trtllm_mha, which SGLang {version} runs{used} "
                    f"on {_SMS_SAID[runs_on]} only{why}: the server would refuse it at start-up; {fix}")
    return ""


def _cache_turned_off(args: Sequence[str], engine: EngineCfg) -> str:
    """The engine.extra_args flag with which SGLang runs with the radix cache off whatever the arm says ("": none)."""
    decode = _last(args, "--disaggregation-mode") == "decode"
    if decode and not _has(args, "--disaggregation-decode-enable-radix-cache"):
        # 0.5.16 and 0.5.23 arg_groups/pd_disaggregation_hook.py handle_pd_disaggregation
        return "--disaggregation-mode decode (a decode server runs without a radix cache)"
    if _has(args, "--enable-mis"):  # 0.5.16 ServerArgs._handle_multi_item_scoring; 0.5.23 attention_hook.py
        return "--enable-mis (multi-item scoring turns the radix cache off)"
    backend = _last(args, "--attention-backend")
    if backend == "dual_chunk_flash_attn":  # 0.5.16 ServerArgs (dual-chunk backend); gone from 0.5.23's choices
        return "--attention-backend dual_chunk_flash_attn (it turns the radix cache off)"
    if _has(args, "--enable-deterministic-inference"):
        if backend is None:  # 0.5.23 overrides._deterministic_attention_backend: flashinfer on Blackwell, else fa3
            backend = "flashinfer" if _BLACKWELL.match(engine.gpu) else "fa3"
        if backend not in _DETERMINISTIC_RADIX_BACKENDS:  # ServerArgs._handle_deterministic_inference
            return (f"--enable-deterministic-inference with the {backend} attention backend (the radix cache stays "
                    f"on only with {', '.join(_DETERMINISTIC_RADIX_BACKENDS)})")
    return ""


def startup_refusal(args: Sequence[str], extra: Sequence[str], arm: ArmSpec, engine: EngineCfg,
                    model: ModelCfg) -> str:
    """Why SGLang 0.5.16 and 0.5.23 refuse ``args`` (the planned server flags) at start-up, or run it as another
    arm than ``arm`` ("" when they run it as planned). ``extra`` (engine.extra_args) only says who set a flag."""
    owner = f"arm {arm.name}"
    if why := _speculative_refusal(args) or _trtllm_mha_refusal(args, arm, engine):
        return why
    if other := next((f for f in _OTHER_CACHE if _has(args, f)), ""):
        return (f"{owner}: engine.extra_args has {other}, which asks SGLang for another prefix cache than the arm's "
                "(0.5.23 builds that one; 0.5.16 ignores it for a hybrid model while the record would name it)")
    if arm.cache_on and (why := _cache_turned_off(args, engine)):
        return f"{owner}: engine.extra_args has {why}; the arm would be served with no prefix cache"
    if arm.cache_on and (cap := _last(args, "--mamba-max-states-per-path")) not in (None, "-1"):
        # 0.5.23 mem_cache/unified_cache/components/mamba.py _evict_excess_path_states, after every insert
        return (f"{owner}: engine.extra_args has --mamba-max-states-per-path {cap}, with which SGLang drops a path's "
                f"shallower mamba states after each insert: not the {arm.strategy} the arm, its forecast and the "
                "reference model run")
    if arm.extra_buffer:
        # ServerArgs._validate_mamba_extra_buffer (0.5.16) / mamba_hook.validate_mamba_extra_buffer (0.5.23):
        # supports_mamba_cache_extra_buffer holds only on the triton linear-attention backend.
        if (backend := _last(args, "--linear-attn-backend")) not in (None, "triton"):
            return (f"{owner} ({arm.strategy}): engine.extra_args has --linear-attn-backend {backend}; SGLang "
                    "refuses extra_buffer unless the linear-attention backend is triton")
        if _has(args, "--enable-linear-replayssm"):  # its own check: 'requires ... no_buffer'
            return (f"{owner} ({arm.strategy}): engine.extra_args has --enable-linear-replayssm, which SGLang runs "
                    "only with --mamba-radix-cache-strategy no_buffer")
        drafts, filled = _draft_tokens(args)
        if drafts is not None and drafts > engine.track_interval:
            # the same validators: assert mamba_track_interval >= speculative_num_draft_tokens. They run before the
            # speculative defaults are filled in, so a filled-in count slips past them (the server starts anyway).
            given = (f"--speculative-algorithm {_last(args, '--speculative-algorithm')} ({filled})" if filled else
                     f"--speculative-num-draft-tokens {drafts}")
            return (f"engine.track_interval={engine.track_interval}: {owner} ({arm.strategy}) with engine.extra_args "
                    f"{given} needs a track interval of at least its {drafts} draft tokens (SGLang asserts it at "
                    "start-up when they are given)")
    if arm.host_tier:
        if _last(args, "--hicache-host-memory-mode") == "buffer_only":
            # 0.5.23 hicache_hook.validate_hicache_host_memory_mode (0.5.16 has no such flag: its parser refuses it)
            return (f"{owner}: engine.extra_args has --hicache-host-memory-mode buffer_only, with which SGLang keeps "
                    "no host tier: host memory only stages pages for the storage backend (write_back runs as "
                    "write_through; with no --hicache-storage-backend it refuses to start), not the host tier the "
                    "plan, the forecast and the record say; leave the flag out (cache, its default, is the host tier)")
        if _has(args, "--enable-int8-mamba-checkpoint"):  # 0.5.16 ServerArgs, 0.5.23 handle_int8_mamba_checkpoint
            return (f"{owner}: engine.extra_args has --enable-int8-mamba-checkpoint, which SGLang refuses with the "
                    "host tier (its host-offload path is not int8-aware)")
        # hicache's layout/io normalisation (0.5.16 ServerArgs, 0.5.23 hicache_hook.resolve_layout_io_compatibility)
        # switches one of these silently: the record would name a host tier the server does not run.
        io_flag, layout_flag = "--hicache-io-backend", "--hicache-mem-layout"
        io = _last(args, io_flag) or _HICACHE_DEFAULTS[io_flag]
        layout = _last(args, layout_flag) or _HICACHE_DEFAULTS[layout_flag]
        if layout == "page_first_direct" and io == "kernel":
            return (f"{_who(args, extra, io_flag, 'arm.l2.hicache_io_backend')}: {owner}'s page_first_direct layout "
                    "takes the direct io backend, and SGLang would switch to it; set direct")
        if layout == "page_first" and io == "direct":
            return (f"{_who(args, extra, layout_flag, 'arm.l2.hicache_mem_layout')}: {owner}'s direct io backend "
                    "takes the page_first_direct layout, and SGLang would switch to it; set page_first_direct")
        storage = _last(args, "--hicache-storage-backend")
        kept = storage == "mooncake" and _dcp(args) > 1 and _mla_hybrid(model)  # 0.5.23's; 0.5.16: sglang_refusal
        if storage in _LAYER_FIRST_REWRITTEN and layout == "layer_first" and io in _STORAGE_LAYOUT and not kept:
            return (f"{_who(args, extra, layout_flag, 'arm.l2.hicache_mem_layout')}: with engine.extra_args' "
                    f"--hicache-storage-backend {storage} SGLang switches {owner}'s layer_first layout to "
                    f"{_STORAGE_LAYOUT[io]}; set {_STORAGE_LAYOUT[io]}")
        if _has(args, "--enable-unified-memory") and layout == "page_first_direct":
            # 0.5.23 hicache_hook.resolve_unified_memory_layout_io (0.5.16 refuses the pair: sglang_refusal)
            return (f"{owner}: engine.extra_args has --enable-unified-memory, with which SGLang switches the host "
                    "tier's page_first_direct layout and direct io backend to page_first and kernel")
    return ""


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
    # the attention backend's rules hold for every model, hybrid or dense
    if why := _trtllm_mha_gpu_refusal(extra, release, version, gpu) or _trtllm_mha_page_refusal(
            extra, release, version, arm, page_size):
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
    if arm.host_tier and release < (0, 5, 23) and _has(extra, "--enable-unified-memory"):
        # 0.5.16 ServerArgs._handle_unified_memory_pool asserts it is "not yet compatible with hierarchical /
        # host-tiered KV cache"; 0.5.23 runs the pair (rewriting a page_first_direct layout: startup_refusal)
        return (f"arm {arm.name}: engine.extra_args has --enable-unified-memory, which SGLang {version} refuses with "
                "the host tier")
    if arm.host_tier and (dcp := _dcp(extra)) > 1:
        if release >= (0, 5, 23) and not _mla_hybrid(model):
            # 0.5.23 hicache_hook.resolve_hicache_dcp_compatibility: only MLATokenToKVPoolHost translates DCP indices
            return (f"arm {arm.name}: engine.extra_args has --dcp-size {dcp}, with which SGLang {version} runs the "
                    f"host tier only for MLA models ({arch} is not one); leave decode context parallelism out")
        l2 = arm.knobs.l2
        layout = _last(extra, "--hicache-mem-layout") or (l2.hicache_mem_layout if l2 else "") or "page_first"
        io = _last(extra, "--hicache-io-backend") or (l2.hicache_io_backend if l2 else "") or "kernel"
        if (release < (0, 5, 23) and _last(extra, "--hicache-storage-backend") == "mooncake"
                and layout == "layer_first" and io in _STORAGE_LAYOUT):
            # 0.5.16 ServerArgs._resolve_storage_layout_compatibility (server_args.py:6269-6288) has no DCP exception
            return (f"arm {arm.name}: with engine.extra_args' --hicache-storage-backend mooncake SGLang {version} "
                    f"switches the layer_first layout to {_STORAGE_LAYOUT[io]} (0.5.23 keeps it with --dcp-size > 1); "
                    f"set {_STORAGE_LAYOUT[io]}")
    if arm.strategy == "extra_buffer_lazy":
        spec = next((f for f in ("--speculative-algorithm", "--speculative-num-draft-tokens") if _has(extra, f)), "")
        if spec and release < (0, 5, 23):
            # 0.5.16 ServerArgs._validate_mamba_extra_buffer asserts "extra_buffer_lazy unsupported with spec." once
            # the draft tokens are known, and runs before they are filled in from the algorithm's defaults, so
            # --speculative-algorithm alone starts a combination it does not support (its verify has no lazy
            # track plan). Lazy with speculative decoding came with PR #30437 (0.5.23 has it).
            return (f"arm {arm.name}: engine.extra_args has {spec}; SGLang {version} does not support "
                    "extra_buffer_lazy with speculative decoding (PR #30437, in 0.5.23)")
        mode = _last(extra, "--disaggregation-mode")
        if mode not in (None, "null") and release >= (0, 5, 23):
            # 0.5.23 arg_groups/mamba_hook.validate_mamba_extra_buffer: "extra_buffer_lazy unsupported under PD
            # disaggregation" (its decode pool is not wired for lazy slots)
            return (f"arm {arm.name}: engine.extra_args has --disaggregation-mode {mode}; SGLang {version} refuses "
                    "extra_buffer_lazy under prefill/decode disaggregation")
    return ""
