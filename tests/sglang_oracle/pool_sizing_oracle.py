"""SGLang 0.5.23's own GPU pool sizing (KV tokens, state slots, bytes), run on CPU with stand-in inputs.

Runs INSIDE the SGLang 0.5.23 venv built by ``build_env.sh``, never in the repo's environment:

    ~/.cache/hybridbench/sglang-0.5.23/bin/python tests/sglang_oracle/pool_sizing_oracle.py < cases.json

stdin: a JSON list of cases ``{model, tp, fraction, ssm_dtype, page_size, hbm_bytes, weight_bytes}``: a model
named as in ``reference_impl/models.py``, ``--tp-size``, ``--mem-fraction-static``, ``--mamba-ssm-dtype``
(``"default"``: the model's own), ``--page-size``, one GPU's memory and the whole model's weight bytes.
stdout: one JSON line ``{"version", "results"}``, a result per case in their order: ``mamba_cache_per_req``
(one state slot on one rank), ``cell_size`` (KV bytes of one token on one rank), ``num_kv_heads_per_rank``,
``max_mamba_cache_size`` (state slots), ``max_total_num_tokens`` (KV tokens), or ``error`` (SGLang's refusal:
the model does not fit). Everything SGLang prints goes to stderr (fd 1 is re-pointed at fd 2 and the reply uses
a private duplicate of the original stdout, as in ``sglang_driver.py``).

SGLang's functions called, file:line in 0.5.23's ``sglang/srt``:

- the HF config classes ``Qwen3NextConfig`` (configs/qwen3_next.py:40), ``Qwen3_5Config`` / ``Qwen3_5MoeConfig``
  (configs/qwen3_5.py:37, 130) and ``NemotronHConfig`` (configs/nemotron_h.py:44), built from the public
  config.json values recorded in ``reference_impl/models.py``'s comments;
- ``<config>.mamba2_cache_params`` (configs/qwen3_next.py:288, configs/nemotron_h.py:425) and its
  ``mamba_cache_per_req`` (configs/mamba_utils.py:116): the bytes of one state slot on one rank;
- ``mambaish_config`` / ``hybrid_gdn_config`` / ``hybrid_kda_config`` (configs/hybrid_arch.py:145, 55, 136),
  as ``KVCacheConfigurator.__init__`` sets them;
- ``ModelConfig.get_num_kv_heads`` (configs/model_config.py:1700): KV heads a rank holds;
- ``create_memory_pool_configurator`` (model_executor/pool_configurator.py:1715), which must pick
  ``DefaultPoolConfigurator``, and its ``_compute_cell_size`` (pool_configurator.py:340), read as ``_cell_size``
  (set at :239);
- ``KVCacheConfigurator._profile_available_bytes`` (mem_cache/kv_cache_configurator.py:2990): the budget after
  the static fraction's slack, which calls ``_handle_max_mamba_cache`` (:3229; the states' share
  ``r / (1 + r)``, ``K = (budget - slot) // slot`` slots, ``K + 1`` charged) and refuses a model that does not
  fit (:3050 ValueError, :3393 RuntimeError);
- ``KVCacheConfigurator.config_from_budget`` (:3192) -> ``DefaultPoolConfigurator.calculate_pool_sizes``
  (pool_configurator.py:637): KV tokens, floored to whole pages.

Parallel widths (``tp_size``, ``attn_tp_size``, ``moe_tp_size``) are set with ``get_parallel().override``, the
SSM dtype with ``envs.SGLANG_MAMBA_SSM_DTYPE.override``, the fraction and page size with
``get_context().override``, on a real ``ServerArgs`` published by ``set_global_server_args_for_scheduler``.

Stand-ins, and why:

- ``ModelConfig`` and ``KVCacheConfigurator`` are made with ``__new__`` and given only the attributes the sizing
  path reads: their ``__init__`` wants a checkpoint on disk and a model runner on a GPU. Their methods are
  SGLang's own. No speculative decoding, no pipeline or data parallelism, bf16 KV, no MLA, no SWA.
- ``kv_cache_configurator.get_available_gpu_memory`` (imported at :121, called at :3000) is patched to a
  hand-fed per-rank figure: there is no GPU here, and the figure is the one the simulator assumes, the GPU's
  memory less this rank's share of the weights (``hbm - weights / tp``); ``pre_model_load_memory`` is the
  GPU's memory (what a rank measures before loading).
- ``configs.qwen3_next._is_cpu`` is forced False: on a CPU host ``mamba2_cache_params`` (qwen3_next.py:290-292)
  pads the linear-attention heads to a multiple of TP for SGLang's CPU kernels
  (``adjust_tp_num_heads_if_necessary``, configs/update_config.py:95); the run being modelled is on GPUs,
  which do not pad.
- ``cuda_graph_config`` is a stand-in with ``prefill.full_prefill_max_req`` and ``prefill.backend`` None: the
  real one is resolved only at a GPU launch, and ``_profile_available_bytes`` reads it (:3012-3015) only to
  decide the PD-prefill exemption from the Mamba slack, inert without disaggregation.
- ``gc.freeze()`` after the imports: ``_profile_available_bytes`` calls ``gc.collect()`` (:2999, to free weight
  loading temporaries on a GPU); with SGLang's import graph tracked that is ~0.3 s a case, frozen ~0 s.
  Nothing is sized differently.

No SGLang code is copied here and no sizing rule is re-implemented: every number in the reply is SGLang's.
"""

