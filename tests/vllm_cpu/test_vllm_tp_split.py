"""engine.tp against vLLM 0.32.0's own start-up check (hybridbench/engines/tp_split.py): each real model's config.json
(real_configs.py) resolved as ``vllm serve --tensor-parallel-size N`` does before it loads a weight
(``EngineArgs.create_engine_config``, whose ``ModelConfig.verify_with_parallel_config`` refuses attention heads TP does
not divide: vllm/config/model.py:1546): where vLLM refuses, the plan refuses for the attention heads; where vLLM
resolves, the plan refuses only for a layer vLLM checks later, when it builds it (the KV, gated-delta and Mamba2
asserts the module docstring of tp_split.py cites), never for the attention heads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import vllm_run
from real_configs import REAL_CONFIGS, write_real_model
from test_vllm_config_resolution import resolved
from vllm_run import LLAMA, needs

from hybridbench.engines.tp_split import split_refusal
from hybridbench.preview.compose import compose_run

pytestmark = [pytest.mark.vllm, pytest.mark.slow, needs(LLAMA)]
vllm_env_required = vllm_run.vllm_env_required  # the fixture needs() names: found in this namespace

TPS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64)
REFUSED = "must be divisible by tensor parallel size"


def test_vllm_refuses_the_attention_heads_the_plan_refuses(tmp_path: Path) -> None:
    real = {name: write_real_model(name, tmp_path / name, LLAMA) for name in REAL_CONFIGS}
    cases = [(name, tp) for name in REAL_CONFIGS for tp in TPS]
    replies = resolved(*([str(real[name]), "--tensor-parallel-size", str(tp)] for name, tp in cases))
    for (name, tp), reply in zip(cases, replies, strict=True):
        cfg = compose_run([f"model={name}", "engine=vllm"]).cfg
        why = split_refusal(dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, tp=tp)))
        assert (REFUSED in reply["error"]) == ("(model.attention_heads" in why), (name, tp, why, reply["error"])
        assert REFUSED in reply["error"] or reply["error"] == "", (name, tp, reply["error"])  # no other refusal
    assert any(REFUSED in r["error"] for r in replies) and any(r["error"] == "" for r in replies)
