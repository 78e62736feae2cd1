"""Run in the vLLM env: parse ``vllm serve`` argvs (JSON lists, the part after ``serve``) with vLLM's own serve
parser and resolve each one's ``VllmConfig`` (``EngineArgs.create_engine_config``, what ``vllm serve`` does before
it loads a weight: model config from the local config.json, cache, scheduler and parallel config with their
validators and the hybrid model's own ``verify_and_update_config``). Prints one JSON object a line: what the parser
read and what start-up resolves, or the error start-up would stop with.

    python resolve_config.py '<json argv>'...

Not a test module: tests/vllm_cpu/test_vllm_config_resolution.py runs it with the env's interpreter. The platform
is vLLM's CPU one; what only a GPU platform decides (attention backends, the hybrid block alignment that follows
the model's layers) is not resolved here.
"""

from __future__ import annotations

import json
import logging
import sys

PARSED = ("enable_prefix_caching", "mamba_cache_mode", "mamba_block_size", "block_size", "max_num_batched_tokens",
          "enable_chunked_prefill", "gpu_memory_utilization", "tensor_parallel_size", "pipeline_parallel_size",
          "prefill_context_parallel_size", "nnodes", "quantization", "mamba_ssm_cache_dtype")


def resolve(argv: list[str]) -> dict[str, object]:
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
    }
    return out


def main() -> None:
    logging.disable(logging.WARNING)
    for arg in sys.argv[1:]:  # one interpreter for many: importing vLLM costs seconds
        print(json.dumps(resolve(json.loads(arg)), default=str), flush=True)


if __name__ == "__main__":
    main()
