"""Run in the vLLM env: parse ``vllm serve`` argvs (JSON lists, the part after ``serve``) with vLLM's own serve
parser and resolve each one's ``VllmConfig`` (``EngineArgs.create_engine_config``, what ``vllm serve`` does before
it loads a weight: model config from the local config.json, cache, scheduler and parallel config with their
validators and the hybrid model's own ``verify_and_update_config``). Prints one JSON object a line: what the parser
read and what start-up resolves, or the error start-up would stop with.

    python resolve_config.py '<json argv>'...

Not a test module: tests/vllm_cpu/test_vllm_config_resolution.py runs it with the env's interpreter. The platform
is vLLM's CPU one. An argument ``{"argv": [...], "cuda": true}`` also resolves the block a CUDA server would align
the config to (``cuda``: :func:`cuda_block`), with the CPU platform's one CUDA-foreign config change held off;
``"hook": "<architecture>"`` applies that architecture's config hook (MODELS_CONFIG_MAP) first, for a config
resolved as another class's twin (real_configs.py).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

PARSED = ("enable_prefix_caching", "mamba_cache_mode", "mamba_block_size", "block_size", "max_num_batched_tokens",
          "enable_chunked_prefill", "gpu_memory_utilization", "tensor_parallel_size", "pipeline_parallel_size",
          "prefill_context_parallel_size", "nnodes", "quantization", "mamba_ssm_cache_dtype",
          "disable_log_stats")


@contextmanager
def off_cpu_only_state_reset(on: bool) -> Iterator[None]:
    """The CPU platform stores a gated-delta SSM state in float32 on an AVX-512 BF16 CPU whatever the model asks
    (``CpuPlatform.check_and_update_config``, vllm/platforms/cpu.py); a CUDA server never runs that code, so its
    config is resolved with torch's BF16 query answering no."""
    import torch

    saved = torch.cpu._is_avx512_bf16_supported
    if on:
        torch.cpu._is_avx512_bf16_supported = lambda: False
    try:
        yield
    finally:
        torch.cpu._is_avx512_bf16_supported = saved


def cuda_block(cfg: Any) -> dict[str, object]:
    """The block a CUDA server serves this config with: ``Platform.update_block_size_for_backend`` (which
    ``CudaPlatform`` inherits) once the attention backend is known: phase 1 takes the backend's preferred block
    unless --block-size was given (the CPU platform's own 128 undone), phase 2 ``_align_hybrid_block_size`` for a
    hybrid model. The backend is FlashAttention, vLLM's first choice on SM80/SM90; every other it could pick there
    has the same smallest kernel block (``KERNEL_BLOCK`` in hybridbench/engines/vllm_page.py)."""
    from vllm.config.cache import CacheConfig
    from vllm.platforms.interface import Platform
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend

    cache = cfg.cache_config
    if not cache.user_specified_block_size:
        cache.block_size = FlashAttentionBackend.get_preferred_block_size(CacheConfig.DEFAULT_BLOCK_SIZE)
    if cfg.model_config.is_hybrid:
        Platform._align_hybrid_block_size(cfg, FlashAttentionBackend)
    return {"block_size": cache.block_size, "mamba_block_size": cache.mamba_block_size,
            "mamba_ssm_cache_dtype": cache.mamba_ssm_cache_dtype, "kernel_block": min(
                s.base if hasattr(s, "base") else s for s in FlashAttentionBackend.get_supported_kernel_block_sizes())}


def resolve(argv: list[str], *, cuda: bool = False, hook: str = "") -> dict[str, object]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.usage.usage_lib import UsageContext
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    root = FlexibleArgumentParser()
    ServeSubcommand().subparser_init(root.add_subparsers(dest="subparser"))
    try:
        args = root.parse_args(["serve", *argv])
    except SystemExit as exc:
        return {"parse_error": f"exit {exc.code}"}
    if getattr(args, "model_tag", None):  # what `vllm serve` does with the positional model
        args.model = args.model_tag
    out: dict[str, object] = {"parse_error": "", "parsed": {k: getattr(args, k, None) for k in PARSED}}
    try:
        with off_cpu_only_state_reset(cuda):
            cfg = AsyncEngineArgs.from_cli_args(args).create_engine_config(UsageContext.OPENAI_API_SERVER)
    except Exception as exc:  # the verdict is whatever start-up would die of
        out["error"] = " | ".join(f"{type(exc).__name__}: {exc}".splitlines()[:3])
        return out
    cache, sched, par = cfg.cache_config, cfg.scheduler_config, cfg.parallel_config
    out["error"] = ""
    out["resolved"] = {
        "enable_prefix_caching": cache.enable_prefix_caching, "mamba_cache_mode": cache.mamba_cache_mode,
        "max_num_batched_tokens": sched.max_num_batched_tokens, "enable_chunked_prefill": sched.enable_chunked_prefill,
        "gpu_memory_utilization": cache.gpu_memory_utilization, "world_size": par.world_size,
        "tensor_parallel_size": par.tensor_parallel_size, "quantization": cfg.model_config.quantization,
        "block_size": cache.block_size, "mamba_block_size": cache.mamba_block_size,
        "max_model_len": cfg.model_config.max_model_len,  # the longest prompt + answer it serves
        # the KV connector vLLM asks for hits beside its prefix cache (a host tier: --kv-offloading-size)
        "kv_connector": cfg.kv_transfer_config.kv_connector if cfg.kv_transfer_config is not None else None,
        # every field, for comparing two servers whole
        "scheduler": {k: repr(v) for k, v in sorted(vars(sched).items())},
        "cache": {k: repr(v) for k, v in sorted(vars(cache).items())},
    }
    if hook:
        from vllm.model_executor.models.config import MODELS_CONFIG_MAP

        MODELS_CONFIG_MAP[hook].verify_and_update_config(cfg)
    if cuda:
        out["cuda"] = cuda_block(cfg)
    return out


def main() -> None:
    logging.disable(logging.WARNING)
    for arg in sys.argv[1:]:  # one interpreter for many: importing vLLM costs seconds
        given = json.loads(arg)
        if not isinstance(given, dict):
            given = {"argv": given}
        print(json.dumps(resolve(given["argv"], cuda=bool(given.get("cuda")), hook=given.get("hook", "")),
                         default=str), flush=True)


if __name__ == "__main__":
    main()