from __future__ import annotations

import gc
import importlib.metadata
import json
import os
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any

warnings.filterwarnings("ignore")
os.environ.pop("SGLANG_USE_CPU_ENGINE", None)  # breaks the import on CPU (docs/concepts/reference-cache.md)

Case = dict[str, Any]
GIB = 1 << 30
SG: dict[str, Any] = {}  # SGLang's modules, classes and functions, imported after fd 1 is re-pointed (see main)


def _import_sglang() -> None:
    import torch
    from sglang.srt.configs import qwen3_next
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.configs.nemotron_h import NemotronHConfig
    from sglang.srt.configs.qwen3_5 import Qwen3_5Config, Qwen3_5MoeConfig
    from sglang.srt.configs.qwen3_next import Qwen3NextConfig
    from sglang.srt.environ import envs
    from sglang.srt.mem_cache import kv_cache_configurator
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import SpecAuxHiddenStateConfig
    from sglang.srt.model_executor.pool_configurator import DefaultPoolConfigurator, create_memory_pool_configurator
    from sglang.srt.runtime_context import get_context, get_parallel, get_schedule
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    SG.update(
        torch=torch, qwen3_next=qwen3_next, ModelConfig=ModelConfig, NemotronH=NemotronHConfig,
        Qwen3_5=Qwen3_5Config, Qwen3_5Moe=Qwen3_5MoeConfig, Qwen3Next=Qwen3NextConfig, envs=envs,
        kvc=kv_cache_configurator, SpecAux=SpecAuxHiddenStateConfig, DefaultPool=DefaultPoolConfigurator,
        pool_configurator=create_memory_pool_configurator, get_context=get_context, get_parallel=get_parallel,
        get_schedule=get_schedule, ServerArgs=ServerArgs, set_args=set_global_server_args_for_scheduler,
        NONE=SpeculativeAlgorithm.NONE,
    )


# ---------------------------------------------------------------- HF configs (public config.json values)
def _qwen3_next_80b_a3b() -> Any:
    return SG["Qwen3Next"](
        hidden_size=2048, num_hidden_layers=48, full_attention_interval=4, num_attention_heads=16,
        num_key_value_heads=2, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=32,
        linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4, num_experts=512,
        num_experts_per_tok=10, moe_intermediate_size=512, shared_expert_intermediate_size=512,
        decoder_sparse_step=1, vocab_size=151936, torch_dtype="bfloat16")


