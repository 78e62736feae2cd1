"""The block (page) a vLLM 0.32.0 server on CUDA GPUs really serves with, from the config alone: the token
granularity of its KV pages and of its prefix-cache hits, which the plan records.

A hybrid model's block is vLLM's to choose (``Platform._align_hybrid_block_size``, vllm/platforms/interface.py, run
by ``update_block_size_for_backend`` once the attention backend is known): it raises the attention block until one
attention layer's page holds one mamba layer's state, in multiples of ``K = max(the backend's smallest kernel block,
the block asked)``::

    block = K * ceil(mamba page / (K * attention bytes per token)), then up to a multiple of the kernel block

with both sizes per layer and per GPU (``FullAttentionSpec`` / ``MambaSpec.page_size_bytes``): K and V of
``max(1, kv_heads // tp)`` heads in the model dtype; the conv window (model dtype) and the temporal state (vLLM's
SSM dtype) with channels and heads split over TP. On Qwen3-Next at TP 4 that is 272 tokens, on Nemotron-H-8B 1040:
a ``--block-size 16`` runs as that block. The align cache mode keeps states at its ends (``mamba_block_size =
block_size``) and hits land on it (``resolve_kv_cache_block_sizes``: attention and mamba groups alike). A dense
model keeps the block asked, 16 when none is (``CacheConfig.DEFAULT_BLOCK_SIZE``).

On A100, H100 and H200 every attention backend vLLM picks (FlashAttention, FlashInfer, Triton, FlexAttention)
takes blocks of multiples of 16 and none smaller, so the block does not depend on which is picked; Blackwell's
FlashAttention-4 head-256 kernel takes 128, so other GPUs are not computed here. Neither is a model outside
``reference_impl.models``, the CPU build (its block follows the CPU's instruction set), nor a server whose
``engine.extra_args`` change an input (``PAGE_FLAGS``). tests/vllm_cpu/test_vllm_config_resolution.py runs
vLLM's own alignment on the real models' configs against :func:`vllm_page`.
"""

from __future__ import annotations

from dataclasses import dataclass

from hybridbench.config.schema import EngineCfg, ModelCfg, RunCfg
from hybridbench.engines.owned_flags import given_flags
from hybridbench.errors import ConfigError
from reference_impl.model_spec import STATE_DTYPES
from reference_impl.models import MODELS

__all__ = ["KERNEL_BLOCK", "PAGE_FLAGS", "SSM_DTYPES", "VllmPage", "planned_block", "refuse_replaced_page", "vllm_page"]

KERNEL_BLOCK = 16  # the smallest block of every attention backend vLLM 0.32.0 picks on SM80/SM90 (and its default)
_CUDA_GPUS = frozenset({"a100", "h100", "h200"})
# vLLM's SSM (temporal) state dtype when --mamba-ssm-cache-dtype is not given (model.mamba_ssm_dtype=""): Nemotron-H's
# config hook defaults it to float32, Qwen3.5's takes its checkpoint's "mamba_ssm_dtype" (float32); Qwen3-Next and
# Jamba have none, so the state takes the conv state's dtype, the model's (vllm/model_executor/models/config.py,
# MambaStateDtypeCalculator._mamba_state_dtype).
SSM_DTYPES = {"nemotron-h-8b": "float32", "qwen3.5-9b": "float32", "qwen3.5-122b-a10b": "float32",
              "qwen3-next-80b-a3b": "bfloat16", "jamba-1.5-mini": "bfloat16"}
# Mamba2 groups, which vLLM pads to a multiple of TP (extra_groups_for_head_shards): computed only where none is added.
_MAMBA2_GROUPS = {"nemotron-h-8b": 8}
# engine.extra_args flags that change an input of the block or of the hit granularity: the model or KV dtype, the
# state dtype or shape (speculative tokens add conv rows, ReplaySSM adds buffers), the attention backend, the config
# itself, decode context parallelism (attention blocks scaled by it), a finer prefix-match unit. (A --config YAML
# of flags is refused outright: vllm_cmd.)
PAGE_FLAGS = ("--dtype", "--kv-cache-dtype", "--kv-cache-dtype-skip-layers", "--mamba-cache-dtype", "--use-replayssm",
              "--speculative-config", "-sc", "--attention-backend", "--attention-config", "-ac", "--hf-overrides",
              "--decode-context-parallel-size", "-dcp", "--prefix-match-unit")


