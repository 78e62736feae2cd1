"""Run in the TokenSpeed parser env: the page one release's own start-up code gives a model's config.

Reads one JSON object on stdin, ``{"version": "0.1.0" | "0.1.1", "flat": bool | null, "cases": [{"model": dir,
"tp": N, "page": N}, ...]}`` (``dir`` holds the model's config.json), and prints one JSON line per case. Each case
goes through what ``ts serve`` runs at start-up: ``prepare_server_args`` on ``--model dir --tensor-parallel-size N``
and the page flag, the release's ``ModelConfig``, then

* 0.1.1: ``registry._resolve_attn_side`` / ``_create_attn_config`` / ``_resolve_cache_family`` (the recipe
  dispatch), ``setup.cache_recipe`` and the recipe's ``setup()`` (the layout packed on a 16 GiB budget): prints the
  family, the recipe's ``prefix_granularity`` and the packed plan's, the page the scheduler gets; the state groups'
  checkpoint grains, and what the release's ``aligned_max_scheduled_tokens`` (what a cache-on server does to
  ``--chunked-prefill-size``) makes of each of ``case["chunks"]`` ("refused" where it raises);
* 0.1.0: ``registry.create_attn_components`` itself, which raises ``server_args.block_size`` for a GDN model on a
  flat-KV scheduler build before it needs a GPU (it then stops at the first collective: no process group here).
  ``flat`` sets the installed ``tokenspeed_scheduler``'s ``FLAT_KVCACHE`` (what the release's own
  ``scheduler_ext_flat_kvcache`` reads); null leaves the build on PYTHONPATH as it is. Prints the page after it
  and the line of registry.py it stopped at, so the test can tell it got past the raise.

GPU-only packages are stubbed (kernel_stub; ``compressed_tensors``, a quantization-config library the model config
module imports, and on 0.1.1 ``tokenspeed_scheduler``, whose 0.1.1-era build is not installed): no kernel runs. On
0.1.1 Nemotron-H's block kinds are mapped from the venv's transformers spelling to the release's (``page_011``).
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
import types
import warnings
from typing import Any


def _server_args(version: str, case: dict[str, Any]) -> Any:
    from tokenspeed.runtime.utils import server_args

    no_gpu = types.SimpleNamespace(is_amd=False, is_nvidia=False, is_hopper_plus=False, is_blackwell=False)
    server_args.current_platform = lambda: no_gpu
    flag = "--block-size" if version == "0.1.0" else "--prefix-granularity"
    return server_args.prepare_server_args(["--model", str(case["model"]), "--tensor-parallel-size",
                                            str(case["tp"]), flag, str(case["page"])])


def _model_config(args: Any) -> Any:
    """As the engine builds it (runtime/engine/event_loop.py)."""
    from tokenspeed.runtime.configs.model_config import ModelConfig

    return ModelConfig(args.model, trust_remote_code=args.trust_remote_code, revision=args.revision,
                       context_length=args.max_model_len, model_override_args=args.hf_overrides, dtype=args.dtype,
                       quantization=args.quantization, server_args=args)


def page_011(case: dict[str, Any]) -> dict[str, Any]:
    from tokenspeed.runtime.configs import nemotron_h_config
    from tokenspeed.runtime.layers.attention import registry

    # The parser venv's transformers (5.24) spells Nemotron-H's block kinds linear_attention / full_attention where
    # the release's pin (transformers==5.12.0, as its models/nemotron_h.py reads them) says mamba / attention: the
    # release's cache-layer map takes both, nothing else changes.
    labels = nemotron_h_config._CACHE_LABELS
    labels.update(linear_attention=labels["mamba"], full_attention=labels["attention"])
    from tokenspeed.runtime.layers.attention.kv_cache.recipes.setup import cache_recipe

    args = _server_args("0.1.1", case)
    model = _model_config(args)
    args.mapping.rank = 0
    config = registry._create_attn_config(args, model)
    family = registry._resolve_cache_family(registry._resolve_attn_side(model, None), config)
    recipe = cache_recipe(family, server_args=args, model_config=model, attn_config=config, draft_model_config=None,
                          draft_attn_config=None, cache_budget_bytes=16 << 30, probe_batch_rows=None,
                          decode_input_tokens=1, overlap_schedule_depth=0)
    spec = recipe.setup().spec
    from tokenspeed.runtime.engine.scheduler_utils import aligned_max_scheduled_tokens
    from tokenspeed.runtime.layers.attention.kv_cache.recipes import scheduler_bridge

    # The two fields the release's cache_group_config copies from each spec and aligned_max_scheduled_tokens reads;
    # its CacheGroupConfig is the (stubbed) C++ scheduler's struct, so they are carried in a namespace here.
    groups = [types.SimpleNamespace(family=scheduler_bridge._FAMILY_MAP[g.family],
                                    block_granularity=int(g.block_granularity)) for g in spec.cache_group_specs]
    floors: dict[str, int | str] = {}
    for chunk in case.get("chunks", ()):
        try:
            floors[str(chunk)] = aligned_max_scheduled_tokens(chunk, groups)
        except ValueError:
            floors[str(chunk)] = "refused"
    return {"family": family, "recipe_page": recipe.prefix_granularity, "page": spec.memory_plan.prefix_granularity,
            "state_grains": sorted(int(g.block_granularity) for g in spec.cache_group_specs if g.family == "state"),
            "floors": floors}


def page_010(case: dict[str, Any]) -> dict[str, Any]:
    from tokenspeed.runtime.layers.attention import registry
    from tokenspeed.runtime.utils.env import global_server_args_dict_update

    args = _server_args("0.1.0", case)
    model = _model_config(args)
    args.mapping.rank = 0
    global_server_args_dict_update(args)  # what the model runner does first: the state shapes read the mapping
    stopped = 0
    try:
        registry.create_attn_components(args, model, gpu_id=0, rank=0, gpu_memory=80 << 30)
    except Exception as exc:  # no GPU, no process group: where it stopped is printed
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith("attention/registry.py")
                  and f.name == "create_attn_components"]
        stopped = (frames[-1].lineno or 0) if frames else 0
    return {"page": args.block_size, "stopped_at": stopped}


def main() -> None:
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    request = json.load(sys.stdin)
    import sitecustomize  # tests/tokenspeed/kernel_stub

    extra = ("compressed_tensors",) if request["version"] == "0.1.0" else ("compressed_tensors", "tokenspeed_scheduler")
    sitecustomize.STUBBED = (*sitecustomize.STUBBED, *extra)
    if request["flat"] is not None:
        import tokenspeed_scheduler

        tokenspeed_scheduler.FLAT_KVCACHE = bool(request["flat"])
    run = page_010 if request["version"] == "0.1.0" else page_011
    for case in request["cases"]:
        print(json.dumps(run(case)), flush=True)


if __name__ == "__main__":
    main()