def _qwen3_5(moe: bool, **text: Any) -> Any:
    text.update(full_attention_interval=4, head_dim=256, linear_num_key_heads=16, linear_key_head_dim=128,
                linear_value_head_dim=128, linear_conv_kernel_dim=4, vocab_size=248320, attn_output_gate=True,
                mamba_ssm_dtype="float32", torch_dtype="bfloat16")
    text["layer_types"] = (["linear_attention"] * 3 + ["full_attention"]) * (text["num_hidden_layers"] // 4)
    return SG["Qwen3_5Moe" if moe else "Qwen3_5"](text_config=text)


def _nemotron_h_8b() -> Any:
    return SG["NemotronH"](
        hidden_size=4096, num_hidden_layers=52,
        hybrid_override_pattern="M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
        num_attention_heads=32, num_key_value_heads=8, attention_head_dim=128, head_dim=128,
        intermediate_size=21504, mamba_num_heads=128, mamba_head_dim=64, ssm_state_size=128, n_groups=8,
        conv_kernel=4, expand=2, chunk_size=128, vocab_size=131072, torch_dtype="bfloat16")


HF_CONFIGS: dict[str, Callable[[], Any]] = {
    "qwen3-next-80b-a3b": _qwen3_next_80b_a3b,
    "qwen3.5-9b": lambda: _qwen3_5(False, hidden_size=4096, num_hidden_layers=32, num_attention_heads=16,
                                   num_key_value_heads=4, linear_num_value_heads=32, intermediate_size=12288),
    "qwen3.5-122b-a10b": lambda: _qwen3_5(True, hidden_size=3072, num_hidden_layers=48, num_attention_heads=32,
                                          num_key_value_heads=2, linear_num_value_heads=64, num_experts=256,
                                          num_experts_per_tok=8, moe_intermediate_size=1024,
                                          shared_expert_intermediate_size=1024),
    "nemotron-h-8b": _nemotron_h_8b,
}


# ---------------------------------------------------------------- stand-ins
def model_config(hf_config: Any) -> Any:
    """A ``ModelConfig`` without a checkpoint: the attributes the sizing path reads; its methods SGLang's."""
    mc = SG["ModelConfig"].__new__(SG["ModelConfig"])
    text = hf_config.get_text_config()
    mc.hf_config, mc.hf_text_config = hf_config, text
    mc.is_draft_model, mc.is_multimodal, mc.quantization = False, False, None
    mc.head_dim = mc.v_head_dim = text.head_dim
    mc.context_len = 262144
    mc.num_hidden_layers = text.num_hidden_layers
    mc.linear_attn_registry_result = None
    return mc


def kv_cache_configurator(mc: Any, page_size: int) -> Any:
    """A ``KVCacheConfigurator`` without a model runner, its attributes as ``__init__`` sets them for a bf16,
    TP-only, non-speculative run; the hybrid-config lookups are SGLang's functions."""
    kvc_mod, torch = SG["kvc"], SG["torch"]
    k = kvc_mod.KVCacheConfigurator.__new__(kvc_mod.KVCacheConfigurator)
    k.model_config, k.device, k.gpu_id = mc, "cuda", 0
    k.attn_dp_size, k.pp_size, k.pp_group = 1, 1, None
    k.spec_algorithm = SG["NONE"]
    k.is_draft_worker, k.post_capture_kv_active = False, False
    k.extra_mamba_cache_bytes_per_req = 0
    k.kv_cache_dtype, k.kv_cache_dtype_str, k.model_dtype = torch.bfloat16, "auto", torch.bfloat16
    k.page_size, k.use_mla_backend, k.is_hybrid_swa = page_size, False, False
    k.server_args = SG["get_context"]().server_args
    k.layer_info = types.SimpleNamespace(start_layer=0, end_layer=mc.num_hidden_layers,
                                         num_effective_layers=mc.num_hidden_layers)
    k.mambaish_config = kvc_mod.mambaish_config(mc)
    k.hybrid_gdn_config = kvc_mod.hybrid_gdn_config(mc)
    k.hybrid_kda_config = kvc_mod.hybrid_kda_config(mc)
    k.kv_shard_spec, k.kv_shard_rank, k.kv_shard_size, k.kv_shard_group = None, None, 1, None
    k.draft_parallel_layout = None
    k.spec_aux_config = SG["SpecAux"]()
    return k


# ---------------------------------------------------------------- one case
def size_pools(case: Case) -> dict[str, Any]:
    """One case through SGLang's sizing, under the case's parallel widths and SSM dtype."""
    tp = case["tp"]
    dtype = None if case["ssm_dtype"] == "default" else case["ssm_dtype"]
    parallel = SG["get_parallel"]().override(tp_size=tp, attn_tp_size=tp, moe_tp_size=tp,
                                             world_group=types.SimpleNamespace(cpu_group=None))
    with parallel, SG["envs"].SGLANG_MAMBA_SSM_DTYPE.override(dtype):
        return _size_pools(case)


def _size_pools(case: Case) -> dict[str, Any]:
    free_gib = (case["hbm_bytes"] - case["weight_bytes"] / case["tp"]) / GIB
    SG["kvc"].get_available_gpu_memory = lambda *_a, **_k: free_gib
    SG["get_context"]().override("pool_sizing_oracle", mem_fraction_static=case["fraction"],
                                 max_mamba_cache_size=None, page_size=case["page_size"])
    mc = model_config(HF_CONFIGS[case["model"]]())
    k = kv_cache_configurator(mc, case["page_size"])
    pools = SG["pool_configurator"](k)
    if type(pools) is not SG["DefaultPool"]:
        raise TypeError(f"{case['model']}: SGLang chose {type(pools).__name__}, not DefaultPoolConfigurator")
    out: dict[str, Any] = {
        "mamba_cache_per_req": k.mambaish_config.mamba2_cache_params.mamba_cache_per_req,
        "cell_size": pools._cell_size,
        "num_kv_heads_per_rank": mc.get_num_kv_heads(case["tp"]),
    }
    try:
        budget = k._profile_available_bytes(pre_model_load_memory=case["hbm_bytes"] / GIB)
        out["max_mamba_cache_size"] = SG["get_schedule"]().max_mamba_cache_size
        out["max_total_num_tokens"] = k.config_from_budget(budget).max_total_num_tokens
    except (ValueError, RuntimeError) as e:
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    return out


def main() -> None:
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # SGLang's own prints land on stderr, never in the reply
    sys.stdout = sys.stderr
    _import_sglang()
    SG["qwen3_next"]._is_cpu = False  # a GPU run: no CPU-kernel head padding (see the module docstring)
    SG["set_args"](SG["ServerArgs"](model_path="dummy", page_size=1))
    SG["get_context"]().override("pool_sizing_oracle", cuda_graph_config=types.SimpleNamespace(
        prefill=types.SimpleNamespace(full_prefill_max_req=None, backend=None)))
    gc.collect()
    gc.freeze()
    cases: list[Case] = json.load(sys.stdin)
    reply = {"version": importlib.metadata.version("sglang"), "results": [size_pools(c) for c in cases]}
    out.write(json.dumps(reply) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