@dataclass(frozen=True, slots=True)
class VllmPage:
    tokens: int  # the block vLLM serves with; 0 when it cannot be said from the config
    why: str  # how vLLM arrives at it, or why it cannot be said


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _unknown(model: ModelCfg, engine: EngineCfg) -> str:
    """Why the block cannot be said from the config ("" when it can)."""
    given = sorted(set(PAGE_FLAGS) & given_flags([str(a) for a in engine.extra_args]))
    if given:
        return f"engine.extra_args has {given[0]}, which changes the block vLLM sizes at start-up"
    cuda, asked = engine.gpu in _CUDA_GPUS, engine.page_size  # engine.gpu comes lowercased (config.gpu_kind)
    if cuda and asked > 1 and asked % KERNEL_BLOCK:  # no backend is valid for it: vLLM stops at start-up
        return (f"vLLM's attention backends on {engine.gpu} take blocks of a multiple of {KERNEL_BLOCK} tokens, "
                f"not {asked}")
    if not cuda and (model.hybrid or asked <= 1):  # a dense model keeps a block it is given
        return (f"vLLM sizes its block on engine.gpu={engine.gpu} at start-up from the attention backend it picks "
                f"there; hybridbench computes it for {', '.join(sorted(_CUDA_GPUS))} only")
    if not model.hybrid:
        return ""
    if model.name not in SSM_DTYPES:
        return (f"vLLM raises a hybrid model's block to hold one mamba state, and model {model.name} is not one "
                f"whose state hybridbench knows ({', '.join(sorted(SSM_DTYPES))})")
    spec = MODELS[model.name]
    if spec.ssm_conv_elems_per_layer % engine.tp or spec.ssm_temporal_elems_per_layer % engine.tp \
            or _MAMBA2_GROUPS.get(model.name, engine.tp) % engine.tp:
        return f"model {model.name}'s mamba state does not split evenly over engine.tp={engine.tp}"
    return ""


def vllm_page(model: ModelCfg, engine: EngineCfg) -> VllmPage:
    """The block vLLM 0.32.0 serves ``model`` with under ``engine`` (``engine.page_size`` > 1 is ``--block-size``)."""
    asked = engine.page_size if engine.page_size > 1 else KERNEL_BLOCK
    if why := _unknown(model, engine):
        return VllmPage(0, why)
    if not model.hybrid:
        return VllmPage(asked, f"engine.page_size={engine.page_size}" if engine.page_size > 1 else
                        f"vLLM's default block ({KERNEL_BLOCK}: CacheConfig.DEFAULT_BLOCK_SIZE)")
    spec, tp = MODELS[model.name], engine.tp
    dtype = spec.dtype_bytes  # the model dtype: KV cache and conv state ("auto")
    kv_heads = spec.attn_kv_heads
    attn = 2 * max(1, kv_heads // tp) * (spec.attn_kv_dim // kv_heads) * dtype  # one token, one layer
    ssm = STATE_DTYPES[model.mamba_ssm_dtype or SSM_DTYPES[model.name]]
    mamba = (spec.ssm_conv_elems_per_layer * dtype + spec.ssm_temporal_elems_per_layer * ssm) // tp  # one layer
    kernel = max(KERNEL_BLOCK, asked)
    block = _ceil(kernel * _ceil(mamba, kernel * attn), KERNEL_BLOCK) * KERNEL_BLOCK
    state = f"one mamba state: {mamba} bytes a layer on each of {tp} GPUs, {attn} bytes a token"
    if block == engine.page_size:
        return VllmPage(block, f"engine.page_size={block}, whose attention page holds {state}")
    return VllmPage(block, f"raised by vLLM until one attention page holds {state}")


def planned_block(cfg: RunCfg) -> int:
    """The block a run's plan computed for its vLLM servers (0: sized by vLLM at start-up), recorded per arm beside
    the block each server reports (``served_page``) so a run that served another is marked (results/served_block.py)."""
    return vllm_page(cfg.model, cfg.engine).tokens


def refuse_replaced_page(model: ModelCfg, engine: EngineCfg) -> None:
    """ConfigError for an ``engine.page_size`` vLLM would not serve: the plan, the record and every hit granularity
    built on the key would then name a page that never runs."""
    asked = engine.page_size
    if asked <= 1:
        return
    page = vllm_page(model, engine)
    if page.tokens == asked:
        return
    if not page.tokens:
        raise ConfigError(f"engine.page_size={asked}: {page.why}, so the block vLLM runs cannot be planned; leave "
                          "engine.page_size=1 (vLLM's own block, which it reports at start-up)")
    own = vllm_page(model, EngineCfg(gpu=engine.gpu, tp=engine.tp, page_size=1)).tokens
    raise ConfigError(f"engine.page_size={asked}: vLLM 0.32.0 would serve model {model.name} on {engine.tp} x "
                      f"{engine.gpu} with {page.tokens}-token blocks, not {asked} ({page.why}); set "
                      f"engine.page_size=1 (vLLM's own block, {own}) or a multiple of {KERNEL_BLOCK} of at least {own}")
